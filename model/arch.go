package model

import (
	"maps"
	"slices"

	"github.com/goprovider/provider/safetensors"
)

// checkpointArch is what package model itself does differently for one
// architecture's checkpoints once its config.json is read. Package family
// is the registry of architectures; it imports model, so model cannot ask
// it, and keeps here the part of each architecture that loading, dummy
// weights and sharding need. family's tests check that Architectures
// lists exactly its registry.
type checkpointArch struct {
	// tensors is a dummy model's manifest: the tensors check requires,
	// under their HF names.
	tensors func(Config) []TensorSpec
	// check verifies a loaded checkpoint's tensors against its Config.
	check func(*Model) error
	// read reads an HF checkpoint's tensors into m, settling what of c
	// they decide; nil reads them as they are (readSafetensors).
	read func(m *Model, st *safetensors.Dir, c *Config, q *hfQuant) error
	// adapt rewrites the read HF tensors into the forms the forward pass
	// takes; nil when they are taken as read.
	adapt func(m *Model, c Config) error
	// eos adds the architecture's end-of-turn tokens to the configured
	// ones; nil adds none.
	eos func(m *Model, eos []int32) []int32
	// shard plans rank's share of a split over size into s.
	shard func(s *Sharding, c Config, tensors map[string]*Tensor, rank, size int) (*Sharding, Config, error)
}

// checkpointArchs holds every architecture whose checkpoints load, by
// Config.Arch.
var checkpointArchs = map[string]checkpointArch{
	"llama": {tensors: llamaTensors, check: checkLlamaTensors, shard: planDense},
	"gemma3": {tensors: gemma3Tensors, check: checkGemma3Tensors, eos: gemma3EOS, shard: planDense,
		adapt: func(m *Model, _ Config) error { return m.adaptGemma3HF() }},
	"gemma4": {tensors: Gemma4Tensors, check: checkGemma4Tensors, eos: gemma4EOS, shard: planGemma4,
		adapt: func(m *Model, c Config) error { m.adaptGemma4HF(c); return nil }},
	"gpt_oss": {tensors: GPTOSSTensors, check: checkGPTOSSTensors, shard: planGPTOSS,
		read: func(m *Model, st *safetensors.Dir, c *Config, q *hfQuant) error {
			return m.readGPTOSSSafetensors(st, c, q)
		}},
}

// Architectures lists, sorted, the Config.Arch values whose checkpoints
// this package loads, builds dummy weights of and shards.
func Architectures() []string { return slices.Sorted(maps.Keys(checkpointArchs)) }
