package gptoss

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/goprovider/provider/kvpool"
	"github.com/goprovider/provider/mlx"
	"github.com/goprovider/provider/model"
)

// fuseQKV joins the q/k/v modules of l's first layers layers
// (model.FuseProjections, what an upload to a GPU does for all of them)
// and binds the network and its stepper again.
func fuseQKV(t *testing.T, l *loaded, layers int) {
	t.Helper()
	l.th.Do(func() {
		n, err := l.w.FuseProjections(l.s, "gpt_oss", layers)
		if err != nil {
			t.Error(err)
			return
		}
		if n != layers {
			t.Errorf("fused %d groups, want %d", n, layers)
		}
		for _, name := range []string{"q_proj.weight", "k_proj.bias", "v_proj.weight"} {
			if l.w.Get("model.layers.0.self_attn."+name) != nil {
				t.Errorf("%s still held after fusing", name)
			}
		}
		if l.w.Get("model.layers.0.self_attn.qkv_proj.bias") == nil {
			t.Error("no fused q/k/v bias")
		}
		l.st.Close()
		l.net.Close()
		if l.net, err = New(l.cfg, l.w); err != nil {
			t.Error(err)
			return
		}
		if l.net.layers[0].qkv == nil {
			t.Error("the network does not take the fused module")
		}
		l.st, err = model.NewStepper(l.net, l.s)
		if err != nil {
			t.Error(err)
		}
	})
	if t.Failed() {
		t.FailNow()
	}
}

// dummyPlan plans dummy weights for the config.json at path, edited by
// edit (its decoded fields).
func dummyPlan(tb testing.TB, path string, edit func(cfg map[string]any)) *model.Dummy {
	tb.Helper()
	raw, err := os.ReadFile(path)
	if err != nil {
		tb.Fatal(err)
	}
	var cfg map[string]any
	if err := json.Unmarshal(raw, &cfg); err != nil {
		tb.Fatal(err)
	}
	edit(cfg)
	if raw, err = json.Marshal(cfg); err != nil {
		tb.Fatal(err)
	}
	d, err := model.PlanDummy(raw)
	if err != nil {
		tb.Fatal(err)
	}
	return d
}

// narrow20B plans gpt-oss-20b's architecture (its heads, head size,
// experts, routing and layer kinds; testdata/configs/gpt-oss-20b.json)
// with layers layers, widths of 64, a vocabulary of 1,024 and a sliding
// window of window (0 keeps its own).
func narrow20B(tb testing.TB, layers, window int) *model.Dummy {
	return dummyPlan(tb, "../../testdata/configs/gpt-oss-20b.json", func(cfg map[string]any) {
		cfg["hidden_size"], cfg["intermediate_size"], cfg["vocab_size"] = 64, 64, 1024
		cfg["eos_token_id"], cfg["pad_token_id"] = 1000, 1001
		if layers > 0 {
			cfg["num_hidden_layers"] = layers
			cfg["layer_types"] = cfg["layer_types"].([]any)[:layers]
		}
		if window > 0 {
			cfg["sliding_window"] = window
		}
	})
}

// loadDummy builds the tiny fixture's architecture with dummy weights on
// the CPU, every matrix (attention included) 8-bit affine, which gpt-oss
// keeps packed beside its scales and biases (GPTOSSFacts.Packed).
func loadDummy(t *testing.T, act mlx.Dtype) *loaded {
	t.Helper()
	d := dummyPlan(t, filepath.Join(refDir, "mlx_mxfp4", "config.json"), func(cfg map[string]any) {
		delete(cfg, "quantization")
		cfg["quantization_config"] = map[string]any{"group_size": 32, "bits": 8}
	})
	d.Config.ActDType = act
	if lv, ok := d.Config.GPTOSS.Packed["model.layers.0.self_attn.q_proj.weight"]; !ok || lv.Bits != 8 {
		t.Fatalf("the dummy's q_proj is not packed 8-bit: %+v", lv)
	}
	return start(t, d.Config, func(s mlx.Stream) (*model.Weights, error) { return d.Build(s, 7, nil) })
}

// forcedSteps runs prompts together, then steps single-token rows fed
// fixed tokens, and returns every step's logits.
func forcedSteps(t *testing.T, l *loaded, prompts [][]int32, steps int) [][]float32 {
	t.Helper()
	seqs := make([]*kvpool.Seq, len(prompts))
	for i := range seqs {
		seqs[i] = l.newSeq(t)
	}
	var out [][]float32
	next := prompts
	for s := range steps {
		out = append(out, l.step(t, next, seqs))
		next = make([][]int32, len(prompts))
		for i := range next {
			next[i] = []int32{int32(3 + 5*s + i)}
		}
	}
	return out
}

