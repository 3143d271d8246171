// The glue shared by the package's C++ files (handles, status codes) and
// HostOp, for the kernels that run as MLX primitives on the CPU stream
// (refnum.cpp, fastcpu.cpp).
#pragma once

#include <functional>
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

  void eval_cpu(const std::vector<mx::array>& inputs, mx::array& out) override {
    out.set_data(mx::allocator::malloc(out.nbytes()));
    auto& enc = mx::cpu::get_command_encoder(stream());
    for (auto& in : inputs) {
      enc.set_input_array(in);
    }
    enc.set_output_array(out);
    enc.dispatch([fn = fn_, inputs = inputs, out = out]() mutable { fn(inputs, out); });
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
