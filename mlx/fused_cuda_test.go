package mlx

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
)

// withLayerKernels turns HeadsRoPE's and SwiGLUHalves's kernels on for
// the test, whatever PROVIDER_GPU_LAYER_KERNELS says.
func withLayerKernels(t *testing.T) {
	old := SetLayerKernels(true)
	t.Cleanup(func() { SetLayerKernels(old) })
}

// ropeReference rotates one head's first dims elements of x (float64 on
// the host) at position pos, as RoPE does: pairs (j, j + dims/2), or (2j,
// 2j + 1) when traditional, by scale * pos * inv_freq, inv_freq 1 /
// freqs[j] or base^(-2j / dims). slack is, per element, what an angle
// computed in float32 (as MLX computes it, on every device) may move it:
// a few float32 roundings of the angle times the pair's magnitude.
func ropeReference(x []float64, dims int, traditional bool, base, scale float64, freqs []float32, pos int32) (out, slack []float64) {
	out = append([]float64(nil), x...)
	slack = make([]float64, len(x))
	half := dims / 2
	for j := range half {
		inv := math.Pow(base, -float64(j)/float64(half))
		if freqs != nil {
			inv = 1 / float64(freqs[j])
		}
		theta := scale * float64(pos) * inv
		a, b := j, j+half
		if traditional {
			a, b = 2*j, 2*j+1
		}
		c, s := math.Cos(theta), math.Sin(theta)
		out[a], out[b] = x[a]*c-x[b]*s, x[a]*s+x[b]*c
		slack[a] = 4 * 0x1p-24 * (math.Abs(theta) + 1) * (math.Abs(x[a]) + math.Abs(x[b]))
		slack[b] = slack[a]
	}
	return out, slack
}

// TestHeadsRoPECUDA checks HeadsRoPE's kernel against float64 rotations on
// the host, and against its MLX-ops path on the same GPU stream: values
// copied exactly, q's and k's heads within the dtype's rounding, for one
// token and a chunk of five, full and partial rotations, the traditional
// pairing and explicit frequencies.
func TestHeadsRoPECUDA(t *testing.T) {
	onCUDA(t, func(s Stream) { withLayerKernels(t); checkHeadsRoPE(t, s, true) })
}

// TestHeadsRoPE is TestHeadsRoPECUDA's check of the MLX-ops path, which
// HeadsRoPE takes on the CPU.
func TestHeadsRoPE(t *testing.T) {
	onThread(t, func(s Stream) { checkHeadsRoPE(t, s, false) })
}

