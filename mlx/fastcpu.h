// Fast CPU kernels of this package (fastcpu.cpp), beside the mlx-c subset.
#pragma once

#include "mlxc.h"

#ifdef __cplusplus
extern "C" {
#endif

// mlx_fast_affine_linear computes x @ dequantize(w).T for MLX affine
// quantized weights (w uint32 [n, k*bits/32], scales and biases [n,
// k/group_size]). On a CPU stream with bits 4 or 8 it runs the package's
// weight-stationary kernel across the CPU threads; elsewhere it is
// mlx_quantized_matmul.
int mlx_fast_affine_linear(mlx_array* res, const mlx_array x, const mlx_array w, const mlx_array scales,
                           const mlx_array biases, int group_size, int bits, const mlx_stream s);

// mlx_fast_cpu_threads sets the threads of the CPU kernels (0: one per
// hardware thread) and returns the number in use.
int mlx_fast_cpu_threads(int n);

#ifdef __cplusplus
}
#endif
