package server

import (
	"bufio"
	"fmt"
	"github.com/goprovider/provider/cache"
	"io"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/goprovider/provider/engine"
	"github.com/goprovider/provider/slots"
)

// Histogram bucket bounds, in seconds.
var (
	ttftBuckets = []float64{0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60}
	itlBuckets  = []float64{0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5}
	e2eBuckets  = []float64{0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600}
	// tpotBuckets span a small model on a GPU (about a millisecond a
	// token) to a large one on a CPU (about a second).
	tpotBuckets = []float64{0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.5, 1, 2.5}
)

type histogram struct {
	bounds []float64
	counts []uint64 // per bucket, not cumulative; the last is +Inf
	sum    float64
	n      uint64
}

func newHistogram(bounds []float64) *histogram {
	return &histogram{bounds: bounds, counts: make([]uint64, len(bounds)+1)}
}

func (h *histogram) observe(d time.Duration) {
	v := d.Seconds()
	i, _ := slices.BinarySearch(h.bounds, v)
	h.counts[i]++
	h.sum += v
	h.n++
}

// modelMetrics are the request-side series of one model.
type modelMetrics struct {
	ttft, itl, e2e   *histogram
	tpot             *histogram
	promptTokens     uint64
	completionTokens uint64
}

// metrics holds the counters the server observes itself; engine gauges
// are read from each Generator's Stats when scraped.
type metrics struct {
	mu       sync.Mutex
	models   map[string]*modelMetrics
	requests map[[2]string]uint64 // (endpoint, status)
	errors   map[string]uint64    // class
	ignored  map[string]uint64    // ignoredLabel of a field name
	recent   *recent              // what the status endpoint shows; nil until the first record
}

func newMetrics() *metrics {
	return &metrics{models: map[string]*modelMetrics{}, requests: map[[2]string]uint64{}, errors: map[string]uint64{}}
}

// model returns the series of a model; mu must be held.
func (m *metrics) model(name string) *modelMetrics {
	mm, ok := m.models[name]
	if !ok {
		mm = &modelMetrics{ttft: newHistogram(ttftBuckets), itl: newHistogram(itlBuckets), e2e: newHistogram(e2eBuckets), tpot: newHistogram(tpotBuckets)}
		m.models[name] = mm
	}
	return mm
}

// timing is what one response observed.
type timing struct {
	model          string
	ttft, e2e      time.Duration
	gaps           []time.Duration
	first, ended   bool
	prompt, output int
}

func (m *metrics) finish(endpoint string, status int, class string, t timing) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.requests[[2]string{endpoint, strconv.Itoa(status)}]++
	if class != "" {
		m.errors[class]++
	}
	if t.model == "" {
		return
	}
	mm := m.model(t.model)
	if t.first {
		mm.ttft.observe(t.ttft)
	}
	for _, g := range t.gaps {
		mm.itl.observe(g)
	}
	if t.ended {
		mm.e2e.observe(t.e2e)
	}
	// Time per output token: the decode time after the first token, shared
	// by the tokens after it; one token has no decode time to share.
	if t.first && t.ended && t.output >= 2 {
		mm.tpot.observe((t.e2e - t.ttft) / time.Duration(t.output-1))
	}
	mm.promptTokens += uint64(t.prompt)
	mm.completionTokens += uint64(t.output)
}

// modelStats is one model's engine snapshot at scrape time.
type modelStats struct {
	name  string
	stats engine.Stats
	// cache is the prefix cache's counters; cacheOn is false when the
	// model has none.
	cache   cache.Stats
	cacheOn bool
}

// prefixCacher is a generator with a prefix cache (the engine).
type prefixCacher interface {
	CacheStats() (cache.Stats, bool)
}

