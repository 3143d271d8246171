package main

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/benbjohnson/clock"

	"github.com/goprovider/provider/engine"
	"github.com/goprovider/provider/engine/enginetest"
	"github.com/goprovider/provider/family"
	"github.com/goprovider/provider/server"
	"github.com/goprovider/provider/slots"
)

const testMemory = int64(24) << 30

// slotRig is serve's loader, manager and server over a catalog, in process.
type slotRig struct {
	ld  *serveLoader
	mgr *slots.Manager
	srv *server.Server
}

func newSlotRig(t *testing.T, entries []catalogEntry, o slots.Options, clk clock.Clock, before func()) *slotRig {
	t.Helper()
	// Rows of these tests must not adopt or persist cached blocks.
	t.Setenv("PROVIDER_PREFIX_CACHE", "0")
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	ld := &serveLoader{device: "cpu", log: log, conc: 4, archs: family.Supported(), clock: clk, beforeStep: before,
		entries: map[string]catalogEntry{}, probed: map[string]slots.Info{}}
	for _, e := range entries {
		if _, err := os.Stat(e.path); err != nil {
			t.Fatalf("model %s missing (make setup installs it): %v", e.name, err)
		}
		ld.entries[e.name] = e
	}
	o.Memory, o.Logger, o.Clock = testMemory, log, clk
	mgr := slots.New(ld, o)
	srv := server.New(server.Options{Architectures: family.Supported(), Logger: log, Slots: serveSlots{mgr, ld}})
	ld.srv = srv
	t.Cleanup(func() {
		srv.Close()
		mgr.Close()
	})
	return &slotRig{ld, mgr, srv}
}

// instance returns the loaded model's slot generator.
func (r *slotRig) gen(t *testing.T, name string) *slotGen {
	t.Helper()
	for _, m := range r.srv.Models() {
		if m.Name == name {
			return m.Generator.(*slotGen)
		}
	}
	t.Fatalf("%s not served", name)
	return nil
}

// wantFormula checks the residents' grants against the re-slicing formula.
func (r *slotRig) wantFormula(t *testing.T, names ...string) {
	t.Helper()
	var held int64
	demands := make([]slots.Demand, len(names))
	for i, n := range names {
		info, err := r.ld.Probe(n)
		if err != nil {
			t.Fatal(err)
		}
		held += info.WeightBytes
		demands[i] = info.Demand
	}
	want, err := slots.Grants(slots.Budget(slots.MemoryCap(testMemory), held), demands, slots.Floor)
	if err != nil {
		t.Fatal(err)
	}
	got := r.mgr.Grants()
	if len(got) != len(names) {
		t.Fatalf("loaded %v, want %v", got, names)
	}
	for i, n := range names {
		if got[n] != want[i] {
			t.Errorf("grant of %s = %d, want %d", n, got[n], want[i])
		}
	}
}

func tokensOf(t *testing.T, ch <-chan engine.Event) []int32 {
	t.Helper()
	toks, last := enginetest.Collect(ch)
	if last.Kind != engine.EventFinished {
		t.Fatalf("generation ended with %+v", last)
	}
	return toks
}

