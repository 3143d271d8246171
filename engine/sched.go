package engine

import (
	"cmp"
	"errors"
	"fmt"
	"math"
	"slices"
	"sort"
)

// RequestID names one live request within one model's engine.
type RequestID string

// Span is a token range [Start, End) of a prompt that one prefill chunk must
// cover whole: the placeholder run of one image or video frame, which the
// model attends bidirectionally.
type Span struct {
	Start, End int
}

// Request is what the scheduler needs to know about one generation request.
type Request struct {
	// ID must be non-empty and unique among live requests.
	ID RequestID
	// PromptTokens is the prompt length; it must be positive.
	PromptTokens int
	// MaxTokens caps the generated tokens. A value <= 0 finishes the request
	// at once with FinishLength.
	MaxTokens int
	// Priority orders preemption: a higher value is kept longer. Waiting
	// requests are admitted in arrival order whatever their priority.
	Priority int
	// Arrival is a monotonic sequence number supplied by the caller (not a
	// clock); among equal priorities the largest Arrival is the youngest and
	// is preempted first. Ties fall back to the order of Submit calls.
	Arrival uint64
	// Spans lists multimodal spans inside the prompt; empty for text. They
	// must lie within the prompt and not overlap; touching spans are merged
	// into one block.
	Spans []Span
}

// Defaults and bounds of Config. MaxConcurrentLimit only guards against
// absurd caps: how many rows really run together is what the KV ledger
// allows, since a row that cannot be charged waits.
const (
	DefaultTokenBudget   = 2048
	DefaultPrefillChunk  = 512
	DefaultMaxConcurrent = 4
	MaxConcurrentLimit   = 256
	DefaultMaxWaiting    = 64
)

// Config holds the scheduling knobs. A zero or negative field takes its
// default.
type Config struct {
	// TokenBudget bounds the tokens one step processes: one per decode row
	// plus the prefill chunk lengths. Default 2048.
	TokenBudget int
	// PrefillChunk bounds one row's prefill chunk. Default 512.
	PrefillChunk int
	// MaxConcurrent bounds the running rows. Default 4, clamped to
	// [1, MaxConcurrentLimit]; only 0 selects the default. Below the cap,
	// the ledger decides: admission stops at the first waiting row whose
	// charge does not fit.
	MaxConcurrent int
	// MaxWaiting bounds the requests Submit queues. Default 64.
	MaxWaiting int
}

func (c Config) withDefaults() Config {
	if c.TokenBudget <= 0 {
		c.TokenBudget = DefaultTokenBudget
	}
	if c.PrefillChunk <= 0 {
		c.PrefillChunk = DefaultPrefillChunk
	}
	if c.MaxConcurrent == 0 {
		c.MaxConcurrent = DefaultMaxConcurrent
	}
	c.MaxConcurrent = ClampConcurrency(c.MaxConcurrent)
	if c.MaxWaiting <= 0 {
		c.MaxWaiting = DefaultMaxWaiting
	}
	return c
}

// ClampConcurrency clamps a concurrency cap to [1, MaxConcurrentLimit].
func ClampConcurrency(n int) int { return min(max(n, 1), MaxConcurrentLimit) }

// Errors returned by Submit.
var (
	ErrInvalidID   = errors.New("engine: empty request id")
	ErrEmptyPrompt = errors.New("engine: empty prompt")
	ErrInvalidSpan = errors.New("engine: invalid multimodal span")
	ErrDuplicateID = errors.New("engine: duplicate request id")
	ErrQueueFull   = errors.New("engine: waiting queue full")
	ErrNeverFits   = errors.New("engine: request can never fit the KV capacity")
)

// FinishReason says why the scheduler let go of a row.
type FinishReason uint8

// Finish reasons. The zero value is not a reason.
const (
	// FinishStop: the engine reported an end-of-sequence token.
	FinishStop FinishReason = iota + 1
	// FinishLength: the row generated MaxTokens tokens (at once for
	// MaxTokens <= 0).
	FinishLength
	// FinishError: the engine reported that the row's step failed.
	FinishError
	// FinishKVExhausted: the row can no longer fit the KV capacity even
	// alone, which only happens after the capacity shrank. Retriable.
	FinishKVExhausted
)