// write renders every series in the Prometheus text format, in a fixed
// order.
func (m *metrics) write(w io.Writer, engines []modelStats, snaps []slots.Snapshot) error {
	b := bufio.NewWriter(w)
	gauge := func(name, help string, value func(engine.Stats) int64) {
		header(b, name, "gauge", help)
		for _, e := range engines {
			fmt.Fprintf(b, "%s{model=%s} %d\n", name, quote(e.name), value(e.stats))
		}
	}
	counter := func(name, help string, value func(engine.Stats) uint64) {
		header(b, name, "counter", help)
		for _, e := range engines {
			fmt.Fprintf(b, "%s{model=%s} %d\n", name, quote(e.name), value(e.stats))
		}
	}
	gauge("provider_requests_running", "Generations running in the engine.", func(s engine.Stats) int64 { return int64(s.Running) })
	gauge("provider_requests_waiting", "Generations waiting for admission.", func(s engine.Stats) int64 { return int64(s.Waiting) })
	gauge("provider_max_concurrency", "Concurrent generations the engine allows.", func(s engine.Stats) int64 { return int64(s.MaxConcurrent) })
	gauge("provider_kv_used_bytes", "KV cache bytes charged to running generations.", func(s engine.Stats) int64 { return s.KVUsed })
	gauge("provider_kv_capacity_bytes", "KV cache bytes granted to the engine.", func(s engine.Stats) int64 { return s.KVCapacity })
	gauge("provider_kv_token_size_bytes", "KV cache bytes one token costs.", func(s engine.Stats) int64 { return s.KVBytesPerToken })
	counter("provider_preemptions_total", "Generations preempted to free KV cache.", func(s engine.Stats) uint64 { return s.Preemptions })
	counter("provider_engine_steps_total", "Engine steps executed.", func(s engine.Stats) uint64 { return s.Steps })
	writePrefixCache(b, engines)
	writeSlots(b, snaps)

	m.mu.Lock()
	defer m.mu.Unlock()
	names := make([]string, 0, len(m.models))
	for n := range m.models {
		names = append(names, n)
	}
	slices.Sort(names)
	header(b, "provider_prompt_tokens_total", "counter", "Prompt tokens of finished requests.")
	for _, n := range names {
		fmt.Fprintf(b, "provider_prompt_tokens_total{model=%s} %d\n", quote(n), m.models[n].promptTokens)
	}
	header(b, "provider_generation_tokens_total", "counter", "Generated tokens of finished requests.")
	for _, n := range names {
		fmt.Fprintf(b, "provider_generation_tokens_total{model=%s} %d\n", quote(n), m.models[n].completionTokens)
	}
	hist := func(name, help string, pick func(*modelMetrics) *histogram) {
		header(b, name, "histogram", help)
		for _, n := range names {
			h := pick(m.models[n])
			var cum uint64
			for i, bound := range h.bounds {
				cum += h.counts[i]
				fmt.Fprintf(b, "%s_bucket{model=%s,le=%q} %d\n", name, quote(n), formatFloat(bound), cum)
			}
			cum += h.counts[len(h.bounds)]
			fmt.Fprintf(b, "%s_bucket{model=%s,le=\"+Inf\"} %d\n", name, quote(n), cum)
			fmt.Fprintf(b, "%s_sum{model=%s} %s\n", name, quote(n), formatFloat(h.sum))
			fmt.Fprintf(b, "%s_count{model=%s} %d\n", name, quote(n), h.n)
		}
	}
	hist("provider_time_to_first_token_seconds", "Time from arrival to the first generated text.", func(mm *modelMetrics) *histogram { return mm.ttft })
	hist("provider_inter_token_latency_seconds", "Time between consecutive pieces of generated text.", func(mm *modelMetrics) *histogram { return mm.itl })
	hist("provider_e2e_request_latency_seconds", "Time from arrival to the end of the response.", func(mm *modelMetrics) *histogram { return mm.e2e })
	hist("provider_time_per_output_token_seconds", "Time per generated token after the first, per finished request of at least 2 tokens: (e2e - ttft) / (completion tokens - 1).", func(mm *modelMetrics) *histogram { return mm.tpot })

	header(b, "provider_requests_total", "counter", "Requests by endpoint and HTTP status.")
	keys := make([][2]string, 0, len(m.requests))
	for k := range m.requests {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, func(a, b [2]string) int {
		if c := strings.Compare(a[0], b[0]); c != 0 {
			return c
		}
		return strings.Compare(a[1], b[1])
	})
	for _, k := range keys {
		fmt.Fprintf(b, "provider_requests_total{endpoint=%s,status=%s} %d\n", quote(k[0]), quote(k[1]), m.requests[k])
	}
	header(b, "provider_request_errors_total", "counter", "Failed requests by error class; fault tells client causes (cancel 499 included) from provider faults.")
	classes := make([]string, 0, len(m.errors))
	for c := range m.errors {
		classes = append(classes, c)
	}
	slices.Sort(classes)
	for _, c := range classes {
		fault := "client"
		if (outcome{class: c}).provider() {
			fault = "provider"
		}
		fmt.Fprintf(b, "provider_request_errors_total{class=%s,fault=%s} %d\n", quote(c), quote(fault), m.errors[c])
	}
	m.writeIgnored(b)
	return b.Flush()
}

