package engine

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"math/bits"
	"slices"
	"sync"
	"time"

	"github.com/benbjohnson/clock"

	"github.com/goprovider/provider/cache"
	"github.com/goprovider/provider/kvpool"
	"github.com/goprovider/provider/mlx"
	"github.com/goprovider/provider/model"
	"github.com/goprovider/provider/sample"
)

// Options configure an Engine. Zero fields take the documented defaults.
type Options struct {
	Sched Config
	// KVCapacity is the KV byte grant of this model, the prefix cache's
	// budget included.
	KVCapacity int64
	// Prefix configures the prefix cache; a zero Budget leaves it off.
	Prefix PrefixOptions
	// StepTimeout marks a step as slow (default 30 s). A step that returns
	// late still counts: its rows made progress. A step that never returns
	// is the liveness monitor's concern, not the loop's.
	StepTimeout time.Duration
	// Lease fails a running row that made no prefill or decode progress
	// for this long (default 120 s) with ErrStuck; a row still waiting for
	// admission that long fails with the retryable ErrQueueTimeout.
	Lease time.Duration
	// StreamBuffer is how many events a generation's stream holds before
	// its row is paused until the reader catches up (default 64). A reader
	// that takes nothing for a whole Lease loses its row.
	StreamBuffer int
	// Clock is injected for tests; nil is the wall clock.
	Clock clock.Clock
	// Ahead builds decode steps ahead of the read of the step before (see
	// ahead.go and doc.go). The server turns it on for a GPU. A prefill
	// chunk that scatters its keys into the pool while a step built ahead is
	// queued still updates the pool in place: a traced server at c=16 shows
	// no copy of it (bench/results/step-ahead-nvidia-h100-2026-12-06).
	Ahead bool
	// Log, when set, gets a warning for every step that takes a second or
	// more and over 50 ms a token, with its shape and where its time went
	// (a kernel compiled on first use, a stall of the device).
	Log *slog.Logger
	// BeforeStep, when set, runs on the loop's goroutine (not the MLX
	// thread) before every step: tests freeze an engine with it.
	BeforeStep func()
}

func (o Options) withDefaults() Options {
	if o.StepTimeout <= 0 {
		o.StepTimeout = 30 * time.Second
	}
	if o.Lease <= 0 {
		o.Lease = 120 * time.Second
	}
	if o.StreamBuffer <= 0 {
		o.StreamBuffer = 64
	}
	if o.Clock == nil {
		o.Clock = clock.New()
	}
	return o
}

// PrefixOptions configure the prefix cache (package cache's RAM tier).
type PrefixOptions struct {
	// Budget bounds the bytes of cached blocks no running row holds. It is
	// carved out of KVCapacity: rows are admitted against the rest.
	Budget int64
	// Namespace keys the cache to the model's weights and KV layout.
	Namespace cache.Namespace
	// Disk, when set, is the SSD tier: every block the RAM tier registers
	// is written behind, and a prompt's blocks missing from RAM are read
	// back at Submit. The caller opens it and closes it after Shutdown.
	Disk *cache.Disk
}

// LayoutOf derives the ledger's KV layout from a model's layer kinds and
// activation dtype, charging whole blocks of the KV pool.
func LayoutOf(c model.Config) KVLayout {
	l := KVLayout{Layers: make([]LayerKV, len(c.Kinds)), Block: kvpool.BlockTokens}
	for i, k := range c.Kinds {
		l.Layers[i] = LayerKV{KVHeads: k.KVHeads, HeadDim: k.HeadDim, ElemBytes: c.ActDType.Size(), Window: k.Window, SharedFrom: k.SharedFrom}
	}
	return l
}

