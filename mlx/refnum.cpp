//go:build !mlxc

// Reference-numerics kernels: a few ops evaluated on the CPU exactly the way
// ggml's CPU backend evaluates them in an x86-64 AVX2+FMA build (the build
// behind testdata/ref), so that a forward pass composed of them reproduces
// llama.cpp's logits bit for bit.
//
// Why bit for bit: llama.cpp rounds every activation row entering a Q4_1 or
// Q8_0 matmul to 8 bits per element. A difference in the last bit of an
// activation moves an element across a rounding boundary now and then, the
// changed 8-bit value perturbs the next layer's input by far more than one
// bit, and that flips many more roundings: after a few layers the logits
// differ by as much as the 8-bit rounding itself (about 0.5 on SmolLM2). So
// every op feeding a quantized matmul has to produce llama.cpp's exact
// floats, in llama.cpp's order of operations:
//
//   - activation rows are quantized per block of 32: amax, d = amax/127
//     stored as binary16, q = round-half-even(x * (127/amax)), and for Q8_1
//     s = binary16(d * sum(q)) with the unrounded d;
//   - a block dot product sums the integer products in eight lanes of four
//     consecutive elements, accumulates acc[l] = fma(d_w*d_x, lane, acc[l])
//     over the blocks, adds the lanes pairwise ((l0+l4)+(l2+l6)) +
//     ((l1+l5)+(l3+l7)), and for Q4_1 adds sum_b fma(m_w, s_x, .);
//   - float32 dot products (K.Q, the weighted sum of V, F32 weights) use the
//     order of ggml's vec_dot_f32 (four 8-lane accumulators) for a single
//     row and of llamafile's sgemm (one 8-lane accumulator) for batches of
//     two rows or more;
//   - RMSNorm sums the float32 squares in double;
//   - RoPE angles follow theta_{i+1} = theta_i * base^(-2/dims) in float32
//     with the C library's sinf/cosf, and the rotation fuses its first
//     product (x0*c - x1*s as fma(x0, c, -(x1*s)));
//   - softmax and SiLU use ggml's vectorized exp approximation, softmax sums
//     per 8 lanes then in double.
//
// The kernels run as MLX primitives on the CPU stream; they are slow and only
// meant for comparing with llama.cpp. Every fused multiply-add here is an
// explicit std::fma; the pragmas below keep the compiler from fusing any
// other product and sum.

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "hostop.h"

#if defined(__clang__)
#pragma clang fp contract(off)
#elif defined(__GNUC__)
#pragma GCC optimize("O3", "fp-contract=off")
#endif

namespace mx = mlx::core;
using provider_host::guard;

