package mlx

/*
#include "mlxc.h"
*/
import "C"

// CUDAAvailable reports whether this build of MLX has its CUDA backend and
// it sees a device (false on the CPU and Metal builds).
func CUDAAvailable() (bool, error) {
	var ok C.bool
	if err := check("cuda_available", C.mlx_cuda_available(&ok)); err != nil {
		return false, err
	}
	RestoreSignals()
	return bool(ok), nil
}

// PagedDecode is one layer's attention of P single-token queries q [P, H,
// D] over a paged KV pool, as one CUDA kernel (MLX compiles it on first use
// of each dtype, head size, window and scale). kPool and vPool are [slots,
// KVHeads, D] in q's dtype; table [R, MB] int32 holds each row's blocks of
// block slots; meta [P, 3] int32 holds each query's row, position and last
// visible position. A query sees the keys of its row from max(0, position
// - window + 1) (0 when window is 0) through its last visible position;
// heads share a key head in groups of H / KVHeads; sinks [H] (invalid for
// none) is one logit per head in each softmax's denominator. Each warp of
// a query's block takes keys consecutive keys per turn (1 to 8: loads in
// flight against registers). The result is
// [P, H, D] in q's dtype. It runs only on a CUDA stream: elsewhere the
// frame fails, and callers use the MLX-ops attention (Attention over
// gathered keys), which computes the same.
//
// split computes the same in two kernels: the first takes one block of a
// row's table per block of threads (so a few rows at a long context still
// fill the GPU), the second merges each query's blocks in order. A row
// splits at its own block boundaries, so a query's result does not depend
// on the other rows of the call.
func (f *Frame) PagedDecode(q, kPool, vPool, table, meta Array, block, window int, scale float32, sinks Array, keys int, split bool) Array {
	return f.op("paged_decode", func(r *C.mlx_array) C.int {
		return C.mlx_cuda_paged_decode(r, q.c, kPool.c, vPool.c, table.c, meta.c, C.int(block), C.int(window),
			C.float(scale), sinks.c, C.int(keys), C.bool(split), f.s.c)
	}, q, kPool, vPool, table, meta)
}

// reloadGemvEnv makes the next affine product read PROVIDER_GPU_QMV and
// PROVIDER_GPU_QMV_ROWS again (they are read once otherwise): for tests
// and benchmarks that change them between products.
func reloadGemvEnv() { C.mlx_cuda_gemv_reload() }
