package server

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/benbjohnson/clock"

	"github.com/goprovider/provider/cache"
	"github.com/goprovider/provider/family"
	"github.com/goprovider/provider/grammar"
	"github.com/goprovider/provider/graph"
	"github.com/goprovider/provider/jinja"
	"github.com/goprovider/provider/slots"
	"github.com/goprovider/provider/stages"
	"github.com/goprovider/provider/tokenizer"
)

// DefaultMaxBodyBytes bounds a request body (HTTP 413 above it).
const DefaultMaxBodyBytes = 32 << 20

// Options configure a Server. Zero fields take the documented defaults.
type Options struct {
	// Architectures lists the architectures that have an adapter
	// (family.Supported()); Register refuses any other. Nil accepts every
	// architecture.
	Architectures []string
	// MaxBodyBytes bounds a request body (default 32 MiB).
	MaxBodyBytes int64
	// BodyBudget bounds the bytes of generation request bodies read and
	// parsed at once (default 256 MiB); a body waits for its share at most
	// the intake wait, then gets 429.
	BodyBudget int64
	// LargeBodyRate bounds how fast bodies of 1 MiB and more are read, all
	// together, in bytes a second (default 64 MiB/s; after a quiet spell
	// the first 8 MiB are read at once); negative: no bound.
	LargeBodyRate int64
	// Logger receives one record per request, through the telemetry
	// allowlist; nil is slog.Default().
	Logger *slog.Logger
	// Graph configures the request pipeline: intake bound and wait,
	// clock, id minting, recording. Its Clock also times the metrics.
	Graph graph.Options
	// Slots, when set, loads models on demand: every generation request
	// holds its model's slot from before its pipeline run until its
	// response ends, and /v1/models lists what Slots can load too.
	Slots Slots
}

// Slots loads models on demand (package slots' Manager, through serve).
type Slots interface {
	// Acquire makes sure the named model is served and holds it until
	// release; an unknown name is an error wrapping slots.ErrUnknown.
	Acquire(ctx context.Context, name string) (release func(), err error)
	// Available lists the models Acquire can load.
	Available() []string
	// Snapshots is every loaded slot's capacity, for /metrics.
	Snapshots() []slots.Snapshot
}

// Model is a model to serve.
type Model struct {
	Name string
	// Architecture is the config model_type; it must have an adapter.
	Architecture string
	Tokenizer    *tokenizer.Tokenizer
	// ChatTemplate is the Jinja chat template source; "" refuses chat
	// requests for this model (no silent fallback format), except for an
	// architecture whose format is fixed: it gets its family's template
	// (family.Family's ChatTemplate; gpt-oss's is harmony's).
	ChatTemplate string
	// EOS lists the tokens that end generation.
	EOS []int32
	// ContextLength bounds prompt plus generation; 0 means unknown.
	ContextLength int
	Generator     graph.Generator
	// Vision is the model's vision tower; nil serves text only and refuses
	// media (400 unsupported_media).
	Vision stages.Vision
}

// Liveness is implemented by Generators that can stop serving: Err is nil
// while the engine runs and says why once it has stopped. /health reports
// 503 while any registered engine's Err is not nil.
type Liveness interface {
	Err() error
}

// ErrUnsupportedArchitecture: Register was given an architecture without
// an adapter.
var ErrUnsupportedArchitecture = errors.New("server: architecture has no adapter")

// Server is the HTTP edge. It is an http.Handler.
type Server struct {
	graph   *graph.Graph
	clk     clock.Clock
	log     *slog.Logger
	archs   []string
	slots   Slots
	maxBody int64
	metrics *metrics
	mux     *http.ServeMux

	started time.Time // when a model not yet loaded says it was created

	// intake holds a place for each generation request from before its
	// body is read until the pipeline has admitted or refused it.
	intake     chan struct{}
	intakeWait time.Duration
	bodies     *bodyBudget
	pace       *pacer // large bodies' read rate; nil: unbounded
	// draining refuses new generation requests (503) while streams finish.
	draining atomic.Bool

	mu      sync.Mutex
	loading bool
	created map[string]time.Time
}

