// Package stagestest holds what the tests of the serving pipeline share:
// the real stories260K tokenizer, a small chat template, and a scripted
// fake engine for the places where the real engine cannot run.
//
// It never imports stages, graph or server, so each of them can use it
// from its own tests.
package stagestest

import (
	"bytes"
	"context"
	"flag"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"sync"
	"testing"

	"github.com/goprovider/provider/engine"
	"github.com/goprovider/provider/gguf"
	"github.com/goprovider/provider/sample"
	"github.com/goprovider/provider/tokenizer"
)

var stories = sync.OnceValues(func() (*tokenizer.Tokenizer, error) {
	_, file, _, _ := runtime.Caller(0)
	f, err := gguf.Open(filepath.Join(filepath.Dir(file), "..", "..", "testdata", "models", "stories260K.gguf"))
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return tokenizer.FromGGUF(f)
})

// Tokenizer is the real tokenizer of the stories260K model: SentencePiece,
// BOS 1, EOS 2, 512 tokens, byte tokens for other text.
func Tokenizer(t testing.TB) *tokenizer.Tokenizer {
	t.Helper()
	tok, err := stories()
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

// ChatTemplate writes BOS itself, as most chat templates do.
const ChatTemplate = `{{ bos_token }}{% for m in messages %}<|{{ m['role'] }}|>{{ m['content'] }}
{% endfor %}{% if add_generation_prompt %}<|assistant|>{% endif %}`

// Story is StoryText in the stories260K vocabulary, one token a piece:
// " Once" " upon" " a" " time" "," " there" " was" " a" " little" " g" "ir"
// "l" " named" " Lily" ".".
var Story = []int32{403, 407, 261, 378, 432, 383, 286, 261, 376, 298, 315, 421, 395, 317, 426}

// StoryText is what Story decodes to.
const StoryText = "Once upon a time, there was a little girl named Lily."

// Tokens scripts ids one per delta event, with logprobs when g asks
// (-0.5 for every token, itself as the one alternative), then an
// EventFinished with reason; reason 0 leaves the stream open.
func Tokens(g engine.Generation, ids []int32, reason engine.FinishReason) []engine.Event {
	var evs []engine.Event
	for _, id := range ids {
		ev := engine.Event{Kind: engine.EventDelta, Tokens: []int32{id}}
		if g.TopLogprobs >= 0 {
			top := []sample.TokenLogprob{{Token: id, Logprob: -0.5}}[:min(g.TopLogprobs, 1)]
			ev.Logprobs = []engine.Logprob{{Token: id, Logprob: -0.5, Top: top}}
		}
		evs = append(evs, ev)
	}
	if reason == 0 {
		return evs
	}
	return append(evs, engine.Event{Kind: engine.EventFinished, Reason: reason, Usage: engine.Usage{PromptTokens: len(g.Prompt), CompletionTokens: len(ids)}})
}

// Play is the script of one generation: the events to stream, whether to
// then hold the stream open until the generation is cancelled, or a
// refusal.
type Play struct {
	Events []engine.Event
	Hold   bool
	Refuse error
}

// Engine is a scripted fake of the engine loop. Each Submit plays
// Script(g): the events one at a time as the reader takes them and, as
// the engine does, once the generation's context ends an EventError with
// the context's error, then close.
type Engine struct {
	Script func(engine.Generation) Play
	// Gate, when not nil, holds every Submit until it is closed.
	Gate chan struct{}
	// Stat is what Stats reports.
	Stat engine.Stats
	// Cancels, when not nil, receives the id of every generation that
	// ends because its context ended (the send may block).
	Cancels chan engine.RequestID

	mu        sync.Mutex
	submitted []engine.Generation
	cancelled []engine.RequestID
}

// Submit plays the script of g.
func (e *Engine) Submit(ctx context.Context, g engine.Generation) (<-chan engine.Event, error) {
	if e.Gate != nil {
		<-e.Gate
	}
	p := e.Script(g)
	if p.Refuse != nil {
		return nil, p.Refuse
	}
	e.mu.Lock()
	e.submitted = append(e.submitted, g)
	e.mu.Unlock()
	ch := make(chan engine.Event)
	go func() {
		defer close(ch)
		for _, ev := range p.Events {
			select {
			case ch <- ev:
				continue
			case <-ctx.Done():
			}
			e.cancel(ctx, g.ID, ch)
			return
		}
		if p.Hold {
			<-ctx.Done()
			e.cancel(ctx, g.ID, ch)
		}
	}()
	return ch, nil
}

func (e *Engine) cancel(ctx context.Context, id engine.RequestID, ch chan<- engine.Event) {
	e.mu.Lock()
	e.cancelled = append(e.cancelled, id)
	e.mu.Unlock()
	ch <- engine.Event{Kind: engine.EventError, Err: ctx.Err()}
	if e.Cancels != nil {
		e.Cancels <- id
	}
}

// Stats reports Stat.
func (e *Engine) Stats() engine.Stats { return e.Stat }

// Cancelled reports whether the generation id saw its context end.
func (e *Engine) Cancelled(id engine.RequestID) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	return slices.Contains(e.cancelled, id)
}

// Submitted lists the generations accepted so far.
func (e *Engine) Submitted() []engine.Generation {
	e.mu.Lock()
	defer e.mu.Unlock()
	return slices.Clone(e.submitted)
}

var update = flag.Bool("update", false, "rewrite the golden files under testdata")

// Golden compares got with testdata/NAME.golden of the calling package's
// directory; with -update it rewrites the file first.
func Golden(t testing.TB, name string, got []byte) {
	t.Helper()
	path := filepath.Join("testdata", name+".golden")
	if *update {
		if err := os.MkdirAll("testdata", 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("%s differs from %s (rerun with -update after checking):\n%s", name, path, got)
	}
}
