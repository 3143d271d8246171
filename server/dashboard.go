package server

import (
	"bytes"
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"encoding/json"
	"io/fs"
	"math"
	"mime"
	"net/http"
	"path"
	"slices"
	"strings"
	"time"

	"github.com/goprovider/provider/graph"
	"github.com/goprovider/provider/slots"
)

// The dashboard: a static page at / (its assets under /dashboard/) that
// polls GET /v1/status, the server's live state per model, and streams a
// chat answer through /v1/chat/completions. The page and its assets hold
// no data, so RequireToken lets them through; the page asks for the token
// and sends it on its own calls.
//
// The status endpoint reads the engines' and slots' gauges at request time
// and the bounded memory below: per model the timings of the last finished
// generations, and the codes of the last refused requests. Neither holds
// any request content, nor a model name the server does not serve.

//go:embed dashboard
var dashboardFiles embed.FS

// dashboardPrefix is the path prefix of the page's assets.
const dashboardPrefix = "/dashboard/"

// Geometry of the status figures.
const (
	// seriesBucket and seriesBuckets: the sparklines cover five minutes in
	// buckets of two seconds, completed buckets only.
	seriesBucket  = 2 * time.Second
	seriesBuckets = 150
	// liveWindow is the span of the live TTFT, TPOT and throughput.
	liveWindow = time.Minute
	// keptFinished bounds the generations remembered per model (a model
	// that finishes more within the series' span under-counts its oldest
	// buckets); keptRefusals the refusals listed.
	keptFinished = 4096
	keptRefusals = 64
)

// dashboardPublic reports whether a path is the page or one of its assets,
// which RequireToken lets through without a token. The path must be clean:
// "/dashboard/../v1/status" is not an asset.
func dashboardPublic(p string) bool {
	return p == "/" || (strings.HasPrefix(p, dashboardPrefix) && path.Clean(p) == p)
}

// routeDashboard registers the page, its assets and the status endpoint.
func (s *Server) routeDashboard() {
	assets := dashboardAssets()
	s.mux.HandleFunc("GET /{$}", func(w http.ResponseWriter, r *http.Request) { assets.serve(w, r, "index.html") })
	s.mux.HandleFunc("GET "+dashboardPrefix+"{file...}", func(w http.ResponseWriter, r *http.Request) {
		if !assets.serve(w, r, r.PathValue("file")) {
			writeError(w, classify(errNotFound))
		}
	})
	s.mux.HandleFunc("GET /v1/status", s.serveStatus)
	s.mux.HandleFunc("/v1/status", s.refuse(errMethod))
}

// asset is one embedded file with its validator.
type asset struct {
	body []byte
	etag string
	typ  string
}

type assetSet map[string]asset

func dashboardAssets() assetSet {
	set := assetSet{}
	err := fs.WalkDir(dashboardFiles, "dashboard", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := dashboardFiles.ReadFile(p)
		if err != nil {
			return err
		}
		sum := sha256.Sum256(b)
		typ := mime.TypeByExtension(path.Ext(p))
		if typ == "" {
			typ = "application/octet-stream"
		}
		set[strings.TrimPrefix(p, "dashboard/")] = asset{body: b, etag: `"` + hex.EncodeToString(sum[:8]) + `"`, typ: typ}
		return nil
	})
	if err != nil {
		panic("server: embedded dashboard: " + err.Error())
	}
	return set
}

// serve writes the named asset; false when there is none.
func (a assetSet) serve(w http.ResponseWriter, r *http.Request, name string) bool {
	f, ok := a[name]
	if !ok {
		return false
	}
	h := w.Header()
	h.Set("Content-Type", f.typ)
	h.Set("ETag", f.etag)
	h.Set("Cache-Control", "no-cache")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Referrer-Policy", "no-referrer")
	// The page keeps the API token: nothing but its own files may run in
	// it, and no other site may frame it.
	h.Set("Content-Security-Policy", "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; form-action 'none'; base-uri 'none'; frame-ancestors 'none'")
	http.ServeContent(w, r, name, time.Time{}, bytes.NewReader(f.body))
	return true
}

