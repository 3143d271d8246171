package mlx

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"
)

// pack evaluates w and packs it, the packed arrays owned by f.
func pack(tb testing.TB, f *Frame, s Stream, w, scales, biases Array, groupSize, bits int) (pw, ps, pb Array) {
	tb.Helper()
	if err := f.Eval(w, scales, biases); err != nil {
		tb.Fatal(err)
	}
	pw, ps, pb, err := PackQ8(s, w, scales, biases, groupSize, bits)
	if err != nil {
		tb.Fatal(err)
	}
	return f.Track(pw), f.Track(ps), f.Track(pb)
}

// packedLinear packs w for one call of AffineLinearPacked (tests only: a
// model packs its weights once, at load).
func packedLinear(t *testing.T, f *Frame, s Stream) func(x, w, scales, biases Array, groupSize, bits int) Array {
	return func(x, w, scales, biases Array, groupSize, bits int) Array {
		pw, ps, pb := pack(t, f, s, w, scales, biases, groupSize, bits)
		return f.AffineLinearPacked(x, pw, ps, pb, bits)
	}
}

// TestAffineLinearPacked checks the packed integer kernel against
// q8Reference (the same quantized activations, exact sums) on every layout
// it has: spans of 16 blocks only (k 512, 1536), pairs only (k 64), both
// (k 576, 2880), an odd last block (k 32, 288, 352, 544), groups of 32 to
// 128, 4- and 8-bit weights, each scale type, odd output counts and rows
// that leave remainders of every tile;
// and that a row's output is the same float alone and inside batches of
// every size under 1 to 3 threads.
func TestAffineLinearPacked(t *testing.T) {
	onThread(t, func(_ Stream) {
		s := CPU()
		defer s.Free()
		defer SetCPUThreads(0)
		if !PackedQ8(576, 4) {
			t.Log("THIS PROCESSOR LACKS AVX2: the packed kernel cannot run here; only its refusal is checked")
			f := NewFrame(s)
			defer f.Free()
			rng := rand.New(rand.NewPCG(1, 2))
			w, sc, bi := quantized(f, rng, 8, 64, 32, 4, Float16)
			if err := f.Eval(w, sc, bi); err != nil {
				t.Fatal(err)
			}
			if _, _, _, err := PackQ8(s, w, sc, bi, 32, 4); err == nil {
				t.Fatal("PackQ8 packed weights for a kernel this processor cannot run")
			}
			return
		}
		rng := rand.New(rand.NewPCG(11, 12))
		for _, c := range []struct {
			m, n, k, group, bits int
			scales               Dtype
		}{
			{1, 37, 64, 32, 4, Float32},
			{3, 64, 512, 32, 4, Float16},
			{4, 33, 576, 64, 4, BFloat16},
			{5, 48, 576, 32, 8, Float16},
			{9, 20, 1536, 128, 8, Float32},
			{17, 71, 576, 32, 4, Float16},
			{6, 9, 2880, 32, 4, BFloat16},
			{40, 13, 2880, 64, 8, Float16},
			// An odd number of blocks: a last block alone (after pairs, after
			// a span, alone).
			{7, 21, 288, 32, 4, Float16},
			{5, 10, 288, 32, 8, BFloat16},
			{3, 12, 544, 32, 4, Float32},
			{4, 8, 352, 32, 4, Float16},
			{9, 6, 544, 32, 8, Float16},
			{2, 5, 32, 32, 4, Float16},
		} {
			name := fmt.Sprintf("m%d_n%d_k%d_g%d_b%d_%v", c.m, c.n, c.k, c.group, c.bits, c.scales)
			func() {
				f := NewFrame(s)
				defer f.Free()
				xs, x, w, sc, bi := q8Inputs(f, rng, c.m, c.n, c.k, c.group, c.bits, c.scales)
				got := f.ToFloat32s(packedLinear(t, f, s)(x, w, sc, bi, c.group, c.bits))
				deq := dequantized(f, w, sc, bi, c.group, c.bits)
				if err := f.Err(); err != nil {
					t.Fatalf("%s: %v", name, err)
				}
				want := q8Reference(xs, deq, c.m, c.n, c.k)
				worst := 0.0
				for i := range want {
					worst = math.Max(worst, math.Abs(float64(got[i])-want[i]))
				}
				// Float32 sums of k products of ~0.05 against exact ones.
				if tol := 2e-5 * math.Sqrt(float64(c.k)/64); worst > tol {
					t.Fatalf("%s: max |packed - reference| = %g, want <= %g", name, worst, tol)
				}
				t.Logf("%s: max |packed - reference| %.2g", name, worst)
			}()
		}
		f := NewFrame(s)
		defer f.Free()
		checkBatchInvariant(t, f, rng, 53, 576, 11, packedLinear(t, f, s))
		checkBatchInvariant(t, f, rng, 7, 1536, 37, packedLinear(t, f, s))
		checkBatchInvariant(t, f, rng, 9, 288, 9, packedLinear(t, f, s))
	})
}

