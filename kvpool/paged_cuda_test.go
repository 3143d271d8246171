package kvpool

import (
	"testing"

	"github.com/goprovider/provider/mlx"
)

// TestAttendPagedCUDA runs TestAttendMatchesNaive's steps on MLX's CUDA
// backend, where single-token rows attend through the paged decode kernel
// (mlx PagedDecode), in float32 and float16, with head sizes the kernel
// serves (64 and 128), one and four keys per warp turn, through the split
// kernel (PROVIDER_GPU_PAGED=split: every decode row, a lone one too),
// with lone rows through MLX's attention over a view of the pool (the
// default) and, up to a block's keys, through the kernel
// (PROVIDER_GPU_PAGED_LONE=256),
// and once more through the MLX-ops path they replace. The steps' rows
// pass 256 positions, so the split kernel's queries span two blocks of
// the table, and the narrow window leaves a block empty.
// The float32 bound is looser than the CPU's: MLX's CUDA matmuls of the
// prefill chunks (MLX-ops path) round through TF32.
// It needs a CUDA device and says so where there is none.
func TestAttendPagedCUDA(t *testing.T) {
	th := mlx.NewThread()
	defer th.Close()
	var ok bool
	var err error
	th.Do(func() { ok, err = mlx.CUDAAvailable() })
	if err != nil {
		t.Fatal(err)
	}
	if !ok {
		t.Skip("NEEDS A CUDA DEVICE: MLX's CUDA backend is not in this build or sees no GPU; the paged decode kernel is untested here")
	}
	for _, c := range []struct {
		name string
		d    mlx.Dtype
		D    int
		ops  bool
		tol  float64
		keys int
		env  string
		lone string
	}{
		{"float32-128", mlx.Float32, 128, false, 2e-3, 4, "1", ""},
		{"float32-128-keys1", mlx.Float32, 128, false, 2e-3, 1, "1", ""},
		{"float32-64", mlx.Float32, 64, false, 2e-3, 4, "1", ""},
		{"float32-128-lone256", mlx.Float32, 128, false, 2e-3, 4, "1", "256"},
		{"float32-128-split", mlx.Float32, 128, false, 2e-3, 4, "split", ""},
		{"float16-128", mlx.Float16, 128, false, 1e-2, 4, "1", ""},
		{"float16-128-keys1", mlx.Float16, 128, false, 1e-2, 1, "1", ""},
		{"float16-128-lone256", mlx.Float16, 128, false, 1e-2, 4, "1", "256"},
		{"float16-128-split", mlx.Float16, 128, false, 1e-2, 4, "split", ""},
		{"float16-64-split", mlx.Float16, 64, false, 1e-2, 4, "split", ""},
		{"ops-float32-128", mlx.Float32, 128, true, 2e-3, 4, "1", ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Setenv("PROVIDER_GPU_PAGED", c.env)
			t.Setenv("PROVIDER_GPU_PAGED_LONE", c.lone)
			defer func(k int) { pagedKeys = k }(pagedKeys)
			pagedKeys = c.keys
			th.Do(func() {
				s, err := mlx.GPU()
				if err != nil {
					t.Error(err)
					return
				}
				defer s.Free()
				layers := make([]Layer, len(testLayers))
				for i, l := range testLayers {
					l.HeadDim = c.D
					layers[i] = l
				}
				p, err := New(s, c.d, layers, Options{Ops: c.ops})
				if err != nil {
					t.Error(err)
					return
				}
				defer p.Close()
				if paged, split := p.decode != decodeOps, p.decode == decodeSplit; paged == c.ops || split != (c.env == "split") {
					t.Errorf("paged = %v, split = %v with Ops %v and PROVIDER_GPU_PAGED=%s", paged, split, c.ops, c.env)
					return
				}
				runAttend(t, p, c.D, c.tol)
			})
		})
	}
}
