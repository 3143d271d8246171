package mlx

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
)

// roundTo rounds v to the nearest float of mant fraction bits whose
// exponent is at least minExp (float16: 10 and -14, bfloat16: 7 and -126),
// ties to even: what a fused multiply-add in that type makes of its exact
// result.
func roundTo(v float64, mant, minExp int) float64 {
	if v == 0 {
		return 0
	}
	_, e := math.Frexp(v) // |v| in [2^(e-1), 2^e)
	ulp := math.Ldexp(1, max(e-1, minExp)-mant)
	return math.RoundToEven(v/ulp) * ulp
}

// TestAffineMmaCUDA checks the affine tensor-core kernel
// (PROVIDER_GPU_QMMA) against float64 products of the same packed weights,
// each weight dequantized as the kernel does it (s * q + b rounded once to
// x's type): float16 and bfloat16, groups of 32, 64 and 128, outputs not a
// multiple of 16, a block whose last warp has no chunks of its own,
// activations at an address the kernel cannot load as vectors, 1 to 32
// rows (one to four tiles of 8), activations of three dimensions, and
// other work shapes (with and without a warp's next stage loaded ahead). A
// row's outputs must be the same floats alone and in every batch.
func TestAffineMmaCUDA(t *testing.T) {
	onCUDA(t, func(s Stream) {
		rng := rand.New(rand.NewPCG(7, 8))
		const rows = 32
		for _, c := range []struct {
			n, k, group int
			x           Dtype
			mant, exp   int     // x's type: fraction bits, least exponent
			tol         float64 // of |float64|: the output's rounding to x's type
		}{
			{301, 4096, 64, Float16, 10, -14, 1e-3},
			{64, 1152, 128, BFloat16, 7, -126, 8e-3}, // 9 chunks: the fourth warp of 4 has none
			{40, 384, 32, Float16, 10, -14, 1e-3},
		} {
			name := fmt.Sprintf("n%d_k%d_g%d_%v", c.n, c.k, c.group, c.x)
			func() {
				f, cf, free := gpuAndCPUFrames(s)
				defer free()
				w, sc, bi, x, xOff := affineInputs(t, f, cf, rng, c.n, c.k, c.group, 4, c.x, c.x, rows, name)
				round := func(v float64) float64 { return roundTo(v, c.mant, c.exp) }
				// The matrix-vector kernel off: the product's one custom
				// kernel is the tensor-core kernel.
				setGemvEnv(t, "PROVIDER_GPU_QMV", "0")
				setGemvEnv(t, "PROVIDER_GPU_QMMA_ROWS", "32")
				run := func(x Array, m int, shape string) []float32 {
					setGemvEnv(t, "PROVIDER_GPU_QMMA", shape)
					return kernelProduct(t, f, x, m, w, sc, bi, c.group, 4, fmt.Sprintf("%s, %d rows, shape %s", name, m, shape))
				}
				worst := 0.0
				check := func(got []float32, ref, mag []float64, what string) {
					for i, g := range got {
						err := math.Abs(float64(g) - ref[i])
						if err > c.tol*math.Abs(ref[i])+5e-5*mag[i] {
							t.Fatalf("%s, %s: output %d = %v, float64 %v (sum of |products| %v)", name, what, i, g, ref[i], mag[i])
						}
						worst = math.Max(worst, err/(mag[i]+1e-30))
					}
				}
				ref, mag := affineReference(f, x, w, sc, bi, c.n, c.k, c.group, 4, round)
				refOff, magOff := affineReference(f, xOff, w, sc, bi, c.n, c.k, c.group, 4, round)
				batch := run(x, rows, "1")
				check(batch, ref, mag, "32 rows")
				check(run(xOff, rows, "1"), refOff, magOff, "32 rows off 16-byte alignment")
				for _, m := range []int{1, 3, 8, 9, 17} {
					got := run(x, m, "1")
					for i, g := range got {
						if g != batch[i] {
							t.Fatalf("%s: %d rows: output %d = %v, %v in a batch of %d", name, m, i, g, batch[i], rows)
						}
					}
				}
				// Activations of three dimensions, [1, 9, K] as the model's
				// are, take the kernel as they are (the one Reshape is the
				// test's own) and give the same floats.
				setGemvEnv(t, "PROVIDER_GPU_QMMA", "1")
				y3 := f.AffineLinear(f.Reshape(f.Slice(x, []int{0, 0}, []int{9, c.k}), 1, 9, c.k), w, sc, bi, c.group, 4)
				got3, counts := kernelFloats(t, f, y3, name+": [1, 9, K]")
				if counts["Reshape"] != 1 {
					t.Fatalf("%s: [1, 9, K]: %v, want the test's one Reshape", name, counts)
				}
				if len(got3) != 9*c.n {
					t.Fatalf("%s: [1, 9, K]: %d outputs, want %d", name, len(got3), 9*c.n)
				}
				for i, g := range got3 {
					if g != batch[i] {
						t.Fatalf("%s: [1, 9, K]: output %d = %v, %v in a batch of %d", name, i, g, batch[i], rows)
					}
				}
				// Other splits of K sum in another order: each is checked
				// against float64, not against the default's floats.
				for _, shape := range []string{"1:1", "3:2:1", "8:8", "4:2:1"} {
					check(run(x, 8, shape), ref[:8*c.n], mag[:8*c.n], "shape "+shape)
				}
				t.Logf("%s: max |kernel - float64| / sum |products| = %.2g", name, worst)
			}()
		}
		// Where the kernel does not fit (float32 activations, 8 bits, more
		// rows than PROVIDER_GPU_QMMA_ROWS), the product is another.
		f := NewFrame(s)
		defer f.Free()
		setGemvEnv(t, "PROVIDER_GPU_QMMA", "1")
		setGemvEnv(t, "PROVIDER_GPU_QMMA_ROWS", "")
		for _, c := range []struct {
			m, bits int
			x       Dtype
		}{{1, 4, Float32}, {1, 8, Float16}, {33, 4, Float16}} {
			w, sc, bi := quantized(f, rng, 64, 256, 64, c.bits, Float16)
			y := f.AffineLinear(f.AsType(randomRows(f, rng, c.m, 256), c.x), w, sc, bi, 64, c.bits)
			counts, err := GraphPrimitives(y)
			if err != nil {
				t.Fatal(err)
			}
			if counts["CustomKernel"] != 0 {
				t.Fatalf("%d rows, %d bits, %v: a custom kernel (%v); want MLX's matmul", c.m, c.bits, c.x, counts)
			}
		}
	})
}
