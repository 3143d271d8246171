package mlx

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"
)

// cudaThread starts an MLX thread with a GPU stream, both closed when the
// test ends, or skips the test, loudly, where MLX has no CUDA device.
func cudaThread(tb testing.TB) (*Thread, Stream) {
	tb.Helper()
	th := NewThread()
	var ok bool
	var err error
	th.Do(func() { ok, err = CUDAAvailable() })
	if err != nil || !ok {
		th.Close()
		if err != nil {
			tb.Fatal(err)
		}
		tb.Skip("NEEDS A CUDA DEVICE: MLX's CUDA backend is not in this build or sees no GPU; this package's CUDA kernels are untested here")
	}
	var s Stream
	th.Do(func() { s, err = GPU() })
	if err != nil {
		th.Close()
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		th.Do(func() { s.Free() })
		th.Close()
	})
	return th, s
}

// onCUDA runs fn on cudaThread's thread and stream.
func onCUDA(tb testing.TB, fn func(s Stream)) {
	tb.Helper()
	th, s := cudaThread(tb)
	th.Do(func() { fn(s) })
}

// gpuAndCPUFrames is a frame on s and one on the CPU (where the affine
// kernels' tests quantize their weights), both freed by free.
func gpuAndCPUFrames(s Stream) (f, cf *Frame, free func()) {
	f = NewFrame(s)
	cpu := CPU()
	cf = NewFrame(cpu)
	return f, cf, func() {
		cf.Free()
		cpu.Free()
		f.Free()
	}
}

// setGemvEnv sets an environment variable of the affine kernel for the
// test and has the next product read it; when the test ends, the variable
// is restored and read again (the reload registered first runs last).
func setGemvEnv(tb testing.TB, key, value string) {
	tb.Helper()
	tb.Cleanup(reloadGemvEnv)
	tb.Setenv(key, value)
	reloadGemvEnv()
}

// affineReference is x @ dequantize(w).T in float64 on the host, from the
// packed values and the scales and biases as the device holds them; round,
// unless nil, rounds each dequantized weight s * q + b.
func affineReference(f *Frame, x, w, scales, biases Array, n, k, group, bits int, round func(float64) float64) (ref, mag []float64) {
	xs := f.ToFloat32s(x)
	raw := f.ToBytes(w)
	sc := f.ToFloat32s(scales)
	bi := f.ToFloat32s(biases)
	m := len(xs) / k
	ref = make([]float64, m*n)
	mag = make([]float64, m*n)
	words := k * bits / 32
	per := 32 / bits
	mask := uint32(1)<<bits - 1
	for j := range n {
		for i := range k {
			word := binary.LittleEndian.Uint32(raw[4*(j*words+i/per):])
			q := float64(word >> (bits * (i % per)) & mask)
			g := j*(k/group) + i/group
			wv := float64(sc[g])*q + float64(bi[g])
			if round != nil {
				wv = round(wv)
			}
			for r := range m {
				p := float64(xs[r*k+i]) * wv
				ref[r*n+j] += p
				mag[r*n+j] += math.Abs(p)
			}
		}
	}
	return ref, mag
}

// affineInputs is a case of an affine kernel's test: random weights [n, k]
// quantized by MLX on the CPU (cf) in bits-bit groups of group, scales and
// biases as scaleType, used by the GPU; and rows rows of activations of
// type xType on f's stream twice, x and xOff, a view that starts 3
// elements into its buffer, off any 16-byte boundary. All are evaluated.
func affineInputs(t *testing.T, f, cf *Frame, rng *rand.Rand, n, k, group, bits int, scaleType, xType Dtype, rows int, name string) (w, scales, biases, x, xOff Array) {
	t.Helper()
	w, scales, biases = quantized(cf, rng, n, k, group, bits, scaleType)
	flat := f.AsType(randomRows(f, rng, 1, rows*k+3), xType)
	x = f.Reshape(f.Slice(flat, []int{0, 0}, []int{1, rows * k}), rows, k)
	xOff = f.Reshape(f.Slice(flat, []int{0, 3}, []int{1, rows*k + 3}), rows, k)
	if err := errors.Join(cf.Eval(w, scales, biases), f.Eval(x, xOff)); err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	return w, scales, biases, x, xOff
}

