package mlx

import (
	"errors"
	"math"
	"testing"
)

// onThread runs fn on a locked MLX thread, as all MLX work must.
func onThread(t *testing.T, fn func(s Stream)) {
	t.Helper()
	th := NewThread()
	defer th.Close()
	th.Do(func() {
		s := DefaultStream()
		defer s.Free()
		fn(s)
	})
}

func TestArithmeticAndReadBack(t *testing.T) {
	onThread(t, func(s Stream) {
		f := NewFrame(s)
		defer f.Free()
		a := f.Float32s([]float32{1, 2, 3, 4, 5, 6}, 2, 3)
		b := f.Float32s([]float32{10, 20, 30}, 3)
		got := f.ToFloat32s(f.Add(a, b))
		if err := f.Err(); err != nil {
			t.Fatal(err)
		}
		want := []float32{11, 22, 33, 14, 25, 36}
		for i := range want {
			if got[i] != want[i] {
				t.Fatalf("add[%d] = %v, want %v", i, got[i], want[i])
			}
		}
		m := f.MatMul(a, f.Transpose(a, 1, 0))
		if sh := m.Shape(); len(sh) != 2 || sh[0] != 2 || sh[1] != 2 {
			t.Fatalf("matmul shape %v", sh)
		}
		mm := f.ToFloat32s(m)
		if mm[0] != 14 || mm[1] != 32 || mm[3] != 77 {
			t.Fatalf("matmul = %v", mm)
		}
		// A transposed view reads back in logical (row-major) order.
		tv := f.ToFloat32s(f.Transpose(a, 1, 0))
		if tv[1] != 4 || tv[2] != 2 {
			t.Fatalf("transposed read-back = %v", tv)
		}
	})
}

func TestErrorIsReturnedNotFatal(t *testing.T) {
	onThread(t, func(s Stream) {
		f := NewFrame(s)
		defer f.Free()
		a := f.Float32s([]float32{1, 2, 3}, 3)
		b := f.Float32s([]float32{1, 2}, 2)
		c := f.Add(a, b)
		if c.Valid() {
			t.Fatal("broadcast of [3] and [2] succeeded")
		}
		var me *Error
		if !errors.As(f.Err(), &me) || me.Op != "add" || me.Msg == "" {
			t.Fatalf("err = %v, want an *Error for add", f.Err())
		}
		// The frame's error is sticky: later ops do nothing.
		if d := f.Exp(a); d.Valid() {
			t.Fatal("op after an error produced an array")
		}
		// A fresh frame works again on the same thread.
		g := NewFrame(s)
		defer g.Free()
		if v := g.ToFloat32s(g.Exp(g.Float32s([]float32{0}, 1))); g.Err() != nil || v[0] != 1 {
			t.Fatalf("exp(0) = %v, %v", v, g.Err())
		}
	})
}

func TestMemoryReturnsToBaseline(t *testing.T) {
	onThread(t, func(s Stream) {
		base := ActiveMemory()
		for range 3 {
			f := NewFrame(s)
			x := f.Full(1.5, Float32, 256, 256)
			y := f.MatMul(x, x)
			for range 10 {
				y = f.Add(f.Multiply(y, f.Scalar(0.5)), x)
			}
			kept := f.Keep(y)
			if err := f.Eval(kept); err != nil {
				t.Fatal(err)
			}
			f.Free()
			if ActiveMemory() <= base {
				t.Fatal("kept array holds no memory")
			}
			kept.Free()
		}
		if got := ActiveMemory(); got != base {
			t.Fatalf("active memory %d after freeing everything, baseline %d", got, base)
		}
	})
}

func TestQuantizedMatMulMatchesDequantized(t *testing.T) {
	onThread(t, func(s Stream) {
		f := NewFrame(s)
		defer f.Free()
		const out, in = 8, 64
		w := make([]float32, out*in)
		for i := range w {
			w[i] = float32(math.Sin(float64(i) * 0.37))
		}
		x := make([]float32, 2*in)
		for i := range x {
			x[i] = float32(math.Cos(float64(i) * 0.11))
		}
		wa := f.Float32s(w, out, in)
		xa := f.Float32s(x, 2, in)
		for _, bits := range []int{4, 8} {
			wq, sc, bi := f.Quantize(wa, 32, bits, "affine")
			deq := f.Dequantize(wq, sc, bi, 32, bits, "affine")
			ref := f.ToFloat32s(f.MatMul(xa, f.Transpose(deq, 1, 0)))
			got := f.ToFloat32s(f.QuantizedMatMul(xa, wq, sc, bi, true, 32, bits, "affine"))
			if err := f.Err(); err != nil {
				t.Fatal(err)
			}
			for i := range ref {
				if d := math.Abs(float64(ref[i] - got[i])); d > 1e-4 {
					t.Fatalf("bits %d: qmm[%d] = %v, dequantized matmul %v", bits, i, got[i], ref[i])
				}
			}
		}
	})
}

