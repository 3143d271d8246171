package sample

import (
	"crypto/rand"
	"encoding/binary"
	"fmt"
	"math"
	mrand "math/rand/v2"
	"sort"
)

// Bounds of the sampling knobs, as OpenAI and llama.cpp take them.
const (
	// MaxBias bounds a logit_bias value's magnitude.
	MaxBias = 100
	// MaxPenalty bounds frequency_penalty's and presence_penalty's
	// magnitude.
	MaxPenalty = 2
	// MaxRepetitionPenalty bounds repetition_penalty.
	MaxRepetitionPenalty = 10
	// RepetitionWindow is how many of the sequence's last tokens (prompt
	// included) repetition_penalty looks at: llama.cpp's default
	// penalty_last_n.
	RepetitionWindow = 64
)

// Params are a request's sampling settings. The zero value is greedy and
// changes nothing of the logits.
type Params struct {
	Temperature float64 // 0: greedy
	TopP        float64 // (0, 1]; 0 means 1
	TopK        int     // 0: no limit
	// MinP drops tokens less likely than MinP times the most likely one;
	// 0 is off.
	MinP float64
	// FrequencyPenalty and PresencePenalty, in [-2, 2], lower the logit of
	// a token generated c > 0 times so far by c x FrequencyPenalty +
	// PresencePenalty.
	FrequencyPenalty float64
	PresencePenalty  float64
	// RepetitionPenalty, in (0, 10], divides the positive logits and
	// multiplies the others of the tokens among the sequence's last
	// RepetitionWindow; 0 and 1 are off.
	RepetitionPenalty float64
	// LogitBias is added to its tokens' logits first; sorted by token,
	// each at most once.
	LogitBias []Bias
	Seed      *uint64 // nil: a random seed
}

// Bias is one logit_bias entry.
type Bias struct {
	Token int32
	Value float64 // [-100, 100]
}

// Validate reports settings no sampler can honour.
func (p Params) Validate() error {
	bad := func(x, lo, hi float64) bool { return math.IsNaN(x) || x < lo || x > hi }
	switch {
	case bad(p.Temperature, 0, 100):
		return fmt.Errorf("temperature %v outside [0, 100]", p.Temperature)
	case bad(p.TopP, 0, 1):
		return fmt.Errorf("top_p %v outside [0, 1]", p.TopP)
	case p.TopK < 0:
		return fmt.Errorf("top_k %d is negative", p.TopK)
	case bad(p.MinP, 0, 1):
		return fmt.Errorf("min_p %v outside [0, 1]", p.MinP)
	case bad(p.FrequencyPenalty, -MaxPenalty, MaxPenalty):
		return fmt.Errorf("frequency_penalty %v outside [-2, 2]", p.FrequencyPenalty)
	case bad(p.PresencePenalty, -MaxPenalty, MaxPenalty):
		return fmt.Errorf("presence_penalty %v outside [-2, 2]", p.PresencePenalty)
	case bad(p.RepetitionPenalty, 0, MaxRepetitionPenalty):
		return fmt.Errorf("repetition_penalty %v outside (0, %d]", p.RepetitionPenalty, MaxRepetitionPenalty)
	}
	for i, b := range p.LogitBias {
		switch {
		case b.Token < 0 || (i > 0 && b.Token <= p.LogitBias[i-1].Token):
			return fmt.Errorf("logit_bias tokens must be non-negative, sorted and distinct")
		case bad(b.Value, -MaxBias, MaxBias):
			return fmt.Errorf("logit_bias %v outside [-100, 100]", b.Value)
		}
	}
	return nil
}

// reshapes reports whether the settings change the logits before the
// filters (bias or penalties), and so may move the argmax.
func (p Params) reshapes() bool {
	return len(p.LogitBias) > 0 || p.FrequencyPenalty != 0 || p.PresencePenalty != 0 || p.repeats()
}

func (p Params) repeats() bool { return p.RepetitionPenalty != 0 && p.RepetitionPenalty != 1 }

// Sampler draws tokens for one sequence.
type Sampler struct {
	p   Params
	rng *mrand.Rand
	// recent is the sequence's last RepetitionWindow tokens, oldest
	// first; kept only with a repetition penalty.
	recent []int32
	// counts are the generated tokens' occurrences; kept only with a
	// frequency or presence penalty.
	counts map[int32]int
	// scratch reused across calls to avoid per-token allocation.
	work  []float64
	idx   []int32
	probs []float64
	seen  []int32
}

// New returns a sampler; with a nil seed it seeds itself from crypto/rand.
// prompt is the sequence's prompt, which the repetition penalty's window
// starts with.
func New(p Params, prompt ...int32) *Sampler {
	var seed uint64
	if p.Seed != nil {
		seed = *p.Seed
	} else {
		var b [8]byte
		_, _ = rand.Read(b[:])
		seed = binary.LittleEndian.Uint64(b[:])
	}
	s := &Sampler{p: p, rng: mrand.New(mrand.NewPCG(seed, seed^0x9e3779b97f4a7c15))}
	if p.repeats() {
		s.recent = append(make([]int32, 0, RepetitionWindow), prompt[max(len(prompt)-RepetitionWindow, 0):]...)
	}
	if p.FrequencyPenalty != 0 || p.PresencePenalty != 0 {
		s.counts = map[int32]int{}
	}
	return s
}

// Greedy reports whether the sampler always takes the argmax of the raw
// logits: temperature 0 or top_k 1, and nothing that moves the argmax.
func (s *Sampler) Greedy() bool {
	return (s.p.Temperature == 0 || s.p.TopK == 1) && !s.p.reshapes()
}

// Next picks a token from logits and records it as the sequence's next.
func (s *Sampler) Next(logits []float32) int32 {
	if s.Greedy() {
		tok := Argmax(logits)
		s.accept(tok)
		return tok
	}
	ids, probs := s.Filter(logits)
	u := s.rng.Float64()
	tok := ids[len(ids)-1]
	for j, p := range probs {
		u -= p
		if u < 0 {
			tok = ids[j]
			break
		}
	}
	s.accept(tok)
	return tok
}

// accept records tok as the sequence's next token.
func (s *Sampler) accept(tok int32) {
	if s.p.repeats() {
		if len(s.recent) == RepetitionWindow {
			s.recent = append(s.recent[:0], s.recent[1:]...)
		}
		s.recent = append(s.recent, tok)
	}
	if s.counts != nil {
		s.counts[tok]++
	}
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
