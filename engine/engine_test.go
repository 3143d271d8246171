package engine_test

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/benbjohnson/clock"

	"github.com/goprovider/provider/engine"
	"github.com/goprovider/provider/engine/enginetest"
	"github.com/goprovider/provider/kvpool"
	"github.com/goprovider/provider/mlx"
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

// TestSlowReaderPausesOnlyItsRow: a stream nobody reads fills its buffer and
// its row is paused; another stream runs to the end meanwhile; once read,
// the paused stream resumes and yields what it yields alone.
func TestSlowReaderPausesOnlyItsRow(t *testing.T) {
	const buffer, maxTokens = 4, 40
	e, m := realEngine(t, engine.Options{StreamBuffer: buffer})
	ps := prompts(m)
	run := func(id string, p []int32) <-chan engine.Event {
		ch, err := e.Submit(context.Background(), engine.Generation{ID: engine.RequestID(id), Prompt: p, MaxTokens: maxTokens, TopLogprobs: -1})
		if err != nil {
			t.Fatal(err)
		}
		return ch
	}
	alone := collect(run("alone", ps[1]))
	slow := run("slow", ps[1])
	fast := collect(run("fast", ps[2]))
	if fast.last.Kind != engine.EventFinished || len(fast.tokens) != maxTokens {
		t.Fatalf("fast stream: %d tokens, last %+v", len(fast.tokens), fast.last)
	}
	// The fast row took maxTokens steps; the slow one could only fill its
	// buffer (buffer+2 slots) until one slot was left for its end event,
	// then sat paused.
	if n := len(slow); n != buffer+1 {
		t.Fatalf("slow stream holds %d events after the fast one finished, want %d (paused)", n, buffer+1)
	}
	if st := e.Stats(); st.Running != 1 {
		t.Fatalf("stats with the slow row paused: %+v", st)
	}
	got := collect(slow)
	if got.last.Kind != engine.EventFinished || fmt.Sprint(got.tokens) != fmt.Sprint(alone.tokens) {
		t.Fatalf("slow stream: %v (last %+v)\nalone: %v", got.tokens, got.last, alone.tokens)
	}
	if st := e.Stats(); st.KVUsed != 0 || st.Running != 0 {
		t.Fatalf("idle engine holds %+v", st)
	}
}

// panicking is a network whose Forward panics from its nth call on: a
// scripted failure of the step itself.
type panicking struct {
	model.Network
	calls, nth int
}

func (p *panicking) Forward(f *mlx.Frame, b *kvpool.Batch) mlx.Array {
	p.calls++
	if p.calls >= p.nth {
		panic("scripted failure")
	}
	return p.Network.Forward(f, b)
}

func TestPanickingStepStopsTheEngineLoudly(t *testing.T) {
	e, m := enginetest.StartWrapped(t, enginetest.Stories(), engine.Options{}, func(n model.Network) model.Network {
		return &panicking{Network: n, nth: 3}
	})
	if err := e.Err(); err != nil {
		t.Fatalf("Err of a running engine: %v", err)
	}
	ch, err := e.Submit(context.Background(), engine.Generation{ID: "p", Prompt: prompts(m)[1], MaxTokens: 10, TopLogprobs: -1})
	if err != nil {
		t.Fatal(err)
	}
	o := collect(ch)
	if o.last.Kind != engine.EventError || !errors.Is(o.last.Err, engine.ErrStepFailed) {
		t.Fatalf("last event %+v", o.last)
	}
	if len(o.tokens) != 2 {
		t.Fatalf("got %d tokens before the failing step, want 2", len(o.tokens))
	}
	if err := e.Err(); !errors.Is(err, engine.ErrStepFailed) {
		t.Fatalf("Err after the failure: %v", err)
	}
	if _, err := e.Submit(context.Background(), engine.Generation{ID: "q", Prompt: prompts(m)[1], MaxTokens: 1, TopLogprobs: -1}); err == nil {
		t.Fatal("a dead engine took a request")
	}
}

func TestErrAfterShutdown(t *testing.T) {
	e, _ := realEngine(t, engine.Options{})
	if err := e.Err(); err != nil {
		t.Fatalf("Err of a running engine: %v", err)
	}
	e.Shutdown(context.Background())
	if err := e.Err(); !errors.Is(err, engine.ErrShutdown) {
		t.Fatalf("Err after shutdown: %v", err)
	}
}