func (r FinishReason) String() string {
	switch r {
	case FinishStop:
		return "stop"
	case FinishLength:
		return "length"
	case FinishError:
		return "error"
	case FinishKVExhausted:
		return "kv_exhausted"
	}
	return fmt.Sprintf("FinishReason(%d)", uint8(r))
}

// Finish reports a row the scheduler no longer tracks.
type Finish struct {
	ID     RequestID
	Reason FinishReason
}

// PrefillChunk asks the engine to feed tokens [Start, Start+Len) of a row's
// sequence, which is the prompt followed by the tokens the row already
// generated (a preempted row recomputes them too).
type PrefillChunk struct {
	ID         RequestID
	Start, Len int
	// Final is set when the chunk ends the row's sequence: the step samples
	// the row's next token from the chunk's last position.
	Final bool
}

// StepPlan is what one step must do, in the order the engine applies it:
// drop the cache of the Preempted and Finished rows, then run Prefill and
// Decode as one batched step.
type StepPlan struct {
	// Prefill lists the chunks to feed, running rows first.
	Prefill []PrefillChunk
	// Decode lists the rows that feed their last sampled token and sample
	// the next.
	Decode []RequestID
	// Preempted lists rows whose cache must be dropped: they went back to
	// the front of the waiting queue and will recompute from token 0.
	Preempted []RequestID
	// Finished lists every row let go since the previous plan, in the order
	// it happened, except cancelled rows. Their cache must be dropped and
	// their streams ended with the reason.
	Finished []Finish
}

// Empty reports whether the plan needs no step: no prefill and no decode.
func (p StepPlan) Empty() bool { return len(p.Prefill) == 0 && len(p.Decode) == 0 }

// StepResult is the engine's report on the step it ran for the last plan.
// Rows it does not name advanced as planned.
type StepResult struct {
	// Stopped lists rows whose token sampled in this step ends generation
	// (an end-of-sequence token). Ids that sampled no token are ignored.
	Stopped []RequestID
	// Failed lists rows whose step failed; they finish with FinishError and
	// make no progress.
	Failed []RequestID
}

// Stats is a snapshot for reporting.
type Stats struct {
	Running, Waiting int
	MaxConcurrent    int
	// KVUsed and KVCapacity are the ledger's charged bytes and grant.
	KVUsed, KVCapacity int64
	// KVBytesPerToken is the layout's full-attention rate.
	KVBytesPerToken int64
	// Preemptions counts rows sent back to waiting since the start.
	Preemptions uint64
	// Steps counts completed steps: the engine's progress counter.
	Steps uint64
}

type rowState uint8

const (
	stateWaiting rowState = iota
	stateRunning
	stateDone // finished, reported by the next Plan
)

// row is one live request and its progress.
type row struct {
	req   Request
	seq   uint64 // Submit order
	spans []Span // sorted, disjoint, not touching
	need  int64  // bytes of prompt + MaxTokens tokens
	state rowState
	kv    int // tokens of the sequence the engine holds in cache
	gen   int // tokens generated, kept across preemption
	// paused rows keep their place and KV but get no work (their reader
	// has fallen behind).
	paused bool

	// Set while a plan is built.
	entry     *entry
	preempted bool
}

// target is the sequence length: prompt plus generated tokens.
func (r *row) target() int { return r.req.PromptTokens + r.gen }

// decoding reports whether the row only has its last sampled token to feed.
func (r *row) decoding() bool { return r.gen > 0 && r.target()-r.kv == 1 }

// entry is one row's work in a plan.
type entry struct {
	row     *row
	start   int
	n       int
	decode  bool
	final   bool
	dropped bool
}

// A Scheduler decides, step by step, which requests of one model run and how
// far, within a token budget, a concurrency cap and a KV-byte ledger. It is a
// pure state machine: the caller feeds it requests and step results and acts
// on the plans it returns. Same calls, same plans. It is not safe for
// concurrent use.
type Scheduler struct {
	cfg    Config
	layout KVLayout
	ledger *Ledger

	rows     map[RequestID]*row
	waiting  []*row // FIFO; preempted rows are put back at the front
	running  []*row // in admission order
	finished []Finish

	inflight []*entry // the last plan's work, until Complete
	nextSeq  uint64
	prefixes Prefixes

	preemptions uint64
	steps       uint64
}

