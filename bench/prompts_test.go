package bench

import (
	"math"
	"slices"
	"strings"
	"testing"
	"time"
)

// levelPrompts builds level li's n prompts of set p under seed, among
// levels c=1 and c=2.
func levelPrompts(p PromptSet, seed uint64, li, n int) []Prompt {
	w := Workload{Prompts: p, Levels: []Level{{Concurrency: 1}, {Concurrency: 2}}, Requests: n, Seed: seed}
	return w.levelPrompts(li)
}

func TestPromptsAreReproducible(t *testing.T) {
	for _, shape := range []PromptShape{PromptsRandom, PromptsFixed, PromptsSharedPrefix} {
		t.Run(string(shape), func(t *testing.T) {
			p := PromptSet{Shape: shape, Tokens: 40}
			a, b := levelPrompts(p, 7, 0, 20), levelPrompts(p, 7, 0, 20)
			if !slices.Equal(a, b) {
				t.Fatal("same seed and level gave different prompts")
			}
			if slices.Equal(a, levelPrompts(p, 8, 0, 20)) {
				t.Error("another seed gave the same prompts")
			}
			if slices.Equal(a, levelPrompts(p, 7, 1, 20)) {
				t.Error("another level gave the same prompts")
			}
			seen := map[string]bool{}
			for _, q := range a {
				if seen[q.Text] {
					t.Errorf("prompt repeated: %q", q.Text)
				}
				seen[q.Text] = true
			}
		})
	}
}

// opening is a prompt's first words: two prompts that share them would
// share a prefix in a server's prompt cache.
func opening(p Prompt) string {
	w := strings.Fields(p.Text)
	return strings.Join(w[:min(4, len(w))], " ")
}

// TestPromptsFresh: within a run, no level shares a prompt opening (or,
// shared-prefix, a prefix) with another or with the warm-up; nor do
// runs of one seed that differ in their levels (a sweep, then a Poisson
// run) or in their prompt lengths.
func TestPromptsFresh(t *testing.T) {
	sweep := Workload{Levels: []Level{{Concurrency: 1}, {Concurrency: 2}, {Concurrency: 4}, {Concurrency: 8}}, Requests: 32, Warmup: 4, Seed: 1}
	poisson := sweep
	poisson.Levels = []Level{{Rate: 0.2}, {Rate: 0.5, Concurrency: 8}}
	for _, shape := range []PromptShape{PromptsRandom, PromptsFixed, PromptsSharedPrefix} {
		t.Run(string(shape), func(t *testing.T) {
			set := PromptSet{Shape: shape, Tokens: 40, Prefixes: 2, PrefixTokens: 30}
			longer := set
			longer.Tokens, longer.PrefixTokens = 128, 96
			// owner maps a prompt opening, or a shared prefix, to the
			// group (run and level, or warm-up) that used it first.
			owner := map[string]string{}
			for _, run := range []struct {
				name string
				w    Workload
				set  PromptSet
			}{{"sweep", sweep, set}, {"poisson", poisson, set}, {"longer sweep", sweep, longer}} {
				w := run.w
				w.Prompts = run.set
				groups := map[string][]Prompt{run.name + " warmup": w.warmupPrompts()}
				for li, l := range w.Levels {
					groups[run.name+" "+l.Label()] = w.levelPrompts(li)
				}
				for group, prompts := range groups {
					keys := map[string]bool{}
					for _, p := range prompts {
						key := opening(p)
						if shape == PromptsSharedPrefix {
							key = strings.Join(strings.Fields(p.Text)[:run.set.prefixTokens()], " ")
						} else if keys[key] {
							t.Errorf("%s: two prompts open with %q", group, key)
						}
						keys[key] = true
					}
					for key := range keys {
						if prev, ok := owner[key]; ok && prev != group {
							t.Errorf("%s reuses %s's prompt opening %q", group, prev, clip(key))
						}
						owner[key] = group
					}
				}
			}
		})
	}
}

