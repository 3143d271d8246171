package mlx

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
)

// quantized builds a seeded random [n, k] weight, quantized by MLX itself,
// with its scales and biases cast to scaleType.
func quantized(f *Frame, rng *rand.Rand, n, k, group, bits int, scaleType Dtype) (w, scales, biases Array) {
	data := make([]float32, n*k)
	for i := range data {
		data[i] = float32(rng.NormFloat64() * 0.05)
	}
	w, scales, biases = f.Quantize(f.Float32s(data, n, k), group, bits, "affine")
	return w, f.AsType(scales, scaleType), f.AsType(biases, scaleType)
}

func randomRows(f *Frame, rng *rand.Rand, m, k int) Array {
	data := make([]float32, m*k)
	for i := range data {
		data[i] = float32(rng.NormFloat64())
	}
	return f.Float32s(data, m, k)
}

func TestAffineLinearMatchesQuantizedMatMul(t *testing.T) {
	onThread(t, func(_ Stream) {
		s := CPU()
		defer s.Free()
		rng := rand.New(rand.NewPCG(1, 2))
		for _, c := range []struct {
			m, n, k, group, bits int
			scales               Dtype
		}{
			{1, 37, 64, 32, 4, Float32},
			{3, 64, 96, 32, 4, Float16},
			{4, 33, 128, 64, 4, BFloat16},
			{5, 48, 64, 32, 8, Float16},
			{9, 20, 256, 128, 8, Float32},
			{17, 70, 192, 64, 4, Float16},
		} {
			// Subtests would leave the MLX thread: cases are named instead.
			name := fmt.Sprintf("m%d_n%d_k%d_g%d_b%d_%v", c.m, c.n, c.k, c.group, c.bits, c.scales)
			func() {
				f := NewFrame(s)
				defer f.Free()
				w, sc, bi := quantized(f, rng, c.n, c.k, c.group, c.bits, c.scales)
				x := randomRows(f, rng, c.m, c.k)
				got := f.ToFloat32s(f.AffineLinear(x, w, sc, bi, c.group, c.bits))
				want := f.ToFloat32s(f.QuantizedMatMul(x, w, sc, bi, true, c.group, c.bits, "affine"))
				if err := f.Err(); err != nil {
					t.Fatalf("%s: %v", name, err)
				}
				if len(got) != c.m*c.n {
					t.Fatalf("%s: got %d values, want %d", name, len(got), c.m*c.n)
				}
				worst := 0.0
				for i := range want {
					worst = math.Max(worst, math.Abs(float64(got[i]-want[i])))
				}
				// Both sum k products of magnitude ~0.05: float32 rounding
				// of the two summation orders differs by ~1e-6 each.
				if worst > 1e-5 {
					t.Fatalf("%s: max |fast - mlx| = %g, want <= 1e-5", name, worst)
				}
				t.Logf("%s: max |fast - mlx| = %.2g", name, worst)
			}()
		}
	})
}

// TestAffineLinearBatchInvariant checks that a row's output is the same
// float alone, inside batches of every size (which take the register path
// up to four rows and the buffered path beyond) and under any thread count.
func TestAffineLinearBatchInvariant(t *testing.T) {
	onThread(t, func(_ Stream) {
		s := CPU()
		defer s.Free()
		defer SetCPUThreads(0)
		rng := rand.New(rand.NewPCG(3, 4))
		f := NewFrame(s)
		defer f.Free()
		const n, k, rows = 53, 160, 11
		w, sc, bi := quantized(f, rng, n, k, 32, 4, Float16)
		x := randomRows(f, rng, rows, k)
		alone := make([][]float32, rows)
		for r := range rows {
			alone[r] = f.ToFloat32s(f.AffineLinear(f.Slice(x, []int{r, 0}, []int{r + 1, k}), w, sc, bi, 32, 4))
		}
		for _, threads := range []int{1, 2, 3} {
			SetCPUThreads(threads)
			for m := 1; m <= rows; m++ {
				got := f.ToFloat32s(f.AffineLinear(f.Slice(x, []int{0, 0}, []int{m, k}), w, sc, bi, 32, 4))
				if err := f.Err(); err != nil {
					t.Fatal(err)
				}
				for r := range m {
					for j := range n {
						if got[r*n+j] != alone[r][j] {
							t.Fatalf("threads %d, batch %d: row %d col %d = %v, alone %v", threads, m, r, j, got[r*n+j], alone[r][j])
						}
					}
				}
			}
		}
	})
}

func TestAffineLinearFallsBackOffTheKernel(t *testing.T) {
	onThread(t, func(_ Stream) {
		s := CPU()
		defer s.Free()
		rng := rand.New(rand.NewPCG(5, 6))
		f := NewFrame(s)
		defer f.Free()
		// 3-bit weights are not the kernel's: MLX's own op computes them.
		w, sc, bi := quantized(f, rng, 8, 64, 32, 3, Float32)
		x := randomRows(f, rng, 2, 64)
		got := f.ToFloat32s(f.AffineLinear(x, w, sc, bi, 32, 3))
		want := f.ToFloat32s(f.QuantizedMatMul(x, w, sc, bi, true, 32, 3, "affine"))
		if err := f.Err(); err != nil {
			t.Fatal(err)
		}
		for i := range want {
			if got[i] != want[i] {
				t.Fatalf("fallback [%d] = %v, want %v", i, got[i], want[i])
			}
		}
		// A shape mismatch is an error, not a crash.
		bad := f.AffineLinear(randomRows(f, rng, 2, 96), w, sc, bi, 32, 3)
		if bad.Valid() || f.Err() == nil {
			t.Fatal("mismatched input length gave no error")
		}
	})
}

// BenchmarkAffineLinear compares the kernel with MLX's CPU quantized_matmul
// on a SmolLM2-sized MLP matrix (1536x576, 4-bit, groups of 32), by rows.
func BenchmarkAffineLinear(b *testing.B) {
	th := NewThread()
	defer th.Close()
	for _, kernel := range []string{"fast", "mlx"} {
		for _, m := range []int{1, 4, 8, 32, 128} {
			b.Run(fmt.Sprintf("%s/rows=%d", kernel, m), func(b *testing.B) {
				th.Do(func() {
					s := CPU()
					defer s.Free()
					f := NewFrame(s)
					defer f.Free()
					rng := rand.New(rand.NewPCG(7, 8))
					w, sc, bi := quantized(f, rng, 1536, 576, 32, 4, Float16)
					x := randomRows(f, rng, m, 576)
					if err := f.Eval(w, sc, bi, x); err != nil {
						b.Fatal(err)
					}
					b.ResetTimer()
					for range b.N {
						g := NewFrame(s)
						var y Array
						if kernel == "fast" {
							y = g.AffineLinear(x, w, sc, bi, 32, 4)
						} else {
							y = g.QuantizedMatMul(x, w, sc, bi, true, 32, 4, "affine")
						}
						if err := g.Eval(y); err != nil {
							b.Fatal(err)
						}
						g.Free()
					}
					b.ReportMetric(float64(b.Elapsed().Microseconds())/float64(b.N)/float64(m), "us/row")
				})
			})
		}
	}
}
