package bench

import (
	"encoding/json"
	"math"
	"testing"
	"time"
)

const msec = time.Millisecond

func TestPercentile(t *testing.T) {
	oneToTen := []float64{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}
	for _, tc := range []struct {
		name   string
		sorted []float64
		p      float64
		want   float64
	}{
		// rank = p/100*(n-1); the value interpolates between the ranks
		// around it.
		{"p50 of 1..10: rank 4.5", oneToTen, 50, 5.5},
		{"p90 of 1..10: rank 8.1", oneToTen, 90, 9.1},
		{"p99 of 1..10: rank 8.91", oneToTen, 99, 9.91},
		{"p0 is the minimum", oneToTen, 0, 1},
		{"p100 is the maximum", oneToTen, 100, 10},
		{"one value", []float64{7}, 99, 7},
		{"two values p50", []float64{10, 30}, 50, 20},
		{"two values p99", []float64{10, 30}, 99, 29.8},
		{"p90 of 100,200,300: rank 1.8", []float64{100, 200, 300}, 90, 280},
		{"ties", []float64{5, 5, 5, 9}, 50, 5},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := Percentile(tc.sorted, tc.p); math.Abs(got-tc.want) > 1e-9 {
				t.Errorf("Percentile(%v, %g) = %g, want %g", tc.sorted, tc.p, got, tc.want)
			}
		})
	}
	if got := Percentile(nil, 50); !math.IsNaN(got) {
		t.Errorf("Percentile(nil) = %g, want NaN", got)
	}
}

func TestRecordTPOT(t *testing.T) {
	for _, tc := range []struct {
		name   string
		rec    Record
		want   time.Duration
		wantOK bool
	}{
		{"five tokens", Record{TTFT: 100 * msec, E2E: 500 * msec, OutputTokens: 5}, 100 * msec, true},
		{"two tokens", Record{TTFT: 30 * msec, E2E: 50 * msec, OutputTokens: 2}, 20 * msec, true},
		{"one token is excluded", Record{TTFT: 30 * msec, E2E: 30 * msec, OutputTokens: 1}, 0, false},
		{"no token is excluded", Record{E2E: 30 * msec}, 0, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, ok := tc.rec.TPOT()
			if got != tc.want || ok != tc.wantOK {
				t.Errorf("TPOT() = %v, %v; want %v, %v", got, ok, tc.want, tc.wantOK)
			}
		})
	}
}

// scripted are five requests with hand-picked timings:
//
//	a: TTFT 100, three gaps of 200, E2E 700, 4 tokens -> TPOT (700-100)/3 = 200
//	b: TTFT 200, E2E 200, 1 token -> no TPOT
//	c: TTFT 300, ten gaps of 100, E2E 1300, 11 tokens -> TPOT 100
//	d, e: failed
func scripted() []Record {
	gaps := func(n int, d time.Duration) []time.Duration {
		out := make([]time.Duration, n)
		for i := range out {
			out[i] = d
		}
		return out
	}
	return []Record{
		{Index: 0, TTFT: 100 * msec, E2E: 700 * msec, ITL: gaps(3, 200*msec), Chunks: 4, OutputTokens: 4, PromptTokens: 10, Source: TokensFromUsage},
		{Index: 1, TTFT: 200 * msec, E2E: 200 * msec, Chunks: 1, OutputTokens: 1, PromptTokens: 12, Source: TokensFromChunks},
		{Index: 2, TTFT: 300 * msec, E2E: 1300 * msec, ITL: gaps(10, 100*msec), Chunks: 11, OutputTokens: 11, PromptTokens: 20, Source: TokensFromUsage},
		{Index: 3, E2E: 5 * time.Second, Failure: &Failure{Kind: FailTimeout, Reason: "stalled"}},
		{Index: 4, Failure: &Failure{Kind: FailConnect, Reason: "refused"}},
	}
}

