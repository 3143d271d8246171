package sample

import (
	"encoding/json"
	"math"
	"math/rand/v2"
	"os"
	"slices"
	"testing"
)

// chainFixture is sample/testdata/chain.json, written by
// scripts/sampling_reference.py.
type chainFixture struct {
	Logits []float32 `json:"logits"`
	Window int       `json:"window"`
	Cases  []struct {
		Name   string `json:"name"`
		Params struct {
			Temperature       float64      `json:"temperature"`
			TopK              int          `json:"top_k"`
			TopP              float64      `json:"top_p"`
			MinP              float64      `json:"min_p"`
			FrequencyPenalty  float64      `json:"frequency_penalty"`
			PresencePenalty   float64      `json:"presence_penalty"`
			RepetitionPenalty float64      `json:"repetition_penalty"`
			LogitBias         [][2]float64 `json:"logit_bias"`
		} `json:"params"`
		Prompt    []int32   `json:"prompt"`
		Generated []int32   `json:"generated"`
		Probs     []float64 `json:"probs"`
	} `json:"cases"`
}

// The chain's distribution equals the NumPy reference's on fixed logits,
// for each knob alone and together.
func TestFilterMatchesReference(t *testing.T) {
	b, err := os.ReadFile("testdata/chain.json")
	if err != nil {
		t.Fatal(err)
	}
	var fx chainFixture
	if err := json.Unmarshal(b, &fx); err != nil {
		t.Fatal(err)
	}
	if fx.Window != RepetitionWindow {
		t.Fatalf("fixture window %d, RepetitionWindow %d", fx.Window, RepetitionWindow)
	}
	for _, c := range fx.Cases {
		t.Run(c.Name, func(t *testing.T) {
			q := c.Params
			p := Params{Temperature: q.Temperature, TopK: q.TopK, TopP: q.TopP, MinP: q.MinP,
				FrequencyPenalty: q.FrequencyPenalty, PresencePenalty: q.PresencePenalty,
				RepetitionPenalty: q.RepetitionPenalty, Seed: seed(3)}
			for _, e := range q.LogitBias {
				p.LogitBias = append(p.LogitBias, Bias{Token: int32(e[0]), Value: e[1]})
			}
			if err := p.Validate(); err != nil {
				t.Fatal(err)
			}
			s := New(p, c.Prompt...)
			for _, tok := range c.Generated {
				s.accept(tok)
			}
			logits := slices.Clone(fx.Logits)
			ids, probs := s.Filter(logits)
			if !slices.Equal(logits, fx.Logits) {
				t.Fatal("Filter modified the logits")
			}
			got := make([]float64, len(logits))
			for j, id := range ids {
				got[id] += probs[j]
			}
			for i := range got {
				if math.Abs(got[i]-c.Probs[i]) > 1e-12 {
					t.Fatalf("token %d: %.15g, reference %.15g\n got %v\nwant %v", i, got[i], c.Probs[i], got, c.Probs)
				}
			}
			// Next draws only what the chain keeps.
			for range 200 {
				s2 := New(p, c.Prompt...)
				for _, tok := range c.Generated {
					s2.accept(tok)
				}
				if tok := s2.Next(fx.Logits); c.Probs[tok] == 0 {
					t.Fatalf("Next drew token %d, which the chain drops", tok)
				}
				p.Seed = seed(*p.Seed + 1)
			}
		})
	}
}

// front selects the same k best as a full sort, whatever the input order.
func TestFrontSelectsTheKBest(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for trial := range 300 {
		n := 1 + r.IntN(300)
		v := make([]float64, n)
		for i := range v {
			v[i] = float64(r.IntN(20)) // many ties
		}
		idx := make([]int32, n)
		for i := range idx {
			idx[i] = int32(i)
		}
		r.Shuffle(n, func(a, b int) { idx[a], idx[b] = idx[b], idx[a] })
		want := slices.Clone(idx)
		slices.SortFunc(want, better(v))
		k := 1 + r.IntN(n)
		front(idx, v, k)
		if !slices.Equal(idx[:k], want[:k]) {
			t.Fatalf("trial %d (n %d, k %d): %v, want %v", trial, n, k, idx[:k], want[:k])
		}
	}
}

// top_p sorts in growing rounds; over a vocabulary larger than a round it
// keeps the same prefix a full sort does.
func TestTopPAcrossRounds(t *testing.T) {
	const n = 5000
	logits := make([]float32, n)
	r := rand.New(rand.NewPCG(5, 6))
	for i := range logits {
		logits[i] = float32(r.NormFloat64() * 0.3) // flat: the nucleus is large
	}
	s := New(Params{Temperature: 1, TopP: 0.9, Seed: seed(1)})
	ids, _ := s.Filter(logits)
	v := make([]float64, n)
	all := make([]int32, n)
	var sum float64
	for i, l := range logits {
		v[i], all[i] = float64(l), int32(i)
		sum += math.Exp(v[i])
	}
	slices.SortFunc(all, better(v))
	cum, want := 0.0, 0
	for want < n {
		cum += math.Exp(v[all[want]]) / sum
		want++
		if cum >= 0.9 {
			break
		}
	}
	if len(ids) != want || want <= 256 {
		t.Fatalf("kept %d tokens, want %d (more than a few rounds)", len(ids), want)
	}
	if !slices.Equal(ids, all[:want]) {
		t.Fatal("kept other tokens than a full sort")
	}
}

func TestGreedyOnlyWhenNothingMovesTheArgmax(t *testing.T) {
	tests := []struct {
		p    Params
		want bool
	}{
		{Params{}, true},
		{Params{Temperature: 1, TopK: 1}, true},
		{Params{TopP: 0.5, MinP: 0.2}, true},
		{Params{RepetitionPenalty: 1}, true},
		{Params{Temperature: 0.5}, false},
		{Params{LogitBias: []Bias{{Token: 3, Value: 1}}}, false},
		{Params{FrequencyPenalty: 0.1}, false},
		{Params{PresencePenalty: -0.1}, false},
		{Params{RepetitionPenalty: 1.1}, false},
		{Params{Temperature: 1, TopK: 1, PresencePenalty: 1}, false},
	}
	for _, tc := range tests {
		if got := New(tc.p).Greedy(); got != tc.want {
			t.Errorf("%+v: Greedy %v, want %v", tc.p, got, tc.want)
		}
	}
}

// At temperature 0 a penalty steers the argmax away from what the sequence
// already holds: the sampler records its own tokens.
func TestGreedyWithPenaltiesAvoidsRepeats(t *testing.T) {
	logits := []float32{3, 2.9, 2.8, 0}
	s := New(Params{PresencePenalty: 1, Seed: seed(1)})
	var got []int32
	for range 3 {
		got = append(got, s.Next(logits))
	}
	if !slices.Equal(got, []int32{0, 1, 2}) {
		t.Fatalf("got %v, want [0 1 2]", got)
	}
	// The repetition window starts with the prompt.
	s = New(Params{RepetitionPenalty: 2}, 0, 1)
	if got := s.Next(logits); got != 2 {
		t.Fatalf("after prompt [0 1]: %d, want 2", got)
	}
}
