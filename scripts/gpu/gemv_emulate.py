#!/usr/bin/env python3
"""Runs the affine matrix-vector kernel of mlx/shim.cpp on the host, no GPU needed.

kAffineGemv (y [M, N] = x [M, K] @ dequantize(w).T, 4- or 8-bit weights,
one warp to R outputs) is a CUDA kernel body that MLX compiles at run
time, assembled from pieces that its fused variants share (kGemvHead, the
rows, kGemvSums, the store). This script compiles the unmodified pieces
with g++ as a host function that runs once per simulated CUDA thread, with
mma_emulate.py's host versions of CUDA's names (threads, protected arrays,
__ldg that fails on a misaligned address, __byte_perm) and a warp's
__shfl_xor_sync. Host float arithmetic rounds as the device's does (fmaf
is one rounding), so the sums are the device's, bit for bit.

Each case checks every output against the exact sum in double of x times
the dequantized weights (s * q + b in float): within 4e-6 of the sum of
|x * w| plus the output's own rounding to x's type. The rows of M = 1, 2,
3 and 4 must be bit-identical, and so must three other work shapes (R:U:W)
and x read one value at a time (an address off alignment) against x read
as vectors: the kernel's claim that a row's floats depend on nothing but
the row.

    python3 scripts/gpu/gemv_emulate.py            (g++ with C++20)
    python3 scripts/gpu/gemv_emulate.py --mutate   (also checks that a few
        deliberate bugs in the body are caught)

It does not check what the device's compiler makes of the body:
nvrtc_check.py compiles it for sm_90, and TestAffineGemvCUDA in
mlx/gemv_cuda_test.go runs it on a GPU.
"""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import mma_emulate  # noqa: E402

NAME = "kAffineGemv"

# The cases: x's type, bits, group size G, outputs N, K. Each runs M = 1,
# 2, 3 and 4 with the default work shape (2:4:4), and M = 2 with 1:8:2,
# 4:2:4 and 2:1:1 and with x off alignment. K = 640 at 4 bits is 20
# chunks: a lane's one turn takes a chunk or none; K = 4608 is 144, two
# turns of 128 chunks, the second partial.
CASES = [
    ("float16", 4, 64, 37, 640),
    ("float16", 4, 64, 16, 4608),
    ("float16", 4, 32, 16, 1024),
    ("float16", 4, 128, 24, 384),
    ("float16", 8, 64, 21, 512),
    ("float16", 8, 32, 16, 320),
    ("bfloat16", 4, 64, 37, 640),
    ("bfloat16", 8, 128, 16, 512),
    ("float32", 4, 64, 19, 640),
    ("float32", 8, 64, 16, 256),
]
ROWS = (1, 2, 3, 4)
SHAPES = ((1, 8, 2), (4, 2, 4), (2, 1, 1))

# Deliberate bugs for --mutate: (what, text of the body, replacement); the
# first occurrence is replaced. Each must make the check fail.
MUTATIONS = [
    ("upper half of a word from its bytes 1, 2", "__byte_perm(word, 0x4B000000u, 0x7432)",
     "__byte_perm(word, 0x4B000000u, 0x7421)"),
    ("a half's value k scaled back by 2^-(BITS k - 1)", "1.0f / static_cast<float>(1u << (BITS * k))",
     "2.0f / static_cast<float>(1u << (BITS * k))"),
    ("values paired with the other half's x", "half[p / KC]", "half[1 - p / KC]"),
    ("value k of a half masked at k + 1", "(MASK << (BITS * k))", "(MASK << (BITS * (k + 1) % 16))"),
    ("the sum of x left out of the bias", "fmaf(bi[u][r], xs[m], acc[m][r])", "acc[m][r]"),
    ("a lane's chunks strided by 32 (U turns overlap)", "c0 += 32 * U", "c0 += 32"),
    ("a word's second vector of x loaded from its first", "reinterpret_cast<const V*>(p) + b)",
     "reinterpret_cast<const V*>(p) + 0)"),
    ("scales of the chunk's first group of the row before", "(size_t)rows[r] * groups + (size_t)c * VALS / G",
     "(size_t)rows[r] * groups + (size_t)c * VALS / G - (c > 0)"),
    ("x taken as aligned at 2 bytes", "(reinterpret_cast<size_t>(x) & 15) == 0", "(reinterpret_cast<size_t>(x) & 1) == 0"),
    ("last shuffle of the lanes' sums left out", "for (int o = 16; o > 0; o >>= 1)", "for (int o = 16; o > 1; o >>= 1)"),
]

