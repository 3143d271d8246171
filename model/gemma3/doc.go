// Package gemma3 is the Gemma 3 text family forward pass on MLX: embeddings
// scaled by sqrt(hidden), RMSNorm before and after both attention and the
// feed-forward block, per-head RMSNorm of queries and keys, RoPE with one
// base for global layers and another for sliding-window layers, grouped-
// query attention, and a GELU (tanh approximation) gated feed-forward.
//
// Forward follows the llama package's batching: rows that decode one token
// share every matmul; attention runs per row over that row's cache, so a
// row's result does not depend on its batch; prefill rows run alone.
//
// Sliding-window attention: a query at position p sees the keys at
// positions p-Window+1 .. p, itself included (llama.cpp masks a key at k
// when p-k >= Window; HF transformers keeps k > p-Window: the same set).
// A sliding layer's cache is a ring of at most Window tokens: position p
// lives in slot p mod Window, so decoding overwrites exactly the key that
// leaves every later query's window. A prefill chunk attends over the
// ring's previous contents followed by its own keys under an explicit
// window mask, then keeps its last Window keys. Attention is invariant to
// the order of keys, so the rotation of the ring changes no result beyond
// float summation order.
//
// Invariants:
//   - A full-attention layer holds every token; its buffer grows in steps of
//     cacheStep tokens, so it holds ceil(Len/cacheStep)*cacheStep slots.
//   - A sliding layer holds min(Len, Window) tokens in
//     min(ceil(Len/cacheStep)*cacheStep, Window) slots: once Len reaches the
//     window its size is constant and equals what the KV-byte ledger charges
//     for the layer (engine.KVLayout.SequenceBytes).
//   - A Cache only changes through Forward; its arrays are owned by the Cache
//     and released by Free; all calls run on the MLX thread.
//
// With Config.ReferenceNumerics the GELU evaluates as llama.cpp's CPU
// backend does (through a binary16 table: input and output rounded to
// binary16, identity at or above 10, zero at or below -10), so logits can be
// compared with llama.cpp; otherwise it is the exact tanh approximation HF
// transformers uses (gelu_pytorch_tanh).
package gemma3
