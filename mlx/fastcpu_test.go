package mlx

import (
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"os/exec"
	"strconv"
	"strings"
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
		// Up to 4 rows the kernel unpacks into registers; past that into a
		// buffer, in register tiles of 6 rows where AVX-512 is available
		// (19 rows: three whole tiles and a remainder; 53 outputs: whole
		// tiles of 4 weight rows and a remainder).
		checkBatchInvariant(t, f, rng, 53, 160, 19, f.AffineLinear)
	})
}

// checkBatchInvariant checks that linear gives each of rows activation
// rows the same floats alone and inside batches of every size up to rows,
// under 1, 2 and 3 threads, for 4- and 8-bit [n, k] weights.
func checkBatchInvariant(t *testing.T, f *Frame, rng *rand.Rand, n, k, rows int, linear func(x, w, scales, biases Array, groupSize, bits int) Array) {
	t.Helper()
	defer SetCPUThreads(0)
	for _, bits := range []int{4, 8} {
		w, sc, bi := quantized(f, rng, n, k, 32, bits, Float16)
		x := randomRows(f, rng, rows, k)
		alone := make([][]float32, rows)
		for r := range rows {
			alone[r] = f.ToFloat32s(linear(f.Slice(x, []int{r, 0}, []int{r + 1, k}), w, sc, bi, 32, bits))
		}
		for _, threads := range []int{1, 2, 3} {
			SetCPUThreads(threads)
			for m := 1; m <= rows; m++ {
				got := f.ToFloat32s(linear(f.Slice(x, []int{0, 0}, []int{m, k}), w, sc, bi, 32, bits))
				if err := f.Err(); err != nil {
					t.Fatal(err)
				}
				for r := range m {
					for j := range n {
						if got[r*n+j] != alone[r][j] {
							t.Fatalf("%d bits, threads %d, batch %d: row %d col %d = %v, alone %v", bits, threads, m, r, j, got[r*n+j], alone[r][j])
						}
					}
				}
			}
		}
	}
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

// BenchmarkAffineLinear compares the kernels (integer, float) with MLX's CPU quantized_matmul
// on a SmolLM2-sized MLP matrix (1536x576, 4-bit, groups of 32), by rows.
func BenchmarkAffineLinear(b *testing.B) {
	th := NewThread()
	defer th.Close()
	for _, kernel := range []string{"q8", "fast", "mlx"} {
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
						switch kernel {
						case "q8":
							y = g.AffineLinearQ8(x, w, sc, bi, 32, 4)
						case "fast":
							y = g.AffineLinear(x, w, sc, bi, 32, 4)
						default:
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

func maxDiff(a, b []float32) float64 {
	if len(a) != len(b) {
		return math.Inf(1)
	}
	worst := 0.0
	for i := range a {
		worst = math.Max(worst, math.Abs(float64(a[i]-b[i])))
	}
	return worst
}

// TestFusedOpsMatchMLX compares the fused CPU RMSNorm, RoPE and attention
// with MLX's own ops on strided views, per-row offsets, custom frequencies,
// grouped heads, causal prefill and attention sinks.
func TestFusedOpsMatchMLX(t *testing.T) {
	onThread(t, func(_ Stream) {
		s := CPU()
		defer s.Free()
		rng := rand.New(rand.NewPCG(9, 10))
		f := NewFrame(s)
		defer f.Free()
		check := func(name string, got, want Array, tol float64) {
			t.Helper()
			g, w := f.ToFloat32s(got), f.ToFloat32s(want)
			if err := f.Err(); err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			if gs, ws := fmt.Sprint(got.Shape()), fmt.Sprint(want.Shape()); gs != ws {
				t.Fatalf("%s: shape %s, MLX %s", name, gs, ws)
			}
			d := maxDiff(g, w)
			if d > tol {
				t.Fatalf("%s: max |fused - mlx| = %g, want <= %g", name, d, tol)
			}
			t.Logf("%s: max |fused - mlx| = %.2g", name, d)
		}
		x := randomRows(f, rng, 6, 96)
		w := randomRows(f, rng, 1, 96)
		w = f.Reshape(w, 96)
		check("rms_norm", f.RMSNorm(x, w, 1e-5), f.mlxRMSNorm(x, w, 1e-5), 1e-5)
		check("rms_norm no weight", f.RMSNorm(x, Array{}, 1e-6), f.mlxRMSNorm(x, Array{}, 1e-6), 1e-5)

		// [B, T, H, D] transposed to [B, H, T, D]: a strided view, as the
		// families produce.
		raw := f.Reshape(randomRows(f, rng, 3*5*4, 64), 3, 5, 4, 64)
		q := f.Transpose(raw, 0, 2, 1, 3)
		offs := f.Int32s([]int32{0, 7, 300}, 3)
		periods := make([]float32, 16)
		for i := range periods {
			periods[i] = float32(math.Pow(10000, float64(2*i)/32)) * float32(1+i%3)
		}
		freqs := f.Float32s(periods, 16)
		// Angles reach ~300 rad: float32 rounding of position times
		// frequency, computed in a different order, moves outputs by ~1e-5.
		for _, trad := range []bool{false, true} {
			check(fmt.Sprint("rope offset traditional=", trad), f.RoPE(q, 64, trad, 10000, 1, 42, Array{}),
				f.mlxRoPE(q, 64, trad, 10000, 1, 42, Array{}, Array{}), 1e-4)
			check(fmt.Sprint("rope offsets partial traditional=", trad), f.RoPEOffsets(q, 32, trad, 500000, 0.5, offs, Array{}),
				f.mlxRoPE(q, 32, trad, 500000, 0.5, 0, offs, Array{}), 1e-4)
			check(fmt.Sprint("rope freqs traditional=", trad), f.RoPEOffsets(q, 32, trad, 0, 1, offs, freqs),
				f.mlxRoPE(q, 32, trad, 0, 1, 0, offs, freqs), 1e-4)
		}

		// 8 query heads over 2 KV heads; keys are a slice of a longer
		// buffer, as a KV cache hands them out.
		kbuf := f.Reshape(randomRows(f, rng, 3*2*40, 32), 3, 2, 40, 32)
		vbuf := f.Reshape(randomRows(f, rng, 3*2*40, 32), 3, 2, 40, 32)
		k := f.Slice(kbuf, []int{0, 0, 0, 0}, []int{3, 2, 29, 32})
		v := f.Slice(vbuf, []int{0, 0, 0, 0}, []int{3, 2, 29, 32})
		sinkVals := make([]float32, 8)
		for i := range sinkVals {
			sinkVals[i] = float32(rng.NormFloat64())
		}
		sinks := f.Float32s(sinkVals, 8)
		for _, tq := range []int{1, 5} {
			qq := f.Reshape(randomRows(f, rng, 3*8*tq, 32), 3, 8, tq, 32)
			mode := ""
			if tq > 1 {
				mode = "causal"
			}
			check(fmt.Sprint("attention T=", tq), f.Attention(qq, k, v, 0.17, mode, Array{}, Array{}),
				f.mlxAttention(qq, k, v, 0.17, mode, Array{}), 2e-6)
			check(fmt.Sprint("attention sinks T=", tq), f.Attention(qq, k, v, 0.17, mode, Array{}, sinks),
				f.mlxAttention(qq, k, v, 0.17, mode, sinks), 2e-6)
		}
	})
}

// affineOutputs is every output of the kernel on seeded inputs for batches
// of 1 to 9 rows, 4- and 8-bit weights, as float bits.
func affineOutputs(t *testing.T) []uint32 {
	var out []uint32
	onThread(t, func(_ Stream) {
		s := CPU()
		defer s.Free()
		rng := rand.New(rand.NewPCG(7, 8))
		f := NewFrame(s)
		defer f.Free()
		const n, k = 37, 192
		for _, bits := range []int{4, 8} {
			w, sc, bi := quantized(f, rng, n, k, 64, bits, BFloat16)
			x := randomRows(f, rng, 9, k)
			for m := 1; m <= 9; m++ {
				for _, v := range f.ToFloat32s(f.AffineLinear(f.Slice(x, []int{0, 0}, []int{m, k}), w, sc, bi, 64, bits)) {
					out = append(out, math.Float32bits(v))
				}
			}
		}
		if err := f.Err(); err != nil {
			t.Fatal(err)
		}
	})
	return out
}

// TestAffineLinearSameWithoutAVX512: the AVX-512 kernels compute the AVX2
// kernels' floats bit for bit (the child process runs with AVX-512 off).
func TestAffineLinearSameWithoutAVX512(t *testing.T) {
	if os.Getenv("PROVIDER_AFFINE_DUMP") == "1" {
		for _, v := range affineOutputs(t) {
			fmt.Println(v)
		}
		return
	}
	cmd := exec.Command(os.Args[0], "-test.run", "^TestAffineLinearSameWithoutAVX512$")
	cmd.Env = append(os.Environ(), "PROVIDER_AFFINE_DUMP=1", "PROVIDER_CPU_AVX512=0")
	raw, err := cmd.Output()
	if err != nil {
		t.Fatalf("child: %v", err)
	}
	want := affineOutputs(t)
	var got []uint32
	for _, line := range strings.Split(string(raw), "\n") {
		if v, err := strconv.ParseUint(line, 10, 32); err == nil {
			got = append(got, uint32(v))
		}
	}
	if len(got) != len(want) {
		t.Fatalf("child printed %d outputs, want %d", len(got), len(want))
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("output %d: %v without AVX-512, %v with", i, math.Float32frombits(got[i]), math.Float32frombits(want[i]))
		}
	}
}

// TestAffineLinearQ8WithoutAVX512 runs TestAffineLinearQ8 again in a child
// process with AVX-512 off, so that a processor with VNNI checks the AVX2
// integer kernel (q8a_rows) too: on such a processor the parent's run took
// the VNNI kernel only.
func TestAffineLinearQ8WithoutAVX512(t *testing.T) {
	withoutAVX512(t, "TestAffineLinearQ8")
}

// withoutAVX512 runs test again in a child process with AVX-512 off and
// requires it to pass, its kernel checks run (not refused for a processor
// without AVX2).
func withoutAVX512(t *testing.T, test string) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run", "^"+test+"$", "-test.v")
	cmd.Env = append(os.Environ(), "PROVIDER_CPU_AVX512=0")
	raw, err := cmd.CombinedOutput()
	t.Logf("child (AVX-512 off):\n%s", raw)
	if err != nil {
		t.Fatalf("child: %v", err)
	}
	if !strings.Contains(string(raw), "--- PASS: "+test+" ") || strings.Contains(string(raw), "LACKS AVX2") {
		t.Fatalf("child did not run %s's kernel checks", test)
	}
}

// q8Inputs makes a seeded [n, k] quantized weight and [m, k] activations
// (host values xs and the array x) holding a zero and, where they reach
// that far, a block of zeros (scale 0).
func q8Inputs(f *Frame, rng *rand.Rand, m, n, k, group, bits int, scales Dtype) (xs []float32, x, w, sc, bi Array) {
	w, sc, bi = quantized(f, rng, n, k, group, bits, scales)
	xs = make([]float32, m*k)
	for i := range xs {
		xs[i] = float32(rng.NormFloat64())
	}
	xs[5] = 0
	for i := 32; i < 64 && m*k >= 64; i++ {
		xs[i] = 0
	}
	return xs, f.Float32s(xs, m, k), w, sc, bi
}

// dequantized is w as float32 on the host, as MLX dequantizes it.
func dequantized(f *Frame, w, sc, bi Array, group, bits int) []float32 {
	return f.ToFloat32s(f.Dequantize(w, f.AsType(sc, Float32), f.AsType(bi, Float32), group, bits, "affine"))
}

// q8Reference computes AffineLinearQ8's result on the host in float64:
// each block of 32 activations quantized as the kernel does (float32
// arithmetic, round half to even), times the weights MLX dequantizes.
func q8Reference(x, wDeq []float32, m, n, k int) []float64 {
	out := make([]float64, m*n)
	q := make([]float64, k)
	for r := range m {
		xr := x[r*k : (r+1)*k]
		for b := 0; b < k; b += 32 {
			var amax float32
			for _, v := range xr[b : b+32] {
				amax = max(amax, float32(math.Abs(float64(v))))
			}
			d := amax / 127
			var inv float32
			if amax > 0 {
				inv = 127 / amax
			}
			for i := b; i < b+32; i++ {
				q[i] = math.RoundToEven(float64(xr[i]*inv)) * float64(d)
			}
		}
		for j := range n {
			var s float64
			for i := range k {
				s += q[i] * float64(wDeq[j*k+i])
			}
			out[r*n+j] = s
		}
	}
	return out
}

// TestAffineLinearQ8 checks the integer kernel against q8Reference (the
// same quantized activations, exact sums), against the float kernel (the
// activations' rounding only), and that a row's output is the same float
// alone and inside batches of every size under any thread count.
func TestAffineLinearQ8(t *testing.T) {
	onThread(t, func(_ Stream) {
		s := CPU()
		defer s.Free()
		defer SetCPUThreads(0)
		if !CPUInt8() {
			t.Log("THIS PROCESSOR LACKS AVX2: AffineLinearQ8 is checked to equal AffineLinear only")
		}
		rng := rand.New(rand.NewPCG(9, 10))
		for _, c := range []struct {
			m, n, k, group, bits int
			scales               Dtype
		}{
			{1, 37, 64, 32, 4, Float32},
			{3, 64, 128, 32, 4, Float16},
			{4, 33, 128, 64, 4, BFloat16},
			{5, 48, 192, 32, 8, Float16},
			{9, 20, 256, 128, 8, Float32},
			{17, 70, 576, 32, 4, Float16},
			{1, 40, 384, 32, 4, Float16},
			{2, 30, 768, 32, 4, Float32},
			{3, 21, 512, 128, 4, BFloat16},
			{1, 27, 576, 32, 8, Float32},
			{3, 10, 128, 64, 8, BFloat16},
		} {
			name := fmt.Sprintf("m%d_n%d_k%d_g%d_b%d_%v", c.m, c.n, c.k, c.group, c.bits, c.scales)
			func() {
				f := NewFrame(s)
				defer f.Free()
				xs, x, w, sc, bi := q8Inputs(f, rng, c.m, c.n, c.k, c.group, c.bits, c.scales)
				got := f.ToFloat32s(f.AffineLinearQ8(x, w, sc, bi, c.group, c.bits))
				flt := f.ToFloat32s(f.AffineLinear(x, w, sc, bi, c.group, c.bits))
				deq := dequantized(f, w, sc, bi, c.group, c.bits)
				if err := f.Err(); err != nil {
					t.Fatalf("%s: %v", name, err)
				}
				if !CPUInt8() {
					for i := range got {
						if got[i] != flt[i] {
							t.Fatalf("%s: without the integer path, output %d = %v, AffineLinear %v", name, i, got[i], flt[i])
						}
					}
					return
				}
				want := q8Reference(xs, deq, c.m, c.n, c.k)
				worst, drift := 0.0, 0.0
				for i := range want {
					worst = math.Max(worst, math.Abs(float64(got[i])-want[i]))
					drift = math.Max(drift, math.Abs(float64(got[i]-flt[i])))
				}
				// Float32 sums of k products of ~0.05 against exact ones.
				if worst > 2e-5 {
					t.Fatalf("%s: max |q8 - reference| = %g, want <= 2e-5", name, worst)
				}
				// 8-bit activations move outputs of magnitude ~1 by ~1e-2.
				if drift > 0.1 {
					t.Fatalf("%s: max |q8 - float| = %g", name, drift)
				}
				t.Logf("%s: max |q8 - reference| %.2g, |q8 - float| %.2g", name, worst, drift)
			}()
		}

		f := NewFrame(s)
		defer f.Free()
		// Outputs in pairs, rows four at a time: 53 outputs and 11 rows
		// leave remainders of both.
		checkBatchInvariant(t, f, rng, 53, 192, 11, f.AffineLinearQ8)
	})
}

// BenchmarkDecodeMatmuls evaluates every matmul of one SmolLM2-135M decode
// step at one row (30 layers of q, k, v, o, gate, up and down at 4 bits,
// groups of 32, and the 8-bit output head) as one graph, with the float
// and the integer kernel: the weights are about 98 MB, so the time also
// says how close a kernel streams to memory speed.
func BenchmarkDecodeMatmuls(b *testing.B) {
	th := NewThread()
	defer th.Close()
	type mat struct {
		w, sc, bi  Array
		pw, ps, pb Array // packed (PackQ8), where this processor takes it
		k, bits    int
	}
	var (
		s    Stream
		mats []mat
		xs   map[int]Array
		err  error
	)
	th.Do(func() {
		s = CPU()
		f := NewFrame(s)
		rng := rand.New(rand.NewPCG(7, 8))
		shapes := [][2]int{{576, 576}, {192, 576}, {192, 576}, {576, 576}, {1536, 576}, {1536, 576}, {576, 1536}}
		for range 30 {
			for _, sh := range shapes {
				w, sc, bi := quantized(f, rng, sh[0], sh[1], 32, 4, Float16)
				mats = append(mats, mat{w: w, sc: sc, bi: bi, k: sh[1], bits: 4})
			}
		}
		w, sc, bi := quantized(f, rng, 49152, 576, 32, 8, Float16)
		mats = append(mats, mat{w: w, sc: sc, bi: bi, k: 576, bits: 8})
		xs = map[int]Array{576: randomRows(f, rng, 1, 576), 1536: randomRows(f, rng, 1, 1536)}
		for i := range mats {
			m := &mats[i]
			if err = f.Eval(m.w, m.sc, m.bi); err != nil {
				return
			}
			if PackedQ8(m.k, m.bits) {
				if m.pw, m.ps, m.pb, err = PackQ8(s, m.w, m.sc, m.bi, 32, m.bits); err != nil {
					return
				}
			}
		}
		err = f.Eval(xs[576], xs[1536])
	})
	if err != nil {
		b.Fatal(err)
	}
	defer th.Do(func() { s.Free() })
	var bytes int64
	for _, m := range mats {
		bytes += int64(m.w.Nbytes() + m.sc.Nbytes() + m.bi.Nbytes())
	}
	for _, kernel := range []string{"float", "q8", "packed"} {
		b.Run(kernel, func(b *testing.B) {
			if kernel == "packed" && !mats[0].pw.Valid() {
				b.Skip("this processor has neither AVX2 nor AVX-512 VNNI: no packed kernel")
			}
			b.SetBytes(bytes)
			th.Do(func() {
				for range b.N {
					g := NewFrame(s)
					outs := make([]Array, 0, len(mats))
					for _, m := range mats {
						switch kernel {
						case "packed":
							outs = append(outs, g.AffineLinearPacked(xs[m.k], m.pw, m.ps, m.pb, m.bits))
						case "q8":
							outs = append(outs, g.AffineLinearQ8(xs[m.k], m.w, m.sc, m.bi, 32, m.bits))
						default:
							outs = append(outs, g.AffineLinear(xs[m.k], m.w, m.sc, m.bi, 32, m.bits))
						}
					}
					if err := g.Eval(outs...); err != nil {
						b.Fatal(err)
					}
					g.Free()
				}
			})
		})
	}
}

// TestServeCPUSpin reads PROVIDER_CPU_SPIN_US: a count of microseconds,
// 2000 where unset, and a loud error for anything else; SetCPUSpin turns
// a negative value into 0 and returns the setting it replaced, and
// UseServeCPUSpin's restore puts it back.
func TestServeCPUSpin(t *testing.T) {
	for _, c := range []struct {
		env  string
		want int
		bad  bool
	}{{"", 2000, false}, {"0", 0, false}, {"350", 350, false}, {"-1", 0, true}, {"2ms", 0, true}} {
		t.Setenv("PROVIDER_CPU_SPIN_US", c.env)
		got, err := ServeCPUSpin()
		if c.bad {
			if err == nil || !strings.Contains(err.Error(), "PROVIDER_CPU_SPIN_US") {
				t.Errorf("PROVIDER_CPU_SPIN_US=%q: error %v, want one naming the variable", c.env, err)
			}
			continue
		}
		if err != nil || got != c.want {
			t.Errorf("PROVIDER_CPU_SPIN_US=%q: %d, %v; want %d", c.env, got, err, c.want)
		}
	}
	before := SetCPUSpin(-5)
	defer SetCPUSpin(before)
	if got := SetCPUSpin(1500); got != 0 {
		t.Errorf("after SetCPUSpin(-5), SetCPUSpin returned %d, want 0", got)
	}
	if got := SetCPUSpin(before); got != 1500 {
		t.Errorf("after SetCPUSpin(1500), SetCPUSpin returned %d, want 1500", got)
	}
	// UseServeCPUSpin sets serve's wait and restore puts back the one it
	// replaced; a bad variable changes nothing.
	SetCPUSpin(70)
	t.Setenv("PROVIDER_CPU_SPIN_US", "2ms")
	if _, err := UseServeCPUSpin(); err == nil {
		t.Error("UseServeCPUSpin with PROVIDER_CPU_SPIN_US=2ms: no error")
	}
	t.Setenv("PROVIDER_CPU_SPIN_US", "350")
	restore, err := UseServeCPUSpin()
	if err != nil {
		t.Fatal(err)
	}
	if got := SetCPUSpin(350); got != 350 {
		t.Errorf("after UseServeCPUSpin with PROVIDER_CPU_SPIN_US=350, the wait is %d", got)
	}
	restore()
	if got := SetCPUSpin(before); got != 70 {
		t.Errorf("after restore, the wait is %d, want the 70 it replaced", got)
	}
}