// finished is one generation's timing, for the status figures.
type finished struct {
	end time.Time
	// first is when the first output came; zero when none did.
	first time.Time
	ttft  time.Duration
	// tpot is the time per output token after the first; decoded is false
	// (and tpot zero) with fewer than two tokens.
	tpot    time.Duration
	decoded bool
	tokens  int
}

// refusal is one generation request answered with an error: its reason
// code and time, never its content.
type refusal struct {
	at       time.Time
	endpoint string
	// model is the served model the request named; "" when the request
	// named none the server serves.
	model  string
	status int
	code   string
}

// ring keeps the last len(buf) values pushed.
type ring[T any] struct {
	buf  []T
	next int
	full bool
}

func newRing[T any](n int) *ring[T] { return &ring[T]{buf: make([]T, n)} }

func (r *ring[T]) push(v T) {
	r.buf[r.next] = v
	r.next = (r.next + 1) % len(r.buf)
	if r.next == 0 {
		r.full = true
	}
}

// all is the kept values, oldest first.
func (r *ring[T]) all() []T {
	if !r.full {
		return slices.Clone(r.buf[:r.next])
	}
	return append(slices.Clone(r.buf[r.next:]), r.buf[:r.next]...)
}

// recent is the status endpoint's memory; metrics.mu guards it.
type recent struct {
	finished map[string]*ring[finished]
	refusals *ring[refusal]
}

// record keeps what the status endpoint shows of one generation request
// that left at now: its timing when it ended with output counted, its
// reason code when it was answered with an error (client cancels are not
// refusals).
func (m *metrics) record(now time.Time, endpoint string, status int, o outcome, t timing) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.recent == nil {
		m.recent = &recent{finished: map[string]*ring[finished]{}, refusals: newRing[refusal](keptRefusals)}
	}
	if o.class != "" && o.class != classCancelled {
		m.recent.refusals.push(refusal{at: now, endpoint: endpoint, model: t.model, status: status, code: o.code})
	}
	if t.model == "" || !t.ended {
		return
	}
	f := finished{end: now, tokens: t.output}
	if t.first {
		f.first, f.ttft = now.Add(t.ttft-t.e2e), t.ttft
		if t.output >= 2 {
			f.tpot, f.decoded = (t.e2e-t.ttft)/time.Duration(t.output-1), true
		}
	}
	r, ok := m.recent.finished[t.model]
	if !ok {
		r = newRing[finished](keptFinished)
		m.recent.finished[t.model] = r
	}
	r.push(f)
}

// recentOf is a copy of the memory, taken under the lock.
func (m *metrics) recentOf() (map[string][]finished, []refusal) {
	m.mu.Lock()
	defer m.mu.Unlock()
	fin := map[string][]finished{}
	if m.recent == nil {
		return fin, nil
	}
	for name, r := range m.recent.finished {
		fin[name] = r.all()
	}
	return fin, m.recent.refusals.all()
}

// totals are a model's request counters since the start.
type totals struct {
	requests                uint64
	promptTokens, completed uint64
}

func (m *metrics) totalsOf(name string) totals {
	m.mu.Lock()
	defer m.mu.Unlock()
	mm, ok := m.models[name]
	if !ok {
		return totals{}
	}
	return totals{requests: mm.e2e.n, promptTokens: mm.promptTokens, completed: mm.completionTokens}
}

// statusJSON is the body of GET /v1/status.
type statusJSON struct {
	Object string `json:"object"`
	// Time is the server's clock, in Unix milliseconds.
	Time          int64              `json:"time"`
	UptimeSeconds float64            `json:"uptime_seconds"`
	Loading       bool               `json:"loading"`
	Models        []modelStatusJSON  `json:"models"`
	Refusals      []refusalJSON      `json:"refusals"`
	RefusalCodes  map[string]int     `json:"refusal_codes"`
	Series        seriesGeometryJSON `json:"series"`
}