// TestAffineLinearPackedWithoutAVX512 runs TestAffineLinearPacked again
// in a child process with AVX-512 off, so that a processor with VNNI checks
// the AVX2 packed kernel (pka_rows) too.
func TestAffineLinearPackedWithoutAVX512(t *testing.T) {
	withoutAVX512(t, "TestAffineLinearPacked")
}

// TestPackedEmbed checks that rows gathered from packed weights equal
// MLX's dequantization of the same rows of the originals, bit for bit.
func TestPackedEmbed(t *testing.T) {
	onThread(t, func(_ Stream) {
		s := CPU()
		defer s.Free()
		if !PackedQ8(576, 4) {
			t.Skip("THIS PROCESSOR LACKS AVX-512 VNNI: no packed weights to embed from")
		}
		rng := rand.New(rand.NewPCG(13, 14))
		for _, c := range []struct {
			k, group, bits int
			scales         Dtype
		}{{576, 32, 4, Float16}, {1536, 64, 8, BFloat16}, {64, 32, 8, Float32}, {2880, 64, 4, Float16}, {288, 32, 4, Float16}, {544, 32, 8, Float16}} {
			f := NewFrame(s)
			w, sc, bi := quantized(f, rng, 50, c.k, c.group, c.bits, c.scales)
			pw, ps, pb := pack(t, f, s, w, sc, bi, c.group, c.bits)
			ids := f.Int32s([]int32{3, 0, 49, 3, 17, 21}, 2, 3)
			got := f.PackedEmbed(ids, pw, ps, pb, c.bits)
			want := f.Dequantize(f.Take(w, ids, 0), f.Take(sc, ids, 0), f.Take(bi, ids, 0), c.group, c.bits, "affine")
			if !slices.Equal(got.Shape(), want.Shape()) || got.Dtype() != want.Dtype() {
				t.Fatalf("k %d: shape %v %v, want %v %v", c.k, got.Shape(), got.Dtype(), want.Shape(), want.Dtype())
			}
			g, wv := f.ToFloat32s(got), f.ToFloat32s(want)
			if err := f.Err(); err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(g, wv) {
				t.Fatalf("k %d, %d bits, %v: packed rows differ from MLX's dequantization", c.k, c.bits, c.scales)
			}
			f.Free()
		}
	})
}

// BenchmarkAffineLinearPacked is BenchmarkAffineLinear's q8 case on packed
// weights: a SmolLM2-sized MLP matrix (1536x576, 4-bit, groups of 32).
func BenchmarkAffineLinearPacked(b *testing.B) {
	th := NewThread()
	defer th.Close()
	for _, m := range []int{1, 4, 8, 32, 128} {
		b.Run(fmt.Sprintf("rows=%d", m), func(b *testing.B) {
			th.Do(func() {
				s := CPU()
				defer s.Free()
				if !PackedQ8(576, 4) {
					b.Skip("no AVX-512 VNNI")
				}
				f := NewFrame(s)
				defer f.Free()
				rng := rand.New(rand.NewPCG(7, 8))
				w, sc, bi := quantized(f, rng, 1536, 576, 32, 4, Float16)
				x := randomRows(f, rng, m, 576)
				if err := f.Eval(x); err != nil {
					b.Fatal(err)
				}
				pw, ps, pb := pack(b, f, s, w, sc, bi, 32, 4)
				b.ResetTimer()
				for range b.N {
					g := NewFrame(s)
					if err := g.Eval(g.AffineLinearPacked(x, pw, ps, pb, 4)); err != nil {
						b.Fatal(err)
					}
					g.Free()
				}
				b.ReportMetric(float64(b.Elapsed().Microseconds())/float64(b.N)/float64(m), "us/row")
			})
		})
	}
}