// NewScheduler returns an idle scheduler. Precondition: layout.Validate()
// returns nil. A negative capacity counts as 0.
func NewScheduler(cfg Config, layout KVLayout, capacityBytes int64) *Scheduler {
	return &Scheduler{
		cfg:    cfg.withDefaults(),
		layout: layout,
		ledger: NewLedger(capacityBytes),
		rows:   map[RequestID]*row{},
	}
}

// Prefixes is a prefix cache as admission sees it: a row may start past the
// part of its sequence whose keys and values are cached.
type Prefixes interface {
	// Adopt gives the row being admitted the longest cached prefix of the
	// first tokens tokens of its sequence that leaves the last one to
	// compute, and returns how many tokens that prefix holds (0: none).
	// wait asks admission to hold the row back: a running row is about to
	// store more of its prefix than the cache holds now.
	Adopt(id RequestID, tokens int) (cached int, wait bool)
	// Drop takes back what Adopt gave when the admission does not go
	// through.
	Drop(id RequestID)
}

// SetPrefixes makes admission consult p (nil: no prefix cache). A cached
// prefix may end inside a row's span (its keys hold the media): the first
// chunk then runs to the span's end.
func (s *Scheduler) SetPrefixes(p Prefixes) { s.prefixes = p }

// Submit queues a request at the back of the waiting queue. It rejects an
// empty id (ErrInvalidID), a non-positive prompt (ErrEmptyPrompt), spans
// outside the prompt or overlapping (ErrInvalidSpan), an id that is still
// live, including one whose Finish is not yet reported (ErrDuplicateID), a
// request whose prompt + MaxTokens tokens would exceed the ledger's Limit
// even alone (ErrNeverFits), and a full queue: MaxWaiting rows waiting,
// preempted rows included (ErrQueueFull). A request with
// MaxTokens <= 0 is accepted without queueing and finishes with FinishLength
// in the next plan.
func (s *Scheduler) Submit(req Request) error {
	if req.ID == "" {
		return ErrInvalidID
	}
	if req.PromptTokens <= 0 {
		return ErrEmptyPrompt
	}
	spans, err := normalizeSpans(req.Spans, req.PromptTokens)
	if err != nil {
		return err
	}
	if _, live := s.rows[req.ID]; live {
		return ErrDuplicateID
	}
	r := &row{req: req, spans: spans, seq: s.nextSeq}
	r.req.Spans = nil
	if req.MaxTokens <= 0 {
		s.nextSeq++
		r.state = stateDone
		s.rows[req.ID] = r
		s.finished = append(s.finished, Finish{ID: req.ID, Reason: FinishLength})
		return nil
	}
	total := req.PromptTokens + req.MaxTokens
	if total < req.PromptTokens {
		total = math.MaxInt
	}
	r.need = s.layout.SequenceBytes(total)
	if !s.ledger.CanEverFit(r.need) {
		return fmt.Errorf("%w: %d bytes over a limit of %d", ErrNeverFits, r.need, s.ledger.Limit())
	}
	if len(s.waiting) >= s.cfg.MaxWaiting {
		return ErrQueueFull
	}
	s.nextSeq++
	r.state = stateWaiting
	s.rows[req.ID] = r
	s.waiting = append(s.waiting, r)
	return nil
}

// Cancel forgets a live request, waiting, running or finished but not yet
// reported, releasing its charge, and reports whether it was live. A
// cancelled row appears in no later plan, not even in Finished; if it is part
// of the plan in flight, Complete ignores it and the caller drops its cache.
func (s *Scheduler) Cancel(id RequestID) bool {
	r, live := s.rows[id]
	if !live {
		return false
	}
	switch r.state {
	case stateRunning:
		s.ledger.Release(id)
		s.running = remove(s.running, r)
	case stateWaiting:
		s.waiting = remove(s.waiting, r)
	case stateDone:
		s.finished = slices.DeleteFunc(s.finished, func(f Finish) bool { return f.ID == id })
	}
	delete(s.rows, id)
	return true
}

