package bench

import (
	"bytes"
	"context"
	"errors"
	"math"
	"slices"
	"strings"
	"testing"
	"testing/synctest"
	"time"
)

// steady is the script of a healthy server: four tokens, the first
// 50ms after the request, then one every 10ms. E2E is 80ms and TPOT
// (80-50)/3 = 10ms.
var steady = reply{tokens: tokens(4, 50*msec, 10*msec)}

func near(a, b float64) bool { return math.Abs(a-b) <= 1e-9*math.Max(1, math.Abs(b)) }

// durations lists one field of every record.
func durations(recs []Record, f func(Record) time.Duration) []time.Duration {
	var out []time.Duration
	for _, r := range recs {
		out = append(out, f(r))
	}
	return out
}

func TestClosedLoopTimings(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var mem memNet
		_, srv := mem.serve("ours:80", steady)
		defer srv.Close()
		client := mem.client()
		defer client.CloseIdleConnections()

		w := testWorkload()
		w.Levels = []Level{{Concurrency: 1}, {Concurrency: 2}, {Concurrency: 4}}
		var progress bytes.Buffer
		d := Driver{Client: client, Progress: &progress}
		rep, err := d.Run(t.Context(), Config{Targets: []Target{{Name: "ours", URL: srv.URL}}, Workload: w})
		if err != nil {
			t.Fatal(err)
		}
		for _, tc := range []struct {
			level    Level
			duration time.Duration
			sent     []time.Duration
		}{
			// Four requests of 80ms each: one at a time, two or four
			// at once.
			{Level{Concurrency: 1}, 320 * msec, []time.Duration{0, 80 * msec, 160 * msec, 240 * msec}},
			{Level{Concurrency: 2}, 160 * msec, []time.Duration{0, 0, 80 * msec, 80 * msec}},
			{Level{Concurrency: 4}, 80 * msec, []time.Duration{0, 0, 0, 0}},
		} {
			l := rep.Targets[0].Levels[slices.IndexFunc(rep.Targets[0].Levels, func(l LevelResult) bool { return l.Level == tc.level })]
			s := l.Summary
			if s.Completed != 4 || s.Failed != 0 {
				t.Fatalf("%s: %d ok, %d failed", tc.level.Label(), s.Completed, s.Failed)
			}
			if s.Duration != tc.duration {
				t.Errorf("%s: duration %v, want %v", tc.level.Label(), s.Duration, tc.duration)
			}
			if got := durations(l.Records, func(r Record) time.Duration { return r.Sent }); !slices.Equal(got, tc.sent) {
				t.Errorf("%s: sent at %v, want %v", tc.level.Label(), got, tc.sent)
			}
			want := 4 / tc.duration.Seconds()
			if !near(s.RequestThroughput, want) || !near(s.OutputThroughput, 4*want) {
				t.Errorf("%s: %g req/s, %g tok/s; want %g, %g", tc.level.Label(), s.RequestThroughput, s.OutputThroughput, want, 4*want)
			}
			for _, r := range l.Records {
				tpot, _ := r.TPOT()
				if r.TTFT != 50*msec || r.E2E != 80*msec || tpot != 10*msec || !slices.Equal(r.ITL, []time.Duration{10 * msec, 10 * msec, 10 * msec}) {
					t.Errorf("%s request %d: TTFT %v, E2E %v, TPOT %v, ITL %v; want 50ms, 80ms, 10ms, 3x10ms",
						tc.level.Label(), r.Index, r.TTFT, r.E2E, tpot, r.ITL)
				}
			}
			if s.TTFT.P99 != 50 || s.TPOT.P50 != 10 || s.ITL.P90 != 10 || s.E2E.Mean != 80 {
				t.Errorf("%s: stats TTFT %+v TPOT %+v ITL %+v E2E %+v", tc.level.Label(), s.TTFT, s.TPOT, s.ITL, s.E2E)
			}
		}
		for _, want := range []string{"\rours c=1", "4/4 failed 0", "ours c=4"} {
			if !strings.Contains(progress.String(), want) {
				t.Errorf("progress lacks %q:\n%s", want, progress.String())
			}
		}
	})
}

