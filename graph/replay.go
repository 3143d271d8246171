package graph

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"time"

	"github.com/benbjohnson/clock"
	"github.com/vmihailenco/msgpack/v5"

	"github.com/goprovider/provider/engine"
	"github.com/goprovider/provider/stages"
)

// Exchange is one request of a trace and what came of it.
type Exchange struct {
	Input    stages.Input
	Received time.Time
	// MintedID is the id the graph minted for the request.
	MintedID string
	// Played is what the Generator did with the request.
	Played Played
	// Err is the text of Submit's error or of the stream's final error.
	Err string
	// Output is the response: the SSE events of a streamed request, or
	// the JSON body of another (none when Submit failed).
	Output [][]byte
}

// Trace is a recorded run: the exchanges in submission order and every
// stage step in the order it ran.
type Trace struct {
	Exchanges []Exchange
	Steps     []stages.Record
}

// EncodeTrace writes t as msgpack.
func EncodeTrace(w io.Writer, t Trace) error {
	if err := msgpack.NewEncoder(w).Encode(&t); err != nil {
		return fmt.Errorf("graph: encode trace: %w", err)
	}
	return nil
}

// DecodeTrace reads a trace EncodeTrace wrote.
func DecodeTrace(r io.Reader) (Trace, error) {
	var t Trace
	if err := msgpack.NewDecoder(r).Decode(&t); err != nil {
		return Trace{}, fmt.Errorf("graph: decode trace: %w", err)
	}
	return t, nil
}

// Harness runs requests through a graph one at a time on a mock clock and
// records everything a Trace holds: it stamps each request with its
// exchange's Received time, mints the exchange's id, records the stage
// steps, and records what each registered Generator streams.
type Harness struct {
	graph *Graph
	clock *clock.Mock
	steps stages.Log

	mu     sync.Mutex
	nextID string
	played map[engine.RequestID]Played
}

// NewHarness builds a graph from o, with the harness's clock, minting and
// recording in place of o's.
func NewHarness(o Options) *Harness {
	h := &Harness{clock: clock.NewMock(), played: map[engine.RequestID]Played{}}
	o.Clock, o.Parallelism, o.Recorder = h.clock, 1, &h.steps
	o.MintID = func() string {
		h.mu.Lock()
		defer h.mu.Unlock()
		return h.nextID
	}
	h.graph = New(o)
	return h
}

// Graph is the harness's graph.
func (h *Harness) Graph() *Graph { return h.graph }

// Register registers m with its Generator's events recorded.
func (h *Harness) Register(m Model) error {
	m.Generator = &recording{Generator: m.Generator, h: h}
	return h.graph.Register(m)
}

// Run submits ex.Input at ex.Received, reads the response to its end and
// returns ex with Played, Err and Output as they came out now.
func (h *Harness) Run(ex Exchange) Exchange {
	h.mu.Lock()
	h.nextID = ex.MintedID
	h.mu.Unlock()
	h.clock.Set(ex.Received)
	ex.Err, ex.Output = h.respond(ex.Input)
	id := engine.RequestID(ex.MintedID)
	if stages.ValidID(ex.Input.CallerID) {
		id = engine.RequestID(ex.Input.CallerID)
	}
	h.mu.Lock()
	ex.Played = h.played[id]
	delete(h.played, id)
	h.mu.Unlock()
	return ex
}

// respond submits in and reads its response to the end.
func (h *Harness) respond(in stages.Input) (errText string, output [][]byte) {
	s, err := h.graph.Submit(context.Background(), in)
	if err != nil {
		return err.Error(), nil
	}
	if s.Request.Params.Stream {
		f := stages.NewFramer(s.Request)
		for d := range s.Deltas {
			output = append(output, f.Frames(d)...)
			if d.Err != nil {
				errText = d.Err.Error()
			}
		}
		return errText, output
	}
	c := stages.NewCollector(s.Request)
	for d := range s.Deltas {
		c.Add(d)
	}
	if c.Err() != nil {
		return c.Err().Error(), nil
	}
	return "", [][]byte{c.JSON()}
}

// Steps returns the stage steps recorded so far.
func (h *Harness) Steps() []stages.Record { return h.steps.Records() }

// Close closes the graph.
func (h *Harness) Close() { h.graph.Close() }

// recording forwards a Generator's events and keeps a copy per request.
type recording struct {
	Generator
	h *Harness
}

func (r *recording) Submit(ctx context.Context, g engine.Generation) (<-chan engine.Event, error) {
	in, err := r.Generator.Submit(ctx, g)
	if err != nil {
		r.h.mu.Lock()
		r.h.played[g.ID] = Played{Refusal: err.Error()}
		r.h.mu.Unlock()
		return nil, err
	}
	out := make(chan engine.Event, cap(in))
	go func() {
		defer close(out)
		for ev := range in {
			r.h.mu.Lock()
			p := r.h.played[g.ID]
			p.Events = append(p.Events, stages.RecordEvent(ev))
			r.h.played[g.ID] = p
			r.h.mu.Unlock()
			out <- ev
		}
	}()
	return out, nil
}

// Played is what a Generator did with one generation: refused it (with
// that error text) or streamed Events.
type Played struct {
	Refusal string
	Events  []stages.EventRecord
}

// Script is a Generator that plays back what was recorded: a generation
// gets what was played under its id, whole, whatever its context does (the
// recorded events already show what cancellation did). A generation with
// nothing recorded is refused.
type Script map[engine.RequestID]Played

// Submit implements Generator.
func (s Script) Submit(_ context.Context, g engine.Generation) (<-chan engine.Event, error) {
	p, ok := s[g.ID]
	switch {
	case !ok:
		return nil, fmt.Errorf("graph: nothing recorded for the generation: %w", engine.ErrStepFailed)
	case p.Refusal != "":
		return nil, errors.New(p.Refusal)
	}
	ch := make(chan engine.Event, len(p.Events))
	for _, e := range p.Events {
		ch <- e.Event()
	}
	close(ch)
	return ch, nil
}

// Stats implements Generator.
func (Script) Stats() engine.Stats { return engine.Stats{} }

// Replay re-runs a trace: every model in models is served by a Script of
// the trace's recorded events, and every exchange is run again in order.
// A deterministic pipeline returns a trace equal to t.
func Replay(t Trace, models []stages.Model, o Options) (Trace, error) {
	script := Script{}
	for _, ex := range t.Exchanges {
		id := ex.MintedID
		if stages.ValidID(ex.Input.CallerID) {
			id = ex.Input.CallerID
		}
		if ex.Played.Refusal != "" || len(ex.Played.Events) > 0 {
			script[engine.RequestID(id)] = ex.Played
		}
	}
	h := NewHarness(o)
	defer h.Close()
	for _, m := range models {
		if err := h.Register(Model{Model: m, Generator: script}); err != nil {
			return Trace{}, err
		}
	}
	var out Trace
	for _, ex := range t.Exchanges {
		out.Exchanges = append(out.Exchanges, h.Run(ex))
	}
	out.Steps = h.Steps()
	return out, nil
}
