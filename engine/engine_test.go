package engine_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/goprovider/provider/engine"
	"github.com/goprovider/provider/engine/enginetest"
	"github.com/goprovider/provider/model"
	"github.com/goprovider/provider/tokenizer"
)

func realEngine(t testing.TB, opt engine.Options) (*engine.Engine, *model.Model) {
	t.Helper()
	return enginetest.Start(t, enginetest.Stories(), opt)
}

var tokenizerNoSpecial = tokenizer.EncodeOptions{}

type outcome struct {
	tokens []int32
	last   engine.Event
}

func collect(ch <-chan engine.Event) outcome {
	var o outcome
	o.tokens, o.last = enginetest.Collect(ch)
	return o
}

func prompts(m *model.Model) [][]int32 {
	texts := []string{"", "Once upon a time", "The little dog ran to the park and", "Lily and Ben", "One day, a big bird"}
	out := make([][]int32, len(texts))
	for i, s := range texts {
		ids := []int32{m.Tokenizer.BOS()}
		if s != "" {
			ids = append(ids, m.Tokenizer.Encode(s, tokenizerNoSpecial)...)
		}
		out[i] = ids
	}
	return out
}

func TestBatchedGreedyEqualsAlone(t *testing.T) {
	e, m := realEngine(t, engine.Options{Sched: engine.Config{MaxConcurrent: 8}})
	ps := prompts(m)
	const maxTokens = 48
	alone := make([]outcome, len(ps))
	for i, p := range ps {
		ch, err := e.Submit(context.Background(), engine.Generation{ID: engine.RequestID(fmt.Sprint("alone", i)), Prompt: p, MaxTokens: maxTokens, TopLogprobs: -1})
		if err != nil {
			t.Fatal(err)
		}
		alone[i] = collect(ch)
		if alone[i].last.Kind != engine.EventFinished {
			t.Fatalf("prompt %d ended with %+v", i, alone[i].last)
		}
	}
	together := make([]outcome, len(ps))
	var wg sync.WaitGroup
	for i, p := range ps {
		ch, err := e.Submit(context.Background(), engine.Generation{ID: engine.RequestID(fmt.Sprint("batch", i)), Prompt: p, MaxTokens: maxTokens, TopLogprobs: -1})
		if err != nil {
			t.Fatal(err)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			together[i] = collect(ch)
		}()
	}
	wg.Wait()
	for i := range ps {
		if fmt.Sprint(alone[i].tokens) != fmt.Sprint(together[i].tokens) {
			t.Errorf("prompt %d: batched %v\nalone %v", i, together[i].tokens, alone[i].tokens)
		}
		if together[i].last.Usage.CompletionTokens != len(together[i].tokens) {
			t.Errorf("prompt %d: usage %+v for %d tokens", i, together[i].last.Usage, len(together[i].tokens))
		}
	}
	if st := e.Stats(); st.KVUsed != 0 || st.Running != 0 {
		t.Fatalf("idle engine holds %+v", st)
	}
}

func TestCancelReleasesRowAndKV(t *testing.T) {
	e, m := realEngine(t, engine.Options{})
	ctx, cancel := context.WithCancel(context.Background())
	ch, err := e.Submit(ctx, engine.Generation{ID: "c", Prompt: prompts(m)[1], MaxTokens: 10000, TopLogprobs: -1})
	if err != nil {
		t.Fatal(err)
	}
	first := <-ch
	if first.Kind != engine.EventDelta {
		t.Fatalf("first event %+v", first)
	}
	cancel()
	o := collect(ch)
	if o.last.Kind != engine.EventError || !errors.Is(o.last.Err, context.Canceled) {
		t.Fatalf("last event %+v", o.last)
	}
	if st := e.Stats(); st.KVUsed != 0 || st.Running != 0 || st.Waiting != 0 {
		t.Fatalf("after cancel: %+v", st)
	}
}