// kernelProduct is AffineLinear of x's first m rows, which must run as one
// custom kernel (what names the case), as float32s.
func kernelProduct(t *testing.T, f *Frame, x Array, m int, w, scales, biases Array, group, bits int, what string) []float32 {
	t.Helper()
	out, _ := kernelFloats(t, f, f.AffineLinear(f.Slice(x, []int{0, 0}, []int{m, x.Dim(1)}), w, scales, biases, group, bits), what)
	return out
}

// kernelFloats is a product y whose graph must hold one custom kernel (what
// names the case), as float32s, and the primitives its graph held.
func kernelFloats(t *testing.T, f *Frame, y Array, what string) ([]float32, map[string]int) {
	t.Helper()
	counts, err := GraphPrimitives(y)
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	if counts["CustomKernel"] != 1 {
		t.Fatalf("%s: the product did not take the kernel: %v", what, counts)
	}
	out := f.ToFloat32s(y)
	if err := f.Err(); err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	return out, counts
}

// TestAffineGemvCUDA checks the CUDA affine matrix-vector kernel (what
// AffineLinear runs on a GPU for up to 4 rows by default, 8 with
// PROVIDER_GPU_QMV_ROWS) against float64 products of the same packed
// weights: 4 and 8 bits, groups of 32 to 128, half, bfloat and float
// activations, a ragged number of chunks a lane, an odd number of outputs,
// 1, 2, 3 and 8 rows, activations at an address the kernel cannot load as
// vectors, and other work shapes (PROVIDER_GPU_QMV=R:U:W), which must give
// the same floats. A row's outputs must be the same floats alone and in
// every batch, and the default row limit must hold.
func TestAffineGemvCUDA(t *testing.T) {
	onCUDA(t, func(s Stream) {
		rng := rand.New(rand.NewPCG(5, 6))
		for _, c := range []struct {
			n, k, group, bits int
			x, scales         Dtype
			tol               float64
		}{
			{301, 4096, 64, 4, Float16, Float16, 1e-3},
			{64, 1088, 64, 4, BFloat16, BFloat16, 8e-3},
			{77, 1088, 32, 8, Float16, Float16, 1e-3},
			{40, 2048, 128, 4, Float32, Float16, 1e-5},
			{33, 512, 32, 4, Float32, Float32, 1e-5},
			// Few outputs over a long K (down's shape in a 7B).
			{96, 11008, 64, 4, Float16, Float16, 1e-3},
		} {
			name := fmt.Sprintf("n%d_k%d_g%d_b%d_%v_%v", c.n, c.k, c.group, c.bits, c.x, c.scales)
			func() {
				f, cf, free := gpuAndCPUFrames(s)
				defer free()
				w, sc, bi, x, xOff := affineInputs(t, f, cf, rng, c.n, c.k, c.group, c.bits, c.scales, c.x, 8, name)
				ref, mag := affineReference(f, x, w, sc, bi, c.n, c.k, c.group, c.bits, nil)
				refOff, magOff := affineReference(f, xOff, w, sc, bi, c.n, c.k, c.group, c.bits, nil)
				run := func(x Array, m int, shape string) []float32 {
					setGemvEnv(t, "PROVIDER_GPU_QMMA", "0")
					setGemvEnv(t, "PROVIDER_GPU_QMV", shape)
					setGemvEnv(t, "PROVIDER_GPU_QMV_ROWS", "8")
					return kernelProduct(t, f, x, m, w, sc, bi, c.group, c.bits, fmt.Sprintf("%s, %d rows, shape %s", name, m, shape))
				}
				alone := run(x, 8, "1")
				// Under the default row limit four rows take the kernel,
				// five MLX's matmul.
				setGemvEnv(t, "PROVIDER_GPU_QMV_ROWS", "")
				for _, want := range []struct{ rows, kernels int }{{4, 1}, {5, 0}} {
					y := f.AffineLinear(f.Slice(x, []int{0, 0}, []int{want.rows, c.k}), w, sc, bi, c.group, c.bits)
					counts, err := GraphPrimitives(y)
					if err != nil || counts["CustomKernel"] != want.kernels {
						t.Fatalf("%s: %d rows under the default row limit: %d kernels (%v), want %d", name, want.rows, counts["CustomKernel"], err, want.kernels)
					}
				}
				worst := 0.0
				for _, in := range []struct {
					x        Array
					ref, mag []float64
				}{{x, ref, mag}, {xOff, refOff, magOff}} {
					got := run(in.x, 8, "1")
					for i, g := range got {
						err := math.Abs(float64(g) - in.ref[i])
						if err > c.tol*math.Abs(in.ref[i])+1e-5*in.mag[i] {
							t.Fatalf("%s: output %d = %v, float64 %v (sum of |products| %v)", name, i, g, in.ref[i], in.mag[i])
						}
						worst = math.Max(worst, err/(in.mag[i]+1e-30))
					}
				}
				// Each row count and work shape is a kernel MLX compiles on
				// first use: a few, not all.
				for _, m := range []int{1, 2, 3, 8} {
					shapes := []string{"1"}
					if m == 3 {
						shapes = append(shapes, "1:8:2", "3:1:1", "4:2:8")
					}
					for _, shape := range shapes {
						got := run(x, m, shape)
						for i, g := range got {
							if g != alone[i] {
								t.Fatalf("%s: %d rows, shape %s: output %d = %v, %v in a batch of 8 with the default shape", name, m, shape, i, g, alone[i])
							}
						}
					}
				}
				t.Logf("%s: max |kernel - float64| / sum |products| = %.2g", name, worst)
			}()
		}
	})
}

