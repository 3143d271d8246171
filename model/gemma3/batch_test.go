package gemma3

import (
	"slices"
	"testing"

	"github.com/goprovider/provider/kvpool"
	"github.com/goprovider/provider/sample"
	"github.com/goprovider/provider/tokenizer"
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

// TestBatchedDecodeEqualsAlone decodes rows of different lengths together,
// one of them past the window and one crossing it while decoding, and
// checks that each row's tokens equal those it gets alone, and its logits
// up to float summation order.
func TestBatchedDecodeEqualsAlone(t *testing.T) {
	l := load(t, numerics{}, withWindow(shortWindow))
	var prompts [][]int32
	for _, s := range []string{
		"Hi",
		"The old lighthouse keeper climbed the winding stairs every evening to light the lamp before dark",
		"In the morning the fishermen went down to the harbour and",
	} {
		prompts = append(prompts, l.m.Tokenizer.Encode(s, tokenizer.EncodeOptions{AddSpecial: true}))
	}
	const steps = 6
	if len(prompts[1]) <= shortWindow || len(prompts[2]) >= shortWindow || len(prompts[2])+steps <= shortWindow {
		t.Fatalf("prompt lengths %d, %d, %d do not pass and cross the window %d", len(prompts[0]), len(prompts[1]), len(prompts[2]), shortWindow)
	}
	together, lastTogether := greedy(t, l, prompts, steps)
	for i, p := range prompts {
		alone, lastAlone := greedy(t, l, [][]int32{p}, steps)
		if !slices.Equal(alone[0], together[i]) {
			t.Errorf("row %d (%d prompt tokens): batched %v, alone %v", i, len(p), together[i], alone[0])
		}
		d, at := maxAbsDiff(lastTogether[i], lastAlone[0])
		if d > 1e-4 {
			t.Errorf("row %d: last logits differ by %.3g at %d", i, d, at)
		}
		t.Logf("row %d (%d prompt tokens, window %d): tokens identical, last logits max |diff| %.3g", i, len(p), shortWindow, d)
	}
}