type seriesGeometryJSON struct {
	BucketSeconds float64 `json:"bucket_seconds"`
	Buckets       int     `json:"buckets"`
	// End is the end of the last bucket, in Unix milliseconds.
	End int64 `json:"end"`
}

type modelStatusJSON struct {
	Name string `json:"name"`
	// State is a slot state (loading, running, reloading, crashed), or
	// "stopped" for an engine that no longer serves, or "unloaded" for a
	// model the server loads on demand.
	State           string           `json:"state"`
	Running         int              `json:"running"`
	Waiting         int              `json:"waiting"`
	MaxConcurrent   int              `json:"max_concurrent"`
	KVGrantBytes    int64            `json:"kv_grant_bytes"`
	KVUsedBytes     int64            `json:"kv_used_bytes"`
	KVBytesPerToken int64            `json:"kv_bytes_per_token"`
	Preemptions     uint64           `json:"preemptions"`
	Steps           uint64           `json:"steps"`
	PrefixCache     *prefixCacheJSON `json:"prefix_cache"`
	// DecodeTPS and PrefillTPS are the slot's moving averages; absent
	// without slots.
	DecodeTPS      *float64 `json:"decode_tokens_per_second,omitempty"`
	PrefillTPS     *float64 `json:"prefill_tokens_per_second,omitempty"`
	WedgeSuspected bool     `json:"wedge_suspected"`
	// Requests, PromptTokens and CompletionTokens count finished
	// generations since the start.
	Requests         uint64     `json:"requests"`
	PromptTokens     uint64     `json:"prompt_tokens"`
	CompletionTokens uint64     `json:"completion_tokens"`
	Live             liveJSON   `json:"live"`
	Series           seriesJSON `json:"series"`
}

type prefixCacheJSON struct {
	Hits        uint64 `json:"hits"`
	Misses      uint64 `json:"misses"`
	TokensSaved uint64 `json:"tokens_saved"`
	// HitRate is hits / (hits + misses); null before any admission.
	HitRate     *float64 `json:"hit_rate"`
	Bytes       int64    `json:"bytes"`
	BudgetBytes int64    `json:"budget_bytes"`
}

// liveJSON are the figures of the generations of the last liveWindow (or
// of the uptime, when shorter).
type liveJSON struct {
	WindowSeconds float64 `json:"window_seconds"`
	Requests      int     `json:"requests"`
	// TTFT and TPOT are null when no generation of the window had one.
	TTFT            *quantilesJSON `json:"ttft_ms"`
	TPOT            *quantilesJSON `json:"tpot_ms"`
	TokensPerSecond float64        `json:"tokens_per_second"`
}

type quantilesJSON struct {
	P50 float64 `json:"p50"`
	P95 float64 `json:"p95"`
}

// seriesJSON are the sparklines, oldest bucket first. A bucket without a
// TTFT or TPOT is null.
type seriesJSON struct {
	TTFT            []*float64 `json:"ttft_ms"`
	TPOT            []*float64 `json:"tpot_ms"`
	TokensPerSecond []float64  `json:"tokens_per_second"`
}

type refusalJSON struct {
	// Time is in Unix milliseconds.
	Time     int64  `json:"time"`
	Endpoint string `json:"endpoint"`
	Model    string `json:"model,omitempty"`
	Status   int    `json:"status"`
	Code     string `json:"code"`
}

func (s *Server) serveStatus(w http.ResponseWriter, _ *http.Request) {
	b, _ := json.Marshal(s.status())
	w.Header().Set("Cache-Control", "no-store")
	writeJSON(w, http.StatusOK, b)
}

