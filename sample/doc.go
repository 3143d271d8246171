// Package sample picks the next token from a row of logits on the host:
// greedy (temperature 0, the default), or seeded sampling. A Sampler with a
// seed reproduces the same choices for the same logits, whatever else runs
// beside it.
//
// # The chain
//
// A Sampler transforms a row of logits in llama.cpp's default order (its
// common_sampler chain with the samplers we implement), then draws:
//
//  1. logit_bias: each listed token's bias is added to its logit.
//  2. penalties: repetition_penalty first (HF and llama.cpp: a token seen
//     in the last RepetitionWindow tokens of the sequence, prompt
//     included, has its logit divided by the penalty when positive and
//     multiplied by it otherwise), then frequency_penalty and
//     presence_penalty (OpenAI: the logit loses count x frequency +
//     presence, count being the token's occurrences among the generated
//     tokens, the prompt excluded).
//  3. top_k: the k most likely tokens are kept.
//  4. top_p: the most likely tokens whose probabilities (softmax of the
//     logits so far, at temperature 1) first reach p are kept.
//  5. min_p: tokens less likely than min_p times the most likely one are
//     dropped.
//  6. temperature: the survivors' logits are divided by it and
//     renormalized; the token is drawn from that distribution.
//
// The filters of steps 3 to 5 run before the temperature, as in llama.cpp
// (vLLM and transformers scale first): a temperature changes how the
// survivors share the mass, never which tokens survive. Ties go to the
// lower token id at every cut. At temperature 0 (or top_k 1) the token is
// the argmax of the logits after steps 1 and 2; Greedy reports whether the
// argmax of the raw logits is the answer, so a caller may take it on the
// device.
//
// The Sampler keeps what it needs of the sequence: the prompt's last
// tokens at New and every token Next returns.
//
// It imports nothing of the project and knows nothing of MLX.
package sample