func checkHeadsRoPE(t *testing.T, s Stream, kernel bool) {
	rng := rand.New(rand.NewPCG(7, 8))
	for _, c := range []struct {
		heads, kv, d, dims int
		traditional, freqs bool
		dtype              Dtype
		tol                float64
	}{
		{32, 8, 128, 128, false, false, Float16, 2e-3},
		{32, 8, 128, 128, false, true, BFloat16, 1.6e-2},
		{4, 2, 64, 32, true, false, Float32, 2e-5},
		{9, 3, 64, 64, false, false, Float32, 2e-5},
	} {
		for _, n := range []int{1, 5} {
			name := fmt.Sprintf("h%d_kv%d_d%d_dims%d_trad%v_freqs%v_%v_n%d", c.heads, c.kv, c.d, c.dims, c.traditional, c.freqs, c.dtype, n)
			func() {
				f := NewFrame(s)
				defer f.Free()
				width := (c.heads + 2*c.kv) * c.d
				y := f.AsType(randomRows(f, rng, n, width), c.dtype)
				y = f.Reshape(y, 1, n, width)
				pos := make([]int32, n)
				for i := range pos {
					pos[i] = int32(rng.IntN(4000))
				}
				positions := f.Int32s(pos, n)
				var freqs []float32
				fa := Array{}
				if c.freqs {
					freqs = make([]float32, c.dims/2)
					for j := range freqs {
						freqs[j] = float32(math.Pow(10000, 2*float64(j)/float64(c.dims)) * (1 + rng.Float64()))
					}
					fa = f.Float32s(freqs, len(freqs))
				}
				if err := f.Eval(y, positions); err != nil {
					t.Fatalf("%s: %v", name, err)
				}
				const base, scale = 10000, 1
				q, k, v, stored := f.HeadsRoPE(y, c.heads, c.kv, c.d, c.dims, c.traditional, base, scale, positions, fa, KVStore{})
				if stored {
					t.Fatalf("%s: HeadsRoPE stored keys and values without a pool", name)
				}
				kv, slots := kvPool(t, f, rng, n+3, c.kv, c.d, n, c.dtype)
				sq, sk, sv, stored := f.HeadsRoPE(y, c.heads, c.kv, c.d, c.dims, c.traditional, base, scale, positions, fa, kv)
				if stored != kernel {
					t.Fatalf("%s: HeadsRoPE stored keys and values into the pool: %v (the kernel: %v)", name, stored, kernel)
				}
				// Checked last: it evaluates q, whose graph is counted first.
				defer checkStored(t, f, name, kv, slots, stored, []Array{q, k, v}, []Array{sq, sk, sv})
				counts, err := GraphPrimitives(q)
				if err != nil {
					t.Fatalf("%s: %v", name, err)
				}
				if one := counts["CustomKernel"] == 1 && len(counts) == 1; one != kernel {
					t.Fatalf("%s: HeadsRoPE made %v (one custom kernel wanted: %v)", name, counts, kernel)
				}
				oq, ok, ov := f.headsRoPEOps(y, c.heads, c.kv, c.d, c.dims, c.traditional, base, scale, positions, fa)
				ys := f.ToFloat32s(y)
				got := [][]float32{f.ToFloat32s(q), f.ToFloat32s(k), f.ToFloat32s(v)}
				ops := [][]float32{f.ToFloat32s(oq), f.ToFloat32s(ok), f.ToFloat32s(ov)}
				if err := f.Err(); err != nil {
					t.Fatalf("%s: %v", name, err)
				}
				worst, worstOps := 0.0, 0.0
				for p, part := range []struct{ lo, heads int }{{0, c.heads}, {c.heads, c.kv}, {c.heads + c.kv, c.kv}} {
					for i := range n {
						for h := range part.heads {
							src := make([]float64, c.d)
							for e := range src {
								src[e] = float64(ys[(i*(c.heads+2*c.kv)+part.lo+h)*c.d+e])
							}
							want, slack := src, make([]float64, c.d)
							if p < 2 {
								want, slack = ropeReference(src, c.dims, c.traditional, base, scale, freqs, pos[i])
							}
							for e := range c.d {
								at := (i*part.heads+h)*c.d + e
								g, o := float64(got[p][at]), float64(ops[p][at])
								if p == 2 && (g != want[e] || o != want[e]) {
									t.Fatalf("%s: v[%d, %d, %d] = %v (ops %v), want %v copied", name, i, h, e, g, o, want[e])
								}
								bound := c.tol*(1+math.Abs(want[e])) + slack[e]
								if math.Abs(g-want[e]) > bound {
									t.Fatalf("%s: part %d [%d, %d, %d] = %v, float64 %v", name, p, i, h, e, g, want[e])
								}
								worst = math.Max(worst, math.Abs(g-want[e]))
								worstOps = math.Max(worstOps, math.Abs(o-want[e]))
							}
						}
					}
				}
				t.Logf("%s: max |HeadsRoPE - float64| = %.3g, |MLX ops - float64| = %.3g", name, worst, worstOps)
			}()
		}
	}
}

// kvPool is a KV pool for a q/k/v kernel to store into (KVStore): key and
// value arrays of rows rows of kv heads of d, of type dt, evaluated (zeros
// on a GPU), freed with the test, and n distinct rows of them, shuffled,
// as Slots. It returns the slots too.
func kvPool(t *testing.T, f *Frame, rng *rand.Rand, rows, kv, d, n int, dt Dtype) (KVStore, []int32) {
	t.Helper()
	var st KVStore
	for _, a := range []*Array{&st.K, &st.V} {
		b, err := NewBuffer(f.s, dt, rows, kv, d)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(b.Free)
		*a = b
	}
	slots := make([]int32, n)
	for i, r := range rng.Perm(rows)[:n] {
		slots[i] = int32(r)
	}
	st.Slots = f.Int32s(slots, n)
	return st, slots
}