// TestSlotsStreamSurvivesLoadsAndUnloads: three real models on one KV
// budget. A SmolLM2 stream, paused by its reader, stays in flight while
// stories260K and Gemma 3 load (shrinking its grant) and unload (growing
// it back), then finishes with exactly the tokens it generates alone.
func TestSlotsStreamSurvivesLoadsAndUnloads(t *testing.T) {
	rig := newSlotRig(t, []catalogEntry{
		{name: "stories", path: enginetest.Stories()},
		{name: "smollm2", path: enginetest.SmolLM2()},
		{name: "gemma3", path: enginetest.Gemma3()},
	}, slots.Options{}, nil, nil)
	ctx := context.Background()
	release, err := rig.mgr.Acquire(ctx, "smollm2")
	if err != nil {
		t.Fatal(err)
	}
	defer release()
	rig.wantFormula(t, "smollm2")
	g := rig.gen(t, "smollm2")
	prompt := []int32{1, 9690, 28, 2}
	gen := func(id string) engine.Generation {
		return engine.Generation{ID: engine.RequestID(id), Prompt: prompt, MaxTokens: 96, TopLogprobs: -1, IgnoreEOS: true}
	}
	ch, err := g.Submit(ctx, gen("solo"))
	if err != nil {
		t.Fatal(err)
	}
	solo := tokensOf(t, ch)

	ch, err = g.Submit(ctx, gen("across"))
	if err != nil {
		t.Fatal(err)
	}
	// Unread, the stream fills its buffer and pauses: still running.
	first := <-ch
	var held []func()
	for _, n := range []string{"stories", "gemma3"} {
		r, err := rig.mgr.Acquire(ctx, n)
		if err != nil {
			t.Fatalf("load %s: %v", n, err)
		}
		held = append(held, r)
	}
	rig.wantFormula(t, "stories", "smollm2", "gemma3")
	if st := g.Stats(); st.KVCapacity >= rig.mgr.Grants()["smollm2"]+1 || st.Running != 1 {
		t.Fatalf("smollm2 engine after the loads: %+v", st)
	}
	for _, r := range held {
		r()
	}
	for _, n := range []string{"stories", "gemma3"} {
		if err := rig.mgr.Unload(n); err != nil {
			t.Fatal(err)
		}
	}
	rig.wantFormula(t, "smollm2")
	if g.Stats().Running != 1 {
		t.Fatal("the stream ended before the loads and unloads were done")
	}
	across := append(first.Tokens, tokensOf(t, ch)...)
	if !slices.Equal(solo, across) {
		t.Fatalf("tokens across loads and unloads differ from solo:\nsolo   %v\nacross %v", solo, across)
	}
}