// Pause stops (paused) or resumes planning work for a request: a paused
// row keeps its admission, its KV charge and its place, and gets no prefill
// or decode until resumed. The engine pauses a row whose reader has fallen
// behind so that one slow client costs the batch nothing. Unknown ids are
// ignored.
func (s *Scheduler) Pause(id RequestID, paused bool) {
	if r, ok := s.rows[id]; ok {
		r.paused = paused
	}
}

// Resize sets the KV capacity in bytes. Shrinking never evicts: running rows
// keep growing within the previous ceiling while admissions wait for the
// ledger to drain below the new limit.
func (s *Scheduler) Resize(capacityBytes int64) { s.ledger.Resize(capacityBytes) }

// SetMaxConcurrent sets the concurrency cap, clamped by ClampConcurrency.
// Lowering it below the running count evicts nothing; admissions wait until
// rows finish.
func (s *Scheduler) SetMaxConcurrent(n int) { s.cfg.MaxConcurrent = ClampConcurrency(n) }

// Snapshot reports the scheduler's counters.
func (s *Scheduler) Snapshot() Stats {
	return Stats{
		Running:         len(s.running),
		Waiting:         len(s.waiting),
		MaxConcurrent:   s.cfg.MaxConcurrent,
		KVUsed:          s.ledger.Used(),
		KVCapacity:      s.ledger.Capacity(),
		KVBytesPerToken: s.layout.BytesPerToken(),
		Preemptions:     s.preemptions,
		Steps:           s.steps,
	}
}

// Plan decides the next step and charges the ledger for it: every planned
// row is charged the bytes its cache will hold after the step.
//
// Running rows come first, decode rows (1 token each) before prefill rows
// (min(remaining, PrefillChunk, budget left) tokens), each group from the most
// to the least important (higher Priority, then older Arrival). When a charge
// would overflow the ledger's Ceiling, the least important running row (it
// may be the row being charged) is preempted: its charge is released, it
// goes back to the front of the waiting queue and will recompute from token
// 0. This repeats until the charge fits; a row left alone that still cannot
// fit finishes with FinishKVExhausted. Then waiting rows are admitted in
// queue order while the budget, the concurrency cap and the ledger's Limit
// allow; admission never preempts, and stops at the first row that does not
// fit (strict FIFO). A row preempted by this plan is not readmitted by it. A
// waiting row that cannot fit even alone under the current capacity waits
// while other rows run and finishes with FinishKVExhausted once none do.
//
// Precondition: a plan with work (not Empty) must be followed by Complete
// before the next Plan; Plan panics otherwise.
func (s *Scheduler) Plan() StepPlan {
	if s.inflight != nil {
		panic("engine: Plan called before Complete of the previous step")
	}
	p := &planner{budget: s.cfg.TokenBudget}
	order := slices.Clone(s.running)
	slices.SortFunc(order, byImportance)
	for _, r := range order {
		if r.state == stateRunning && !r.paused && r.decoding() {
			s.planDecode(p, r)
		}
	}
	for _, r := range order {
		if r.state == stateRunning && !r.paused && !r.decoding() {
			s.planPrefill(p, r)
		}
	}
	s.admit(p)
	return s.emit(p)
}

// Complete applies the step run for the last plan: planned rows advance,
// rows that sampled a token count it, and rows finish on a Stopped report, a
// Failed report, or on reaching MaxTokens; finished rows release their
// charge at once and are reported by the next plan. Rows cancelled since the
// plan are ignored. Complete without a plan in flight does nothing.
func (s *Scheduler) Complete(res StepResult) {
	if s.inflight == nil {
		return
	}
	for _, e := range s.inflight {
		r := e.row
		r.entry = nil
		if r.state != stateRunning || s.rows[r.req.ID] != r {
			continue
		}
		if slices.Contains(res.Failed, r.req.ID) {
			s.finish(r, FinishError)
			continue
		}
		r.kv += e.n
		if !e.final {
			continue
		}
		r.gen++
		switch {
		case slices.Contains(res.Stopped, r.req.ID):
			s.finish(r, FinishStop)
		case r.gen >= r.req.MaxTokens:
			s.finish(r, FinishLength)
		}
	}
	s.inflight = nil
	s.steps++
}

