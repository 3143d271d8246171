package llama

import (
	"testing"

	"github.com/goprovider/provider/mlx"
	"github.com/goprovider/provider/model"
)

// A step queued every few layers (mlx.Frame.DispatchLayer, on by default
// on CUDA) must give the logits of a step evaluated at its end, float for
// float: rows prefilling together, then decoding, with the pool updated
// in place between the queued parts. Forced on the CPU here, where MLX
// runs the queued parts on its own thread while this one builds the rest.
func TestDispatchedLayersSameLogits(t *testing.T) {
	l := loadWith(t, smolPath, func(c *model.Config) { c.ReferenceNumerics, c.Int8Activations = false, false })
	prompts := encodePrompts(l, "Once upon a time", "The cat sat on", "Hi")
	run := func(every int) [][]float32 {
		defer mlx.SetDispatchLayers(mlx.SetDispatchLayers(every))
		return runSteps(t, l, prompts, 5, fixedTokens(len(prompts)))
	}
	want := run(0)
	// Every layer, a group that does not divide the layers, and one group
	// of all of them.
	for _, every := range []int{1, 7, l.m.Config.Layers} {
		got := run(every)
		for s := range want {
			for i := range want[s] {
				if got[s][i] != want[s][i] {
					t.Fatalf("every %d layers, step %d: logit %d is %v, evaluated at the end %v", every, s, i, got[s][i], want[s][i])
				}
			}
		}
	}
}
