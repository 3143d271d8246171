// Package gguf owns reading GGUF model files (format versions 2 and 3) and
// decoding the llama.cpp (ggml) tensor encodings they carry.
//
// A File is parsed and fully validated up front, so every File handed out
// satisfies these invariants:
//
//   - the header, every metadata value and every tensor description were read
//     without running past the end of the input; no count or length taken from
//     the file is trusted before it is checked against the bytes that remain,
//     so hostile input cannot force large allocations or panics;
//   - metadata keys and tensor names are unique;
//   - every tensor has at most four dimensions, a known type, an element count
//     that fits in int64 with a row length (Dims[0]) that is a whole number of
//     the type's blocks, an offset aligned to the file's alignment, and a data
//     range that lies inside the input and overlaps no other tensor.
//
// Metadata is copied out of the input, so it stays valid after Close;
// numeric arrays are kept at their encoded width and decoded on access, so
// parsed metadata never needs much more memory than the header it came
// from. Tensor data returned by TensorData aliases the mapping and must not
// be used after Close.
//
// Dims use ggml order: Dims[0] is the fastest-varying dimension (the row
// length). A tensor with Dims [cols, rows] is therefore a row-major
// [rows, cols] matrix.
//
// Dequantize reproduces ggml's reference dequantization bit for bit; the
// arithmetic is written so the compiler cannot fuse multiply-adds, because a
// fused operation rounds once instead of twice and would change results.
// ToAffine re-expresses the block formats that have an exact equivalent in
// MLX's affine quantization with binary16 group parameters (Q4_0, Q4_1,
// Q8_0) without any loss; ToAffineF32 does the same with float32 group
// parameters for Q4_K, Q5_K and Q5_0 (a K-quant sub-block scale d*sc needs
// 17 significant bits).
package gguf