func TestPromptLengths(t *testing.T) {
	for _, tc := range []struct {
		name   string
		set    PromptSet
		lo, hi int
	}{
		{"fixed", PromptSet{Shape: PromptsFixed, Tokens: 64}, 64, 64},
		{"random, default spread 0.5", PromptSet{Shape: PromptsRandom, Tokens: 100}, 50, 150},
		{"random, spread 0.1", PromptSet{Shape: PromptsRandom, Tokens: 100, Range: 0.1}, 90, 110},
		{"random, full spread keeps one word", PromptSet{Shape: PromptsRandom, Tokens: 4, Range: 1}, 1, 8},
		{"shared prefix", PromptSet{Shape: PromptsSharedPrefix, Tokens: 80}, 80, 80},
	} {
		t.Run(tc.name, func(t *testing.T) {
			lens := map[int]bool{}
			for _, q := range levelPrompts(tc.set, 1, 0, 200) {
				n := len(strings.Fields(q.Text))
				if n != q.Words {
					t.Fatalf("prompt has %d words, says %d", n, q.Words)
				}
				if n < tc.lo || n > tc.hi {
					t.Fatalf("prompt of %d words, want %d..%d", n, tc.lo, tc.hi)
				}
				lens[n] = true
			}
			if tc.lo < tc.hi && len(lens) < 3 {
				t.Errorf("random lengths barely vary: %v", lens)
			}
		})
	}
}

func TestSharedPrefixes(t *testing.T) {
	p := PromptSet{Shape: PromptsSharedPrefix, Tokens: 40, Prefixes: 3, PrefixTokens: 30}
	prefix := map[int]string{}
	suffixes := map[string]bool{}
	for _, q := range levelPrompts(p, 3, 0, 60) {
		w := strings.Fields(q.Text)
		head, tail := strings.Join(w[:30], " "), strings.Join(w[30:], " ")
		if q.Prefix < 0 || q.Prefix >= 3 {
			t.Fatalf("prefix index %d, want 0..2", q.Prefix)
		}
		if old, ok := prefix[q.Prefix]; ok && old != head {
			t.Fatalf("prefix %d differs between prompts", q.Prefix)
		}
		prefix[q.Prefix] = head
		if suffixes[tail] {
			t.Errorf("suffix repeated: %q", tail)
		}
		suffixes[tail] = true
	}
	if len(prefix) != 3 {
		t.Fatalf("%d prefixes used, want 3", len(prefix))
	}
	if prefix[0] == prefix[1] || prefix[1] == prefix[2] || prefix[0] == prefix[2] {
		t.Error("prefixes are not distinct")
	}
}

func TestPoissonArrivals(t *testing.T) {
	const rate, n = 4.0, 4000
	at := poisson(source(11, streamArrivals, 0), rate, n)
	if !slices.Equal(at, poisson(source(11, streamArrivals, 0), rate, n)) {
		t.Fatal("same seed gave other arrivals")
	}
	if at[0] != 0 {
		t.Errorf("first arrival at %v, want 0", at[0])
	}
	if !slices.IsSorted(at) {
		t.Error("arrivals go back in time")
	}
	// The seed fixes the draw, so these bounds are checked, not hoped:
	// the mean gap is 1/rate, and exponential gaps have a standard
	// deviation equal to their mean.
	gaps := make([]float64, n-1)
	mean := 0.0
	for i := range gaps {
		gaps[i] = (at[i+1] - at[i]).Seconds()
		mean += gaps[i] / float64(len(gaps))
	}
	variance := 0.0
	for _, g := range gaps {
		variance += (g - mean) * (g - mean) / float64(len(gaps))
	}
	if want := 1 / rate; math.Abs(mean-want) > 0.05*want || math.Abs(math.Sqrt(variance)-want) > 0.1*want {
		t.Errorf("gaps: mean %.4fs, sd %.4fs; want both near %.4fs", mean, math.Sqrt(variance), want)
	}
	if at[n-1] < time.Duration(float64(n-1)/rate*0.9*float64(time.Second)) {
		t.Errorf("last arrival %v, too early for %d requests at %g/s", at[n-1], n, rate)
	}
}
