// Package sample picks the next token from a row of logits on the host:
// greedy (temperature 0, the default), or seeded sampling with temperature,
// top-k and top-p. A Sampler with a seed reproduces the same choices for the
// same logits, whatever else runs beside it.
//
// It imports nothing of the project and knows nothing of MLX.
package sample
