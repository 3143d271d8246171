package grammar_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/goprovider/provider/engine"
	"github.com/goprovider/provider/engine/enginetest"
	"github.com/goprovider/provider/grammar"
	"github.com/goprovider/provider/tokenizer"
)

// benchSchema keeps SmolLM2 writing for the whole benchmark budget: a
// long free-text field last.
const benchSchema = `{"type":"object","properties":{
	"name":{"type":"string","maxLength":40},"species":{"type":"string","maxLength":40},
	"age":{"type":"integer","minimum":0,"maximum":30},
	"colors":{"type":"array","items":{"type":"string","maxLength":16},"maxItems":4},
	"description":{"type":"string","maxLength":400}},
	"required":["name","species","age","colors","description"],"additionalProperties":false}`

// BenchmarkConstrainedTPOT measures the time per output token of eight
// greedy SmolLM2 rows decoding together, each iteration once without a
// constraint and once under a JSON schema, and reports both and their
// ratio (json/free). Constrained rows copy their logits to the host and
// wait for their masks, which are computed while the step before runs.
func BenchmarkConstrainedTPOT(b *testing.B) {
	const rows, maxTokens = 8, 64
	e, m := enginetest.Start(b, enginetest.SmolLM2(), engine.Options{Sched: engine.Config{MaxConcurrent: rows}, KVCapacity: 1 << 30})
	c, err := grammar.NewCompiler(m.Tokenizer, m.Config.EOS)
	if err != nil {
		b.Fatal(err)
	}
	g, err := c.Compile(grammar.JSONSchema, []byte(benchSchema))
	if err != nil {
		b.Fatal(err)
	}
	prompts := make([][]int32, rows)
	for i := range prompts {
		prompts[i] = m.Tokenizer.Encode(fmt.Sprintf("<|im_start|>user\nDescribe pet number %d as JSON.<|im_end|>\n<|im_start|>assistant\n", i),
			tokenizer.EncodeOptions{ParseSpecial: true})
	}
	// run decodes one batch and returns its mean time per output token.
	run := func(tag string, gr engine.Grammar) time.Duration {
		var wg sync.WaitGroup
		var mu sync.Mutex
		var sum time.Duration
		var n int
		for i, p := range prompts {
			ch, err := e.Submit(context.Background(), engine.Generation{ID: engine.RequestID(fmt.Sprint(tag, i)), Prompt: p,
				MaxTokens: maxTokens, TopLogprobs: -1, IgnoreEOS: gr == nil, Grammar: gr})
			if err != nil {
				b.Fatal(err)
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				var first, last time.Time
				tokens := 0
				for ev := range ch {
					if ev.Kind != engine.EventDelta {
						continue
					}
					if tokens == 0 {
						first = time.Now()
					}
					last = time.Now()
					tokens += len(ev.Tokens)
				}
				if tokens > 1 {
					mu.Lock()
					sum += last.Sub(first) / time.Duration(tokens-1)
					n++
					mu.Unlock()
				}
			}()
		}
		wg.Wait()
		if n == 0 {
			b.Fatal("no row produced two tokens")
		}
		return sum / time.Duration(n)
	}
	var free, constrained time.Duration
	for i := range b.N {
		free += run(fmt.Sprint("free", i, "-"), nil)
		constrained += run(fmt.Sprint("json", i, "-"), g)
	}
	b.ReportMetric(float64(free.Microseconds())/float64(b.N)/1000, "free-ms/tok")
	b.ReportMetric(float64(constrained.Microseconds())/float64(b.N)/1000, "json-ms/tok")
	b.ReportMetric(float64(constrained)/float64(free), "json/free")
}