// TestIgnoreEOS: a generation that stops at an end-of-sequence token runs
// on past it, with the same tokens up to it, when it asks to ignore EOS.
func TestIgnoreEOS(t *testing.T) {
	e, m := enginetest.Start(t, enginetest.SmolLM2(), engine.Options{})
	// An instruct model's answer ends at its end-of-turn token.
	p := m.Tokenizer.Encode("<|im_start|>user\nSay hi.<|im_end|>\n<|im_start|>assistant\n", tokenizer.EncodeOptions{ParseSpecial: true})
	ch, err := e.Submit(context.Background(), engine.Generation{ID: "stops", Prompt: p, MaxTokens: 200, TopLogprobs: -1})
	if err != nil {
		t.Fatal(err)
	}
	stopped := collect(ch)
	if stopped.last.Reason != engine.FinishStop {
		t.Fatalf("the plain run ended with %+v, want a stop at EOS", stopped.last)
	}
	n := len(stopped.tokens) + 20
	ch, err = e.Submit(context.Background(), engine.Generation{ID: "runs on", Prompt: p, MaxTokens: n, TopLogprobs: -1, IgnoreEOS: true})
	if err != nil {
		t.Fatal(err)
	}
	on := collect(ch)
	if on.last.Reason != engine.FinishLength || len(on.tokens) != n {
		t.Fatalf("ignoring EOS: %d tokens ending %+v, want %d ending with length", len(on.tokens), on.last, n)
	}
	for i, tok := range stopped.tokens {
		if on.tokens[i] != tok {
			t.Fatalf("token %d: %d ignoring EOS, %d without", i, on.tokens[i], tok)
		}
	}
	if !slices.Contains(m.Config.EOS, on.tokens[len(stopped.tokens)]) {
		t.Fatalf("token %d is %d, not an EOS token %v", len(stopped.tokens), on.tokens[len(stopped.tokens)], m.Config.EOS)
	}
}

// failing is a network whose Forward fails its frame on its nth call: an
// MLX error of one step, which fails that step's rows, not the engine.
type failing struct {
	model.Network
	calls, nth int
}

var errScripted = errors.New("scripted kernel failure")

func (p *failing) Forward(f *mlx.Frame, b *kvpool.Batch) mlx.Array {
	p.calls++
	if p.calls == p.nth {
		f.Fail(errScripted)
		return mlx.Array{}
	}
	return p.Network.Forward(f, b)
}

func TestFailedStepKeepsItsCause(t *testing.T) {
	e, m := enginetest.StartWrapped(t, enginetest.Stories(), engine.Options{}, func(n model.Network) model.Network {
		return &failing{Network: n, nth: 3}
	})
	ch, err := e.Submit(context.Background(), engine.Generation{ID: "p", Prompt: prompts(m)[1], MaxTokens: 10, TopLogprobs: -1})
	if err != nil {
		t.Fatal(err)
	}
	o := collect(ch)
	if o.last.Kind != engine.EventError || !errors.Is(o.last.Err, engine.ErrStepFailed) || !errors.Is(o.last.Err, errScripted) {
		t.Fatalf("last event %+v: want the step failure and its cause", o.last)
	}
	if err := e.Err(); err != nil {
		t.Fatalf("one failed step stopped the engine: %v", err)
	}
	// The engine serves on.
	ch, err = e.Submit(context.Background(), engine.Generation{ID: "q", Prompt: prompts(m)[1], MaxTokens: 2, TopLogprobs: -1})
	if err != nil {
		t.Fatal(err)
	}
	if o := collect(ch); o.last.Kind != engine.EventFinished {
		t.Fatalf("after a failed step: %+v", o.last)
	}
}

// TestLeaseRunningAndQueued: with the one running row's reader asleep and
// a second row queued behind it, a lease later the running row fails with
// ErrStuck and the queued one with the retryable ErrQueueTimeout.
func TestLeaseRunningAndQueued(t *testing.T) {
	clk := clock.NewMock()
	e, m := realEngine(t, engine.Options{Sched: engine.Config{MaxConcurrent: 1}, StreamBuffer: 2, Clock: clk})
	p := prompts(m)[1]
	run, err := e.Submit(context.Background(), engine.Generation{ID: "run", Prompt: p, MaxTokens: 100, TopLogprobs: -1})
	if err != nil {
		t.Fatal(err)
	}
	queued, err := e.Submit(context.Background(), engine.Generation{ID: "queued", Prompt: p, MaxTokens: 4, TopLogprobs: -1})
	if err != nil {
		t.Fatal(err)
	}
	// The running row fills its buffer and pauses; the other waits.
	for {
		st := e.Stats()
		if st.Running == 1 && st.Waiting == 1 && len(run) == cap(run)-1 {
			break
		}
		runtime.Gosched()
	}
	if _, oldest := e.Progress(); !oldest.Equal(clk.Now()) {
		t.Fatalf("oldest wait %v, want the queued row's arrival %v", oldest, clk.Now())
	}
	clk.Add(121 * time.Second)
	// The loop may have been between its step and its idle timer: keep
	// the mock clock moving until the queued row has ended.
	for len(queued) == 0 {
		clk.Add(2 * time.Millisecond)
		runtime.Gosched()
	}
	_, last := enginetest.Collect(queued)
	if !errors.Is(last.Err, engine.ErrQueueTimeout) {
		t.Fatalf("queued row ended with %+v, want ErrQueueTimeout", last)
	}
	_, last = enginetest.Collect(run)
	if !errors.Is(last.Err, engine.ErrStuck) {
		t.Fatalf("running row ended with %+v, want ErrStuck", last)
	}
}
