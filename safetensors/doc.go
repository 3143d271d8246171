// Package safetensors owns reading and writing the safetensors tensor file
// format, and resolving a model directory's weight files (a single file, an
// index of shards, or a set of files) into one name space.
//
// Layout: an 8-byte little-endian header length N, N bytes of UTF-8 JSON
// mapping tensor names to {dtype, shape, data_offsets} plus an optional
// "__metadata__" map of strings, then the data section.
//
// A File is validated completely before it is returned, so every File
// satisfies these invariants:
//
//   - the header is at most 100,000,000 bytes, valid UTF-8, a single JSON
//     object without duplicate or unknown keys;
//   - every tensor has a known dtype, non-negative dims whose product does
//     not overflow, and exactly dtype-size × elements bytes of data;
//   - the tensors' data ranges, ordered by offset, tile the data section
//     from its first byte to the end of the file with no gap or overlap.
//
// These are the rules of the reference implementation, so a file accepted
// here is accepted there and vice versa. Write emits a canonical form:
// metadata first, tensors sorted by name in both header and data, compact
// JSON padded with spaces so the data section starts 8-byte aligned.
//
// Data returned by File.Data aliases the file's read-only mapping and must
// not be used after Close.
package safetensors
