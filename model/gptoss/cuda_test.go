package gptoss

import (
	"math"
	"testing"

	"github.com/goprovider/provider/kvpool"
	"github.com/goprovider/provider/mlx"
	"github.com/goprovider/provider/sample"
)

// TestExpertKernelSameTokensCUDA decodes the fixture's prompts together
// greedily on a GPU, in the MXFP4 layouts, in float32 and bfloat16, once
// with the experts through MLX's gather_qmm and once through the MXFP4
// expert kernel (mlx.SetGatherFP4), the prompts' prefill included (their
// pairs fit the kernel). The logits of every step must be close, and a
// row's tokens the same until a step whose two choices all but tie.
func TestExpertKernelSameTokensCUDA(t *testing.T) {
	probe := mlx.NewThread()
	var ok bool
	var err error
	probe.Do(func() { ok, err = mlx.CUDAAvailable() })
	probe.Close()
	if err != nil || !ok {
		t.Skipf("NEEDS A CUDA DEVICE (%v): the MXFP4 expert kernel is untested here", err)
	}
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
			var logits [2][][]float32 // [run][step] all rows' logits
			for i, on := range []bool{false, true} {
				was := mlx.SetGatherFP4(on)
				seqs := make([]*kvpool.Seq, len(fx.Prompts))
				for r := range seqs {
					seqs[r] = l.newSeq(t)
				}
				next := fx.Prompts
				tokens[i] = make([][]int32, len(fx.Prompts))
				for range steps {
					out := l.step(t, next, seqs)
					logits[i] = append(logits[i], out)
					next = make([][]int32, len(fx.Prompts))
					for r := range next {
						tok := sample.Argmax(out[r*l.cfg.Vocab : (r+1)*l.cfg.Vocab])
						tokens[i][r] = append(tokens[i][r], tok)
						next[r] = []int32{tok}
					}
				}
				mlx.SetGatherFP4(was)
			}
			worst, scale := 0.0, 0.0
			for s := range logits[0] {
				for j := range logits[0][s] {
					worst = math.Max(worst, math.Abs(float64(logits[0][s][j]-logits[1][s][j])))
					scale = math.Max(scale, math.Abs(float64(logits[0][s][j])))
				}
			}
			t.Logf("max |logit difference| %.3g of max |logit| %.3g", worst, scale)
			if worst > c.tol*scale {
				t.Errorf("logits differ by up to %.3g (max |logit| %.3g)", worst, scale)
			}
			vocab := l.cfg.Vocab
			for r := range fx.Prompts {
				for s, tok := range tokens[0][r] {
					other := tokens[1][r][s]
					if tok == other {
						continue
					}
					row := logits[0][s][r*vocab : (r+1)*vocab]
					if gap := float64(row[tok] - row[other]); gap > 2*worst {
						t.Errorf("row %d step %d: token %d through gather_qmm, %d through the kernel (gap %.3g)", r, s, tok, other, gap)
					}
					break // the runs part at a near-tie
				}
			}
		})
	}
}
