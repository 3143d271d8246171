/*
 * The subset of mlx-c's C API this project uses, with mlx-c's names,
 * handle types, argument order (result first) and int status returns.
 * By default shim.cpp implements it over the MLX C++ headers of the
 * installed wheel; the build tag mlxc links an upstream libmlxc instead.
 * Functions marked "extension" are not in upstream mlx-c.
 */
#ifndef PROVIDER_MLXC_H
#define PROVIDER_MLXC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/*
 * Go (cgo compiles this header as C) sees the handles of arrays and
 * streams as integers: they only ever hold C++ heap pointers, and a
 * pointer field would make Go check each handle passed to C for Go
 * pointers, a cost on every one of a step's thousand ops. Same size,
 * alignment and calling convention as the pointer the C++ side sees.
 */
#ifdef __cplusplus
typedef struct mlx_array_ { void* ctx; } mlx_array;
typedef struct mlx_stream_ { void* ctx; } mlx_stream;
#else
typedef struct mlx_array_ { uintptr_t ctx; } mlx_array;
typedef struct mlx_stream_ { uintptr_t ctx; } mlx_stream;
#endif
typedef struct mlx_vector_array_ { void* ctx; } mlx_vector_array;

typedef enum mlx_dtype_ {
  MLX_BOOL,
  MLX_UINT8,
  MLX_UINT16,
  MLX_UINT32,
  MLX_UINT64,
  MLX_INT8,
  MLX_INT16,
  MLX_INT32,
  MLX_INT64,
  MLX_FLOAT16,
  MLX_FLOAT32,
  MLX_FLOAT64,
  MLX_BFLOAT16,
  MLX_COMPLEX64,
} mlx_dtype;

typedef struct mlx_optional_int_ { int value; bool has_value; } mlx_optional_int;
typedef struct mlx_optional_float_ { float value; bool has_value; } mlx_optional_float;
typedef struct mlx_optional_dtype_ { mlx_dtype value; bool has_value; } mlx_optional_dtype;

typedef void (*mlx_error_handler_func)(const char* msg, void* data);
void mlx_set_error_handler(mlx_error_handler_func handler, void* data, void (*dtor)(void*));

/* arrays */
mlx_array mlx_array_new(void);
/* extension: frees the n arrays at a (a frame's, in one call). */
int mlx_array_free_n(mlx_array* a, size_t n);
int mlx_array_free(mlx_array arr);
int mlx_array_set(mlx_array* arr, const mlx_array src);
mlx_array mlx_array_new_data(const void* data, const int* shape, int dim, mlx_dtype dtype);
mlx_array mlx_array_new_float(float val);
mlx_array mlx_array_new_int(int val);
size_t mlx_array_itemsize(const mlx_array arr);
size_t mlx_array_size(const mlx_array arr);
size_t mlx_array_nbytes(const mlx_array arr);
size_t mlx_array_ndim(const mlx_array arr);
const int* mlx_array_shape(const mlx_array arr);
int mlx_array_dim(const mlx_array arr, int dim);
mlx_dtype mlx_array_dtype(const mlx_array arr);
int mlx_array_eval(mlx_array arr);
int mlx_array_item_float32(float* res, const mlx_array arr);
int mlx_array_item_int32(int32_t* res, const mlx_array arr);
const float* mlx_array_data_float32(const mlx_array arr);
const int32_t* mlx_array_data_int32(const mlx_array arr);
const uint32_t* mlx_array_data_uint32(const mlx_array arr);
const uint16_t* mlx_array_data_uint16(const mlx_array arr); /* extension: fp16/bf16 bits */
const uint8_t* mlx_array_data_uint8(const mlx_array arr);

/* vectors of arrays */
mlx_vector_array mlx_vector_array_new(void);
int mlx_vector_array_free(mlx_vector_array vec);
mlx_vector_array mlx_vector_array_new_data(const mlx_array* data, size_t size);
int mlx_vector_array_append_value(mlx_vector_array vec, const mlx_array val);
size_t mlx_vector_array_size(mlx_vector_array vec);
int mlx_vector_array_get(mlx_array* res, const mlx_vector_array vec, size_t idx);

/* distributed: a group of processes joined by a communication backend
 * (ring, nccl, jaccl, mpi; "any" picks the first available). A group of
 * size 1 makes the collectives no-ops. */