// planner is the state of one Plan call.
type planner struct {
	budget    int // may go negative when a span overruns it
	entries   []*entry
	preempted []*row
}

func (p *planner) left() int { return max(p.budget, 0) }

// firstPrefill reports whether no prefill chunk is planned yet.
func (p *planner) firstPrefill() bool {
	for _, e := range p.entries {
		if !e.dropped && !e.decode {
			return false
		}
	}
	return true
}

func (p *planner) add(e *entry) {
	e.row.entry = e
	p.entries = append(p.entries, e)
	p.budget -= e.n
}

func (s *Scheduler) planDecode(p *planner, r *row) {
	if p.left() < 1 || !s.grow(p, r, r.kv+1) {
		return
	}
	p.add(&entry{row: r, start: r.kv, n: 1, decode: true, final: true})
}

func (s *Scheduler) planPrefill(p *planner, r *row) {
	n, ok := s.chunk(r, p.left(), p.firstPrefill())
	if !ok || !s.grow(p, r, r.kv+n) {
		return
	}
	p.add(&entry{row: r, start: r.kv, n: n, final: r.kv+n == r.target()})
}

// chunk sizes a row's next prefill chunk: min(remaining, PrefillChunk, left),
// then moved so it never ends inside a span. A chunk that would cut a span
// it starts before is shrunk to end where the span begins; a chunk that
// starts at a span is extended to its end, beyond PrefillChunk if need be.
// The extension must fit the budget left, except for the first prefill
// chunk of a step, which may overrun the budget so that a span longer than
// the budget still runs. Otherwise the row gets no chunk this step.
func (s *Scheduler) chunk(r *row, left int, first bool) (int, bool) {
	n := min(r.target()-r.kv, s.cfg.PrefillChunk, left)
	if n <= 0 {
		return 0, false
	}
	end := r.kv + n
	sp, cut := spanAround(r.spans, end)
	if !cut {
		return n, true
	}
	if sp.Start > r.kv {
		return sp.Start - r.kv, true
	}
	if sp.End-r.kv > left && !first {
		return 0, false
	}
	return sp.End - r.kv, true
}

// grow charges a running row for a cache of tokens tokens, preempting less
// important rows until the charge fits. It reports false when the row itself
// was preempted or finished instead.
func (s *Scheduler) grow(p *planner, r *row, tokens int) bool {
	bytes := s.layout.SequenceBytes(tokens)
	for !s.ledger.TryCharge(r.req.ID, bytes) {
		victim := slices.MaxFunc(s.running, byImportance)
		if victim != r {
			s.preempt(p, victim)
			continue
		}
		if len(s.running) == 1 {
			s.finish(r, FinishKVExhausted)
		} else {
			s.preempt(p, r)
		}
		return false
	}
	return true
}

// admit moves waiting rows to running, strictly in queue order.
func (s *Scheduler) admit(p *planner) {
	for len(s.waiting) > 0 && len(s.running) < s.cfg.MaxConcurrent && p.left() > 0 {
		r := s.waiting[0]
		if r.preempted {
			return
		}
		if !s.ledger.CanEverFit(r.need) {
			if len(s.running) > 0 {
				return
			}
			s.finish(r, FinishKVExhausted)
			continue
		}
		adopted, wait := s.prefixes != nil, false
		if adopted {
			r.kv, wait = s.prefixes.Adopt(r.req.ID, r.target())
		}
		n, ok := s.chunk(r, p.left(), p.firstPrefill())
		if wait || !ok || !s.ledger.TryCharge(r.req.ID, s.layout.SequenceBytes(r.kv+n)) {
			if adopted {
				s.prefixes.Drop(r.req.ID)
				r.kv = 0
			}
			return
		}
		s.waiting = s.waiting[1:]
		r.state = stateRunning
		s.running = append(s.running, r)
		p.add(&entry{row: r, start: r.kv, n: n, final: r.kv+n == r.target()})
	}
}