func TestSummarize(t *testing.T) {
	s := Summarize(scripted(), 2*time.Second, SLO{})
	checkInts := []struct {
		name      string
		got, want int
	}{
		{"requests", s.Requests, 5},
		{"completed", s.Completed, 3},
		{"failed", s.Failed, 2},
		{"timeouts", s.Failures[FailTimeout], 1},
		{"refused", s.Failures[FailConnect], 1},
		{"output tokens", s.OutputTokens, 16},
		{"prompt tokens", s.PromptTokens, 42},
		{"usage reported", s.UsageReported, 2},
		{"good without SLO", s.Good, 3},
		{"ttft n", s.TTFT.N, 3},
		{"tpot n (one-token request excluded)", s.TPOT.N, 2},
		{"itl n (every gap)", s.ITL.N, 13},
		{"e2e n", s.E2E.N, 3},
	}
	for _, c := range checkInts {
		if c.got != c.want {
			t.Errorf("%s = %d, want %d", c.name, c.got, c.want)
		}
	}
	checkFloats := []struct {
		name      string
		got, want float64
	}{
		{"request throughput: 3 / 2s", s.RequestThroughput, 1.5},
		{"output throughput: 16 / 2s", s.OutputThroughput, 8},
		{"total token throughput: (42+16) / 2s", s.TotalTokenThroughput, 29},
		{"goodput without SLO", s.Goodput, 1.5},
		{"ttft mean", s.TTFT.Mean, 200},
		{"ttft p50", s.TTFT.P50, 200},
		{"ttft p90", s.TTFT.P90, 280},
		{"ttft p99", s.TTFT.P99, 298},
		{"tpot mean of 200, 100", s.TPOT.Mean, 150},
		{"tpot p50", s.TPOT.P50, 150},
		{"tpot p90", s.TPOT.P90, 190},
		{"tpot p99", s.TPOT.P99, 199},
		{"itl mean: (10*100 + 3*200) / 13", s.ITL.Mean, 1600.0 / 13},
		{"itl p50: rank 6", s.ITL.P50, 100},
		{"itl p90: rank 10.8", s.ITL.P90, 200},
		{"e2e mean", s.E2E.Mean, 2200.0 / 3},
		{"e2e p50", s.E2E.P50, 700},
		{"e2e p90: 700 + 0.8*600", s.E2E.P90, 1180},
		{"e2e p99: 700 + 0.98*600", s.E2E.P99, 1288},
	}
	for _, c := range checkFloats {
		if math.Abs(c.got-c.want) > 1e-9 {
			t.Errorf("%s = %g, want %g", c.name, c.got, c.want)
		}
	}
}

func TestGoodput(t *testing.T) {
	for _, tc := range []struct {
		name string
		slo  SLO
		good int
	}{
		{"no SLO: every success", SLO{}, 3},
		{"TTFT 250ms: a, b", SLO{TTFT: 250 * msec}, 2},
		{"TPOT 150ms: c, and b whose one token meets any TPOT bound", SLO{TPOT: 150 * msec}, 2},
		{"TTFT 250ms and TPOT 150ms: b only", SLO{TTFT: 250 * msec, TPOT: 150 * msec}, 1},
		{"E2E 1s: a, b", SLO{E2E: time.Second}, 2},
		{"bounds are inclusive", SLO{TTFT: 300 * msec, TPOT: 200 * msec, E2E: 1300 * msec}, 3},
		{"nothing meets TTFT 50ms", SLO{TTFT: 50 * msec}, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := Summarize(scripted(), 2*time.Second, tc.slo)
			if s.Good != tc.good {
				t.Errorf("good = %d, want %d", s.Good, tc.good)
			}
			if want := float64(tc.good) / 2; s.Goodput != want {
				t.Errorf("goodput = %g, want %g", s.Goodput, want)
			}
		})
	}
}

func TestSummarizeNothingCompleted(t *testing.T) {
	recs := scripted()[3:]
	for _, d := range []time.Duration{0, time.Second} {
		s := Summarize(recs, d, SLO{TTFT: msec})
		if s.Completed != 0 || s.Failed != 2 || s.RequestThroughput != 0 || s.Goodput != 0 || s.TTFT != (Stats{}) {
			t.Errorf("duration %v: summary %+v, want only two failures", d, s)
		}
		// No NaN or Inf may reach the JSON.
		if _, err := json.Marshal(s); err != nil {
			t.Errorf("duration %v: marshal: %v", d, err)
		}
	}
}
