package graph

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/benbjohnson/clock"
	streams "github.com/reugn/go-streams"
	"github.com/reugn/go-streams/extension"
	"github.com/reugn/go-streams/flow"

	"github.com/goprovider/provider/engine"
	"github.com/goprovider/provider/stages"
)

// Generator is one model's engine as the graph uses it. Submit must not
// block for long; it returns the generation's events (deltas, then exactly
// one EventFinished or EventError, then close) or why it refused.
// Cancelling ctx must end the stream within one step with an EventError
// carrying ctx's error. Stats must be safe to call at any time.
type Generator interface {
	Submit(ctx context.Context, g engine.Generation) (<-chan engine.Event, error)
	Stats() engine.Stats
}

// Model is a served model: what the stages need, and its engine.
type Model struct {
	stages.Model
	Generator Generator
}

// Defaults of Options.
const (
	DefaultIntake     = 64
	DefaultIntakeWait = 2 * time.Second
)

// Options configure a Graph. Zero fields take the documented defaults.
type Options struct {
	// Clock stamps Request.Received and times the intake wait; nil is the
	// wall clock.
	Clock clock.Clock
	// Intake is the number of requests that may wait for the first stage
	// (default 64).
	Intake int
	// IntakeWait is how long a request waits for room in a full intake
	// before ErrBusy (default 2 s; negative: it does not wait).
	IntakeWait time.Duration
	// Parallelism is the goroutines per stage (default 1, which keeps
	// requests in order; more reorders them).
	Parallelism int
	// MintID returns a fresh request id for requests without a usable one
	// of their own; nil draws 96 random bits.
	MintID func() string
	// Recorder, when set, records every stage step and token path.
	Recorder stages.Recorder
	// DeltaBuffer is each stream's Delta channel capacity (0: the
	// stages default).
	DeltaBuffer int
}

// Errors of the graph itself.
var (
	// ErrBusy: the intake stayed full for the whole wait (HTTP 429).
	ErrBusy = errors.New("graph: intake full")
	// ErrClosed: the graph no longer takes requests (HTTP 503).
	ErrClosed = errors.New("graph: closed")
	// ErrDuplicateModel: a model of that name is already registered.
	ErrDuplicateModel = errors.New("graph: model already registered")
)

// Graph runs the request pipeline for every registered model.
//
// Lock order: mu (intake state) before models; neither is held while a
// stage or a Generator runs.
type Graph struct {
	clk    clock.Clock
	wait   time.Duration
	mint   func() string
	rec    stages.Recorder
	detok  stages.Detokenizer
	intake chan any
	done   chan struct{}

	mu     sync.RWMutex
	closed bool

	modelsMu sync.RWMutex
	models   map[string]*Model
}

// New builds a graph and starts its stages.
func New(o Options) *Graph {
	if o.Clock == nil {
		o.Clock = clock.New()
	}
	if o.Intake <= 0 {
		o.Intake = DefaultIntake
	}
	if o.IntakeWait == 0 {
		o.IntakeWait = DefaultIntakeWait
	}
	if o.Parallelism <= 0 {
		o.Parallelism = 1
	}
	if o.MintID == nil {
		o.MintID = randomID
	}
	g := &Graph{
		clk:    o.Clock,
		wait:   o.IntakeWait,
		mint:   o.MintID,
		rec:    o.Recorder,
		detok:  stages.Detokenizer{Buffer: o.DeltaBuffer, Recorder: o.Recorder},
		intake: make(chan any, o.Intake),
		done:   make(chan struct{}),
		models: map[string]*Model{},
	}
	var f streams.Flow
	for i, s := range Pipeline(g) {
		step := Flow(s, o.Parallelism, o.Recorder)
		if i == 0 {
			extension.NewChanSource(g.intake).Via(step)
		} else {
			f.Via(step)
		}
		f = step
	}
	t := &terminal{in: make(chan any), done: make(chan struct{}), admit: g.admit}
	go t.run()
	go func() {
		f.To(t)
		close(g.done)
	}()
	return g
}

// Pipeline lists the request stages in order, resolving models through
// cat.
func Pipeline(cat stages.Catalog) []stages.Stage {
	return []stages.Stage{
		stages.Parse{Models: cat},
		stages.MediaDecode{},
		stages.Template{},
		stages.VisionTower{},
		stages.SpanCarve{},
		stages.Admit{},
	}
}

// Flow makes a stage a go-streams Flow of *stages.Envelope elements.
func Flow(s stages.Stage, parallelism int, rec stages.Recorder) streams.Flow {
	return flow.NewMap(func(env *stages.Envelope) *stages.Envelope {
		return stages.Run(s, env, rec)
	}, parallelism)
}

// terminal is the pipeline's sink: it submits and replies.
type terminal struct {
	in    chan any
	done  chan struct{}
	admit func(*stages.Envelope)
}

func (t *terminal) In() chan<- any   { return t.in }
func (t *terminal) AwaitCompletion() { <-t.done }

func (t *terminal) run() {
	defer close(t.done)
	for x := range t.in {
		env := x.(*stages.Envelope)
		t.admit(env)
		env.Reply <- env
	}
}

