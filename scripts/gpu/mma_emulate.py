#!/usr/bin/env python3
"""Runs the affine tensor-core kernel of mlx/shim.cpp on the host, no GPU needed.

kAffineMma (y [M, N] = x [M, K] @ dequantize(w).T, 4-bit weights, on
mma.m16n8k16) is a CUDA kernel body that MLX compiles at run time. This
script compiles the unmodified body text with g++ as a host function that
runs once per simulated CUDA thread: one std::thread for each of a block's
W * 32 threads, one block at a time. AFFINE_MMA_HOST is defined, so the
body's two inline-assembly lambdas are skipped, and host versions of them
take their place:

  dq   two fused multiply-adds on pairs of float16 or bfloat16 values,
       fma(v, 1, -MAGIC) then fma(that, s, b), each computed exactly and
       rounded to nearest even in the 16-bit type, per half of the word.
  mma  the warp-collective mma.sync.aligned.m16n8k16.row.col with float32
       accumulators: each of the warp's 32 lanes leaves its fragments in
       storage of the warp and waits for the others; each lane then
       assembles the 16 x 16 A and the 16 x 8 B from the fragment layout
       of the PTX ISA and computes its own four accumulators (in double,
       stored as float).

threadIdx, blockIdx, __syncthreads, __shared__, __ldg, __byte_perm, uint4,
__int_as_float, __uint_as_float, min and Shape have host versions too. __ldg fails on a misaligned address,
and every array ends at a protected page, so a read or a write past an
array's end stops the run. The check dequantizes each weight as the kernel
does (s * q + b rounded once to x's type) and sums x * w exactly in double;
an output may differ from that by its own rounding (1e-3 of it for
float16, 8e-3 for bfloat16) plus 1e-5 of the sum of |x * w|. Each case
also runs M = 1, 3, 8, 9 and 17 rows with the same weights and warps, and
the rows the runs share must be bit-identical. x is [M, K], or [1, M, K]
in the cases where it lies off alignment.

This checks the body's indexing, packing, choice of registers and the
reduction of the warps' parts against the fragment layout as written down
here. It does not check what the device's instructions do (the rounding of
the tensor cores' sums, for one), nor compile the body for a device:
nvrtc_check.py compiles it, and TestAffineMmaCUDA in mlx/mma_cuda_test.go
runs it on a GPU.

    python3 scripts/gpu/mma_emulate.py            (g++ with C++20)
    python3 scripts/gpu/mma_emulate.py --mutate   (also checks that a few
        deliberate bugs in the body are caught)
"""
import argparse
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SHIM = ROOT / "mlx/shim.cpp"
NAME = "kAffineMma"


def source(name):
    """The text of a kernel body (a raw string constant) and the line of
    mlx/shim.cpp it starts on."""
    text = SHIM.read_text()
    m = re.search(r"constexpr const char\* %s = R\"\((.*?)\)\";" % name, text, re.S)
    if not m:
        sys.exit(f"{name} not in mlx/shim.cpp")
    return m.group(1), text.count("\n", 0, m.start(1)) + 1


def pieces(name):
    """The body of a kernel: a raw string constant (see source), or one
    assembled from pieces (an array of them) joined in order; and the line
    of mlx/shim.cpp its first piece starts on (the pieces lie apart in the
    file, so later line numbers in a compiler's message are approximate)."""
    text = SHIM.read_text()
    m = re.search(r"constexpr const char\* %s\[\] = \{([^}]*)\};" % name, text)
    if not m:
        return source(name)
    parts = [source(p.strip()) for p in m.group(1).split(",")]
    return "".join(p[0] for p in parts), parts[0][1]


