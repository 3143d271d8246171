//go:build !mlxc

// The project's implementation of the mlx-c subset declared in mlxc.h, over
// the MLX C++ API of the installed wheel. Every entry point catches C++
// exceptions and reports them through the installed error handler, so an MLX
// error becomes a status code, never a process exit.

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <functional>
#include <initializer_list>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <tuple>
#include <type_traits>
#include <unordered_set>
#include <utility>
#include <variant>
#include <vector>

#include "hostop.h"
#include "mlx/distributed/distributed.h"
#include "mlx/distributed/ops.h"
#include "mlx/mlx.h"
#include "mlxc.h"

namespace mx = mlx::core;

using provider_host::arr;
using provider_host::guard;
using provider_host::set;

namespace {

mlx_error_handler_func g_handler = nullptr;
void* g_handler_data = nullptr;
void (*g_handler_dtor)(void*) = nullptr;

int fail(const char* msg) {
  if (g_handler != nullptr) {
    g_handler(msg, g_handler_data);
  }
  return 1;
}

mx::Stream& strm(mlx_stream s) {
  return *static_cast<mx::Stream*>(s.ctx);
}

std::vector<mx::array>& vec(mlx_vector_array v) {
  return *static_cast<std::vector<mx::array>*>(v.ctx);
}

std::optional<mx::array> opt(mlx_array a) {
  if (a.ctx == nullptr) {
    return std::nullopt;
  }
  return arr(a);
}

std::optional<int> opt(mlx_optional_int v) {
  if (!v.has_value) {
    return std::nullopt;
  }
  return v.value;
}

std::optional<float> opt(mlx_optional_float v) {
  if (!v.has_value) {
    return std::nullopt;
  }
  return v.value;
}

mx::Dtype to_dtype(mlx_dtype d) {
  switch (d) {
    case MLX_BOOL: return mx::bool_;
    case MLX_UINT8: return mx::uint8;
    case MLX_UINT16: return mx::uint16;
    case MLX_UINT32: return mx::uint32;
    case MLX_UINT64: return mx::uint64;
    case MLX_INT8: return mx::int8;
    case MLX_INT16: return mx::int16;
    case MLX_INT32: return mx::int32;
    case MLX_INT64: return mx::int64;
    case MLX_FLOAT16: return mx::float16;
    case MLX_FLOAT32: return mx::float32;
    case MLX_FLOAT64: return mx::float64;
    case MLX_BFLOAT16: return mx::bfloat16;
    case MLX_COMPLEX64: return mx::complex64;
  }
  throw std::invalid_argument("unknown dtype");
}

mlx_dtype from_dtype(mx::Dtype d) {
  return static_cast<mlx_dtype>(static_cast<int>(d.val()));
}

mx::Shape shape_of(const int* p, size_t n) {
  return mx::Shape(p, p + n);
}

template <typename T>
const T* data_ptr(const mlx_array a) {
  try {
    return arr(a).data<T>();
  } catch (const std::exception& e) {
    fail(e.what());
    return nullptr;
  }
}

} // namespace

// provider_mlx_fail lets the other C++ files of the package report errors
// through the same handler.
int provider_mlx_fail(const char* msg) {
  return fail(msg);
}

