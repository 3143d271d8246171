package gemma3

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/goprovider/provider/kvpool"
	"github.com/goprovider/provider/mlx"
	"github.com/goprovider/provider/model"
	"github.com/goprovider/provider/sample"
	"github.com/goprovider/provider/tokenizer"
)

// heldBlocks is how many blocks a layer of the given window (0: full
// attention) holds for a sequence of n tokens between steps: every block
// up to position n-1 for a full layer, at most kvpool.RingBlocks(window)
// of the newest for a sliding one.
func heldBlocks(window, n int) int {
	b := (n + kvpool.BlockTokens - 1) / kvpool.BlockTokens
	if window > 0 {
		b = min(b, kvpool.RingBlocks(window))
	}
	return b
}

// blockBytes is one block of one layer's keys and values.
func blockBytes(c model.Config, k model.LayerKind) int64 {
	return int64(kvpool.BlockTokens) * 2 * int64(k.KVHeads) * int64(k.HeadDim) * int64(c.ActDType.Size())
}

// seqBytes is what a sequence of n tokens holds: split into the sliding
// layers' and the full layers' shares.
func seqBytes(c model.Config, n int) (sliding, full int64) {
	for _, k := range c.Kinds {
		b := int64(heldBlocks(k.Window, n)) * blockBytes(c, k)
		if k.Window > 0 {
			sliding += b
		} else {
			full += b
		}
	}
	return sliding, full
}

// TestPoolMatchesFullHistory drives Gemma 3's two layer kinds, one sliding
// (at the checkpoint's 512-token window and at a tiny one) and one global,
// through a pool laid out by model.PoolLayers and a schedule of prefill
// chunks and decode steps, on the fused CPU kernel and on the MLX-ops path.
// It compares each chunk's attention with attention computed on the host
// over the whole history under the window rule, and checks after every
// step that the sequence holds what the window allows: the sliding layer
// at most kvpool.RingBlocks(window) blocks, the global layer every block.
func TestPoolMatchesFullHistory(t *testing.T) {
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
		{"window 5", 5, slices.Concat([]int{3}, ones(4), []int{2, 7, 5}, ones(6), []int{11, 1, 4, 250, 1, 255, 1})},
	} {
		for _, ops := range []bool{false, true} {
			name := tc.name + " fused"
			if ops {
				name = tc.name + " ops"
			}
			t.Run(name, func(t *testing.T) {
				checkPool(t, tc.window, tc.schedule, ops)
			})
		}
	}
}

func checkPool(t *testing.T, window int, schedule []int, ops bool) {
	const kvHeads, heads, headDim = 1, 2, 4
	cfg := model.Config{ActDType: mlx.Float32, Kinds: []model.LayerKind{
		{Window: window, KVHeads: kvHeads, HeadDim: headDim, SharedFrom: -1},
		{KVHeads: kvHeads, HeadDim: headDim, SharedFrom: -1},
	}}
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
	var p *kvpool.Pool
	var err error
	th.Do(func() {
		s = mlx.DefaultStream()
		p, err = kvpool.New(s, cfg.ActDType, model.PoolLayers(cfg), kvpool.Options{Ops: ops})
	})
	defer th.Do(s.Free)
	if err != nil {
		t.Fatal(err)
	}
	defer th.Do(p.Close)
	if p.Fused() == ops {
		t.Fatalf("Fused() = %v with Ops %v", p.Fused(), ops)
	}
	seq := p.NewSeq()
	// Per layer: the whole history of keys and values, [position][headDim]
	// (kvHeads == 1).
	histK, histV := make([][]float32, 2), make([][]float32, 2)
	const scale = 0.5
	for step, T := range schedule {
		n := seq.Len()
		q := randn(T * heads * headDim) // [T, heads, headDim]
		got := make([][]float32, len(cfg.Kinds))
		th.Do(func() {
			f := mlx.NewFrame(s)
			defer f.Free()
			b, berr := p.Begin(f, []kvpool.Row{{Seq: seq, Tokens: make([]int32, T), Sample: true}})
			if berr != nil {
				f.Fail(berr)
				return
			}
			outs := make([]mlx.Array, len(cfg.Kinds))
			for li := range cfg.Kinds {
				k, v := randn(T*headDim), randn(T*headDim)
				histK[li], histV[li] = append(histK[li], k...), append(histV[li], v...)
				outs[li] = b.Attend(li, f.Float32s(q, T, heads, headDim), f.Float32s(k, T, kvHeads, headDim),
					f.Float32s(v, T, kvHeads, headDim), scale, mlx.Array{})
			}
			if f.Eval(outs...) != nil {
				return
			}
			for li := range outs {
				got[li] = f.ToFloat32s(outs[li])
			}
			if err = f.Err(); err == nil {
				b.Commit()
			}
		})
		if err != nil {
			t.Fatalf("step %d: %v", step, err)
		}
		for li, kind := range cfg.Kinds {
			want := hostAttention(q, histK[li], histV[li], n, T, heads, headDim, kind.Window, scale)
			if d, at := maxAbsDiff(got[li], want); d > 1e-5 {
				t.Fatalf("step %d (chunk of %d at %d), layer %d: max |diff| %.3g at %d", step, T, n, li, d, at)
			}
		}
		var total int
		var blocks []int
		var seqHeld, poolHeld int64
		th.Do(func() { total, blocks, seqHeld, poolHeld = seq.Len(), seq.Blocks(), seq.Bytes(), p.HeldBytes() })
		if total != n+T {
			t.Fatalf("step %d: sequence holds %d tokens, want %d", step, total, n+T)
		}
		// Groups in layer order: the sliding layer's, then the global one's.
		if want := []int{heldBlocks(window, total), heldBlocks(0, total)}; !slices.Equal(blocks, want) {
			t.Fatalf("after %d tokens: blocks %v, want %v", total, blocks, want)
		}
		sliding, full := seqBytes(cfg, total)
		if seqHeld != sliding+full || poolHeld != seqHeld {
			t.Fatalf("after %d tokens: sequence holds %d bytes, pool %d, want %d", total, seqHeld, poolHeld, sliding+full)
		}
		if sliding > int64(kvpool.RingBlocks(window))*blockBytes(cfg, cfg.Kinds[0]) {
			t.Fatalf("after %d tokens: sliding layer holds %d bytes, past its ring", total, sliding)
		}
		if full < int64(total)*2*kvHeads*headDim*4 {
			t.Fatalf("after %d tokens: global layer holds %d bytes, fewer than its tokens", total, full)
		}
	}
	var last []int
	var held int64
	th.Do(func() {
		last = seq.Blocks()
		seq.Free()
		held = p.HeldBytes()
	})
	if want := kvpool.RingBlocks(window); last[0] != want {
		t.Fatalf("sliding layer ends holding %d blocks, want its ring's %d", last[0], want)
	}
	if held != 0 {
		t.Fatalf("after Free the pool holds %d bytes", held)
	}
}

