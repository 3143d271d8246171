// Package gptoss is the gpt-oss forward pass on MLX: RMSNorm before
// attention and before the MLP; grouped-query attention with biases on
// every projection and a learned per-head sink logit that joins the
// softmax's denominator (it takes probability mass without contributing a
// value); YaRN-scaled RoPE, whose attention factor scales queries and keys
// before they rotate; layers alternating a sliding window and full
// attention; and a mixture-of-experts MLP: a biased router picks each
// token's top experts, their router scores are softmaxed among themselves,
// and each expert is a clamped SwiGLU with biases, (clip(up)+1) *
// g*sigmoid(1.702*g) for g = min(gate, 7).
//
// Expert weights are used as the checkpoint stores them, never
// dequantized or transposed into a copy: MXFP4 (or other MLX-quantized)
// stacks through MLX's gather_qmm, dense ones through gather_mm, in any of
// the three layouts model.GPTOSSExpertLayout names (mlx-lm's split
// gate/up/down, the published HF MXFP4 blocks with gate and up rows
// interleaved, HF transformers' dense [experts, in, out] stacks). Decode
// steps route each token's rows straight to its experts; longer runs sort
// the (token, expert) pairs by expert first, so each expert's rows are
// multiplied together.
//
// Forward follows the other families' batching: rows that decode one
// token share every matmul; attention runs per row over that row's cache,
// so a row's result does not depend on its batch; prefill rows run alone.
//
// Sliding-window attention: a query at position p sees the keys at
// positions p-Window+1 .. p (mlx-lm's and HF transformers' window). A
// sliding layer's cache is a ring of at most Window slots (see
// kv.attend).
//
// Invariants:
//   - A full-attention layer holds every token in
//     ceil(Len/cacheStep)*cacheStep slots; a sliding layer holds
//     min(Len, Window) tokens in min(ceil(Len/cacheStep)*cacheStep, Window)
//     slots, so once Len reaches the window its size is constant and equals
//     what the KV-byte ledger charges for it.
//   - A Cache only changes through Forward; its arrays are owned by the
//     Cache and released by Free; all calls run on the MLX thread.
//   - The Model owns only its YaRN period array; the weights belong to the
//     caller, including the packed matrices New joins to their scales.
//
// RoPE follows the checkpoint's config: with "truncate": false (as the
// published gpt-oss configs say) the YaRN ramp keeps its fractional ends,
// as HF transformers reads that key; mlx-lm rounds them regardless, so on
// those configs its rotations differ slightly from ours.
//
// MLX's CPU backend multiplies gather_mm operands in float32 only, so on
// the CPU a checkpoint with dense (unquantized) experts runs with float32
// activations (Config.ActDType); with bfloat16 ones its first step fails
// with MLX's error. Packed experts (gather_qmm) run in either.
//
// gptoss imports mlx and model only.
package gptoss
