package llama

import (
	"testing"

	"github.com/goprovider/provider/model"
)

// TestFusedProjectionsMatchSeparate runs SmolLM2 with its q/k/v and
// gate/up weights joined into one matrix each (model.FuseProjections, what
// an upload to a GPU does) against the same weights kept apart, on the
// CPU: a prefill of three prompts together, then decode steps, must give
// the same logits, float for float (each output of a product is its own
// sum, whatever rows the matrix has).
func TestFusedProjectionsMatchSeparate(t *testing.T) {
	plain := func(c *model.Config) { c.ReferenceNumerics, c.Int8Activations = false, false }
	apart := loadWith(t, smolPath, plain)
	joined := loadWith(t, smolPath, plain)
	cfg := joined.m.Config
	joined.th.Do(func() {
		n, err := joined.w.FuseProjections(joined.s, "llama", cfg.Layers)
		if err != nil {
			t.Error(err)
			return
		}
		if n != 2*cfg.Layers {
			t.Errorf("fused %d groups, want %d", n, 2*cfg.Layers)
		}
		if joined.w.Get("model.layers.0.self_attn.q_proj.weight") != nil {
			t.Error("q_proj still held after fusing")
		}
		joined.st.Close()
		joined.net.Close()
		if joined.net, err = New(cfg, joined.w); err != nil {
			t.Error(err)
			return
		}
		joined.st, err = model.NewStepper(joined.net, joined.s)
		if err != nil {
			t.Error(err)
		}
	})
	if t.Failed() {
		return
	}
	prompts := encodePrompts(joined, "Once upon a time", "The cat sat on", "Hi")
	// Three rows, then one alone (a lone token rotates q's and k's heads
	// in one call).
	for _, ps := range [][][]int32{prompts, prompts[:1]} {
		a, b := runSteps(t, apart, ps, 6, fixedTokens(len(ps))), runSteps(t, joined, ps, 6, fixedTokens(len(ps)))
		for s := range a {
			for i := range a[s] {
				if a[s][i] != b[s][i] {
					t.Fatalf("%d rows, step %d: logit %d fused %v, apart %v", len(ps), s, i, b[s][i], a[s][i])
				}
			}
		}
	}
}
