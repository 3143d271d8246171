package llama

import (
	"fmt"
	"testing"
	"time"

	"github.com/goprovider/provider/kvpool"
	"github.com/goprovider/provider/mlx"
	"github.com/goprovider/provider/model"
	"github.com/goprovider/provider/sample"
)

// BenchmarkSmolLM2 measures single-sequence prefill of a 128-token prompt
// and greedy decode of 64 tokens; compare with scripts/bench_llamacpp.py on
// the same weights.
func BenchmarkSmolLM2(b *testing.B) {
	servedSpin(b)
	l := load(b, smolPath)
	const promptLen, decode = 128, 64
	prompt := make([]int32, promptLen)
	for i := range prompt {
		prompt[i] = int32(1000 + i*37%8000)
	}
	var prefill, dec time.Duration
	b.ResetTimer()
	for range b.N {
		l.th.Do(func() {
			c := l.st.NewSeq()
			defer c.Free()
			step := func(tokens []int32) int32 {
				f := mlx.NewFrame(l.s)
				defer f.Free()
				logits := f.ToFloat32s(l.st.Forward(f, [][]int32{tokens}, []*kvpool.Seq{c}))
				if f.Err() != nil {
					b.Fatal(f.Err())
				}
				return sample.Argmax(logits)
			}
			t0 := time.Now()
			tok := step(prompt)
			t1 := time.Now()
			for range decode {
				tok = step([]int32{tok})
			}
			prefill += t1.Sub(t0)
			dec += time.Since(t1)
		})
	}
	b.ReportMetric(float64(promptLen*b.N)/prefill.Seconds(), "prefill-tok/s")
	b.ReportMetric(float64(decode*b.N)/dec.Seconds(), "decode-tok/s")
}

// BenchmarkSmolLM2DecodeStep times one decode step of rows sequences that
// each hold a 128-token prompt: the engine's step at that batch size.
func BenchmarkSmolLM2DecodeStep(b *testing.B) {
	servedSpin(b)
	for _, num := range benchNumerics {
		l := loadWith(b, smolPath, num.adjust)
		for _, rows := range []int{1, 8, 32} {
			b.Run(fmt.Sprintf("%s/rows%d", num.name, rows), func(b *testing.B) {
				l.th.Do(func() {
					seqs := make([]*kvpool.Seq, rows)
					prompts := make([][]int32, rows)
					next := make([][]int32, rows)
					for i := range seqs {
						seqs[i] = l.st.NewSeq()
						defer seqs[i].Free()
						prompts[i] = make([]int32, 128)
						for j := range prompts[i] {
							prompts[i][j] = int32(1000 + (i*131+j*37)%8000)
						}
						next[i] = []int32{int32(2000 + i)}
					}
					f := mlx.NewFrame(l.s)
					l.st.Forward(f, prompts, seqs)
					f.Free()
					b.ResetTimer()
					for range b.N {
						f := mlx.NewFrame(l.s)
						l.st.Forward(f, next, seqs)
						if f.Err() != nil {
							b.Fatal(f.Err())
						}
						f.Free()
					}
					b.StopTimer()
				})
				b.ReportMetric(float64(rows*b.N)/b.Elapsed().Seconds(), "tok/s")
			})
		}
	}
}

// benchNumerics are the activation numerics the step benchmarks compare:
// float activations, and 8-bit activations into the integer kernel
// (model.Config.Int8Activations, what serve runs on the CPU).
var benchNumerics = []struct {
	name   string
	adjust func(*model.Config)
}{
	{"float", nil},
	{"int8", func(c *model.Config) { c.Int8Activations = true }},
}

// BenchmarkSmolLM2PrefillStep times one step that prefills rows fresh
// 128-token prompts together, as the engine does when requests arrive at
// once.
func BenchmarkSmolLM2PrefillStep(b *testing.B) {
	servedSpin(b)
	for _, num := range benchNumerics {
		l := loadWith(b, smolPath, num.adjust)
		for _, rows := range []int{1, 4, 16} {
			b.Run(fmt.Sprintf("%s/rows%d", num.name, rows), func(b *testing.B) {
				prompts := make([][]int32, rows)
				for i := range prompts {
					prompts[i] = make([]int32, 128)
					for j := range prompts[i] {
						prompts[i][j] = int32(1000 + (i*131+j*37)%8000)
					}
				}
				b.ResetTimer()
				for range b.N {
					l.th.Do(func() {
						seqs := make([]*kvpool.Seq, rows)
						for i := range seqs {
							seqs[i] = l.st.NewSeq()
							defer seqs[i].Free()
						}
						f := mlx.NewFrame(l.s)
						defer f.Free()
						l.st.Forward(f, prompts, seqs)
						if f.Err() != nil {
							b.Fatal(f.Err())
						}
					})
				}
				b.ReportMetric(float64(rows*128*b.N)/b.Elapsed().Seconds(), "prefill-tok/s")
			})
		}
	}
}
