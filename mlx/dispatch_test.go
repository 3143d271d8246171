package mlx

import (
	"slices"
	"testing"
)

// DispatchLayer queues a step's layers each n layers, and nothing else:
// none on the CPU by default, none with n 0.
func TestDispatchLayerQueuesEachGroup(t *testing.T) {
	th := NewThread()
	defer th.Close()
	th.Do(func() {
		s := CPU()
		defer s.Free()
		for _, tc := range []struct {
			force int
			want  []bool // after layers 0, 1, ...
		}{
			{-1, []bool{false, false, false, false}},
			{0, []bool{false, false, false, false}},
			{1, []bool{true, true, true, true}},
			{3, []bool{false, false, true, false}},
		} {
			prev := SetDispatchLayers(tc.force)
			f := NewFrame(s)
			x := f.Scalar(1)
			for li, want := range tc.want {
				x = f.Add(x, f.Scalar(1))
				f.DispatchLayer(li, x)
				got, err := queued(x)
				if err != nil {
					t.Fatal(err)
				}
				if got != want {
					t.Errorf("forced %d, after layer %d: queued %v, want %v", tc.force, li, got, want)
				}
			}
			if err := f.Eval(x); err != nil {
				t.Fatal(err)
			}
			if v := f.ToFloat32s(x); len(v) != 1 || v[0] != 5 {
				t.Errorf("forced %d: sum %v, want 5", tc.force, v)
			}
			f.Free()
			SetDispatchLayers(prev)
		}
	})
}

// TestQueuedPicksReadWithoutNewWork: picks queued in the form the host
// reads (Flat) are read without a new primitive, whose evaluation would
// wait behind whatever was queued after them (a step built ahead), and read
// right; other dtypes, shapes and a strided view are converted and read
// right too.
func TestQueuedPicksReadWithoutNewWork(t *testing.T) {
	th := NewThread()
	defer th.Close()
	th.Do(func() {
		s := CPU()
		defer s.Free()
		f := NewFrame(s)
		defer f.Free()
		logits := f.Float32s([]float32{0, 3, 1, 5, 2, 4}, 2, 3)
		raw := f.Argmax(logits, 1, false)
		ids := f.Flat(raw, Int32)
		if err := f.AsyncEval(ids); err != nil {
			t.Fatal(err)
		}
		// Work queued behind the picks, as a step built ahead is.
		later := f.Add(ids, f.Int32s([]int32{10, 10}, 2))
		if err := f.AsyncEval(later); err != nil {
			t.Fatal(err)
		}
		for _, tc := range []struct {
			name string
			a    Array
			want bool
		}{{"queued picks", ids, true}, {"argmax's own", raw, false}} {
			got, err := queued(f.Flat(tc.a, Int32))
			if err != nil {
				t.Fatal(err)
			}
			if got != tc.want {
				t.Errorf("%s: Flat queued %v, want %v (a new primitive: %v)", tc.name, got, tc.want, !tc.want)
			}
		}
		if got := f.ToInt32s(ids); !slices.Equal(got, []int32{1, 0}) {
			t.Errorf("picks %v, want [1 0]", got)
		}
		if got := f.ToInt32s(later); !slices.Equal(got, []int32{11, 10}) {
			t.Errorf("later %v, want [11 10]", got)
		}
		if got := f.ToFloat32s(f.AsType(logits, Float16)); !slices.Equal(got, []float32{0, 3, 1, 5, 2, 4}) {
			t.Errorf("half logits %v", got)
		}
		// Column 1 of the logits: one dimension, every third element.
		col := f.ViewStrided(logits, []int{2}, []int{3}, 1)
		if got := f.ToFloat32s(col); !slices.Equal(got, []float32{3, 2}) {
			t.Errorf("strided column %v, want [3 2]", got)
		}
		if got := f.ToInt32s(f.AsType(col, Int32)); !slices.Equal(got, []int32{3, 2}) {
			t.Errorf("strided column as int32 %v, want [3 2]", got)
		}
		if err := f.Err(); err != nil {
			t.Fatal(err)
		}
	})
}
