package sample

import (
	"math"
	"testing"
)

func seed(v uint64) *uint64 { return &v }

func TestGreedyIsArgmaxLowestIndexOnTies(t *testing.T) {
	s := New(Params{})
	if got := s.Next([]float32{1, 3, 3, 2}); got != 1 {
		t.Fatalf("greedy = %d, want 1", got)
	}
}

func TestSeededSamplingReproduces(t *testing.T) {
	logits := []float32{0.1, 0.5, 2, 1.5, -1, 0.7, 0.2, 1.9}
	run := func() []int32 {
		s := New(Params{Temperature: 0.8, TopP: 0.95, Seed: seed(42)})
		out := make([]int32, 50)
		for i := range out {
			out[i] = s.Next(logits)
		}
		return out
	}
	a, b := run(), run()
	distinct := map[int32]bool{}
	for i := range a {
		if a[i] != b[i] {
			t.Fatalf("draw %d differs: %d vs %d", i, a[i], b[i])
		}
		distinct[a[i]] = true
	}
	if len(distinct) < 2 {
		t.Fatalf("50 draws at temperature 0.8 gave only %v", distinct)
	}
}

func TestTopKAndTopPRestrictCandidates(t *testing.T) {
	logits := []float32{5, 4.9, 0, 0, 0, 0}
	s := New(Params{Temperature: 1, TopK: 2, Seed: seed(1)})
	for range 200 {
		if got := s.Next(logits); got > 1 {
			t.Fatalf("top_k=2 drew token %d", got)
		}
	}
	// Token 0 alone has probability > 0.5, so top_p 0.5 keeps only it.
	s = New(Params{Temperature: 1, TopP: 0.5, Seed: seed(1)})
	for range 200 {
		if got := s.Next([]float32{3, 1, 0, 0}); got != 0 {
			t.Fatalf("top_p=0.5 drew token %d", got)
		}
	}
}

func TestSamplingFollowsTheDistribution(t *testing.T) {
	// p = softmax([ln 1, ln 3]) = [0.25, 0.75]
	logits := []float32{0, float32(math.Log(3))}
	s := New(Params{Temperature: 1, Seed: seed(7)})
	const n = 20000
	ones := 0
	for range n {
		if s.Next(logits) == 1 {
			ones++
		}
	}
	if f := float64(ones) / n; math.Abs(f-0.75) > 0.02 {
		t.Fatalf("token 1 drawn %.3f of the time, want 0.75", f)
	}
}

func TestLogprobs(t *testing.T) {
	logits := []float32{0, float32(math.Log(3))}
	c, top := Logprobs(logits, 0, 2)
	if math.Abs(c.Logprob-math.Log(0.25)) > 1e-6 || top[0].Token != 1 || math.Abs(top[0].Logprob-math.Log(0.75)) > 1e-6 {
		t.Fatalf("chosen %+v top %+v", c, top)
	}
}

func TestValidate(t *testing.T) {
	for _, p := range []Params{{Temperature: -1}, {TopP: 1.5}, {TopK: -3}, {Temperature: math.NaN()},
		{MinP: 1.1}, {FrequencyPenalty: 2.5}, {PresencePenalty: -2.1}, {RepetitionPenalty: -1}, {RepetitionPenalty: 11},
		{LogitBias: []Bias{{Token: 1, Value: 101}}}, {LogitBias: []Bias{{Token: -1, Value: 1}}},
		{LogitBias: []Bias{{Token: 5, Value: 1}, {Token: 5, Value: 2}}}, {LogitBias: []Bias{{Token: 5, Value: 1}, {Token: 4, Value: 2}}}} {
		if p.Validate() == nil {
			t.Errorf("%+v accepted", p)
		}
	}
	ok := Params{Temperature: 0.7, TopP: 0.9, TopK: 40, MinP: 0.05, FrequencyPenalty: -2, PresencePenalty: 2, RepetitionPenalty: 1.1,
		LogitBias: []Bias{{Token: 0, Value: -100}, {Token: 9, Value: 100}}}
	if err := ok.Validate(); err != nil {
		t.Error(err)
	}
}