// admit submits an envelope that made it through the stages: one
// generation per choice, each with its own cancellation; a refusal of any
// refuses the request.
func (g *Graph) admit(env *stages.Envelope) {
	if env.Err == nil {
		env.Err = env.Ctx.Err()
	}
	if env.Err != nil {
		return
	}
	gen, ok := g.generator(env.Req.Model)
	if !ok {
		env.Err = stages.ErrUnknownModel
		return
	}
	adm := &stages.Admitted{}
	for i, g := range append([]*engine.Generation{env.Req.Generation}, env.Req.More...) {
		ctx, stop := context.WithCancel(env.Ctx)
		events, err := gen.Submit(ctx, *g)
		if err != nil {
			stop()
			// The choices already submitted are cancelled and read to
			// their end.
			for _, a := range append([]stages.Admitted{*adm}, adm.More...)[:i] {
				a.Stop()
				go func() {
					for range a.Events {
					}
				}()
			}
			env.Err = fmt.Errorf("submit: %w", err)
			return
		}
		if i == 0 {
			adm.Events, adm.Stop = events, stop
		} else {
			adm.More = append(adm.More, stages.Admitted{Events: events, Stop: stop})
		}
	}
	env.Admitted = adm
}

// Stream is an admitted request's response in the making.
type Stream struct {
	// Request is the request as the stages left it.
	Request *stages.Request
	// Deltas delivers content, then one final Delta, then closes.
	Deltas <-chan stages.Delta
}

// Submit runs one request through the pipeline. It fails with ErrBusy when
// the intake stayed full for the whole wait, ErrClosed after Close, ctx's
// error when ctx ends first, or the first stage's or the Generator's
// error. Cancelling ctx later cancels the generation.
func (g *Graph) Submit(ctx context.Context, in stages.Input) (*Stream, error) {
	reply := make(chan *stages.Envelope, 1)
	env := &stages.Envelope{Ctx: ctx, Reply: reply}
	env.Req = stages.Request{Input: in, Received: g.clk.Now(), MintedID: g.mint()}
	if err := g.enqueue(ctx, env); err != nil {
		return nil, err
	}
	env = <-reply
	if env.Err != nil {
		return nil, env.Err
	}
	deltas := g.detok.Run(ctx, &env.Req, env.Admitted)
	if err := ctx.Err(); err != nil {
		// The Detokenizer drains the cancelled generation.
		return nil, err
	}
	return &Stream{Request: &env.Req, Deltas: deltas}, nil
}

func (g *Graph) enqueue(ctx context.Context, env *stages.Envelope) error {
	g.mu.RLock()
	defer g.mu.RUnlock()
	if g.closed {
		return ErrClosed
	}
	select {
	case g.intake <- env:
		return nil
	default:
	}
	if g.wait < 0 {
		return ErrBusy
	}
	t := g.clk.Timer(g.wait)
	defer t.Stop()
	select {
	case g.intake <- env:
		return nil
	case <-t.C:
		return ErrBusy
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Close stops taking requests and waits until every request already taken
// in has been replied to. Streams already admitted keep running.
func (g *Graph) Close() {
	g.mu.Lock()
	if !g.closed {
		g.closed = true
		close(g.intake)
	}
	g.mu.Unlock()
	<-g.done
}

// Register adds a model.
func (g *Graph) Register(m Model) error {
	if m.Name == "" || m.Tokenizer == nil || m.Generator == nil {
		return fmt.Errorf("graph: register: model needs a name, a tokenizer and a generator")
	}
	g.modelsMu.Lock()
	defer g.modelsMu.Unlock()
	if _, ok := g.models[m.Name]; ok {
		return ErrDuplicateModel
	}
	g.models[m.Name] = &m
	return nil
}

// Unregister removes a model; requests already admitted keep running.
func (g *Graph) Unregister(name string) bool {
	g.modelsMu.Lock()
	defer g.modelsMu.Unlock()
	_, ok := g.models[name]
	delete(g.models, name)
	return ok
}

// Lookup implements stages.Catalog.
func (g *Graph) Lookup(name string) (*stages.Model, bool) {
	g.modelsMu.RLock()
	defer g.modelsMu.RUnlock()
	m, ok := g.models[name]
	if !ok {
		return nil, false
	}
	return &m.Model, true
}

// Models lists the registered models by name.
func (g *Graph) Models() []Model {
	g.modelsMu.RLock()
	out := make([]Model, 0, len(g.models))
	for _, m := range g.models {
		out = append(out, *m)
	}
	g.modelsMu.RUnlock()
	slices.SortFunc(out, func(a, b Model) int { return strings.Compare(a.Name, b.Name) })
	return out
}

// generator returns the engine of the registration m came from; a model
// unregistered (or replaced) since Parse resolved it has none.
func (g *Graph) generator(m *stages.Model) (Generator, bool) {
	g.modelsMu.RLock()
	defer g.modelsMu.RUnlock()
	r, ok := g.models[m.Name]
	if !ok || &r.Model != m {
		return nil, false
	}
	return r.Generator, true
}

func randomID() string {
	var b [12]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}
