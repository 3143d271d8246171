package gemma3

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/goprovider/provider/engine"
	"github.com/goprovider/provider/mlx"
	"github.com/goprovider/provider/model"
	"github.com/goprovider/provider/sample"
	"github.com/goprovider/provider/tokenizer"
)

// TestWindowMask checks the mask of a sliding chunk against a ring
// simulated write by write: every query sees exactly the keys at most
// w-1 positions before it, itself included.
func TestWindowMask(t *testing.T) {
	for _, tc := range []struct{ n, T, w int }{
		{0, 5, 3}, {2, 4, 3}, {3, 1, 3}, {7, 5, 3}, {9, 2, 4}, {0, 9, 9}, {10, 7, 8}, {100, 30, 16},
	} {
		t.Run(fmt.Sprintf("n%d_T%d_w%d", tc.n, tc.T, tc.w), func(t *testing.T) {
			// Simulated ring: slot p%w holds the latest position p written.
			ring := make([]int, tc.w)
			for s := range ring {
				ring[s] = -1
			}
			for p := range tc.n {
				ring[p%tc.w] = p
			}
			held := min(tc.n, tc.w)
			pos := append(slices.Clone(ring[:held]), make([]int, tc.T)...)
			for j := range tc.T {
				pos[held+j] = tc.n + j
			}
			mask := windowMask(tc.n, tc.T, tc.w)
			L := held + tc.T
			if len(mask) != tc.T*L {
				t.Fatalf("mask of %d values, want %d", len(mask), tc.T*L)
			}
			for i := range tc.T {
				q := tc.n + i
				var seen []int
				for j := range L {
					if mask[i*L+j] == 0 {
						seen = append(seen, pos[j])
					} else if !math.IsInf(float64(mask[i*L+j]), -1) {
						t.Fatalf("mask value %v", mask[i*L+j])
					}
				}
				slices.Sort(seen)
				var want []int
				for k := max(0, q-tc.w+1); k <= q; k++ {
					want = append(want, k)
				}
				if !slices.Equal(seen, want) {
					t.Errorf("query at %d sees %v, want %v", q, seen, want)
				}
			}
		})
	}
}

// TestRingMatchesFullHistory drives one sliding layer (at the real 512-token
// window and at a tiny one) and one global layer through a schedule of
// prefill chunks and decode steps, and compares each chunk's attention with
// attention computed on the host over the whole history under the window
// rule. It also checks that every layer's bytes match the ledger:
// engine.LayoutOf's charge for a sliding layer once past the window, the
// allocation granularity before it.
func TestRingMatchesFullHistory(t *testing.T) {
	ones := func(n int) []int {
		s := make([]int, n)
		for i := range s {
			s[i] = 1
		}
		return s
	}
	for _, tc := range []struct {
		name     string
		window   int
		schedule []int
	}{
		{"window 512", 512, slices.Concat([]int{300}, ones(3), []int{250}, ones(3), []int{700}, ones(2), []int{512, 513})},
		{"window 5", 5, slices.Concat([]int{3}, ones(4), []int{2, 7, 5}, ones(6), []int{11, 1, 4})},
	} {
		t.Run(tc.name, func(t *testing.T) {
			checkRing(t, tc.window, tc.schedule)
		})
	}
}

