package gptoss

import (
	"math"
	"testing"

	"github.com/goprovider/provider/kvpool"
	"github.com/goprovider/provider/mlx"
	"github.com/goprovider/provider/model"
	"github.com/goprovider/provider/sample"
)

// skipWithoutCUDA skips t, loudly, where no CUDA device is present.
func skipWithoutCUDA(t *testing.T, what string) {
	t.Helper()
	probe := mlx.NewThread()
	var ok bool
	var err error
	probe.Do(func() { ok, err = mlx.CUDAAvailable() })
	probe.Close()
	if err != nil || !ok {
		t.Skipf("NEEDS A CUDA DEVICE (%v): %s is untested here", err, what)
	}
}

// greedyRun decodes the prompts together greedily for steps steps, the
// prompts' prefill included, and returns each row's tokens and every
// step's logits (all rows').
func greedyRun(t *testing.T, l *loaded, prompts [][]int32, steps int) (tokens [][]int32, logits [][]float32) {
	t.Helper()
	seqs := make([]*kvpool.Seq, len(prompts))
	for r := range seqs {
		seqs[r] = l.newSeq(t)
	}
	next := prompts
	tokens = make([][]int32, len(prompts))
	for range steps {
		out := l.step(t, next, seqs)
		logits = append(logits, out)
		next = make([][]int32, len(prompts))
		for r := range next {
			tok := sample.Argmax(out[r*l.cfg.Vocab : (r+1)*l.cfg.Vocab])
			tokens[r] = append(tokens[r], tok)
			next[r] = []int32{tok}
		}
	}
	return tokens, logits
}

// sameGreedy checks two greedy runs of the same rows (a, b: greedyRun's
// results; names say what each ran through): every step's logits within
// tol of the largest |logit|, and a row's tokens the same until a step
// whose two choices all but tie (a gap of at most twice the largest
// logit difference).
func sameGreedy(t *testing.T, vocab int, tol float64, names [2]string, tokens [2][][]int32, logits [2][][]float32) {
	t.Helper()
	worst, scale := 0.0, 0.0
	for s := range logits[0] {
		for j := range logits[0][s] {
			worst = math.Max(worst, math.Abs(float64(logits[0][s][j]-logits[1][s][j])))
			scale = math.Max(scale, math.Abs(float64(logits[0][s][j])))
		}
	}
	t.Logf("max |logit difference| %.3g of max |logit| %.3g", worst, scale)
	if worst > tol*scale {
		t.Errorf("logits differ by up to %.3g (max |logit| %.3g)", worst, scale)
	}
	for r := range tokens[0] {
		for s, tok := range tokens[0][r] {
			other := tokens[1][r][s]
			if tok == other {
				continue
			}
			row := logits[0][s][r*vocab : (r+1)*vocab]
			if gap := float64(row[tok] - row[other]); gap > 2*worst {
				t.Errorf("row %d step %d: token %d through %s, %d through %s (gap %.3g)", r, s, tok, names[0], other, names[1], gap)
			}
			break // the runs part at a near-tie
		}
	}
}

// TestExpertKernelSameTokensCUDA decodes the fixture's prompts together
// greedily on a GPU, in the MXFP4 layouts, in float32 and bfloat16, once
// with the experts through MLX's gather_qmm and once through the MXFP4
// expert kernel (mlx.SetGatherFP4), the prompts' prefill included (their
// pairs fit the kernel). The logits of every step must be close, and a
// row's tokens the same until a step whose two choices all but tie.
func TestExpertKernelSameTokensCUDA(t *testing.T) {
	skipWithoutCUDA(t, "the MXFP4 expert kernel")
	fx := readFixture(t)
	const steps = 10
	for _, c := range []struct {
		variant string
		act     mlx.Dtype
		tol     float64 // of the largest |logit|
	}{
		{"hf_mxfp4", mlx.Float32, 1e-4},
		{"mlx_mxfp4", mlx.Float32, 1e-4},
		{"hf_mxfp4", mlx.BFloat16, 0.05},
	} {
		t.Run(c.variant+"_"+c.act.String(), func(t *testing.T) {
			l := load(t, c.variant, c.act, nil)
			var tokens [2][][]int32
			var logits [2][][]float32
			for i, on := range []bool{false, true} {
				was := mlx.SetGatherFP4(on)
				tokens[i], logits[i] = greedyRun(t, l, fx.Prompts, steps)
				mlx.SetGatherFP4(was)
			}
			sameGreedy(t, l.cfg.Vocab, c.tol, [2]string{"gather_qmm", "the kernel"}, tokens, logits)
		})
	}
}

