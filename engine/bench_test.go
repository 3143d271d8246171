package engine_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/goprovider/provider/engine"
	"github.com/goprovider/provider/engine/enginetest"
)

// BenchmarkSmolLM2Throughput reports output tokens per second of the whole
// engine at several concurrencies: every stream greedy-decodes 64 tokens
// from its own short prompt; with decode steps built ahead and without (the
// default), each with the host's build and wait time per step and the
// median time from a request's submission to its first token. The model
// runs with serve's numerics (enginetest.StartServed).
func BenchmarkSmolLM2Throughput(b *testing.B) {
	for _, mode := range []string{"ahead", "stepped"} {
		b.Run(mode, func(b *testing.B) { benchThroughput(b, mode == "ahead") })
	}
}

func benchThroughput(b *testing.B, ahead bool) {
	e, m := enginetest.StartServed(b, enginetest.SmolLM2(), engine.Options{Sched: engine.Config{MaxConcurrent: 8}, KVCapacity: 1 << 30, Ahead: ahead})
	const maxTokens = 64
	for _, conc := range []int{1, 4, 8} {
		b.Run(fmt.Sprint("concurrency", conc), func(b *testing.B) {
			t0 := e.StepTimes()
			var tokens int
			var ttft []time.Duration
			start := time.Now()
			for it := range b.N {
				var wg sync.WaitGroup
				var mu sync.Mutex
				for i := range conc {
					p := m.Tokenizer.Encode(fmt.Sprintf("Story %d: once upon a time", i), tokenizerNoSpecial)
					ch, err := e.Submit(context.Background(), engine.Generation{ID: engine.RequestID(fmt.Sprint(conc, "-", it, "-", i)), Prompt: p, MaxTokens: maxTokens, TopLogprobs: -1})
					if err != nil {
						b.Fatal(err)
					}
					wg.Add(1)
					sent := time.Now()
					go func() {
						defer wg.Done()
						var first time.Duration
						n := 0
						for ev := range ch {
							if n == 0 && len(ev.Tokens) > 0 {
								first = time.Since(sent)
							}
							n += len(ev.Tokens)
						}
						mu.Lock()
						tokens += n
						ttft = append(ttft, first)
						mu.Unlock()
					}()
				}
				wg.Wait()
			}
			b.ReportMetric(float64(tokens)/time.Since(start).Seconds(), "out-tok/s")
			slices.Sort(ttft)
			b.ReportMetric(float64(ttft[len(ttft)/2].Microseconds())/1e3, "ttft-p50-ms")
			t1 := e.StepTimes()
			if n := float64(t1.Steps - t0.Steps); n > 0 {
				b.ReportMetric((t1.Build-t0.Build).Seconds()*1e3/n, "build-ms/step")
				b.ReportMetric((t1.Wait-t0.Wait).Seconds()*1e3/n, "wait-ms/step")
				b.ReportMetric(float64(t1.AheadSteps-t0.AheadSteps)/n, "ahead/step")
			}
		})
	}
}
