package engine

import (
	"errors"
	"fmt"
	"maps"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
)

func TestConfigDefaults(t *testing.T) {
	got := Config{}.withDefaults()
	want := Config{TokenBudget: 2048, PrefillChunk: 512, MaxConcurrent: 4, MaxWaiting: 64}
	if got != want {
		t.Errorf("zero Config = %+v, want %+v", got, want)
	}
	got = Config{TokenBudget: -1, PrefillChunk: -1, MaxConcurrent: -1, MaxWaiting: -1}.withDefaults()
	want = Config{TokenBudget: 2048, PrefillChunk: 512, MaxConcurrent: 1, MaxWaiting: 64}
	if got != want {
		t.Errorf("negative Config = %+v, want %+v", got, want)
	}
	if got := (Config{MaxConcurrent: 20}).withDefaults().MaxConcurrent; got != 20 {
		t.Errorf("MaxConcurrent 20 = %d, want 20", got)
	}
	if got := (Config{MaxConcurrent: 1000}).withDefaults().MaxConcurrent; got != MaxConcurrentLimit {
		t.Errorf("MaxConcurrent 1000 = %d, want %d", got, MaxConcurrentLimit)
	}
	if MaxConcurrentLimit < 256 {
		t.Errorf("MaxConcurrentLimit = %d, want at least 256", MaxConcurrentLimit)
	}
	for _, tt := range []struct{ in, want int }{{-3, 1}, {0, 1}, {1, 1}, {4, 4}, {8, 8}, {9, 9}, {64, 64}, {256, 256}, {257, 256}, {math.MaxInt, 256}} {
		if got := ClampConcurrency(tt.in); got != tt.want {
			t.Errorf("ClampConcurrency(%d) = %d, want %d", tt.in, got, tt.want)
		}
	}
}

func TestSubmitErrors(t *testing.T) {
	newSched := func() *Scheduler {
		// 2 bytes a token, limit 950 bytes: at most 475 tokens.
		s := NewScheduler(Config{MaxWaiting: 2}, unitLayout(1, 0, 0), 1000)
		if err := s.Submit(Request{ID: "live", PromptTokens: 1, MaxTokens: 1}); err != nil {
			t.Fatal(err)
		}
		return s
	}
	tests := []struct {
		name string
		req  Request
		want error
	}{
		{"ok", Request{ID: "x", PromptTokens: 400, MaxTokens: 75}, nil},
		{"empty id", Request{PromptTokens: 1, MaxTokens: 1}, ErrInvalidID},
		{"empty prompt", Request{ID: "x", MaxTokens: 1}, ErrEmptyPrompt},
		{"negative prompt", Request{ID: "x", PromptTokens: -1, MaxTokens: 1}, ErrEmptyPrompt},
		{"duplicate", Request{ID: "live", PromptTokens: 1, MaxTokens: 1}, ErrDuplicateID},
		{"duplicate zero max", Request{ID: "live", PromptTokens: 1}, ErrDuplicateID},
		{"never fits", Request{ID: "x", PromptTokens: 400, MaxTokens: 76}, ErrNeverFits},
		{"never fits overflow", Request{ID: "x", PromptTokens: 10, MaxTokens: math.MaxInt}, ErrNeverFits},
		{"zero max skips the fit check", Request{ID: "x", PromptTokens: 1 << 40}, nil},
		{"span outside", Request{ID: "x", PromptTokens: 10, MaxTokens: 1, Spans: []Span{{5, 11}}}, ErrInvalidSpan},
		{"span negative", Request{ID: "x", PromptTokens: 10, MaxTokens: 1, Spans: []Span{{-1, 3}}}, ErrInvalidSpan},
		{"span empty", Request{ID: "x", PromptTokens: 10, MaxTokens: 1, Spans: []Span{{3, 3}}}, ErrInvalidSpan},
		{"span overlap", Request{ID: "x", PromptTokens: 10, MaxTokens: 1, Spans: []Span{{4, 8}, {1, 5}}}, ErrInvalidSpan},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if err := newSched().Submit(tt.req); !errors.Is(err, tt.want) {
				t.Errorf("Submit = %v, want %v", err, tt.want)
			}
		})
	}
	s := newSched()
	if err := s.Submit(Request{ID: "b", PromptTokens: 1, MaxTokens: 1}); err != nil {
		t.Fatal(err)
	}
	if err := s.Submit(Request{ID: "c", PromptTokens: 1, MaxTokens: 1}); !errors.Is(err, ErrQueueFull) {
		t.Errorf("third waiting request: %v, want ErrQueueFull", err)
	}
}