# The cases: x's type, group size G, outputs N, K, warps W, chunks a stage
# U, whether a warp loads its next stage before it computes one (PF), x's
# address modulo 16. Each runs M = 1, 3, 8, 9 and 17.
# K = 1152 is 9 chunks of 128: with W = 4 each warp takes 3 and the last
# none.
CASES = [
    ("float16", 32, 40, 1152, 4, 4, False, 0),
    ("float16", 64, 16, 384, 1, 1, True, 6),
    ("float16", 128, 40, 384, 3, 2, False, 0),
    ("float16", 64, 40, 1152, 3, 2, True, 6),
    ("float16", 32, 16, 384, 4, 4, False, 6),
    ("float16", 128, 40, 1152, 1, 1, True, 0),
    ("bfloat16", 32, 40, 1152, 4, 4, False, 6),
    ("bfloat16", 64, 16, 384, 1, 1, True, 0),
    ("bfloat16", 128, 40, 384, 3, 2, False, 6),
    ("bfloat16", 64, 40, 1152, 3, 2, True, 0),
    ("bfloat16", 32, 40, 384, 4, 4, False, 0),
    ("bfloat16", 128, 16, 1152, 1, 1, True, 6),
]
ROWS = (1, 3, 8, 9, 17)

# Deliberate bugs for --mutate: (what, text of the body, replacement); the
# first occurrence is replaced. Each must make the check fail.
MUTATIONS = [
    ("x paired (x0, x5), not (x0, x4)", "__byte_perm(xw.x, xw.z, 0x5410)", "__byte_perm(xw.x, xw.z, 0x7610)"),
    ("x paired (x3, x6), not (x3, x7)", "__byte_perm(xw.y, xw.w, 0x7632)", "__byte_perm(xw.y, xw.w, 0x3276)"),
    ("scale group of value 16t, not 32t", "(c * 128 + 32 * t) / G", "(c * 128 + 16 * t) / G"),
    ("x values from 16t, not 32t", "(size_t)c * 128 + 32 * t", "(size_t)c * 128 + 16 * t"),
    ("registers a1 and a2 swapped", "mma(acc[j], pa[0], pb[0], pa[1], pb[1], x04, x15)",
     "mma(acc[j], pa[0], pa[1], pb[0], pb[1], x04, x15)"),
    ("weight nibbles paired (q1, q5) first", "pa[i] = dq(((qa >> (4 * i))", "pa[i] = dq(((qa >> (4 * (i ^ 1)))"),
    ("second weight row not clamped to N - 1", "min(n0 + g + 8, N - 1)", "(n0 + g + 8)"),
    ("x row M read", "if (m >= M)", "if (m > M)"),
    ("output rows 2t and 2t + 1 mixed up", "const int m = 8 * j + 2 * t + (e & 1);",
     "const int m = 8 * j + 2 * t + (e >> 1);"),
    ("last warp's part not added", "for (int v = 0; v < W - 1; v++)", "for (int v = 0; v + 2 < W; v++)"),
    ("prefetched stage loaded from its own chunks, not the next", "load(s1, c0 + U);", "load(s1, c0);"),
    ("a warp's part stored at the wrong lane", "e) * 32 + lane] = acc[j][e]", "e) * 32 + (lane ^ 4)] = acc[j][e]"),
    ("chunks per warp rounded down", "const int per = (chunks + W - 1) / W;", "const int per = chunks / W;"),
    ("misaligned x: values 4 and 5 swapped", "e[4] | ((unsigned)e[5] << 16)", "e[5] | ((unsigned)e[4] << 16)"),
    ("x taken as aligned at 2 bytes", "(reinterpret_cast<size_t>(x) & 15) == 0", "(reinterpret_cast<size_t>(x) & 1) == 0"),
    ("row a's scale used for row b", "sb[u] = s1 | (s1 << 16);", "sb[u] = s0 | (s0 << 16);"),
    ("bfloat16 exponent 0x4340", "0x43004300u", "0x43404300u"),
    ("rows from x's first dimension only", "for (int i = 0; i + 1 < x_ndim; i++) {", "for (int i = 0; i < 1; i++) {"),
]

# The host type each of the emulators' activation types takes (the
# prelude's bf16_t is bfloat16's).
CTYPE = {"float16": "_Float16", "bfloat16": "bf16_t", "float32": "float"}