typedef struct mlx_distributed_group_ { void* ctx; } mlx_distributed_group;
bool mlx_distributed_is_available(const char* bk);
mlx_distributed_group mlx_distributed_init(bool strict, const char* bk);
int mlx_distributed_group_rank(mlx_distributed_group group);
int mlx_distributed_group_size(mlx_distributed_group group);
/* extension: release a group handle (upstream keeps groups alive). */
int mlx_distributed_group_free(mlx_distributed_group group);
int mlx_distributed_all_sum(mlx_array* res, const mlx_array x, const mlx_distributed_group group, const mlx_stream s);
int mlx_distributed_all_gather(mlx_array* res, const mlx_array x, const mlx_distributed_group group, const mlx_stream s);

/* streams and devices */
mlx_stream mlx_default_cpu_stream_new(void);
mlx_stream mlx_default_gpu_stream_new(void);
int mlx_stream_free(mlx_stream stream);
int mlx_gpu_is_available(bool* res); /* extension */
/* extension: the memory MLX's device_info reports for the device of stream
 * s. gpu: the device is a GPU. total: the first size of
 * "max_recommended_working_set_size" (Metal: the GPU's share of unified
 * memory), "total_memory" (CUDA), "memory_size"; 0 when none is reported
 * (the CPU device), with *total_key NULL, else the key used (a static
 * string). free_bytes: "free_memory" (CUDA), with has_free false and 0 when
 * not reported. */
int mlx_stream_device_memory(bool* gpu, size_t* total, const char** total_key, size_t* free_bytes, bool* has_free, const mlx_stream s);

/* transforms and memory */
int mlx_eval(const mlx_vector_array outputs);
int mlx_async_eval(const mlx_vector_array outputs);
/* extension: the primitives evaluating outputs would run, one name per
 * line (an op with several outputs once), into a malloc'd string the
 * caller frees; arrays already evaluated are not descended into. */
int mlx_graph_primitives(char** res, const mlx_vector_array outputs);
/* extension: whether a has been queued for evaluation (or evaluated). */
int mlx_array_queued(bool* res, const mlx_array a);
/* extension: whether a, evaluated, lies row-contiguous in its buffer. */
int mlx_array_row_contiguous(bool* res, const mlx_array a);
/* extension: evaluate outputs one primitive at a time, each eval waited for
   before the next (see EvalStepwise). */
int mlx_eval_stepwise(const mlx_vector_array outputs);
int mlx_get_active_memory(size_t* res);
int mlx_get_peak_memory(size_t* res);
int mlx_reset_peak_memory(void);
int mlx_get_cache_memory(size_t* res);
int mlx_set_cache_limit(size_t* res, size_t limit);
int mlx_set_memory_limit(size_t* res, size_t limit);
int mlx_clear_cache(void);

/* element-wise and reductions */
int mlx_add(mlx_array* res, const mlx_array a, const mlx_array b, const mlx_stream s);
int mlx_subtract(mlx_array* res, const mlx_array a, const mlx_array b, const mlx_stream s);
int mlx_multiply(mlx_array* res, const mlx_array a, const mlx_array b, const mlx_stream s);
int mlx_divide(mlx_array* res, const mlx_array a, const mlx_array b, const mlx_stream s);
int mlx_maximum(mlx_array* res, const mlx_array a, const mlx_array b, const mlx_stream s);
int mlx_minimum(mlx_array* res, const mlx_array a, const mlx_array b, const mlx_stream s);
int mlx_power(mlx_array* res, const mlx_array a, const mlx_array b, const mlx_stream s);
int mlx_greater(mlx_array* res, const mlx_array a, const mlx_array b, const mlx_stream s);
int mlx_less(mlx_array* res, const mlx_array a, const mlx_array b, const mlx_stream s);
int mlx_equal(mlx_array* res, const mlx_array a, const mlx_array b, const mlx_stream s);
int mlx_where(mlx_array* res, const mlx_array cond, const mlx_array x, const mlx_array y, const mlx_stream s);
int mlx_negative(mlx_array* res, const mlx_array a, const mlx_stream s);
int mlx_abs(mlx_array* res, const mlx_array a, const mlx_stream s);
int mlx_round(mlx_array* res, const mlx_array a, int decimals, const mlx_stream s);
int mlx_exp(mlx_array* res, const mlx_array a, const mlx_stream s);
int mlx_log(mlx_array* res, const mlx_array a, const mlx_stream s);
int mlx_sqrt(mlx_array* res, const mlx_array a, const mlx_stream s);
int mlx_rsqrt(mlx_array* res, const mlx_array a, const mlx_stream s);
int mlx_square(mlx_array* res, const mlx_array a, const mlx_stream s);
int mlx_sigmoid(mlx_array* res, const mlx_array a, const mlx_stream s);
/* extension: silu(g) * u as one compiled (fused, shapeless) function. */
int mlx_swiglu_compiled(mlx_array* res, const mlx_array g, const mlx_array u, const mlx_stream s);
int mlx_clamped_swiglu_compiled(
    mlx_array* res, const mlx_array g, const mlx_array u, float alpha, float limit, const mlx_stream s);