func TestNormalizeSpans(t *testing.T) {
	got, err := normalizeSpans([]Span{{20, 30}, {0, 5}, {5, 10}, {10, 12}, {40, 50}}, 50)
	want := []Span{{0, 12}, {20, 30}, {40, 50}}
	if err != nil || !slices.Equal(got, want) {
		t.Errorf("normalizeSpans = %v, %v; want %v", got, err, want)
	}
	in := []Span{{5, 10}, {0, 5}}
	if _, err := normalizeSpans(in, 10); err != nil || in[0] != (Span{5, 10}) {
		t.Error("normalizeSpans must not modify its input")
	}
	for _, tt := range []struct {
		pos  int
		want bool
	}{{0, false}, {1, true}, {11, true}, {12, false}, {15, false}, {21, true}, {30, false}, {45, true}, {50, false}} {
		if _, cut := spanAround(want, tt.pos); cut != tt.want {
			t.Errorf("spanAround(%d) = %v, want %v", tt.pos, cut, tt.want)
		}
	}
}

func TestFinishReasonString(t *testing.T) {
	for r, want := range map[FinishReason]string{
		FinishStop: "stop", FinishLength: "length", FinishError: "error", FinishKVExhausted: "kv_exhausted", 0: "FinishReason(0)",
	} {
		if r.String() != want {
			t.Errorf("%d.String() = %q, want %q", uint8(r), r.String(), want)
		}
	}
}

func TestPlanBeforeCompletePanics(t *testing.T) {
	s := NewScheduler(Config{}, unitLayout(1, 0, 0), 1000)
	s.Complete(StepResult{Failed: []RequestID{"nobody"}}) // no plan in flight: nothing happens
	if s.Snapshot().Steps != 0 {
		t.Fatal("Complete without a plan counted a step")
	}
	if p := s.Plan(); !p.Empty() {
		t.Fatalf("idle scheduler planned %+v", p)
	}
	if p := s.Plan(); !p.Empty() {
		t.Fatal("an empty plan must not need Complete")
	}
	if err := s.Submit(Request{ID: "a", PromptTokens: 4, MaxTokens: 2}); err != nil {
		t.Fatal(err)
	}
	if p := s.Plan(); p.Empty() {
		t.Fatal("no work planned")
	}
	defer func() {
		if recover() == nil {
			t.Error("Plan before Complete did not panic")
		}
	}()
	s.Plan()
}

// TestWideBatchBoundByLedger checks that with a cap far above the old one
// the ledger, not the cap, bounds how many rows run together.
func TestWideBatchBoundByLedger(t *testing.T) {
	const rows, prompt = 100, 4
	layout := unitLayout(1, 0, 0)
	perRow := layout.SequenceBytes(prompt)
	for _, tt := range []struct {
		name     string
		capacity int64
		want     int
	}{
		{"ledger roomy", 1 << 20, rows},
		{"ledger tight", 50 * perRow, int(NewLedger(50*perRow).Limit() / perRow)},
	} {
		s := NewScheduler(Config{MaxConcurrent: MaxConcurrentLimit, MaxWaiting: rows}, layout, tt.capacity)
		for i := range rows {
			if err := s.Submit(Request{ID: RequestID(fmt.Sprint(i)), PromptTokens: prompt, MaxTokens: 8}); err != nil {
				t.Fatal(err)
			}
		}
		p := s.Plan()
		if len(p.Prefill) != tt.want || s.Snapshot().Running != tt.want {
			t.Errorf("%s: %d prefills, %d running, want %d", tt.name, len(p.Prefill), s.Snapshot().Running, tt.want)
		}
	}
}