// preempt sends a running row back to the front of the waiting queue with no
// cache.
func (s *Scheduler) preempt(p *planner, r *row) {
	s.unplan(p, r)
	s.ledger.Release(r.req.ID)
	s.running = remove(s.running, r)
	r.kv = 0
	r.state = stateWaiting
	r.preempted = true
	s.waiting = slices.Insert(s.waiting, 0, r)
	p.preempted = append(p.preempted, r)
	s.preemptions++
}

// finish lets go of a waiting or running row; the next plan reports it.
func (s *Scheduler) finish(r *row, reason FinishReason) {
	s.ledger.Release(r.req.ID)
	switch r.state {
	case stateRunning:
		s.running = remove(s.running, r)
	case stateWaiting:
		s.waiting = remove(s.waiting, r)
	}
	r.state = stateDone
	s.finished = append(s.finished, Finish{ID: r.req.ID, Reason: reason})
}

// unplan withdraws a row's entry from the plan being built and returns its
// tokens to the budget.
func (s *Scheduler) unplan(p *planner, r *row) {
	if e := r.entry; e != nil && !e.dropped {
		e.dropped = true
		p.budget += e.n
	}
	r.entry = nil
}

// emit turns the planner into a StepPlan and reports the finished rows.
func (s *Scheduler) emit(p *planner) StepPlan {
	var plan StepPlan
	var live []*entry
	for _, e := range p.entries {
		if e.dropped {
			continue
		}
		live = append(live, e)
		if e.decode {
			plan.Decode = append(plan.Decode, e.row.req.ID)
		} else {
			plan.Prefill = append(plan.Prefill, PrefillChunk{ID: e.row.req.ID, Start: e.start, Len: e.n, Final: e.final})
		}
	}
	for _, r := range p.preempted {
		r.preempted = false
		plan.Preempted = append(plan.Preempted, r.req.ID)
	}
	for _, f := range s.finished {
		delete(s.rows, f.ID)
	}
	plan.Finished, s.finished = s.finished, nil
	if len(live) > 0 {
		s.inflight = live
	}
	return plan
}

// byImportance orders the most important row first: higher Priority, then
// smaller Arrival, then earlier Submit.
func byImportance(a, b *row) int {
	if c := cmp.Compare(b.req.Priority, a.req.Priority); c != 0 {
		return c
	}
	if c := cmp.Compare(a.req.Arrival, b.req.Arrival); c != 0 {
		return c
	}
	return cmp.Compare(a.seq, b.seq)
}

// normalizeSpans validates spans against a prompt of n tokens and returns
// them sorted with touching spans merged.
func normalizeSpans(spans []Span, n int) ([]Span, error) {
	if len(spans) == 0 {
		return nil, nil
	}
	out := slices.Clone(spans)
	slices.SortFunc(out, func(a, b Span) int { return cmp.Compare(a.Start, b.Start) })
	merged := out[:0]
	for _, sp := range out {
		if sp.Start < 0 || sp.End <= sp.Start || sp.End > n {
			return nil, fmt.Errorf("%w: [%d, %d) in a prompt of %d tokens", ErrInvalidSpan, sp.Start, sp.End, n)
		}
		if k := len(merged); k > 0 {
			last := &merged[k-1]
			if sp.Start < last.End {
				return nil, fmt.Errorf("%w: [%d, %d) overlaps [%d, %d)", ErrInvalidSpan, sp.Start, sp.End, last.Start, last.End)
			}
			if sp.Start == last.End {
				last.End = sp.End
				continue
			}
		}
		merged = append(merged, sp)
	}
	return merged, nil
}

// spanAround returns the span that pos falls strictly inside, if any.
func spanAround(spans []Span, pos int) (Span, bool) {
	i := sort.Search(len(spans), func(i int) bool { return spans[i].End > pos })
	if i < len(spans) && spans[i].Start < pos {
		return spans[i], true
	}
	return Span{}, false
}

func remove(rows []*row, r *row) []*row {
	return slices.DeleteFunc(rows, func(x *row) bool { return x == r })
}