// status gathers the served models (from their engines), the slots'
// snapshots and the models loaded on demand, with the recent figures.
func (s *Server) status() statusJSON {
	now := s.clk.Now()
	s.mu.Lock()
	loading := s.loading
	s.mu.Unlock()
	fin, refs := s.metrics.recentOf()
	end := now.Truncate(seriesBucket)
	window := min(liveWindow, now.Sub(s.started))
	out := statusJSON{
		Object: "status", Time: now.UnixMilli(), UptimeSeconds: now.Sub(s.started).Seconds(), Loading: loading,
		Models: []modelStatusJSON{}, Refusals: []refusalJSON{}, RefusalCodes: map[string]int{},
		Series: seriesGeometryJSON{BucketSeconds: seriesBucket.Seconds(), Buckets: seriesBuckets, End: end.UnixMilli()},
	}
	seen := map[string]bool{}
	add := func(name string) {
		if seen[name] {
			return
		}
		seen[name] = true
		t := s.metrics.totalsOf(name)
		out.Models = append(out.Models, modelStatusJSON{
			Name: name, Requests: t.requests, PromptTokens: t.promptTokens, CompletionTokens: t.completed,
			Live:   liveOf(fin[name], now, window),
			Series: seriesOf(fin[name], end, seriesBucket, seriesBuckets),
		})
	}
	models := s.graph.Models()
	for _, gm := range models {
		add(gm.Name)
	}
	var snaps []slots.Snapshot
	var available []string
	if s.slots != nil {
		snaps = s.slots.Snapshots()
		available = s.slots.Available()
		for _, sn := range snaps {
			add(sn.Model)
		}
		for _, name := range available {
			add(name)
		}
	}
	byName := map[string]*modelStatusJSON{}
	for i := range out.Models {
		byName[out.Models[i].Name] = &out.Models[i]
	}
	for _, sn := range snaps {
		m := byName[sn.Model]
		m.State = string(sn.State)
		m.Running, m.Waiting, m.MaxConcurrent = sn.Running, sn.Waiting, sn.MaxConcurrent
		m.KVGrantBytes, m.KVUsedBytes, m.KVBytesPerToken = sn.KVGrant, sn.TokensUsed*sn.KVBytesPerToken, sn.KVBytesPerToken
		m.Steps, m.WedgeSuspected = sn.Steps, sn.WedgeSuspected
		m.DecodeTPS, m.PrefillTPS = &sn.DecodeTPS, &sn.PrefillTPS
	}
	for _, gm := range models {
		engineStatus(byName[gm.Name], gm, s.slots != nil)
	}
	for _, name := range available {
		if m := byName[name]; m.State == "" {
			m.State = "unloaded"
		}
	}
	slices.SortFunc(out.Models, func(a, b modelStatusJSON) int { return strings.Compare(a.Name, b.Name) })
	for i := len(refs) - 1; i >= 0; i-- {
		r := refs[i]
		out.Refusals = append(out.Refusals, refusalJSON{Time: r.at.UnixMilli(), Endpoint: r.endpoint, Model: r.model, Status: r.status, Code: r.code})
		out.RefusalCodes[r.code]++
	}
	return out
}

// engineStatus fills a served model's figures from its engine's gauges.
// With slots, the slot's state and grant stand; without, the engine's
// liveness is its state.
func engineStatus(m *modelStatusJSON, gm graph.Model, slotted bool) {
	st := gm.Generator.Stats()
	m.Running, m.Waiting, m.MaxConcurrent = st.Running, st.Waiting, st.MaxConcurrent
	m.KVUsedBytes, m.KVBytesPerToken = st.KVUsed, st.KVBytesPerToken
	m.Preemptions, m.Steps = st.Preemptions, st.Steps
	if !slotted || m.KVGrantBytes == 0 {
		m.KVGrantBytes = st.KVCapacity
	}
	if !slotted || m.State == "" {
		m.State = string(slots.StateRunning)
		if l, ok := gm.Generator.(Liveness); ok && l.Err() != nil {
			m.State = "stopped"
		}
	}
	if c, ok := gm.Generator.(prefixCacher); ok {
		if cs, on := c.CacheStats(); on {
			p := &prefixCacheJSON{Hits: cs.Hits, Misses: cs.Misses, TokensSaved: cs.TokensSaved, Bytes: cs.Bytes + cs.SharedBytes, BudgetBytes: cs.Budget}
			if n := cs.Hits + cs.Misses; n > 0 {
				r := float64(cs.Hits) / float64(n)
				p.HitRate = &r
			}
			m.PrefixCache = p
		}
	}
}

