package mlx

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
)

// withFusedGemv sets how far the matrix-vector products fuse for the
// rest of the test.
func withFusedGemv(t *testing.T, level int) {
	old := SetFusedGemv(level)
	t.Cleanup(func() { SetFusedGemv(old) })
}

// TestAffineGemvFusedCUDA checks the fused matrix-vector products
// (AffineLinearAdd, AffineLinearSwiGLU, AffineLinearHeadsRoPE) against the
// same products kept apart (PROVIDER_GPU_QMV_FUSED=0) on the same stream:
// the same floats, output for output, for 1 to 4 rows, 4 and 8 bits, half,
// bfloat and float activations, two pairs a warp (R = 4), full and partial
// rotations, the traditional pairing and explicit frequencies, at
// positions past 65,536. With the RMSNorm before them in the kernel (2)
// they must stay within a few roundings of the activation type of the
// norm taken apart (1), which rounds the normalized input. Each fused
// product must be one custom kernel and nothing else; an odd R (no pairs)
// and five rows (past the kernel) must leave the products apart.
func TestAffineGemvFusedCUDA(t *testing.T) {
	onCUDA(t, func(s Stream) {
		withLayerKernels(t)
		setGemvEnv(t, "PROVIDER_GPU_QMMA", "0")
		rng := rand.New(rand.NewPCG(11, 12))
		for _, c := range []struct {
			bits, group          int
			x                    Dtype
			heads, kv, d, dims   int
			traditional, freqsOn bool
			shape                string
		}{
			{4, 64, BFloat16, 4, 2, 64, 64, false, false, "1"},
			{4, 32, Float16, 6, 2, 64, 32, true, true, "4:2:4"},
			{8, 64, Float32, 4, 1, 128, 128, false, true, "1"},
			{4, 128, BFloat16, 2, 2, 128, 64, false, false, "2:8:1"},
		} {
			const k, hidden = 512, 384 // the input's length, the residual's
			for _, m := range []int{1, 2, 4} {
				name := fmt.Sprintf("b%d_g%d_%v_h%d_kv%d_d%d_dims%d_trad%v_freqs%v_R:U:W=%s_m%d", c.bits, c.group, c.x,
					c.heads, c.kv, c.d, c.dims, c.traditional, c.freqsOn, c.shape, m)
				setGemvEnv(t, "PROVIDER_GPU_QMV", c.shape)
				checkFusedGemv(t, s, rng, name, c.bits, c.group, c.x, m, k, hidden, c.heads, c.kv, c.d, c.dims, c.traditional, c.freqsOn, true)
			}
		}
		// No pairs with one row a warp; five rows are past the kernel.
		setGemvEnv(t, "PROVIDER_GPU_QMV", "1:4:4")
		checkFusedGemv(t, s, rng, "R=1", 4, 64, BFloat16, 1, 256, 128, 2, 1, 64, 64, false, false, false)
		setGemvEnv(t, "PROVIDER_GPU_QMV", "1")
		checkFusedGemv(t, s, rng, "5 rows", 4, 64, BFloat16, 5, 256, 128, 2, 1, 64, 64, false, false, false)
	})
}