// hostAttention is float64 attention of T queries at positions n.. over
// the whole history, each query seeing the keys at positions p-window+1..p
// (0..p for window 0). q is [T, heads, headDim], hist [position, headDim];
// the result is [T, heads, headDim].
func hostAttention(q, histK, histV []float32, n, T, heads, headDim, window int, scale float64) []float32 {
	out := make([]float32, T*heads*headDim)
	for i := range T {
		p := n + i
		lo := 0
		if window > 0 {
			lo = max(0, p-window+1)
		}
		for h := range heads {
			at := (i*heads + h) * headDim
			qi := q[at : at+headDim]
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
				out[at+d] = float32(acc / sum)
			}
		}
	}
	return out
}

// shortWindow is the sliding window most real-model tests run with: the
// checkpoint's weights with every sliding layer's window set to 16, so
// that a few dozen tokens cross it. TestPoolMatchesFullHistory and
// TestLongGenerationThroughWindow cover the checkpoint's 512 itself.
const shortWindow = 16

// longStory is the prompt text of the long-sequence test, repeated with
// numbered chapters until the prompt is long enough.
const longStory = "The old lighthouse keeper climbed the winding stairs every evening to light the lamp before dark. " +
	"From the gallery he watched the fishing boats come home across the grey water, counted them in his logbook, " +
	"and listened to the gulls quarrelling over the harbour wall. In winter the storms came from the north and the " +
	"waves broke over the rocks below, but the lamp never went out. "

// longPrompt is the first n tokens of the numbered chapters of longStory.
func longPrompt(tb testing.TB, l *loaded, n int) []int32 {
	tb.Helper()
	var sb strings.Builder
	for ch := 1; ; ch++ {
		fmt.Fprintf(&sb, "Chapter %d. %s", ch, longStory)
		ids := l.m.Tokenizer.Encode(sb.String(), tokenizer.EncodeOptions{AddSpecial: true})
		if len(ids) >= n {
			return ids[:n]
		}
	}
}

// ringTokens are the greedy tokens the model generated after longPrompt
// with the per-sequence ring-buffer KV cache the pool replaced (prefilled
// with the same chunks), per window (0: the checkpoint's): the pool must
// reproduce them.
var ringTokens = map[int][]int32{
	0: {15707, 668, 19061, 506, 13763, 20896, 2229, 2033, 3418, 506, 13501, 1813, 236764, 31167, 1091, 528, 914, 2212, 3070, 236764,
		532, 37570, 531, 506, 549, 57751, 56666, 18633, 522, 1024, 506, 53676, 3549, 236761, 799, 7208, 506, 48312, 3588, 699},
	shortWindow: {840, 506, 15123, 2752, 3939, 855, 236761, 11503, 236743, 236825, 236761, 669, 2255, 63937, 64222, 54264, 506, 33839,
		31393, 1418, 9137, 531, 2214, 506, 15123, 1680, 4996, 699, 506, 15707, 236761, 4934, 506, 15707, 668, 19061, 506, 13763,
		20896, 2229, 2033, 3418, 506, 13501, 1813, 236764, 31167, 1091},
}

