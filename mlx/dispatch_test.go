package mlx

import "testing"

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