HOST = r"""
struct alignas(8) uint2 {
  unsigned x, y;
};
static inline float rsqrtf(float v) { return 1.0f / std::sqrt(v); }

// A warp's exchange for __shfl_xor_sync: each lane leaves its value, waits
// for the others, takes its partner's, and waits again.
struct Shuffle {
  float v[32];
  Barrier bar{32, "__shfl_xor_sync"};
};
thread_local Shuffle* tl_shuffle;
static inline float __shfl_xor_sync(unsigned, float v, int o) {
  Shuffle& s = *tl_shuffle;
  s.v[tl_lane] = v;
  s.bar.wait();
  const float r = s.v[tl_lane ^ o];
  s.bar.wait();
  return r;
}

// Runs a grid of blocks of warps warps, one block at a time.
template <class F>
static void launch_warps(int blocks, int warps, F kernel) {
  for (int bk = 0; bk < blocks; bk++) {
    std::vector<std::unique_ptr<Shuffle>> sh;
    for (int i = 0; i < warps; i++) {
      sh.emplace_back(new Shuffle);
    }
    std::vector<std::thread> ts;
    for (int i = 0; i < warps * 32; i++) {
      ts.emplace_back([&, i] {
        threadIdx = Dim3{(unsigned)i, 0, 0};
        blockIdx = Dim3{(unsigned)bk, 0, 0};
        blockDim = Dim3{(unsigned)(warps * 32), 1, 1};
        tl_shuffle = sh[i / 32].get();
        tl_lane = i % 32;
        kernel();
        tl_shuffle->bar.leave();
      });
    }
    for (auto& t : ts) {
      t.join();
    }
  }
}
"""

KERNEL = r"""
template <class T_, int BITS_, int G_, int M_, int R_, int U_>
static void kernel(const T_* x, const uint32_t* w, const Shape w_shape, const T_* scales, const T_* biases, T_* y) {
  using T = T_;
  constexpr int BITS = BITS_, G = G_, M = M_, R = R_, U = U_;
"""