// TestSchedProperties drives schedulers with random seeded scripts and checks
// the invariants of the package after every call, then keeps stepping until
// every accepted request has left, by a Finish or a Cancel.
func TestSchedProperties(t *testing.T) {
	seeds := 300
	if testing.Short() {
		seeds = 30
	}
	for seed := range uint64(seeds) {
		first := runProperty(t, seed)
		if t.Failed() {
			return
		}
		if again := runProperty(t, seed); again != first {
			t.Fatalf("seed %d: the same calls produced different plans", seed)
		}
	}
}

// propModel is what the test knows independently of the scheduler.
type propModel struct {
	t      *testing.T
	seed   uint64
	s      *Scheduler
	live   map[RequestID]bool // accepted, not yet finished or cancelled
	budget int
	log    strings.Builder
}

func runProperty(t *testing.T, seed uint64) string {
	rng := rand.New(rand.NewPCG(seed, 99))
	layout := unitLayout(rng.IntN(3), rng.IntN(3), 1+rng.IntN(16))
	cfg := Config{
		TokenBudget:   1 + rng.IntN(120),
		PrefillChunk:  1 + rng.IntN(48),
		MaxConcurrent: rng.IntN(9),
		MaxWaiting:    1 + rng.IntN(10),
	}
	m := &propModel{t: t, seed: seed, live: map[RequestID]bool{}}
	m.s = NewScheduler(cfg, layout, rng.Int64N(800))
	m.budget = m.s.cfg.TokenBudget
	ids := make([]RequestID, 14)
	for i := range ids {
		ids[i] = RequestID(fmt.Sprintf("r%d", i))
	}
	for range 400 {
		switch k := rng.IntN(20); {
		case k < 6:
			m.submit(randomRequest(rng, ids))
		case k < 7:
			m.cancel(ids[rng.IntN(len(ids))])
		case k < 8:
			m.s.Resize(rng.Int64N(800))
			m.check("resize")
		case k < 9:
			m.s.SetMaxConcurrent(rng.IntN(10))
			m.check("cap")
		default:
			m.step(rng, true)
		}
		if m.t.Failed() {
			return ""
		}
	}
	for i := 0; len(m.live) > 0; i++ {
		if i == 100_000 {
			t.Fatalf("seed %d: %d requests still live after %d steps", seed, len(m.live), i)
		}
		m.step(rng, false)
		if m.t.Failed() {
			return ""
		}
	}
	if m.s.ledger.Used() != 0 || len(m.s.rows) != 0 {
		t.Fatalf("seed %d: drained but ledger holds %d bytes, %d rows", seed, m.s.ledger.Used(), len(m.s.rows))
	}
	return m.log.String()
}

func randomRequest(rng *rand.Rand, ids []RequestID) Request {
	req := Request{
		ID:           ids[rng.IntN(len(ids))],
		PromptTokens: 1 + rng.IntN(80),
		MaxTokens:    rng.IntN(40) - 2,
		Priority:     rng.IntN(3),
		Arrival:      uint64(rng.IntN(50)),
	}
	if rng.IntN(20) == 0 {
		req.PromptTokens = 0
	}
	for pos := rng.IntN(20); rng.IntN(2) == 0 && pos < req.PromptTokens; {
		end := pos + 1 + rng.IntN(40)
		req.Spans = append(req.Spans, Span{Start: pos, End: end})
		pos = end + rng.IntN(10)
	}
	return req
}

