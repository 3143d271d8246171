package llama

import (
	"fmt"
	"github.com/goprovider/provider/kvpool"
	"testing"

	"github.com/goprovider/provider/mlx"
	"github.com/goprovider/provider/model"
	"github.com/goprovider/provider/sample"
	"github.com/goprovider/provider/tokenizer"
)

// runSteps runs rows together, one Forward per step over every row:
// prompts of different lengths in the first step, then the tokens next
// picks from each step's logits. It returns every step's logits.
func runSteps(tb testing.TB, l *loaded, prompts [][]int32, steps int, next func(step int, logits []float32) [][]int32) [][]float32 {
	tb.Helper()
	var all [][]float32
	l.th.Do(func() {
		caches := make([]*kvpool.Seq, len(prompts))
		for i := range caches {
			caches[i] = l.st.NewSeq()
			defer caches[i].Free()
		}
		in := prompts
		for s := range steps {
			f := mlx.NewFrame(l.s)
			logits := f.ToFloat32s(l.st.Forward(f, in, caches))
			f.Free()
			if err := f.Err(); err != nil {
				tb.Fatal(err)
			}
			all = append(all, logits)
			in = next(s, logits)
		}
	})
	return all
}

// encodePrompts is each text's tokens, special tokens added.
func encodePrompts(l *loaded, texts ...string) [][]int32 {
	prompts := make([][]int32, len(texts))
	for i, s := range texts {
		prompts[i] = l.m.Tokenizer.Encode(s, tokenizer.EncodeOptions{AddSpecial: true})
	}
	return prompts
}

// fixedTokens is runSteps' next for rows that take, after their prompts,
// the same fixed token per row and step whatever the logits.
func fixedTokens(rows int) func(int, []float32) [][]int32 {
	return func(s int, _ []float32) [][]int32 {
		next := make([][]int32, rows)
		for i := range next {
			next[i] = []int32{int32(100 + s + i)}
		}
		return next
	}
}

// greedy runs rows together (runSteps), each decoding its argmax.
func greedy(tb testing.TB, l *loaded, prompts [][]int32, steps int) [][]int32 {
	tb.Helper()
	out := make([][]int32, len(prompts))
	vocab := l.m.Config.Vocab
	runSteps(tb, l, prompts, steps, func(_ int, logits []float32) [][]int32 {
		next := make([][]int32, len(prompts))
		for i := range prompts {
			tok := sample.Argmax(logits[i*vocab : (i+1)*vocab])
			out[i] = append(out[i], tok)
			next[i] = []int32{tok}
		}
		return next
	})
	return out
}

func TestBatchedForwardEqualsAlone(t *testing.T) {
	for _, tc := range []struct {
		name   string
		path   string
		steps  int
		adjust func(*model.Config)
	}{
		{"stories260K", storiesPath, 64, nil},
		{"SmolLM2", smolPath, 24, nil},
		// 8-bit activations, as serving runs on the CPU (the integer kernel,
		// on weights packed for it).
		{"SmolLM2-int8", smolPath, 24, func(c *model.Config) { c.Int8Activations = true }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l := loadWith(t, tc.path, tc.adjust)
			if tc.adjust != nil && mlx.PackedQ8(576, 4) && !l.w.Get("model.layers.0.mlp.up_proj.weight").Packed {
				t.Fatal("8-bit activations on a processor with AVX2, but the weights were not packed")
			}
			prompts := encodePrompts(l, "Once upon a time", "The cat", "A long time ago in a small town there lived a boy who", "Hi")
			together := greedy(t, l, prompts, tc.steps)
			for i, p := range prompts {
				alone := greedy(t, l, [][]int32{p}, tc.steps)[0]
				if fmt.Sprint(alone) != fmt.Sprint(together[i]) {
					t.Errorf("row %d (%d prompt tokens): batched %v\nalone %v", i, len(p), together[i], alone)
				}
			}
		})
	}
}