// BenchmarkAffineGemvCUDA times x @ dequantize(w).T for the matrix shapes
// of a Llama-2-7B decode step (and the fused q/k/v and gate/up shapes) at
// 1 to 32 rows (the kernels take up to 8 and 32 rows here), through the
// project's kernels and through MLX's quantized matmul (PROVIDER_GPU_QMV=0):
// qmv1 is the matrix-vector kernel, qmma1 the tensor-core kernel
// (PROVIDER_GPU_QMMA=1).
// Each evaluation runs one product on each of enough distinct matrices to
// exceed the GPU's L2 cache, so the weights stream from device memory as
// in a step. It reports the weights' bytes a second and, with
// HBM_BYTES_PER_S set, that as a share of the bound.
// PROVIDER_BENCH_QMV_SHAPES adds work shapes (space-separated: R:U:W for
// the matrix-vector kernel, mmaW:U for the tensor-core kernel).
//
// The products of one evaluation do not depend on each other, so MLX's
// CUDA graphs may run them side by side: the figures are a throughput,
// which flatters a kernel that leaves the device short of work (MLX's at
// 8 rows and 4096 outputs: 17.5 us a product here on an H100, 54 us in a
// traced step on an H200). scripts/gpu/session.sh qmvtrace times one
// product on the device.
func BenchmarkAffineGemvCUDA(b *testing.B) {
	shapes := []string{"0", "1", "mma1"}
	if v := os.Getenv("PROVIDER_BENCH_QMV_SHAPES"); v != "" {
		shapes = append(shapes, strings.Fields(v)...)
	}
	hbm, _ := strconv.ParseFloat(os.Getenv("HBM_BYTES_PER_S"), 64)
	th, s := cudaThread(b)
	for _, mat := range []struct{ n, k int }{{4096, 4096}, {12288, 4096}, {11008, 4096}, {22016, 4096}, {4096, 11008}, {32000, 4096}} {
		benchAffineGemv(b, th, s, mat.n, mat.k, shapes, hbm)
	}
}

// randomAffine is random affine weights [n, k] of bits bits in groups of
// group (packed values, float16 scales and biases), from seed: the
// benchmarks' stand-in for a checkpoint's matrix.
func randomAffine(f *Frame, seed uint64, n, k, group, bits int) [3]Array {
	key := f.RandomKey(seed)
	return [3]Array{
		f.RandomBits(4, key, n, k*bits/32), // uint32 words
		f.RandomNormal(Float16, 0.01, 0.001, key, n, k/group),
		f.RandomNormal(Float16, -0.05, 0.01, key, n, k/group),
	}
}