func (m *propModel) submit(req Request) {
	err := m.s.Submit(req)
	switch {
	case err == nil:
		if m.live[req.ID] {
			m.t.Errorf("seed %d: duplicate id %s accepted", m.seed, req.ID)
		}
		m.live[req.ID] = true
	case errors.Is(err, ErrDuplicateID):
		if !m.live[req.ID] {
			m.t.Errorf("seed %d: %s rejected as a duplicate but not live", m.seed, req.ID)
		}
	case errors.Is(err, ErrEmptyPrompt), errors.Is(err, ErrInvalidSpan), errors.Is(err, ErrNeverFits), errors.Is(err, ErrQueueFull):
	default:
		m.t.Errorf("seed %d: unexpected Submit error %v", m.seed, err)
	}
	fmt.Fprintf(&m.log, "submit %s %v\n", req.ID, err)
	m.check("submit")
}

func (m *propModel) cancel(id RequestID) {
	if got := m.s.Cancel(id); got != m.live[id] {
		m.t.Errorf("seed %d: Cancel(%s) = %v, live %v", m.seed, id, got, m.live[id])
	}
	delete(m.live, id)
	fmt.Fprintf(&m.log, "cancel %s\n", id)
	m.check("cancel")
}

// step plans, checks the plan, optionally interleaves calls before
// completing it, and completes it with random stops and failures.
func (m *propModel) step(rng *rand.Rand, noisy bool) {
	before := map[RequestID]rowState{}
	for id, r := range m.s.rows {
		before[id] = r.state
	}
	runningBefore := len(m.s.running)
	plan := m.s.Plan()
	fmt.Fprintf(&m.log, "%s\n", planLine(plan))
	m.checkPlan(plan, before, runningBefore)
	m.check("plan")
	if plan.Empty() {
		return
	}
	var res StepResult
	sampled := map[RequestID]bool{}
	for _, c := range plan.Prefill {
		sampled[c.ID] = c.Final
	}
	for _, id := range plan.Decode {
		sampled[id] = true
	}
	for _, id := range slices.Sorted(maps.Keys(sampled)) {
		switch rng.IntN(30) {
		case 0, 1, 2:
			res.Stopped = append(res.Stopped, id)
		case 3:
			res.Failed = append(res.Failed, id)
		}
	}
	if noisy && rng.IntN(10) == 0 {
		id := plan.Prefill
		if len(id) > 0 {
			m.cancel(id[0].ID)
		}
	}
	m.s.Complete(res)
	m.check("complete")
}

// checkPlan asserts what one plan may contain.
func (m *propModel) checkPlan(p StepPlan, before map[RequestID]rowState, runningBefore int) {
	t, s := m.t, m.s
	fail := func(format string, args ...any) {
		t.Helper()
		t.Errorf("seed %d: %s: %s", m.seed, planLine(p), fmt.Sprintf(format, args...))
	}
	seen := map[RequestID]string{}
	mark := func(id RequestID, what string) {
		if prev, dup := seen[id]; dup {
			fail("%s is both %s and %s", id, prev, what)
		}
		seen[id] = what
	}
	total, admitted := len(p.Decode), 0
	for _, c := range p.Prefill {
		mark(c.ID, "prefill")
		total += c.Len
		r := s.rows[c.ID]
		if r == nil || r.state != stateRunning {
			fail("prefill row %s is not running", c.ID)
			continue
		}
		if c.Start != r.kv || c.Len < 1 || c.Start+c.Len > r.target() || c.Final != (c.Start+c.Len == r.target()) {
			fail("chunk %+v of a row with kv %d target %d", c, r.kv, r.target())
		}
		if sp, cut := spanAround(r.spans, c.Start+c.Len); cut {
			fail("chunk %+v splits span %+v", c, sp)
		}
		if before[c.ID] == stateWaiting {
			admitted++
		}
	}
	for _, id := range p.Decode {
		mark(id, "decode")
		r := s.rows[id]
		if r == nil || r.state != stateRunning || !r.decoding() || before[id] != stateRunning {
			fail("decode row %s is not a running decode row", id)
		}
	}
	if total > m.budget {
		first := p.Prefill[0]
		r := s.rows[first.ID]
		if len(p.Prefill) != 1 || !slices.Contains(r.spans, Span{first.Start, first.Start + first.Len}) {
			fail("%d tokens over a budget of %d without a span overrun", total, m.budget)
		}
	}
	for i, id := range p.Preempted {
		mark(id, "preempted")
		r := s.rows[id]
		if r == nil || r.state != stateWaiting || r.kv != 0 || before[id] != stateRunning {
			fail("preempted row %s is not back in waiting", id)
		}
		if s.ledger.Holds(id) {
			fail("preempted row %s still holds a charge", id)
		}
		if len(s.waiting) < len(p.Preempted) || s.waiting[len(p.Preempted)-1-i] != r {
			fail("preempted row %s is not at the front of the queue", id)
		}
	}
	for _, f := range p.Finished {
		mark(f.ID, "finished")
		if !m.live[f.ID] {
			fail("finished %s is not live", f.ID)
		}
		if _, still := s.rows[f.ID]; still {
			fail("finished %s is still tracked", f.ID)
		}
		delete(m.live, f.ID)
	}
	if p.Empty() && len(p.Finished) == 0 && len(p.Preempted) == 0 && len(s.rows) > 0 {
		fail("no progress with %d rows live", len(s.rows))
	}
	if len(s.running) > max(s.cfg.MaxConcurrent, runningBefore) || admitted > 0 && len(s.running) > s.cfg.MaxConcurrent {
		fail("%d running (%d before, %d admitted) over a cap of %d", len(s.running), runningBefore, admitted, s.cfg.MaxConcurrent)
	}
}

