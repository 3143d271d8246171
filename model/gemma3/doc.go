// Package gemma3 is the Gemma 3 text family forward pass on MLX: embeddings
// scaled by sqrt(hidden), RMSNorm before and after both attention and the
// feed-forward block, per-head RMSNorm of queries and keys, RoPE with one
// base for global layers and another for sliding-window layers, grouped-
// query attention, and a GELU (tanh approximation) gated feed-forward.
//
// Forward runs one kvpool.Batch: every row's new tokens (prefill chunks and
// decode tokens alike) flattened into one sequence of N tokens that shares
// every matmul; each token gets RoPE at its own position, and attention
// (kvpool.Batch.Attend) runs over that token's own row's keys, so a row's
// result does not depend on which other rows share the step beyond float
// summation order. Logits are computed only at the batch's sample rows.
//
// Sliding-window attention: a query at position p sees the keys at
// positions p-Window+1 .. p, itself included (llama.cpp masks a key at k
// when p-k >= Window; HF transformers keeps k > p-Window: the same set).
// The window is the pool's: kvpool groups the layers by window (from
// Config.Kinds through model.PoolLayers), masks each query to its layer's
// window and lets a sliding layer keep only its newest
// kvpool.RingBlocks(Window) blocks between steps, while a full-attention
// layer holds every token in whole blocks of kvpool.BlockTokens.
//
// With Config.ReferenceNumerics the GELU evaluates as llama.cpp's CPU
// backend does (through a binary16 table: input and output rounded to
// binary16, identity at or above 10, zero at or below -10), so logits can be
// compared with llama.cpp; otherwise it is the exact tanh approximation HF
// transformers uses (gelu_pytorch_tanh).
package gemma3
