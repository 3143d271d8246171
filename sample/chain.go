package sample

import (
	"cmp"
	"math"
	"slices"
)

// Filter runs the chain (see the package comment) on a row of logits and
// returns the tokens that survive it with the probabilities Next draws
// them by, which sum to 1. At temperature 0 or top_k 1 that is the argmax
// of the biased and penalized logits alone. The slices are the sampler's
// scratch, valid until its next call; their order is the chain's, not
// promised. The logits are not modified.
func (s *Sampler) Filter(logits []float32) (ids []int32, probs []float64) {
	v := s.reshape(logits)
	s.idx = s.idx[:0]
	for i, x := range v {
		if !math.IsNaN(x) && !math.IsInf(x, -1) {
			s.idx = append(s.idx, int32(i))
		}
	}
	if len(s.idx) == 0 {
		// Nothing is possible: the raw argmax is as good as any.
		s.idx = append(s.idx, Argmax(logits))
		s.probs = append(s.probs[:0], 1)
		return s.idx, s.probs
	}
	if s.p.Temperature == 0 || s.p.TopK == 1 {
		best := s.idx[0]
		for _, i := range s.idx[1:] {
			if v[i] > v[best] {
				best = i
			}
		}
		s.idx = append(s.idx[:0], best)
		s.probs = append(s.probs[:0], 1)
		return s.idx, s.probs
	}
	if k := s.p.TopK; k > 0 && k < len(s.idx) {
		front(s.idx, v, k)
		s.idx = s.idx[:k]
	}
	if p := s.p.TopP; p > 0 && p < 1 {
		s.topP(v, p)
	}
	if p := s.p.MinP; p > 0 {
		s.minP(v, p)
	}
	s.probs = softmax(s.probs[:0], s.idx, v, s.p.Temperature)
	return s.idx, s.probs
}

// reshape returns the logits after logit_bias and the penalties, as
// float64: the sampler's scratch.
func (s *Sampler) reshape(logits []float32) []float64 {
	v := s.work[:0]
	for _, x := range logits {
		y := float64(x)
		if math.IsInf(y, 1) {
			// Keeps the softmax finite: such tokens share all the mass.
			y = math.MaxFloat64
		}
		v = append(v, y)
	}
	s.work = v
	for _, b := range s.p.LogitBias {
		if int(b.Token) < len(v) {
			v[b.Token] += b.Value
		}
	}
	if s.p.repeats() {
		s.seen = append(s.seen[:0], s.recent...)
		slices.Sort(s.seen)
		r := s.p.RepetitionPenalty
		for _, t := range slices.Compact(s.seen) {
			if t < 0 || int(t) >= len(v) {
				continue
			}
			if v[t] > 0 {
				v[t] /= r
			} else {
				v[t] *= r
			}
		}
	}
	for t, c := range s.counts {
		if t >= 0 && int(t) < len(v) {
			v[t] -= float64(c)*s.p.FrequencyPenalty + s.p.PresencePenalty
		}
	}
	return v
}

// better orders candidates most likely first, the lower id first on ties.
func better(v []float64) func(a, b int32) int {
	return func(a, b int32) int {
		if c := cmp.Compare(v[b], v[a]); c != 0 {
			return c
		}
		return cmp.Compare(a, b)
	}
}

// front moves the k best of idx to its front, in order. The order is
// total, so the result does not depend on how the selection goes.
func front(idx []int32, v []float64, k int) {
	less := better(v)
	if k >= len(idx) {
		slices.SortFunc(idx, less)
		return
	}
	lo, hi := 0, len(idx)
	// Quickselect until the k best are idx[:k], in some order.
	for hi-lo > 1 {
		mid := lo + (hi-lo)/2
		idx[lo], idx[mid] = idx[mid], idx[lo]
		pivot, store := idx[lo], lo+1
		for i := lo + 1; i < hi; i++ {
			if less(idx[i], pivot) < 0 {
				idx[store], idx[i] = idx[i], idx[store]
				store++
			}
		}
		idx[lo], idx[store-1] = idx[store-1], idx[lo]
		switch p := store - 1; {
		case p == k || p == k-1:
			lo = hi
		case p > k:
			hi = p
		default:
			lo = p + 1
		}
	}
	slices.SortFunc(idx[:k], less)
}

// topP keeps the most likely candidates whose probabilities at
// temperature 1 first reach p (at least one). It sorts only as much of
// the candidates as the cut needs.
func (s *Sampler) topP(v []float64, p float64) {
	maxL, sum := math.Inf(-1), 0.0
	for _, i := range s.idx {
		maxL = math.Max(maxL, v[i])
	}
	for _, i := range s.idx {
		sum += math.Exp(v[i] - maxL)
	}
	sorted := 0
	for k := min(64, len(s.idx)); ; k = min(4*k, len(s.idx)) {
		if k > sorted {
			front(s.idx[sorted:], v, k-sorted)
			sorted = k
		}
		cum := 0.0
		for j, i := range s.idx[:sorted] {
			cum += math.Exp(v[i]-maxL) / sum
			if cum >= p {
				s.idx = s.idx[:j+1]
				return
			}
		}
		if sorted == len(s.idx) {
			return
		}
	}
}

// minP drops candidates whose probability is below p times the most
// likely one's: at temperature 1 that is a logit below the largest plus
// ln p.
func (s *Sampler) minP(v []float64, p float64) {
	maxL := math.Inf(-1)
	for _, i := range s.idx {
		maxL = math.Max(maxL, v[i])
	}
	floor := maxL + math.Log(p)
	kept := s.idx[:0]
	for _, i := range s.idx {
		if v[i] >= floor {
			kept = append(kept, i)
		}
	}
	s.idx = kept
}

// softmax appends the probabilities of idx's logits divided by t.
func softmax(out []float64, idx []int32, v []float64, t float64) []float64 {
	maxL := math.Inf(-1)
	for _, i := range idx {
		maxL = math.Max(maxL, v[i])
	}
	var sum float64
	for _, i := range idx {
		e := math.Exp((v[i] - maxL) / t)
		out = append(out, e)
		sum += e
	}
	for j := range out {
		out[j] /= sum
	}
	return out
}