// live is the engine loop's state of one generation.
type live struct {
	gen     Generation
	ctx     context.Context
	events  chan Event
	seq     []int32 // prompt followed by every sampled token
	emitted int     // completion tokens delivered
	cached  int     // tokens adopted from the prefix cache at admission
	failed  error   // why the row's last step failed
	spans   []kvpool.Span
	// staged are blocks of the prompt read from the SSD tier at Submit,
	// put in the pool and indexed at admission.
	staged   []stagedBlock
	kv       *kvpool.Seq // nil until the row first runs, and after preemption
	sampler  *sample.Sampler
	progress time.Time // last admission, prefill or decode progress
	// con is the row's grammar constraint, nil without one. Its mask for
	// the next token is computed on another goroutine from the moment
	// the last token is accepted, so it overlaps the next forward pass:
	// maskReady is closed once mask and maskErr are set.
	con       Constraint
	mask      []uint32
	maskErr   error
	maskReady chan struct{}
	done      bool
	// unwatch stops the wake-up on ctx's cancellation once the row ends.
	unwatch func() bool
}

// Engine runs one model's continuous batching loop on its MLX thread.
//
// Lock order: mu guards sched, rows and draining; the loop never holds mu
// while it runs MLX work or sends on a stream.
type Engine struct {
	opt Options
	th  *mlx.Thread
	s   mlx.Stream
	net model.Network
	// pool holds every row's keys and values; only the loop touches it.
	pool *kvpool.Pool
	// poolBytes is the pool's storage after the last step (loop only):
	// a step that grew it is logged.
	poolBytes int64
	// prefix is the prefix cache over pool; nil when off. Loop only.
	prefix *cache.Index

	mu        sync.Mutex
	sched     *Scheduler
	rows      map[RequestID]*live
	arrival   uint64
	draining  bool
	stopped   bool
	lastErr   error // why the loop stopped serving, once it has
	slowSteps uint64
	paused    int         // rows paused for their readers at the last step
	cacheSt   cache.Stats // the prefix cache's counters after the last step
	rates     rates       // observed token rates and last-event times
	times     StepTimes
	// ahead is a decode step queued before the last one was read; loop
	// only.
	ahead *ahead
	// prefixBudget is the prefix cache's budget after the last Resize;
	// the loop applies it to the index.
	prefixBudget int64

	wake     chan struct{}
	quit     chan struct{}
	quitOnce sync.Once
	done     chan struct{}
}

// New starts the loop for net on th, whose stream is s. net, th and s stay
// owned by the caller and must outlive the Engine.
func New(net model.Network, th *mlx.Thread, s mlx.Stream, opt Options) (*Engine, error) {
	opt = opt.withDefaults()
	rowBytes := opt.KVCapacity
	if opt.Prefix.Budget > 0 {
		rowBytes -= opt.Prefix.Budget
		if rowBytes <= 0 {
			return nil, fmt.Errorf("engine: prefix cache budget %d leaves no KV for rows of a %d-byte grant", opt.Prefix.Budget, opt.KVCapacity)
		}
	}
	var pool *kvpool.Pool
	var err error
	th.Do(func() { pool, err = model.NewPool(net, s, kvpool.Options{}) })
	if err != nil {
		return nil, fmt.Errorf("engine: %w", err)
	}
	e := &Engine{
		pool:  pool,
		opt:   opt,
		th:    th,
		s:     s,
		net:   net,
		sched: NewScheduler(opt.Sched, LayoutOf(net.Config()), rowBytes),
		rows:  map[RequestID]*live{},
		wake:  make(chan struct{}, 1),
		quit:  make(chan struct{}),
		done:  make(chan struct{}),
	}
	e.prefixBudget = opt.Prefix.Budget
	if opt.Prefix.Budget > 0 {
		e.prefix = cache.NewIndex(pool, opt.Prefix.Namespace, opt.Prefix.Budget)
		e.sched.SetPrefixes(enginePrefixes{e})
		e.cacheSt = e.prefix.Stats()
		if opt.Prefix.Disk != nil {
			e.prefix.OnStore(e.persist)
		}
	}
	go e.loop()
	return e, nil
}