func TestRoPEOffsetsPerRow(t *testing.T) {
	onThread(t, func(s Stream) {
		f := NewFrame(s)
		defer f.Free()
		const dims = 8
		data := make([]float32, 2*dims)
		for i := range data {
			data[i] = float32(i%dims) + 1
		}
		// [B=2, H=1, T=1, D]
		x := f.Float32s(data, 2, 1, 1, dims)
		batched := f.ToFloat32s(f.RoPEOffsets(x, dims, false, 10000, 1, f.Int32s([]int32{3, 7}, 2), Array{}))
		row := f.Float32s(data[:dims], 1, 1, 1, dims)
		at3 := f.ToFloat32s(f.RoPE(row, dims, false, 10000, 1, 3, Array{}))
		at7 := f.ToFloat32s(f.RoPE(row, dims, false, 10000, 1, 7, Array{}))
		if err := f.Err(); err != nil {
			t.Fatal(err)
		}
		for i := range dims {
			if batched[i] != at3[i] || batched[dims+i] != at7[i] {
				t.Fatalf("per-row offsets differ at %d: %v vs %v/%v", i, batched, at3, at7)
			}
		}
	})
}

// TestGatherMatMulPicksEachRowsExpert checks the mixture-of-experts
// products against plain matmuls of the picked matrices: GatherMM over
// float experts, and GatherQMM over the same experts quantized to MXFP4
// against the matmul of their dequantized values.
func TestGatherMatMulPicksEachRowsExpert(t *testing.T) {
	onThread(t, func(s Stream) {
		f := NewFrame(s)
		defer f.Free()
		const experts, out, in = 3, 4, 64
		w := make([]float32, experts*out*in)
		for i := range w {
			w[i] = float32(math.Sin(float64(i)*0.29)) * 2
		}
		x := make([]float32, 2*in)
		for i := range x {
			x[i] = float32(math.Cos(float64(i) * 0.13))
		}
		wa := f.Float32s(w, experts, out, in)
		// Two tokens, two experts each: [tokens, 1, 1, in] against
		// [tokens, k] picks gives [tokens, k, 1, out].
		xa := f.Reshape(f.Float32s(x, 2, in), 2, 1, 1, in)
		picks := []int32{2, 0, 1, 2}
		idx := f.Int32s(picks, 2, 2)
		want := func(experts Array) []float32 {
			var rows []Array
			for i, e := range picks {
				tok := f.Reshape(f.Slice(xa, []int{i / 2, 0, 0, 0}, []int{i/2 + 1, 1, 1, in}), 1, in)
				m := f.Reshape(f.Slice(experts, []int{int(e), 0, 0}, []int{int(e) + 1, out, in}), out, in)
				rows = append(rows, f.MatMul(tok, f.Transpose(m, 1, 0)))
			}
			return f.ToFloat32s(f.Concatenate(0, rows...))
		}
		check := func(name string, got, ref []float32, tol float64) {
			t.Helper()
			if err := f.Err(); err != nil {
				t.Fatal(err)
			}
			if len(got) != len(ref) {
				t.Fatalf("%s: %d values, want %d", name, len(got), len(ref))
			}
			for i := range ref {
				if d := math.Abs(float64(got[i] - ref[i])); d > tol {
					t.Fatalf("%s[%d] = %v, want %v", name, i, got[i], ref[i])
				}
			}
		}
		plain := f.GatherMM(xa, f.SwapAxes(wa, -1, -2), Array{}, idx, false)
		if sh := plain.Shape(); len(sh) != 4 || sh[0] != 2 || sh[1] != 2 || sh[2] != 1 || sh[3] != out {
			t.Fatalf("gather_mm shape %v, want [2 2 1 %d]", sh, out)
		}
		check("gather_mm", f.ToFloat32s(plain), want(wa), 1e-5)

		wq, sc, bi := f.Quantize(wa, 32, 4, "mxfp4")
		if bi.Valid() || sc.Dtype() != Uint8 {
			t.Fatalf("mxfp4 scales %v, biases %v: want uint8 scales and no biases", sc.Dtype(), bi.Valid())
		}
		deq := f.Dequantize(wq, sc, Array{}, 32, 4, "mxfp4")
		got := f.ToFloat32s(f.GatherQMM(xa, wq, sc, Array{}, Array{}, idx, true, 32, 4, "mxfp4", false))
		check("gather_qmm mxfp4", got, want(deq), 1e-4)
		// Sorted picks give the same products.
		sorted := f.Int32s([]int32{0, 1, 2, 2}, 4)
		xs := f.Reshape(f.Take(f.Reshape(xa, 2, in), f.Int32s([]int32{0, 1, 1, 0}, 4), 0), 4, 1, in)
		gotSorted := f.ToFloat32s(f.GatherQMM(xs, wq, sc, Array{}, Array{}, sorted, true, 32, 4, "mxfp4", true))
		unsorted := f.ToFloat32s(f.GatherQMM(xs, wq, sc, Array{}, Array{}, sorted, true, 32, 4, "mxfp4", false))
		check("gather_qmm sorted", gotSorted, unsorted, 0)
	})
}