extern "C" {

void mlx_set_error_handler(mlx_error_handler_func handler, void* data, void (*dtor)(void*)) {
  if (g_handler_dtor != nullptr) {
    g_handler_dtor(g_handler_data);
  }
  g_handler = handler;
  g_handler_data = data;
  g_handler_dtor = dtor;
}

mlx_array mlx_array_new(void) {
  return mlx_array{nullptr};
}

int mlx_array_free_n(mlx_array* a, size_t n) {
  for (size_t i = 0; i < n; i++) {
    delete static_cast<mx::array*>(a[i].ctx);
  }
  return 0;
}

int mlx_array_free(mlx_array a) {
  return mlx_array_free_n(&a, 1);
}

int mlx_array_set(mlx_array* a, const mlx_array src) {
  return guard([&] { set(a, arr(src)); });
}

mlx_array mlx_array_new_data(const void* data, const int* shape, int dim, mlx_dtype dtype) {
  mlx_array res{nullptr};
  guard([&] {
    mx::Shape sh = shape_of(shape, static_cast<size_t>(dim));
    mx::Dtype dt = to_dtype(dtype);
    size_t n = 1;
    for (int d : sh) {
      n *= static_cast<size_t>(d);
    }
    mx::array a(mx::allocator::malloc(n * dt.size()), sh, dt);
    if (n > 0) {
      std::memcpy(a.data<void>(), data, n * dt.size());
    }
    res.ctx = new mx::array(std::move(a));
  });
  return res;
}

mlx_array mlx_array_new_float(float val) {
  return mlx_array{new mx::array(val)};
}

mlx_array mlx_array_new_int(int val) {
  return mlx_array{new mx::array(val)};
}

size_t mlx_array_itemsize(const mlx_array a) { return arr(a).itemsize(); }
size_t mlx_array_size(const mlx_array a) { return arr(a).size(); }
size_t mlx_array_nbytes(const mlx_array a) { return arr(a).nbytes(); }
size_t mlx_array_ndim(const mlx_array a) { return arr(a).ndim(); }
const int* mlx_array_shape(const mlx_array a) { return arr(a).shape().data(); }
int mlx_array_dim(const mlx_array a, int dim) { return arr(a).shape(dim); }
mlx_dtype mlx_array_dtype(const mlx_array a) { return from_dtype(arr(a).dtype()); }

int mlx_array_eval(mlx_array a) {
  return guard([&] { arr(a).eval(); });
}

int mlx_array_item_float32(float* res, const mlx_array a) {
  return guard([&] { *res = arr(a).item<float>(); });
}

int mlx_array_item_int32(int32_t* res, const mlx_array a) {
  return guard([&] { *res = arr(a).item<int32_t>(); });
}

const float* mlx_array_data_float32(const mlx_array a) { return data_ptr<float>(a); }
const int32_t* mlx_array_data_int32(const mlx_array a) { return data_ptr<int32_t>(a); }
const uint32_t* mlx_array_data_uint32(const mlx_array a) { return data_ptr<uint32_t>(a); }
const uint16_t* mlx_array_data_uint16(const mlx_array a) { return data_ptr<uint16_t>(a); }
const uint8_t* mlx_array_data_uint8(const mlx_array a) { return data_ptr<uint8_t>(a); }

mlx_vector_array mlx_vector_array_new(void) {
  return mlx_vector_array{new std::vector<mx::array>()};
}

int mlx_vector_array_free(mlx_vector_array v) {
  delete static_cast<std::vector<mx::array>*>(v.ctx);
  return 0;
}

mlx_vector_array mlx_vector_array_new_data(const mlx_array* data, size_t size) {
  auto* v = new std::vector<mx::array>();
  v->reserve(size);
  for (size_t i = 0; i < size; i++) {
    v->push_back(arr(data[i]));
  }
  return mlx_vector_array{v};
}

int mlx_vector_array_append_value(mlx_vector_array v, const mlx_array val) {
  return guard([&] { vec(v).push_back(arr(val)); });
}

size_t mlx_vector_array_size(mlx_vector_array v) { return vec(v).size(); }

int mlx_vector_array_get(mlx_array* res, const mlx_vector_array v, size_t idx) {
  return guard([&] { set(res, vec(v).at(idx)); });
}

mlx_stream mlx_default_cpu_stream_new(void) {
  return mlx_stream{new mx::Stream(mx::default_stream(mx::Device::cpu))};
}

mlx_stream mlx_default_gpu_stream_new(void) {
  mlx_stream res{nullptr};
  guard([&] { res.ctx = new mx::Stream(mx::default_stream(mx::Device::gpu)); });
  return res;
}

int mlx_stream_free(mlx_stream s) {
  delete static_cast<mx::Stream*>(s.ctx);
  return 0;
}

int mlx_gpu_is_available(bool* res) {
  return guard([&] { *res = mx::is_available(mx::Device::gpu); });
}

int mlx_stream_device_memory(bool* gpu, size_t* total, const char** total_key, size_t* free_bytes, bool* has_free,
                             const mlx_stream s) {
  return guard([&] {
    const mx::Device d = strm(s).device;
    *gpu = d.type == mx::Device::gpu;
    *total = 0;
    *total_key = nullptr;
    *free_bytes = 0;
    *has_free = false;
    const auto& info = mx::device_info(d);
    auto size_of = [&](const char* key, size_t* v) {
      auto it = info.find(key);
      if (it == info.end()) {
        return false;
      }
      const size_t* p = std::get_if<size_t>(&it->second);
      if (p == nullptr) {
        return false;
      }
      *v = *p;
      return true;
    };
    for (const char* key : {"max_recommended_working_set_size", "total_memory", "memory_size"}) {
      if (size_of(key, total)) {
        *total_key = key;
        break;
      }
    }
    *has_free = size_of("free_memory", free_bytes);
  });
}

int mlx_eval(const mlx_vector_array outputs) {
  return guard([&] { mx::eval(vec(outputs)); });
}

int mlx_async_eval(const mlx_vector_array outputs) {
  return guard([&] { mx::async_eval(vec(outputs)); });
}

int mlx_swiglu_compiled(mlx_array* res, const mlx_array g, const mlx_array u, const mlx_stream s) {
  return guard([&] {
    // One compiled function for the process; its traces take the stream in
    // effect when they are made, and a process runs a device on one stream.
    static auto fn = mx::compile(
        [](const std::vector<mx::array>& in) {
          return std::vector<mx::array>{mx::multiply(mx::multiply(in[0], mx::sigmoid(in[0])), in[1])};
        },
        /*shapeless=*/true);
    mx::StreamContext ctx(strm(s));
    set(res, fn({arr(g), arr(u)})[0]);
  });
}

int mlx_clamped_swiglu_compiled(
    mlx_array* res, const mlx_array g, const mlx_array u, float alpha, float limit, const mlx_stream s) {
  return guard([&] {
    // One compiled function per (alpha, limit) for the process, as for
    // mlx_swiglu_compiled; the constants take the gate's dtype when traced.
    // Entries are never erased, so a pointer to one stays valid unlocked.
    using Fn = std::function<std::vector<mx::array>(const std::vector<mx::array>&)>;
    static std::mutex mu;
    static std::map<std::pair<float, float>, Fn> fns;
    const Fn* fn;
    {
      std::lock_guard<std::mutex> lock(mu);
      auto& slot = fns[{alpha, limit}];
      if (!slot) {
        slot = mx::compile(
            [alpha, limit](const std::vector<mx::array>& in) {
              auto dt = in[0].dtype();
              auto k = [dt](float v) { return mx::array(v, dt); };
              auto gate = mx::minimum(in[0], k(limit));
              auto up = mx::clip(in[1], k(-limit), k(limit));
              auto glu = mx::multiply(gate, mx::sigmoid(mx::multiply(k(alpha), gate)));
              return std::vector<mx::array>{mx::multiply(mx::add(up, k(1)), glu)};
            },
            /*shapeless=*/true);
      }
      fn = &slot;
    }
    mx::StreamContext ctx(strm(s));
    set(res, (*fn)({arr(g), arr(u)})[0]);
  });
}

int mlx_graph_primitives(char** res, const mlx_vector_array outputs) {
  return guard([&] {
    std::string names;
    // By array: a primitive object may be shared by several nodes (a
    // shapeless compiled function's), and an op's outputs are siblings.
    std::unordered_set<std::uintptr_t> seen;
    std::vector<mx::array> stack = vec(outputs);
    while (!stack.empty()) {
      mx::array a = stack.back();
      stack.pop_back();
      if (!a.has_primitive() || !seen.insert(a.id()).second) {
        continue;
      }
      for (auto& s : a.siblings()) {
        seen.insert(s.id());
      }
      names += a.primitive().name();
      names += '\n';
      for (auto& in : a.inputs()) {
        stack.push_back(in);
      }
    }
    *res = static_cast<char*>(std::malloc(names.size() + 1));
    std::memcpy(*res, names.c_str(), names.size() + 1);
  });
}

int mlx_array_queued(bool* res, const mlx_array a) {
  return guard([&] { *res = arr(a).status() != mx::array::Status::unscheduled; });
}

int mlx_array_row_contiguous(bool* res, const mlx_array a) {
  return guard([&] {
    const mx::array& x = arr(a);
    if (!x.is_available()) {
      throw std::runtime_error("row_contiguous: the array is not evaluated");
    }
    *res = x.flags().row_contiguous;
  });
}

int mlx_get_active_memory(size_t* res) { return guard([&] { *res = mx::get_active_memory(); }); }
int mlx_get_peak_memory(size_t* res) { return guard([&] { *res = mx::get_peak_memory(); }); }
int mlx_reset_peak_memory(void) { return guard([&] { mx::reset_peak_memory(); }); }
int mlx_get_cache_memory(size_t* res) { return guard([&] { *res = mx::get_cache_memory(); }); }
int mlx_set_cache_limit(size_t* res, size_t limit) { return guard([&] { *res = mx::set_cache_limit(limit); }); }
int mlx_set_memory_limit(size_t* res, size_t limit) { return guard([&] { *res = mx::set_memory_limit(limit); }); }
int mlx_clear_cache(void) { return guard([&] { mx::clear_cache(); }); }

#define BINARY(name, fn)                                                               \
  int name(mlx_array* res, const mlx_array a, const mlx_array b, const mlx_stream s) { \
    return guard([&] { set(res, mx::fn(arr(a), arr(b), strm(s))); });                 \
  }
#define UNARY(name, fn)                                                 \
  int name(mlx_array* res, const mlx_array a, const mlx_stream s) {     \
    return guard([&] { set(res, mx::fn(arr(a), strm(s))); });           \
  }
#define REDUCE(name, fn)                                                                         \
  int name(mlx_array* res, const mlx_array a, int axis, bool keepdims, const mlx_stream s) {     \
    return guard([&] { set(res, mx::fn(arr(a), axis, keepdims, strm(s))); });                    \
  }

BINARY(mlx_add, add)
BINARY(mlx_subtract, subtract)
BINARY(mlx_multiply, multiply)
BINARY(mlx_divide, divide)
BINARY(mlx_maximum, maximum)
BINARY(mlx_minimum, minimum)
BINARY(mlx_power, power)
BINARY(mlx_greater, greater)
BINARY(mlx_less, less)
BINARY(mlx_equal, equal)
BINARY(mlx_matmul, matmul)
UNARY(mlx_negative, negative)
UNARY(mlx_abs, abs)
UNARY(mlx_exp, exp)
UNARY(mlx_log, log)
UNARY(mlx_sqrt, sqrt)
UNARY(mlx_rsqrt, rsqrt)
UNARY(mlx_square, square)
UNARY(mlx_sigmoid, sigmoid)
UNARY(mlx_tanh, tanh)
UNARY(mlx_erf, erf)
UNARY(mlx_cos, cos)
UNARY(mlx_sin, sin)
UNARY(mlx_copy, copy)
REDUCE(mlx_sum_axis, sum)
REDUCE(mlx_mean_axis, mean)
REDUCE(mlx_max_axis, max)
REDUCE(mlx_argmax_axis, argmax)
REDUCE(mlx_logsumexp_axis, logsumexp)

int mlx_round(mlx_array* res, const mlx_array a, int decimals, const mlx_stream s) {
  return guard([&] { set(res, mx::round(arr(a), decimals, strm(s))); });
}

int mlx_where(mlx_array* res, const mlx_array c, const mlx_array x, const mlx_array y, const mlx_stream s) {
  return guard([&] { set(res, mx::where(arr(c), arr(x), arr(y), strm(s))); });
}

int mlx_clip(mlx_array* res, const mlx_array a, const mlx_array lo, const mlx_array hi, const mlx_stream s) {
  return guard([&] { set(res, mx::clip(arr(a), opt(lo), opt(hi), strm(s))); });
}

int mlx_astype(mlx_array* res, const mlx_array a, mlx_dtype dtype, const mlx_stream s) {
  return guard([&] { set(res, mx::astype(arr(a), to_dtype(dtype), strm(s))); });
}

int mlx_softmax_axis(mlx_array* res, const mlx_array a, int axis, bool precise, const mlx_stream s) {
  return guard([&] { set(res, mx::softmax(arr(a), std::vector<int>{axis}, precise, strm(s))); });
}

int mlx_cumsum(mlx_array* res, const mlx_array a, int axis, bool reverse, bool inclusive, const mlx_stream s) {
  return guard([&] { set(res, mx::cumsum(arr(a), axis, reverse, inclusive, strm(s))); });
}

int mlx_argsort_axis(mlx_array* res, const mlx_array a, int axis, const mlx_stream s) {
  return guard([&] { set(res, mx::argsort(arr(a), axis, strm(s))); });
}

int mlx_argpartition_axis(mlx_array* res, const mlx_array a, int kth, int axis, const mlx_stream s) {
  return guard([&] { set(res, mx::argpartition(arr(a), kth, axis, strm(s))); });
}

int mlx_topk_axis(mlx_array* res, const mlx_array a, int k, int axis, const mlx_stream s) {
  return guard([&] { set(res, mx::topk(arr(a), k, axis, strm(s))); });
}

int mlx_reshape(mlx_array* res, const mlx_array a, const int* shape, size_t n, const mlx_stream s) {
  return guard([&] { set(res, mx::reshape(arr(a), shape_of(shape, n), strm(s))); });
}

int mlx_transpose_axes(mlx_array* res, const mlx_array a, const int* axes, size_t n, const mlx_stream s) {
  return guard([&] { set(res, mx::transpose(arr(a), std::vector<int>(axes, axes + n), strm(s))); });
}

int mlx_swapaxes(mlx_array* res, const mlx_array a, int axis1, int axis2, const mlx_stream s) {
  return guard([&] { set(res, mx::swapaxes(arr(a), axis1, axis2, strm(s))); });
}

int mlx_expand_dims(mlx_array* res, const mlx_array a, int axis, const mlx_stream s) {
  return guard([&] { set(res, mx::expand_dims(arr(a), axis, strm(s))); });
}

int mlx_squeeze_axis(mlx_array* res, const mlx_array a, int axis, const mlx_stream s) {
  return guard([&] { set(res, mx::squeeze(arr(a), axis, strm(s))); });
}

int mlx_broadcast_to(mlx_array* res, const mlx_array a, const int* shape, size_t n, const mlx_stream s) {
  return guard([&] { set(res, mx::broadcast_to(arr(a), shape_of(shape, n), strm(s))); });
}

int mlx_concatenate_axis(mlx_array* res, const mlx_vector_array arrays, int axis, const mlx_stream s) {
  return guard([&] { set(res, mx::concatenate(vec(arrays), axis, strm(s))); });
}

int mlx_split(mlx_vector_array* res, const mlx_array a, int num_splits, int axis, const mlx_stream s) {
  return guard([&] {
    auto parts = mx::split(arr(a), num_splits, axis, strm(s));
    if (res->ctx == nullptr) {
      res->ctx = new std::vector<mx::array>();
    }
    vec(*res) = std::move(parts);
  });
}

int mlx_slice(mlx_array* res, const mlx_array a, const int* start, size_t start_num, const int* stop,
              size_t stop_num, const int* strides, size_t strides_num, const mlx_stream s) {
  return guard([&] {
    set(res, mx::slice(arr(a), shape_of(start, start_num), shape_of(stop, stop_num),
                       shape_of(strides, strides_num), strm(s)));
  });
}

int mlx_view_strided(mlx_array* res, const mlx_array a, const int* shape, size_t shape_num, const int64_t* strides,
                     size_t strides_num, size_t offset, const mlx_stream s) {
  return guard([&] {
    const mx::array& aa = arr(a);
    mx::Shape sh = shape_of(shape, shape_num);
    mx::Strides st(strides, strides + strides_num);
    int64_t last = static_cast<int64_t>(offset);
    bool empty = false;
    for (size_t i = 0; i < sh.size() && i < st.size(); i++) {
      empty = empty || sh[i] == 0;
      last += static_cast<int64_t>(std::max(sh[i] - 1, 0)) * st[i];
    }
    if (sh.size() != st.size() || std::any_of(sh.begin(), sh.end(), [](int d) { return d < 0; }) ||
        std::any_of(st.begin(), st.end(), [](int64_t d) { return d < 0; }) ||
        (!empty && last >= static_cast<int64_t>(aa.size()))) {
      throw std::invalid_argument("view_strided: the view's shape and strides must match and stay within the array");
    }
    // MLX's as_strided flattens its input first (a Reshape primitive more
    // for a multi-dimensional a) and the library does not export the
    // primitive's constructor: its primitive is made over a one-element
    // vector, which as_strided takes as it is, and put over a.
    static const mx::array& one = *new mx::array({0.0f});
    mx::Shape out = sh;
    auto view = mx::as_strided(one, std::move(sh), std::move(st), offset, strm(s));
    set(res, mx::array(std::move(out), aa.dtype(), view.primitive_ptr(), {aa}));
  });
}

int mlx_slice_update(mlx_array* res, const mlx_array src, const mlx_array update, const int* start,
                     size_t start_num, const int* stop, size_t stop_num, const int* strides,
                     size_t strides_num, const mlx_stream s) {
  return guard([&] {
    set(res, mx::slice_update(arr(src), arr(update), shape_of(start, start_num), shape_of(stop, stop_num),
                              shape_of(strides, strides_num), strm(s)));
  });
}

int mlx_take_axis(mlx_array* res, const mlx_array a, const mlx_array indices, int axis, const mlx_stream s) {
  return guard([&] { set(res, mx::take(arr(a), arr(indices), axis, strm(s))); });
}

int mlx_take_along_axis(mlx_array* res, const mlx_array a, const mlx_array indices, int axis, const mlx_stream s) {
  return guard([&] { set(res, mx::take_along_axis(arr(a), arr(indices), axis, strm(s))); });
}

int mlx_put_along_axis(mlx_array* res, const mlx_array a, const mlx_array indices, const mlx_array values,
                       int axis, const mlx_stream s) {
  return guard([&] { set(res, mx::put_along_axis(arr(a), arr(indices), arr(values), axis, strm(s))); });
}

int mlx_contiguous(mlx_array* res, const mlx_array a, bool allow_col_major, const mlx_stream s) {
  return guard([&] { set(res, mx::contiguous(arr(a), allow_col_major, strm(s))); });
}

int mlx_zeros(mlx_array* res, const int* shape, size_t n, mlx_dtype dtype, const mlx_stream s) {
  return guard([&] { set(res, mx::zeros(shape_of(shape, n), to_dtype(dtype), strm(s))); });
}

int mlx_full(mlx_array* res, const int* shape, size_t n, const mlx_array vals, mlx_dtype dtype, const mlx_stream s) {
  return guard([&] { set(res, mx::full(shape_of(shape, n), arr(vals), to_dtype(dtype), strm(s))); });
}

int mlx_arange(mlx_array* res, double start, double stop, double step, mlx_dtype dtype, const mlx_stream s) {
  return guard([&] { set(res, mx::arange(start, stop, step, to_dtype(dtype), strm(s))); });
}

int mlx_tril(mlx_array* res, const mlx_array x, int k, const mlx_stream s) {
  return guard([&] { set(res, mx::tril(arr(x), k, strm(s))); });
}

int mlx_quantize(mlx_vector_array* res, const mlx_array w, mlx_optional_int group_size, mlx_optional_int bits,
                 const char* mode, const mlx_array global_scale, const mlx_stream s) {
  return guard([&] {
    auto parts = mx::quantize(arr(w), opt(group_size), opt(bits), mode, opt(global_scale), strm(s));
    if (res->ctx == nullptr) {
      res->ctx = new std::vector<mx::array>();
    }
    vec(*res) = std::move(parts);
  });
}

int mlx_dequantize(mlx_array* res, const mlx_array w, const mlx_array scales, const mlx_array biases,
                   mlx_optional_int group_size, mlx_optional_int bits, const char* mode,
                   const mlx_array global_scale, mlx_optional_dtype dtype, const mlx_stream s) {
  return guard([&] {
    std::optional<mx::Dtype> dt;
    if (dtype.has_value) {
      dt = to_dtype(dtype.value);
    }
    set(res, mx::dequantize(arr(w), arr(scales), opt(biases), opt(group_size), opt(bits), mode,
                            opt(global_scale), dt, strm(s)));
  });
}

int mlx_quantized_matmul(mlx_array* res, const mlx_array x, const mlx_array w, const mlx_array scales,
                         const mlx_array biases, bool transpose, mlx_optional_int group_size,
                         mlx_optional_int bits, const char* mode, const mlx_stream s) {
  return guard([&] {
    set(res, mx::quantized_matmul(arr(x), arr(w), arr(scales), opt(biases), transpose, opt(group_size),
                                  opt(bits), mode, strm(s)));
  });
}

int mlx_gather_qmm(mlx_array* res, const mlx_array x, const mlx_array w, const mlx_array scales,
                   const mlx_array biases, const mlx_array lhs_indices, const mlx_array rhs_indices,
                   bool transpose, mlx_optional_int group_size, mlx_optional_int bits, const char* mode,
                   bool sorted_indices, const mlx_stream s) {
  return guard([&] {
    set(res, mx::gather_qmm(arr(x), arr(w), arr(scales), opt(biases), opt(lhs_indices), opt(rhs_indices),
                            transpose, opt(group_size), opt(bits), mode, std::nullopt, sorted_indices,
                            strm(s)));
  });
}

int mlx_addmm(mlx_array* res, const mlx_array c, const mlx_array a, const mlx_array b, float alpha, float beta,
              const mlx_stream s) {
  return guard([&] { set(res, mx::addmm(arr(c), arr(a), arr(b), alpha, beta, strm(s))); });
}

int mlx_gather_mm(mlx_array* res, const mlx_array a, const mlx_array b, const mlx_array lhs_indices,
                  const mlx_array rhs_indices, bool sorted_indices, const mlx_stream s) {
  return guard([&] {
    set(res, mx::gather_mm(arr(a), arr(b), opt(lhs_indices), opt(rhs_indices), sorted_indices, strm(s)));
  });
}

int mlx_fast_rms_norm(mlx_array* res, const mlx_array x, const mlx_array weight, float eps, const mlx_stream s) {
  return guard([&] { set(res, mx::fast::rms_norm(arr(x), opt(weight), eps, strm(s))); });
}

int mlx_fast_rope(mlx_array* res, const mlx_array x, int dims, bool traditional, mlx_optional_float base,
                  float scale, int offset, const mlx_array freqs, const mlx_stream s) {
  return guard([&] {
    set(res, mx::fast::rope(arr(x), dims, traditional, opt(base), scale, offset, opt(freqs), strm(s)));
  });
}

int mlx_fast_rope_dynamic(mlx_array* res, const mlx_array x, int dims, bool traditional, mlx_optional_float base,
                          float scale, const mlx_array offset, const mlx_array freqs, const mlx_stream s) {
  return guard([&] {
    set(res, mx::fast::rope(arr(x), dims, traditional, opt(base), scale, arr(offset), opt(freqs), strm(s)));
  });
}

int mlx_fast_scaled_dot_product_attention(mlx_array* res, const mlx_array q, const mlx_array k, const mlx_array v,
                                          float scale, const char* mask_mode, const mlx_array mask_arr,
                                          const mlx_array sinks, const mlx_stream s) {
  return guard([&] {
    set(res, mx::fast::scaled_dot_product_attention(arr(q), arr(k), arr(v), scale, mask_mode, opt(mask_arr),
                                                    opt(sinks), false, strm(s)));
  });
}

int mlx_random_key(mlx_array* res, uint64_t seed) {
  return guard([&] { set(res, mx::random::key(seed)); });
}

int mlx_random_categorical(mlx_array* res, const mlx_array logits, int axis, const mlx_array key,
                           const mlx_stream s) {
  return guard([&] { set(res, mx::random::categorical(arr(logits), axis, opt(key), strm(s))); });
}

} // extern "C"

namespace {

mx::distributed::Group& grp(mlx_distributed_group g) {
  return *static_cast<mx::distributed::Group*>(g.ctx);
}

} // namespace

extern "C" {

bool mlx_distributed_is_available(const char* bk) {
  try {
    return mx::distributed::is_available(bk);
  } catch (const std::exception& e) {
    fail(e.what());
    return false;
  }
}

mlx_distributed_group mlx_distributed_init(bool strict, const char* bk) {
  try {
    return mlx_distributed_group{new mx::distributed::Group(mx::distributed::init(strict, bk))};
  } catch (const std::exception& e) {
    fail(e.what());
    return mlx_distributed_group{nullptr};
  }
}

int mlx_distributed_group_rank(mlx_distributed_group group) {
  return grp(group).rank();
}

int mlx_distributed_group_size(mlx_distributed_group group) {
  return grp(group).size();
}

int mlx_distributed_group_free(mlx_distributed_group group) {
  delete static_cast<mx::distributed::Group*>(group.ctx);
  return 0;
}

int mlx_distributed_all_sum(mlx_array* res, const mlx_array x, const mlx_distributed_group group,
                            const mlx_stream s) {
  return guard([&] { set(res, mx::distributed::all_sum(arr(x), grp(group), strm(s))); });
}

int mlx_distributed_all_gather(mlx_array* res, const mlx_array x, const mlx_distributed_group group,
                               const mlx_stream s) {
  return guard([&] { set(res, mx::distributed::all_gather(arr(x), grp(group), strm(s))); });
}

} // extern "C"