// Submit queues a generation. The returned channel delivers its events and
// is closed after the last one. Cancelling ctx ends the generation within
// one step with an EventError carrying ctx's error.
func (e *Engine) Submit(ctx context.Context, g Generation) (<-chan Event, error) {
	if err := g.Sampling.Validate(); err != nil {
		return nil, fmt.Errorf("engine: %w", err)
	}
	vocab := e.net.Config().Vocab
	for _, id := range g.Prompt {
		if id < 0 || int(id) >= vocab {
			return nil, fmt.Errorf("engine: %w: token %d outside the vocabulary", ErrInvalidToken, id)
		}
	}
	if _, ok := e.net.(model.EmbedReader); len(g.Embeds) > 0 && !ok {
		return nil, fmt.Errorf("engine: %w: the model reads no input embeddings", ErrBadEmbed)
	}
	hidden := e.net.Config().Hidden
	for _, em := range g.Embeds {
		if em.Rows <= 0 || em.Pos < 0 || em.Pos+em.Rows > len(g.Prompt) || len(em.Data) != em.Rows*hidden {
			return nil, fmt.Errorf("engine: %w: %d rows at %d (%d values) for a %d-token prompt of hidden size %d", ErrBadEmbed, em.Rows, em.Pos, len(em.Data), len(g.Prompt), hidden)
		}
	}
	// No generation runs past the context window.
	if ctxLen := e.net.Config().ContextLength; ctxLen > 0 && g.MaxTokens > ctxLen-len(g.Prompt) {
		g.MaxTokens = max(ctxLen-len(g.Prompt), 0)
	}
	// The loop never blocks on a reader: a row is paused while fewer than
	// two slots are free (room for its next delta and its end event).
	capacity := min(max(g.MaxTokens, 0), e.opt.StreamBuffer) + 2
	l := &live{
		gen:      g,
		ctx:      ctx,
		events:   make(chan Event, capacity),
		seq:      append(make([]int32, 0, len(g.Prompt)+max(g.MaxTokens, 0)), g.Prompt...),
		sampler:  sample.New(g.Sampling, g.Prompt...),
		progress: e.opt.Clock.Now(),
	}
	// Touching spans (two images back to back) form one bidirectional
	// block; the scheduler validates them at Submit.
	ordered := slices.SortedFunc(slices.Values(g.Spans), func(a, b cache.Span) int { return a.Start - b.Start })
	for _, sp := range ordered {
		if n := len(l.spans); n > 0 && l.spans[n-1].End == sp.Start {
			l.spans[n-1].End = sp.End
			continue
		}
		l.spans = append(l.spans, kvpool.Span{Start: sp.Start, End: sp.End})
	}
	l.staged = e.readStaged(g)
	if g.Grammar != nil {
		l.con = g.Grammar.NewConstraint()
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	accepted := false
	defer func() {
		if !accepted && l.con != nil {
			l.con.Close()
		}
	}()
	if e.draining || e.stopped {
		return nil, ErrDraining
	}
	if e.lastErr != nil {
		return nil, e.lastErr
	}
	e.arrival++
	spans := make([]Span, len(g.Spans))
	for i, sp := range g.Spans {
		spans[i] = Span{Start: sp.Start, End: sp.End}
	}
	err := e.sched.Submit(Request{ID: g.ID, PromptTokens: len(g.Prompt), MaxTokens: g.MaxTokens, Priority: g.Priority, Arrival: e.arrival, Spans: spans})
	if err != nil {
		return nil, err
	}
	e.rows[g.ID] = l
	accepted = true
	if l.con != nil {
		l.startMask()
	}
	l.unwatch = context.AfterFunc(ctx, e.poke)
	e.poke()
	return l.events, nil
}

// ErrQueueTimeout: the row waited for admission for a whole lease. The
// engine is busy, not broken: the request may be retried.
var ErrQueueTimeout = errors.New("engine: request waited too long for admission")

// ErrInvalidToken: a prompt token is outside the model's vocabulary.
var ErrInvalidToken = errors.New("invalid token id")

// ErrBadEmbed: an input embedding does not fit the prompt or the model.
var ErrBadEmbed = errors.New("input embedding does not fit")

// Stats is a snapshot of the scheduler's counters.
func (e *Engine) Stats() Stats {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.sched.Snapshot()
}

// Progress is what a wedge detector reads: the step counter and when the
// longest-waiting queued row (never admitted, or preempted) last moved;
// zero when none waits.
func (e *Engine) Progress() (steps uint64, oldestWait time.Time) {
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, l := range e.rows {
		if l.kv == nil && (oldestWait.IsZero() || l.progress.Before(oldestWait)) {
			oldestWait = l.progress
		}
	}
	return e.sched.Snapshot().Steps, oldestWait
}

// Rates are the observed token rates (exponentially weighted over steps)
// and the times of the last step and the last first token (zero: never).
type Rates struct {
	DecodeTPS, PrefillTPS float64
	LastStep, FirstToken  time.Time
}

// Rates returns the engine's observed rates.
func (e *Engine) Rates() Rates {
	e.mu.Lock()
	defer e.mu.Unlock()
	r := e.rates
	return Rates{DecodeTPS: r.decode, PrefillTPS: r.prefill, LastStep: r.lastStep, FirstToken: r.firstToken}
}

// rates is the loop's accounting behind Rates; mu guards it.
type rates struct {
	decode, prefill      float64
	lastStep, firstToken time.Time
}

// rateWeight is the weight of one step in the moving averages.
const rateWeight = 0.2

// account folds a finished step into the rates: its decode rows' tokens
// and its prefill chunks' tokens over the step's time.
func (e *Engine) account(batch []work, start, end time.Time) {
	var dec, pre int
	for _, w := range batch {
		if len(w.tokens) == 1 && w.sample && len(w.l.seq) > len(w.l.gen.Prompt) {
			dec++
		} else {
			pre += len(w.tokens)
		}
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	e.rates.lastStep = end
	secs := end.Sub(start).Seconds()
	if secs <= 0 {
		return
	}
	ewma := func(avg *float64, tokens int) {
		if tokens == 0 {
			return
		}
		v := float64(tokens) / secs
		if *avg == 0 {
			*avg = v
		} else {
			*avg += rateWeight * (v - *avg)
		}
	}
	ewma(&e.rates.decode, dec)
	ewma(&e.rates.prefill, pre)
}

// SlowSteps counts steps that took longer than Options.StepTimeout.
func (e *Engine) SlowSteps() uint64 {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.slowSteps
}

// Err is nil while the engine serves and says why once it does not: it
// was shut down, or its loop failed. The server's /health reads it.
func (e *Engine) Err() error {
	e.mu.Lock()
	defer e.mu.Unlock()
	switch {
	case e.lastErr != nil:
		return e.lastErr
	case e.stopped:
		return ErrShutdown
	}
	return nil
}

// Resize changes the KV grant (the prefix cache's budget included);
// shrinking never evicts a running row.
//
// The prefix cache's budget scales with the grant: a grant of half the
// original leaves the cache half its budget, and the rows the rest. The
// loop evicts cached blocks over the new budget before its next step.
func (e *Engine) Resize(capacity int64) {
	e.mu.Lock()
	pb := e.opt.Prefix.Budget
	if pb > 0 && e.opt.KVCapacity > 0 && capacity != e.opt.KVCapacity {
		hi, lo := bits.Mul64(uint64(pb), uint64(max(capacity, 0)))
		q, _ := bits.Div64(hi%uint64(e.opt.KVCapacity), lo, uint64(e.opt.KVCapacity))
		pb = int64(q)
	}
	e.prefixBudget = pb
	e.sched.Resize(capacity - pb)
	e.mu.Unlock()
	e.poke()
}

// Shutdown stops taking work, lets running generations finish until ctx
// ends (callers pass a 10 s deadline), then ends the rest with ErrShutdown
// and stops the loop. Calling it again, or after the loop has failed, only
// waits for the loop to be gone.
func (e *Engine) Shutdown(ctx context.Context) {
	e.mu.Lock()
	e.draining = true
	e.mu.Unlock()
	e.poke()
	for {
		e.mu.Lock()
		n := len(e.rows)
		e.mu.Unlock()
		if n == 0 {
			break
		}
		select {
		case <-ctx.Done():
		case <-time.After(10 * time.Millisecond):
			continue
		}
		break
	}
	e.quitOnce.Do(func() { close(e.quit) })
	<-e.done
}

func (e *Engine) poke() {
	select {
	case e.wake <- struct{}{}:
	default:
	}
}

func (e *Engine) loop() {
	defer close(e.done)
	defer e.th.Do(func() {
		e.dropAhead()
		if e.prefix != nil {
			e.prefix.Close()
		}
		e.pool.Close()
	})
	// idlePoll bounds how long an idle loop sleeps, so leases of rows that
	// wait without progress still expire.
	const idlePoll = time.Second
	for {
		var worked bool
		var failed error
		if e.opt.BeforeStep != nil {
			e.opt.BeforeStep()
		}
		e.th.Do(func() { worked, failed = e.safeTick() })
		if failed != nil {
			e.mu.Lock()
			e.lastErr = failed
			e.mu.Unlock()
			e.th.Do(e.abortAll)
			return
		}
		if worked {
			select {
			case <-e.quit:
				e.th.Do(e.abortAll)
				return
			default:
			}
			continue
		}
		wait := idlePoll
		e.mu.Lock()
		if e.paused > 0 {
			// Readers drain without telling the loop: look again soon.
			wait = pausedPoll
		}
		e.mu.Unlock()
		t := e.opt.Clock.Timer(wait)
		select {
		case <-e.wake:
		case <-t.C:
		case <-e.quit:
			t.Stop()
			e.th.Do(e.abortAll)
			return
		}
		t.Stop()
	}
}

// pausedPoll is how often an otherwise idle loop looks whether paused rows'
// readers have caught up.
const pausedPoll = 2 * time.Millisecond

// safeTick is tick with a panic turned into the error that stops the loop:
// a broken step must fail its requests and mark the engine dead, not take
// the process down.
func (e *Engine) safeTick() (worked bool, err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("%w: step panicked: %v", ErrStepFailed, r)
		}
	}()
	return e.tick(), nil
}