// New builds a server and starts its pipeline; Close stops it.
func New(o Options) *Server {
	if o.MaxBodyBytes <= 0 {
		o.MaxBodyBytes = DefaultMaxBodyBytes
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.Graph.Clock == nil {
		o.Graph.Clock = clock.New()
	}
	s := &Server{
		graph:   graph.New(o.Graph),
		clk:     o.Graph.Clock,
		log:     slog.New(newAllowlist(o.Logger.Handler())),
		archs:   o.Architectures,
		slots:   o.Slots,
		maxBody: o.MaxBodyBytes,
		metrics: newMetrics(),
		mux:     http.NewServeMux(),
		created: map[string]time.Time{},
		started: o.Graph.Clock.Now(),
	}
	places, wait := o.Graph.Intake, o.Graph.IntakeWait
	if places <= 0 {
		places = graph.DefaultIntake
	}
	if wait == 0 {
		wait = graph.DefaultIntakeWait
	}
	s.intake, s.intakeWait = make(chan struct{}, places), wait
	if o.BodyBudget <= 0 {
		o.BodyBudget = DefaultBodyBudget
	}
	s.bodies = newBodyBudget(max(o.BodyBudget, o.MaxBodyBytes), s.clk, wait)
	if o.LargeBodyRate == 0 {
		o.LargeBodyRate = DefaultLargeBodyRate
	}
	if o.LargeBodyRate > 0 {
		s.pace = newPacer(s.clk, o.LargeBodyRate)
	}
	s.mux.HandleFunc("POST /v1/chat/completions", s.generate(stages.Chat))
	s.mux.HandleFunc("POST /v1/completions", s.generate(stages.Completion))
	s.mux.HandleFunc("GET /v1/models", s.listModels)
	s.mux.HandleFunc("GET /v1/models/{model...}", s.getModel)
	s.mux.HandleFunc("GET /health", s.health)
	s.mux.HandleFunc("GET /metrics", s.serveMetrics)
	s.mux.HandleFunc("POST /tokenize", s.tokenize)
	s.mux.HandleFunc("POST /detokenize", s.detokenize)
	s.mux.HandleFunc("POST /apply-template", s.applyTemplate)
	for _, p := range []string{"/v1/chat/completions", "/v1/completions", "/v1/models", "/health", "/metrics"} {
		s.mux.HandleFunc(p, s.refuse(errMethod))
	}
	s.routeDashboard()
	s.mux.HandleFunc("/", s.refuse(errNotFound))
	return s
}

// ServeHTTP implements http.Handler.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) { s.mux.ServeHTTP(w, r) }

// Close stops taking requests and waits for the pipeline to empty;
// admitted generations keep streaming until their engines end them.
func (s *Server) Close() { s.graph.Close() }

// Register starts serving a model. It refuses architectures without an
// adapter and chat templates that do not parse. A model's chat output goes
// through its family's parsers when it has them (gpt-oss: harmony's, for
// reasoning_content, reasoning tokens and tool calls; its vocabulary must
// have harmony's structure tokens). Every model's tool dialect (the syntax
// of its calls, what its template renders of tools) is found once here
// (stages.DetectTools, from its family's syntax).
func (s *Server) Register(m Model) error {
	if s.archs != nil && !slices.Contains(s.archs, m.Architecture) {
		return fmt.Errorf("%w: %q", ErrUnsupportedArchitecture, m.Architecture)
	}
	// An architecture outside the registry (nil Architectures lets any
	// through) gets the zero Family: plain text, no default template.
	fam, _ := family.For(m.Architecture)
	var out family.Output
	if fam.Output != nil {
		o, err := fam.Output(m.Tokenizer)
		if err != nil {
			return fmt.Errorf("server: register %s: %w", m.Name, err)
		}
		out = o
	}
	if m.ChatTemplate == "" {
		m.ChatTemplate = fam.ChatTemplate
	}
	var tmpl *jinja.Template
	if m.ChatTemplate != "" {
		t, err := jinja.Parse(m.ChatTemplate)
		if err != nil {
			return fmt.Errorf("server: register %s: chat template: %w", m.Name, err)
		}
		tmpl = t
	}
	// Structured outputs: a vocabulary the grammar engine refuses leaves
	// the model without them (JSON response formats are then 400s).
	var grammars stages.Grammars
	if c, err := grammar.NewCompiler(m.Tokenizer, m.EOS); err == nil {
		grammars = c
	} else {
		s.log.Warn("structured outputs off: the grammar engine refused the vocabulary", "model", m.Name)
	}
	err := s.graph.Register(graph.Model{
		Model: stages.Model{
			Name:            m.Name,
			Architecture:    m.Architecture,
			Tokenizer:       m.Tokenizer,
			ChatTemplate:    tmpl,
			EOS:             slices.Clone(m.EOS),
			ContextLength:   m.ContextLength,
			NewOutputParser: out.Parser,
			Tools:           stages.DetectTools(fam.ToolSyntax, m.ChatTemplate, tmpl),
			NewToolParser:   out.ToolParser,
			Vision:          m.Vision,
			Grammars:        grammars,
		},
		Generator: m.Generator,
	})
	if err != nil {
		return fmt.Errorf("server: register %s: %w", m.Name, err)
	}
	s.mu.Lock()
	s.created[m.Name] = s.clk.Now()
	s.mu.Unlock()
	s.log.Info("model registered", "model", m.Name, "architecture", m.Architecture)
	return nil
}

// Unregister stops serving a model; its admitted generations continue.
func (s *Server) Unregister(name string) bool {
	s.mu.Lock()
	delete(s.created, name)
	s.mu.Unlock()
	return s.graph.Unregister(name)
}

// takeIntake takes a place in the intake, waiting at most the intake wait
// (graph.ErrBusy: 429); release gives it back (once).
func (s *Server) takeIntake(ctx context.Context) (release func(), err error) {
	select {
	case s.intake <- struct{}{}:
	default:
		if s.intakeWait < 0 {
			return nil, graph.ErrBusy
		}
		t := s.clk.Timer(s.intakeWait)
		defer t.Stop()
		select {
		case s.intake <- struct{}{}:
		case <-t.C:
			return nil, graph.ErrBusy
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	var once sync.Once
	return func() { once.Do(func() { <-s.intake }) }, nil
}

// SetDraining marks the server as draining (or not): generation requests
// get 503 draining while running streams finish, and /health reports 503.
func (s *Server) SetDraining(on bool) { s.draining.Store(on) }

// SetLoading marks the server as loading (or done loading): /health
// reports 503 meanwhile.
func (s *Server) SetLoading(loading bool) {
	s.mu.Lock()
	s.loading = loading
	s.mu.Unlock()
}

func (s *Server) refuse(err error) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		writeError(w, classify(err))
	}
}

func writeJSON(w http.ResponseWriter, status int, body []byte) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(body)
}