/* extension: whether MLX's CUDA backend is present and sees a device. */
int mlx_cuda_available(bool* res);
/* extension: the affine matrix-vector kernel's setting (PROVIDER_GPU_QMV,
   PROVIDER_GPU_QMV_ROWS), read once from the environment, is read again
   at the next product. */
void mlx_cuda_gemv_reload(void);
/* extension: turns the affine tensor-core kernel on or off (what
   PROVIDER_GPU_QMMA set) until the setting is read again; returns the
   setting before. */
bool mlx_cuda_set_qmma(bool on);
/* extension: one layer's attention of single-token queries over a paged KV
   pool, as a CUDA kernel, or split at each row's blocks and merged (see
   Frame.PagedDecode). */
int mlx_cuda_paged_decode(mlx_array* res, const mlx_array q, const mlx_array k_pool, const mlx_array v_pool,
                          const mlx_array table, const mlx_array meta, int block, int window, float scale,
                          const mlx_array sinks, int keys, bool split, const mlx_stream s);
/* extension: a fused q/k/v projection's heads split into q, k and v, q's
   and k's rotated at each token's position, as one CUDA kernel, which
   also writes k and v into the KV pool k_pool, v_pool at slots where they
   are given and fit (*stored then true; see Frame.HeadsRoPE). */
int mlx_cuda_heads_rope(mlx_vector_array* res, const mlx_array y, int heads, int kv_heads, int head_dim, int dims,
                        bool traditional, mlx_optional_float base, float scale, const mlx_array positions,
                        const mlx_array freqs, const mlx_array k_pool, const mlx_array v_pool, const mlx_array slots,
                        bool* stored, const mlx_stream s);
/* extension: silu(x[..., :F]) * x[..., F:] as one CUDA kernel (see
   Frame.SwiGLUHalves). */
int mlx_cuda_swiglu_halves(mlx_array* res, const mlx_array x, const mlx_stream s);
/* extension: a mixture's MXFP4 expert products, y [P, N] = x[p / topk] @
   dequantize(w[idx[p]]).T (+ bias[idx[p]]), topk = P / x's rows, as one
   CUDA kernel where it takes them (a CUDA stream, at most 1,024 pairs);
   otherwise res is left empty (see Frame.GatherFP4). */
int mlx_cuda_gather_fp4(mlx_vector_array* res, const mlx_array x, const mlx_array w, const mlx_array scales,
                        const mlx_array idx, const mlx_array bias, const mlx_stream s);
/* extension: residual + x @ dequantize(w).T as one CUDA kernel where the
   affine matrix-vector kernel takes the product; otherwise res is left
   empty (see Frame.AffineLinearAdd). */
int mlx_cuda_affine_gemv_add(mlx_vector_array* res, const mlx_array x, const mlx_array w, const mlx_array scales,
                             const mlx_array biases, int group_size, int bits, const mlx_array residual,
                             const mlx_stream s);
/* extension: silu and product of the halves of x @ dequantize(w).T (x
   RMS-normalized by norm first unless norm is empty) as one CUDA kernel,
   or res left empty (see Frame.AffineLinearSwiGLU). */
int mlx_cuda_affine_gemv_swiglu(mlx_vector_array* res, const mlx_array x, const mlx_array w, const mlx_array scales,
                                const mlx_array biases, int group_size, int bits, const mlx_array norm, float eps,
                                const mlx_stream s);
/* extension: x @ dequantize(w).T split into heads and rotated as
   mlx_cuda_heads_rope does (x RMS-normalized by norm first unless norm is
   empty; k and v into the pool as it does), as one CUDA kernel, or res
   left empty (see Frame.AffineLinearHeadsRoPE). */