// check asserts the scheduler's invariants between calls.
func (m *propModel) check(after string) {
	t, s := m.t, m.s
	t.Helper()
	fail := func(format string, args ...any) {
		t.Helper()
		t.Errorf("seed %d after %s: %s", m.seed, after, fmt.Sprintf(format, args...))
	}
	checkLedger(t, s.ledger)
	if s.ledger.Len() != len(s.running) {
		fail("%d charges for %d running rows", s.ledger.Len(), len(s.running))
	}
	var sum int64
	for _, r := range s.running {
		if r.state != stateRunning || !s.ledger.Holds(r.req.ID) || s.rows[r.req.ID] != r {
			fail("running row %s: state %d, charged %v", r.req.ID, r.state, s.ledger.Holds(r.req.ID))
		}
		if r.kv < 0 || r.kv >= r.target() || r.gen >= r.req.MaxTokens {
			fail("running row %s: kv %d gen %d target %d max %d", r.req.ID, r.kv, r.gen, r.target(), r.req.MaxTokens)
		}
		sum += s.ledger.Charge(r.req.ID)
	}
	if sum != s.ledger.Used() {
		fail("running rows hold %d bytes, ledger %d", sum, s.ledger.Used())
	}
	for _, r := range s.waiting {
		if r.state != stateWaiting || r.kv != 0 || s.ledger.Holds(r.req.ID) || s.rows[r.req.ID] != r {
			fail("waiting row %s: state %d kv %d", r.req.ID, r.state, r.kv)
		}
	}
	done := 0
	for _, f := range s.finished {
		if r := s.rows[f.ID]; r == nil || r.state != stateDone {
			fail("finished %s is not done", f.ID)
		}
		done++
	}
	if len(s.rows) != len(s.running)+len(s.waiting)+done {
		fail("%d rows tracked, %d running + %d waiting + %d done", len(s.rows), len(s.running), len(s.waiting), done)
	}
	for id := range m.live {
		if _, ok := s.rows[id]; !ok {
			fail("live %s is not tracked", id)
		}
	}
	if len(s.rows) != len(m.live) {
		fail("%d rows tracked, %d live", len(s.rows), len(m.live))
	}
}

// scriptedPrefixes is a prefix cache with a fixed answer per request, and
// a log of what admission asked of it.
type scriptedPrefixes struct {
	cached map[RequestID]int
	wait   map[RequestID]bool
	log    []string
}