// abortAll ends every live generation at shutdown.
func (e *Engine) abortAll() {
	e.mu.Lock()
	rows := make([]*live, 0, len(e.rows))
	for id, l := range e.rows {
		e.sched.Cancel(id)
		rows = append(rows, l)
	}
	e.rows = map[RequestID]*live{}
	e.stopped = true
	why := ErrShutdown
	if e.lastErr != nil {
		why = e.lastErr
	}
	e.mu.Unlock()
	for _, l := range rows {
		e.end(l, Event{Kind: EventError, Err: why})
	}
}

// end delivers a stream's last event, releases its cache and closes it.
func (e *Engine) end(l *live, ev Event) {
	if l.done {
		return
	}
	l.done = true
	if l.unwatch != nil {
		l.unwatch()
	}
	e.freeSeq(l)
	if l.con != nil {
		if l.maskReady != nil {
			<-l.maskReady
		}
		l.con.Close()
	}
	if ev.Kind == EventFinished {
		ev.Usage = Usage{PromptTokens: len(l.gen.Prompt), CompletionTokens: l.emitted, CachedTokens: min(l.cached, len(l.gen.Prompt))}
	}
	l.events <- ev
	close(l.events)
}

// work is one row's part of a step.
type work struct {
	l      *live
	tokens []int32
	sample bool
	decode bool // a decode row (else a prefill chunk)
}

