package gptoss

import (
	"fmt"
	"path/filepath"
	"slices"
	"testing"

	"github.com/goprovider/provider/kvpool"
	"github.com/goprovider/provider/mlx"
	"github.com/goprovider/provider/model"
	"github.com/goprovider/provider/sample"
)

// slidingThenFull fails the test unless the config alternates a sliding
// layer (first) and a full-attention one, as the fixture's two layers do:
// the pool's groups are then [sliding, full].
func slidingThenFull(t *testing.T, cfg model.Config) {
	t.Helper()
	if len(cfg.Kinds) != 2 || cfg.Kinds[0].Window <= 0 || cfg.Kinds[1].Window != 0 {
		t.Fatalf("layer kinds %+v: want a sliding layer, then a full one", cfg.Kinds)
	}
}

// longTokens is n token ids of the fixture's byte vocabulary, in no
// particular pattern.
func longTokens(n int) []int32 {
	out := make([]int32, n)
	x := uint32(12345)
	for i := range out {
		x = x*1664525 + 1013904223
		out[i] = int32(x>>16) % 256
	}
	return out
}

// TestPoolIsBounded checks what a sequence holds in the pool as it grows
// far past the sliding window (the fixture's 8 and gpt-oss's 128): the
// sliding layer keeps kvpool.RingBlocks(window) = 2 blocks however long
// the sequence, the full-attention layer one block per started
// kvpool.BlockTokens tokens, and Bytes reports exactly those blocks.
func TestPoolIsBounded(t *testing.T) {
	for _, w := range []int{8, 128} {
		t.Run(fmt.Sprint("window", w), func(t *testing.T) {
			l := load(t, "bf16", mlx.Float32, withWindow(w))
			slidingThenFull(t, l.cfg)
			ring := kvpool.RingBlocks(w)
			if ring != 2 {
				t.Fatalf("RingBlocks(%d) = %d, want 2", w, ring)
			}
			k := l.cfg.Kinds[0]
			blockBytes := int64(kvpool.BlockTokens * 2 * k.KVHeads * k.HeadDim * 4) // one layer's keys and values, float32
			seq := l.newSeq(t)
			toks := longTokens(1300)
			at := 0
			// Chunks that end on, just before and just past block
			// boundaries, then single-token decode steps.
			chunks := []int{1, 99, 156, 1, 254, 1, 1, 487, 250}
			for range 50 {
				chunks = append(chunks, 1)
			}
			maxSliding := 0
			for _, n := range chunks {
				l.step(t, [][]int32{toks[at : at+n]}, []*kvpool.Seq{seq})
				at += n
				if seq.Len() != at {
					t.Fatalf("sequence holds %d tokens after %d were fed", seq.Len(), at)
				}
				started := (at + kvpool.BlockTokens - 1) / kvpool.BlockTokens
				want := []int{min(started, ring), started}
				if got := seq.Blocks(); !slices.Equal(got, want) {
					t.Errorf("after %d tokens: blocks [sliding full] %v, want %v", at, got, want)
				}
				if got, want := seq.Bytes(), int64(want[0]+want[1])*blockBytes; got != want {
					t.Errorf("after %d tokens: Bytes %d, want %d", at, got, want)
				}
				if got := l.st.Pool.HeldBytes(); got != seq.Bytes() {
					t.Errorf("after %d tokens: the pool holds %d bytes, the only sequence %d", at, got, seq.Bytes())
				}
				maxSliding = max(maxSliding, seq.Blocks()[0])
			}
			if at != 1300 || maxSliding != ring || seq.Blocks()[1] != 6 {
				t.Errorf("after %d tokens: at most %d sliding blocks, %d full", at, maxSliding, seq.Blocks()[1])
			}
			t.Logf("window %d, %d tokens: sliding layer %d blocks (%d bytes), full layer %d blocks",
				w, at, seq.Blocks()[0], int64(seq.Blocks()[0])*blockBytes, seq.Blocks()[1])
			l.th.Do(seq.Free)
			if seq.Bytes() != 0 || seq.Len() != 0 || l.st.Pool.HeldBytes() != 0 {
				t.Errorf("freed sequence holds %d bytes, %d tokens; pool holds %d", seq.Bytes(), seq.Len(), l.st.Pool.HeldBytes())
			}
		})
	}
}

