//go:build !mlxc

// Streams of their own (stream.go).

#include "hostop.h"
#include "stream.h"

namespace mx = mlx::core;
using provider_host::guard;

extern "C" {

int mlx_stream_new_on(mlx_stream* res, const mlx_stream s) {
  return guard([&] {
    const auto* on = static_cast<const mx::Stream*>(s.ctx);
    res->ctx = new mx::Stream(mx::new_stream(on->device));
  });
}

}  // extern "C"