PRELUDE = r"""
#define AFFINE_MMA_HOST
#include <signal.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdarg>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

[[noreturn]] [[gnu::format(printf, 1, 2)]] static void die(const char* fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  std::fputs("\nFAIL: ", stdout);
  std::vfprintf(stdout, fmt, ap);
  va_end(ap);
  std::fputc('\n', stdout);
  std::fflush(stdout);
  _exit(1);
}

// 16-bit floats as bits: decoding, and rounding a double to nearest even.
static double dec16(bool bf, unsigned bits) {
  bits &= 0xFFFF;
  if (bf) {
    const uint32_t u = bits << 16;
    float f;
    std::memcpy(&f, &u, 4);
    return f;
  }
  const uint16_t h16 = bits;
  _Float16 h;
  std::memcpy(&h, &h16, 2);
  return (double)h;
}

static unsigned enc16(bool bf, double v) {
  if (!bf) {
    const _Float16 h = (_Float16)v;  // correctly rounded (libgcc __truncdfhf2)
    uint16_t b;
    std::memcpy(&b, &h, 2);
    return b;
  }
  if (std::isnan(v)) {
    return 0x7FC0;
  }
  const unsigned sign = std::signbit(v) ? 0x8000 : 0;
  const double a = std::fabs(v);
  if (a == 0) {
    return sign;
  }
  int e;
  std::frexp(a, &e);  // a in [2^(e-1), 2^e)
  const double ulp = std::ldexp(1.0, std::max(e - 1, -126) - 7);
  const double r = std::nearbyint(a / ulp) * ulp;  // ties to even
  if (r >= 0x1p128) {
    return sign | 0x7F80;
  }
  const float f = (float)r;  // exact
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return sign | (u >> 16);
}

// a + b, which must be exact in double for the fma below to round once.
static double exact_sum(double a, double b) {
  const double s = a + b, bb = s - a;
  if ((a - (s - bb)) + (b - bb) != 0) {
    die("emulator: %.17g + %.17g is not exact in double", a, b);
  }
  return s;
}

struct bf16_t {
  uint16_t bits;
  bf16_t() = default;
  bf16_t(float f) : bits((uint16_t)enc16(true, f)) {}
  operator float() const { return (float)dec16(true, bits); }
};
static_assert(sizeof(bf16_t) == 2 && sizeof(_Float16) == 2);

// CUDA's names.
struct alignas(16) uint4 {
  unsigned x, y, z, w;
};
static inline uint4 make_uint4(unsigned x, unsigned y, unsigned z, unsigned w) { return uint4{x, y, z, w}; }
struct Shape {
  int d[8];
  int operator[](int i) const { return d[i]; }
};
struct Dim3 {
  unsigned x, y, z;
};
thread_local Dim3 blockDim;
static inline float __int_as_float(int i) {
  float f;
  std::memcpy(&f, &i, 4);
  return f;
}
static inline float __uint_as_float(unsigned u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
thread_local Dim3 threadIdx, blockIdx;
template <class P>
static inline P __ldg(const P* p) {
  if (reinterpret_cast<uintptr_t>(p) % alignof(P) != 0) {
    die("__ldg of %zu bytes at %p, not a multiple of %zu", sizeof(P), (const void*)p, alignof(P));
  }
  return *p;
}
template <class A, class B>
static inline auto min(A a, B b) {
  return b < a ? b : a;
}
static inline unsigned __byte_perm(unsigned a, unsigned b, unsigned s) {
  const uint64_t v = (uint64_t)b << 32 | a;
  unsigned r = 0;
  for (int i = 0; i < 4; i++) {
    r |= (unsigned)((v >> (8 * ((s >> (4 * i)) & 7))) & 0xFF) << (8 * i);
  }
  return r;
}
#define __shared__ static

// A barrier of n threads that reports, instead of hanging, a thread that
// returned from the kernel while others wait for it.
struct Barrier {
  std::mutex mu;
  std::condition_variable cv;
  const int n;
  const char* what;
  int count = 0, left = 0;
  uint64_t gen = 0;
  Barrier(int n, const char* what) : n(n), what(what) {}
  void wait() {
    std::unique_lock<std::mutex> l(mu);
    if (left) {
      die("%s reached by a thread after %d of its %d threads returned", what, left, n);
    }
    const uint64_t g0 = gen;
    if (++count == n) {
      count = 0;
      gen++;
      cv.notify_all();
      return;
    }
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(120);
    while (gen == g0) {
      if (left) {
        die("%d of %d threads wait at %s while %d returned", count, n, what, left);
      }
      if (cv.wait_until(l, deadline) == std::cv_status::timeout && gen == g0) {
        die("%d of %d threads still wait at %s after 120 s", count, n, what);
      }
    }
  }
  void leave() {
    std::lock_guard<std::mutex> l(mu);
    left++;
    cv.notify_all();
  }
};

struct Warp {
  unsigned a[32][4], b[32][2];
  Barrier bar{32, "mma.sync"};
};
struct Block {
  Barrier bar;
  std::vector<std::unique_ptr<Warp>> warps;
  explicit Block(int threads) : bar(threads, "__syncthreads") {
    for (int i = 0; i < threads / 32; i++) {
      warps.emplace_back(new Warp);
    }
  }
};
thread_local Block* tl_block;
thread_local Warp* tl_warp;
thread_local int tl_lane;

static inline void __syncthreads() { tl_block->bar.wait(); }

// fma(v, 1, -MAGIC) then fma(that, s, b) on each 16-bit half, each rounded
// once to the 16-bit type; MAGIC is 1024 (0x6400) in float16 and 128
// (0x4300) in bfloat16.
template <bool BF>
static unsigned host_dq(unsigned v, unsigned s, unsigned b) {
  const double magic = BF ? 128.0 : 1024.0;
  unsigned r = 0;
  for (int h = 0; h < 2; h++) {
    const double q = dec16(BF, enc16(BF, exact_sum(dec16(BF, v >> (16 * h)) * 1.0, -magic)));
    const unsigned o = enc16(BF, exact_sum(q * dec16(BF, s >> (16 * h)), dec16(BF, b >> (16 * h))));
    r |= o << (16 * h);
  }
  return r;
}

// mma.sync.aligned.m16n8k16.row.col.f32.{f16,bf16}.{f16,bf16}.f32, d += A B,
// for all 32 lanes of the warp together. groupID = lane >> 2, tig = lane % 4;
// a register's low 16 bits hold the lower-index element.
//   a0 = A[groupID][2 tig + {0,1}]       a1 = A[groupID + 8][2 tig + {0,1}]
//   a2 = A[groupID][2 tig + 8 + {0,1}]   a3 = A[groupID + 8][2 tig + 8 + {0,1}]
//   b0 = B[2 tig + {0,1}][groupID]       b1 = B[2 tig + 8 + {0,1}][groupID]
//   d0 = C[groupID][2 tig]      d1 = C[groupID][2 tig + 1]
//   d2 = C[groupID + 8][2 tig]  d3 = C[groupID + 8][2 tig + 1]
template <bool BF>
static void host_mma(float (&d)[4], unsigned a0, unsigned a1, unsigned a2, unsigned a3, unsigned b0, unsigned b1) {
  Warp& wp = *tl_warp;
  const int lane = tl_lane;
  wp.a[lane][0] = a0;
  wp.a[lane][1] = a1;
  wp.a[lane][2] = a2;
  wp.a[lane][3] = a3;
  wp.b[lane][0] = b0;
  wp.b[lane][1] = b1;
  wp.bar.wait();
  double A[16][16], B[16][8];
  for (int l = 0; l < 32; l++) {
    const int gid = l >> 2, tig = l & 3;
    for (int h = 0; h < 2; h++) {
      A[gid][2 * tig + h] = dec16(BF, wp.a[l][0] >> (16 * h));
      A[gid + 8][2 * tig + h] = dec16(BF, wp.a[l][1] >> (16 * h));
      A[gid][2 * tig + 8 + h] = dec16(BF, wp.a[l][2] >> (16 * h));
      A[gid + 8][2 * tig + 8 + h] = dec16(BF, wp.a[l][3] >> (16 * h));
      B[2 * tig + h][gid] = dec16(BF, wp.b[l][0] >> (16 * h));
      B[2 * tig + 8 + h][gid] = dec16(BF, wp.b[l][1] >> (16 * h));
    }
  }
  const int gid = lane >> 2, tig = lane & 3;
  for (int e = 0; e < 4; e++) {
    const int r = gid + 8 * (e >> 1), c = 2 * tig + (e & 1);
    double s = d[e];
    for (int k = 0; k < 16; k++) {
      s += A[r][k] * B[k][c];
    }
    d[e] = (float)s;
  }
  wp.bar.wait();
}

// Arrays that end at a protected page (and start after one), so that an
// access past either end faults; the fault names the array.
struct Region {
  const char* name;
  char *map, *data;
  size_t map_len, len;
};
static Region regions[8];
static int nregions;

static void on_fault(int sig, siginfo_t* si, void*) {
  char msg[256];
  const char* a = (const char*)si->si_addr;
  int n = snprintf(msg, sizeof msg, "\nFAIL: signal %d at %p", sig, (const void*)a);
  for (int i = 0; i < nregions; i++) {
    const Region& r = regions[i];
    if (a >= r.map && a < r.map + r.map_len) {
      n = snprintf(msg, sizeof msg, "\nFAIL: access to %s at byte %ld (it has %zu bytes)", r.name, (long)(a - r.data),
                   r.len);
    }
  }
  fflush(stdout);
  if (write(1, msg, n) < 0 || write(1, "\n", 1) < 0) {
  }
  _exit(1);
}

template <class E>
static E* guarded(const char* name, const void* src, size_t count, size_t misalign) {
  const size_t page = 4096, len = count * sizeof(E);
  const size_t data_pages = (len + 16 + page - 1) / page;
  char* map = (char*)mmap(nullptr, (data_pages + 2) * page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (map == MAP_FAILED) {
    die("mmap");
  }
  mprotect(map, page, PROT_NONE);
  mprotect(map + (data_pages + 1) * page, page, PROT_NONE);
  char* end = map + (data_pages + 1) * page;
  char* data = (char*)(((uintptr_t)(end - len)) & ~(uintptr_t)15);
  if (misalign) {
    data -= 16 - misalign;
  }
  std::memcpy(data, src, len);
  regions[nregions++] = Region{name, map, data, (data_pages + 2) * page, len};
  return (E*)data;
}

static void free_regions() {
  for (int i = 0; i < nregions; i++) {
    munmap(regions[i].map, regions[i].map_len);
  }
  nregions = 0;
}

// catch_faults names the array of a faulting access (on_fault).
static void catch_faults() {
  struct sigaction sa;
  std::memset(&sa, 0, sizeof sa);
  sa.sa_sigaction = on_fault;
  sa.sa_flags = SA_SIGINFO;
  sigaction(SIGSEGV, &sa, nullptr);
  sigaction(SIGBUS, &sa, nullptr);
}

static uint64_t rng_state;
static uint64_t next_u64() {  // splitmix64
  uint64_t z = (rng_state += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}
static double uniform() { return (next_u64() >> 11) * 0x1p-53; }
// About normal, mean 0 and deviation 1: twelve uniforms less 6.
static double gauss() {
  double z = -6;
  for (int i = 0; i < 12; i++) {
    z += uniform();
  }
  return z;
}

// Tally checks a case's outputs against their exact sums, each within its
// allowed error, and reports the largest share of it used.
static int passed;
struct Tally {
  const char* name;
  int bad = 0;
  double worst = 0;
  void check(int m, int n, int index, double got, double want, double tol) {
    const double err = std::fabs(got - want);
    if (!(err <= tol)) {
      if (bad++ < 8) {
        printf("\nFAIL: %s: y[%d, %d] (output index %d) got %.9g, want %.9g (allowed error %.3g)", name, m, n, index,
               got, want, tol);
      }
    } else if (err / tol > worst) {
      worst = err / tol;
    }
  }
  void done(int outputs) {
    if (bad) {
      die("%s: %d of %d outputs wrong", name, bad, outputs);
    }
    printf("ok (largest error %.3f of the allowed)\n", worst);
    fflush(stdout);
    passed++;
  }
};

// Runs a grid of blocks, one block at a time, threads threads each.
template <class F>
static void launch(int blocks, int threads, F kernel) {
  for (int bk = 0; bk < blocks; bk++) {
    Block block(threads);
    std::vector<std::thread> ts;
    for (int i = 0; i < threads; i++) {
      ts.emplace_back([&, i] {
        threadIdx = Dim3{(unsigned)i, 0, 0};
        blockIdx = Dim3{(unsigned)bk, 0, 0};
        tl_block = &block;
        tl_warp = block.warps[i / 32].get();
        tl_lane = i % 32;
        kernel();
        tl_warp->bar.leave();
        block.bar.leave();
      });
    }
    for (auto& t : ts) {
      t.join();
    }
  }
}
"""