// TestFusedQKVMatchesApart runs gpt-oss with its q/k/v joined into one
// module (matrix, bias and, where packed, scales and biases) against the
// same weights apart, on the CPU: three prompts prefilled together (one
// past the sliding window), then decode steps, and one prompt alone (whose
// single token rotates q's and k's heads in one call) must give the same
// logits, float for float, with YaRN's factor over q and k. Layouts:
// dense attention (bf16, hf_mxfp4) in float32 and bfloat16, and packed
// 8-bit affine attention (dummy weights); and one network with only its
// first layer joined (a layer joins only where its parts can, so layers
// of one network may differ).
func TestFusedQKVMatchesApart(t *testing.T) {
	fx := readFixture(t)
	cases := []struct {
		name   string
		load   func() *loaded
		joined int // layers, from the first
	}{
		{"bf16/f32", func() *loaded { return load(t, "bf16", mlx.Float32, nil) }, 2},
		{"hf_mxfp4/bf16", func() *loaded { return load(t, "hf_mxfp4", mlx.BFloat16, nil) }, 2},
		{"hf_mxfp4/bf16/first-layer", func() *loaded { return load(t, "hf_mxfp4", mlx.BFloat16, nil) }, 1},
		{"packed8/f32", func() *loaded { return loadDummy(t, mlx.Float32) }, 2},
		{"packed8/bf16", func() *loaded { return loadDummy(t, mlx.BFloat16) }, 2},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			apart, joined := c.load(), c.load()
			if apart.net.facts.YaRNFactor == 1 {
				t.Fatal("the fixture has no YaRN factor to apply")
			}
			if c.joined > apart.cfg.Layers {
				t.Fatalf("%d layers to join of %d", c.joined, apart.cfg.Layers)
			}
			fuseQKV(t, joined, c.joined)
			for _, ps := range [][][]int32{fx.Prompts, fx.Prompts[:1]} {
				a, b := forcedSteps(t, apart, ps, 5), forcedSteps(t, joined, ps, 5)
				for s := range a {
					if len(a[s]) != len(b[s]) {
						t.Fatalf("%d rows, step %d: %d logits fused, %d apart", len(ps), s, len(b[s]), len(a[s]))
					}
					for i := range a[s] {
						if a[s][i] != b[s][i] {
							t.Fatalf("%d rows, step %d: logit %d fused %v, apart %v", len(ps), s, i, b[s][i], a[s][i])
						}
					}
				}
			}
		})
	}
}

// stepPrimitives counts the primitives of l's one-row decode step after a
// ten-token prefill, on a pool that attends through MLX ops (the GPU's
// layout for a lone row), and logs them.
func stepPrimitives(t *testing.T, l *loaded, label string) map[string]int {
	t.Helper()
	var counts map[string]int
	var err error
	l.th.Do(func() {
		counts, err = model.DecodeStepPrimitives(l.net, l.s, kvpool.Options{Ops: true}, []int32{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}, 11)
	})
	if err != nil {
		t.Fatal(err)
	}
	total, names := mlx.DescribePrimitives(counts)
	t.Logf("%s: one-row step of %d layers: %d primitives: %s", label, l.cfg.Layers, total, names)
	return counts
}

// TestFusedQKVStepPrimitives counts a one-row decode step's primitives
// with q/k/v apart and joined, in dense and packed 8-bit attention: joined,
// a layer's three products become one (and their biases one addition),
// its q and k heads take one RoPE, and its YaRN factor one product. The
// step makes its expert products' rows twice in all.
func TestFusedQKVStepPrimitives(t *testing.T) {
	for _, c := range []struct {
		name    string
		product string // the primitive of an attention projection
		load    func() *loaded
	}{
		{"bf16/f32", "AddMM", func() *loaded { return load(t, "bf16", mlx.Float32, nil) }},
		{"packed8/f32", "FastAffineLinear", func() *loaded { return loadDummy(t, mlx.Float32) }},
	} {
		t.Run(c.name, func(t *testing.T) {
			l := c.load()
			before := stepPrimitives(t, l, "apart")
			fuseQKV(t, l, l.cfg.Layers)
			after := stepPrimitives(t, l, "fused")
			layers := l.cfg.Layers
			if got := after["FastRoPE"]; got != layers {
				t.Errorf("fused: %d RoPE calls in %d layers, want one a layer", got, layers)
			}
			// The expert products' rows of x and of the gated activations
			// are made once a step, not once a product (MLX's default).
			if got := after["Arange"]; got != 2 {
				t.Errorf("%d aranges in a one-row step, want 2", got)
			}
			if d := before[c.product] - after[c.product]; d != 2*layers {
				t.Errorf("%s: %d apart, %d fused, want %d fewer (two a layer)", c.product, before[c.product], after[c.product], 2*layers)
			}
			tb, _ := mlx.DescribePrimitives(before)
			ta, _ := mlx.DescribePrimitives(after)
			if ta >= tb {
				t.Errorf("fused step has %d primitives, apart %d", ta, tb)
			}
			t.Logf("%d primitives apart, %d fused (%d fewer a layer)", tb, ta, (tb-ta)/layers)
		})
	}
}
