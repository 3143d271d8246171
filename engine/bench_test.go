package engine_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/goprovider/provider/engine"
	"github.com/goprovider/provider/engine/enginetest"
)

// BenchmarkSmolLM2Throughput reports output tokens per second of the whole
// engine at several concurrencies: every stream greedy-decodes 64 tokens
// from its own short prompt.
func BenchmarkSmolLM2Throughput(b *testing.B) {
	e, m := enginetest.Start(b, enginetest.SmolLM2(), engine.Options{Sched: engine.Config{MaxConcurrent: 8}, KVCapacity: 1 << 30})
	const maxTokens = 64
	for _, conc := range []int{1, 4, 8} {
		b.Run(fmt.Sprint("concurrency", conc), func(b *testing.B) {
			var tokens int
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
					go func() {
						defer wg.Done()
						o := collect(ch)
						mu.Lock()
						tokens += len(o.tokens)
						mu.Unlock()
					}()
				}
				wg.Wait()
			}
			b.ReportMetric(float64(tokens)/time.Since(start).Seconds(), "out-tok/s")
		})
	}
}
