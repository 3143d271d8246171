// The glue shared by the package's C++ files (handles, status codes) and
// HostOp, for the kernels that run as MLX primitives on the CPU stream
// (refnum.cpp, fastcpu.cpp).
#pragma once

#include <cstring>
#include <functional>
#include <optional>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "mlx/backend/cpu/encoder.h"
#include "mlx/mlx.h"
#include "mlx/primitives.h"
#include "mlxc.h"

// provider_mlx_fail reports through the error handler shim.cpp installs.
int provider_mlx_fail(const char* msg);

namespace provider_host {

namespace mx = mlx::core;

// HostOp is a single-output CPU primitive running fn on the stream's worker
// once its inputs are ready. The output is allocated with out's dtype.
class HostOp : public mx::UnaryPrimitive {
 public:
  using Fn = std::function<void(const std::vector<mx::array>&, mx::array&)>;

  HostOp(mx::Stream s, const char* name, Fn fn) : mx::UnaryPrimitive(s), name_(name), fn_(std::move(fn)) {}

  // An input that is not row-contiguous (a transposed or broadcast view)
  // is copied densely inside the task, once its data exists: fn always
  // reads row-major inputs, and the graph needs no Contiguous node per
  // input of an unevaluated array (14 a layer, a tenth of a decode step's
  // host work, when callers had to add them at build time).
  void eval_cpu(const std::vector<mx::array>& inputs, mx::array& out) override {
    out.set_data(mx::allocator::malloc(out.nbytes()));
    auto& enc = mx::cpu::get_command_encoder(stream());
    for (auto& in : inputs) {
      enc.set_input_array(in);
    }
    enc.set_output_array(out);
    // An input's layout is settled once its primitive was evaluated (before
    // this one), though its data is written later on the stream.
    enc.dispatch([fn = fn_, inputs = inputs, out = out]() mutable {
      for (auto& in : inputs) {
        if (!in.flags().row_contiguous) {
          in = dense(in);
        }
      }
      fn(inputs, out);
    });
  }

  // dense is a row-major copy of a, whatever its strides.
  static mx::array dense(const mx::array& a) {
    mx::array c(mx::allocator::malloc(a.nbytes()), a.shape(), a.dtype());
    const size_t is = a.itemsize();
    const int nd = a.ndim();
    const char* src = a.data<char>();
    char* dst = c.data<char>();
    if (nd == 0 || a.size() == 0) {
      std::memcpy(dst, src, a.nbytes());
      return c;
    }
    // Rows of the last axis, copied whole where that axis is contiguous.
    const int64_t last = a.shape(nd - 1), ls = a.strides()[nd - 1];
    std::vector<int> idx(nd - 1, 0);
    for (size_t r = 0, rows = a.size() / last; r < rows; r++) {
      int64_t off = 0;
      for (int d = 0; d < nd - 1; d++) {
        off += idx[d] * a.strides()[d];
      }
      char* o = dst + r * last * is;
      if (ls == 1) {
        std::memcpy(o, src + off * is, last * is);
      } else {
        for (int64_t e = 0; e < last; e++) {
          std::memcpy(o + e * is, src + (off + e * ls) * is, is);
        }
      }
      for (int d = nd - 2; d >= 0; d--) {
        if (++idx[d] < a.shape(d)) {
          break;
        }
        idx[d] = 0;
      }
    }
    return c;
  }

  void eval_gpu(const std::vector<mx::array>&, mx::array&) override {
    throw std::runtime_error(std::string(name_) + ": CPU only");
  }

  const char* name() const override {
    return name_;
  }

 private:
  const char* name_;
  Fn fn_;
};

// cuda_affine_gemv is x @ dequantize(w).T for affine weights of 4 or 8
// bits through the project's CUDA kernel (shim.cpp), or nullopt where that
// does not apply: off a CUDA stream, more rows of x than it takes
// (PROVIDER_GPU_QMV_ROWS), a layout it does not take, or
// PROVIDER_GPU_QMV=0 (both read once, at the first product).
std::optional<mx::array> cuda_affine_gemv(const mx::array& x, const mx::array& w, const mx::array& scales,
                                          const mx::array& biases, int group_size, int bits, const mx::Stream& st);

inline mx::array& arr(mlx_array a) {
  return *static_cast<mx::array*>(a.ctx);
}

// set stores v into *res, reusing the handle when it already holds an array
// (mlx-c semantics: the caller owns *res and frees it once).
inline void set(mlx_array* res, mx::array v) {
  if (res->ctx != nullptr) {
    arr(*res) = std::move(v);
  } else {
    res->ctx = new mx::array(std::move(v));
  }
}

// rows_of is the product of all but the last dimension.
inline size_t rows_of(const mx::array& a) {
  size_t r = 1;
  for (int i = 0; i + 1 < a.ndim(); i++) {
    r *= static_cast<size_t>(a.shape(i));
  }
  return r;
}

// guard runs f, turning any C++ exception into a status of 1 reported
// through the installed error handler.
template <typename F>
int guard(F&& f) {
  try {
    f();
    return 0;
  } catch (const std::exception& e) {
    return provider_mlx_fail(e.what());
  } catch (...) {
    return provider_mlx_fail("mlx: unknown C++ exception");
  }
}

}  // namespace provider_host