namespace {

// The paged decode attention kernels (CUDA, compiled at run time by MLX),
// assembled from the pieces below. Their common loop: a block of threads
// takes one query and head, and its W warps take turns over the query's
// visible keys lo .. last, U consecutive keys per turn (U loads in flight,
// U dot products reduced together, one softmax rescale per turn); lane j
// holds elements j, j+32, ... of a key, so each load of a warp reads 32
// consecutive elements. A warp keeps a running max, sum and weighted value
// sum, and warp 0 merges the W partial results.
//
// kPagedDecodeParts: one block per (query, head) over all of the row's
// visible keys, normalized with the head's sink logit, if any, in the
// denominator. kPagedSplitParts (PROVIDER_GPU_PAGED=split): one block per
// (query, head, block of the row's table), at most 256 keys, leaving the
// block's max, sum and unnormalized output, which kPagedMergeParts
// combines over the blocks. A row splits at its own block boundaries
// whatever else the step holds, so a query's floats are the same alone
// and batched. The first stays the default (kvpool's doc says why).
constexpr const char* kPagedHead = R"(
  constexpr int EPL = D / 32;
  const int h = blockIdx.x;
  const int i = blockIdx.y;
  const int lane = threadIdx.x & 31;
  const int w = threadIdx.x >> 5;
  const int H = q_shape[1];
  const int KVH = kpool_shape[1];
  const int MB = table_shape[1];
  const int kvh = h / (H / KVH);
)";

// The query's row and its visible keys, all of them.
constexpr const char* kPagedRowAll = R"(  const int row = meta[3 * i], pos = meta[3 * i + 1], last = meta[3 * i + 2];
  const int lo = WINDOW > 0 ? max(0, pos - WINDOW + 1) : 0;
)";

// The same, within block z of the row's table.
constexpr const char* kPagedRowBlock = R"(  const int z = blockIdx.z;
  const int row = meta[3 * i], pos = meta[3 * i + 1];
  const int lo = max(WINDOW > 0 ? max(0, pos - WINDOW + 1) : 0, z * BLOCK);
  const int last = min(meta[3 * i + 2], z * BLOCK + BLOCK - 1);
)";

constexpr const char* kPagedLoop = R"(  const float scale = __int_as_float(SCALE_BITS);
  const float ninf = -__int_as_float(0x7f800000);
  float qv[EPL], acc[EPL];
  const T* qr = q + ((size_t)i * H + h) * D + lane;
#pragma unroll
  for (int e = 0; e < EPL; e++) {
    qv[e] = static_cast<float>(qr[e * 32]) * scale;
    acc[e] = 0.f;
  }
  float m = ninf, l = 0.f;
  const int* tr = table + (size_t)row * MB;
  for (int kb = lo + w * U; kb <= last; kb += W * U) {
    float d[U], vv[U][EPL];
#pragma unroll
    for (int u = 0; u < U; u++) {
      const int kp = kb + u;
      d[u] = 0.f;
      if (kp <= last) {
        const size_t off = ((size_t)(tr[kp / BLOCK] * BLOCK + kp % BLOCK) * KVH + kvh) * D + lane;
#pragma unroll
        for (int e = 0; e < EPL; e++) {
          d[u] += qv[e] * static_cast<float>(kpool[off + e * 32]);
          vv[u][e] = static_cast<float>(vpool[off + e * 32]);
        }
      } else {
#pragma unroll
        for (int e = 0; e < EPL; e++) {
          vv[u][e] = 0.f;
        }
      }
    }
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
#pragma unroll
      for (int u = 0; u < U; u++) {
        d[u] += __shfl_xor_sync(0xffffffff, d[u], o);
      }
    }
    float mn = m;
#pragma unroll
    for (int u = 0; u < U; u++) {
      d[u] = kb + u <= last ? d[u] : ninf;
      mn = fmaxf(mn, d[u]);
    }
    const float a = __expf(m - mn);
    l *= a;
#pragma unroll
    for (int e = 0; e < EPL; e++) {
      acc[e] *= a;
    }
#pragma unroll
    for (int u = 0; u < U; u++) {
      const float p = __expf(d[u] - mn);
      l += p;
#pragma unroll
      for (int e = 0; e < EPL; e++) {
        acc[e] += p * vv[u][e];
      }
    }
    m = mn;
  }
  __shared__ float sm[W], sl[W], sacc[W * D];
  if (lane == 0) {
    sm[w] = m;
    sl[w] = l;
  }
#pragma unroll
  for (int e = 0; e < EPL; e++) {
    sacc[w * D + e * 32 + lane] = acc[e];
  }
  __syncthreads();
  if (w != 0) {
    return;
  }
  float M = ninf;
  for (int j = 0; j < W; j++) {
    M = fmaxf(M, sm[j]);
  }
)";

constexpr const char* kPagedSink = R"(  const float sink = HAS_SINKS ? sinks[h] : ninf;
  M = fmaxf(M, sink);
  float L = HAS_SINKS ? __expf(sink - M) : 0.f;
)";

constexpr const char* kPagedNoSink = R"(  float L = 0.f;
)";

constexpr const char* kPagedMergeWarps = R"(  float out[EPL];
#pragma unroll
  for (int e = 0; e < EPL; e++) {
    out[e] = 0.f;
  }
  for (int j = 0; j < W; j++) {
    const float c = sm[j] == ninf ? 0.f : __expf(sm[j] - M);
    L += sl[j] * c;
#pragma unroll
    for (int e = 0; e < EPL; e++) {
      out[e] += sacc[j * D + e * 32 + lane] * c;
    }
  }
)";

constexpr const char* kPagedWriteOut = R"(  T* orow = o + ((size_t)i * H + h) * D + lane;
#pragma unroll
  for (int e = 0; e < EPL; e++) {
    orow[e * 32] = static_cast<T>(out[e] / L);
  }
)";

constexpr const char* kPagedWriteParts = R"(  const size_t at = ((size_t)i * H + h) * MB + z;
  float* prow = po + at * D + lane;
#pragma unroll
  for (int e = 0; e < EPL; e++) {
    prow[e * 32] = out[e];
  }
  if (lane == 0) {
    pml[at * 2] = M;
    pml[at * 2 + 1] = L;
  }
)";

constexpr const char* kPagedDecodeParts[] = {kPagedHead, kPagedRowAll, kPagedLoop, kPagedSink, kPagedMergeWarps,
                                              kPagedWriteOut};
constexpr const char* kPagedSplitParts[] = {kPagedHead, kPagedRowBlock, kPagedLoop, kPagedNoSink, kPagedMergeWarps,
                                             kPagedWriteParts};

// kernel_source joins a kernel's pieces.
template <size_t N>
std::string kernel_source(const char* const (&parts)[N]) {
  std::string s;
  for (const char* p : parts) {
    s += p;
  }
  return s;
}

// The merge of kPagedSplitParts' per-block results (then kPagedWriteOut):
// one warp per (query, head) combines the blocks in order (an empty block
// adds exact zeros), with the head's sink logit, if any, in the
// denominator.
constexpr const char* kPagedMerge = R"(
  constexpr int EPL = D / 32;
  const int h = blockIdx.x;
  const int i = blockIdx.y;
  const int lane = threadIdx.x;
  const int H = po_shape[1];
  const int S = po_shape[2];
  const float ninf = -__int_as_float(0x7f800000);
  const size_t base = ((size_t)i * H + h) * S;
  const float sink = HAS_SINKS ? sinks[h] : ninf;
  float M = sink;
  for (int z = 0; z < S; z++) {
    M = fmaxf(M, pml[(base + z) * 2]);
  }
  float L = HAS_SINKS ? __expf(sink - M) : 0.f;
  float out[EPL];
#pragma unroll
  for (int e = 0; e < EPL; e++) {
    out[e] = 0.f;
  }
  for (int z = 0; z < S; z++) {
    const float mz = pml[(base + z) * 2];
    const float c = mz == ninf ? 0.f : __expf(mz - M);
    L += pml[(base + z) * 2 + 1] * c;
    const float* prow = po + (base + z) * D + lane;
#pragma unroll
    for (int e = 0; e < EPL; e++) {
      out[e] += prow[e * 32] * c;
    }
  }
)";

constexpr const char* kPagedMergeParts[] = {kPagedMerge, kPagedWriteOut};

// check_paged_decode refuses what the paged decode kernels cannot serve.
void check_paged_decode(const mx::array& q, int keys) {
  if (q.ndim() != 3 || q.shape(2) % 32 != 0 || q.shape(2) > 512) {
    throw std::invalid_argument("paged_decode: needs q [P, H, D] with D a multiple of 32, at most 512");
  }
  if (keys < 1 || keys > 8) {
    throw std::invalid_argument("paged_decode: keys per turn must be 1 to 8");
  }
}

// kPagedWarps is the warps of a block of the paged decode kernels.
constexpr int kPagedWarps = 8;

// paged_template_args are the template arguments of both paged decode
// kernels, in the order the single-pass one was first compiled with (it
// adds HAS_SINKS before U).
std::vector<std::pair<std::string, mx::fast::TemplateArg>> paged_template_args(const mx::array& q, int block, int window,
                                                                               float scale, int keys) {
  int scale_bits;
  std::memcpy(&scale_bits, &scale, sizeof scale_bits);
  return {{"T", q.dtype()},   {"D", q.shape(2)},          {"W", kPagedWarps}, {"BLOCK", block},
          {"WINDOW", window}, {"SCALE_BITS", scale_bits}, {"U", keys}};
}

// float_zeros is n float32 zeros on st, made and evaluated once per
// thread, length and stream: an input a kernel is given but does not read
// costs no primitive per layer and step.
mx::array float_zeros(int n, const mx::Stream& st) {
  thread_local std::map<std::pair<int, int>, mx::array> zeros;
  auto it = zeros.find({n, st.index});
  if (it == zeros.end()) {
    mx::array z = mx::zeros({n}, mx::float32, st);
    mx::eval(z);
    it = zeros.emplace(std::make_pair(n, st.index), z).first;
  }
  return it->second;
}

// sink_logits is a head's sink logits [H] as float32, or zeros where there
// are none (the kernels then read nothing).
mx::array sink_logits(const mlx_array sinks, int heads, const mlx_stream s) {
  const mx::Stream st = strm(s);
  if (sinks.ctx != nullptr) {
    return mx::astype(arr(sinks), mx::float32, st);
  }
  return float_zeros(heads, st);
}

// The affine-quantized matrix-vector product of a few rows (CUDA,
// compiled at run time by MLX): y [M, N] = x [M, K] @ dequantize(w).T,
// where w [N, K * BITS / 32] packs BITS-bit values low bits first and
// scales and biases [N, K / G] make each value s * q + b. Each warp takes
// R output rows; its lanes take turns over 16-byte chunks of those rows
// (32 values at 4 bits), U chunks per turn loaded before any is used, so
// that U * R loads of each lane are in flight against memory. A chunk lies
// within one group (G is a multiple of its values), so a chunk adds
// s * sum(x * q) + b * sum(x), the sum of x shared by the R rows. Each of
// the M rows runs the same sums in the same order whatever M is, so a
// row's floats do not depend on its batch.
//
// A value becomes a float through its bits where it lies in its half of
// the word, not through a shift and a conversion: with the half's 16 bits
// under 2^23's exponent (0x4B000000), one AND keeps the exponent and the
// value, q * 2^S for the k-th value of the half (S = BITS * k, at most
// 12), which is the float 2^23 + q * 2^S, so less 2^23 it is q * 2^S
// exactly. Each k sums apart (KC sums), and a chunk's sum is theirs scaled
// back by 2^-S, a power of two: every product is the exact x * q of the
// value.
constexpr const char* kGemvHead = R"(
  constexpr int PER = 32 / BITS;
  constexpr int VALS = 4 * PER;
  constexpr unsigned MASK = (1u << BITS) - 1;
  constexpr int XV = PER * (int)sizeof(T);
  constexpr int KC = PER / 2;
  const int K = w_shape[1] * PER;
  const int N = w_shape[0];
  const int chunks = K / VALS;
  const int groups = K / G;
  const int lane = threadIdx.x & 31;
  const int warp = blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5);
  int rows[R];
  // PER values of T at p as floats, loaded a unit at a time: unit is of
  // the load's type (a vector, which needs p aligned to its size, or T).
  auto load_floats = [](auto unit, const T* p, float* out) {
    using V = decltype(unit);
    alignas(16) T t[PER];
    if constexpr (sizeof(V) > sizeof(T)) {
#pragma unroll
      for (int b = 0; b < XV / (int)sizeof(V); b++) {
        reinterpret_cast<V*>(t)[b] = __ldg(reinterpret_cast<const V*>(p) + b);
      }
    } else {
#pragma unroll
      for (int i = 0; i < PER; i++) {
        t[i] = p[i];
      }
    }
#pragma unroll
    for (int i = 0; i < PER; i++) {
      out[i] = static_cast<float>(t[i]);
    }
  };
  // The vector x's values load as.
  auto vector_unit = [] {
    if constexpr (XV % 16 == 0) {
      return uint4{};
    } else if constexpr (XV == 8) {
      return uint2{};
    } else {
      return T{};
    }
  };
)";

// The warp's rows: R consecutive outputs.
constexpr const char* kGemvRows = R"(
  const int n0 = warp * R;
  if (n0 >= N) {
    return;
  }
#pragma unroll
  for (int r = 0; r < R; r++) {
    rows[r] = min(n0 + r, N - 1);
  }
)";

// x as it is.
constexpr const char* kGemvNoNorm = R"(
  constexpr bool NORM = false;
  const bool nwaligned = true;
  auto norm_weights = [](auto, size_t, float*) {};
  const float eps = 0.f;
)";

