package bench

import (
	"encoding/json"
	"math"
	"slices"
	"time"
)

// Stats describes a distribution in milliseconds. With N zero every
// field is zero.
type Stats struct {
	N    int     `json:"n"`
	Mean float64 `json:"mean_ms"`
	P50  float64 `json:"p50_ms"`
	P90  float64 `json:"p90_ms"`
	P99  float64 `json:"p99_ms"`
}

// Percentile is the p-th percentile (0..100) of sorted values, linearly
// interpolated between the closest ranks as numpy's default does:
// rank = p/100 * (n-1). It is NaN for no values.
func Percentile(sorted []float64, p float64) float64 {
	n := len(sorted)
	if n == 0 {
		return math.NaN()
	}
	rank := p / 100 * float64(n-1)
	lo := int(math.Floor(rank))
	if lo >= n-1 {
		return sorted[n-1]
	}
	if lo < 0 {
		return sorted[0]
	}
	frac := rank - float64(lo)
	return sorted[lo] + frac*(sorted[lo+1]-sorted[lo])
}

// describe summarizes durations.
func describe(ds []time.Duration) Stats {
	if len(ds) == 0 {
		return Stats{}
	}
	v := make([]float64, len(ds))
	sum := 0.0
	for i, d := range ds {
		v[i] = ms(d)
		sum += v[i]
	}
	slices.Sort(v)
	return Stats{
		N:    len(v),
		Mean: sum / float64(len(v)),
		P50:  Percentile(v, 50),
		P90:  Percentile(v, 90),
		P99:  Percentile(v, 99),
	}
}

// Summary is one level against one target.
type Summary struct {
	Requests  int `json:"requests"`
	Completed int `json:"completed"`
	Failed    int `json:"failed"`
	// Failures counts failed requests by kind.
	Failures map[FailureKind]int `json:"failures"`
	// Retries counts attempts sent again on a fresh connection after
	// theirs broke before any response (see [Record]); they are neither
	// requests nor failures.
	Retries int `json:"retries,omitempty"`
	// Duration runs from the level's first send to its last completion.
	Duration time.Duration `json:"-"`
	// PromptTokens and OutputTokens sum the successful requests.
	PromptTokens int `json:"prompt_tokens"`
	OutputTokens int `json:"output_tokens"`
	// UsageReported counts successful requests whose tokens came from
	// the server's usage rather than from counting chunks.
	UsageReported int `json:"usage_reported"`
	// Throughputs are per second of Duration.
	RequestThroughput    float64 `json:"request_throughput"`
	OutputThroughput     float64 `json:"output_throughput"`
	TotalTokenThroughput float64 `json:"total_token_throughput"`
	// Good counts successful requests within the SLO; with no SLO set,
	// every successful request is good and Goodput equals
	// RequestThroughput.
	Good    int     `json:"good"`
	Goodput float64 `json:"goodput"`

	TTFT Stats `json:"ttft"`
	TPOT Stats `json:"tpot"`
	ITL  Stats `json:"itl"`
	E2E  Stats `json:"e2e"`
}

// Summarize computes a level's metrics from its records and duration.
// Failed requests are counted and otherwise left out.
func Summarize(records []Record, duration time.Duration, slo SLO) Summary {
	s := Summary{Requests: len(records), Duration: duration, Failures: map[FailureKind]int{}}
	var ttft, tpot, itl, e2e []time.Duration
	for _, r := range records {
		s.Retries += r.Retries
		if !r.OK() {
			s.Failed++
			s.Failures[r.Failure.Kind]++
			continue
		}
		s.Completed++
		s.PromptTokens += r.PromptTokens
		s.OutputTokens += r.OutputTokens
		if r.Source == TokensFromUsage {
			s.UsageReported++
		}
		ttft = append(ttft, r.TTFT)
		e2e = append(e2e, r.E2E)
		itl = append(itl, r.ITL...)
		t, ok := r.TPOT()
		if ok {
			tpot = append(tpot, t)
		}
		if slo.meets(r, t) {
			s.Good++
		}
	}
	if sec := duration.Seconds(); sec > 0 {
		s.RequestThroughput = float64(s.Completed) / sec
		s.OutputThroughput = float64(s.OutputTokens) / sec
		s.TotalTokenThroughput = float64(s.PromptTokens+s.OutputTokens) / sec
		s.Goodput = float64(s.Good) / sec
	}
	s.TTFT, s.TPOT, s.ITL, s.E2E = describe(ttft), describe(tpot), describe(itl), describe(e2e)
	return s
}

// meets reports whether a successful request is within every set bound;
// tpot is zero for a request with at most one output token, which thus
// meets any TPOT bound.
func (s SLO) meets(r Record, tpot time.Duration) bool {
	return (s.TTFT <= 0 || r.TTFT <= s.TTFT) &&
		(s.TPOT <= 0 || tpot <= s.TPOT) &&
		(s.E2E <= 0 || r.E2E <= s.E2E)
}

// MarshalJSON adds the duration in seconds.
func (s Summary) MarshalJSON() ([]byte, error) {
	type plain Summary
	return json.Marshal(struct {
		plain
		Duration float64 `json:"duration_s"`
	}{plain(s), s.Duration.Seconds()})
}