// tick runs one scheduling step on the MLX thread and reports whether it
// did anything.
func (e *Engine) tick() bool {
	now := e.opt.Clock.Now()
	e.mu.Lock()
	// A panic below (see safeTick) must not leave mu held.
	locked := true
	defer func() {
		if locked {
			e.mu.Unlock()
		}
	}()
	if e.prefix != nil && e.prefix.Stats().Budget != e.prefixBudget {
		e.prefix.SetBudget(e.prefixBudget)
	}
	// Cancelled and lease-expired rows leave before planning.
	var gone []*live
	var goneEv []Event
	for id, l := range e.rows {
		var ev Event
		switch {
		case l.ctx.Err() != nil:
			ev = Event{Kind: EventError, Err: l.ctx.Err()}
		case now.Sub(l.progress) > e.opt.Lease && l.kv == nil:
			ev = Event{Kind: EventError, Err: ErrQueueTimeout}
		case now.Sub(l.progress) > e.opt.Lease:
			ev = Event{Kind: EventError, Err: ErrStuck}
		default:
			continue
		}
		e.sched.Cancel(id)
		delete(e.rows, id)
		gone, goneEv = append(gone, l), append(goneEv, ev)
	}
	// Rows whose readers have fallen behind sit this step out. Only this
	// goroutine sends, so the free room seen here can only grow.
	e.paused = 0
	for id, l := range e.rows {
		held := cap(l.events)-len(l.events) < 2
		e.sched.Pause(id, held)
		if held {
			e.paused++
		}
	}
	plan := e.sched.Plan()
	type finished struct {
		l *live
		r FinishReason
	}
	var fins []finished
	for _, f := range plan.Finished {
		if l, ok := e.rows[f.ID]; ok {
			delete(e.rows, f.ID)
			fins = append(fins, finished{l, f.Reason})
		}
	}
	var pre []*live
	for _, id := range plan.Preempted {
		pre = append(pre, e.rows[id])
	}
	var batch []work
	for _, c := range plan.Prefill {
		l := e.rows[c.ID]
		batch = append(batch, work{l, l.seq[c.Start : c.Start+c.Len], c.Final, false})
	}
	for _, id := range plan.Decode {
		l := e.rows[id]
		batch = append(batch, work{l, l.seq[len(l.seq)-1:], true, true})
	}
	locked = false
	e.mu.Unlock()

	for i, l := range gone {
		e.end(l, goneEv[i])
	}
	for _, f := range fins {
		switch f.r {
		case FinishStop, FinishLength:
			e.end(f.l, Event{Kind: EventFinished, Reason: f.r})
		case FinishKVExhausted:
			e.end(f.l, Event{Kind: EventError, Reason: f.r, Err: ErrNeverFits})
		default:
			why := ErrStepFailed
			if f.l.failed != nil {
				// The cause (an MLX error) stays in the chain for callers
				// and tests; the server shows only the class.
				why = fmt.Errorf("%w: %w", ErrStepFailed, f.l.failed)
			}
			e.end(f.l, Event{Kind: EventError, Reason: f.r, Err: why})
		}
	}
	for _, l := range pre {
		if l != nil {
			e.freeSeq(l)
		}
	}
	if len(batch) == 0 {
		e.tidyCache()
		return len(gone)+len(fins) > 0
	}

	start := e.opt.Clock.Now()
	picks, err := e.run(batch)
	if e.opt.Clock.Now().Sub(start) > e.opt.StepTimeout {
		e.mu.Lock()
		e.slowSteps++
		e.mu.Unlock()
	}
	if err == nil {
		e.account(batch, start, e.opt.Clock.Now())
	}
	var res StepResult
	eos := map[int32]bool{}
	for _, id := range e.net.Config().EOS {
		eos[id] = true
	}
	after := e.opt.Clock.Now()
	for i, w := range batch {
		l := w.l
		if err != nil {
			res.Failed = append(res.Failed, l.gen.ID)
			l.failed = err
			e.freeSeq(l)
			continue
		}
		l.progress = after
		if !w.sample {
			continue
		}
		p := picks[i]
		if p.err != nil {
			res.Failed = append(res.Failed, l.gen.ID)
			l.failed = p.err
			e.freeSeq(l)
			continue
		}
		l.seq = append(l.seq, p.tok)
		if eos[p.tok] && !l.gen.IgnoreEOS {
			res.Stopped = append(res.Stopped, l.gen.ID)
			continue
		}
		l.emitted++
		if l.emitted == 1 {
			e.mu.Lock()
			e.rates.firstToken = after
			e.mu.Unlock()
		}
		l.events <- Event{Kind: EventDelta, Tokens: []int32{p.tok}, Logprobs: p.logprobs}
		if l.con != nil {
			switch done, err := l.con.Accept(p.tok); {
			case err != nil:
				res.Failed = append(res.Failed, l.gen.ID)
				l.failed = fmt.Errorf("%w: %w", ErrConstraint, err)
				e.freeSeq(l)
			case done:
				// The grammar is complete: only end of sequence may follow.
				res.Stopped = append(res.Stopped, l.gen.ID)
			case l.emitted < l.gen.MaxTokens:
				l.startMask()
			}
		}
	}
	e.tidyCache()
	e.mu.Lock()
	locked = true
	e.sched.Complete(res)
	locked = false
	e.mu.Unlock()
	return true
}

