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

// TestSwiGLUCPU checks the fused CPU SwiGLU against SiLU(g) * u computed by
// MLX's ops, in float64 terms, over a wide range of gates (saturating
// both ways), lengths that leave every vector tail, a strided view, and
// sizes that split across threads; and that an element's value does not
// depend on the array it sits in.
func TestSwiGLUCPU(t *testing.T) {
	onThread(t, func(s Stream) {
		f := NewFrame(s)
		defer f.Free()
		for _, n := range []int{1, 15, 17, 1536, 70001} {
			gs, us := make([]float32, 2*n), make([]float32, 2*n)
			for i := range gs {
				gs[i] = float32(math.Sin(float64(i)*0.7)) * float32(1+i%40)
				us[i] = float32(math.Cos(float64(i)*0.3)) * 2
			}
			gs[0], us[0] = -200, 1
			g, u := f.Float32s(gs, 2, n), f.Float32s(us, 2, n)
			got := f.ToFloat32s(f.SwiGLU(g, u))
			if err := f.Err(); err != nil {
				t.Fatal(err)
			}
			for i := range gs {
				x := float64(gs[i])
				want := x / (1 + math.Exp(-x)) * float64(us[i])
				if d := math.Abs(float64(got[i]) - want); d > 4e-7*(1+math.Abs(want)) {
					t.Fatalf("n=%d: [%d] g=%v u=%v: %v, want %v", n, i, gs[i], us[i], got[i], want)
				}
			}
			// Row 1 alone, as a strided slice of the pair, gives the same floats.
			row := f.ToFloat32s(f.SwiGLU(f.Slice(g, []int{1, 0}, []int{2, n}), f.Slice(u, []int{1, 0}, []int{2, n})))
			for i := range row {
				if row[i] != got[n+i] {
					t.Fatalf("n=%d: element %d of row 1 is %v alone, %v in the pair", n, i, row[i], got[n+i])
				}
			}
		}
	})
}

// TestClampedSwiGLUCompiledMatchesOps checks gpt-oss's compiled gate (the
// GPU's path) against its ops, bit for bit, in float32, bfloat16 and
// float16, on values that cross both clamps, for two shapes and two
// (alpha, limit) pairs, and that it fuses into one primitive.
func TestClampedSwiGLUCompiledMatchesOps(t *testing.T) {
	onThread(t, func(s Stream) {
		f := NewFrame(s)
		defer f.Free()
		for _, c := range []struct{ alpha, limit float32 }{{1.702, 7}, {1, 2.5}} {
			for _, dt := range []Dtype{Float32, BFloat16, Float16} {
				for _, n := range []int{3, 257} {
					gs, us := make([]float32, 2*n), make([]float32, 2*n)
					for i := range gs {
						gs[i] = float32(math.Sin(float64(i)*0.7)) * 12
						us[i] = float32(math.Cos(float64(i)*0.3)) * 11
					}
					g, u := f.AsType(f.Float32s(gs, 2, n), dt), f.AsType(f.Float32s(us, 2, n), dt)
					fused := f.clampedSwiGLUCompiled(g, u, c.alpha, c.limit)
					counts, err := GraphPrimitives(fused)
					if err != nil {
						t.Fatal(err)
					}
					// The inputs' conversions are the test's own.
					delete(counts, "AsType")
					if len(counts) != 1 {
						t.Errorf("%v n=%d: compiled gate runs %v, want one fused primitive", dt, n, counts)
					}
					got := f.ToFloat32s(f.AsType(fused, Float32))
					want := f.ToFloat32s(f.AsType(f.clampedSwiGLUOps(g, u, c.alpha, c.limit), Float32))
					if err := f.Err(); err != nil {
						t.Fatal(err)
					}
					for i := range want {
						if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
							t.Fatalf("%+v %v n=%d: [%d] = %v, want %v", c, dt, n, i, got[i], want[i])
						}
					}
				}
			}
		}
	})
}
