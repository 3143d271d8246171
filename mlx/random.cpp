//go:build !mlxc

// Random sampling on a stream, for stand-in weights generated where they
// will live (random.go).

#include <stdexcept>

#include "hostop.h"
#include "random.h"

namespace mx = mlx::core;
using provider_host::arr;
using provider_host::guard;
using provider_host::set;

namespace {

mx::Dtype float_dtype(mlx_dtype d) {
  switch (d) {
    case MLX_FLOAT16: return mx::float16;
    case MLX_FLOAT32: return mx::float32;
    case MLX_BFLOAT16: return mx::bfloat16;
    default: throw std::invalid_argument("random normal: dtype is not a float");
  }
}

std::optional<mx::array> opt_key(mlx_array key) {
  if (key.ctx == nullptr) {
    return std::nullopt;
  }
  return arr(key);
}

}  // namespace

extern "C" {

int mlx_random_normal(mlx_array* res, const int* shape, size_t shape_num, mlx_dtype dtype, float loc, float scale,
                      const mlx_array key, const mlx_stream s) {
  return guard([&] {
    auto dt = float_dtype(dtype);
    set(res, mx::random::normal(mx::Shape(shape, shape + shape_num), dt, loc, scale, opt_key(key),
                                *static_cast<mx::Stream*>(s.ctx)));
  });
}

int mlx_random_bits(mlx_array* res, const int* shape, size_t shape_num, int width, const mlx_array key,
                    const mlx_stream s) {
  return guard([&] {
    set(res, mx::random::bits(mx::Shape(shape, shape + shape_num), width, opt_key(key),
                              *static_cast<mx::Stream*>(s.ctx)));
  });
}

}  // extern "C"