KERNEL = r"""
template <class T_, bool BF16_, int G_, int NT_, int W_, int U_, bool PF_>
static void kernel(const T_* x, const Shape x_shape, const int x_ndim, const uint32_t* w, const Shape w_shape,
                   const T_* scales, const T_* biases, T_* y) {
  using T = T_;
  constexpr bool BF16 = BF16_;
  constexpr int G = G_, NT = NT_, W = W_, U = U_;
  constexpr bool PF = PF_;
  auto dq = [](unsigned v, unsigned s, unsigned b) { return host_dq<BF16_>(v, s, b); };
  auto mma = [](float (&d)[4], unsigned a0, unsigned a1, unsigned a2, unsigned a3, unsigned b0, unsigned b1) {
    host_mma<BF16_>(d, a0, a1, a2, a3, b0, b1);
  };
"""

DRIVER = r"""
struct Data {
  const char* type;
  int N, K, misalign;
  std::vector<uint16_t> x, s, b;  // x: 17 rows of K
  std::vector<uint32_t> w;
};

template <class T, bool BF, int G, int M, int W, int U, bool PF>
static std::vector<uint16_t> run(const Data& d) {
  char name[160];
  snprintf(name, sizeof name, "%s G=%d N=%d K=%d M=%d W:U:P=%d:%d:%d x at 16k+%d", d.type, G, d.N, d.K, M, W, U, PF,
           d.misalign);
  printf("%s: ", name);
  fflush(stdout);
  const int N = d.N, K = d.K, groups = K / G;
  const T* x = guarded<T>("x", d.x.data(), (size_t)M * K, d.misalign);
  if (((uintptr_t)x & 15) != (uintptr_t)d.misalign) {
    die("emulator: x at %p", (const void*)x);
  }
  const uint32_t* w = guarded<uint32_t>("w", d.w.data(), (size_t)N * K / 8, 0);
  const T* s = guarded<T>("scales", d.s.data(), (size_t)N * groups, 0);
  const T* b = guarded<T>("biases", d.b.data(), (size_t)N * groups, 0);
  std::vector<uint16_t> nan((size_t)M * N, 0x7FFF);
  T* y = guarded<T>("y", nan.data(), (size_t)M * N, 0);
  // x as [M, K], or as [1, M, K] where it lies off alignment: the kernel
  // takes its rows from every dimension but the last.
  const Shape xshape = d.misalign ? Shape{{1, M, K}} : Shape{{M, K}}, shape{{N, K / 8}};
  const int xndim = d.misalign ? 3 : 2;
  launch((N + 15) / 16, W * 32,
         [&] { kernel<T, BF, G, (M + 7) / 8, W, U, PF>(x, xshape, xndim, w, shape, s, b, y); });
  std::vector<uint16_t> out((size_t)M * N);
  std::memcpy(out.data(), y, out.size() * 2);
  free_regions();

  const double rel = BF ? 8e-3 : 1e-3;
  Tally tally{name};
  std::vector<double> wd(K);
  for (int n = 0; n < N; n++) {
    for (int k = 0; k < K; k++) {
      const int q = (d.w[(size_t)n * K / 8 + k / 8] >> (4 * (k % 8))) & 15;
      const double sc = dec16(BF, d.s[(size_t)n * groups + k / G]), bi = dec16(BF, d.b[(size_t)n * groups + k / G]);
      wd[k] = dec16(BF, enc16(BF, sc * q + bi));
    }
    for (int m = 0; m < M; m++) {
      double want = 0, mag = 0;
      for (int k = 0; k < K; k++) {
        const double p = dec16(BF, d.x[(size_t)m * K + k]) * wd[k];
        want += p;
        mag += std::fabs(p);
      }
      const double got = dec16(BF, out[(size_t)m * N + n]);
      tally.check(m, n, m * N + n, got, want, rel * std::fabs(want) + 1e-5 * mag);
    }
  }
  tally.done(M * N);
  return out;
}

template <class T, bool BF, int G, int W, int U, bool PF>
static void check(const char* type, int N, int K, int misalign, uint64_t seed) {
  Data d{type, N, K, misalign, {}, {}, {}, {}};
  rng_state = seed;
  d.x.resize((size_t)17 * K);
  for (auto& v : d.x) {
    v = enc16(BF, gauss());
  }
  d.w.resize((size_t)N * K / 8);
  for (auto& v : d.w) {
    v = (uint32_t)next_u64();
  }
  d.s.resize((size_t)N * (K / G));
  d.b.resize(d.s.size());
  for (size_t i = 0; i < d.s.size(); i++) {
    d.s[i] = enc16(BF, 0.01 + 0.01 * uniform());
    d.b[i] = enc16(BF, -0.1 + 0.04 * (uniform() - 0.5));
  }
  const std::vector<uint16_t> y17 = run<T, BF, G, 17, W, U, PF>(d);
  const std::vector<uint16_t> ys[] = {run<T, BF, G, 1, W, U, PF>(d), run<T, BF, G, 3, W, U, PF>(d),
                                      run<T, BF, G, 8, W, U, PF>(d), run<T, BF, G, 9, W, U, PF>(d)};
  const int ms[] = {1, 3, 8, 9};
  for (int i = 0; i < 4; i++) {
    for (int j = 0; j < ms[i] * N; j++) {
      if (ys[i][j] != y17[j]) {
        die("%s G=%d N=%d K=%d W:U:P=%d:%d:%d: y[%d, %d] is 0x%04x with M=%d, 0x%04x with M=17", type, G, N, K, W, U,
            PF, j / N, j % N, ys[i][j], ms[i], y17[j]);
      }
    }
  }
  printf("  rows bit-identical for M = 1, 3, 8, 9 and 17\n");
}

int main() {
  catch_faults();
@CASES@
  printf("passed %d\n", passed);
  return 0;
}
"""