// pick is one sampling row's token and, when asked, its log-probabilities,
// or why the row could not sample.
type pick struct {
	tok      int32
	logprobs []Logprob
	err      error
}

// deviceGreedy reports whether the row's token is the device's argmax.
func (l *live) deviceGreedy() bool {
	return l.sampler.Greedy() && l.gen.TopLogprobs < 0 && l.con == nil
}

// startMask computes the row's next mask on another goroutine.
func (l *live) startMask() {
	ready := make(chan struct{})
	l.maskReady = ready
	go func() {
		l.mask, l.maskErr = l.con.Mask()
		close(ready)
	}()
}

// waitMask waits for the row's next mask (computing it now if none is
// under way).
func (l *live) waitMask() ([]uint32, error) {
	if l.maskReady == nil {
		l.startMask()
	}
	<-l.maskReady
	return l.mask, l.maskErr
}

// applyMask sets the logits of the tokens mask does not allow to -Inf and
// reports whether any token is left.
func applyMask(row []float32, mask []uint32) bool {
	inf := float32(math.Inf(-1))
	left := false
	for w := 0; w*32 < len(row); w++ {
		var word uint32
		if w < len(mask) {
			word = mask[w]
		}
		end := min(w*32+32, len(row))
		if word == 0 {
			for i := w * 32; i < end; i++ {
				row[i] = inf
			}
			continue
		}
		for i := w * 32; i < end; i++ {
			if word>>(i-w*32)&1 == 0 {
				row[i] = inf
			} else if !math.IsInf(float64(row[i]), -1) {
				left = true
			}
		}
	}
	return left
}