// x RMS-normalized and scaled by nw [K] (of x's type): each row's sum of
// squares is summed beside the product, whose sums then scale by
// rsqrt(mean + eps) (the normalized x is not rounded to T, as RMSNorm's
// result would be). The weights beside a chunk of x load as x's do.
constexpr const char* kGemvNorm = R"(
  constexpr bool NORM = true;
  const bool nwaligned = (reinterpret_cast<size_t>(nw) & 15) == 0;
  auto norm_weights = [&](auto unit, size_t k, float* out) { load_floats(unit, nw + k, out); };
  const float eps = __int_as_float(EPS_BITS);
)";

// The sums of the warp's R rows, acc[m][r] in every lane. The loop runs
// with x's loads as vectors where x (and nw) are aligned, else one value
// at a time: two copies of it, so that neither issues the other's loads.
constexpr const char* kGemvSums = R"(
  const uint4* wq = reinterpret_cast<const uint4*>(w);
  float acc[M][R], ss[M];
#pragma unroll
  for (int m = 0; m < M; m++) {
    ss[m] = 0.f;
#pragma unroll
    for (int r = 0; r < R; r++) {
      acc[m][r] = 0.f;
    }
  }
  auto sums = [&](auto unit) {
    for (int c0 = lane; c0 < chunks; c0 += 32 * U) {
      uint4 wv[U][R];
      float sc[U][R], bi[U][R];
#pragma unroll
      for (int u = 0; u < U; u++) {
        const int c = c0 + 32 * u;
#pragma unroll
        for (int r = 0; r < R; r++) {
          if (c < chunks) {
            const size_t g = (size_t)rows[r] * groups + (size_t)c * VALS / G;
            wv[u][r] = __ldg(wq + (size_t)rows[r] * chunks + c);
            sc[u][r] = static_cast<float>(scales[g]);
            bi[u][r] = static_cast<float>(biases[g]);
          } else {
            wv[u][r] = make_uint4(0, 0, 0, 0);
            sc[u][r] = 0.f;
            bi[u][r] = 0.f;
          }
        }
      }
#pragma unroll
      for (int u = 0; u < U; u++) {
        const int c = c0 + 32 * u;
        if (c >= chunks) {
          break;
        }
        float dot[M][R][KC], xs[M];
#pragma unroll
        for (int m = 0; m < M; m++) {
          xs[m] = 0.f;
#pragma unroll
          for (int r = 0; r < R; r++) {
#pragma unroll
            for (int k = 0; k < KC; k++) {
              dot[m][r][k] = 0.f;
            }
          }
        }
#pragma unroll
        for (int j = 0; j < 4; j++) {
          const size_t k0 = (size_t)c * VALS + j * PER;
          float xf[M][PER], nwf[PER];
          norm_weights(unit, k0, nwf);
#pragma unroll
          for (int m = 0; m < M; m++) {
            load_floats(unit, x + (size_t)m * K + k0, xf[m]);
#pragma unroll
            for (int p = 0; p < PER; p++) {
              if (NORM) {
                ss[m] = fmaf(xf[m][p], xf[m][p], ss[m]);
                xf[m][p] *= nwf[p];
              }
              xs[m] += xf[m][p];
            }
          }
#pragma unroll
          for (int r = 0; r < R; r++) {
            const unsigned word = j == 0 ? wv[u][r].x : j == 1 ? wv[u][r].y : j == 2 ? wv[u][r].z : wv[u][r].w;
            // Each half of the word under 2^23's exponent (one byte
            // permute each).
            const unsigned half[2] = {__byte_perm(word, 0x4B000000u, 0x7410), __byte_perm(word, 0x4B000000u, 0x7432)};
#pragma unroll
            for (int p = 0; p < PER; p++) {
              const int k = p % KC;
              const unsigned bits = half[p / KC] & (0x4B000000u | (MASK << (BITS * k)));
              const float q = __uint_as_float(bits) - 8388608.f;
#pragma unroll
              for (int m = 0; m < M; m++) {
                dot[m][r][k] = fmaf(xf[m][p], q, dot[m][r][k]);
              }
            }
          }
        }
#pragma unroll
        for (int m = 0; m < M; m++) {
#pragma unroll
          for (int r = 0; r < R; r++) {
            float d = dot[m][r][0];
#pragma unroll
            for (int k = 1; k < KC; k++) {
              d = fmaf(dot[m][r][k], 1.0f / static_cast<float>(1u << (BITS * k)), d);
            }
            acc[m][r] = fmaf(sc[u][r], d, fmaf(bi[u][r], xs[m], acc[m][r]));
          }
        }
      }
    }
  };
  if ((reinterpret_cast<size_t>(x) & 15) == 0 && nwaligned) {
    sums(vector_unit());
  } else {
    sums(T{});
  }
#pragma unroll
  for (int m = 0; m < M; m++) {
#pragma unroll
    for (int r = 0; r < R; r++) {
#pragma unroll
      for (int o = 16; o > 0; o >>= 1) {
        acc[m][r] += __shfl_xor_sync(0xffffffff, acc[m][r], o);
      }
    }
  }
  if (NORM) {
#pragma unroll
    for (int m = 0; m < M; m++) {
#pragma unroll
      for (int o = 16; o > 0; o >>= 1) {
        ss[m] += __shfl_xor_sync(0xffffffff, ss[m], o);
      }
      const float rms = rsqrtf(ss[m] / static_cast<float>(K) + eps);
#pragma unroll
      for (int r = 0; r < R; r++) {
        acc[m][r] *= rms;
      }
    }
  }
)";

// y = the sums.
constexpr const char* kGemvStore = R"(
  if (lane == 0) {
#pragma unroll
    for (int m = 0; m < M; m++) {
#pragma unroll
      for (int r = 0; r < R; r++) {
        if (n0 + r < N) {
          y[(size_t)m * N + n0 + r] = static_cast<T>(acc[m][r]);
        }
      }
    }
  }
)";

constexpr const char* kAffineGemv[] = {kGemvHead, kGemvRows, kGemvNoNorm, kGemvSums, kGemvStore};

// The fused products: the kernel's sums (the same floats, output for
// output) and what the layer does next with them, done by the lane that
// stores, each sum first rounded to T as the product alone would store
// it. One kernel, and one primitive, where there were two.

// y = res + the product (a residual connection), added in float.
constexpr const char* kGemvStoreAdd = R"(
  if (lane == 0) {
#pragma unroll
    for (int m = 0; m < M; m++) {
#pragma unroll
      for (int r = 0; r < R; r++) {
        if (n0 + r < N) {
          const size_t at = (size_t)m * N + n0 + r;
          y[at] = static_cast<T>(static_cast<float>(static_cast<T>(acc[m][r])) + static_cast<float>(res[at]));
        }
      }
    }
  }
)";

// The warp's rows for a gate/up product of N = 2F outputs: R / 2 pairs
// (p, F + p), one output each.
constexpr const char* kGemvRowsHalves = R"(
  constexpr int PR = R / 2;
  const int F = N / 2;
  const int p0 = warp * PR;
  if (p0 >= F) {
    return;
  }
#pragma unroll
  for (int i = 0; i < PR; i++) {
    const int p = min(p0 + i, F - 1);
    rows[2 * i] = p;
    rows[2 * i + 1] = F + p;
  }
)";

// y [M, F] = silu(gate) * up, in float as kSwigluHalves computes it.
constexpr const char* kGemvStoreSwiglu = R"(
  if (lane == 0) {
#pragma unroll
    for (int m = 0; m < M; m++) {
#pragma unroll
      for (int i = 0; i < PR; i++) {
        if (p0 + i < F) {
          const float g = static_cast<float>(static_cast<T>(acc[m][2 * i]));
          const float u = static_cast<float>(static_cast<T>(acc[m][2 * i + 1]));
          y[(size_t)m * F + p0 + i] = static_cast<T>(g / (1.0f + expf(-g)) * u);
        }
      }
    }
  }
)";

// The warp's rows for a fused q/k/v product of (H + 2 KV) heads of D: R / 2
// pairs, each two elements of one head that kHeadsRope rotates together
// ((j, j + DIMS/2), or (2j, 2j + 1) when TRAD), or two it copies (past
// DIMS, and every value head's).
constexpr const char* kGemvRowsHeads = R"(
  constexpr int PR = R / 2;
  constexpr int HALF = D / 2;
  constexpr int RH = DIMS / 2;
  constexpr int PAIRS = (H + 2 * KV) * HALF;
  const int p0 = warp * PR;
  if (p0 >= PAIRS) {
    return;
  }
#pragma unroll
  for (int i = 0; i < PR; i++) {
    const int p = min(p0 + i, PAIRS - 1);
    const int hh = p / HALF;
    const int j = p - hh * HALF;
    int a = 2 * j, b = 2 * j + 1;
    if (hh < H + KV && !TRAD) {
      a = j < RH ? j : DIMS + 2 * (j - RH);
      b = j < RH ? j + RH : a + 1;
    }
    rows[2 * i] = hh * D + a;
    rows[2 * i + 1] = hh * D + b;
  }
)";

// rope_inv(j), the inverse frequency of pair j (1 / freqs[j], or
// base^(-j / (DIMS/2)) from log2(base)), and rope_turn(at, inv, va, vb),
// the pair rotated by the angle scale * at * inv for position at: in
// float, as MLX's own rotation computes it, but for the angle's cosine and
// sine, taken in double (kHeadsRope says why). The q/k/v kernels' store
// pieces call them.
constexpr const char* kRopePair = R"(
  auto rope_inv = [&](int j) {
    if (HAS_FREQS) {
      return 1.0f / freqs[j];
    }
    return exp2f(-(static_cast<float>(j) / static_cast<float>(DIMS / 2)) * __int_as_float(LOG2_BASE_BITS));
  };
  auto rope_turn = [&](int at, float inv, T& va, T& vb) {
    const float theta = (__int_as_float(SCALE_BITS) * static_cast<float>(at)) * inv;
    double sd, cd;
    sincos(static_cast<double>(theta), &sd, &cd);
    const float c = static_cast<float>(cd), s = static_cast<float>(sd);
    const float x1 = static_cast<float>(va), x2 = static_cast<float>(vb);
    va = static_cast<T>(x1 * c - x2 * s);
    vb = static_cast<T>(x1 * s + x2 * c);
  };
)";

// q [M, H, D], k and v [M, KV, D]: each pair rotated at its token's
// position pos[m], or copied, as kHeadsRope does it (kRopePair, before
// this piece); the key and value pairs also go to kv_put (kNoKVPut or
// kKVPut, before this piece too).
constexpr const char* kGemvStoreHeads = R"(
  if (lane == 0) {
#pragma unroll
    for (int i = 0; i < PR; i++) {
      const int p = p0 + i;
      if (p >= PAIRS) {
        continue;
      }
      const int hh = p / HALF;
      const int j = p - hh * HALF;
      const int a = rows[2 * i] - hh * D, b = rows[2 * i + 1] - hh * D;
      const bool turn = hh < H + KV && j < RH;
      const float inv = turn ? rope_inv(j) : 0.f;
#pragma unroll
      for (int m = 0; m < M; m++) {
        T* dst;
        if (hh < H) {
          dst = q + ((size_t)m * H + hh) * D;
        } else if (hh < H + KV) {
          dst = k + ((size_t)m * KV + hh - H) * D;
        } else {
          dst = v + ((size_t)m * KV + hh - H - KV) * D;
        }
        T va = static_cast<T>(acc[m][2 * i]), vb = static_cast<T>(acc[m][2 * i + 1]);
        if (turn) {
          rope_turn(pos[m], inv, va, vb);
        }
        dst[a] = va;
        dst[b] = vb;
        kv_put(m, hh, a, b, va, vb);
      }
    }
  }
)";

// kv_put(token, head, a, b, va, vb), given a pair of elements a, b of one
// of the (H + 2 KV) heads of a fused q/k/v projection: kNoKVPut ignores
// it; kKVPut writes a key or value head's pair into the KV pool at the
// token's slot, in place. kpool and vpool [slots, KV, D] are inputs (MLX
// has the kernel write only its outputs) that the kernel writes all the
// same: they are a KV pool's own arrays, which nothing else in the step
// writes, and which the step reads only in its attention, which takes the
// q this kernel makes and so runs after it (kvpool's KernelStore).
constexpr const char* kNoKVPut = R"(
  auto kv_put = [](int, int, int, int, T, T) {};
)";

constexpr const char* kKVPut = R"(
  auto kv_put = [&](int t, int hh, int a, int b, T va, T vb) {
    if (hh < H) {
      return;
    }
    const bool key = hh < H + KV;
    T* at = const_cast<T*>(key ? kpool : vpool) + ((size_t)slots[t] * KV + (key ? hh - H : hh - H - KV)) * D;
    at[a] = va;
    at[b] = vb;
  };
)";

constexpr const char* kAffineGemvAdd[] = {kGemvHead, kGemvRows, kGemvNoNorm, kGemvSums, kGemvStoreAdd};
constexpr const char* kAffineGemvSwiglu[] = {kGemvHead, kGemvRowsHalves, kGemvNoNorm, kGemvSums, kGemvStoreSwiglu};
constexpr const char* kAffineGemvSwigluNorm[] = {kGemvHead, kGemvRowsHalves, kGemvNorm, kGemvSums,
                                                 kGemvStoreSwiglu};
constexpr const char* kAffineGemvHeads[] = {kGemvHead, kGemvRowsHeads, kGemvNoNorm, kGemvSums, kRopePair,
                                            kNoKVPut,  kGemvStoreHeads};
constexpr const char* kAffineGemvHeadsNorm[] = {kGemvHead, kGemvRowsHeads, kGemvNorm, kGemvSums, kRopePair,
                                                kNoKVPut,  kGemvStoreHeads};
constexpr const char* kAffineGemvHeadsKV[] = {kGemvHead, kGemvRowsHeads, kGemvNoNorm, kGemvSums, kRopePair,
                                              kKVPut,    kGemvStoreHeads};
constexpr const char* kAffineGemvHeadsNormKV[] = {kGemvHead, kGemvRowsHeads, kGemvNorm, kGemvSums, kRopePair,
                                                  kKVPut,    kGemvStoreHeads};

