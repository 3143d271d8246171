package engine_test

import (
	"context"
	"fmt"
	"sync"
	"testing"

	"github.com/goprovider/provider/engine"
	"github.com/goprovider/provider/sample"
)

// TestStepsBuiltAheadChangeNothing: the same mixed workload (rows arriving
// while others decode, a row crossing a block boundary, one reaching its
// token limit early, a seeded sampled row, a cancelled row) gives the same
// tokens with decode steps built ahead as with every step built after the
// one before was read, and with them on most steps run from a step built
// ahead.
func TestStepsBuiltAheadChangeNothing(t *testing.T) {
	run := func(ahead bool) (map[string]outcome, engine.StepTimes) {
		e, m := realEngine(t, engine.Options{Sched: engine.Config{MaxConcurrent: 8}, Ahead: ahead})
		ps := prompts(m)
		// A prompt of 250 tokens: its decode crosses into a second block.
		long := append([]int32{}, ps[2]...)
		for len(long) < 250 {
			long = append(long, ps[3][1:]...)
		}
		long = long[:250]
		seed := uint64(7)
		type req struct {
			id  string
			p   []int32
			max int
			sp  sample.Params
		}
		reqs := []req{
			{"a", ps[0], 40, sample.Params{}},
			{"b", ps[1], 3, sample.Params{}},
			{"long", long, 24, sample.Params{}},
			{"sampled", ps[3], 30, sample.Params{Temperature: 1, Seed: &seed}},
			{"c", ps[4], 40, sample.Params{}},
			{"late", ps[1], 20, sample.Params{}},
		}
		out := map[string]outcome{}
		var mu sync.Mutex
		var wg sync.WaitGroup
		submit := func(r req) {
			ch, err := e.Submit(context.Background(), engine.Generation{ID: engine.RequestID(r.id), Prompt: r.p, MaxTokens: r.max, Sampling: r.sp, TopLogprobs: -1})
			if err != nil {
				t.Fatal(err)
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				o := collect(ch)
				mu.Lock()
				out[r.id] = o
				mu.Unlock()
			}()
		}
		for _, r := range reqs[:5] {
			submit(r)
		}
		// A row that arrives while the others decode, and one that is
		// cancelled after its first tokens.
		ctx, cancel := context.WithCancel(context.Background())
		ch, err := e.Submit(ctx, engine.Generation{ID: "cancelled", Prompt: ps[2], MaxTokens: 40, TopLogprobs: -1})
		if err != nil {
			t.Fatal(err)
		}
		<-ch
		<-ch
		submit(reqs[5])
		cancel()
		for range ch {
		}
		wg.Wait()
		for id, o := range out {
			if o.last.Kind != engine.EventFinished {
				t.Fatalf("%s ended with %+v", id, o.last)
			}
		}
		if st := e.Stats(); st.KVUsed != 0 || st.Running != 0 {
			t.Fatalf("idle engine holds %+v", st)
		}
		return out, e.StepTimes()
	}
	ahead, on := run(true)
	stepped, off := run(false)
	for id, o := range stepped {
		if fmt.Sprint(o.tokens) != fmt.Sprint(ahead[id].tokens) {
			t.Errorf("%s: built ahead %v\nstepped %v", id, ahead[id].tokens, o.tokens)
		}
	}
	if off.AheadSteps != 0 {
		t.Errorf("without Ahead %d steps ran from a step built ahead", off.AheadSteps)
	}
	if on.AheadSteps*2 < on.Steps {
		t.Errorf("only %d of %d steps ran from a step built ahead", on.AheadSteps, on.Steps)
	}
	t.Logf("built ahead: %+v; stepped: %+v", on, off)
}

// TestNoStepAheadOfAFirstToken: a lone greedy row of n tokens runs its
// first step (the prompt, sampling its first token) and its second after
// the read of the one before; steps 3 .. n run from steps built ahead. A
// step built ahead of the first token would delay it (see ahead.go).
func TestNoStepAheadOfAFirstToken(t *testing.T) {
	e, m := realEngine(t, engine.Options{Sched: engine.Config{MaxConcurrent: 4}, Ahead: true})
	const n = 12
	for i, p := range prompts(m)[1:3] {
		before := e.StepTimes()
		ch, err := e.Submit(context.Background(), engine.Generation{ID: engine.RequestID(fmt.Sprint("r", i)), Prompt: p, MaxTokens: n, TopLogprobs: -1})
		if err != nil {
			t.Fatal(err)
		}
		if o := collect(ch); len(o.tokens) != n || o.last.Kind != engine.EventFinished {
			t.Fatalf("request %d: %d tokens, ended with %+v", i, len(o.tokens), o.last)
		}
		after := e.StepTimes()
		steps, ahead := after.Steps-before.Steps, after.AheadSteps-before.AheadSteps
		if steps != n || ahead != n-2 {
			t.Errorf("request %d: %d steps, %d from steps built ahead; want %d and %d", i, steps, ahead, n, n-2)
		}
	}
}
