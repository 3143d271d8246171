package sample

import (
	"crypto/rand"
	"encoding/binary"
	"fmt"
	"math"
	mrand "math/rand/v2"
	"sort"
)

// Params are a request's sampling settings. The zero value is greedy.
type Params struct {
	Temperature float64 // 0: greedy
	TopP        float64 // (0, 1]; 0 means 1
	TopK        int     // 0: no limit
	Seed        *uint64 // nil: a random seed
}

// Validate reports settings no sampler can honour.
func (p Params) Validate() error {
	switch {
	case math.IsNaN(p.Temperature) || p.Temperature < 0 || p.Temperature > 100:
		return fmt.Errorf("temperature %v outside [0, 100]", p.Temperature)
	case math.IsNaN(p.TopP) || p.TopP < 0 || p.TopP > 1:
		return fmt.Errorf("top_p %v outside [0, 1]", p.TopP)
	case p.TopK < 0:
		return fmt.Errorf("top_k %d is negative", p.TopK)
	}
	return nil
}

// Sampler draws tokens for one sequence.
type Sampler struct {
	p   Params
	rng *mrand.Rand
	// scratch reused across calls to avoid per-token allocation.
	idx   []int32
	probs []float64
}

// New returns a sampler; with a nil seed it seeds itself from crypto/rand.
func New(p Params) *Sampler {
	var seed uint64
	if p.Seed != nil {
		seed = *p.Seed
	} else {
		var b [8]byte
		_, _ = rand.Read(b[:])
		seed = binary.LittleEndian.Uint64(b[:])
	}
	return &Sampler{p: p, rng: mrand.New(mrand.NewPCG(seed, seed^0x9e3779b97f4a7c15))}
}

// Greedy reports whether the sampler always takes the argmax.
func (s *Sampler) Greedy() bool { return s.p.Temperature == 0 || s.p.TopK == 1 }

// Next picks a token from logits.
func (s *Sampler) Next(logits []float32) int32 {
	if s.Greedy() {
		return Argmax(logits)
	}
	s.idx = s.idx[:0]
	for i := range logits {
		if !math.IsInf(float64(logits[i]), -1) && !math.IsNaN(float64(logits[i])) {
			s.idx = append(s.idx, int32(i))
		}
	}
	if len(s.idx) == 0 {
		return Argmax(logits)
	}
	needSort := (s.p.TopK > 0 && s.p.TopK < len(s.idx)) || (s.p.TopP > 0 && s.p.TopP < 1)
	if needSort {
		sort.SliceStable(s.idx, func(a, b int) bool { return logits[s.idx[a]] > logits[s.idx[b]] })
		if s.p.TopK > 0 && s.p.TopK < len(s.idx) {
			s.idx = s.idx[:s.p.TopK]
		}
	}
	maxL := math.Inf(-1)
	for _, i := range s.idx {
		maxL = math.Max(maxL, float64(logits[i]))
	}
	s.probs = s.probs[:0]
	var sum float64
	for _, i := range s.idx {
		p := math.Exp((float64(logits[i]) - maxL) / s.p.Temperature)
		s.probs = append(s.probs, p)
		sum += p
	}
	n := len(s.probs)
	if s.p.TopP > 0 && s.p.TopP < 1 {
		var cum float64
		for j, p := range s.probs {
			cum += p / sum
			if cum >= s.p.TopP {
				n = j + 1
				break
			}
		}
		sum = 0
		for _, p := range s.probs[:n] {
			sum += p
		}
	}
	u := s.rng.Float64() * sum
	for j, p := range s.probs[:n] {
		u -= p
		if u < 0 {
			return s.idx[j]
		}
	}
	return s.idx[n-1]
}

// Argmax is the index of the largest logit; ties go to the lowest index.
func Argmax(logits []float32) int32 {
	best := 0
	for i := 1; i < len(logits); i++ {
		if logits[i] > logits[best] {
			best = i
		}
	}
	return int32(best)
}

// TokenLogprob is one entry of a logprobs report.
type TokenLogprob struct {
	Token   int32
	Logprob float64
}

// Logprobs returns the log-probability of chosen and the top n alternatives
// under the unscaled distribution, most likely first.
func Logprobs(logits []float32, chosen int32, n int) (TokenLogprob, []TokenLogprob) {
	maxL := math.Inf(-1)
	for _, l := range logits {
		maxL = math.Max(maxL, float64(l))
	}
	var sum float64
	for _, l := range logits {
		sum += math.Exp(float64(l) - maxL)
	}
	lse := maxL + math.Log(sum)
	lp := func(i int32) float64 { return float64(logits[i]) - lse }
	top := make([]TokenLogprob, 0, n)
	if n > 0 {
		idx := make([]int32, len(logits))
		for i := range idx {
			idx[i] = int32(i)
		}
		sort.SliceStable(idx, func(a, b int) bool { return logits[idx[a]] > logits[idx[b]] })
		for _, i := range idx[:min(n, len(idx))] {
			top = append(top, TokenLogprob{Token: i, Logprob: lp(i)})
		}
	}
	return TokenLogprob{Token: chosen, Logprob: lp(chosen)}, top
}