func checkRing(t *testing.T, window int, schedule []int) {
	const kvHeads, heads, headDim = 1, 2, 4
	cfg := model.Config{ActDType: mlx.Float32, Kinds: []model.LayerKind{
		{Window: window, KVHeads: kvHeads, HeadDim: headDim, SharedFrom: -1},
		{KVHeads: kvHeads, HeadDim: headDim, SharedFrom: -1},
	}}
	ledger := engine.LayoutOf(cfg)
	tokenBytes := int64(2 * kvHeads * headDim * 4)
	rng := rand.New(rand.NewPCG(uint64(window), 7))
	randn := func(n int) []float32 {
		v := make([]float32, n)
		for i := range v {
			v[i] = float32(rng.NormFloat64())
		}
		return v
	}
	th := mlx.NewThread()
	defer th.Close()
	var s mlx.Stream
	th.Do(func() { s = mlx.DefaultStream() })
	defer th.Do(s.Free)
	c := newCache(cfg.Kinds)
	defer th.Do(c.Free)
	var histK, histV []float32 // [position][headDim], kvHeads == 1
	const scale = 0.5
	for step, T := range schedule {
		k, v, q := randn(T*headDim), randn(T*headDim), randn(heads*T*headDim)
		histK, histV = append(histK, k...), append(histV, v...)
		n := c.n
		for li, kind := range cfg.Kinds {
			var got []float32
			var err error
			th.Do(func() {
				f := mlx.NewFrame(s)
				defer f.Free()
				c.reserve(f, cfg, T)
				keys, values, mode, mask := c.attend(f, li, f.Float32s(k, 1, kvHeads, T, headDim),
					f.Float32s(v, 1, kvHeads, T, headDim), mlx.Float32)
				out := f.Attention(f.Float32s(q, 1, heads, T, headDim), keys, values, scale, mode, mask, mlx.Array{})
				got = f.ToFloat32s(out)
				err = f.Err()
			})
			if err != nil {
				t.Fatal(err)
			}
			want := hostAttention(q, histK, histV, n, T, heads, headDim, kind.Window, scale)
			if d, at := maxAbsDiff(got, want); d > 1e-5 {
				t.Fatalf("step %d (chunk of %d at %d), layer %d: max |diff| %.3g at %d", step, T, n, li, d, at)
			}
		}
		c.n += T
		total := c.n
		local, global := c.LayerBytes(0), c.LayerBytes(1)
		charge := ledger.SequenceBytes(total) - int64(total)*ledger.BytesPerToken() // sliding layers' share
		if want := int64(slotsFor(window, total)) * tokenBytes; local != want {
			t.Fatalf("after %d tokens: sliding layer holds %d bytes, want %d", total, local, want)
		}
		if total >= window && local != charge {
			t.Fatalf("after %d tokens: sliding layer holds %d bytes, ledger charges %d", total, local, charge)
		}
		if want := int64(slotsFor(0, total)) * tokenBytes; global != want || global < int64(total)*ledger.BytesPerToken() {
			t.Fatalf("after %d tokens: global layer holds %d bytes, want %d", total, global, want)
		}
	}
	if got, want := c.LayerBytes(0), int64(window)*tokenBytes; got != want {
		t.Fatalf("sliding layer ends at %d bytes, want the window's %d", got, want)
	}
}

// hostAttention is float64 attention of T queries at positions n.. over
// the whole history, each query seeing the keys at positions p-window+1..p
// (0..p for window 0). q is [heads, T, headDim]; hist is [position, headDim].
func hostAttention(q, histK, histV []float32, n, T, heads, headDim, window int, scale float64) []float32 {
	out := make([]float32, heads*T*headDim)
	for h := range heads {
		for i := range T {
			p := n + i
			lo := 0
			if window > 0 {
				lo = max(0, p-window+1)
			}
			qi := q[(h*T+i)*headDim : (h*T+i+1)*headDim]
			scores := make([]float64, p-lo+1)
			best := math.Inf(-1)
			for j := range scores {
				var dot float64
				for d := range headDim {
					dot += float64(qi[d]) * float64(histK[(lo+j)*headDim+d])
				}
				scores[j] = dot * scale
				best = math.Max(best, scores[j])
			}
			var sum float64
			for j := range scores {
				scores[j] = math.Exp(scores[j] - best)
				sum += scores[j]
			}
			for d := range headDim {
				var acc float64
				for j := range scores {
					acc += scores[j] * float64(histV[(lo+j)*headDim+d])
				}
				out[(h*T+i)*headDim+d] = float32(acc / sum)
			}
		}
	}
	return out
}

// shortWindow is the sliding window the real-model tests below run with:
// the checkpoint's weights with every sliding layer's window set to 16, so
// that a few dozen tokens cross it (the real 512 costs minutes per pass on
// a CPU). The cache code is the same for every window size;
// TestRingMatchesFullHistory covers 512 itself.
const shortWindow = 16

