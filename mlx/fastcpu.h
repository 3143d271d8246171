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

// The following are mlx_fast_rms_norm, mlx_fast_rope (offsets, when not
// null, gives one offset per batch row and replaces offset) and
// mlx_fast_scaled_dot_product_attention, evaluated as single fused CPU
// primitives on a CPU stream with float32 inputs (attention: no mask array)
// and by MLX otherwise.
int mlx_fast_cpu_rms_norm(mlx_array* res, const mlx_array x, const mlx_array weight, float eps, const mlx_stream s);
int mlx_fast_cpu_rope(mlx_array* res, const mlx_array x, int dims, bool traditional, mlx_optional_float base,
                      float scale, int offset, const mlx_array offsets, const mlx_array freqs, const mlx_stream s);
int mlx_fast_cpu_sdpa(mlx_array* res, const mlx_array q, const mlx_array k, const mlx_array v, float scale,
                      const char* mask_mode, const mlx_array mask, const mlx_array sinks, const mlx_stream s);

// mlx_fast_cpu_threads sets the threads of the CPU kernels (0: one per
// hardware thread) and returns the number in use.
int mlx_fast_cpu_threads(int n);

#ifdef __cplusplus
}
#endif