// liveOf summarizes the generations that ended in the window before now.
// Throughput counts each generation's tokens spread evenly over its decode
// span, the part of it inside the window.
func liveOf(fs []finished, now time.Time, window time.Duration) liveJSON {
	window = max(window, time.Second)
	from := now.Add(-window)
	out := liveJSON{WindowSeconds: window.Seconds()}
	var ttft, tpot []float64
	var tokens float64
	for _, f := range fs {
		tokens += spread(f, from, now)
		if f.end.Before(from) || f.end.After(now) {
			continue
		}
		out.Requests++
		if !f.first.IsZero() {
			ttft = append(ttft, ms(f.ttft))
		}
		if f.decoded {
			tpot = append(tpot, ms(f.tpot))
		}
	}
	out.TTFT, out.TPOT = quantiles(ttft), quantiles(tpot)
	out.TokensPerSecond = tokens / window.Seconds()
	return out
}

// seriesOf buckets the generations into n buckets of width w ending at
// end: per bucket the mean TTFT of the generations whose first output came
// in it, the mean TPOT of those that ended in it, and the tokens per
// second spread over their decode spans.
func seriesOf(fs []finished, end time.Time, w time.Duration, n int) seriesJSON {
	start := end.Add(-time.Duration(n) * w)
	out := seriesJSON{TTFT: make([]*float64, n), TPOT: make([]*float64, n), TokensPerSecond: make([]float64, n)}
	ttft, tpot := make([]mean, n), make([]mean, n)
	bucket := func(t time.Time) (int, bool) {
		if t.Before(start) || !t.Before(end) {
			return 0, false
		}
		return int(t.Sub(start) / w), true
	}
	for _, f := range fs {
		if i, ok := bucket(f.first); ok && !f.first.IsZero() {
			ttft[i].add(ms(f.ttft))
		}
		if i, ok := bucket(f.end); ok && f.decoded {
			tpot[i].add(ms(f.tpot))
		}
		if f.end.Before(start) {
			continue
		}
		first := f.end
		if !f.first.IsZero() {
			first = f.first
		}
		for i := max(0, int(first.Sub(start)/w)); i <= min(n-1, int(f.end.Sub(start)/w)); i++ {
			from := start.Add(time.Duration(i) * w)
			out.TokensPerSecond[i] += spread(f, from, from.Add(w)) / w.Seconds()
		}
	}
	for i := range n {
		out.TTFT[i], out.TPOT[i] = ttft[i].value(), tpot[i].value()
	}
	return out
}

// spread is the share of a generation's tokens produced in [from, to):
// its tokens evenly over its decode span [first, end], or all at its end
// when the span is empty.
func spread(f finished, from, to time.Time) float64 {
	begin := f.first
	if begin.IsZero() || !begin.Before(f.end) {
		if !f.end.Before(from) && f.end.Before(to) {
			return float64(f.tokens)
		}
		return 0
	}
	lo, hi := later(begin, from), earlier(f.end, to)
	if !lo.Before(hi) {
		return 0
	}
	return float64(f.tokens) * float64(hi.Sub(lo)) / float64(f.end.Sub(begin))
}

func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

func earlier(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}

type mean struct {
	sum float64
	n   int
}

func (m *mean) add(v float64) { m.sum += v; m.n++ }

func (m mean) value() *float64 {
	if m.n == 0 {
		return nil
	}
	v := m.sum / float64(m.n)
	return &v
}

// quantiles are the nearest-rank median and 95th percentile; nil for no
// values.
func quantiles(v []float64) *quantilesJSON {
	if len(v) == 0 {
		return nil
	}
	slices.Sort(v)
	rank := func(q float64) float64 {
		i := int(math.Ceil(q*float64(len(v)))) - 1
		return v[min(max(i, 0), len(v)-1)]
	}
	return &quantilesJSON{P50: rank(0.5), P95: rank(0.95)}
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
