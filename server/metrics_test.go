package server

import (
	"bytes"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/goprovider/provider/cache"
	"github.com/goprovider/provider/engine"
	"github.com/goprovider/provider/slots"
)

// prometheusTool returns the path of prometheus or promtool; a missing one
// is a set-up error, never a skip.
func prometheusTool(t *testing.T, name string) string {
	t.Helper()
	p, err := exec.LookPath(name)
	if err != nil {
		t.Fatalf("%s is not on PATH: run `bash scripts/setup_prometheus.sh` (apt-get install prometheus)", name)
	}
	return p
}

func TestMetricsTPOT(t *testing.T) {
	ms := time.Millisecond
	for _, tc := range []struct {
		name string
		t    timing
		want []time.Duration // observations, in order
	}{
		{"two tokens", timing{first: true, ended: true, ttft: 100 * ms, e2e: 300 * ms, output: 2}, []time.Duration{200 * ms}},
		{"five tokens", timing{first: true, ended: true, ttft: 100 * ms, e2e: 500 * ms, output: 5}, []time.Duration{100 * ms}},
		{"one token", timing{first: true, ended: true, ttft: 100 * ms, e2e: 100 * ms, output: 1}, nil},
		{"no token", timing{ended: true, e2e: 100 * ms}, nil},
		{"cancelled", timing{first: true, ttft: 100 * ms, output: 7}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := newMetrics()
			tc.t.model = "stories"
			m.finish("chat", 200, "", tc.t)
			h := m.models["stories"].tpot
			var sum float64
			for _, d := range tc.want {
				sum += d.Seconds()
			}
			if h.n != uint64(len(tc.want)) || h.sum != sum {
				t.Fatalf("tpot count %d sum %g, want %d and %g", h.n, h.sum, len(tc.want), sum)
			}
		})
	}
}

// TestMetricsPromtool lints a scrape with every family of series (prefix
// cache with its SSD tier, slots, errors, ignored fields) with Prometheus'
// own parser and linter: counters end in _total, units are base units and
// not abbreviated, every series has help, histograms are well formed.
func TestMetricsPromtool(t *testing.T) {
	promtool := prometheusTool(t, "promtool")
	m := newMetrics()
	m.finish("chat", 200, "", timing{model: "stories", first: true, ended: true, ttft: 20 * time.Millisecond, e2e: 90 * time.Millisecond, gaps: []time.Duration{time.Millisecond, 2 * time.Millisecond}, prompt: 12, output: 3})
	m.finish("completion", 499, classCancelled, timing{model: "stories", first: true, ttft: time.Second, prompt: 5, output: 1})
	m.finish("chat", 400, "invalid", timing{})
	m.ignore([]string{"typical_p", "SECRET_knob"})
	engines := []modelStats{
		{name: "stories", stats: engine.Stats{Running: 1, MaxConcurrent: 4, KVUsed: 4096, KVCapacity: 1 << 20, KVBytesPerToken: 64, Steps: 9},
			cacheOn: true, cache: cache.Stats{Hits: 2, Misses: 1, TokensSaved: 32, Entries: 3, Bytes: 1 << 12, Budget: 1 << 24,
				DiskOn: true, Disk: cache.DiskStats{Hits: 1, MissAbsent: 2, Writes: 3, Files: 3, Bytes: 1 << 12, Budget: 1 << 30}}},
		{name: "other \"quoted\"\n", stats: engine.Stats{MaxConcurrent: 1}},
	}
	snaps := []slots.Snapshot{
		{Model: "stories", State: slots.StateRunning, TokensUsed: 64, TokensMax: 16384, KVGrant: 1 << 20, DecodeTPS: 812.5, SinceStep: 0.25, SinceFirstToken: -1},
		{Model: "other", State: slots.StateLoading, SinceStep: -1, SinceFirstToken: -1, WedgeSuspected: true},
	}
	var text bytes.Buffer
	if err := m.write(&text, engines, snaps); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"provider_time_per_output_token_seconds_count{model=\"stories\"} 1", "provider_prefix_cache_disk_misses_total", "provider_slot_state"} {
		if !strings.Contains(text.String(), want) {
			t.Fatalf("the scrape lacks %s:\n%s", want, text.String())
		}
	}
	cmd := exec.Command(promtool, "check", "metrics")
	cmd.Stdin = &text
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("promtool check metrics: %v\n%s", err, out)
	}
}