int mlx_cuda_affine_gemv_heads_rope(mlx_vector_array* res, const mlx_array x, const mlx_array w,
                                    const mlx_array scales, const mlx_array biases, int group_size, int bits,
                                    const mlx_array norm, float eps, int heads, int kv_heads, int head_dim, int dims,
                                    bool traditional,
                                    mlx_optional_float base, float scale, const mlx_array positions,
                                    const mlx_array freqs, const mlx_array k_pool, const mlx_array v_pool,
                                    const mlx_array slots, bool* stored, const mlx_stream s);
/* extension: sets how far the products above fuse (0 to 2, what
   PROVIDER_GPU_QMV_FUSED set) until the setting is read again; returns
   the setting before. */
int mlx_cuda_set_qmv_fused(int level);
int mlx_tanh(mlx_array* res, const mlx_array a, const mlx_stream s);
int mlx_erf(mlx_array* res, const mlx_array a, const mlx_stream s);
int mlx_cos(mlx_array* res, const mlx_array a, const mlx_stream s);
int mlx_sin(mlx_array* res, const mlx_array a, const mlx_stream s);
int mlx_clip(mlx_array* res, const mlx_array a, const mlx_array a_min, const mlx_array a_max, const mlx_stream s);
int mlx_astype(mlx_array* res, const mlx_array a, mlx_dtype dtype, const mlx_stream s);
int mlx_sum_axis(mlx_array* res, const mlx_array a, int axis, bool keepdims, const mlx_stream s);
int mlx_mean_axis(mlx_array* res, const mlx_array a, int axis, bool keepdims, const mlx_stream s);
int mlx_max_axis(mlx_array* res, const mlx_array a, int axis, bool keepdims, const mlx_stream s);
int mlx_argmax_axis(mlx_array* res, const mlx_array a, int axis, bool keepdims, const mlx_stream s);
int mlx_logsumexp_axis(mlx_array* res, const mlx_array a, int axis, bool keepdims, const mlx_stream s);
int mlx_softmax_axis(mlx_array* res, const mlx_array a, int axis, bool precise, const mlx_stream s);
int mlx_cumsum(mlx_array* res, const mlx_array a, int axis, bool reverse, bool inclusive, const mlx_stream s);
int mlx_argsort_axis(mlx_array* res, const mlx_array a, int axis, const mlx_stream s);
int mlx_argpartition_axis(mlx_array* res, const mlx_array a, int kth, int axis, const mlx_stream s);
int mlx_topk_axis(mlx_array* res, const mlx_array a, int k, int axis, const mlx_stream s);

/* shape and indexing */
int mlx_reshape(mlx_array* res, const mlx_array a, const int* shape, size_t shape_num, const mlx_stream s);
int mlx_transpose_axes(mlx_array* res, const mlx_array a, const int* axes, size_t axes_num, const mlx_stream s);
int mlx_swapaxes(mlx_array* res, const mlx_array a, int axis1, int axis2, const mlx_stream s);
int mlx_expand_dims(mlx_array* res, const mlx_array a, int axis, const mlx_stream s);
int mlx_squeeze_axis(mlx_array* res, const mlx_array a, int axis, const mlx_stream s);
int mlx_broadcast_to(mlx_array* res, const mlx_array a, const int* shape, size_t shape_num, const mlx_stream s);
int mlx_concatenate_axis(mlx_array* res, const mlx_vector_array arrays, int axis, const mlx_stream s);
int mlx_split(mlx_vector_array* res, const mlx_array a, int num_splits, int axis, const mlx_stream s);
int mlx_slice(mlx_array* res, const mlx_array a, const int* start, size_t start_num, const int* stop, size_t stop_num, const int* strides, size_t strides_num, const mlx_stream s);
/* extension: a view of a's elements (a row-contiguous array when
   evaluated) with the given shape and strides, offset elements in: one
   primitive, where mlx_as_strided makes two (it flattens a first). */
int mlx_view_strided(mlx_array* res, const mlx_array a, const int* shape, size_t shape_num, const int64_t* strides, size_t strides_num, size_t offset, const mlx_stream s);
int mlx_slice_update(mlx_array* res, const mlx_array src, const mlx_array update, const int* start, size_t start_num, const int* stop, size_t stop_num, const int* strides, size_t strides_num, const mlx_stream s);
int mlx_take_axis(mlx_array* res, const mlx_array a, const mlx_array indices, int axis, const mlx_stream s);
int mlx_take_along_axis(mlx_array* res, const mlx_array a, const mlx_array indices, int axis, const mlx_stream s);
int mlx_put_along_axis(mlx_array* res, const mlx_array a, const mlx_array indices, const mlx_array values, int axis, const mlx_stream s);
int mlx_contiguous(mlx_array* res, const mlx_array a, bool allow_col_major, const mlx_stream s);
int mlx_copy(mlx_array* res, const mlx_array a, const mlx_stream s);

