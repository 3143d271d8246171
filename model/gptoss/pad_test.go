package gptoss

import (
	"math"
	"slices"
	"testing"

	"github.com/goprovider/provider/mlx"
	"github.com/goprovider/provider/model"
)

// TestPaddedExpertsChangeNothing pads every packed expert stack's outputs
// with zero rows (model.Weights.PadExpertOutputs, which serve does on a
// GPU with PROVIDER_GPU_PAD_EXPERTS) and checks that rows decoded alone
// and together, through the unsorted gather (one row) and the sorted one
// (enough routed pairs), give the same tokens and the same logits, bit for
// bit, as the unpadded stacks.
func TestPaddedExpertsChangeNothing(t *testing.T) {
	fx := readFixture(t)
	const steps = 4
	for _, variant := range []string{"hf_mxfp4", "mlx_mxfp4"} {
		t.Run(variant, func(t *testing.T) {
			plain := load(t, variant, mlx.Float32, nil)
			stacks := 0
			pad := func(s mlx.Stream, w *model.Weights) error {
				n, err := w.PadExpertOutputs(s, "gpt_oss", plain.cfg.Layers, 128)
				stacks = n
				return err
			}
			padded := loadWith(t, variant, mlx.Float32, nil, pad)
			if stacks == 0 {
				t.Fatal("no expert stack was padded")
			}
			for _, d := range padded.net.layers[0].moe.down.w.W.Shape()[1:2] {
				if d%128 != 0 || d == plain.cfg.Hidden {
					t.Fatalf("down stack has %d rows after padding to 128 (hidden %d)", d, plain.cfg.Hidden)
				}
			}
			// One row routes fewer pairs than sortAt; all prompts together route more.
			for _, prompts := range [][][]int32{fx.Prompts[:1], fx.Prompts} {
				want, wantLast := greedy(t, plain, prompts, steps)
				got, gotLast := greedy(t, padded, prompts, steps)
				for i := range prompts {
					if !slices.Equal(got[i], want[i]) {
						t.Errorf("%d rows, row %d: padded %v, unpadded %v", len(prompts), i, got[i], want[i])
					}
					if j := firstBitDiff(gotLast[i], wantLast[i]); j >= 0 {
						t.Errorf("%d rows, row %d: logit %d is %v padded, %v unpadded", len(prompts), i, j, gotLast[i][j], wantLast[i][j])
					}
				}
			}
			t.Logf("%s: %d stacks padded; tokens and logits identical", variant, stacks)
		})
	}
}

// firstBitDiff is the first index where a and b differ bit for bit (or
// in length), -1 where they do not.
func firstBitDiff(a, b []float32) int {
	for i := range min(len(a), len(b)) {
		if math.Float32bits(a[i]) != math.Float32bits(b[i]) {
			return i
		}
	}
	if len(a) != len(b) {
		return min(len(a), len(b))
	}
	return -1
}