// The affine-quantized product of a few rows on the tensor cores (CUDA,
// compiled at run time by MLX): y [M, N] = x [M, K] @ dequantize(w).T for
// 4-bit weights, x and the scales and biases float16 (BF16 false) or
// bfloat16 (BF16 true), groups a multiple of 32, K a multiple of 128. A
// block takes 16 outputs; its W warps split K's chunks of 128 values and
// sum their parts in a fixed order. A warp loads U chunks (a stage) at a
// time; with PF, it loads the next stage before it computes one. Each warp
// runs mma.m16n8k16 with the weights as A (16 outputs by 16 values) and x
// as B (16 values by 8 rows), so one read of the weights serves every row:
// NT tiles of 8 rows (M, the rows of x [..., K] whatever its shape, at
// most 8 NT), each its own products. Lane (g, t) of a warp (g =
// lane / 4, t = lane % 4) takes the 32 values 32t .. 32t + 31 of a chunk,
// one 16-byte word of output rows g and g + 8, and the same 32 values of x
// for row g of each tile. Within a product the order of the 16 values does
// not matter as long as A and B agree: so each 32-bit word of weights (8
// values, low bits first) becomes four pairs (q_i, q_i+4) through a mask
// and an exponent (0x6400 | q is 1024 + q in float16, 0x4300 | q is 128 +
// q in bfloat16), each s * q + b by two fused multiply-adds (the first
// takes the exponent's offset away exactly), and x's eight values are
// paired the same way by byte permutes. Products accumulate in float32.
// Each of a tile's 8 rows is its own column of the products, so a row's
// floats do not depend on how many rows the call has; and M is read at run
// time, so that 1 to 8 rows (1 to 32 in four kernels) make one kernel for
// MLX to compile, not eight.
constexpr const char* kAffineMma = R"(
  int M = 1;
  for (int i = 0; i + 1 < x_ndim; i++) {
    M *= x_shape[i];
  }
  constexpr unsigned MAGIC = BF16 ? 0x43004300u : 0x64006400u;
  constexpr unsigned ONE = BF16 ? 0x3F803F80u : 0x3C003C00u;
  constexpr unsigned NEG_MAGIC = BF16 ? 0xC300C300u : 0xE400E400u;
  const int N = w_shape[0];
  const int K = w_shape[1] * 8;
  const int chunks = K / 128;
  const int groups = K / G;
  const int lane = threadIdx.x & 31;
  const int warp = threadIdx.x >> 5;
  const int g = lane >> 2;
  const int t = lane & 3;
  const int n0 = blockIdx.x * 16;
  const size_t ra = min(n0 + g, N - 1);
  const size_t rb = min(n0 + g + 8, N - 1);
  const uint4* wq = reinterpret_cast<const uint4*>(w);
  const unsigned short* sp = reinterpret_cast<const unsigned short*>(scales);
  const unsigned short* bp = reinterpret_cast<const unsigned short*>(biases);
  const unsigned short* xp = reinterpret_cast<const unsigned short*>(x);
  const bool xaligned = (reinterpret_cast<size_t>(x) & 15) == 0;
  const int per = (chunks + W - 1) / W;
  const int cb = warp * per;
  const int ce = min(chunks, cb + per);
  // The kernel's two instructions of the tensor type, as lambdas that a
  // host emulation of this body (scripts/gpu/mma_emulate.py) replaces.
  // dq is s * q + b for the two values of v (MAGIC | q each), s and b
  // each a pair of one scale or bias. mma adds the product of a 16 x 16
  // tile of A (this lane's a0 .. a3) and a 16 x 8 tile of B (b0, b1) to d.
#ifndef AFFINE_MMA_HOST
  auto dq = [](unsigned v, unsigned s, unsigned b) {
    const unsigned one = ONE, neg = NEG_MAGIC;
    unsigned q, r;
    if constexpr (BF16) {
      asm("fma.rn.bf16x2 %0, %1, %2, %3;" : "=r"(q) : "r"(v), "r"(one), "r"(neg));
      asm("fma.rn.bf16x2 %0, %1, %2, %3;" : "=r"(r) : "r"(q), "r"(s), "r"(b));
    } else {
      asm("fma.rn.f16x2 %0, %1, %2, %3;" : "=r"(q) : "r"(v), "r"(one), "r"(neg));
      asm("fma.rn.f16x2 %0, %1, %2, %3;" : "=r"(r) : "r"(q), "r"(s), "r"(b));
    }
    return r;
  };
  auto mma = [](float (&d)[4], unsigned a0, unsigned a1, unsigned a2, unsigned a3, unsigned b0, unsigned b1) {
    if constexpr (BF16) {
      asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
          "{%0, %1, %2, %3};"
          : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
          : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
    } else {
      asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
          "{%0, %1, %2, %3};"
          : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
          : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
    }
  };
#endif
  float acc[NT][4];
#pragma unroll
  for (int j = 0; j < NT; j++) {
#pragma unroll
    for (int e = 0; e < 4; e++) {
      acc[j][e] = 0.f;
    }
  }
  // A stage is U chunks of rows g and g + 8: their words, scales and
  // biases (each scale or bias twice, a pair).
  struct Stage {
    uint4 wa[U], wb[U];
    unsigned sa[U], sb[U], ba[U], bb[U];
  };
  auto load = [&](Stage& st, int c0) {
#pragma unroll
    for (int u = 0; u < U; u++) {
      const int c = c0 + u;
      if (c < ce) {
        st.wa[u] = __ldg(wq + (ra * chunks + c) * 4 + t);
        st.wb[u] = __ldg(wq + (rb * chunks + c) * 4 + t);
        const int gi = (c * 128 + 32 * t) / G;
        const unsigned s0 = __ldg(sp + ra * groups + gi), s1 = __ldg(sp + rb * groups + gi);
        const unsigned b0 = __ldg(bp + ra * groups + gi), b1 = __ldg(bp + rb * groups + gi);
        st.sa[u] = s0 | (s0 << 16);
        st.sb[u] = s1 | (s1 << 16);
        st.ba[u] = b0 | (b0 << 16);
        st.bb[u] = b1 | (b1 << 16);
      } else {
        st.wa[u] = st.wb[u] = make_uint4(0, 0, 0, 0);
        st.sa[u] = st.sb[u] = st.ba[u] = st.bb[u] = 0;
      }
    }
  };
  auto compute = [&](const Stage& st, int c0) {
#pragma unroll
    for (int u = 0; u < U; u++) {
      const int c = c0 + u;
      if (c >= ce) {
        break;
      }
      uint4 xv[NT][4];
#pragma unroll
      for (int j = 0; j < NT; j++) {
        const int m = 8 * j + g;
        const size_t off = (size_t)m * K + (size_t)c * 128 + 32 * t;
#pragma unroll
        for (int q = 0; q < 4; q++) {
          if (m >= M) {
            xv[j][q] = make_uint4(0, 0, 0, 0);
          } else if (xaligned) {
            xv[j][q] = __ldg(reinterpret_cast<const uint4*>(xp + off) + q);
          } else {
            const unsigned short* e = xp + off + 8 * q;
            xv[j][q] = make_uint4(e[0] | ((unsigned)e[1] << 16), e[2] | ((unsigned)e[3] << 16),
                                  e[4] | ((unsigned)e[5] << 16), e[6] | ((unsigned)e[7] << 16));
          }
        }
      }
#pragma unroll
      for (int q = 0; q < 4; q++) {
        const uint4& wa = st.wa[u];
        const uint4& wb = st.wb[u];
        const unsigned qa = q == 0 ? wa.x : q == 1 ? wa.y : q == 2 ? wa.z : wa.w;
        const unsigned qb = q == 0 ? wb.x : q == 1 ? wb.y : q == 2 ? wb.z : wb.w;
        unsigned pa[4], pb[4];
#pragma unroll
        for (int i = 0; i < 4; i++) {
          pa[i] = dq(((qa >> (4 * i)) & 0x000F000Fu) | MAGIC, st.sa[u], st.ba[u]);
          pb[i] = dq(((qb >> (4 * i)) & 0x000F000Fu) | MAGIC, st.sb[u], st.bb[u]);
        }
#pragma unroll
        for (int j = 0; j < NT; j++) {
          const uint4 xw = xv[j][q];
          const unsigned x04 = __byte_perm(xw.x, xw.z, 0x5410), x15 = __byte_perm(xw.x, xw.z, 0x7632);
          const unsigned x26 = __byte_perm(xw.y, xw.w, 0x5410), x37 = __byte_perm(xw.y, xw.w, 0x7632);
          mma(acc[j], pa[0], pb[0], pa[1], pb[1], x04, x15);
          mma(acc[j], pa[2], pb[2], pa[3], pb[3], x26, x37);
        }
      }
    }
  };
  // Without PF, a warp loads a stage, then multiplies it. With PF, it
  // loads the next stage before it multiplies this one, so that its loads
  // stay in flight while it computes (two stages of registers).
  if (PF) {
    Stage s0, s1;
    if (cb < ce) {
      load(s0, cb);
    }
    for (int c0 = cb; c0 < ce; c0 += 2 * U) {
      if (c0 + U < ce) {
        load(s1, c0 + U);
      }
      compute(s0, c0);
      if (c0 + U < ce) {
        if (c0 + 2 * U < ce) {
          load(s0, c0 + 2 * U);
        }
        compute(s1, c0 + U);
      }
    }
  } else {
    Stage s0;
    for (int c0 = cb; c0 < ce; c0 += U) {
      load(s0, c0);
      compute(s0, c0);
    }
  }
  // The warps' parts, summed by warp 0 in warp order. A product's lane
  // (g, t) holds outputs g and g + 8 of rows 2t and 2t + 1 of its tile.
  if (W > 1) {
    __shared__ float part[(W > 1 ? W - 1 : 1) * NT * 4 * 32];
    if (warp > 0) {
#pragma unroll
      for (int j = 0; j < NT; j++) {
#pragma unroll
        for (int e = 0; e < 4; e++) {
          part[(((warp - 1) * NT + j) * 4 + e) * 32 + lane] = acc[j][e];
        }
      }
    }
    __syncthreads();
    if (warp > 0) {
      return;
    }
    for (int v = 0; v < W - 1; v++) {
#pragma unroll
      for (int j = 0; j < NT; j++) {
#pragma unroll
        for (int e = 0; e < 4; e++) {
          acc[j][e] += part[((v * NT + j) * 4 + e) * 32 + lane];
        }
      }
    }
  }
#pragma unroll
  for (int j = 0; j < NT; j++) {
#pragma unroll
    for (int e = 0; e < 4; e++) {
      const int m = 8 * j + 2 * t + (e & 1);
      const int n = n0 + g + 8 * (e >> 1);
      if (m < M && n < N) {
        y[(size_t)m * N + n] = static_cast<T>(acc[j][e]);
      }
    }
  }
)";

// GemvShape is how the affine matrix-vector kernel splits its work: R
// output rows a warp, U chunks a lane loads before using them, W warps a
// block of threads; and the most rows of x it takes (Rows, at most 8),
// beyond which MLX's quantized matmul runs.
struct GemvShape {
  int R = 2, U = 4, W = 4, Rows = 4;
};

// MmaShape is how the tensor-core kernel splits its work: W warps a block
// (splitting K), U chunks a warp loads at a time (a stage), PF 1 to load a
// warp's next stage while it computes one; and the most rows of x it takes
// (Rows, at most 32), beyond which the kernels above or MLX's quantized
// matmul run.
struct MmaShape {
  int W = 4, U = 4, PF = 0, Rows = 32;
};

// GemvConfig is the kernels' setting: the matrix-vector kernel on (with
// its shape) or off, the tensor-core kernel on (with its shape) or off, or
// an error that each product reports (a malformed environment).
struct GemvConfig {
  bool on = true;
  GemvShape shape;
  int fused = 1;
  bool mma = true;
  MmaShape mma_shape;
  const char* error = nullptr;
};

// read_gemv_config reads PROVIDER_GPU_QMV: unset or 1 for the default
// shape, 0 for MLX's own quantized matmul, R:U:W for another shape
// (benchmarks); and PROVIDER_GPU_QMV_ROWS, the most rows the kernel takes
// (default 4: on an H100 it beats MLX's kernels at 1, 2 and 4 rows and
// loses at 8); PROVIDER_GPU_QMV_FUSED: 1 (the default) fuses its products
// with what the layer does next (see kAffineGemvAdd), 2 with the RMSNorm
// before too (kGemvNorm: not the same floats as MLX's RMSNorm apart, and
// on an H100 a one-row step no faster than 1's), 0 with neither.
// PROVIDER_GPU_QMMA: unset or 1 for the tensor-core kernel with the
// default shape, 0 for none, W:U[:P] for another shape (P 1
// loads a warp's next stage while it computes one); it takes 2
// to PROVIDER_GPU_QMMA_ROWS rows (default 32), and one row too when the
// matrix-vector kernel is off (on an H100 the matrix-vector kernel's
// one-row step is 11 % faster; at 8 rows the tensor-core kernel's step
// is 2.3x faster than MLX's matmul's). Without a CUDA device both are
// off.
GemvConfig read_gemv_config() {
  GemvConfig c;
  GemvShape& g = c.shape;
  if (const char* r = std::getenv("PROVIDER_GPU_QMV_ROWS"); r != nullptr && *r != '\0') {
    if (std::sscanf(r, "%d", &g.Rows) != 1 || g.Rows < 1 || g.Rows > 8) {
      c.error = "PROVIDER_GPU_QMV_ROWS: want 1 to 8";
      return c;
    }
  }
  if (const char* f = std::getenv("PROVIDER_GPU_QMV_FUSED"); f != nullptr && *f != '\0') {
    if (std::strlen(f) != 1 || f[0] < '0' || f[0] > '2') {
      c.error = "PROVIDER_GPU_QMV_FUSED: want 0, 1 or 2";
      return c;
    }
    c.fused = f[0] - '0';
  }
  const char* v = std::getenv("PROVIDER_GPU_QMV");
  if (v != nullptr && std::strcmp(v, "0") == 0) {
    c.on = false;
  } else if (v != nullptr && *v != '\0' && std::strcmp(v, "1") != 0 &&
             (std::sscanf(v, "%d:%d:%d", &g.R, &g.U, &g.W) != 3 || g.R < 1 || g.R > 8 || g.U < 1 || g.U > 8 ||
              g.W < 1 || g.W > 32)) {
    c.error = "PROVIDER_GPU_QMV: want 0, 1 or R:U:W (rows a warp 1-8, chunks in flight 1-8, warps 1-32)";
  }
  MmaShape& m = c.mma_shape;
  if (const char* r = std::getenv("PROVIDER_GPU_QMMA_ROWS"); r != nullptr && *r != '\0') {
    if (std::sscanf(r, "%d", &m.Rows) != 1 || m.Rows < 1 || m.Rows > 32) {
      c.error = "PROVIDER_GPU_QMMA_ROWS: want 1 to 32";
      return c;
    }
  }
  const char* q = std::getenv("PROVIDER_GPU_QMMA");
  if (q != nullptr && std::strcmp(q, "0") == 0) {
    c.mma = false;
  } else if (q != nullptr && *q != '\0' && std::strcmp(q, "1") != 0) {
    const int n = std::sscanf(q, "%d:%d:%d", &m.W, &m.U, &m.PF);
    if (n < 2 || m.W < 1 || m.W > 16 || m.U < 1 || m.U > 8 || m.PF < 0 || m.PF > 1) {
      c.error = "PROVIDER_GPU_QMMA: want 0, 1 or W:U[:P] (warps a block 1-16, chunks a stage 1-8, P 1 to prefetch)";
    }
  }
  c.on = c.on && mx::cu::is_available();
  c.mma = c.mma && mx::cu::is_available();
  return c;
}