// benchAffineGemv runs BenchmarkAffineGemvCUDA's cases for [n, k] weights;
// MLX work runs on th.
func benchAffineGemv(b *testing.B, th *Thread, s Stream, n, k int, shapes []string, hbm float64) {
	const group, bits = 64, 4
	f := NewFrame(s)
	defer th.Do(f.Free)
	bytes := n*k*bits/8 + 2*2*n*(k/group)
	ws := make([][3]Array, max(2, (256<<20)/bytes+1))
	var err error
	th.Do(func() {
		for i := range ws {
			ws[i] = randomAffine(f, uint64(i+1), n, k, group, bits)
			if err = f.Eval(ws[i][:]...); err != nil {
				return
			}
		}
	})
	if err != nil {
		b.Fatal(err)
	}
	for _, m := range []int{1, 2, 4, 8, 16, 32} {
		var x Array
		th.Do(func() {
			x = f.RandomNormal(Float16, 0, 1, f.RandomKey(99), m, k)
			err = f.Eval(x)
		})
		if err != nil {
			b.Fatal(err)
		}
		for _, shape := range shapes {
			if m > 8 && shape != "0" && !strings.HasPrefix(shape, "mma") {
				continue // the matrix-vector kernel takes at most 8 rows
			}
			qmv, qmma, name := shape, "0", "qmv"+shape
			if v, ok := strings.CutPrefix(shape, "mma"); ok {
				qmv, qmma, name = "0", v, "qmma"+v
			}
			b.Run(fmt.Sprintf("n%d_k%d/rows%d/%s", n, k, m, name), func(b *testing.B) {
				setGemvEnv(b, "PROVIDER_GPU_QMV", qmv)
				setGemvEnv(b, "PROVIDER_GPU_QMMA", qmma)
				setGemvEnv(b, "PROVIDER_GPU_QMV_ROWS", "8")
				setGemvEnv(b, "PROVIDER_GPU_QMMA_ROWS", "32")
				step := func() error {
					inner := NewFrame(s)
					defer inner.Free()
					outs := make([]Array, len(ws))
					for i, w := range ws {
						outs[i] = inner.AffineLinear(x, w[0], w[1], w[2], group, bits)
					}
					return inner.Eval(outs...)
				}
				var err error
				var per float64
				th.Do(func() {
					if err = step(); err != nil {
						return
					}
					b.ResetTimer()
					start := time.Now()
					for range b.N {
						if err = step(); err != nil {
							return
						}
					}
					per = time.Since(start).Seconds() / float64(b.N*len(ws))
				})
				if err != nil {
					b.Fatal(err)
				}
				b.ReportMetric(per*1e6, "us/product")
				b.ReportMetric(float64(bytes)/per/1e9, "GB/s")
				if hbm > 0 {
					b.ReportMetric(100*float64(bytes)/per/hbm, "%HBM")
				}
			})
		}
	}
}

// BenchmarkAffineGemvBuildCUDA times the host's building of one affine
// matrix-vector product on the GPU path (one row, 4096 x 4096, 4-bit), not
// its evaluation: the custom kernel's share of a decode step's graph
// building, which the step makes 129 times on the Llama-2-7B shape.
func BenchmarkAffineGemvBuildCUDA(b *testing.B) {
	const n, k, group, bits = 4096, 4096, 64, 4
	th, s := cudaThread(b)
	f := NewFrame(s)
	defer th.Do(f.Free)
	var x Array
	var m [3]Array
	var err error
	th.Do(func() {
		x = f.RandomNormal(Float16, 0, 1, f.RandomKey(1), 1, k)
		m = randomAffine(f, 1, n, k, group, bits)
		err = f.Eval(x, m[0], m[1], m[2])
	})
	if err != nil {
		b.Fatal(err)
	}
	th.Do(func() {
		b.ResetTimer()
		for range b.N {
			inner := NewFrame(s)
			y := inner.AffineLinear(x, m[0], m[1], m[2], group, bits)
			if !y.Valid() {
				err = inner.Err()
			}
			inner.Free()
			if err != nil {
				return
			}
		}
	})
	if err != nil {
		b.Fatal(err)
	}
}