// TestStalledServer: the second request stalls after two tokens and the
// third before any header; both time out at exactly the timeout and the
// level goes on.
func TestStalledServer(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var mem memNet
		_, srv := mem.serve("ours:80", steady, reply{tokens: tokens(2, 50*msec, 10*msec), stall: true}, reply{hold: true}, steady)
		defer srv.Close()
		client := mem.client()
		defer client.CloseIdleConnections()

		w := testWorkload()
		w.Timeout = 2 * time.Second
		rep, err := (&Driver{Client: client}).Run(t.Context(), Config{Targets: []Target{{Name: "ours", URL: srv.URL}}, Workload: w})
		if err != nil {
			t.Fatal(err)
		}
		l := rep.Targets[0].Levels[0]
		var kinds []FailureKind
		for _, r := range l.Records {
			if r.Failure != nil {
				kinds = append(kinds, r.Failure.Kind)
				if r.E2E != w.Timeout {
					t.Errorf("request %d failed after %v, want the %v timeout", r.Index, r.E2E, w.Timeout)
				}
			}
		}
		if !slices.Equal(kinds, []FailureKind{FailTimeout, FailTimeout}) {
			t.Errorf("failures %v, want two timeouts", kinds)
		}
		if got := l.Records[1]; got.Chunks != 2 || !strings.Contains(got.Failure.Reason, "2 content chunks") {
			t.Errorf("stalled stream: %d chunks, reason %q", got.Chunks, got.Failure.Reason)
		}
		s := l.Summary
		if s.Completed != 2 || s.Failures[FailTimeout] != 2 || s.Duration != 80*msec+4*time.Second+80*msec {
			t.Errorf("summary: %d ok, failures %v, duration %v", s.Completed, s.Failures, s.Duration)
		}
	})
}

// TestTargetsCompared runs two targets, one twice as slow to its first
// token and between tokens, plus one that refuses connections.
func TestTargetsCompared(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var mem memNet
		_, ours := mem.serve("ours:80", steady)
		defer ours.Close()
		_, peer := mem.serve("peer:80", reply{tokens: tokens(4, 100*msec, 20*msec)})
		defer peer.Close()
		client := mem.client()
		defer client.CloseIdleConnections()

		w := testWorkload()
		w.Levels = []Level{{Concurrency: 1}, {Concurrency: 2}}
		w.Warmup = 1
		targets := []Target{{Name: "ours", URL: ours.URL}, {Name: "peer", URL: peer.URL + "/v1/"}, {Name: "down", URL: "http://down:80"}}
		rep, err := (&Driver{Client: client}).Run(t.Context(), Config{Targets: targets, Workload: w})
		if err != nil {
			t.Fatal(err)
		}
		cmp := Compare(rep)
		if len(cmp) != 2 || cmp[0].Other != "peer" || cmp[1].Other != "down" {
			t.Fatalf("comparisons %+v", cmp)
		}
		for _, l := range cmp[0].Levels {
			for key, want := range map[string]float64{"ttft_p50": 0.5, "tpot_p50": 0.5, "itl_p50": 0.5, "e2e_p50": 0.5, "output_throughput": 2, "request_throughput": 2} {
				if got := l.Ratios[key]; got == nil || !near(*got, want) {
					t.Errorf("%s %s ratio %v, want %g", l.Level.Label(), key, got, want)
				}
			}
		}
		for _, l := range cmp[1].Levels {
			if r := l.Ratios["ttft_p50"]; r != nil {
				t.Errorf("ratio against a dead target: %g, want none", *r)
			}
		}
		for _, l := range rep.Targets[2].Levels {
			if s := l.Summary; s.Failures[FailConnect] != 4 {
				t.Errorf("down %s: failures %v, want 4 refused", l.Level.Label(), s.Failures)
			}
		}
	})
}

// TestPoissonSchedule: requests are sent at their arrival times; with a
// cap of one in flight, an arrival waits for the slot.
func TestPoissonSchedule(t *testing.T) {
	for _, tc := range []struct {
		name  string
		limit int
	}{{"no cap", 0}, {"one in flight", 1}} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				var mem memNet
				_, srv := mem.serve("ours:80", steady)
				defer srv.Close()
				client := mem.client()
				defer client.CloseIdleConnections()

				w := testWorkload()
				w.Requests = 40
				w.Seed = 5
				w.Levels = []Level{{Rate: 20, Concurrency: tc.limit}}
				rep, err := (&Driver{Client: client}).Run(t.Context(), Config{Targets: []Target{{Name: "ours", URL: srv.URL}}, Workload: w})
				if err != nil {
					t.Fatal(err)
				}
				arrivals := poisson(source(5, streamArrivals, 0), 20, 40)
				var free time.Duration
				for i, r := range rep.Targets[0].Levels[0].Records {
					want := arrivals[i]
					if tc.limit == 1 {
						want = max(want, free)
						free = want + 80*msec
					}
					if r.Sent != want || !r.OK() {
						t.Errorf("request %d sent at %v (ok %v), want %v", i, r.Sent, r.OK(), want)
					}
				}
			})
		})
	}
}

