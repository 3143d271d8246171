package engine

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/goprovider/provider/family"
	"github.com/goprovider/provider/mlx"
	"github.com/goprovider/provider/model"
	"github.com/goprovider/provider/tokenizer"
)

var tokenizerNoSpecial = tokenizer.EncodeOptions{}

// realEngine loads the real stories260K model and starts an engine on it.
func realEngine(t testing.TB, opt Options) (*Engine, *model.Model) {
	t.Helper()
	m, err := model.Open("../testdata/models/stories260K.gguf")
	if err != nil {
		t.Fatal(err)
	}
	th := mlx.NewThread()
	var s mlx.Stream
	var w *model.Weights
	var net model.Network
	th.Do(func() {
		s = mlx.DefaultStream()
		if w, err = m.Upload(s); err != nil {
			return
		}
		net, err = family.Build(m.Config, w)
	})
	if err != nil {
		t.Fatal(err)
	}
	if opt.KVCapacity == 0 {
		opt.KVCapacity = 64 << 20
	}
	e := New(net, th, s, opt)
	t.Cleanup(func() {
		e.Shutdown(context.Background())
		th.Do(func() {
			net.Close()
			w.Free()
			s.Free()
		})
		th.Close()
		m.Close()
	})
	return e, m
}

type outcome struct {
	tokens []int32
	last   Event
}

func collect(ch <-chan Event) outcome {
	var o outcome
	for ev := range ch {
		o.tokens = append(o.tokens, ev.Tokens...)
		o.last = ev
	}
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
	e, m := realEngine(t, Options{Sched: Config{MaxConcurrent: 8}})
	ps := prompts(m)
	const maxTokens = 48
	alone := make([]outcome, len(ps))
	for i, p := range ps {
		ch, err := e.Submit(context.Background(), Generation{ID: RequestID(fmt.Sprint("alone", i)), Prompt: p, MaxTokens: maxTokens, TopLogprobs: -1})
		if err != nil {
			t.Fatal(err)
		}
		alone[i] = collect(ch)
		if alone[i].last.Kind != EventFinished {
			t.Fatalf("prompt %d ended with %+v", i, alone[i].last)
		}
	}
	together := make([]outcome, len(ps))
	var wg sync.WaitGroup
	for i, p := range ps {
		ch, err := e.Submit(context.Background(), Generation{ID: RequestID(fmt.Sprint("batch", i)), Prompt: p, MaxTokens: maxTokens, TopLogprobs: -1})
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
	e, m := realEngine(t, Options{})
	ctx, cancel := context.WithCancel(context.Background())
	ch, err := e.Submit(ctx, Generation{ID: "c", Prompt: prompts(m)[1], MaxTokens: 10000, TopLogprobs: -1})
	if err != nil {
		t.Fatal(err)
	}
	first := <-ch
	if first.Kind != EventDelta {
		t.Fatalf("first event %+v", first)
	}
	cancel()
	o := collect(ch)
	if o.last.Kind != EventError || !errors.Is(o.last.Err, context.Canceled) {
		t.Fatalf("last event %+v", o.last)
	}
	if st := e.Stats(); st.KVUsed != 0 || st.Running != 0 || st.Waiting != 0 {
		t.Fatalf("after cancel: %+v", st)
	}
}
