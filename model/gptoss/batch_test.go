package gptoss

import (
	"slices"
	"testing"

	"github.com/goprovider/provider/kvpool"
	"github.com/goprovider/provider/mlx"
	"github.com/goprovider/provider/sample"
)

// greedy runs rows together: one Forward per step over every row, prompts
// of different lengths in the first step, then batched single-token
// decode. It returns each row's tokens and the logits of its last step.
func greedy(tb testing.TB, l *loaded, prompts [][]int32, steps int) ([][]int32, [][]float32) {
	tb.Helper()
	seqs := make([]*kvpool.Seq, len(prompts))
	for i := range seqs {
		seqs[i] = l.newSeq(tb)
	}
	out := make([][]int32, len(prompts))
	last := make([][]float32, len(prompts))
	next, vocab := prompts, l.cfg.Vocab
	for range steps {
		logits := l.step(tb, next, seqs)
		next = make([][]int32, len(prompts))
		for i := range prompts {
			last[i] = logits[i*vocab : (i+1)*vocab]
			tok := sample.Argmax(last[i])
			out[i] = append(out[i], tok)
			next[i] = []int32{tok}
		}
	}
	return out, last
}

// TestBatchedDecodeEqualsAlone decodes the fixture's prompts together (one
// past the window, one crossing it while decoding), with dense and with
// MXFP4 experts, and checks that each row's tokens equal those it gets
// alone, and its logits up to float summation order.
func TestBatchedDecodeEqualsAlone(t *testing.T) {
	fx := readFixture(t)
	const steps = 6
	window := 8
	if len(fx.Prompts[0]) >= window || len(fx.Prompts[0])+steps <= window || len(fx.Prompts[1]) <= window {
		t.Fatalf("prompt lengths %d and %d do not cross and pass the window %d", len(fx.Prompts[0]), len(fx.Prompts[1]), window)
	}
	for _, variant := range []string{"bf16", "hf_mxfp4"} {
		t.Run(variant, func(t *testing.T) {
			l := load(t, variant, mlx.Float32, nil)
			together, lastTogether := greedy(t, l, fx.Prompts, steps)
			for i, p := range fx.Prompts {
				alone, lastAlone := greedy(t, l, [][]int32{p}, steps)
				if !slices.Equal(alone[0], together[i]) {
					t.Errorf("row %d (%d prompt tokens): batched %v, alone %v", i, len(p), together[i], alone[0])
				}
				d, at := maxAbsDiff(lastTogether[i], lastAlone[0])
				if d > 1e-4 {
					t.Errorf("row %d: last logits differ by %.3g at %d", i, d, at)
				}
				t.Logf("row %d (%d prompt tokens): tokens identical, last logits max |diff| %.3g", i, len(p), d)
			}
		})
	}
}

// TestChunkedPrefillEqualsWhole feeds the long prompt in chunks whose
// queries reach back past the sliding window into earlier chunks, and
// checks the logits and the greedy continuation against one whole prefill.
func TestChunkedPrefillEqualsWhole(t *testing.T) {
	fx := readFixture(t)
	p := fx.Prompts[1]
	l := load(t, "hf_mxfp4", mlx.Float32, nil)
	run := func(chunks []int) ([]float32, []int32) {
		c := l.newSeq(t)
		var logits []float32
		at := 0
		for _, n := range chunks {
			logits = l.step(t, [][]int32{p[at : at+n]}, []*kvpool.Seq{c})
			at += n
		}
		if at != len(p) {
			t.Fatalf("chunks %v cover %d of %d tokens", chunks, at, len(p))
		}
		first := logits
		var toks []int32
		for range 4 {
			tok := sample.Argmax(logits)
			toks = append(toks, tok)
			logits = l.step(t, [][]int32{{tok}}, []*kvpool.Seq{c})
		}
		return first, toks
	}
	whole, wantToks := run([]int{len(p)})
	for _, chunks := range [][]int{{3, 6, 4, 7}, {9, 11}, {1, 1, 1, 1, 1, 1, 1, 1, 1, 11}} {
		got, toks := run(chunks)
		d, at := maxAbsDiff(got, whole)
		if d > 1e-4 {
			t.Errorf("chunks %v: logits differ from one prefill by %.3g at %d", chunks, d, at)
		}
		if !slices.Equal(toks, wantToks) {
			t.Errorf("chunks %v: continuation %v, one prefill %v", chunks, toks, wantToks)
		}
		t.Logf("chunks %v: max |diff| %.3g from one prefill", chunks, d)
	}
}