DRIVER = r"""
// A value of x's type as bits (float32 as its 32 bits), and back.
template <class T>
static uint32_t bits_of(double v) {
  if constexpr (sizeof(T) == 4) {
    const float f = (float)v;
    uint32_t u;
    std::memcpy(&u, &f, 4);
    return u;
  } else {
    return enc16(std::is_same_v<T, bf16_t>, v);
  }
}
template <class T>
static double value_of(uint32_t b) {
  if constexpr (sizeof(T) == 4) {
    float f;
    std::memcpy(&f, &b, 4);
    return f;
  } else {
    return dec16(std::is_same_v<T, bf16_t>, b);
  }
}

template <class T>
struct Data {
  const char* type;
  int bits, G, N, K;
  std::vector<T> x, s, b;  // x: 4 rows of K
  std::vector<uint32_t> w;
};

template <class T, int BITS, int G, int M, int R, int U>
static std::vector<uint32_t> run(const Data<T>& d, int W, size_t misalign) {
  char name[160];
  snprintf(name, sizeof name, "%s bits=%d G=%d N=%d K=%d M=%d R:U:W=%d:%d:%d x at 16k+%zu", d.type, BITS, G, d.N,
           d.K, M, R, U, W, misalign);
  printf("%s: ", name);
  fflush(stdout);
  const int N = d.N, K = d.K, groups = K / G, words = K * BITS / 32;
  const T* x = guarded<T>("x", d.x.data(), (size_t)M * K, misalign);
  const uint32_t* w = guarded<uint32_t>("w", d.w.data(), (size_t)N * words, 0);
  const T* s = guarded<T>("scales", d.s.data(), (size_t)N * groups, 0);
  const T* b = guarded<T>("biases", d.b.data(), (size_t)N * groups, 0);
  std::vector<T> init((size_t)M * N, T(12345.0f));
  T* y = guarded<T>("y", init.data(), (size_t)M * N, 0);
  const Shape shape{{N, words}};
  const int warps = (N + R - 1) / R;
  launch_warps((warps + W - 1) / W, W, [&] { kernel<T, BITS, G, M, R, U>(x, w, shape, s, b, y); });
  std::vector<uint32_t> out((size_t)M * N);
  for (size_t i = 0; i < out.size(); i++) {
    out[i] = bits_of<T>((float)y[i]);
  }
  free_regions();

  const double ulp = sizeof(T) == 4 ? 0x1p-24 : std::is_same_v<T, bf16_t> ? 0x1p-8 : 0x1p-11;
  const uint32_t mask = (1u << BITS) - 1;
  Tally tally{name};
  std::vector<double> wd(K);
  for (int n = 0; n < N; n++) {
    for (int k = 0; k < K; k++) {
      const uint32_t q = (d.w[(size_t)n * words + k * BITS / 32] >> (BITS * (k % (32 / BITS)))) & mask;
      wd[k] = (double)(float)d.s[(size_t)n * groups + k / G] * q + (double)(float)d.b[(size_t)n * groups + k / G];
    }
    for (int m = 0; m < M; m++) {
      double want = 0, mag = 0;
      for (int k = 0; k < K; k++) {
        const double p = (double)(float)d.x[(size_t)m * K + k] * wd[k];
        want += p;
        mag += std::fabs(p);
      }
      const double got = value_of<T>(out[(size_t)m * N + n]);
      tally.check(m, n, m * N + n, got, want, ulp * std::fabs(want) + 4e-6 * mag);
    }
  }
  tally.done(M * N);
  return out;
}

// same fails unless rows [0, m) of a equal those of b, bit for bit.
static void same(const char* what, const std::vector<uint32_t>& a, const std::vector<uint32_t>& b, int m, int N) {
  for (int i = 0; i < m * N; i++) {
    if (a[i] != b[i]) {
      die("%s: y[%d, %d] is 0x%08x, against 0x%08x", what, i / N, i % N, a[i], b[i]);
    }
  }
}

template <class T, int BITS, int G>
static void check(const char* type, int N, int K, uint64_t seed) {
  Data<T> d{type, BITS, G, N, K, {}, {}, {}, {}};
  rng_state = seed;
  d.x.resize((size_t)4 * K);
  for (auto& v : d.x) {
    v = T((float)gauss());
  }
  d.w.resize((size_t)N * K * BITS / 32);
  for (auto& v : d.w) {
    v = (uint32_t)next_u64();
  }
  d.s.resize((size_t)N * (K / G));
  d.b.resize(d.s.size());
  const double range = BITS == 4 ? 15 : 255;
  for (size_t i = 0; i < d.s.size(); i++) {
    d.s[i] = T((float)((0.01 + 0.01 * uniform()) * 15 / range));
    d.b[i] = T((float)(-0.1 + 0.04 * (uniform() - 0.5)));
  }
  const std::vector<uint32_t> y4 = run<T, BITS, G, 4, 2, 4>(d, 4, 0);
  same("M = 1 against M = 4", run<T, BITS, G, 1, 2, 4>(d, 4, 0), y4, 1, N);
  same("M = 2 against M = 4", run<T, BITS, G, 2, 2, 4>(d, 4, 0), y4, 2, N);
  same("M = 3 against M = 4", run<T, BITS, G, 3, 2, 4>(d, 4, 0), y4, 3, N);
  same("R:U:W = 1:8:2", run<T, BITS, G, 2, 1, 8>(d, 2, 0), y4, 2, N);
  same("R:U:W = 4:2:4", run<T, BITS, G, 2, 4, 2>(d, 4, 0), y4, 2, N);
  same("R:U:W = 2:1:1", run<T, BITS, G, 2, 2, 1>(d, 1, 0), y4, 2, N);
  same("x off alignment", run<T, BITS, G, 2, 2, 4>(d, 4, 2 * sizeof(T) % 16 ? 2 * sizeof(T) : 4), y4, 2, N);
  printf("  rows bit-identical for M = 1 to 4, four work shapes, x as vectors and not\n");
}

int main() {
  catch_faults();
@CASES@
  printf("passed %d\n", passed);
  return 0;
}
"""

CTYPE = mma_emulate.CTYPE


def program(text, line):
    calls = []
    for i, (t, bits, g, n, k) in enumerate(CASES):
        calls.append(f'  check<{CTYPE[t]}, {bits}, {g}>("{t}", {n}, {k}, {0x6E3F0000 + i});')
    head = mma_emulate.PRELUDE + "#include <type_traits>\n" + HOST + KERNEL + f'#line {line} "mlx/shim.cpp"\n'
    tail = "\n}\n" + DRIVER.replace("@CASES@", "\n".join(calls))
    after = head.count("\n") + text.count("\n") + 3
    return head + text + f'\n#line {after} "gemv_emulate.cpp"' + tail


def main():
    text, line = mma_emulate.pieces(NAME)
    mma_emulate.check_body("gemv_emulate", NAME, text, lambda b: program(b, line), MUTATIONS,
                           mma_emulate.arguments(__doc__))


if __name__ == "__main__":
    main()