// apartAndJoined loads a network with load twice, with q/k/v apart
// (PROVIDER_GPU_FUSE=0) and joined (the default on a GPU), checks that
// each is laid out so, and runs run on each in that order (i 0, then 1).
func apartAndJoined(t *testing.T, load func() *loaded, run func(i int, l *loaded)) {
	t.Helper()
	for i, fuse := range []string{"0", "1"} {
		t.Setenv("PROVIDER_GPU_FUSE", fuse)
		l := load()
		if joined := l.net.layers[0].qkv != nil; joined != (i == 1) {
			t.Fatalf("PROVIDER_GPU_FUSE=%s: q/k/v joined %v", fuse, joined)
		}
		run(i, l)
	}
}

// TestFusedQKVSameTokensCUDA decodes the fixture's prompts together
// greedily on a GPU with q/k/v joined at upload (the default there: one
// product, HeadsRoPE's kernel, k and v stored by it where the pool offers)
// and apart (PROVIDER_GPU_FUSE=0), in float32 and bfloat16: close logits,
// and the same tokens until a near-tie.
func TestFusedQKVSameTokensCUDA(t *testing.T) {
	skipWithoutCUDA(t, "gpt-oss's fused q/k/v")
	fx := readFixture(t)
	const steps = 10
	for _, c := range []struct {
		variant string
		act     mlx.Dtype
		tol     float64
	}{
		{"hf_mxfp4", mlx.Float32, 1e-4},
		{"hf_mxfp4", mlx.BFloat16, 0.05},
	} {
		t.Run(c.variant+"_"+c.act.String(), func(t *testing.T) {
			var tokens [2][][]int32
			var logits [2][][]float32
			vocab := 0
			apartAndJoined(t, func() *loaded { return load(t, c.variant, c.act, nil) }, func(i int, l *loaded) {
				tokens[i], logits[i] = greedyRun(t, l, fx.Prompts, steps)
				vocab = l.cfg.Vocab
			})
			sameGreedy(t, vocab, c.tol, [2]string{"q/k/v apart", "q/k/v fused"}, tokens, logits)
		})
	}
}

// TestFusedQKVStoreSameTokensCUDA is TestFusedQKVSameTokensCUDA on
// gpt-oss-20b's heads (64 wide, which the paged decode kernel takes, so
// the q/k/v kernel also writes k and v into the pool) with dummy weights,
// four layers, a sliding window of 8 that the prompts and decoding cross,
// in bfloat16: joined at build (the default on a GPU) and apart
// (PROVIDER_GPU_FUSE=0). A decode step's graph must lose the joined
// layers' scatters into the pool, and the runs must agree as there.
func TestFusedQKVStoreSameTokensCUDA(t *testing.T) {
	skipWithoutCUDA(t, "gpt-oss's fused q/k/v with the pool store")
	prompts := [][]int32{{1, 2, 3, 4, 5}, {6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17}, {18, 19, 20}}
	var tokens [2][][]int32
	var logits [2][][]float32
	var scatters [2]int
	vocab := 0
	build := func() *loaded {
		d := narrow20B(t, 4, 8)
		d.Config.ActDType = mlx.BFloat16
		return start(t, d.Config, func(s mlx.Stream) (*model.Weights, error) { return d.Build(s, 7, nil) })
	}
	apartAndJoined(t, build, func(i int, l *loaded) {
		var counts map[string]int
		var err error
		l.th.Do(func() {
			counts, err = model.DecodeStepPrimitives(l.net, l.s, kvpool.Options{}, prompts[1], 3)
		})
		if err != nil {
			t.Fatal(err)
		}
		total, names := mlx.DescribePrimitives(counts)
		t.Logf("joined %v: one-row step: %d primitives: %s", i == 1, total, names)
		scatters[i] = counts["ScatterAxis"] + counts["Scatter"]
		tokens[i], logits[i] = greedyRun(t, l, prompts, 12)
		vocab = l.cfg.Vocab
	})
	if scatters[1] >= scatters[0] {
		t.Errorf("a decode step scatters %d times joined, %d apart: the q/k/v kernel did not store k and v", scatters[1], scatters[0])
	}
	sameGreedy(t, vocab, 0.05, [2]string{"q/k/v apart", "q/k/v fused"}, tokens, logits)
}