// writePrefixCache renders the prefix cache series of the models that have
// one (nothing when none has).
func writePrefixCache(b io.Writer, engines []modelStats) {
	if !slices.ContainsFunc(engines, func(e modelStats) bool { return e.cacheOn }) {
		return
	}
	// series writes one series for the models where value reports one.
	series := func(name, typ, help string, value func(modelStats) (uint64, bool)) {
		header(b, name, typ, help)
		for _, e := range engines {
			if v, ok := value(e); ok {
				fmt.Fprintf(b, "%s{model=%s} %d\n", name, quote(e.name), v)
			}
		}
	}
	ram := func(f func(cache.Stats) uint64) func(modelStats) (uint64, bool) {
		return func(e modelStats) (uint64, bool) { return f(e.cache), e.cacheOn }
	}
	series("provider_prefix_cache_hits_total", "counter", "Admissions that adopted cached prefix blocks.", ram(func(s cache.Stats) uint64 { return s.Hits }))
	series("provider_prefix_cache_misses_total", "counter", "Admissions that found no cached prefix block.", ram(func(s cache.Stats) uint64 { return s.Misses }))
	series("provider_prefix_cache_tokens_saved_total", "counter", "Prompt tokens adopted from the cache instead of computed.", ram(func(s cache.Stats) uint64 { return s.TokensSaved }))
	series("provider_prefix_cache_evictions_total", "counter", "Cached blocks let go to stay within the budget.", ram(func(s cache.Stats) uint64 { return s.Evicted }))
	series("provider_prefix_cache_collisions_total", "counter", "Cache keys found holding other tokens (never used).", ram(func(s cache.Stats) uint64 { return s.Collisions }))
	series("provider_prefix_cache_entries", "gauge", "Blocks the prefix cache indexes.", ram(func(s cache.Stats) uint64 { return uint64(s.Entries) }))
	series("provider_prefix_cache_bytes", "gauge", "Bytes of cached blocks no running generation holds (bounded by the budget).", ram(func(s cache.Stats) uint64 { return uint64(s.Bytes) }))
	series("provider_prefix_cache_shared_bytes", "gauge", "Bytes of cached blocks running generations also hold.", ram(func(s cache.Stats) uint64 { return uint64(s.SharedBytes) }))
	series("provider_prefix_cache_budget_bytes", "gauge", "The prefix cache's byte budget.", ram(func(s cache.Stats) uint64 { return uint64(s.Budget) }))
	if !slices.ContainsFunc(engines, func(e modelStats) bool { return e.cache.DiskOn }) {
		return
	}
	disk := func(f func(cache.DiskStats) uint64) func(modelStats) (uint64, bool) {
		return func(e modelStats) (uint64, bool) { return f(e.cache.Disk), e.cacheOn && e.cache.DiskOn }
	}
	series("provider_prefix_cache_disk_hits_total", "counter", "Blocks read back from the SSD tier.", disk(func(s cache.DiskStats) uint64 { return s.Hits }))
	header(b, "provider_prefix_cache_disk_misses_total", "counter", "SSD tier reads that returned nothing, by reason (a damaged, foreign or expired file is deleted).")
	for _, e := range engines {
		if !e.cacheOn || !e.cache.DiskOn {
			continue
		}
		d := e.cache.Disk
		for _, r := range []struct {
			reason string
			n      uint64
		}{{"absent", d.MissAbsent}, {"expired", d.MissExpired}, {"auth", d.MissAuth}, {"parse", d.MissParse}, {"binding", d.MissBinding}, {"io", d.MissIO}} {
			fmt.Fprintf(b, "provider_prefix_cache_disk_misses_total{model=%s,reason=%s} %d\n", quote(e.name), quote(r.reason), r.n)
		}
	}
	series("provider_prefix_cache_disk_writes_total", "counter", "Blocks written to the SSD tier.", disk(func(s cache.DiskStats) uint64 { return s.Writes }))
	series("provider_prefix_cache_disk_dropped_total", "counter", "Blocks not written: queue full, cooling down after ENOSPC, too big, or a failed write.", disk(func(s cache.DiskStats) uint64 { return s.Dropped }))
	series("provider_prefix_cache_disk_cooldowns_total", "counter", "Times the SSD tier stopped writing (ENOSPC or low free space).", disk(func(s cache.DiskStats) uint64 { return s.Cooldowns }))
	series("provider_prefix_cache_disk_files", "gauge", "Block files in the SSD tier.", disk(func(s cache.DiskStats) uint64 { return uint64(s.Files) }))
	series("provider_prefix_cache_disk_bytes", "gauge", "Bytes of block files in the SSD tier.", disk(func(s cache.DiskStats) uint64 { return uint64(s.Bytes) }))
	series("provider_prefix_cache_disk_budget_bytes", "gauge", "The SSD tier's byte budget.", disk(func(s cache.DiskStats) uint64 { return uint64(s.Budget) }))
}

