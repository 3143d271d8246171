package mlx

/*
#include <stdlib.h>
#include "fastcpu.h"
*/
import "C"

import "unsafe"

// AffineLinear computes x @ dequantize(w).T for MLX affine quantized
// weights. On a CPU stream with 4- or 8-bit weights it runs the package's
// weight-stationary kernel (fastcpu.cpp): a row's weights are unpacked once
// for every activation row of the step, so a batch of rows costs far less
// than that many single rows, and each output is the same float whatever
// the batch. Elsewhere it is QuantizedMatMul. Setting PROVIDER_CPU_QMM=mlx
// in the environment selects MLX's own CPU kernel instead (for comparison).
func (f *Frame) AffineLinear(x, w, scales, biases Array, groupSize, bits int) Array {
	return f.op("affine_linear", func(r *C.mlx_array) C.int {
		return C.mlx_fast_affine_linear(r, x.c, w.c, scales.c, biases.c, C.int(groupSize), C.int(bits), f.s.c)
	}, x, w, scales, biases)
}

// SetCPUThreads sets how many threads the CPU kernels use (0: one per
// hardware thread, the default unless PROVIDER_CPU_THREADS is set) and
// returns the number now in use.
func SetCPUThreads(n int) int { return int(C.mlx_fast_cpu_threads(C.int(n))) }

// The MLX implementations the fused CPU ops replace, for comparison in
// tests.

func (f *Frame) mlxRMSNorm(x, weight Array, eps float32) Array {
	return f.op("rms_norm", func(r *C.mlx_array) C.int {
		return C.mlx_fast_rms_norm(r, x.c, weight.c, C.float(eps), f.s.c)
	}, x)
}

func (f *Frame) mlxRoPE(x Array, dims int, traditional bool, base, scale float32, offset int, offsets, freqs Array) Array {
	b := C.mlx_optional_float{value: C.float(base), has_value: C.bool(!freqs.Valid())}
	return f.op("rope", func(r *C.mlx_array) C.int {
		if offsets.Valid() {
			return C.mlx_fast_rope_dynamic(r, x.c, C.int(dims), C.bool(traditional), b, C.float(scale), offsets.c, freqs.c, f.s.c)
		}
		return C.mlx_fast_rope(r, x.c, C.int(dims), C.bool(traditional), b, C.float(scale), C.int(offset), freqs.c, f.s.c)
	}, x)
}

func (f *Frame) mlxAttention(q, k, v Array, scale float32, maskMode string, sinks Array) Array {
	cmode := C.CString(maskMode)
	defer C.free(unsafe.Pointer(cmode))
	return f.op("scaled_dot_product_attention", func(r *C.mlx_array) C.int {
		return C.mlx_fast_scaled_dot_product_attention(r, q.c, k.c, v.c, C.float(scale), cmode, C.mlx_array{}, sinks.c, f.s.c)
	}, q, k, v)
}