/* construction */
int mlx_zeros(mlx_array* res, const int* shape, size_t shape_num, mlx_dtype dtype, const mlx_stream s);
int mlx_full(mlx_array* res, const int* shape, size_t shape_num, const mlx_array vals, mlx_dtype dtype, const mlx_stream s);
int mlx_arange(mlx_array* res, double start, double stop, double step, mlx_dtype dtype, const mlx_stream s);
int mlx_tril(mlx_array* res, const mlx_array x, int k, const mlx_stream s);

/* linear algebra and quantization */
int mlx_matmul(mlx_array* res, const mlx_array a, const mlx_array b, const mlx_stream s);
int mlx_addmm(mlx_array* res, const mlx_array c, const mlx_array a, const mlx_array b, float alpha, float beta, const mlx_stream s);
int mlx_quantize(mlx_vector_array* res, const mlx_array w, mlx_optional_int group_size, mlx_optional_int bits, const char* mode, const mlx_array global_scale, const mlx_stream s);
int mlx_dequantize(mlx_array* res, const mlx_array w, const mlx_array scales, const mlx_array biases, mlx_optional_int group_size, mlx_optional_int bits, const char* mode, const mlx_array global_scale, mlx_optional_dtype dtype, const mlx_stream s);
int mlx_quantized_matmul(mlx_array* res, const mlx_array x, const mlx_array w, const mlx_array scales, const mlx_array biases, bool transpose, mlx_optional_int group_size, mlx_optional_int bits, const char* mode, const mlx_stream s);
int mlx_gather_qmm(mlx_array* res, const mlx_array x, const mlx_array w, const mlx_array scales, const mlx_array biases, const mlx_array lhs_indices, const mlx_array rhs_indices, bool transpose, mlx_optional_int group_size, mlx_optional_int bits, const char* mode, bool sorted_indices, const mlx_stream s);
int mlx_gather_mm(mlx_array* res, const mlx_array a, const mlx_array b, const mlx_array lhs_indices, const mlx_array rhs_indices, bool sorted_indices, const mlx_stream s);

/* fast */
int mlx_fast_rms_norm(mlx_array* res, const mlx_array x, const mlx_array weight, float eps, const mlx_stream s);
int mlx_fast_rope(mlx_array* res, const mlx_array x, int dims, bool traditional, mlx_optional_float base, float scale, int offset, const mlx_array freqs, const mlx_stream s);
int mlx_fast_rope_dynamic(mlx_array* res, const mlx_array x, int dims, bool traditional, mlx_optional_float base, float scale, const mlx_array offset, const mlx_array freqs, const mlx_stream s);
int mlx_fast_scaled_dot_product_attention(mlx_array* res, const mlx_array queries, const mlx_array keys, const mlx_array values, float scale, const char* mask_mode, const mlx_array mask_arr, const mlx_array sinks, const mlx_stream s);

/* extension (refnum.cpp): ops evaluated on the CPU exactly as ggml's CPU
 * backend (x86-64 AVX2+FMA) evaluates them; float32 results */
enum { MLX_REF_F32 = 0, MLX_REF_Q4_1 = 1, MLX_REF_Q8_0 = 2 };
int mlx_ref_linear(mlx_array* res, const mlx_array x, const mlx_array w, const mlx_array scales, const mlx_array biases, int kind);
int mlx_ref_rms_norm(mlx_array* res, const mlx_array x, const mlx_array weight, float eps);
int mlx_ref_rope(mlx_array* res, const mlx_array x, int dims, bool traditional, float base, float scale, const mlx_array offsets);
int mlx_ref_attention(mlx_array* res, const mlx_array q, const mlx_array k, const mlx_array v, float scale, bool batched);
int mlx_ref_swiglu(mlx_array* res, const mlx_array gate, const mlx_array up);

/* random */
int mlx_random_key(mlx_array* res, uint64_t seed);
int mlx_random_categorical(mlx_array* res, const mlx_array logits, int axis, const mlx_array key, const mlx_stream s);

#ifdef __cplusplus
}
#endif

#endif