// TestAddMMIsLinearWithBias checks the fused product and bias against the
// two ops it replaces.
func TestAddMMIsLinearWithBias(t *testing.T) {
	onThread(t, func(s Stream) {
		f := NewFrame(s)
		defer f.Free()
		a := f.Float32s([]float32{1, 2, 3, 4, 5, 6}, 2, 3)
		b := f.Float32s([]float32{1, 0, -1, 2, 0.5, 1}, 3, 2)
		c := f.Float32s([]float32{10, -10}, 2)
		got := f.ToFloat32s(f.AddMM(c, a, b, 1, 1))
		want := f.ToFloat32s(f.Add(f.MatMul(a, b), c))
		if err := f.Err(); err != nil {
			t.Fatal(err)
		}
		for i := range want {
			if got[i] != want[i] {
				t.Fatalf("addmm = %v, matmul + bias = %v", got, want)
			}
		}
	})
}

// TestViewStrided checks ViewStrided against the slice, reshape and
// transpose it replaces (a pool's keys as attention reads them), on an
// array that is itself a computation's result: the same floats from one
// primitive. A view past the array's end is refused.
func TestViewStrided(t *testing.T) {
	onThread(t, func(s Stream) {
		f := NewFrame(s)
		defer f.Free()
		const slots, kv, d, from, r, l = 40, 3, 8, 5, 2, 7
		data := make([]float32, slots*kv*d)
		for i := range data {
			data[i] = float32(i)
		}
		pool := f.Add(f.Float32s(data, slots, kv, d), f.Scalar(1))
		want := f.Transpose(f.Reshape(f.Slice(pool, []int{from, 0, 0}, []int{from + r*l, kv, d}), r, l, kv, d), 0, 2, 1, 3)
		got := f.ViewStrided(pool, []int{r, kv, l, d}, []int{l * kv * d, d, kv * d, 1}, from*kv*d)
		counts, err := GraphPrimitives(got)
		if err != nil {
			t.Fatal(err)
		}
		if counts["AsStrided"] != 1 || counts["Add"] != 1 || counts["Transpose"]+counts["Slice"]+counts["Reshape"] != 0 {
			t.Fatalf("view of a sum: %v, want one AsStrided over the Add", counts)
		}
		g, w := f.ToFloat32s(got), f.ToFloat32s(want)
		if err := f.Err(); err != nil {
			t.Fatal(err)
		}
		if len(g) != r*kv*l*d || len(g) != len(w) {
			t.Fatalf("%d floats, want %d", len(g), len(w))
		}
		for i := range g {
			if g[i] != w[i] {
				t.Fatalf("element %d: %v, want %v", i, g[i], w[i])
			}
		}
		f.ViewStrided(pool, []int{r, kv, l, d}, []int{l * kv * d, d, kv * d, 1}, (slots-r*l+1)*kv*d)
		if f.Err() == nil {
			t.Fatal("a view past the array's end was not refused")
		}
	})
}
