package mlx

import (
	"math"
	"testing"
)

// TestSwiGLUCompiledMatchesOps checks the compiled SwiGLU (the GPU's path)
// against SiLU(g) * u computed op by op, for two shapes (its trace is
// shapeless), and that it fuses into one primitive.
func TestSwiGLUCompiledMatchesOps(t *testing.T) {
	onThread(t, func(s Stream) {
		f := NewFrame(s)
		defer f.Free()
		for _, n := range []int{3, 257} {
			gs, us := make([]float32, 2*n), make([]float32, 2*n)
			for i := range gs {
				gs[i] = float32(math.Sin(float64(i)*0.7)) * 4
				us[i] = float32(math.Cos(float64(i)*0.3)) * 2
			}
			g, u := f.Float32s(gs, 2, n), f.Float32s(us, 2, n)
			fused := f.swigluCompiled(g, u)
			counts, err := GraphPrimitives(fused)
			if err != nil {
				t.Fatal(err)
			}
			if len(counts) != 1 {
				t.Errorf("n=%d: compiled SwiGLU runs %v, want one fused primitive", n, counts)
			}
			got := f.ToFloat32s(fused)
			want := f.ToFloat32s(f.Multiply(f.SiLU(g), u))
			if err := f.Err(); err != nil {
				t.Fatal(err)
			}
			for i := range want {
				if d := math.Abs(float64(got[i] - want[i])); d > 1e-6*(1+math.Abs(float64(want[i]))) {
					t.Fatalf("n=%d: [%d] = %v, want %v", n, i, got[i], want[i])
				}
			}
		}
	})
}
