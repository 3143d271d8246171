package tp

import (
	"testing"

	"github.com/goprovider/provider/mlx"
	"github.com/goprovider/provider/model"
	"github.com/goprovider/provider/tokenizer"
)

// tinyTokenizer is the tiny gpt-oss checkpoint's (264 tokens); it fits
// every dummy config here.
const tinyTokenizer = "../testdata/ref/gptoss_tiny/hf_mxfp4/tokenizer.json"

// dummyConfigs are small configs of dummy models, by name: the tiny MXFP4
// gpt-oss (an expert width of one quantization group: experts split
// whole), the same at two groups (every expert's packed width splits),
// the tiny Gemma 4 MoE (fused expert halves), a bf16 llama and an affine
// 4-bit llama with one 8-bit layer.
var dummyConfigs = []struct{ name, config, tokenizer string }{
	{"gpt-oss-mxfp4", "../testdata/ref/gptoss_tiny/hf_mxfp4/config.json", tinyTokenizer},
	{"gpt-oss-mxfp4-wide", "../testdata/dummy/gptoss_wide.json", tinyTokenizer},
	{"gemma4-moe", "../testdata/ref/gemma4_tiny/moe/config.json", "../testdata/ref/gemma4_tiny/moe/tokenizer.json"},
	{"llama", "../testdata/dummy/llama.json", tinyTokenizer},
	{"llama-q4", "../testdata/dummy/llama_q4.json", tinyTokenizer},
}

// TestDummyGreedyEqualsOneProcess: a dummy model built over two ranks of
// the ring backend, each rank its share of the same seeded weights, gives
// the single process's greedy tokens, and logits within 1e-4.
func TestDummyGreedyEqualsOneProcess(t *testing.T) {
	g, th := ring2(t)
	for _, c := range dummyConfigs {
		t.Run(c.name, func(t *testing.T) {
			const seed, steps = 5, 12
			open := func() (*model.Model, *model.Dummy) {
				m, d, err := model.OpenDummy(c.config, c.tokenizer)
				if err != nil {
					t.Fatal(err)
				}
				// MLX's CPU gather_mm multiplies float32 only.
				m.Config.ActDType = mlx.Float32
				d.Config = m.Config
				t.Cleanup(func() { m.Close() })
				return m, d
			}
			m, d := open()
			prompt := m.Tokenizer.Encode("The capital of France is", tokenizer.EncodeOptions{})
			var solo *Shard
			var err error
			th.Do(func() { solo, err = LoadDummyShard(d, seed, mlx.CPU(), mlx.Group{}, nil) })
			if err != nil {
				t.Fatal(err)
			}
			want := generate(t, th, solo.Net, prompt, steps, nil)
			th.Do(solo.Free)

			two, d2 := open()
			spec := LoadSpec{Dummy: &DummySpec{Config: c.config, Tokenizer: c.tokenizer, Seed: seed}, Device: "cpu", Config: two.Config}
			var mine *Shard
			slot, err := g.Load(spec, func() (err error) {
				th.Do(func() { mine, err = LoadDummyShard(d2, seed, mlx.CPU(), g.MLX(), nil) })
				return err
			})
			if err != nil {
				t.Fatal(err)
			}
			defer func() { th.Do(mine.Free); g.Unload(slot) }()
			t.Logf("%s: %d of %d weight bytes", mine.Sharding, mine.Weights.Bytes(), d.Bytes())
			if mine.Weights.Bytes() >= d.Bytes() {
				t.Errorf("rank 0 holds %d bytes, the whole model %d", mine.Weights.Bytes(), d.Bytes())
			}
			got := generate(t, th, g.NewLeader(slot, mine.Net), prompt, steps, want.tokens)

			same(t, got, want, 1e-4)
		})
	}
}