// checkFusedGemv runs one case of TestAffineGemvFusedCUDA: m rows of
// input of length k; a residual product of hidden outputs, a gate/up
// product of 2 x 192 and a q/k/v product of heads and kvHeads heads of d.
// fusedWant says whether the pairing products are to fuse (the residual's
// fuses wherever the kernel takes the product).
func checkFusedGemv(t *testing.T, s Stream, rng *rand.Rand, name string, bits, group int, xType Dtype, m, k, hidden, heads, kvHeads, d, dims int, traditional, freqsOn, fusedWant bool) {
	t.Helper()
	f, cf, free := gpuAndCPUFrames(s)
	defer free()
	const ff = 192
	width := (heads + 2*kvHeads) * d
	wo, so, bo, x, _ := affineInputs(t, f, cf, rng, hidden, k, group, bits, xType, xType, m, name)
	wg, sg, bg := quantized(cf, rng, 2*ff, k, group, bits, xType)
	wq, sq, bq := quantized(cf, rng, width, k, group, bits, xType)
	res := f.AsType(randomRows(f, rng, m, hidden), xType)
	norm := f.AsType(f.Add(f.Reshape(randomRows(f, rng, 1, k), k), f.Scalar(1)), xType)
	pos := make([]int32, m)
	for i := range pos {
		pos[i] = int32(rng.IntN(70000))
	}
	pos[0] = 65537
	positions := f.Int32s(pos, m)
	freqs := Array{}
	if freqsOn {
		fs := make([]float32, dims/2)
		for j := range fs {
			fs[j] = float32(math.Pow(10000, 2*float64(j)/float64(dims)) * (1 + rng.Float64()))
		}
		freqs = f.Float32s(fs, len(fs))
	}
	if err := cf.Eval(wg, sg, bg, wq, sq, bq); err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	if err := f.Eval(res, positions, norm); err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	const base, scale, eps = 10000, 0.5, 1e-5
	products := func(norm Array) []Array {
		q, kk, v, stored := f.AffineLinearHeadsRoPE(x, wq, sq, bq, group, bits, norm, eps, heads, kvHeads, d, dims, traditional, base, scale, positions, freqs, KVStore{})
		if stored {
			t.Fatalf("%s: the q/k/v product stored keys and values without a pool", name)
		}
		return []Array{
			f.AffineLinearAdd(x, wo, so, bo, group, bits, res),
			f.AffineLinearSwiGLU(x, wg, sg, bg, group, bits, norm, eps),
			q, kk, v,
		}
	}
	// The q/k/v product with a store into a KV pool: the same floats, and
	// k and v in the pool (the kernel, fused or apart, takes the store).
	withStore := func(norm Array, level int, want []Array) {
		kv, slots := kvPool(t, f, rng, 2*m+1, kvHeads, d, m, xType)
		q, kk, v, stored := f.AffineLinearHeadsRoPE(x, wq, sq, bq, group, bits, norm, eps, heads, kvHeads, d, dims, traditional, base, scale, positions, freqs, kv)
		if !stored {
			t.Fatalf("%s: the q/k/v product (fused %d) did not store keys and values into the pool", name, level)
		}
		checkStored(t, f, fmt.Sprintf("%s, fused %d, stored", name, level), kv, slots, stored, want, []Array{q, kk, v})
	}
	withFusedGemv(t, 1)
	fused := products(Array{})
	normApart := products(norm)
	withFusedGemv(t, 2)
	normFused := products(norm)
	withFusedGemv(t, 0)
	apart := products(Array{})
	// Checked last: the store's check evaluates the products, whose
	// graphs the checks below count first.
	defer func() {
		for _, c := range []struct {
			level int
			norm  Array
			want  []Array
		}{{1, Array{}, fused[2:]}, {2, norm, normFused[2:]}, {0, Array{}, apart[2:]}} {
			withFusedGemv(t, c.level)
			withStore(c.norm, c.level, c.want)
		}
	}()
	// Kernels each product's graph holds, fused and apart: the q/k/v
	// product's three results share theirs.
	kernels := func(a Array) map[string]int {
		counts, err := GraphPrimitives(a)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		return counts
	}
	for i, what := range []string{"residual", "gate/up", "q/k/v"} {
		got, sep := kernels(fused[i]), kernels(apart[i])
		fusedHere := fusedWant || i == 0 && m <= 4
		if one := got["CustomKernel"] == 1 && len(got) == 1; one != fusedHere {
			t.Fatalf("%s: %s fused made %v (one custom kernel alone wanted: %v); apart %v", name, what, got, fusedHere, sep)
		}
		if i > 0 {
			n := kernels(normFused[i])
			if one := n["CustomKernel"] == 1 && len(n) == 1; one != fusedWant {
				t.Fatalf("%s: %s fused with its norm made %v (one custom kernel alone wanted: %v)", name, what, n, fusedWant)
			}
		}
		if len(sep) < 2 && sep["CustomKernel"] < 2 {
			t.Fatalf("%s: %s apart made %v: not two ops", name, what, sep)
		}
	}
	for i, what := range []string{"residual", "gate/up", "q", "k", "v"} {
		got, want := f.ToFloat32s(fused[i]), f.ToFloat32s(apart[i])
		if err := f.Err(); err != nil {
			t.Fatalf("%s: %s: %v", name, what, err)
		}
		if len(got) != len(want) || len(got) == 0 {
			t.Fatalf("%s: %s: %d floats fused, %d apart", name, what, len(got), len(want))
		}
		for j := range got {
			if got[j] != want[j] {
				t.Fatalf("%s: %s[%d] = %v fused, %v apart", name, what, j, got[j], want[j])
			}
		}
	}
	// The norm inside: within a few roundings of the type of the
	// normalized input (which the norm apart rounds), relative to each
	// output and to the outputs' RMS (an output near zero is a
	// cancellation of larger terms).
	rounding := map[Dtype]float64{BFloat16: 0x1p-8, Float16: 0x1p-11, Float32: 0x1p-20}[xType]
	worst := 0.0
	for i, what := range []string{"gate/up", "q", "k", "v"} {
		got, want := f.ToFloat32s(normFused[i+1]), f.ToFloat32s(normApart[i+1])
		if err := f.Err(); err != nil {
			t.Fatalf("%s: %s with its norm: %v", name, what, err)
		}
		if len(got) != len(want) || len(got) == 0 {
			t.Fatalf("%s: %s with its norm: %d floats fused, %d apart", name, what, len(got), len(want))
		}
		rms := 0.0
		for _, w := range want {
			rms += float64(w) * float64(w)
		}
		rms = math.Sqrt(rms / float64(len(want)))
		for j := range got {
			diff := math.Abs(float64(got[j]) - float64(want[j]))
			if diff > 8*rounding*(math.Abs(float64(want[j]))+rms) {
				t.Fatalf("%s: %s[%d] = %v with the norm in the kernel, %v with it apart (outputs' RMS %.3g)", name, what, j, got[j], want[j], rms)
			}
			worst = math.Max(worst, diff/(math.Abs(float64(want[j]))+rms))
		}
	}
	t.Logf("%s: the norm in the kernel moved outputs by up to %.3g of |output| + RMS (%.3g roundings)", name, worst, worst/rounding)
}