def program(body, line):
    """The C++ program: the body at its line of mlx/shim.cpp, in a host
    function template, and the cases."""
    calls = []
    for i, (t, g, n, k, w, u, pf, off) in enumerate(CASES):
        ctype, bf = ("bf16_t", "true") if t == "bfloat16" else ("_Float16", "false")
        calls.append(f'  check<{ctype}, {bf}, {g}, {w}, {u}, {str(pf).lower()}>("{t}", {n}, {k}, {off}, {0x5EED0000 + i});')
    head = PRELUDE + KERNEL + f'#line {line} "mlx/shim.cpp"\n'
    tail = "\n}\n" + DRIVER.replace("@CASES@", "\n".join(calls))
    # Lines after the body are counted in the generated file again.
    after = head.count("\n") + body.count("\n") + 3
    return head + body + f'\n#line {after} "mma_emulate.cpp"' + tail


def build(src, tmp, tag):
    cpp = Path(tmp) / f"{tag}.cpp"
    exe = Path(tmp) / tag
    cpp.write_text(src)
    r = subprocess.run(["g++", "-std=c++20", "-O1", "-pthread", "-o", str(exe), str(cpp)],
                       capture_output=True, text=True)
    if r.returncode != 0:
        return None, r.stderr
    return exe, ""