// freeSeq returns the row's blocks to the pool (the prefix cache keeps
// its own references on the full ones it registered).
func (e *Engine) freeSeq(l *live) {
	if l.kv == nil {
		return
	}
	if e.prefix != nil {
		e.prefix.Untrack(l.kv)
	}
	l.kv.Free()
	l.kv = nil
}

// tidyCache lets the prefix cache evict down to its budget once rows have
// let go of blocks, and publishes its counters.
func (e *Engine) tidyCache() {
	if e.prefix == nil {
		return
	}
	e.prefix.Evict()
	st := e.prefix.Stats()
	e.mu.Lock()
	e.cacheSt = st
	e.mu.Unlock()
}

// enginePrefixes is the scheduler's view of the prefix cache. Its methods
// run inside Plan, on the loop's MLX thread with mu held.
type enginePrefixes struct{ e *Engine }

func (p enginePrefixes) Adopt(id RequestID, tokens int) (int, bool) {
	e := p.e
	l := e.rows[id]
	if l == nil {
		return 0, false
	}
	e.freeSeq(l)
	e.stage(l)
	limit := (tokens - 1) / kvpool.BlockTokens
	if e.awaitPrefix(l, tokens, e.prefix.Cached(l.gen.CacheScope, l.gen.Spans, l.seq[:tokens], limit)) {
		return 0, true
	}
	l.kv = e.pool.NewSeq()
	n, err := e.prefix.Adopt(l.kv, l.gen.CacheScope, l.gen.Spans, l.seq[:tokens], limit)
	if err != nil {
		// The cache lost track of a block it indexed: compute instead.
		e.prefix.Untrack(l.kv)
		l.kv.Free()
		l.kv = e.pool.NewSeq()
		e.prefix.Track(l.kv, l.gen.CacheScope, l.gen.Spans)
		n = 0
	}
	l.cached = n
	return n, false
}

// awaitPrefix reports whether row l should wait for a running row that is
// still prefilling the same prompt blocks (same scope, no media) beyond the
// cached tokens: once that row has stored them, l adopts them instead of
// computing them a second time. Rows with one prefix that arrive together
// then cost one prefill.
func (e *Engine) awaitPrefix(l *live, tokens, cached int) bool {
	if len(l.gen.Spans) > 0 {
		return false
	}
	for _, o := range e.rows {
		if o == l || o.kv == nil || o.kv.Len() >= len(o.gen.Prompt) || o.gen.CacheScope != l.gen.CacheScope || len(o.gen.Spans) > 0 {
			continue
		}
		common := 0
		for common < min(tokens-1, len(o.gen.Prompt)) && o.gen.Prompt[common] == l.seq[common] {
			common++
		}
		shared := common / kvpool.BlockTokens * kvpool.BlockTokens
		if shared > cached && o.kv.Len() < shared {
			return true
		}
	}
	return false
}

