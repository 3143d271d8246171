package mlx

import (
	"math"
	"testing"
)

// TestEvalStepwiseMatchesEval evaluates one graph (shared inputs, a
// multi-output split, a reduction) with EvalStepwise and a copy of it with
// Eval: the same values, bit for bit.
func TestEvalStepwiseMatchesEval(t *testing.T) {
	onThread(t, func(s Stream) {
		f := NewFrame(s)
		defer f.Free()
		vals := make([]float32, 6*8)
		for i := range vals {
			vals[i] = float32(math.Sin(float64(i) * 0.37))
		}
		build := func() Array {
			x := f.Float32s(vals, 6, 8)
			h := f.MatMul(x, f.Transpose(x, 1, 0))
			a := f.Exp(f.Multiply(h, f.Scalar(0.1)))
			return f.Add(f.Sum(a, 1, true), f.Sqrt(f.Square(h)))
		}
		stepwise, whole := build(), build()
		if err := f.EvalStepwise(stepwise); err != nil {
			t.Fatal(err)
		}
		got, want := f.ToFloat32s(stepwise), f.ToFloat32s(whole)
		if err := f.Err(); err != nil {
			t.Fatal(err)
		}
		if len(got) != 36 || len(got) != len(want) {
			t.Fatalf("%d and %d values, want 36", len(got), len(want))
		}
		for i := range want {
			if got[i] != want[i] {
				t.Fatalf("[%d] = %v stepwise, %v at once", i, got[i], want[i])
			}
		}
	})
}