// TestAffineLinearFusedOps checks the fused products' MLX-ops path, which
// they take off a CUDA stream (here, the CPU): each the same floats as
// the ops it stands for, built one by one, with and without the RMSNorm
// before.
func TestAffineLinearFusedOps(t *testing.T) {
	onThread(t, func(s Stream) {
		f := NewFrame(s)
		defer f.Free()
		rng := rand.New(rand.NewPCG(13, 14))
		const m, k, hidden, ff, heads, kv, d, group, bits = 3, 256, 128, 96, 2, 1, 64, 64, 4
		const base, scale, eps = 10000, 1, 1e-5
		x, res := randomRows(f, rng, m, k), randomRows(f, rng, m, hidden)
		norm := f.Add(f.Reshape(randomRows(f, rng, 1, k), k), f.Scalar(1))
		wo, so, bo := quantized(f, rng, hidden, k, group, bits, Float32)
		wg, sg, bg := quantized(f, rng, 2*ff, k, group, bits, Float32)
		wq, sq, bq := quantized(f, rng, (heads+2*kv)*d, k, group, bits, Float32)
		positions := f.Int32s([]int32{0, 7, 70000}, m)
		same := func(what string, got, want Array) {
			g, w := f.ToFloat32s(got), f.ToFloat32s(want)
			if err := f.Err(); err != nil {
				t.Fatalf("%s: %v", what, err)
			}
			if len(g) != len(w) || len(g) == 0 {
				t.Fatalf("%s: %d floats, want %d", what, len(g), len(w))
			}
			for i := range g {
				if g[i] != w[i] {
					t.Fatalf("%s: element %d is %v, %v through the ops", what, i, g[i], w[i])
				}
			}
		}
		same("residual", f.AffineLinearAdd(x, wo, so, bo, group, bits, res), f.Add(res, f.AffineLinear(x, wo, so, bo, group, bits)))
		for _, nw := range []Array{{}, norm} {
			in := x
			if nw.Valid() {
				in = f.RMSNorm(x, nw, eps)
			}
			name := fmt.Sprintf("norm %v", nw.Valid())
			same(name+": gate/up", f.AffineLinearSwiGLU(x, wg, sg, bg, group, bits, nw, eps), f.SwiGLUHalves(f.AffineLinear(in, wg, sg, bg, group, bits)))
			q, kk, v, _ := f.AffineLinearHeadsRoPE(x, wq, sq, bq, group, bits, nw, eps, heads, kv, d, d, false, base, scale, positions, Array{}, KVStore{})
			oq, ok, ov, _ := f.HeadsRoPE(f.AffineLinear(in, wq, sq, bq, group, bits), heads, kv, d, d, false, base, scale, positions, Array{}, KVStore{})
			same(name+": q", q, oq)
			same(name+": k", kk, ok)
			same(name+": v", v, ov)
		}
	})
}