// The setting, read from the environment once (until
// mlx_cuda_gemv_reload), not on each of a step's products.
std::mutex g_gemv_mu;
std::optional<GemvConfig> g_gemv;

// gemv_setting is the setting, read if it has not been; the caller holds
// g_gemv_mu.
GemvConfig& gemv_setting() {
  if (!g_gemv) {
    g_gemv = read_gemv_config();
  }
  return *g_gemv;
}

GemvConfig gemv_config() {
  std::lock_guard<std::mutex> lock(g_gemv_mu);
  return gemv_setting();
}

// set_mma turns the tensor-core kernel on or off until the environment is
// read again, and reports the setting before.
bool set_mma(bool on) {
  std::lock_guard<std::mutex> lock(g_gemv_mu);
  GemvConfig& c = gemv_setting();
  const bool was = c.mma;
  c.mma = on && mx::cu::is_available();
  return was;
}

// set_fused sets how far the matrix-vector products fuse (0 to 2, as
// PROVIDER_GPU_QMV_FUSED) until the environment is read again, and
// reports the setting before.
int set_fused(int level) {
  std::lock_guard<std::mutex> lock(g_gemv_mu);
  GemvConfig& c = gemv_setting();
  const int was = c.fused;
  c.fused = std::clamp(level, 0, 2);
  return was;
}

// launch is a call of MLX's custom-kernel function fn that makes the
// primitive once for each distinct launch: fn writes the kernel's whole
// source (kilobytes) on every call, on the host's path of every step,
// while the primitive it makes depends only on what the key holds (the
// function, the template arguments, the inputs' dtypes and whether each
// has dimensions, the outputs' dtypes, the grid, the block and the
// stream). Later calls make their arrays on the same primitive, which no
// evaluation changes. The primitives each hold their source: past
// kMadeKernels distinct launches (the split kernel's grid grows with a
// step's longest table), the cache starts over. PROVIDER_GPU_LAUNCH_CACHE=0
// (read once) turns it off.
constexpr size_t kMadeKernels = 512;

std::vector<mx::array> launch(const mx::fast::CustomKernelFunction& fn, const std::vector<mx::array>& inputs,
                              std::vector<mx::Shape> shapes, const std::vector<mx::Dtype>& dtypes,
                              std::tuple<int, int, int> grid, std::tuple<int, int, int> block,
                              const std::vector<std::pair<std::string, mx::fast::TemplateArg>>& targs,
                              const mx::Stream& s) {
  static const bool on = [] {
    const char* v = std::getenv("PROVIDER_GPU_LAUNCH_CACHE");
    return v == nullptr || std::strcmp(v, "0") != 0;
  }();
  if (!on) {
    return fn(inputs, std::move(shapes), dtypes, grid, block, targs, std::nullopt, false, s);
  }
  static std::mutex mu;
  static std::map<std::vector<int64_t>, std::shared_ptr<mx::Primitive>> made;
  auto code = [](mx::Dtype d) { return static_cast<int64_t>(d.val()); };
  std::vector<int64_t> key{reinterpret_cast<int64_t>(&fn),
                           std::get<0>(grid),
                           std::get<1>(grid),
                           std::get<2>(grid),
                           std::get<0>(block),
                           std::get<1>(block),
                           std::get<2>(block),
                           static_cast<int64_t>(s.device.type),
                           s.index};
  for (const auto& in : inputs) {
    key.push_back(code(in.dtype()) * 2 + (in.ndim() > 0));
  }
  for (const auto& d : dtypes) {
    key.push_back(code(d));
  }
  for (const auto& [name, arg] : targs) {
    key.push_back(std::visit(
        [&](const auto& v) -> int64_t {
          if constexpr (std::is_same_v<std::decay_t<decltype(v)>, mx::Dtype>) {
            return code(v);
          } else {
            return static_cast<int64_t>(v);
          }
        },
        arg));
  }
  {
    std::lock_guard<std::mutex> lock(mu);
    if (auto it = made.find(key); it != made.end()) {
      return mx::array::make_arrays(std::move(shapes), dtypes, it->second, inputs);
    }
  }
  auto out = fn(inputs, shapes, dtypes, grid, block, targs, std::nullopt, false, s);
  std::lock_guard<std::mutex> lock(mu);
  if (made.size() >= kMadeKernels) {
    made.clear();
  }
  made.emplace(std::move(key), out[0].primitive_ptr());
  return out;
}

// The rotation of a fused q/k/v projection's heads (CUDA, compiled at run
// time by MLX): y [N, (H + 2 KV) * D] holds each token's H query heads,
// then its KV key heads, then its KV value heads; q [N, H, D] and k [N, KV,
// D] are them rotated at the token's position pos[n] (the first DIMS
// elements of a head, in pairs (j, j + DIMS/2), or (2j, 2j + 1) when
// TRAD), v [N, KV, D] the values copied. A thread takes one pair of one
// head of one token (blockIdx.y); the angle is scale * pos * inv_freq in
// float, inv_freq being 1 / freqs[j] or base^(-j / (DIMS/2)), and the
// products are float, as MLX's own rotation computes them. Its cosine and
// sine are taken in double: the single-precision functions, under the
// fast math MLX may compile with, lose digits at the angles of positions
// in the thousands.
constexpr const char* kHeadsRope = R"(
  constexpr int HALF = D / 2;
  constexpr int RH = DIMS / 2;
  constexpr int HEADS = H + 2 * KV;
  const int t = blockIdx.x * blockDim.x + threadIdx.x;
  if (t >= HEADS * HALF) {
    return;
  }
  const int n = blockIdx.y;
  const int hh = t / HALF;
  const int j = t - hh * HALF;
  const bool turn = hh < H + KV && j < RH;
  int a = 2 * j, b = 2 * j + 1;
  if (hh < H + KV && !TRAD) {
    a = j < RH ? j : DIMS + 2 * (j - RH);
    b = j < RH ? j + RH : a + 1;
  }
  const T* src = y + ((size_t)n * HEADS + hh) * D;
  T* dst;
  if (hh < H) {
    dst = q + ((size_t)n * H + hh) * D;
  } else if (hh < H + KV) {
    dst = k + ((size_t)n * KV + hh - H) * D;
  } else {
    dst = v + ((size_t)n * KV + hh - H - KV) * D;
  }
  T va = src[a], vb = src[b];
  if (turn) {
    rope_turn(pos[n], rope_inv(j), va, vb);
  }
  dst[a] = va;
  dst[b] = vb;
  kv_put(n, hh, a, b, va, vb);
)";

// The rotation alone, and with the keys and values also written into a
// KV pool (kKVPut).
constexpr const char* kHeadsRopeParts[] = {kRopePair, kNoKVPut, kHeadsRope};
constexpr const char* kHeadsRopeKV[] = {kRopePair, kKVPut, kHeadsRope};

// SiLU of a fused gate/up projection's first half times its second (CUDA):
// x [M, 2F] to y [M, F], each in float, one thread an output; row m is
// blockIdx.y.
constexpr const char* kSwigluHalves = R"(
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= F) {
    return;
  }
  const size_t m = blockIdx.y;
  const float g = static_cast<float>(x[m * 2 * F + i]);
  const float u = static_cast<float>(x[m * 2 * F + F + i]);
  y[m * F + i] = static_cast<T>(g / (1.0f + expf(-g)) * u);
)";

// The expert products of a mixture's routed rows (CUDA, compiled at run
// time by MLX), for MXFP4 expert stacks: y [P, N] holds, for each routed
// pair p, x[p / topk] @ dequantize(w[idx[p]]).T (+ bias[idx[p]], rounded as
// the product and then the sum would be apart; topk = P / rows), where x
// [rows, K] is of type T, w [E, N, K / 8] packs each expert's 4-bit E2M1 values low bits
// first, and scales [E, N, K / 32] are E8M0 exponents, one per group of 32
// values. A block of W warps takes one expert (blockIdx.y) and W * R of
// its outputs; warp 0 first lists the pairs routed to the expert (in pair
// order, by ballot), and the block returns at once where there are none,
// so each expert's weights are read by the blocks of its own pairs only,
// once for every MR of them, however many pairs chose it. Lanes take turns
// over 16-byte chunks of the warp's R outputs (32 values, one group), U
// chunks a turn loaded before any is used; a value becomes a float
// through a 16-entry table in shared memory, a chunk's sum is scaled by
// its group's 2^(s - 127) once. A pair's floats depend only on its own
// row and expert, not on the other pairs of the call.
constexpr const char* kGatherFp4 = R"(
  constexpr int VALS = 32;
  const int K = w_shape[2] * 8;
  const int N = w_shape[1];
  const int P = idx_shape[0];
  const int topk = P / x_shape[0];
  const int chunks = K / VALS;
  const int e = blockIdx.y;
  const int lane = threadIdx.x & 31;
  const int wid = threadIdx.x >> 5;
  const int n0 = (blockIdx.x * W + wid) * R;
  __shared__ int list[PMAX];
  __shared__ int count;
  __shared__ float lut[16];
  if (threadIdx.x < 16) {
    const int m = threadIdx.x & 7, ex = m >> 1;
    const float mag = ex == 0 ? 0.5f * (m & 1) : (1.0f + 0.5f * (m & 1)) * static_cast<float>(1 << (ex - 1));
    lut[threadIdx.x] = threadIdx.x & 8 ? -mag : mag;
  }
  if (wid == 0) {
    int c = 0;
    for (int j0 = 0; j0 < P; j0 += 32) {
      const int j = j0 + lane;
      const bool hit = j < P && static_cast<int>(idx[j]) == e;
      const unsigned b = __ballot_sync(0xffffffffu, hit);
      if (hit) {
        list[c + __popc(b & ((1u << lane) - 1u))] = j;
      }
      c += __popc(b);
    }
    if (lane == 0) {
      count = c;
    }
  }
  __syncthreads();
  const int routed = count;
  if (routed == 0 || n0 >= N) {
    return;
  }
  int rows[R];
#pragma unroll
  for (int r = 0; r < R; r++) {
    rows[r] = e * N + min(n0 + r, N - 1);
  }
  const uint4* wq = reinterpret_cast<const uint4*>(w);
  // x's rows start 16-byte aligned where x does (K is a multiple of 32):
  // then eight values of T load as one or two vectors, else one at a time.
  const bool aligned = (reinterpret_cast<size_t>(x) & 15) == 0;
  auto load8 = [&](const T* p, float* out) {
    alignas(16) T t[8];
    if (aligned) {
#pragma unroll
      for (int b = 0; b < 8 * (int)sizeof(T) / 16; b++) {
        reinterpret_cast<uint4*>(t)[b] = __ldg(reinterpret_cast<const uint4*>(p) + b);
      }
    } else {
#pragma unroll
      for (int i = 0; i < 8; i++) {
        t[i] = p[i];
      }
    }
#pragma unroll
    for (int i = 0; i < 8; i++) {
      out[i] = static_cast<float>(t[i]);
    }
  };
  for (int i0 = 0; i0 < routed; i0 += MR) {
    // The pass's pairs: the last pass may hold fewer than MR.
    const int live = min(MR, routed - i0);
    int pair[MR];
    const T* xr[MR];
    float acc[MR][R];
#pragma unroll
    for (int m = 0; m < MR; m++) {
      pair[m] = list[min(i0 + m, routed - 1)];
      xr[m] = x + (size_t)(pair[m] / topk) * K;
#pragma unroll
      for (int r = 0; r < R; r++) {
        acc[m][r] = 0.f;
      }
    }
    for (int c0 = lane; c0 < chunks; c0 += 32 * U) {
      uint4 wv[U][R];
      float sc[U][R];
#pragma unroll
      for (int u = 0; u < U; u++) {
        const int c = c0 + 32 * u;
#pragma unroll
        for (int r = 0; r < R; r++) {
          if (c < chunks) {
            wv[u][r] = __ldg(wq + (size_t)rows[r] * chunks + c);
            const unsigned s = scales[(size_t)rows[r] * chunks + c];
            sc[u][r] = __uint_as_float(s == 0 ? 0x00400000u : s << 23);
          } else {
            wv[u][r] = make_uint4(0, 0, 0, 0);
            sc[u][r] = 0.f;
          }
        }
      }
#pragma unroll
      for (int u = 0; u < U; u++) {
        const int c = c0 + 32 * u;
        if (c >= chunks) {
          break;
        }
        float dot[MR][R];
#pragma unroll
        for (int m = 0; m < MR; m++) {
#pragma unroll
          for (int r = 0; r < R; r++) {
            dot[m][r] = 0.f;
          }
        }
#pragma unroll
        for (int j = 0; j < 4; j++) {
          float xf[MR][8];
#pragma unroll
          for (int m = 0; m < MR; m++) {
            if (m < live) {
              load8(xr[m] + (size_t)c * VALS + j * 8, xf[m]);
            }
          }
#pragma unroll
          for (int r = 0; r < R; r++) {
            const unsigned word = j == 0 ? wv[u][r].x : j == 1 ? wv[u][r].y : j == 2 ? wv[u][r].z : wv[u][r].w;
#pragma unroll
            for (int q = 0; q < 8; q++) {
              const float v = lut[(word >> (4 * q)) & 15u];
#pragma unroll
              for (int m = 0; m < MR; m++) {
                if (m < live) {
                  dot[m][r] = fmaf(xf[m][q], v, dot[m][r]);
                }
              }
            }
          }
        }
#pragma unroll
        for (int m = 0; m < MR; m++) {
#pragma unroll
          for (int r = 0; r < R; r++) {
            acc[m][r] = fmaf(sc[u][r], dot[m][r], acc[m][r]);
          }
        }
      }
    }
#pragma unroll
    for (int m = 0; m < MR; m++) {
#pragma unroll
      for (int r = 0; r < R; r++) {
#pragma unroll
        for (int o = 16; o > 0; o >>= 1) {
          acc[m][r] += __shfl_xor_sync(0xffffffffu, acc[m][r], o);
        }
      }
    }
    if (lane == 0) {
#pragma unroll
      for (int m = 0; m < MR; m++) {
        if (m >= live) {
          break;
        }
#pragma unroll
        for (int r = 0; r < R; r++) {
          const int n = n0 + r;
          if (n < N) {
            T out = static_cast<T>(acc[m][r]);
            if (HAS_BIAS) {
              out = static_cast<T>(static_cast<float>(out) + static_cast<float>(bias[(size_t)e * N + n]));
            }
            y[(size_t)pair[m] * N + n] = out;
          }
        }
      }
    }
  }
)";