func (p enginePrefixes) Drop(id RequestID) {
	if l := p.e.rows[id]; l != nil {
		p.e.freeSeq(l)
		l.cached = 0
	}
}

// CacheStats is the prefix cache's counters after the last step (and the
// SSD tier's now); ok is false when the cache is off.
func (e *Engine) CacheStats() (st cache.Stats, ok bool) {
	e.mu.Lock()
	st, ok = e.cacheSt, e.prefix != nil
	e.mu.Unlock()
	if d := e.opt.Prefix.Disk; ok && d != nil {
		st.Disk, st.DiskOn = d.Stats(), true
	}
	return st, ok
}

// stagedBlock is one prompt block read back from the SSD tier.
type stagedBlock struct {
	key     uint64
	end     int // prompt tokens up to the block's end
	payload []byte
}

// blockMeta is what binds block files to this model and to the prefix of
// tokens ending with the block.
func (e *Engine) blockMeta(scope cache.Scope, prefix []int32) cache.BlockMeta {
	ns := e.opt.Prefix.Namespace
	return cache.BlockMeta{WeightHash: ns.WeightHash, LayoutEpoch: ns.LayoutEpoch, BlockTokens: cache.BlockTokens,
		Tokens: len(prefix), PrefixSHA: cache.PrefixSHA(scope, prefix)}
}

// readStaged reads from the SSD tier the prompt's blocks that follow the
// ones the RAM tier holds, up to the first miss (any goroutine: the
// submitter pays for its own disk reads).
func (e *Engine) readStaged(g Generation) []stagedBlock {
	d := e.opt.Prefix.Disk
	if e.prefix == nil || d == nil || len(g.Prompt) <= cache.BlockTokens {
		return nil
	}
	keys := cache.Chain(e.opt.Prefix.Namespace, g.CacheScope, g.Prompt, g.Spans, (len(g.Prompt)-1)/cache.BlockTokens)
	var out []stagedBlock
	for j, key := range keys {
		if len(out) == 0 && e.prefix.Has(key) {
			continue
		}
		end := (j + 1) * cache.BlockTokens
		payload, ok := d.Get(g.CacheScope, key, e.blockMeta(g.CacheScope, g.Prompt[:end]))
		if !ok {
			break
		}
		out = append(out, stagedBlock{key: key, end: end, payload: payload})
	}
	return out
}

// stage puts a row's blocks read from disk into the pool and the RAM tier,
// in chain order, stopping at the first that cannot go in. Loop only.
func (e *Engine) stage(l *live) {
	staged := l.staged
	l.staged = nil
	if len(staged) == 0 {
		return
	}
	f := mlx.NewFrame(e.s)
	defer f.Free()
	for _, b := range staged {
		if e.prefix.Has(b.key) {
			continue
		}
		blocks, err := e.pool.AllocBlock()
		if err != nil {
			return
		}
		if e.pool.WriteBlock(f, blocks, b.payload) != nil || !e.prefix.Insert(l.gen.CacheScope, l.gen.Spans, b.key, l.gen.Prompt[:b.end], blocks) {
			for g, id := range blocks {
				e.pool.Release(g, id)
			}
			return
		}
	}
}

// persist is the RAM tier's store hook: it copies the block out of the
// pool and hands it to the SSD tier's write-behind queue. Loop only.
func (e *Engine) persist(b cache.Stored) {
	d := e.opt.Prefix.Disk
	f := mlx.NewFrame(e.s)
	defer f.Free()
	payload, err := e.pool.ReadBlock(f, b.Blocks)
	if err != nil {
		return
	}
	d.Put(b.Scope, b.Key, e.blockMeta(b.Scope, b.Prefix), payload)
}
