package engine_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"

	"github.com/goprovider/provider/engine"
	"github.com/goprovider/provider/sample"
)

// script is a grammar whose only sentence is its token sequence: each
// mask allows exactly the next token of the script. It records the calls
// the engine makes, so the test can check the contract's order.
type script struct {
	tokens []int32
	mu     sync.Mutex
	calls  []string
}

func (s *script) NewConstraint() engine.Constraint { return &scripted{s: s} }

func (s *script) log(call string) {
	s.mu.Lock()
	s.calls = append(s.calls, call)
	s.mu.Unlock()
}

type scripted struct {
	s      *script
	next   int
	busy   bool // a call is running: the engine must never overlap two
	closed bool
}

func (c *scripted) enter(call string) {
	if c.busy || c.closed {
		panic("constraint called concurrently or after Close: " + call)
	}
	c.busy = true
	c.s.log(call)
}

func (c *scripted) Mask() ([]uint32, error) {
	c.enter("mask")
	defer func() { c.busy = false }()
	mask := make([]uint32, 16) // 512 tokens
	if c.next < len(c.s.tokens) {
		t := c.s.tokens[c.next]
		mask[t/32] |= 1 << (t % 32)
	} else {
		mask[0] |= 1 << 2 // </s>
	}
	return mask, nil
}

func (c *scripted) Accept(tok int32) (bool, error) {
	c.enter(fmt.Sprint("accept ", tok))
	defer func() { c.busy = false }()
	if c.next >= len(c.s.tokens) || tok != c.s.tokens[c.next] {
		return false, fmt.Errorf("token %d outside the script", tok)
	}
	c.next++
	return c.next == len(c.s.tokens), nil
}

func (c *scripted) Close() {
	c.enter("close")
	c.closed = true
}

// TestConstraintSteersSampling: a constrained row samples only what its
// masks allow, greedy or not, stops ("stop") when its constraint is
// complete, and calls its constraint in the contract's order (mask,
// accept, mask, ..., close once); an unconstrained row in the same batch
// gets the tokens it gets alone.
func TestConstraintSteersSampling(t *testing.T) {
	e, m := realEngine(t, engine.Options{Sched: engine.Config{MaxConcurrent: 4}})
	p := prompts(m)[1]
	want := m.Tokenizer.Encode(" the moon was made of cheese", tokenizerNoSpecial)
	free := func(id string) outcome {
		ch, err := e.Submit(context.Background(), engine.Generation{ID: engine.RequestID(id), Prompt: p, MaxTokens: 24, TopLogprobs: -1})
		if err != nil {
			t.Fatal(err)
		}
		return collect(ch)
	}
	alone := free("alone")
	seed := uint64(7)
	for _, sp := range []sample.Params{{}, {Temperature: 1, Seed: &seed}} {
		t.Run(fmt.Sprint("temperature ", sp.Temperature), func(t *testing.T) {
			s := &script{tokens: want}
			ch, err := e.Submit(context.Background(), engine.Generation{ID: "scripted", Prompt: p, MaxTokens: 64, Sampling: sp, TopLogprobs: -1, Grammar: s})
			if err != nil {
				t.Fatal(err)
			}
			beside := free("beside")
			o := collect(ch)
			if o.last.Kind != engine.EventFinished || o.last.Reason != engine.FinishStop || !slices.Equal(o.tokens, want) {
				t.Fatalf("got %v ending %+v, want %v and stop", o.tokens, o.last, want)
			}
			if !slices.Equal(beside.tokens, alone.tokens) {
				t.Errorf("the unconstrained row beside it got %v, alone %v", beside.tokens, alone.tokens)
			}
			var calls []string
			for _, tok := range want {
				calls = append(calls, "mask", fmt.Sprint("accept ", tok))
			}
			calls = append(calls, "close")
			if !slices.Equal(s.calls, calls) {
				t.Errorf("calls %q, want %q", s.calls, calls)
			}
		})
	}
}

// TestConstraintCutByMaxTokens: a row whose grammar is not complete when
// it reaches max_tokens finishes with "length", and its constraint is
// closed.
func TestConstraintCutByMaxTokens(t *testing.T) {
	e, m := realEngine(t, engine.Options{})
	want := m.Tokenizer.Encode(" the moon was made of cheese", tokenizerNoSpecial)
	s := &script{tokens: want}
	ch, err := e.Submit(context.Background(), engine.Generation{ID: "cut", Prompt: prompts(m)[1], MaxTokens: 3, TopLogprobs: -1, Grammar: s})
	if err != nil {
		t.Fatal(err)
	}
	o := collect(ch)
	if o.last.Reason != engine.FinishLength || !slices.Equal(o.tokens, want[:3]) {
		t.Fatalf("got %v ending %+v, want %v and length", o.tokens, o.last, want[:3])
	}
	if n := len(s.calls); n == 0 || s.calls[n-1] != "close" || slices.Index(s.calls, "close") != n-1 {
		t.Errorf("calls %q: want one close, last", s.calls)
	}
}