// float_bits is a float's bits as an int (a template argument).
int float_bits(float f) {
  int b;
  std::memcpy(&b, &f, sizeof b);
  return b;
}

// float_type reports whether the kernels below take d.
bool float_type(mx::Dtype d) { return d == mx::float16 || d == mx::bfloat16 || d == mx::float32; }

// cuda_stream is s, refused unless it is a CUDA stream.
const mx::Stream& cuda_stream(const mlx_stream s, const char* op) {
  const mx::Stream& st = strm(s);
  if (st.device != mx::Device::gpu || !mx::cu::is_available()) {
    throw std::invalid_argument(std::string(op) + ": runs only on a CUDA stream");
  }
  return st;
}

// The most routed pairs the expert kernel takes in one call (its list of
// an expert's pairs lives in shared memory); more run through MLX's
// gather_qmm.
constexpr int kGatherFp4Pairs = 1024;

// AffineKernel is which of the project's kernels takes an affine
// product: the matrix-vector kernel, the tensor-core kernel, or neither
// (MLX's quantized matmul then does).
enum class AffineKernel { none, gemv, mma };

// affine_kernel is the kernel that takes x @ dequantize(w).T on stream st
// under setting c: none off a CUDA stream, for a layout the kernels do
// not take, or for more rows than they take. A malformed setting throws.
AffineKernel affine_kernel(const GemvConfig& c, const mx::array& x, const mx::array& w, const mx::array& scales,
                           const mx::array& biases, int group_size, int bits, const mx::Stream& st) {
  if (st.device != mx::Device::gpu || (bits != 4 && bits != 8) || x.ndim() < 1 || w.ndim() != 2 ||
      w.dtype() != mx::uint32 || scales.ndim() != 2 || scales.shape() != biases.shape() ||
      scales.dtype() != biases.dtype()) {
    return AffineKernel::none;
  }
  const int vals = 128 / bits;
  const int64_t K = x.shape(-1), N = w.shape(0);
  if (!float_type(x.dtype()) || !float_type(scales.dtype()) || K == 0 || K % vals != 0 || group_size < vals ||
      group_size % vals != 0 || K % group_size != 0 || w.shape(1) * 32 / bits != K || scales.shape(0) != N ||
      scales.shape(1) != K / group_size || x.size() == 0) {
    return AffineKernel::none;
  }
  if (c.error != nullptr) {
    throw std::invalid_argument(c.error);
  }
  const size_t rows = x.size() / K;
  const MmaShape& mm = c.mma_shape;
  if (c.mma && bits == 4 && (x.dtype() == mx::float16 || x.dtype() == mx::bfloat16) &&
      scales.dtype() == x.dtype() && group_size % 32 == 0 && K % 128 == 0 && rows <= static_cast<size_t>(mm.Rows) &&
      (rows > 1 || !c.on)) {
    return AffineKernel::mma;
  }
  if (c.on && rows <= static_cast<size_t>(c.shape.Rows)) {
    return AffineKernel::gemv;
  }
  return AffineKernel::none;
}

// gemv_launch runs fn, one of the matrix-vector kernels, over x's rows
// (inputs[0]) and `outputs` outputs of w (N for the plain kernel, in
// pairs for those that pair them), with template arguments beyond the
// shared ones in more.
std::vector<mx::array> gemv_launch(const mx::fast::CustomKernelFunction& fn, const std::vector<mx::array>& inputs,
                                   std::vector<mx::Shape> shapes, const std::vector<mx::Dtype>& dtypes, int64_t outputs,
                                   const GemvShape& g, int group_size, int bits,
                                   std::vector<std::pair<std::string, mx::fast::TemplateArg>> more,
                                   const mx::Stream& st) {
  const mx::array& x = inputs[0];
  const int M = static_cast<int>(x.size() / x.shape(-1));
  const int64_t warps = (outputs + g.R - 1) / g.R;
  const int64_t blocks = (warps + g.W - 1) / g.W;
  std::vector<std::pair<std::string, mx::fast::TemplateArg>> targs{
      {"T", x.dtype()}, {"BITS", bits}, {"G", group_size}, {"M", M}, {"R", g.R}, {"U", g.U}};
  targs.insert(targs.end(), more.begin(), more.end());
  return launch(fn, inputs, std::move(shapes), dtypes, {static_cast<int>(blocks * g.W * 32), 1, 1}, {g.W * 32, 1, 1},
                targs, st);
}

// fused_gemv reports whether the matrix-vector kernel takes x @
// dequantize(w).T fused with what follows it (pairs: two outputs of w
// make one, which needs an even R), x RMS-normalized first where norm
// holds an array (a vector of x's length).
bool fused_gemv(const GemvConfig& c, const mx::array& x, const mx::array& w, const mx::array& scales,
                const mx::array& biases, int group_size, int bits, const mx::Stream& st, bool pairs,
                const mlx_array norm) {
  if (norm.ctx != nullptr) {
    const mx::array& n = arr(norm);
    if (n.ndim() != 1 || n.size() != static_cast<size_t>(x.shape(-1)) || !float_type(n.dtype())) {
      return false;
    }
  }
  return c.fused >= 1 && (!pairs || c.shape.R % 2 == 0) &&
         affine_kernel(c, x, w, scales, biases, group_size, bits, st) == AffineKernel::gemv;
}

// norm_inputs adds what a fused kernel takes for norm (nothing where it
// holds no array) to its inputs, x first, and template arguments: the
// norm's weights and eps where the kernel normalizes x itself
// (PROVIDER_GPU_QMV_FUSED=2, weights of x's type), else x replaced by
// MLX's RMSNorm of it (as the ops apart make it). It reports whether the
// kernel normalizes.
bool norm_inputs(const GemvConfig& c, const mlx_array norm, float eps, const mx::Stream& st,
                 std::vector<mx::array>& in, std::vector<std::pair<std::string, mx::fast::TemplateArg>>& targs) {
  if (norm.ctx == nullptr) {
    return false;
  }
  if (c.fused < 2 || arr(norm).dtype() != in[0].dtype()) {
    in[0] = mx::fast::rms_norm(in[0], arr(norm), eps, st);
    return false;
  }
  in.push_back(arr(norm));
  targs.push_back({"EPS_BITS", float_bits(eps)});
  return true;
}

// kv_store reports whether a q/k/v kernel may also write its keys and
// values into the KV pool k_pool, v_pool at slots (kKVPut), and if so adds
// them to its inputs: pools [S, kv_heads, head_dim] of the kernel's type T,
// already laid out (scheduled) and row-contiguous, since MLX would hand the
// kernel a copy of any other, and slots [n] int32, each token's row of the
// pools. Where they are missing or do not fit, the kernel writes only q,
// k and v, and the caller stores k and v itself.
bool kv_store(const mlx_array k_pool, const mlx_array v_pool, const mlx_array slots, mx::Dtype t, int kv_heads,
              int head_dim, int n, std::vector<mx::array>& in) {
  if (k_pool.ctx == nullptr || v_pool.ctx == nullptr || slots.ctx == nullptr) {
    return false;
  }
  const mx::array &k = arr(k_pool), &v = arr(v_pool), &sl = arr(slots);
  auto laid_out = [](const mx::array& a) {
    return a.status() != mx::array::Status::unscheduled && a.flags().row_contiguous;
  };
  auto pool = [&](const mx::array& a) {
    return a.dtype() == t && a.ndim() == 3 && a.shape(0) == k.shape(0) && a.shape(1) == kv_heads &&
           a.shape(2) == head_dim && laid_out(a);
  };
  if (!pool(k) || !pool(v) || sl.dtype() != mx::int32 || sl.ndim() != 1 || sl.shape(0) != n || !laid_out(sl)) {
    return false;
  }
  in.insert(in.end(), {k, v, sl});
  return true;
}

}  // namespace

int mlx_cuda_available(bool* res) {
  return guard([&] { *res = mx::cu::is_available(); });
}

void mlx_cuda_gemv_reload(void) {
  std::lock_guard<std::mutex> lock(g_gemv_mu);
  g_gemv.reset();
}

bool mlx_cuda_set_qmma(bool on) { return set_mma(on); }

int mlx_cuda_paged_decode(mlx_array* res, const mlx_array q, const mlx_array k_pool, const mlx_array v_pool,
                          const mlx_array table, const mlx_array meta, int block, int window, float scale,
                          const mlx_array sinks, int keys, bool split, const mlx_stream s) {
  return guard([&] {
    const mx::array& qa = arr(q);
    check_paged_decode(qa, keys);
    const int P = qa.shape(0), H = qa.shape(1), D = qa.shape(2);
    const bool has_sinks = sinks.ctx != nullptr;
    auto args = paged_template_args(qa, block, window, scale, keys);
    if (!split) {
      static auto kernel = mx::fast::cuda_kernel("paged_decode", {"q", "kpool", "vpool", "table", "meta", "sinks"},
                                                 {"o"}, kernel_source(kPagedDecodeParts), "",
                                                 /*ensure_row_contiguous=*/true);
      args.insert(args.end() - 1, {"HAS_SINKS", has_sinks});
      auto out = launch(kernel, {qa, arr(k_pool), arr(v_pool), arr(table), arr(meta), sink_logits(sinks, H, s)},
                        {qa.shape()}, {qa.dtype()}, {H * 32 * kPagedWarps, P, 1}, {32 * kPagedWarps, 1, 1}, args,
                        strm(s));
      set(res, out[0]);
      return;
    }
    static auto kernel = mx::fast::cuda_kernel("paged_decode_split", {"q", "kpool", "vpool", "table", "meta"},
                                               {"po", "pml"}, kernel_source(kPagedSplitParts), "",
                                               /*ensure_row_contiguous=*/true);
    static auto merge = mx::fast::cuda_kernel("paged_decode_merge", {"po", "pml", "sinks"}, {"o"},
                                              kernel_source(kPagedMergeParts), "", /*ensure_row_contiguous=*/true);
    const int MB = arr(table).shape(1);
    auto parts = launch(kernel, {qa, arr(k_pool), arr(v_pool), arr(table), arr(meta)}, {{P, H, MB, D}, {P, H, MB, 2}},
                        {mx::float32, mx::float32}, {H * 32 * kPagedWarps, P, MB}, {32 * kPagedWarps, 1, 1}, args,
                        strm(s));
    auto out = launch(merge, {parts[0], parts[1], sink_logits(sinks, H, s)}, {qa.shape()}, {qa.dtype()},
                      {H * 32, P, 1}, {32, 1, 1}, {{"T", qa.dtype()}, {"D", D}, {"HAS_SINKS", has_sinks}}, strm(s));
    set(res, out[0]);
  });
}

int mlx_cuda_heads_rope(mlx_vector_array* res, const mlx_array y, int heads, int kv_heads, int head_dim, int dims,
                        bool traditional, mlx_optional_float base, float scale, const mlx_array positions,
                        const mlx_array freqs, const mlx_array k_pool, const mlx_array v_pool, const mlx_array slots,
                        bool* stored, const mlx_stream s) {
  return guard([&] {
    const mx::Stream& st = cuda_stream(s, "heads_rope");
    const mx::array& ya = arr(y);
    const mx::array& pa = arr(positions);
    const int64_t width = static_cast<int64_t>(heads + 2 * kv_heads) * head_dim;
    const bool has_freqs = freqs.ctx != nullptr;
    if (!float_type(ya.dtype()) || heads < 1 || kv_heads < 1 || head_dim < 2 || head_dim % 2 != 0 || dims < 2 ||
        dims % 2 != 0 || dims > head_dim || ya.ndim() < 1 || ya.shape(-1) != width || pa.ndim() != 1 ||
        pa.shape(0) < 1 ||
        static_cast<int64_t>(ya.size()) != pa.shape(0) * width || pa.shape(0) > 65535 ||
        (has_freqs ? arr(freqs).size() != static_cast<size_t>(dims / 2) : !base.has_value)) {
      throw std::invalid_argument("heads_rope: needs y [..., N, (heads + 2 kv_heads) * head_dim], N positions, "
                                  "even dims <= head_dim and freqs of dims/2 or a base");
    }
    static auto kernel = mx::fast::cuda_kernel("heads_rope", {"y", "pos", "freqs"}, {"q", "k", "v"},
                                               kernel_source(kHeadsRopeParts), "", /*ensure_row_contiguous=*/true);
    static auto kv = mx::fast::cuda_kernel("heads_rope_kv", {"y", "pos", "freqs", "kpool", "vpool", "slots"},
                                           {"q", "k", "v"}, kernel_source(kHeadsRopeKV), "",
                                           /*ensure_row_contiguous=*/true);
    const int N = pa.shape(0), D = head_dim;
    const int threads = (heads + 2 * kv_heads) * D / 2;
    const int block = 128;
    // Without freqs the kernel reads none.
    mx::array f = has_freqs ? mx::astype(arr(freqs), mx::float32, st) : float_zeros(1, st);
    std::vector<mx::array> in{ya, mx::astype(pa, mx::int32, st), f};
    *stored = kv_store(k_pool, v_pool, slots, ya.dtype(), kv_heads, head_dim, N, in);
    auto out = launch(*stored ? kv : kernel, in, {{N, heads, D}, {N, kv_heads, D}, {N, kv_heads, D}},
                      {ya.dtype(), ya.dtype(), ya.dtype()}, {(threads + block - 1) / block * block, N, 1}, {block, 1, 1},
                      {{"T", ya.dtype()},
                       {"H", heads},
                       {"KV", kv_heads},
                       {"D", D},
                       {"DIMS", dims},
                       {"TRAD", traditional},
                       {"HAS_FREQS", has_freqs},
                       {"LOG2_BASE_BITS", float_bits(has_freqs ? 0.f : std::log2(base.value))},
                       {"SCALE_BITS", float_bits(scale)}},
                      st);
    vec(*res) = std::move(out);
  });
}

