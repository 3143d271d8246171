package engine_test

import (
	"fmt"
	"math"
	"testing"

	"github.com/goprovider/provider/engine/enginetest"
	"github.com/goprovider/provider/family"
	"github.com/goprovider/provider/kvpool"
	"github.com/goprovider/provider/mlx"
	"github.com/goprovider/provider/model"
)

// TestGPUNumericsRunEveryFamily runs the Llama and Gemma 3 checkpoints in
// the type a GPU gives them (Config.AcceleratorDType: float16 for the
// SmolLM2 GGUF, bfloat16 for Gemma) through the pool's MLX-ops path, here
// on the CPU: the prompt's next token and the next three greedy tokens
// must equal the float32 run's, every logit finite.
func TestGPUNumericsRunEveryFamily(t *testing.T) {
	for _, tc := range []struct {
		path string
		want mlx.Dtype
	}{{enginetest.SmolLM2(), mlx.Float16}, {enginetest.Gemma3(), mlx.BFloat16}} {
		m, err := model.Open(tc.path)
		if err != nil {
			t.Fatal(err)
		}
		prompt := m.Tokenizer.Encode("The capital of France is Paris. The capital of Italy is", tokenizerNoSpecial)
		if m.Config.BOS >= 0 {
			prompt = append([]int32{m.Config.BOS}, prompt...)
		}
		half := m.Config.AcceleratorDType()
		if half != tc.want {
			t.Errorf("%s: accelerator dtype %v, want %v", m.Config.Arch, half, tc.want)
		}
		var runs [2][]int32
		for i, dt := range []mlx.Dtype{mlx.Float32, half} {
			runs[i] = greedyOps(t, m, dt, prompt, 4)
		}
		if fmt.Sprint(runs[0]) != fmt.Sprint(runs[1]) {
			t.Errorf("%s: greedy tokens in %v %v, in float32 %v", m.Config.Arch, half, runs[1], runs[0])
		}
		t.Logf("%s in %v: %v", m.Config.Arch, half, runs[1])
		m.Close()
	}
}

// greedyOps decodes n greedy tokens after prompt with activations and KV
// cache in dt, attention on the MLX-ops path.
func greedyOps(t *testing.T, m *model.Model, dt mlx.Dtype, prompt []int32, n int) []int32 {
	t.Helper()
	th := mlx.NewThread()
	defer th.Close()
	var out []int32
	th.Do(func() {
		s := mlx.DefaultStream()
		defer s.Free()
		c := m.Config
		c.ActDType = dt
		mm := *m
		mm.Config = c
		w, err := mm.Upload(s)
		if err != nil {
			t.Fatal(err)
		}
		defer w.Free()
		net, err := family.Build(c, w)
		if err != nil {
			t.Fatal(err)
		}
		defer net.Close()
		p, err := kvpool.New(s, dt, model.PoolLayers(c), kvpool.Options{Ops: true})
		if err != nil {
			t.Fatal(err)
		}
		defer p.Close()
		seq := p.NewSeq()
		toks := prompt
		for range n {
			f := mlx.NewFrame(s)
			b, err := p.Begin(f, []kvpool.Row{{Seq: seq, Tokens: toks, Sample: true}})
			if err != nil {
				t.Fatal(err)
			}
			logits := net.Forward(f, b)
			row := f.ToFloat32s(logits)
			ids := f.ToInt32s(f.Argmax(logits, 1, false))
			if err := f.Err(); err != nil {
				t.Fatal(err)
			}
			for _, x := range row {
				if math.IsNaN(float64(x)) || math.IsInf(float64(x), 0) {
					t.Fatalf("%s in %v: a logit is %v", c.Arch, dt, x)
				}
			}
			b.Commit()
			f.Free()
			out = append(out, ids[0])
			toks = ids[:1]
		}
	})
	return out
}
