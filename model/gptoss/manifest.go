package gptoss

import (
	"strings"

	"github.com/goprovider/provider/model"
)

// TensorManifest lists every tensor a gpt-oss config needs, by the name New
// looks it up under in the split layout mlx-lm saves, with its logical
// shape ([experts, out, in] for expert stacks); nil for a config that is
// not gpt-oss. With PublishedFormat it is enough to build a true-size model
// from a config alone.
func TensorManifest(cfg model.Config) []model.TensorSpec { return model.GPTOSSTensors(cfg) }

// PublishedFormat is how the published gpt-oss checkpoints store a tensor
// of the manifest: the expert matrices in MXFP4 (4-bit values in groups of
// 32 sharing an 8-bit exponent), everything else unquantized in the
// checkpoint dtype (false).
func PublishedFormat(name string) (model.QuantLevel, bool) {
	if strings.Contains(name, ".mlp.experts.") && strings.HasSuffix(name, "_proj.weight") {
		return model.QuantLevel{Mode: "mxfp4", Bits: 4, GroupSize: 32}, true
	}
	return model.QuantLevel{}, false
}
