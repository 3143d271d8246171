package graph

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/goprovider/provider/engine"
	"github.com/goprovider/provider/stages"
	"github.com/goprovider/provider/stages/stagestest"
)

// The engine loop is a Generator.
var _ Generator = (*engine.Engine)(nil)

func newGraph(t *testing.T, o Options, gen Generator) *Graph {
	t.Helper()
	g := New(o)
	t.Cleanup(g.Close)
	if err := g.Register(Model{Model: storiesModel(t), Generator: gen}); err != nil {
		t.Fatal(err)
	}
	return g
}

func chatBody(extra string) []byte {
	return []byte(`{"model":"stories","messages":[{"role":"user","content":"Tell a story"}]` + extra + `}`)
}

func drain(s *Stream) (string, stages.Delta) {
	var text strings.Builder
	var last stages.Delta
	for d := range s.Deltas {
		text.WriteString(d.Text)
		last = d
	}
	return text.String(), last
}

func TestSubmit(t *testing.T) {
	fake := scripted(func(g engine.Generation) play {
		switch g.ID {
		case "full":
			return play{Refuse: engine.ErrQueueFull}
		case "held":
			return play{Events: tokens(g, story, 0), Hold: true}
		}
		return play{Events: tokens(g, story, engine.FinishLength)}
	})
	g := newGraph(t, Options{}, fake)
	tests := []struct {
		name   string
		id     string
		body   []byte
		text   string
		finish string
		err    error
	}{
		{"story", "a", chatBody(``), "Once upon a time, there was a little girl named Lily.", "length", nil},
		{"stop string cancels the row", "held", chatBody(`,"stop":"girl"`), "Once upon a time, there was a little ", "stop", nil},
		{"invalid", "b", chatBody(`,"n":0`), "", "", stages.ErrInvalid},
		{"unknown model", "c", []byte(`{"model":"nope","messages":[{"role":"user","content":"x"}]}`), "", "", stages.ErrUnknownModel},
		{"engine queue full", "full", chatBody(``), "", "", engine.ErrQueueFull},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s, err := g.Submit(context.Background(), stages.Input{Endpoint: stages.Chat, Body: tc.body, CallerID: tc.id})
			if tc.err != nil {
				if !errors.Is(err, tc.err) {
					t.Fatalf("err = %v, want %v", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			text, last := drain(s)
			if text != tc.text || last.Finish != tc.finish {
				t.Fatalf("got (%q, %q), want (%q, %q)", text, last.Finish, tc.text, tc.finish)
			}
			if s.Request.ID() != tc.id {
				t.Fatalf("id %q", s.Request.ID())
			}
		})
	}
	if !fake.Cancelled("held") {
		t.Fatal("the stop string did not cancel the row")
	}
}

func TestCallerCancelStopsTheRow(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		fake := scripted(func(g engine.Generation) play {
			return play{Events: tokens(g, story[:2], 0), Hold: true}
		})
		g := newGraph(t, Options{}, fake)
		ctx, hangUp := context.WithCancel(context.Background())
		s, err := g.Submit(ctx, stages.Input{Endpoint: stages.Chat, Body: chatBody(`,"stream":true`), CallerID: "r1"})
		if err != nil {
			t.Fatal(err)
		}
		<-s.Deltas
		hangUp()
		for range s.Deltas {
		}
		if !fake.Cancelled("r1") {
			t.Fatal("the engine never saw the cancellation")
		}
	})
}

// TestBackpressure offers more requests than the pipeline holds while the
// engine is stuck: the surplus waits IntakeWait and gets ErrBusy, and how
// many get in does not depend on how many were offered.
func TestBackpressure(t *testing.T) {
	admittedFor := func(offered int) int {
		var admitted int
		synctest.Test(t, func(t *testing.T) {
			gate := make(chan struct{})
			fake := &stagestest.Engine{Gate: gate, Script: func(g engine.Generation) play {
				return play{Events: tokens(g, story[:1], engine.FinishLength)}
			}}
			g := New(Options{Intake: 2, IntakeWait: 2 * time.Second})
			defer g.Close()
			if err := g.Register(Model{Model: storiesModel(t), Generator: fake}); err != nil {
				t.Fatal(err)
			}
			start := time.Now()
			var wg sync.WaitGroup
			var mu sync.Mutex
			busy := 0
			for i := range offered {
				wg.Go(func() {
					s, err := g.Submit(context.Background(), stages.Input{Endpoint: stages.Chat, Body: chatBody(``), CallerID: fmt.Sprint(i)})
					mu.Lock()
					defer mu.Unlock()
					if errors.Is(err, ErrBusy) {
						busy++
						if waited := time.Since(start); waited != 2*time.Second {
							t.Errorf("busy after %v", waited)
						}
						return
					}
					if err != nil {
						t.Errorf("submit: %v", err)
						return
					}
					if time.Since(start) < 2*time.Second {
						t.Error("admitted while the engine was stuck")
					}
					drain(s)
				})
			}
			time.Sleep(3 * time.Second) // fake time: every waiter has timed out
			synctest.Wait()
			mu.Lock()
			admitted = offered - busy
			mu.Unlock()
			close(gate)
			wg.Wait()
		})
		return admitted
	}
	small, large := admittedFor(40), admittedFor(80)
	t.Logf("admitted %d of 40, %d of 80", small, large)
	if small != large || small >= 40 {
		t.Fatalf("admitted %d of 40 and %d of 80: the pipeline should hold a fixed number", small, large)
	}
}

func TestClosed(t *testing.T) {
	g := New(Options{})
	g.Close()
	if _, err := g.Submit(context.Background(), stages.Input{Endpoint: stages.Chat, Body: chatBody(``)}); !errors.Is(err, ErrClosed) {
		t.Fatalf("err = %v, want ErrClosed", err)
	}
	g.Close()
}

func TestRegister(t *testing.T) {
	g := New(Options{})
	defer g.Close()
	m := Model{Model: storiesModel(t), Generator: scripted(nil)}
	if err := g.Register(m); err != nil {
		t.Fatal(err)
	}
	if err := g.Register(m); !errors.Is(err, ErrDuplicateModel) {
		t.Fatalf("err = %v", err)
	}
	if !g.Unregister("stories") || g.Unregister("stories") {
		t.Fatal("unregister")
	}
	if _, ok := g.Lookup("stories"); ok || len(g.Models()) != 0 {
		t.Fatal("still registered")
	}
}
