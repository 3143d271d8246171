// Package convert owns turning a GGUF checkpoint into an HF/MLX checkpoint
// directory, so that peers which read only that format (mlx-lm, HF
// transformers) can run the very weights and vocabulary the provider serves
// from the GGUF file, and a benchmark compares engines rather than models.
//
// A converted directory holds:
//
//   - config.json: the HF llama fields, the end-of-generation ids, and,
//     when any tensor is quantized, MLX's "quantization" block (defaults
//     for the most common bits and group size, plus one entry per module
//     that differs, e.g. an 8-bit embedding beside 4-bit layers);
//   - model.safetensors: ggml Q4_0, Q4_1 and Q8_0 matrices in MLX affine
//     form (uint32 "weight", float16 "scales" and "biases", group size 32,
//     the block layout gguf.ToAffine maps exactly), F32, F16 and BF16
//     tensors in their own dtype;
//   - tokenizer.json, tokenizer_config.json and generation_config.json,
//     built from the GGUF vocabulary, with the chat template.
//
// # Invariants
//
//   - Exact or nothing: every value the directory holds dequantizes to the
//     value the GGUF file holds (q_proj and k_proj rows are moved, never
//     changed), and the written tokenizer encodes text as the GGUF one
//     does. Whatever cannot be carried over exactly (another architecture,
//     a tensor type without an exact MLX form, partial or frequency-scaled
//     RoPE, a pre-tokenizer without an HF equivalent here) fails with an
//     error wrapping ErrInexact (and, for an architecture or a tensor
//     type, model.ErrUnsupportedArch or model.ErrUnsupportedType);
//     nothing is rounded or guessed.
//   - llama.cpp stores q_proj and k_proj with the rows of each head
//     interleaved for its "traditional" RoPE; the directory gets HF's row
//     order, so HF readers use HF's RoPE and the same weights.
//   - The output directory only ever holds the files this package writes;
//     a directory with anything else in it is refused rather than mixed
//     with, since a loader reads every *.safetensors file it finds.
//
// convert reads through the gguf, model and tokenizer packages and writes
// through safetensors; it knows nothing of the engine or the server.
package convert
