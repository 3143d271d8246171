package mlx

/*
#include "fastcpu.h"
*/
import "C"

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
