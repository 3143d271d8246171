// Package llama is the llama family forward pass on MLX: RMSNorm, RoPE
// (plain, linear-scaled, or with explicit per-pair periods as llama3
// scaling produces), grouped-query attention over a per-sequence KV cache,
// and a SwiGLU feed-forward.
//
// Forward takes several sequences at once, each with its own cache and its
// own number of new tokens. Rows that decode one token share every matmul
// in one batch; attention runs per row over that row's cache, so a row's
// result does not depend on which other rows share the step. Rows that
// prefill run as their own batch of one.
//
// With Config.ReferenceNumerics every op of a single sequence's forward pass
// follows llama.cpp's CPU backend exactly (mlx.Frame.RefLinear and the other
// Ref ops), except RoPE with explicit per-pair periods, which stays MLX's.
// Several sequences in one step are not reproduced exactly: llama.cpp lays
// them out in one shared cache.
//
// Invariants: a Cache only grows by the tokens Forward appended; its arrays
// are owned by the Cache and released by Free; all calls run on the MLX
// thread.
package llama
