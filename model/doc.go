// Package model is the one in-memory description of a checkpoint: its
// architecture facts (Config: layer kinds, heads, context, EOS set), its
// tokenizer and chat template, and its weights, whichever format it came
// from (GGUF file, or an HF/MLX directory of config.json and safetensors).
//
// Loading happens in two halves. Parsing (Open) is pure Go and produces host
// tensors: dense little-endian data, or MLX affine-quantized triples where
// the source quantization maps exactly (GGUF Q4_0, Q4_1, Q8_0 with binary16
// group parameters; Q4_K, Q5_K, Q5_0 with float32 ones; MLX 4/8-bit).
// Upload copies them into MLX arrays and must run on the MLX thread.
// Other GGUF quantizations are dequantized on the host; nothing is
// re-quantized behind the user's back.
//
// Invariants: every tensor is stored under its HF name
// (model.layers.N.self_attn.q_proj.weight, ...) in row-major [out, in]
// layout, whatever the source; an architecture without an adapter is an
// ErrUnsupportedArch, never a guess. One exception, on the device side
// only: an upload to a GPU (and a dummy model's build there) joins modules
// that read the same input into one module under a name of its own
// (FuseProjections: a Llama layer's self_attn.qkv_proj and mlp.gate_up_proj,
// a gpt-oss layer's self_attn.qkv_proj with its bias and, where packed, its
// scales and biases; Weight.Parts giving each part's rows), which the
// family's code takes where present.
// Some architectures are read from config.json only, to be described
// (DescribeHF: layer kinds, weight estimate): gpt-oss and Gemma 4.
// ReadHFConfig returns their Config; Open refuses their weights.
//
// What model does per architecture once a config is read (tensor check,
// read and adapt, extra EOS tokens, dummy manifest, tensor-parallel split)
// is one table, checkpointArchs (arch.go), which Architectures lists;
// package family, the registry of architectures, keeps its own list equal
// to it.
//
// model imports mlx, gguf, safetensors, tokenizer and jinja; it never
// imports an engine, server or family package.
package model