// checkStored requires a q/k/v kernel's results with a store (got: q, k,
// v) to be the same floats as without one (want), and, where it stored,
// the pool's rows at slots to hold k and v and every other row to hold
// zeros.
func checkStored(t *testing.T, f *Frame, name string, kv KVStore, slots []int32, stored bool, want, got []Array) {
	t.Helper()
	host := func(a Array) []float32 {
		x := f.ToFloat32s(a)
		if err := f.Err(); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		return x
	}
	var kw, vw []float32
	for i, what := range []string{"q", "k", "v"} {
		g, w := host(got[i]), host(want[i])
		if len(g) != len(w) {
			t.Fatalf("%s: %s: %d floats with a store, %d without", name, what, len(g), len(w))
		}
		for j := range w {
			if g[j] != w[j] {
				t.Fatalf("%s: %s[%d] = %v with a store, %v without", name, what, j, g[j], w[j])
			}
		}
		switch i {
		case 1:
			kw = w
		case 2:
			vw = w
		}
	}
	if !stored {
		return
	}
	// Read the pools only now: the kernel wrote them when its results
	// were evaluated.
	row := len(kw) / len(slots)
	for p, pair := range []struct {
		what string
		pool Array
		want []float32
	}{{"keys", kv.K, kw}, {"values", kv.V, vw}} {
		pool := host(pair.pool)
		at := make(map[int32]int, len(slots))
		for i, s := range slots {
			at[s] = i
		}
		for r := range len(pool) / row {
			i, held := at[int32(r)]
			for e := range row {
				want := float32(0)
				if held {
					want = pair.want[i*row+e]
				}
				if got := pool[r*row+e]; got != want {
					t.Fatalf("%s: pool %d (%s) row %d [%d] = %v, want %v (token %d's: %v)", name, p, pair.what, r, e, got, want, i, held)
				}
			}
		}
	}
}

// TestSwiGLUHalvesCUDA checks SwiGLUHalves's kernel, and its MLX-ops path
// (two views and the compiled SwiGLU) on the same GPU stream, against
// float64 on the host.
func TestSwiGLUHalvesCUDA(t *testing.T) {
	onCUDA(t, func(s Stream) { withLayerKernels(t); checkSwiGLUHalves(t, s, true) })
}

// TestSwiGLUHalves is TestSwiGLUHalvesCUDA's check of the MLX-ops path,
// which SwiGLUHalves takes on the CPU.
func TestSwiGLUHalves(t *testing.T) {
	onThread(t, func(s Stream) { checkSwiGLUHalves(t, s, false) })
}

func checkSwiGLUHalves(t *testing.T, s Stream, kernel bool) {
	rng := rand.New(rand.NewPCG(9, 10))
	for _, c := range []struct {
		rows, f int
		dtype   Dtype
		tol     float64
	}{{1, 11008, Float16, 2e-3}, {3, 4099, BFloat16, 1.6e-2}, {8, 1536, Float32, 1e-5}} {
		name := fmt.Sprintf("rows%d_f%d_%v", c.rows, c.f, c.dtype)
		f := NewFrame(s)
		x := f.Reshape(f.AsType(randomRows(f, rng, c.rows, 2*c.f), c.dtype), 1, c.rows, 2*c.f)
		if err := f.Eval(x); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		y := f.SwiGLUHalves(x)
		counts, err := GraphPrimitives(y)
		if one := counts["CustomKernel"] == 1 && len(counts) == 1; err != nil || one != kernel {
			t.Fatalf("%s: SwiGLUHalves made %v (%v; one custom kernel wanted: %v)", name, counts, err, kernel)
		}
		if sh := y.Shape(); len(sh) != 3 || sh[2] != c.f {
			t.Fatalf("%s: shape %v", name, sh)
		}
		xs, got, ops := f.ToFloat32s(x), f.ToFloat32s(y), f.ToFloat32s(f.swigluHalvesOps(x))
		if err := f.Err(); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		worst, worstOps := 0.0, 0.0
		for m := range c.rows {
			for i := range c.f {
				g, u := float64(xs[m*2*c.f+i]), float64(xs[m*2*c.f+c.f+i])
				want := g / (1 + math.Exp(-g)) * u
				at := m*c.f + i
				if d := math.Abs(float64(got[at]) - want); d > c.tol*(1+math.Abs(want)) {
					t.Fatalf("%s: [%d, %d] = %v, float64 %v", name, m, i, got[at], want)
				}
				worst = math.Max(worst, math.Abs(float64(got[at])-want))
				worstOps = math.Max(worstOps, math.Abs(float64(ops[at])-want))
			}
		}
		t.Logf("%s: max |SwiGLUHalves - float64| = %.3g, |MLX ops - float64| = %.3g", name, worst, worstOps)
		f.Free()
	}
}
