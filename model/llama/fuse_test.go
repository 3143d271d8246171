package llama

import (
	"testing"

	"github.com/goprovider/provider/model"
	"github.com/goprovider/provider/tokenizer"
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
	var prompts [][]int32
	for _, s := range []string{"Once upon a time", "The cat sat on", "Hi"} {
		prompts = append(prompts, joined.m.Tokenizer.Encode(s, tokenizer.EncodeOptions{AddSpecial: true}))
	}
	// After the prompts, the same fixed token per row and step.
	fixed := func(rows int) func(int, []float32) [][]int32 {
		return func(s int, _ []float32) [][]int32 {
			next := make([][]int32, rows)
			for i := range next {
				next[i] = []int32{int32(100 + s + i)}
			}
			return next
		}
	}
	// Three rows, then one alone (a lone token rotates q's and k's heads
	// in one call).
	for _, ps := range [][][]int32{prompts, prompts[:1]} {
		a, b := runSteps(t, apart, ps, 6, fixed(len(ps))), runSteps(t, joined, ps, 6, fixed(len(ps)))
		for s := range a {
			for i := range a[s] {
				if a[s][i] != b[s][i] {
					t.Fatalf("%d rows, step %d: logit %d fused %v, apart %v", len(ps), s, i, b[s][i], a[s][i])
				}
			}
		}
	}
}