// TestLongDecodeEqualsOnePrefill decodes one token at a time far past the
// sliding window and across several blocks, while the sliding layer lets
// its old blocks go, on both of the pool's attention paths, and checks
// every step's logits across the paths and, at lengths around the block
// boundaries, against one prefill of the same tokens (which holds every
// block while it attends).
func TestLongDecodeEqualsOnePrefill(t *testing.T) {
	const n = 600
	checkAt := []int{8, 9, 127, 128, 129, 255, 256, 257, 383, 511, 512, 513, n}
	for _, w := range []int{8, 128} {
		t.Run(fmt.Sprint("window", w), func(t *testing.T) {
			l := load(t, "hf_mxfp4", mlx.Float32, withWindow(w))
			slidingThenFull(t, l.cfg)
			ops := l.opsStepper(t)
			l.th.Do(func() {
				if !l.st.Pool.Fused() || ops.Pool.Fused() {
					t.Fatalf("pool paths: default fused %v, ops fused %v", l.st.Pool.Fused(), ops.Pool.Fused())
				}
			})
			toks := longTokens(n)
			fused, viaOps := l.newSeq(t), l.newSeqOn(t, ops)
			prefix := 5
			decoded := map[int][]float32{}
			worstPaths := 0.0
			for at := 0; at < n; {
				step := 1
				if at == 0 {
					step = prefix
				}
				row := [][]int32{toks[at : at+step]}
				a := l.step(t, row, []*kvpool.Seq{fused})
				b := l.stepOn(t, ops, row, []*kvpool.Seq{viaOps})
				at += step
				d, i := maxAbsDiff(a, b)
				worstPaths = max(worstPaths, d)
				if d > 1e-4 {
					t.Errorf("%d tokens: fused and MLX-ops logits differ by %.3g at %d", at, d, i)
				}
				if slices.Contains(checkAt, at) {
					decoded[at] = a
				}
			}
			if got := fused.Blocks()[0]; got != kvpool.RingBlocks(w) {
				t.Errorf("after %d tokens the sliding layer holds %d blocks, want %d", n, got, kvpool.RingBlocks(w))
			}
			worst := 0.0
			for _, at := range checkAt {
				whole := l.step(t, [][]int32{toks[:at]}, []*kvpool.Seq{l.newSeq(t)})
				if len(decoded[at]) != l.cfg.Vocab || len(whole) != l.cfg.Vocab {
					t.Fatalf("%d tokens: %d decoded and %d prefill logits for a vocabulary of %d", at, len(decoded[at]), len(whole), l.cfg.Vocab)
				}
				d, i := maxAbsDiff(decoded[at], whole)
				worst = max(worst, d)
				if d > 1e-4 {
					t.Errorf("%d tokens: decoded logits differ from one prefill by %.3g at %d", at, d, i)
				}
			}
			t.Logf("window %d: max |diff| fused vs MLX ops %.3g over %d steps; decode vs one prefill %.3g at %d lengths",
				w, worstPaths, n-prefix+1, worst, len(checkAt))
		})
	}
}

// TestWindowedGenerationMatchesMLXLM runs the fixture's prompts whose
// generation passes the window (one prompt longer than it, one crossing it
// while it decodes) through both of the pool's attention paths: greedy
// must give mlx-lm's tokens and every step's logits stay within the
// float32 tolerance of TestMatchesMLXLM.
func TestWindowedGenerationMatchesMLXLM(t *testing.T) {
	fx := readFixture(t)
	runs := fx.Variants["bf16"].Runs["f32"]
	l := load(t, "bf16", mlx.Float32, nil)
	slidingThenFull(t, l.cfg)
	w := l.cfg.Kinds[0].Window
	ops := l.opsStepper(t)
	for name, st := range map[string]*model.Stepper{"fused": l.st, "ops": ops} {
		for i, p := range fx.Prompts {
			ref := runs[i]
			if len(p)+len(ref.Tokens) <= w {
				continue
			}
			t.Run(fmt.Sprintf("%s/prompt%d", name, i), func(t *testing.T) {
				want := readF32(t, filepath.Join(refDir, ref.Logits))
				vocab := l.cfg.Vocab
				seq := l.newSeqOn(t, st)
				next, worst := p, 0.0
				var got []int32
				for s := range ref.Tokens {
					logits := l.stepOn(t, st, [][]int32{next}, []*kvpool.Seq{seq})
					d, at := maxAbsDiff(logits, want[s*vocab:(s+1)*vocab])
					worst = max(worst, d)
					if d > 1e-4 {
						t.Errorf("step %d (%d tokens): max |logit diff| %.3g at %d", s, seq.Len(), d, at)
					}
					tok := sample.Argmax(logits)
					got = append(got, tok)
					next = []int32{tok}
				}
				if !slices.Equal(got, ref.Tokens) {
					t.Errorf("greedy %v, mlx-lm %v", got, ref.Tokens)
				}
				t.Logf("%d prompt tokens, window %d: %d tokens as mlx-lm's; max |logit diff| %.3g", len(p), w, len(got), worst)
			})
		}
	}
}

// TestWindowSizeIsObservable shows that the long prompt pins the window:
// attending over one key more or one fewer than the window mlx-lm ran
// with moves the logits far past the tolerance the right window meets.
func TestWindowSizeIsObservable(t *testing.T) {
	fx := readFixture(t)
	ref := fx.Variants["bf16"].Runs["f32"][1]
	want := readF32(t, filepath.Join(refDir, ref.Logits))
	for _, w := range []int{7, 9} {
		l := load(t, "bf16", mlx.Float32, withWindow(w))
		got := l.step(t, [][]int32{fx.Prompts[1]}, []*kvpool.Seq{l.newSeq(t)})
		d, _ := maxAbsDiff(got, want[:l.cfg.Vocab])
		if d < 1e-2 {
			t.Errorf("window %d: max |logit diff| %.3g from mlx-lm's window 8", w, d)
		}
		t.Logf("window %d: max |logit diff| from mlx-lm's (window 8) %.3g", w, d)
	}
}