func writeError(w http.ResponseWriter, o outcome) { writeJSON(w, o.status, o.body()) }

type modelJSON struct {
	ID      string `json:"id"`
	Object  string `json:"object"`
	Created int64  `json:"created"`
	OwnedBy string `json:"owned_by"`
}

func (s *Server) modelJSON(name string) modelJSON {
	s.mu.Lock()
	created, ok := s.created[name]
	s.mu.Unlock()
	if !ok {
		created = s.started
	}
	return modelJSON{ID: name, Object: "model", Created: created.Unix(), OwnedBy: "provider"}
}

func (s *Server) listModels(w http.ResponseWriter, _ *http.Request) {
	list := struct {
		Object string      `json:"object"`
		Data   []modelJSON `json:"data"`
	}{Object: "list", Data: []modelJSON{}}
	seen := map[string]bool{}
	for _, m := range s.graph.Models() {
		list.Data = append(list.Data, s.modelJSON(m.Name))
		seen[m.Name] = true
	}
	if s.slots != nil {
		for _, name := range s.slots.Available() {
			if !seen[name] {
				list.Data = append(list.Data, s.modelJSON(name))
				seen[name] = true
			}
		}
	}
	b, _ := json.Marshal(list)
	writeJSON(w, http.StatusOK, b)
}

func (s *Server) getModel(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("model")
	if _, ok := s.graph.Lookup(name); !ok && (s.slots == nil || !slices.Contains(s.slots.Available(), name)) {
		writeError(w, classify(stages.ErrUnknownModel))
		return
	}
	b, _ := json.Marshal(s.modelJSON(name))
	writeJSON(w, http.StatusOK, b)
}

// health is 200 when at least one model is registered, the server is not
// loading and no engine has stopped.
func (s *Server) health(w http.ResponseWriter, _ *http.Request) {
	s.mu.Lock()
	loading := s.loading
	s.mu.Unlock()
	models := s.graph.Models()
	status, reason := "ok", ""
	switch {
	case s.draining.Load():
		status = "draining"
	case loading || (len(models) == 0 && s.slots == nil):
		status = "loading"
	default:
		for _, m := range models {
			if l, ok := m.Generator.(Liveness); ok && l.Err() != nil {
				// The reason is a closed refusal code, when the error
				// has one (a lost tensor-parallel rank: rank_lost).
				status, reason = "unavailable", slots.Reason(l.Err())
				break
			}
		}
	}
	code := http.StatusOK
	if status != "ok" {
		code = http.StatusServiceUnavailable
	}
	body := map[string]string{"status": status}
	if reason != "" {
		body["reason"] = reason
	}
	b, _ := json.Marshal(body)
	writeJSON(w, code, b)
}

func (s *Server) serveMetrics(w http.ResponseWriter, _ *http.Request) {
	var engines []modelStats
	for _, m := range s.graph.Models() {
		ms := modelStats{name: m.Name, stats: m.Generator.Stats()}
		if c, ok := m.Generator.(prefixCacher); ok {
			ms.cache, ms.cacheOn = c.CacheStats()
		}
		engines = append(engines, ms)
	}
	var snaps []slots.Snapshot
	if s.slots != nil {
		snaps = s.slots.Snapshots()
	}
	w.Header().Set("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
	_ = s.metrics.write(w, engines, snaps)
}

// Models lists the served models with their generators.
func (s *Server) Models() []graph.Model { return s.graph.Models() }

// CacheStats returns the prefix cache counters of every served model whose
// cache is on.
func (s *Server) CacheStats() map[string]cache.Stats {
	out := map[string]cache.Stats{}
	for _, m := range s.graph.Models() {
		if c, ok := m.Generator.(prefixCacher); ok {
			if st, on := c.CacheStats(); on {
				out[m.Name] = st
			}
		}
	}
	return out
}