// writeSlots renders the slots' capacity snapshots: the numbers the
// network heartbeat reports (nothing without on-demand slots).
func writeSlots(b io.Writer, snaps []slots.Snapshot) {
	if len(snaps) == 0 {
		return
	}
	header(b, "provider_slot_state", "gauge", "1 for each loaded model's slot state (loading, running, reloading, crashed).")
	for _, s := range snaps {
		fmt.Fprintf(b, "provider_slot_state{model=%s,state=%s} 1\n", quote(s.Model), quote(string(s.State)))
	}
	series := func(name, typ, help string, value func(slots.Snapshot) float64) {
		header(b, name, typ, help)
		for _, s := range snaps {
			fmt.Fprintf(b, "%s{model=%s} %s\n", name, quote(s.Model), formatFloat(value(s)))
		}
	}
	series("provider_slot_kv_grant_bytes", "gauge", "The slot's share of the KV budget.", func(s slots.Snapshot) float64 { return float64(s.KVGrant) })
	series("provider_slot_tokens_used", "gauge", "KV tokens the slot's running generations are charged.", func(s slots.Snapshot) float64 { return float64(s.TokensUsed) })
	series("provider_slot_tokens_max", "gauge", "KV tokens the slot's grant holds.", func(s slots.Snapshot) float64 { return float64(s.TokensMax) })
	series("provider_slot_decode_tokens_per_second", "gauge", "Observed decode rate (moving average over steps).", func(s slots.Snapshot) float64 { return s.DecodeTPS })
	series("provider_slot_prefill_tokens_per_second", "gauge", "Observed prefill rate (moving average over steps).", func(s slots.Snapshot) float64 { return s.PrefillTPS })
	series("provider_slot_step_build_seconds_total", "counter", "Host time the slot's steps spent building and queueing their forward passes.", func(s slots.Snapshot) float64 { return s.StepBuild })
	series("provider_slot_step_wait_seconds_total", "counter", "Host time the slot's steps spent waiting for the device's results.", func(s slots.Snapshot) float64 { return s.StepWait })
	series("provider_slot_ahead_steps_total", "counter", "Steps that ran from a decode step built ahead of the read of the one before.", func(s slots.Snapshot) float64 { return float64(s.AheadSteps) })
	series("provider_slot_time_since_step_seconds", "gauge", "Seconds since the slot's last step (-1: none yet).", func(s slots.Snapshot) float64 { return s.SinceStep })
	series("provider_slot_time_since_first_token_seconds", "gauge", "Seconds since the slot's last first token (-1: none yet).", func(s slots.Snapshot) float64 { return s.SinceFirstToken })
	series("provider_slot_wedge_suspected", "gauge", "1 while the wedge detector suspects the slot's engine.", func(s slots.Snapshot) float64 {
		if s.WedgeSuspected {
			return 1
		}
		return 0
	})
}

func header(w io.Writer, name, typ, help string) {
	fmt.Fprintf(w, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, typ)
}

// quote renders a label value with the escapes the text format defines.
func quote(s string) string {
	r := strings.NewReplacer(`\`, `\\`, `"`, `\"`, "\n", `\n`)
	return `"` + r.Replace(s) + `"`
}

func formatFloat(v float64) string { return strconv.FormatFloat(v, 'g', -1, 64) }