func (p *scriptedPrefixes) Adopt(id RequestID, tokens int) (int, bool) {
	p.log = append(p.log, fmt.Sprintf("adopt %s %d", id, tokens))
	return p.cached[id], p.wait[id]
}

func (p *scriptedPrefixes) Drop(id RequestID) { p.log = append(p.log, "drop "+string(id)) }

// TestAdmissionAdoptsCachedPrefixes: an admitted row starts its prefill
// after the tokens the cache gave it, a prefix ending inside a span makes
// the first chunk run to the span's end, and a row the ledger then refuses
// gives its adoption back.
func TestAdmissionAdoptsCachedPrefixes(t *testing.T) {
	s := NewScheduler(Config{TokenBudget: 2048, PrefillChunk: 512}, unitLayout(1, 0, 0), 1<<20)
	p := &scriptedPrefixes{cached: map[RequestID]int{"a": 512, "b": 256}}
	s.SetPrefixes(p)
	if err := s.Submit(Request{ID: "a", PromptTokens: 700, MaxTokens: 4}); err != nil {
		t.Fatal(err)
	}
	if err := s.Submit(Request{ID: "b", PromptTokens: 900, MaxTokens: 4, Spans: []Span{{Start: 200, End: 800}}}); err != nil {
		t.Fatal(err)
	}
	plan := s.Plan()
	want := []PrefillChunk{{ID: "a", Start: 512, Len: 188, Final: true}, {ID: "b", Start: 256, Len: 544}}
	if !slices.Equal(plan.Prefill, want) {
		t.Fatalf("prefill %+v, want %+v", plan.Prefill, want)
	}
	if got := strings.Join(p.log, ", "); got != "adopt a 700, adopt b 900" {
		t.Errorf("asked %q", got)
	}

	// A ledger too small for the row: the adoption is given back.
	small := NewScheduler(Config{}, unitLayout(1, 0, 0), 1000)
	q := &scriptedPrefixes{cached: map[RequestID]int{"big": 256}}
	small.SetPrefixes(q)
	if err := small.Submit(Request{ID: "run", PromptTokens: 400, MaxTokens: 50}); err != nil {
		t.Fatal(err)
	}
	small.Plan()
	if err := small.Submit(Request{ID: "big", PromptTokens: 300, MaxTokens: 1}); err != nil {
		t.Fatal(err)
	}
	small.Complete(StepResult{})
	if plan := small.Plan(); slices.ContainsFunc(plan.Prefill, func(c PrefillChunk) bool { return c.ID == "big" }) {
		t.Fatalf("big admitted over the ledger: %+v", plan)
	}
	if got := strings.Join(q.log, ", "); got != "adopt run 400, adopt big 300, drop big" {
		t.Errorf("asked %q", got)
	}

	// A row told to wait is not admitted, nor is anyone behind it (FIFO);
	// once told otherwise it starts after its prefix.
	w := NewScheduler(Config{}, unitLayout(1, 0, 0), 1<<20)
	wp := &scriptedPrefixes{cached: map[RequestID]int{"second": 256}, wait: map[RequestID]bool{"second": true}}
	w.SetPrefixes(wp)
	for _, id := range []RequestID{"first", "second", "third"} {
		if err := w.Submit(Request{ID: id, PromptTokens: 600, MaxTokens: 4}); err != nil {
			t.Fatal(err)
		}
	}
	plan = w.Plan()
	if len(plan.Prefill) != 1 || plan.Prefill[0].ID != "first" {
		t.Fatalf("with second waiting: %+v", plan.Prefill)
	}
	w.Complete(StepResult{})
	wp.wait["second"] = false
	plan = w.Plan()
	if !slices.ContainsFunc(plan.Prefill, func(c PrefillChunk) bool { return c.ID == "second" && c.Start == 256 }) {
		t.Fatalf("second not admitted after its prefix: %+v", plan.Prefill)
	}
	if got := strings.Join(wp.log, ", "); !strings.HasPrefix(got, "adopt first 600, adopt second 600, drop second, adopt second 600") {
		t.Errorf("asked %q", got)
	}
}