// TestSlotsWedgeRebuildsThenUnloads freezes an engine's steps with the
// step hook under a mock clock: 120 s on, the slot is rebuilt over its
// weights with the same grant and serves again; frozen again within the
// cooldown, it is unloaded.
func TestSlotsWedgeRebuildsThenUnloads(t *testing.T) {
	clk := clock.NewMock()
	var frozen atomic.Bool
	var mu sync.Mutex
	thaw := make(chan struct{})
	// entered tells the test a loop is held, so its step counter is still.
	entered := make(chan struct{}, 8)
	hook := func() {
		if !frozen.Load() {
			return
		}
		mu.Lock()
		c := thaw
		mu.Unlock()
		entered <- struct{}{}
		<-c
	}
	freeze := func() {
		mu.Lock()
		thaw = make(chan struct{})
		mu.Unlock()
		frozen.Store(true)
	}
	unfreeze := func() {
		frozen.Store(false)
		mu.Lock()
		close(thaw)
		mu.Unlock()
		for len(entered) > 0 {
			<-entered
		}
	}
	rig := newSlotRig(t, []catalogEntry{{name: "stories", path: enginetest.Stories()}}, slots.Options{}, clk, hook)
	t.Cleanup(func() {
		if frozen.Load() {
			unfreeze()
		}
	})
	ctx := context.Background()
	release, err := rig.mgr.Acquire(ctx, "stories")
	if err != nil {
		t.Fatal(err)
	}
	defer release()
	grant := rig.mgr.Grants()["stories"]
	hs := httptest.NewServer(rig.srv)
	defer hs.Close()
	complete := func() (int, string) {
		resp, err := http.Post(hs.URL+"/v1/completions", "application/json", strings.NewReader(`{"model": "stories", "prompt": "Once upon a time", "max_tokens": 8}`))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if code, body := complete(); code != 200 {
		t.Fatalf("before the wedge: %d %s", code, body)
	}
	old := rig.gen(t, "stories").cur()

	freeze()
	// A first request wakes the loop into the hook (it may have passed
	// the hook already and run that request's first step); once the loop
	// is held, a second request surely waits for admission, which is what
	// the detector times.
	first, err := old.Submit(ctx, engine.Generation{ID: "first", Prompt: []int32{1, 2, 3}, MaxTokens: 4, TopLogprobs: -1})
	if err != nil {
		t.Fatal(err)
	}
	<-entered
	waiting, err := old.Submit(ctx, engine.Generation{ID: "stuck", Prompt: []int32{1, 2, 3}, MaxTokens: 4, TopLogprobs: -1})
	if err != nil {
		t.Fatal(err)
	}
	rig.mgr.Tick()
	clk.Add(119 * time.Second)
	rig.mgr.Tick()
	if rig.gen(t, "stories").cur() != old {
		t.Fatal("rebuilt before 120 s")
	}
	if s := rig.mgr.Snapshots(); !s[0].WedgeSuspected {
		t.Fatalf("snapshot %+v: want the wedge suspected", s[0])
	}
	clk.Add(time.Second)
	rig.mgr.Tick()
	if rig.gen(t, "stories").cur() == old {
		t.Fatal("not rebuilt at 120 s")
	}
	if g := rig.mgr.Grants()["stories"]; g != grant {
		t.Fatalf("grant %d after the rebuild, want %d", g, grant)
	}
	unfreeze()
	// The old engine drains in the background: its queued rows end.
	for range first {
	}
	for range waiting {
	}
	// Its loop shares the step hook: until it has stopped, a freeze below
	// could hold it instead of the rebuilt engine, which would then run
	// the second stuck request and never wedge.
	for !errors.Is(old.Err(), engine.ErrShutdown) {
		time.Sleep(time.Millisecond)
	}
	if code, body := complete(); code != 200 {
		t.Fatalf("after the rebuild: %d %s", code, body)
	}

	// Frozen again within the cooldown: unloaded.
	freeze()
	cur := rig.gen(t, "stories").cur()
	if _, err := cur.Submit(ctx, engine.Generation{ID: "first2", Prompt: []int32{1, 2, 3}, MaxTokens: 4, TopLogprobs: -1}); err != nil {
		t.Fatal(err)
	}
	<-entered
	if _, err := cur.Submit(ctx, engine.Generation{ID: "stuck2", Prompt: []int32{1, 2, 3}, MaxTokens: 4, TopLogprobs: -1}); err != nil {
		t.Fatal(err)
	}
	// Held, the new engine's step counter is still: this observation sees
	// it moved since the rebuild, and times the stall from now.
	rig.mgr.Tick()
	release()
	clk.Add(120 * time.Second)
	done := make(chan struct{})
	go func() {
		rig.mgr.Tick()
		close(done)
	}()
	// Unloading drains the engine: its loop must run to finish.
	for len(rig.mgr.Grants()) != 0 {
		select {
		case <-done:
		default:
			time.Sleep(time.Millisecond)
			continue
		}
		break
	}
	unfreeze()
	<-done
	if _, ok := rig.mgr.Grants()["stories"]; ok {
		t.Fatal("a slot wedged twice within the cooldown stayed loaded")
	}
	if code, _ := complete(); code != 200 {
		// Loaded again on demand.
		t.Fatalf("a request after the unload got %d", code)
	}
}

// TestSlotsCorruptAndUnknownModels: a corrupt file in the catalog is
// refused with a closed reason and not advertised, an unknown name is
// unknown, and neither disturbs a model that loads.
func TestSlotsCorruptAndUnknownModels(t *testing.T) {
	bad := t.TempDir() + "/broken.gguf"
	if err := os.WriteFile(bad, []byte("GGUF this is not a model"), 0o600); err != nil {
		t.Fatal(err)
	}
	rig := newSlotRig(t, []catalogEntry{{name: "broken", path: bad}, {name: "stories", path: enginetest.Stories()}}, slots.Options{}, nil, nil)
	ctx := context.Background()
	if _, err := rig.mgr.Acquire(ctx, "broken"); slots.Reason(err) != "unsupported_model" {
		t.Fatalf("corrupt model: %v, want unsupported_model", err)
	}
	if _, err := rig.mgr.Acquire(ctx, "nope"); !errors.Is(err, slots.ErrUnknown) {
		t.Fatalf("unknown model: %v", err)
	}
	if got := (serveSlots{rig.mgr, rig.ld}).Available(); !slices.Equal(got, []string{"stories"}) {
		t.Fatalf("advertised %v, want only stories", got)
	}
	hs := httptest.NewServer(rig.srv)
	defer hs.Close()
	for _, c := range []struct {
		model string
		code  int
		want  string
	}{{"broken", 503, `"code":"unsupported_model"`}, {"nope", 404, `"code":"model_not_found"`}, {"stories", 200, `"finish_reason"`}} {
		resp, err := http.Post(hs.URL+"/v1/completions", "application/json", strings.NewReader(`{"model": "`+c.model+`", "prompt": "Once", "max_tokens": 2}`))
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != c.code || !strings.Contains(string(b), c.want) {
			t.Errorf("%s: %d %s, want %d with %s", c.model, resp.StatusCode, b, c.code, c.want)
		}
	}
}