namespace {

// ---------------------------------------------------------------------------
// scalar helpers

uint32_t bits_of(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

float float_of(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

// half_bits converts to IEEE binary16, rounding to nearest, ties to even.
uint16_t half_bits(float f) {
  uint32_t x = bits_of(f);
  uint16_t sign = static_cast<uint16_t>((x >> 16) & 0x8000u);
  uint32_t ax = x & 0x7fffffffu;
  if (ax >= 0x7f800000u) {  // inf, nan
    return sign | (ax > 0x7f800000u ? 0x7e00u : 0x7c00u);
  }
  if (ax >= 0x47800000u) {  // 2^16 and above: infinity
    return sign | 0x7c00u;
  }
  if (ax < 0x38800000u) {  // below 2^-14: subnormal (or zero) in binary16
    // |f| * 2^24 is exact; rounding it to an integer gives the subnormal's
    // bits, 1024 being the smallest normal.
    float v = std::fabs(f) * 16777216.0f;
    return sign | static_cast<uint16_t>(std::nearbyint(v));
  }
  uint32_t mant = ax & 0x7fffffu;
  uint32_t exp = (ax >> 23) - 127 + 15;
  uint32_t h = (exp << 10) | (mant >> 13);
  uint32_t rem = mant & 0x1fffu;
  if (rem > 0x1000u || (rem == 0x1000u && (h & 1u))) {
    h++;  // a carry into the exponent is the right result
  }
  return sign | static_cast<uint16_t>(h);
}

float half_value(uint16_t h) {
  uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1fu;
  uint32_t mant = h & 0x3ffu;
  if (exp == 0) {
    float v = static_cast<float>(mant) * (1.0f / 16777216.0f);  // exact
    return (h & 0x8000u) ? -v : v;
  }
  if (exp == 31) {
    return float_of(sign | 0x7f800000u | (mant << 13));
  }
  return float_of(sign | ((exp - 15 + 127) << 23) | (mant << 13));
}

float round_half(float f) {
  return half_value(half_bits(f));
}

// hsum8 adds eight lanes the way an AVX register is reduced: the high half
// onto the low half, then pairwise.
float hsum8(const float* a) {
  float t0 = a[4] + a[0];
  float t1 = a[5] + a[1];
  float t2 = a[6] + a[2];
  float t3 = a[7] + a[3];
  return (t0 + t2) + (t1 + t3);
}

// dot_vec is ggml_vec_dot_f32 (AVX): four 8-lane fma accumulators over steps
// of 32, reduced as (a0+a2)+(a1+a3), then high half onto low half, then two
// horizontal adds. xs and ys are the element strides.
float dot_vec(const float* x, size_t xs, const float* y, size_t ys, int n) {
  float acc[4][8] = {};
  int np = n & ~31;
  for (int i = 0; i < np; i += 32) {
    for (int j = 0; j < 4; j++) {
      for (int l = 0; l < 8; l++) {
        size_t e = static_cast<size_t>(i + 8 * j + l);
        acc[j][l] = std::fma(x[e * xs], y[e * ys], acc[j][l]);
      }
    }
  }
  float s[8];
  for (int l = 0; l < 8; l++) {
    s[l] = (acc[0][l] + acc[2][l]) + (acc[1][l] + acc[3][l]);
  }
  float t0 = s[0] + s[4], t1 = s[1] + s[5], t2 = s[2] + s[6], t3 = s[3] + s[7];
  float sum = (t0 + t1) + (t2 + t3);
  for (int i = np; i < n; i++) {  // leftovers one by one, unfused
    sum += x[static_cast<size_t>(i) * xs] * y[static_cast<size_t>(i) * ys];
  }
  return sum;
}

// dot_sgemm is llamafile's tinyBLAS F32 kernel (AVX): one 8-lane fma
// accumulator over the whole length (a multiple of 8), then hsum8.
float dot_sgemm(const float* x, size_t xs, const float* y, size_t ys, int n) {
  float acc[8] = {};
  for (int i = 0; i < n; i += 8) {
    for (int l = 0; l < 8; l++) {
      size_t e = static_cast<size_t>(i + l);
      acc[l] = std::fma(x[e * xs], y[e * ys], acc[l]);
    }
  }
  return hsum8(acc);
}

// v_expf is ggml's AVX2 ggml_v_expf, one lane: exp(x) = 2^n * (1 + p(b))
// with n = round(x/ln2), b = x - n*ln2 in two parts, p a degree-5
// polynomial; large |n| scaled in two steps, beyond 192 flushed.
float v_expf(float x) {
  const float shift = 0x1.8p23f;
  float z = std::fma(x, 0x1.715476p+0f, shift);
  float n = z - shift;
  float b = std::fma(-n, 0x1.7f7d1cp-20f, std::fma(-n, 0x1.62e4p-1f, x));
  uint32_t e = bits_of(z) << 23;
  float k = float_of(e + bits_of(1.0f));
  float u = b * b;
  float j = std::fma(std::fma(std::fma(0x1.0e4020p-7f, b, 0x1.573e2ep-5f), u,
                              std::fma(0x1.555e66p-3f, b, 0x1.fffdb6p-2f)),
                     u, 0x1.ffffecp-1f * b);
  if (!(std::fabs(n) > 126.0f)) {
    return std::fma(j, k, k);
  }
  uint32_t g = n <= 0.0f ? 0x82000000u : 0u;
  float s1 = float_of(g + 0x7f000000u);
  float s2 = float_of(e - g);
  if (std::fabs(n) > 192.0f) {
    return s1 * s1;
  }
  return std::fma(s2, j, s2) * s1;
}

// parallel_rows runs fn(begin, end) over [0, n) on up to 8 threads when the
// work is large enough to be worth it.
void parallel_rows(int n, double work, const std::function<void(int, int)>& fn) {
  int nt = 1;
  if (work > 4e6) {
    nt = static_cast<int>(std::min(8u, std::max(1u, std::thread::hardware_concurrency())));
    nt = std::min(nt, n);
  }
  if (nt <= 1) {
    fn(0, n);
    return;
  }
  std::vector<std::thread> ts;
  int per = (n + nt - 1) / nt;
  for (int i = 0; i < nt; i++) {
    int b = i * per, e = std::min(n, b + per);
    if (b < e) {
      ts.emplace_back(fn, b, e);
    }
  }
  for (auto& t : ts) {
    t.join();
  }
}

// ---------------------------------------------------------------------------
// kernels (row-major contiguous float32 unless noted)

// 8-bit activation blocks of 32, as quantize_row_q8_0 / q8_1 (AVX2) store
// them: q, binary16 d and (q8_1) binary16 s, the scales kept as their float
// values.
void quantize_row(const float* x, int k, int8_t* q, float* d, float* s) {
  for (int b = 0; b < k / 32; b++) {
    const float* xb = x + 32 * b;
    float amax = 0.0f;
    for (int j = 0; j < 32; j++) {
      amax = std::max(amax, std::fabs(xb[j]));
    }
    float dd = amax / 127.0f;
    float id = amax != 0.0f ? 127.0f / amax : 0.0f;
    int sum = 0;
    for (int j = 0; j < 32; j++) {
      int v = static_cast<int>(std::nearbyint(xb[j] * id));
      q[32 * b + j] = static_cast<int8_t>(v);
      sum += v;
    }
    d[b] = round_half(dd);
    if (s != nullptr) {
      s[b] = round_half(dd * static_cast<float>(sum));
    }
  }
}

void linear_quant(const float* x, int m, int k, const uint32_t* w, const float* scales, const float* biases, int n,
                  int kind, float* out) {
  const int nb = k / 32;
  const bool q41 = kind == MLX_REF_Q4_1;
  const int bits = q41 ? 4 : 8;
  const size_t words = static_cast<size_t>(k) * bits / 32;
  std::vector<int8_t> qx(static_cast<size_t>(m) * k);
  std::vector<float> dx(static_cast<size_t>(m) * nb), sx(static_cast<size_t>(m) * nb);
  for (int r = 0; r < m; r++) {
    quantize_row(x + static_cast<size_t>(r) * k, k, &qx[static_cast<size_t>(r) * k], &dx[static_cast<size_t>(r) * nb],
                 q41 ? &sx[static_cast<size_t>(r) * nb] : nullptr);
  }
  parallel_rows(n, static_cast<double>(m) * n * k, [&](int n0, int n1) {
    std::vector<int16_t> qw(static_cast<size_t>(k));
    for (int o = n0; o < n1; o++) {
      const uint32_t* wr = w + static_cast<size_t>(o) * words;
      const float* dr = scales + static_cast<size_t>(o) * nb;
      const float* mr = biases + static_cast<size_t>(o) * nb;
      if (q41) {
        for (int e = 0; e < k; e++) {
          qw[e] = static_cast<int16_t>((wr[e / 8] >> (4 * (e % 8))) & 15u);
        }
      } else {  // Q8_0 as 8-bit affine: stored q+128, bias -128*d
        for (int e = 0; e < k; e++) {
          qw[e] = static_cast<int16_t>(static_cast<int>((wr[e / 4] >> (8 * (e % 4))) & 255u) - 128);
        }
      }
      for (int r = 0; r < m; r++) {
        const int8_t* qr = &qx[static_cast<size_t>(r) * k];
        const float* dxr = &dx[static_cast<size_t>(r) * nb];
        const float* sxr = &sx[static_cast<size_t>(r) * nb];
        float acc[8] = {};
        float summs = 0.0f;
        for (int b = 0; b < nb; b++) {
          const float d01 = dr[b] * dxr[b];
          if (q41) {
            summs = std::fma(mr[b], sxr[b], summs);
          }
          const int16_t* wb = &qw[32 * static_cast<size_t>(b)];
          const int8_t* xb = qr + 32 * b;
          for (int l = 0; l < 8; l++) {
            const int lane = wb[4 * l] * xb[4 * l] + wb[4 * l + 1] * xb[4 * l + 1] + wb[4 * l + 2] * xb[4 * l + 2] +
                             wb[4 * l + 3] * xb[4 * l + 3];
            acc[l] = std::fma(d01, static_cast<float>(lane), acc[l]);
          }
        }
        out[static_cast<size_t>(r) * n + o] = hsum8(acc) + summs;
      }
    }
  });
}

void linear_f32(const float* x, int m, int k, const float* w, int n, float* out) {
  // llamafile's sgemm takes F32 batches of two rows or more (k a multiple
  // of 8), ggml's vec_dot single rows.
  const bool sgemm = m >= 2 && k % 8 == 0;
  parallel_rows(n, static_cast<double>(m) * n * k, [&](int n0, int n1) {
    for (int o = n0; o < n1; o++) {
      const float* wr = w + static_cast<size_t>(o) * k;
      for (int r = 0; r < m; r++) {
        const float* xr = x + static_cast<size_t>(r) * k;
        out[static_cast<size_t>(r) * n + o] = sgemm ? dot_sgemm(wr, 1, xr, 1, k) : dot_vec(wr, 1, xr, 1, k);
      }
    }
  });
}

void rms_norm(const float* x, int m, int n, const float* w, float eps, float* out) {
  for (int r = 0; r < m; r++) {
    const float* xr = x + static_cast<size_t>(r) * n;
    double sum = 0.0;
    for (int i = 0; i < n; i++) {
      sum += static_cast<double>(xr[i] * xr[i]);
    }
    const float mean = static_cast<float>(sum / n);
    const float scale = 1.0f / std::sqrt(mean + eps);
    float* o = out + static_cast<size_t>(r) * n;
    for (int i = 0; i < n; i++) {
      o[i] = (xr[i] * scale) * w[i];
    }
  }
}

// rope on x [B, H, T, D]: position offsets[b] + t; rotates the first dims
// features, adjacent pairs (traditional) or halves.
void rope(const float* x, int B, int H, int T, int D, const int32_t* offsets, int dims, bool traditional, float base,
          float freq_scale, float* out) {
  const float theta_scale = std::pow(base, -2.0f / static_cast<float>(dims));
  std::vector<float> cs(static_cast<size_t>(dims));
  for (int b = 0; b < B; b++) {
    for (int t = 0; t < T; t++) {
      float theta = static_cast<float>(offsets[b] + t);
      for (int i = 0; i < dims; i += 2) {
        float th = freq_scale * theta;
        cs[i] = std::cos(th);
        cs[i + 1] = std::sin(th);
        theta *= theta_scale;
      }
      for (int h = 0; h < H; h++) {
        size_t row = ((static_cast<size_t>(b) * H + h) * T + t) * D;
        const float* src = x + row;
        float* dst = out + row;
        for (int i = 0; i < dims; i += 2) {
          int i0 = traditional ? i : i / 2;
          int i1 = traditional ? i + 1 : i / 2 + dims / 2;
          float c = cs[i], s = cs[i + 1];
          float x0 = src[i0], x1 = src[i1];
          dst[i0] = std::fma(x0, c, -(x1 * s));
          dst[i1] = std::fma(x0, s, x1 * c);
        }
        for (int i = dims; i < D; i++) {
          dst[i] = src[i];
        }
      }
    }
  }
}

// attention: q [B, H, T, D], k and v [B, KV, S, D]; query t sits at
// position S-T+t and sees keys 0..S-T+t. batched picks the sgemm order for
// the weighted sum of V.
void attention(const float* q, const float* k, const float* v, int B, int H, int KV, int T, int S, int D, float scale,
               bool batched, float* out) {
  const int rep = H / KV;
  // llama.cpp pads the KV view to 256 cells; the padding only adds masked
  // zeros, so rounding up to whole 32-element steps gives the same sums.
  const int L = (S + 31) / 32 * 32;
  std::vector<float> w(static_cast<size_t>(L));
  // V transposed and zero-padded to L positions, as llama.cpp caches it.
  std::vector<float> vt(static_cast<size_t>(D) * L);
  for (int b = 0; b < B; b++) {
    for (int h = 0; h < H; h++) {
      const int kh = h / rep;
      const float* kb = k + (static_cast<size_t>(b) * KV + kh) * S * D;
      if (h % rep == 0) {
        const float* vb = v + (static_cast<size_t>(b) * KV + kh) * S * D;
        std::fill(vt.begin(), vt.end(), 0.0f);
        for (int s = 0; s < S; s++) {
          for (int d = 0; d < D; d++) {
            vt[static_cast<size_t>(d) * L + s] = vb[static_cast<size_t>(s) * D + d];
          }
        }
      }
      for (int t = 0; t < T; t++) {
        const float* qr = q + ((static_cast<size_t>(b) * H + h) * T + t) * D;
        const int vis = S - T + t + 1;
        float mx = -INFINITY;
        for (int s = 0; s < vis; s++) {
          w[s] = dot_vec(kb + static_cast<size_t>(s) * D, 1, qr, 1, D) * scale;
          mx = std::max(mx, w[s]);
        }
        double sum = 0.0;
        for (int c = 0; c < L; c += 8) {
          for (int l = 0; l < 8; l++) {
            int s = c + l;
            w[s] = s < vis ? v_expf(w[s] - mx) : 0.0f;
          }
          sum += static_cast<double>(hsum8(&w[c]));
        }
        const float inv = static_cast<float>(1.0 / sum);
        for (int s = 0; s < vis; s++) {
          w[s] *= inv;
        }
        float* o = out + ((static_cast<size_t>(b) * H + h) * T + t) * D;
        for (int d = 0; d < D; d++) {
          const float* vr = &vt[static_cast<size_t>(d) * L];
          o[d] = batched ? dot_sgemm(vr, 1, w.data(), 1, L) : dot_vec(vr, 1, w.data(), 1, L);
        }
      }
    }
  }
}

// swiglu over rows of n: whole groups of 8 with v_expf, the last n % 8
// elements of a row with the C library's expf, as ggml_vec_swiglu_f32.
void swiglu(const float* g, const float* u, size_t rows, int n, float* out) {
  const int nv = n - n % 8;
  for (size_t r = 0; r < rows; r++) {
    const float* gr = g + r * n;
    const float* ur = u + r * n;
    float* o = out + r * n;
    for (int i = 0; i < n; i++) {
      const float e = i < nv ? v_expf(0.0f - gr[i]) : std::exp(-gr[i]);
      o[i] = (gr[i] / (1.0f + e)) * ur[i];
    }
  }
}

// ---------------------------------------------------------------------------
// MLX glue

using provider_host::arr;
using provider_host::HostOp;
using provider_host::rows_of;
using provider_host::set;

// prep makes an input a row-contiguous array of dtype d on the CPU stream.
mx::array prep(const mx::array& a, mx::Dtype d, mx::Stream s) {
  return mx::contiguous(mx::astype(a, d, s), false, s);
}

mx::array host_op(const char* name, mx::Shape shape, std::vector<mx::array> inputs, HostOp::Fn fn) {
  mx::Stream s = mx::default_stream(mx::Device::cpu);
  for (auto& in : inputs) {
    in = prep(in, in.dtype() == mx::uint32 || in.dtype() == mx::int32 ? in.dtype() : mx::float32, s);
  }
  return mx::array(std::move(shape), mx::float32, std::make_shared<HostOp>(s, name, std::move(fn)), std::move(inputs));
}

}  // namespace

extern "C" {

int mlx_ref_linear(mlx_array* res, const mlx_array x, const mlx_array w, const mlx_array scales, const mlx_array biases,
                   int kind) {
  return guard([&] {
    const mx::array& xa = arr(x);
    const mx::array& wa = arr(w);
    if (xa.ndim() < 1 || wa.ndim() != 2) {
      throw std::invalid_argument("ref_linear: want x [..., K] and a 2-D weight");
    }
    const int k = xa.shape(-1);
    const int n = wa.shape(0);
    mx::Shape shape = xa.shape();
    shape.back() = n;
    std::vector<mx::array> in{xa, wa};
    switch (kind) {
      case MLX_REF_F32:
        if (wa.shape(1) != k) {
          throw std::invalid_argument("ref_linear: weight columns differ from the input length");
        }
        break;
      case MLX_REF_Q4_1:
      case MLX_REF_Q8_0:
        if (k % 32 != 0 || wa.dtype() != mx::uint32 || wa.shape(1) != k * (kind == MLX_REF_Q4_1 ? 4 : 8) / 32 ||
            arr(scales).ndim() != 2 || arr(scales).shape(0) != n || arr(scales).shape(1) != k / 32 ||
            arr(biases).shape() != arr(scales).shape()) {
          throw std::invalid_argument("ref_linear: quantized weight does not match groups of 32");
        }
        in.push_back(arr(scales));
        in.push_back(arr(biases));
        break;
      default:
        throw std::invalid_argument("ref_linear: unknown kind");
    }
    set(res, host_op("RefLinear", shape, std::move(in), [kind, k, n](const std::vector<mx::array>& in, mx::array& out) {
          const int m = static_cast<int>(rows_of(in[0]));
          if (kind == MLX_REF_F32) {
            linear_f32(in[0].data<float>(), m, k, in[1].data<float>(), n, out.data<float>());
          } else {
            linear_quant(in[0].data<float>(), m, k, in[1].data<uint32_t>(), in[2].data<float>(), in[3].data<float>(), n,
                         kind, out.data<float>());
          }
        }));
  });
}

int mlx_ref_rms_norm(mlx_array* res, const mlx_array x, const mlx_array weight, float eps) {
  return guard([&] {
    const mx::array& xa = arr(x);
    const int n = xa.shape(-1);
    if (arr(weight).size() != static_cast<size_t>(n)) {
      throw std::invalid_argument("ref_rms_norm: weight length differs from the row length");
    }
    set(res, host_op("RefRMSNorm", xa.shape(), {xa, arr(weight)}, [n, eps](const std::vector<mx::array>& in, mx::array& out) {
          rms_norm(in[0].data<float>(), static_cast<int>(rows_of(in[0])), n, in[1].data<float>(), eps, out.data<float>());
        }));
  });
}

int mlx_ref_rope(mlx_array* res, const mlx_array x, int dims, bool traditional, float base, float scale,
                 const mlx_array offsets) {
  return guard([&] {
    const mx::array& xa = arr(x);
    if (xa.ndim() != 4 || dims <= 0 || dims % 2 != 0 || dims > xa.shape(3) ||
        arr(offsets).size() != static_cast<size_t>(xa.shape(0))) {
      throw std::invalid_argument("ref_rope: want x [B, H, T, D], even dims <= D and B offsets");
    }
    mx::array off = mx::astype(arr(offsets), mx::int32);
    set(res, host_op("RefRoPE", xa.shape(), {xa, off},
                     [dims, traditional, base, scale](const std::vector<mx::array>& in, mx::array& out) {
                       const auto& s = in[0].shape();
                       rope(in[0].data<float>(), s[0], s[1], s[2], s[3], in[1].data<int32_t>(), dims, traditional, base,
                            scale, out.data<float>());
                     }));
  });
}

int mlx_ref_attention(mlx_array* res, const mlx_array q, const mlx_array k, const mlx_array v, float scale,
                      bool batched) {
  return guard([&] {
    const mx::array &qa = arr(q), &ka = arr(k), &va = arr(v);
    if (qa.ndim() != 4 || ka.ndim() != 4 || ka.shape() != va.shape() || qa.shape(0) != ka.shape(0) ||
        qa.shape(3) != ka.shape(3) || ka.shape(1) == 0 || qa.shape(1) % ka.shape(1) != 0 || qa.shape(2) > ka.shape(2)) {
      throw std::invalid_argument("ref_attention: want q [B, H, T, D], k and v [B, KV, S, D], S >= T");
    }
    set(res, host_op("RefAttention", qa.shape(), {qa, ka, va},
                     [scale, batched](const std::vector<mx::array>& in, mx::array& out) {
                       const auto& qs = in[0].shape();
                       const auto& ks = in[1].shape();
                       attention(in[0].data<float>(), in[1].data<float>(), in[2].data<float>(), qs[0], qs[1], ks[1],
                                 qs[2], ks[2], qs[3], scale, batched, out.data<float>());
                     }));
  });
}

int mlx_ref_swiglu(mlx_array* res, const mlx_array gate, const mlx_array up) {
  return guard([&] {
    if (arr(gate).shape() != arr(up).shape()) {
      throw std::invalid_argument("ref_swiglu: gate and up differ in shape");
    }
    set(res, host_op("RefSwiGLU", arr(gate).shape(), {arr(gate), arr(up)},
                     [](const std::vector<mx::array>& in, mx::array& out) {
                       swiglu(in[0].data<float>(), in[1].data<float>(), rows_of(in[0]), in[0].shape(-1),
                              out.data<float>());
                     }));
  });
}

}  // extern "C"
