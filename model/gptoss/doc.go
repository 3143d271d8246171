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
// Forward runs one step of a kvpool.Batch: every row's new tokens (prefill
// chunks and decode tokens alike) flattened into one [1, N, hidden]
// sequence that shares every matmul and the expert routing; RoPE rotates
// each token at its own position, and b.Attend stores the keys and values
// in the shared pool and attends each token over its own row's keys, so a
// row's result does not depend on its batch. Logits are computed only at
// the batch's logit rows.
//
// Sliding-window attention: a query at position p sees the keys at
// positions p-Window+1 .. p (mlx-lm's and HF transformers' window). The
// window is the pool's: it applies each layer's Window from Config.Kinds
// (model.PoolLayers), and a sliding layer's sequence keeps only its newest
// kvpool.RingBlocks(Window) blocks between steps (two for gpt-oss's 128),
// while a full-attention layer holds one block per started
// kvpool.BlockTokens tokens. The sinks go to b.Attend in the activations'
// dtype, as mlx-lm passes them.
//
// Invariants:
//   - The Model holds no per-sequence state: keys and values live in the
//     pool, whose sequences the caller owns and frees.
//   - The Model owns only its YaRN period array; the weights belong to the
//     caller, including the packed matrices New joins to their scales.
//   - All calls run on the MLX thread.
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
// gptoss imports kvpool, mlx and model only.
package gptoss
