package mlx

import (
	"math"
	"testing"
)

// The Ref ops reproduce ggml's rounding, which the llama reference tests
// check end to end; here they are checked against plain computations for
// layout: shapes, strides, packing, GQA, causal offsets.

func wave(n int, a, b float64) []float32 {
	v := make([]float32, n)
	for i := range v {
		v[i] = float32(math.Sin(float64(i)*a+b) * (1 + 0.5*math.Cos(float64(i)*0.013)))
	}
	return v
}

func closeTo(t *testing.T, what string, got, want []float32, tol float64) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %d values, want %d", what, len(got), len(want))
	}
	for i := range want {
		if d := math.Abs(float64(got[i]) - float64(want[i])); d > tol*(1+math.Abs(float64(want[i]))) || math.IsNaN(d) {
			t.Fatalf("%s[%d] = %v, want %v", what, i, got[i], want[i])
		}
	}
}

func TestRefOpsMatchPlainOps(t *testing.T) {
	onThread(t, func(s Stream) {
		f := NewFrame(s)
		defer f.Free()

		// Dense F32, one row (vec_dot order) and several (sgemm order).
		w := f.Float32s(wave(24*64, 0.37, 0), 24, 64)
		for _, rows := range []int{1, 3} {
			x := f.Float32s(wave(rows*64, 0.11, 1), rows, 64)
			closeTo(t, "RefLinear F32", f.ToFloat32s(f.RefLinear(x, w, Array{}, Array{}, RefF32)),
				f.ToFloat32s(f.MatMul(x, f.Transpose(w, 1, 0))), 1e-5)
		}

		// RMSNorm and SwiGLU.
		x := f.Float32s(wave(2*96, 0.3, 2), 2, 96)
		nw := f.Float32s(wave(96, 0.05, 3), 96)
		closeTo(t, "RefRMSNorm", f.ToFloat32s(f.RefRMSNorm(x, nw, 1e-5)), f.ToFloat32s(f.RMSNorm(x, nw, 1e-5)), 1e-6)
		u := f.Float32s(wave(2*96, 0.21, 4), 2, 96)
		closeTo(t, "RefSwiGLU", f.ToFloat32s(f.RefSwiGLU(x, u)), f.ToFloat32s(f.Multiply(f.SiLU(x), u)), 1e-6)

		// RoPE, both pair layouts, per-row offsets.
		const D = 16
		q := f.Float32s(wave(2*3*2*D, 0.7, 5), 2, 3, 2, D) // [B=2, H=3, T=2, D]
		offs := f.Int32s([]int32{3, 40}, 2)
		for _, trad := range []bool{true, false} {
			closeTo(t, "RefRoPE", f.ToFloat32s(f.RefRoPE(q, D, trad, 10000, 1, offs)),
				f.ToFloat32s(f.RoPEOffsets(q, D, trad, 10000, 1, offs, Array{})), 2e-5)
		}

		// Attention with GQA (4 heads on 2), 3 new queries over 37 keys.
		qa := f.Float32s(wave(4*3*D, 0.9, 6), 1, 4, 3, D)
		ka := f.Float32s(wave(2*37*D, 0.45, 7), 1, 2, 37, D)
		va := f.Float32s(wave(2*37*D, 0.27, 8), 1, 2, 37, D)
		want := f.ToFloat32s(f.Attention(qa, ka, va, 0.25, "causal", Array{}, Array{}))
		for _, batched := range []bool{false, true} {
			closeTo(t, "RefAttention", f.ToFloat32s(f.RefAttention(qa, ka, va, 0.25, batched)), want, 2e-5)
		}
		if err := f.Err(); err != nil {
			t.Fatal(err)
		}
	})
}

// TestRefLinearQuantized checks the Q4_1 and Q8_0 layouts against a float64
// sum of the same 8-bit activation blocks.
func TestRefLinearQuantized(t *testing.T) {
	onThread(t, func(s Stream) {
		f := NewFrame(s)
		defer f.Free()
		const out, in, rows = 5, 96, 2
		nb := in / 32
		xs := wave(rows*in, 0.31, 1)
		x := f.Float32s(xs, rows, in)
		// Activation blocks as the kernels build them (values exact in
		// float64; s unrounded, so the Q4_1 check allows for its binary16).
		qx := make([]float64, rows*in)
		dx := make([]float64, rows*nb)
		sx := make([]float64, rows*nb)
		for b := range rows * nb {
			amax := float32(0)
			for j := range 32 {
				amax = max(amax, float32(math.Abs(float64(xs[32*b+j]))))
			}
			id := float32(127) / amax
			sum := 0.0
			for j := range 32 {
				qx[32*b+j] = math.RoundToEven(float64(xs[32*b+j] * id))
				sum += qx[32*b+j]
			}
			d := amax / 127
			dx[b] = float64(float16Round(d))
			sx[b] = float64(d) * sum
		}
		for _, kind := range []RefKind{RefQ4_1, RefQ8_0} {
			bits := 4
			if kind == RefQ8_0 {
				bits = 8
			}
			packed := make([]byte, out*in*bits/8)
			scales := make([]float32, out*nb)
			biases := make([]float32, out*nb)
			want := make([]float64, rows*out)
			for o := range out {
				for b := range nb {
					d := float16Round(float32(0.01 + 0.003*float64((o+b)%7)))
					m := float16Round(float32(-0.05 * float64(1+(o*b)%5)))
					scales[o*nb+b] = d
					if kind == RefQ4_1 {
						biases[o*nb+b] = m
					} else {
						biases[o*nb+b] = -128 * d
					}
					for e := range 32 {
						idx := o*in + 32*b + e
						var q, u int // weight value d*q (+m), stored u
						if kind == RefQ4_1 {
							q = (idx*7 + 3) % 16
							u = q
							packed[idx/2] |= byte(u << (4 * (idx % 2)))
						} else {
							q = (idx*37)%255 - 127
							u = q + 128
							packed[idx] = byte(u)
						}
						for r := range rows {
							want[r*out+o] += float64(d) * float64(q) * dx[r*nb+b] * qx[r*in+32*b+e]
						}
					}
					if kind == RefQ4_1 {
						for r := range rows {
							want[r*out+o] += float64(m) * sx[r*nb+b]
						}
					}
				}
			}
			// Little-endian bytes are the uint32 words MLX packs: element e of
			// a word at bits [bits*e, bits*(e+1)).
			wa, err := FromBytes(packed, Uint32, out, in*bits/32)
			if err != nil {
				t.Fatal(err)
			}
			f.Track(wa)
			got := f.ToFloat32s(f.RefLinear(x, wa, f.Float32s(scales, out, nb), f.Float32s(biases, out, nb), kind))
			if err := f.Err(); err != nil {
				t.Fatal(err)
			}
			w32 := make([]float32, len(want))
			for i := range want {
				w32[i] = float32(want[i])
			}
			closeTo(t, "RefLinear quantized", got, w32, 2e-3)
		}
	})
}

// float16Round rounds to the nearest binary16 value (normal range).
func float16Round(v float32) float32 {
	if v == 0 {
		return 0
	}
	e := math.Floor(math.Log2(math.Abs(float64(v))))
	ulp := math.Pow(2, e-10)
	return float32(math.RoundToEven(float64(v)/ulp) * ulp)
}