// TestLongGenerationThroughWindow prefills a long prompt in chunks that
// straddle block boundaries, then decodes greedily through the sliding
// window, at the checkpoint's window of 512 and at a short one, and checks
// that:
//   - after every step the sequence holds exactly what its layers' windows
//     allow: each sliding layer its newest kvpool.RingBlocks(window) blocks
//     at most (reached, and then constant, once the sequence is long
//     enough), each global layer every 256-token block up to its last
//     token; the pool holds nothing else, and nothing once it is freed;
//   - the greedy tokens equal those of the ring-buffer cache the pool
//     replaced (ringTokens).
func TestLongGenerationThroughWindow(t *testing.T) {
	for _, tc := range []struct {
		window   int // 0: the checkpoint's
		schedule []int
		decode   int
	}{
		// 1000 prompt tokens (the sliding layers give their first block
		// back past 768), then decode across position 1024, where their
		// ring takes a block again.
		{0, []int{300, 1, 255, 1, 200, 243}, 40},
		// 480 prompt tokens at a 16-token window: decode across 512, where
		// the sliding layers first give a block back.
		{shortWindow, []int{250, 7, 1, 222}, 48},
	} {
		t.Run(fmt.Sprint("window ", tc.window), func(t *testing.T) {
			var adjust func(*model.Config)
			if tc.window > 0 {
				adjust = withWindow(tc.window)
			}
			l := load(t, numerics{}, adjust)
			window := l.cfg.Kinds[0].Window
			if window == 0 {
				t.Fatal("layer 0 is not a sliding layer")
			}
			P := 0
			for _, n := range tc.schedule {
				P += n
			}
			prompt := longPrompt(t, l, P)
			seq := l.newSeq(t)
			nSliding := 0
			for _, k := range l.cfg.Kinds {
				if k.Window > 0 {
					nSliding++
					if k.Window != window {
						t.Fatalf("sliding windows %d and %d", window, k.Window)
					}
				}
			}
			ring := int64(nSliding) * int64(kvpool.RingBlocks(window)) * blockBytes(l.cfg, l.cfg.Kinds[0])
			plateau := false
			check := func() {
				t.Helper()
				var n int
				var got, held int64
				l.th.Do(func() { n, got, held = seq.Len(), seq.Bytes(), l.st.Pool.HeldBytes() })
				sliding, full := seqBytes(l.cfg, n)
				if got != sliding+full || held != got {
					t.Fatalf("%d tokens: sequence holds %d bytes, pool %d, want %d (sliding %d, global %d)", n, got, held, sliding+full, sliding, full)
				}
				if sliding > ring {
					t.Fatalf("%d tokens: sliding layers hold %d bytes, past their rings' %d", n, sliding, ring)
				}
				if plateau && sliding != ring {
					t.Fatalf("%d tokens: sliding layers left their plateau of %d bytes for %d", n, ring, sliding)
				}
				plateau = sliding == ring
			}
			var logits []float32
			at := 0
			for _, n := range tc.schedule {
				logits = l.step(t, [][]int32{prompt[at : at+n]}, []*kvpool.Seq{seq})
				at += n
				check()
			}
			var toks []int32
			for range tc.decode {
				tok := sample.Argmax(logits)
				toks = append(toks, tok)
				logits = l.step(t, [][]int32{{tok}}, []*kvpool.Seq{seq})
				check()
			}
			if !plateau {
				t.Fatalf("after %d tokens the sliding layers never filled their rings", seq.Len())
			}
			want := ringTokens[tc.window]
			if len(want) != tc.decode {
				t.Fatalf("no ring-cache tokens for window %d: got %v", tc.window, toks)
			}
			if !slices.Equal(toks, want) {
				t.Errorf("greedy tokens\n got  %v\n ring %v", toks, want)
			}
			var n int
			var held int64
			l.th.Do(func() {
				n = seq.Len()
				seq.Free()
				held = l.st.Pool.HeldBytes()
			})
			_, full := seqBytes(l.cfg, n)
			t.Logf("%d tokens (window %d): sliding layers %d bytes (%d blocks each), global %d; %d greedy tokens compared",
				n, window, ring, kvpool.RingBlocks(window), full, tc.decode)
			if held != 0 {
				t.Fatalf("after Free the pool holds %d bytes", held)
			}
		})
	}
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
		c := l.newSeq(t)
		var logits [][]float32
		at := 0
		for _, n := range schedule {
			out := l.step(t, [][]int32{prompt[at : at+n]}, []*kvpool.Seq{c})
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
			logits = append(logits, l.step(t, [][]int32{{tok}}, []*kvpool.Seq{c}))
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