// TestSlidingKVPlateau generates past the window token by token and checks
// after every step that each sliding layer's bytes stop growing at the
// window and equal the ledger's charge for it (engine.LayoutOf), while the
// global layers keep growing.
func TestSlidingKVPlateau(t *testing.T) {
	l := load(t, numerics{}, withWindow(shortWindow))
	ledger := engine.LayoutOf(l.cfg)
	c := l.newCache(t)
	next := l.m.Tokenizer.Encode("The lighthouse keeper climbed the stairs", tokenizer.EncodeOptions{AddSpecial: true})
	plateau := int64(-1)
	for c.Len() < 2*shortWindow+2 {
		logits := l.step(t, [][]int32{next}, []*Cache{c})
		next = []int32{sample.Argmax(logits)}
		T := c.Len()
		var local, global int64
		for i, k := range l.cfg.Kinds {
			if k.Window > 0 {
				local += c.LayerBytes(i)
			} else {
				global += c.LayerBytes(i)
			}
		}
		charge := ledger.SequenceBytes(T) - int64(T)*ledger.BytesPerToken()
		switch {
		case T >= shortWindow && local != charge:
			t.Fatalf("%d tokens: sliding layers hold %d bytes, the ledger charges %d", T, local, charge)
		case plateau >= 0 && local != plateau:
			t.Fatalf("%d tokens: sliding layers grew from %d to %d bytes", T, plateau, local)
		case global < int64(T)*ledger.BytesPerToken() || global >= int64(T+cacheStep)*ledger.BytesPerToken():
			t.Fatalf("%d tokens: global layers hold %d bytes for %d per token", T, global, ledger.BytesPerToken())
		}
		if T >= shortWindow {
			plateau = local
		}
		if c.Bytes() != local+global {
			t.Fatalf("Bytes %d, layers sum to %d", c.Bytes(), local+global)
		}
	}
	t.Logf("%d tokens: sliding layers %d bytes (window %d), ledger SequenceBytes %d, cache %d",
		c.Len(), plateau, shortWindow, ledger.SequenceBytes(c.Len()), c.Bytes())
}

// TestChunkedPrefillMatchesOneChunk prefills a prompt longer than the
// window in one chunk and in several (chunks shorter than, equal to and
// straddling the window, single tokens in between), then decodes two steps:
// every schedule gives the same tokens and logits within float summation
// order.
func TestChunkedPrefillMatchesOneChunk(t *testing.T) {
	l := load(t, numerics{}, withWindow(shortWindow))
	prompt := l.m.Tokenizer.Encode("Once upon a time, in a small village by the grey northern sea, there lived an old lighthouse keeper who kept a careful logbook of every ship that passed.",
		tokenizer.EncodeOptions{AddSpecial: true})
	if len(prompt) <= 2*shortWindow {
		t.Fatalf("prompt of %d tokens does not cover two windows", len(prompt))
	}
	run := func(schedule []int) ([][]float32, []int32) {
		c := l.newCache(t)
		var logits [][]float32
		at := 0
		for _, n := range schedule {
			out := l.step(t, [][]int32{prompt[at : at+n]}, []*Cache{c})
			at += n
			if at == len(prompt) {
				logits = append(logits, out)
			}
		}
		if at != len(prompt) {
			t.Fatalf("schedule %v covers %d of %d tokens", schedule, at, len(prompt))
		}
		var toks []int32
		for range 2 {
			tok := sample.Argmax(logits[len(logits)-1])
			toks = append(toks, tok)
			logits = append(logits, l.step(t, [][]int32{{tok}}, []*Cache{c}))
		}
		return logits, toks
	}
	P := len(prompt)
	ref, refToks := run([]int{P})
	for _, schedule := range [][]int{
		{shortWindow, P - shortWindow},
		{5, 11, 1, P - 17},
		{shortWindow - 1, 1, 1, P - shortWindow - 1},
	} {
		got, toks := run(schedule)
		if !slices.Equal(toks, refToks) {
			t.Errorf("schedule %v: tokens %v, one chunk %v", schedule, toks, refToks)
		}
		for i := range ref {
			d, at := maxAbsDiff(got[i], ref[i])
			if d > 1e-4 {
				t.Errorf("schedule %v, output %d: max |logit diff| %.3g at %d", schedule, i, d, at)
			}
			t.Logf("schedule %v, output %d: max |logit diff| vs one chunk %.3g", schedule, i, d)
		}
	}
}