def run(exe, echo):
    """Runs the program; returns (exit status, its output). echo prints
    its output as it comes."""
    p = subprocess.Popen([str(exe)], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    out = []
    for chunk in iter(lambda: p.stdout.readline(), ""):
        out.append(chunk)
        if echo and not chunk.startswith("passed "):
            print(chunk, end="", flush=True)
    try:
        rc = p.wait(timeout=600)
    except subprocess.TimeoutExpired:
        p.kill()
        rc = p.wait()
    return rc, "".join(out)


def check_body(tag, kernel, body, program, mutations, args):
    """Builds program(body) (the C++ program of a kernel body) with g++ and
    runs it, printing its cases; with args.mutate, also each of mutations
    (what, text of the body, replacement), each of which must fail; with
    args.keep, in a folder it keeps. It exits on anything wrong."""
    start = time.monotonic()
    tmp = tempfile.mkdtemp(prefix=tag + ".") if args.keep else None
    with tempfile.TemporaryDirectory(prefix=tag + ".") as scratch:
        where = tmp or scratch
        if args.keep:
            print(f"{tag}: files in {where}")
        exe, log = build(program(body), where, tag)
        if exe is None:
            print(log, file=sys.stderr)
            sys.exit(f"{tag}: the program did not compile")
        rc, out = run(exe, echo=True)
        if rc != 0:
            print(file=sys.stderr)
            sys.exit(f"{tag}: {kernel} FAILED (exit status {rc})")
        m = re.search(r"^passed (\d+)$", out, re.M)
        if not m:
            sys.exit(f"{tag}: the program ended without its summary")
        print(f"{tag}: {m.group(1)} cases passed")
        if not args.mutate:
            return
        missed = []
        for what, old, new in mutations:
            if old not in body:
                sys.exit(f"{tag}: mutation '{what}': {old!r} is not in the body")
            exe, log = build(program(body.replace(old, new, 1)), where, "mutant")
            if exe is None:
                print(log, file=sys.stderr)
                sys.exit(f"{tag}: mutation '{what}' did not compile")
            rc, out = run(exe, echo=False)
            fail = [x for x in out.splitlines() if x.startswith("FAIL")]
            if rc == 0:
                missed.append(what)
                print(f"mutation NOT caught: {what}")
            else:
                print(f"mutation caught: {what}: {fail[0][6:] if fail else f'exit status {rc}'}")
        if missed:
            sys.exit(f"{tag}: {len(missed)} of {len(mutations)} mutations not caught")
        print(f"{tag}: {len(mutations)} mutations caught ({time.monotonic() - start:.1f} s)")


def arguments(doc):
    """The command line of an emulator whose docstring is doc."""
    ap = argparse.ArgumentParser(description=doc.split("\n\n")[0])
    ap.add_argument("--mutate", action="store_true", help="also check that deliberate bugs in the body are caught")
    ap.add_argument("--keep", action="store_true", help="keep the generated program and print its folder")
    return ap.parse_args()


def main():
    body, line = source(NAME)
    check_body("mma_emulate", NAME, body, lambda b: program(b, line), MUTATIONS, arguments(__doc__))


if __name__ == "__main__":
    main()