func TestRunCanceled(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var mem memNet
		_, srv := mem.serve("ours:80", steady)
		defer srv.Close()
		client := mem.client()
		defer client.CloseIdleConnections()

		ctx, cancel := context.WithCancel(t.Context())
		time.AfterFunc(200*msec, cancel)
		w := testWorkload()
		w.Levels = []Level{{Concurrency: 1}, {Concurrency: 2}}
		rep, err := (&Driver{Client: client}).Run(ctx, Config{Targets: []Target{{Name: "ours", URL: srv.URL}}, Workload: w})
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("error %v, want canceled", err)
		}
		// 200ms is two requests done and the third cut short; the level
		// stops there and the next never starts.
		if len(rep.Targets[0].Levels) != 1 {
			t.Fatalf("%d levels ran, want 1", len(rep.Targets[0].Levels))
		}
		s := rep.Targets[0].Levels[0].Summary
		if s.Requests != 3 || s.Completed != 2 || s.Failures[FailCanceled] != 1 {
			t.Errorf("summary: %d sent, %d ok, failures %v", s.Requests, s.Completed, s.Failures)
		}
	})
}

func TestRunRejectsBadConfig(t *testing.T) {
	good := Config{Targets: []Target{{Name: "a", URL: "http://a:1"}}, Workload: testWorkload()}
	for _, tc := range []struct {
		name string
		edit func(*Config)
	}{
		{"no target", func(c *Config) { c.Targets = nil }},
		{"same name twice", func(c *Config) { c.Targets = append(c.Targets, c.Targets[0]) }},
		{"not http", func(c *Config) { c.Targets[0].URL = "ftp://a" }},
		{"no level", func(c *Config) { c.Workload.Levels = nil }},
		{"mixed loops", func(c *Config) { c.Workload.Levels = []Level{{Concurrency: 1}, {Rate: 2}} }},
		{"zero concurrency", func(c *Config) { c.Workload.Levels = []Level{{}} }},
		{"no requests", func(c *Config) { c.Workload.Requests = 0 }},
		{"no max tokens", func(c *Config) { c.Workload.MaxTokens = 0 }},
		{"unknown endpoint", func(c *Config) { c.Workload.Endpoint = "embeddings" }},
		{"unknown prompts", func(c *Config) { c.Workload.Prompts.Shape = "sharegpt" }},
		{"prefix as long as the prompt", func(c *Config) {
			c.Workload.Prompts = PromptSet{Shape: PromptsSharedPrefix, Tokens: 8, PrefixTokens: 8}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := good
			c.Targets = slices.Clone(good.Targets)
			tc.edit(&c)
			if _, err := (&Driver{}).Run(t.Context(), c); !errors.Is(err, ErrConfig) {
				t.Errorf("error %v, want ErrConfig", err)
			}
		})
	}
}

// TestTargetsSeeSamePrompts: every target gets the warm-up and each
// level's prompts, the same ones, and no target sees a prompt twice.
func TestTargetsSeeSamePrompts(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var mem memNet
		a, srvA := mem.serve("a:80", steady)
		defer srvA.Close()
		b, srvB := mem.serve("b:80", steady)
		defer srvB.Close()
		client := mem.client()
		defer client.CloseIdleConnections()

		w := testWorkload()
		w.Endpoint = EndpointCompletions
		w.Prompts = PromptSet{Shape: PromptsRandom, Tokens: 16}
		w.Levels = []Level{{Concurrency: 1}, {Concurrency: 2}, {Concurrency: 4}}
		w.Warmup = 2
		targets := []Target{{Name: "a", URL: srvA.URL}, {Name: "b", URL: srvB.URL}}
		if _, err := (&Driver{Client: client}).Run(t.Context(), Config{Targets: targets, Workload: w}); err != nil {
			t.Fatal(err)
		}
		// Each target's prompts in the order it got them, split into
		// the warm-up and the levels, each sorted (within a level the
		// workers race).
		split := func(f *fake) [][]string {
			var got []string
			for _, body := range f.requests() {
				got = append(got, body["prompt"].(string))
			}
			if len(got) != w.Warmup+len(w.Levels)*w.Requests {
				t.Fatalf("%d requests, want %d", len(got), w.Warmup+len(w.Levels)*w.Requests)
			}
			groups := [][]string{got[:w.Warmup]}
			for i := w.Warmup; i < len(got); i += w.Requests {
				groups = append(groups, got[i:i+w.Requests])
			}
			for _, g := range groups {
				slices.Sort(g)
			}
			return groups
		}
		ga, gb := split(a), split(b)
		seen := map[string]bool{}
		for i := range ga {
			if !slices.Equal(ga[i], gb[i]) {
				t.Errorf("group %d: a got %q, b got %q", i, ga[i], gb[i])
			}
			for _, p := range ga[i] {
				if seen[p] {
					t.Errorf("prompt sent twice to one target: %q", p)
				}
				seen[p] = true
			}
		}
		if want := w.levelPrompts(0)[0].Text; !slices.Contains(ga[1], want) {
			t.Errorf("level c=1 lacks its first prompt %q", want)
		}
	})
}
