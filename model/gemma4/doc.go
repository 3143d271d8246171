// Package gemma4 is the Gemma 4 text decoder's forward pass on MLX, for HF
// checkpoints of model_type gemma4 (the text_config of the multimodal
// model) or gemma4_text, and the multimodal model's vision tower
// (vision.go; the audio tower is not read).
//
// Architecture, as HF transformers and mlx-lm define it:
//   - Embeddings scaled by sqrt(hidden); every RMSNorm multiplies by its
//     weight w itself (Gemma 3 used 1+w).
//   - Each layer: pre- and post-norm around attention and around the
//     feed-forward block, then a learned per-layer scalar multiplies the
//     whole residual stream.
//   - Attention: per-head RMSNorm of queries and keys, RMSNorm without
//     scale of values, and no further scaling of query-key products (scale
//     1). Sliding-window layers and full-attention (global) layers
//     interleave (layer_types); global layers may have a larger head and,
//     when keys double as values (attention_k_eq_v), their own KV head
//     count and no value projection: the values are then the unrotated,
//     scale-free-normalized key projection.
//   - RoPE: sliding layers rotate the whole head with their own base;
//     global layers use proportional RoPE, which rotates only the first
//     fraction of the pairs, with periods base^(2i/headDim) over the whole
//     head size, and leaves the other pairs as they are.
//   - Feed-forward: a GELU (tanh approximation) gated MLP; with the
//     mixture-of-experts block, a router (RMSNorm without scale of the
//     residual, times a learned scale and 1/sqrt(hidden), projected to
//     expert scores; softmax over the top k; times a per-expert scale)
//     picks k experts whose weighted outputs, normed, are added to the
//     normed dense MLP output before the post-feed-forward norm.
//   - Per-layer inputs (the small models): a second embedding table gives
//     every token a vector per layer, mixed with a normalized projection of
//     the token's embedding; each layer gates it with its residual stream
//     and adds it back through a projection and a norm.
//   - KV sharing (the small models): the last num_kv_shared_layers layers
//     compute queries only and attend over the keys and values of the last
//     earlier layer of their attention type, as that layer stored them in
//     the same step.
//   - Final norm, output head (tied to the embedding unless lm_head is
//     present), logit softcapping c*tanh(x/c).
//
// Forward runs one kvpool.Batch: every row's new tokens (prefill chunks and
// decode tokens alike) flattened into one sequence of N tokens, [1, N,
// hidden], that shares every matmul, the per-layer inputs and the expert
// block included; each token gets RoPE at its own position, and attention
// (kvpool.Batch.Attend) runs over that token's own row's keys, so a row's
// result does not depend on which other rows share the step beyond float
// summation order. Logits are computed only at the batch's sample rows.
// The expert block reads the router's choices back to the host once per
// layer and runs each chosen expert once over the step's tokens that chose
// it.
//
// Keys and values live in the model's KV pool, laid out from Config.Kinds
// by model.PoolLayers: per layer its own KV head count and head size, its
// window, and for a KV-sharing layer the layer it reads. Such a layer
// computes no key or value projection; Attend reads what its source layer
// stored, in this step and before, and the layer holds no storage.
// Sliding-window attention: a query at position p sees the keys at
// positions p-Window+1 .. p. The pool masks each query to its layer's
// window and lets a sliding layer keep only its newest
// kvpool.RingBlocks(Window) blocks between steps, while a global layer
// holds every token in whole blocks of kvpool.BlockTokens; that is what
// the KV-byte ledger charges (engine.KVLayout.SequenceBytes).
//
// # Images
//
// The vision tower (Vision) follows HF transformers' Gemma4VisionModel:
// an image is resized, aspect kept, to the largest multiple of
// pooling x patch pixels per side within a soft-token budget (70, 140,
// 280, 560 or 1120 tokens, the processor config's), with PIL's bicubic
// arithmetic; its patches are projected and given learned column and row
// embeddings; bidirectional encoder layers (RMS-normed queries and keys,
// 2-D RoPE: the first half of each head rotated by the patch's column, the
// second by its row; a gated tanh-GELU MLP; linear layers optionally
// clipped) run over them; pooling averages 3x3 blocks, scales by
// sqrt(hidden) and optionally standardizes; the embedder (RMSNorm without
// scale, a projection) gives the soft tokens. The prompt holds
// <|image>, Tokens(w, h) placeholders, <image|> per image. A video's
// sampled frames go through the same tower, each preprocessed as an image
// under the video budget (Frames, 70 tokens by default); the prompt holds,
// per frame, its FrameStamp, a space, <|image>, its video placeholders,
// <image|>, the frames joined by spaces.
//
// Forward reads soft tokens as transformers' Gemma4Model does: every
// multimodal placeholder is looked up as the pad token in both embedding
// tables, the soft tokens replace the scaled main embeddings at their
// positions unscaled (kvpool.Batch.Overlay), and the per-layer inputs
// project those embeddings, soft tokens included, beside the pad token's
// per-layer row. With use_bidirectional_attention "vision" an image's
// placeholders attend to each other in the sliding-window layers only
// (window AND (causal OR same image)); the full-attention layers stay
// causal (kvpool.Batch.AttendCausal); without it every layer is causal.
// mlx-vlm 0.7.10 opens the image blocks in the full-attention layers too.
//
// This package imports only mlx, media, kvpool, safetensors and model; it
// knows nothing of the engine.
package gemma4
