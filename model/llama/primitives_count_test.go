package llama

import (
	"testing"

	"github.com/goprovider/provider/kvpool"
	"github.com/goprovider/provider/mlx"
	"github.com/goprovider/provider/model"
)

// TestOneRowStepPrimitives builds SmolLM2's one-row decode step in the
// GPU path's layout (fused projections, attention through MLX ops) on the
// CPU and counts its primitives: a lone token's q and k heads take one
// RoPE a layer, and its attention no transposes of the query or output
// and one view each of the pool's keys and values (on a GPU the host's
// work per primitive paces such a step). It logs every count.
func TestOneRowStepPrimitives(t *testing.T) {
	l := loadWith(t, smolPath, func(c *model.Config) { c.ReferenceNumerics, c.Int8Activations = false, false })
	cfg := l.m.Config
	l.th.Do(func() {
		if _, err := l.w.FuseProjections(l.s, "llama", cfg.Layers); err != nil {
			t.Error(err)
			return
		}
		net, err := New(cfg, l.w)
		if err != nil {
			t.Error(err)
			return
		}
		defer net.Close()
		counts, err := model.DecodeStepPrimitives(net, l.s, kvpool.Options{Ops: true}, []int32{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}, 11)
		if err != nil {
			t.Error(err)
			return
		}
		total, names := mlx.DescribePrimitives(counts)
		t.Logf("one-row step: %d primitives: %s", total, names)
		if counts["FastRoPE"] != cfg.Layers {
			t.Errorf("%d RoPE calls in a one-row step of %d layers, want one a layer", counts["FastRoPE"], cfg.Layers)
		}
		// The keys' and values' views of the pool are one primitive each,
		// not a slice, a reshape and a transpose.
		if counts["AsStrided"] != 2*cfg.Layers || counts["Transpose"] > 1 {
			t.Errorf("%d strided views and %d transposes in a one-row step of %d layers, want %d and at most 1",
				counts["AsStrided"], counts["Transpose"], cfg.Layers, 2*cfg.Layers)
		}
	})
}
