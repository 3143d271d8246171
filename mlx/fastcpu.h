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

// mlx_fast_affine_linear_q8 is mlx_fast_affine_linear with the activations
// quantized to signed 8-bit blocks of 32 (a float scale each) and the
// products taken in integers (AVX-512 VNNI or AVX2), where the processor has it,
// the input length is whole chunks of 64 and the groups whole blocks of 32;
// otherwise it is mlx_fast_affine_linear.
int mlx_fast_affine_linear_q8(mlx_array* res, const mlx_array x, const mlx_array w, const mlx_array scales,
                              const mlx_array biases, int group_size, int bits, const mlx_stream s);

// Packed integer kernel (fastcpu.cpp): mlx_fast_pack_q8 repacks 2-D
// affine weights (groups a multiple of 32) for it, eagerly, into uint8 wp
// [n, k*bits/8] and per-block (32 elements) scales and biases [n, k/32];
// mlx_fast_affine_linear_packed is x @ dequantize(w).T with 8-bit
// activations over them; mlx_fast_packed_embed gathers and dequantizes
// rows of them for token ids, as mlx_dequantize would the originals. All
// run on a CPU stream only, where mlx_fast_packed_ok(k, bits) is 1 (AVX-512
// VNNI or AVX2, bits 4 or 8, k whole blocks of 32).
int mlx_fast_pack_q8(mlx_array* wp, mlx_array* sp, mlx_array* bp, const mlx_array w, const mlx_array scales,
                     const mlx_array biases, int group_size, int bits, const mlx_stream s);
int mlx_fast_affine_linear_packed(mlx_array* res, const mlx_array x, const mlx_array w, const mlx_array scales,
                                  const mlx_array biases, int bits, const mlx_stream s);
int mlx_fast_packed_embed(mlx_array* res, const mlx_array ids, const mlx_array w, const mlx_array scales,
                          const mlx_array biases, int bits, const mlx_stream s);
int mlx_fast_packed_ok(int k, int bits);

// The following are mlx_fast_rms_norm, mlx_fast_rope (offsets, when not
// null, gives one offset per batch row and replaces offset) and
// mlx_fast_scaled_dot_product_attention, evaluated as single fused CPU
// primitives on a CPU stream with float32 inputs (attention: no mask array)
// and by MLX otherwise.
int mlx_fast_cpu_rms_norm(mlx_array* res, const mlx_array x, const mlx_array weight, float eps, const mlx_stream s);
// mlx_fast_cpu_swiglu is g * sigmoid(g) * u as one fused primitive on a
// CPU stream with float32 inputs of one shape; otherwise MLX's three ops.
int mlx_fast_cpu_swiglu(mlx_array* res, const mlx_array g, const mlx_array u, const mlx_stream s);
int mlx_fast_cpu_rope(mlx_array* res, const mlx_array x, int dims, bool traditional, mlx_optional_float base,
                      float scale, int offset, const mlx_array offsets, const mlx_array freqs, const mlx_stream s);
int mlx_fast_cpu_sdpa(mlx_array* res, const mlx_array q, const mlx_array k, const mlx_array v, float scale,
                      const char* mask_mode, const mlx_array mask, const mlx_array sinks, const mlx_stream s);

// mlx_fast_paged_attention is one layer's attention over a paged KV pool,
// evaluated on the CPU stream as one primitive (float32 only). It first
// writes k_new and v_new ([N, KVH, D], may be null for a layer that reads
// another layer's pool) into k_pool and v_pool ([slots, KVH, D], evaluated,
// row-contiguous) at slots[i], in place; then query token i of q [N, H, D],
// at row meta[i][0] and position meta[i][1], attends over its row's
// positions max(0, p - window + 1) .. p (window 0: 0 .. p), found at slot
// table[row][pos / block] * block + pos % block. sinks (may be null) adds
// one logit per head to each softmax's denominator.
int mlx_fast_paged_attention(mlx_array* res, const mlx_array q, const mlx_array k_new, const mlx_array v_new,
                             const mlx_array k_pool, const mlx_array v_pool, const mlx_array slots,
                             const mlx_array table, const mlx_array meta, int block, int window, float scale,
                             const mlx_array sinks, const mlx_stream s);

// mlx_fast_buffer allocates an evaluated row-contiguous array: on the CPU
// uninitialized (untouched pages cost nothing), elsewhere zeros.
// mlx_fast_buffer_grow returns a copy of old with its first dimension
// grown to rows (the new rows uninitialized on the CPU, zeros elsewhere),
// after the stream's pending work has finished.
int mlx_fast_buffer(mlx_array* res, const int* shape, size_t ndim, mlx_dtype dtype, const mlx_stream s);
int mlx_fast_buffer_grow(mlx_array* res, const mlx_array old, int rows, const mlx_stream s);

// mlx_fast_stream_is_cpu is 1 for a CPU stream, else 0.
int mlx_fast_stream_is_cpu(const mlx_stream s);

// mlx_fast_cpu_int8 is 1 when mlx_fast_affine_linear_q8 takes its
// integer path on this processor (AVX2, or AVX-512 VNNI), else 0.
int mlx_fast_cpu_int8(void);

// mlx_fast_cpu_threads sets the threads of the CPU kernels (0: one per
// hardware thread) and returns the number in use.
int mlx_fast_cpu_threads(int n);

// mlx_fast_cpu_spin sets how many microseconds the CPU kernels' threads
// wait awake for the next kernel before they sleep (negative: 0), and
// returns the previous setting.
int mlx_fast_cpu_spin(int us);

// mlx_fast_version is the MLX library's version string (static storage).
const char* mlx_fast_version(void);

// mlx_fast_cpu_threads_in_use is the number of threads of the CPU kernels.
int mlx_fast_cpu_threads_in_use(void);

#ifdef __cplusplus
}
#endif