int mlx_cuda_swiglu_halves(mlx_array* res, const mlx_array x, const mlx_stream s) {
  return guard([&] {
    const mx::Stream& st = cuda_stream(s, "swiglu_halves");
    const mx::array& xa = arr(x);
    if (!float_type(xa.dtype()) || xa.ndim() < 1 || xa.shape(-1) < 2 || xa.shape(-1) % 2 != 0 || xa.size() == 0 ||
        xa.size() / xa.shape(-1) > 65535) {
      throw std::invalid_argument("swiglu_halves: needs x [..., 2F], at most 65535 rows");
    }
    static auto kernel = mx::fast::cuda_kernel("swiglu_halves", {"x"}, {"y"}, kSwigluHalves, "",
                                               /*ensure_row_contiguous=*/true);
    const int F = xa.shape(-1) / 2;
    const int M = static_cast<int>(xa.size() / xa.shape(-1));
    const int block = 256;
    mx::Shape shape = xa.shape();
    shape.back() = F;
    auto out = launch(kernel, {xa}, {shape}, {xa.dtype()}, {(F + block - 1) / block * block, M, 1}, {block, 1, 1},
                      {{"T", xa.dtype()}, {"F", F}}, st);
    set(res, out[0]);
  });
}

int mlx_cuda_gather_fp4(mlx_vector_array* res, const mlx_array x, const mlx_array w, const mlx_array scales,
                        const mlx_array idx, const mlx_array bias, const mlx_stream s) {
  return guard([&] {
    vec(*res).clear();
    const mx::Stream& st = strm(s);
    if (st.device != mx::Device::gpu || !mx::cu::is_available()) {
      return;
    }
    const mx::array &xa = arr(x), &wa = arr(w), &sa = arr(scales), &ia = arr(idx);
    if (!float_type(xa.dtype()) || xa.ndim() != 2 || wa.ndim() != 3 || wa.dtype() != mx::uint32 || sa.ndim() != 3 ||
        sa.dtype() != mx::uint8 || ia.ndim() != 1 || (ia.dtype() != mx::int32 && ia.dtype() != mx::uint32)) {
      return;
    }
    const int E = wa.shape(0), N = wa.shape(1), K = xa.shape(1), P = ia.shape(0);
    if (K % 32 != 0 || wa.shape(2) * 8 != K || sa.shape(0) != E || sa.shape(1) != N || sa.shape(2) != K / 32 ||
        P < 1 || P > kGatherFp4Pairs || xa.shape(0) < 1 || P % xa.shape(0) != 0 || E > 65535) {
      return;
    }
    const bool has_bias = bias.ctx != nullptr;
    if (has_bias) {
      const mx::array& b = arr(bias);
      if (b.ndim() != 2 || b.shape(0) != E || b.shape(1) != N || b.dtype() != xa.dtype()) {
        return;
      }
    }
    static auto kernel = mx::fast::cuda_kernel("gather_fp4", {"x", "w", "scales", "idx", "bias"}, {"y"}, kGatherFp4,
                                               "", /*ensure_row_contiguous=*/true);
    // A pass takes up to MR pairs of an expert. One work shape for every
    // call: each distinct launch is a kernel that MLX compiles at run time,
    // seconds each, so the products of a layer (whatever their pairs)
    // share one.
    constexpr int R = 4, W = 4, U = 2, MR = 4;
    const int blocks = (N + W * R - 1) / (W * R);
    // Without biases the kernel reads none.
    mx::array b = has_bias ? arr(bias) : float_zeros(1, st);
    auto out = launch(kernel, {xa, wa, sa, ia, b}, {{P, N}}, {xa.dtype()}, {blocks * W * 32, E, 1}, {W * 32, 1, 1},
                      {{"T", xa.dtype()},
                       {"R", R},
                       {"W", W},
                       {"MR", MR},
                       {"U", U},
                       {"PMAX", kGatherFp4Pairs},
                       {"HAS_BIAS", has_bias}},
                      st);
    vec(*res) = std::move(out);
  });
}

int mlx_cuda_affine_gemv_add(mlx_vector_array* res, const mlx_array x, const mlx_array w, const mlx_array scales,
                             const mlx_array biases, int group_size, int bits, const mlx_array residual,
                             const mlx_stream s) {
  return guard([&] {
    const mx::array &xa = arr(x), &wa = arr(w), &ra = arr(residual);
    const mx::Stream& st = strm(s);
    const GemvConfig c = gemv_config();
    if (!fused_gemv(c, xa, wa, arr(scales), arr(biases), group_size, bits, st, false, mlx_array{})) {
      vec(*res).clear();
      return;
    }
    mx::Shape shape = xa.shape();
    shape.back() = wa.shape(0);
    if (ra.shape() != shape || ra.dtype() != xa.dtype()) {
      vec(*res).clear();
      return;
    }
    static auto kernel = mx::fast::cuda_kernel("affine_gemv_add", {"x", "w", "scales", "biases", "res"}, {"y"},
                                               kernel_source(kAffineGemvAdd), "", /*ensure_row_contiguous=*/true);
    vec(*res) = gemv_launch(kernel, {xa, wa, arr(scales), arr(biases), ra}, {shape}, {xa.dtype()}, wa.shape(0),
                            c.shape, group_size, bits, {}, st);
  });
}

int mlx_cuda_affine_gemv_swiglu(mlx_vector_array* res, const mlx_array x, const mlx_array w, const mlx_array scales,
                                const mlx_array biases, int group_size, int bits, const mlx_array norm, float eps,
                                const mlx_stream s) {
  return guard([&] {
    const mx::array &xa = arr(x), &wa = arr(w);
    const mx::Stream& st = strm(s);
    const GemvConfig c = gemv_config();
    if (!fused_gemv(c, xa, wa, arr(scales), arr(biases), group_size, bits, st, true, norm) || wa.shape(0) % 2 != 0) {
      vec(*res).clear();
      return;
    }
    static auto kernel = mx::fast::cuda_kernel("affine_gemv_swiglu", {"x", "w", "scales", "biases"}, {"y"},
                                               kernel_source(kAffineGemvSwiglu), "", /*ensure_row_contiguous=*/true);
    static auto normed = mx::fast::cuda_kernel("affine_gemv_swiglu_norm", {"x", "w", "scales", "biases", "nw"}, {"y"},
                                               kernel_source(kAffineGemvSwigluNorm), "",
                                               /*ensure_row_contiguous=*/true);
    mx::Shape shape = xa.shape();
    shape.back() = wa.shape(0) / 2;
    std::vector<mx::array> in{xa, wa, arr(scales), arr(biases)};
    std::vector<std::pair<std::string, mx::fast::TemplateArg>> targs;
    const bool inside = norm_inputs(c, norm, eps, st, in, targs);
    vec(*res) = gemv_launch(inside ? normed : kernel, in, {shape}, {xa.dtype()}, wa.shape(0), c.shape, group_size, bits,
                            std::move(targs), st);
  });
}

int mlx_cuda_affine_gemv_heads_rope(mlx_vector_array* res, const mlx_array x, const mlx_array w,
                                    const mlx_array scales, const mlx_array biases, int group_size, int bits,
                                    const mlx_array norm, float eps, int heads, int kv_heads, int head_dim, int dims,
                                    bool traditional, mlx_optional_float base, float scale, const mlx_array positions,
                                    const mlx_array freqs, const mlx_array k_pool, const mlx_array v_pool,
                                    const mlx_array slots, bool* stored, const mlx_stream s) {
  return guard([&] {
    *stored = false;
    const mx::array &xa = arr(x), &wa = arr(w), &pa = arr(positions);
    const mx::Stream& st = strm(s);
    const GemvConfig c = gemv_config();
    const bool has_freqs = freqs.ctx != nullptr;
    const int64_t width = static_cast<int64_t>(heads + 2 * kv_heads) * head_dim;
    // What mlx_cuda_heads_rope takes, for the rows the kernel takes.
    if (!fused_gemv(c, xa, wa, arr(scales), arr(biases), group_size, bits, st, true, norm) || heads < 1 ||
        kv_heads < 1 || head_dim < 2 || head_dim % 2 != 0 || dims < 2 || dims % 2 != 0 || dims > head_dim ||
        wa.shape(0) != width || pa.ndim() != 1 || static_cast<int64_t>(xa.size() / xa.shape(-1)) != pa.shape(0) ||
        (has_freqs ? arr(freqs).size() != static_cast<size_t>(dims / 2) : !base.has_value)) {
      vec(*res).clear();
      return;
    }
    static auto kernel = mx::fast::cuda_kernel("affine_gemv_heads_rope",
                                               {"x", "w", "scales", "biases", "pos", "freqs"}, {"q", "k", "v"},
                                               kernel_source(kAffineGemvHeads), "", /*ensure_row_contiguous=*/true);
    static auto normed = mx::fast::cuda_kernel("affine_gemv_heads_rope_norm",
                                               {"x", "w", "scales", "biases", "pos", "freqs", "nw"}, {"q", "k", "v"},
                                               kernel_source(kAffineGemvHeadsNorm), "", /*ensure_row_contiguous=*/true);
    static auto kv = mx::fast::cuda_kernel("affine_gemv_heads_rope_kv",
                                           {"x", "w", "scales", "biases", "pos", "freqs", "kpool", "vpool", "slots"},
                                           {"q", "k", "v"}, kernel_source(kAffineGemvHeadsKV), "",
                                           /*ensure_row_contiguous=*/true);
    static auto normed_kv = mx::fast::cuda_kernel(
        "affine_gemv_heads_rope_norm_kv", {"x", "w", "scales", "biases", "pos", "freqs", "kpool", "vpool", "slots", "nw"},
        {"q", "k", "v"}, kernel_source(kAffineGemvHeadsNormKV), "", /*ensure_row_contiguous=*/true);
    const int N = pa.shape(0), D = head_dim;
    // Without freqs the kernel reads none.
    mx::array f = has_freqs ? mx::astype(arr(freqs), mx::float32, st) : float_zeros(1, st);
    std::vector<mx::array> in{xa, wa, arr(scales), arr(biases), mx::astype(pa, mx::int32, st), f};
    *stored = kv_store(k_pool, v_pool, slots, xa.dtype(), kv_heads, head_dim, N, in);
    std::vector<std::pair<std::string, mx::fast::TemplateArg>> targs{
        {"H", heads},
        {"KV", kv_heads},
        {"D", D},
        {"DIMS", dims},
        {"TRAD", traditional},
        {"HAS_FREQS", has_freqs},
        {"LOG2_BASE_BITS", float_bits(has_freqs ? 0.f : std::log2(base.value))},
        {"SCALE_BITS", float_bits(scale)}};
    const bool inside = norm_inputs(c, norm, eps, st, in, targs);
    const auto& fn = *stored ? (inside ? normed_kv : kv) : (inside ? normed : kernel);
    vec(*res) = gemv_launch(fn, in, {{N, heads, D}, {N, kv_heads, D}, {N, kv_heads, D}}, {xa.dtype(), xa.dtype(), xa.dtype()},
                            width, c.shape, group_size, bits, std::move(targs), st);
  });
}

int mlx_cuda_set_qmv_fused(int level) { return set_fused(level); }

namespace provider_host {

std::optional<mx::array> cuda_affine_gemv(const mx::array& x, const mx::array& w, const mx::array& scales,
                                          const mx::array& biases, int group_size, int bits, const mx::Stream& st) {
  const GemvConfig c = gemv_config();
  const AffineKernel kind = affine_kernel(c, x, w, scales, biases, group_size, bits, st);
  if (kind == AffineKernel::none) {
    return std::nullopt;
  }
  // x is read as M rows of K whatever its shape (row-contiguous, as the
  // kernels get it), and y takes x's shape with N for K: no reshapes.
  const int64_t K = x.shape(-1), N = w.shape(0);
  const size_t rows = x.size() / K;
  mx::Shape shape = x.shape();
  shape.back() = static_cast<int>(N);
  if (kind == AffineKernel::mma) {
    const MmaShape& mm = c.mma_shape;
    static auto mma = mx::fast::cuda_kernel("affine_mma", {"x", "w", "scales", "biases"}, {"y"}, kAffineMma, "",
                                            /*ensure_row_contiguous=*/true);
    const int64_t tiles = (N + 15) / 16;
    auto out = launch(mma, {x, w, scales, biases}, {shape}, {x.dtype()},
                      {static_cast<int>(tiles * mm.W * 32), 1, 1}, {mm.W * 32, 1, 1},
                      {{"T", x.dtype()},
                       {"BF16", x.dtype() == mx::bfloat16},
                       {"G", group_size},
                       {"NT", static_cast<int>((rows + 7) / 8)},
                       {"W", mm.W},
                       {"U", mm.U},
                       {"PF", mm.PF == 1}},
                      st);
    return out[0];
  }
  static auto kernel = mx::fast::cuda_kernel("affine_gemv", {"x", "w", "scales", "biases"}, {"y"},
                                             kernel_source(kAffineGemv), "", /*ensure_row_contiguous=*/true);
  return gemv_launch(kernel, {x, w, scales, biases}, {shape}, {x.dtype()}, N, c.shape, group_size, bits, {}, st)[0];
}

}  // namespace provider_host

int mlx_eval_stepwise(const mlx_vector_array outputs) {
  return guard([&] {
    // Post-order over the unevaluated graph, then one synchronous eval per
    // node: the caller never has more than one of MLX's scheduler tasks
    // outstanding.
    std::vector<mx::array> order;
    std::unordered_set<std::uintptr_t> seen;
    std::vector<std::pair<mx::array, bool>> stack;
    for (auto& o : vec(outputs)) {
      stack.emplace_back(o, false);
    }
    while (!stack.empty()) {
      auto [a, expanded] = stack.back();
      stack.pop_back();
      if (expanded) {
        order.push_back(a);
        continue;
      }
      if (!a.has_primitive() || a.is_available() || !seen.insert(a.id()).second) {
        continue;
      }
      for (auto& s : a.siblings()) {
        seen.insert(s.id());
      }
      stack.emplace_back(a, true);
      for (auto& in : a.inputs()) {
        stack.emplace_back(in, false);
      }
    }
    for (auto& a : order) {
      mx::eval(a);
    }
    mx::eval(vec(outputs));
  });
}
