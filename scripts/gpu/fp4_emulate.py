#!/usr/bin/env python3
"""Runs the MXFP4 expert kernel of mlx/shim.cpp on the host, no GPU needed.

kGatherFp4 (y [P, N]: for each routed pair p, x[p / TOPK] @
dequantize(w[idx[p]]).T, plus bias[idx[p]] where there is one; TOPK =
P / x's rows) is a CUDA
kernel body that MLX compiles at run time. This script compiles the
unmodified body text with g++ as host functions, one for each set of
template values, declared as MLX declares them: T, R, W, MR, U, PMAX and
HAS_BIAS as constants; then x, x_shape, w, w_shape, scales, idx,
idx_shape, bias and y as parameters. A grid of blocks (blockIdx.x over tiles of
W * R outputs, blockIdx.y the expert) runs one block at a time, with one
host thread for each of a block's W * 32 threads. mma_emulate.py provides
the host versions of CUDA's names (threadIdx, __syncthreads, __ldg that
fails on a misaligned address, uint4, make_uint4, __uint_as_float, min,
Shape) and arrays that end at a protected page, so that a read or a write
past an array's end stops the run. Added here:

  __shared__        the block's variables: all its threads see the same
                    ones, and before each block they are filled with 0x7F
                    bytes (a huge int, a huge float), so that a value read
                    before the block writes it shows.
  __ballot_sync,    warp-collective: each lane leaves its value in storage
  __shfl_xor_sync   of the warp, waits for the other 31 and reads. The
                    wait is on a futex, after a few yields of the
                    processor: several times cheaper than a mutex and a
                    condition variable, which matters here, since a run of
                    P pairs and N outputs takes about 5 P N such
                    exchanges. Only a full mask is emulated; a lane that
                    reaches one after others of its warp returned, or
                    while they are at another collective, stops the run.
  __popc.

Host float arithmetic rounds as the device's does (fmaf is one rounding;
float16 and bfloat16 convert to nearest even), so the sums are the
device's, bit for bit.

Each case checks every output against the sum in double of x times the
decoded weights (E2M1 code times 2^(s - 127)), plus the bias: within 2
ulps of x's type (2^-23, 2^-10 or 2^-7 of the value, at least 2 of its
smallest steps) of the result, and of the product where the bias is added
after the product's own rounding, plus 1e-5 of the sum of |x * w|. It then
runs x's last row alone, with x at the other alignment (16-byte aligned
against a few elements off, where the body reads x one value at a time),
and in some cases all pairs again with another work shape (R:W:MR:U): a
pair's outputs must be bit-identical whatever the other pairs of the
call, the alignment of x and the work shape. The cases cover float32,
float16 and bfloat16; TOPK 1, 2 and 4; P from 1 to PMAX; an expert chosen
by many more than MR pairs and one chosen by none; N not a multiple of
W * R (nor, in some, of R); K of 2 chunks of 32 values, 11 (fewer than
the lanes), 32, and 90 (not a multiple of 32 * U); idx as int32 and as
uint32; with and without bias.

    python3 scripts/gpu/fp4_emulate.py            (g++ with C++20, Linux)
    python3 scripts/gpu/fp4_emulate.py --mutate   (also checks that a few
        deliberate bugs in the body are caught)

It does not check what the device's compiler makes of the body:
nvrtc_check.py compiles it for sm_90, and TestGatherFP4CUDA in
mlx/gather_fp4_test.go runs it on a GPU.
"""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import mma_emulate  # noqa: E402

NAME = "kGatherFp4"

# The work shape the server launches (R:W:MR:U) and the size of the
# block's list of pairs.
SHAPE = (4, 4, 4, 2)
PMAX = 1024

# The cases: x's type, TOPK, rows of x (P = rows * TOPK), experts E, N, K,
# bias, the type of idx, x's offset in elements from 16-byte alignment in
# the run of all pairs (the run of the last row alone takes the other
# alignment: 3 elements off where this is 0, else aligned), and another
# work shape that must give the same outputs, or None.
# Routing favours expert 0 (so it is chosen by many more than MR pairs)
# and never picks expert 1 where E > 2. K = 352 is 11 chunks of 32 values
# (lanes 11 to 31 have none), K = 2880 is 90 (two turns of 32 * U = 64
# chunks, the second partial), K = 1024 is 32 (one turn, its second half
# empty), K = 64 is 2. The last case fills the block's list of pairs
# (P = PMAX).
CASES = [
    ("float32", 4, 64, 8, 37, 352, True, "int32", 0, (2, 3, 3, 1)),
    ("float16", 2, 150, 6, 24, 352, False, "uint32", 3, None),
    ("bfloat16", 1, 40, 4, 200, 352, True, "int32", 0, (1, 2, 5, 3)),
    ("float16", 4, 1, 8, 200, 2880, True, "int32", 0, None),
    ("bfloat16", 2, 3, 4, 19, 2880, False, "uint32", 2, (4, 2, 8, 1)),
    ("float32", 1, 1, 3, 200, 352, False, "int32", 1, None),
    ("bfloat16", 4, 50, 16, 21, 1024, True, "uint32", 5, None),
    ("float16", 1, 300, 2, 16, 352, True, "int32", 0, None),
    ("float32", 2, 8, 5, 200, 2880, True, "uint32", 0, None),
    ("float16", 4, 256, 32, 16, 64, False, "int32", 0, None),
]

# Deliberate bugs for --mutate: (what, text of the body, replacement); the
# first occurrence is replaced. Each must make the check fail.
MUTATIONS = [
    ("a word's values paired with their neighbours' nibbles", "lut[(word >> (4 * q)) & 15u]",
     "lut[(word >> (4 * (q ^ 1))) & 15u]"),
    ("the chunk's scale left out", "acc[m][r] = fmaf(sc[u][r], dot[m][r], acc[m][r]);", "acc[m][r] += dot[m][r];"),
    ("scale exponent off by one", "s << 23)", "(s + 1) << 23)"),
    ("x's row from the pair's place in the list, not the pair",
     "xr[m] = x + (size_t)(pair[m] / topk) * K;", "xr[m] = x + (size_t)(min(i0 + m, routed - 1) / topk) * K;"),
    ("negative codes from bit 2, not bit 3", "threadIdx.x & 8 ? -mag : mag", "threadIdx.x & 4 ? -mag : mag"),
    ("code 1 read as 0.25", "0.5f * (m & 1)", "0.25f * (m & 1)"),
    ("a lane's place in the list counts itself", "(1u << lane) - 1u", "(2u << lane) - 1u"),
    ("the list restarted at each ballot", "c += __popc(b);", "c = __popc(b);"),
    ("pairs of experts above the block's routed to it too", "static_cast<int>(idx[j]) == e",
     "static_cast<int>(idx[j]) <= e"),
    ("the last, partial group of MR pairs dropped", "for (int i0 = 0; i0 < routed; i0 += MR)",
     "for (int i0 = 0; i0 + MR <= routed; i0 += MR)"),
    ("a pass's last pair not counted live", "const int live = min(MR, routed - i0);",
     "const int live = min(MR, routed - i0 - 1);"),
    ("a row's pairs from x's row count, not the pairs'", "const int topk = P / x_shape[0];",
     "const int topk = P / x_shape[1];"),
    ("rows past N - 1 not clamped", "min(n0 + r, N - 1)", "min(n0 + r, N)"),
    ("a lane's turns strided by 32 chunks, not 32 U", "c0 += 32 * U", "c0 += 32"),
    ("every chunk of a turn weighted as its first", "sc[u][r] = __uint_as_float(s == 0",
     "sc[u][r] = u ? sc[0][r] : __uint_as_float(s == 0"),
    ("x's second vector of eight floats loaded from its first", "reinterpret_cast<const uint4*>(p) + b)",
     "reinterpret_cast<const uint4*>(p) + 0)"),
    ("x taken as aligned at 4 bytes", "(reinterpret_cast<size_t>(x) & 15) == 0",
     "(reinterpret_cast<size_t>(x) & 3) == 0"),
    ("expert 0's bias for every expert", "bias[(size_t)e * N + n]", "bias[n]"),
    ("outputs at the pair's place in the list", "y[(size_t)pair[m] * N + n]", "y[(size_t)(i0 + m) * N + n]"),
    ("a block's warps overlap", "(blockIdx.x * W + wid) * R", "(blockIdx.x + wid) * R"),
    ("lanes of a warp return apart (before its full-mask shuffles)", "if (routed == 0 || n0 >= N)",
     "if (routed == 0 || n0 + lane / 8 >= N)"),
    ("last shuffle of the lanes' sums left out", "for (int o = 16; o > 0; o >>= 1)",
     "for (int o = 16; o > 1; o >>= 1)"),
]

HOST = r"""
#include <atomic>
#include <linux/futex.h>
#include <pthread.h>
#include <sched.h>
#include <sys/syscall.h>
#include <type_traits>

// Shared memory: every __shared__ variable of every kernel lives in one
// section, which launch fills with 0x7F bytes before each block.
#undef __shared__
#define __shared__ __attribute__((section("fp4_shared"))) static
extern "C" char __start_fp4_shared[], __stop_fp4_shared[];

static inline int __popc(unsigned v) { return __builtin_popcount(v); }

static void futex_wait(std::atomic<uint32_t>* a, uint32_t v, long ns) {
  timespec ts{0, ns};
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(a), FUTEX_WAIT_PRIVATE, v, &ts, nullptr, 0);
}
static void futex_wake(std::atomic<uint32_t>* a) {
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(a), FUTEX_WAKE_PRIVATE, INT32_MAX, nullptr, nullptr, 0);
}

// A warp's collectives. Each lane leaves its value and which collective it
// is at, waits for the other 31, and reads. Two sets of slots, taken in
// turn: a lane can write a set again only after the next barrier, which
// the others reach only once they have read it.
struct Lanes {
  std::atomic<uint32_t> arrived{0}, gen{0}, left{0};
  uint32_t val[2][32];
  const char* at[2][32];

  void wait(const char* what) {
    const uint32_t g = gen.load(std::memory_order_acquire);
    if (left.load()) {
      die("%s reached by a lane after %u lanes of its warp returned", what, left.load());
    }
    if (arrived.fetch_add(1, std::memory_order_acq_rel) + 1 == 32) {
      arrived.store(0, std::memory_order_relaxed);
      gen.fetch_add(1, std::memory_order_release);
      futex_wake(&gen);
      return;
    }
    // A few turns of the processor to the other lanes first, which then
    // arrive without a sleep and a wake-up each.
    for (int i = 0; i < 16 && gen.load(std::memory_order_acquire) == g; i++) {
      sched_yield();
    }
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(120);
    while (gen.load(std::memory_order_acquire) == g) {
      if (left.load()) {
        die("lanes wait at %s while %u lanes of their warp returned", what, left.load());
      }
      if (std::chrono::steady_clock::now() > deadline) {
        die("lanes still wait at %s after 120 s", what);
      }
      futex_wait(&gen, g, 100000000);
    }
  }
  void leave() {
    left.fetch_add(1);
    futex_wake(&gen);
  }
};
thread_local Lanes* tl_lanes;
thread_local unsigned tl_turn;

// Leaves v for the warp; returns the set of slots the warp's values lie in.
static int exchange(const char* what, unsigned mask, uint32_t v) {
  if (mask != 0xffffffffu) {
    die("%s with mask 0x%08x (only a full warp is emulated)", what, mask);
  }
  Lanes& l = *tl_lanes;
  const int set = tl_turn++ & 1;
  l.val[set][tl_lane] = v;
  l.at[set][tl_lane] = what;
  l.wait(what);
  for (int i = 0; i < 32; i++) {
    if (l.at[set][i] != what) {
      die("lane %d at %s while lane %d is at %s", tl_lane, what, i, l.at[set][i]);
    }
  }
  return set;
}

static inline unsigned __ballot_sync(unsigned mask, int pred) {
  static const char what[] = "__ballot_sync";
  const int set = exchange(what, mask, pred != 0);
  unsigned r = 0;
  for (int i = 0; i < 32; i++) {
    r |= tl_lanes->val[set][i] << i;
  }
  return r;
}

static inline float __shfl_xor_sync(unsigned mask, float v, int o) {
  static const char what[] = "__shfl_xor_sync";
  uint32_t u;
  std::memcpy(&u, &v, 4);
  const int set = exchange(what, mask, u);
  return __uint_as_float(tl_lanes->val[set][(tl_lane ^ o) & 31]);
}

// Runs f(i) for i in [0, n) on n threads and waits for them. Their stacks
// are 256 KiB, not the default 8 MiB, so that the C library keeps them for
// the next block's threads: starting a thread is then several times
// cheaper, and a run starts thousands.
template <class F>
static void threads_of(int n, F f) {
  struct Arg {
    F* f;
    int i;
  };
  pthread_attr_t attr;
  pthread_attr_init(&attr);
  pthread_attr_setstacksize(&attr, 256 << 10);
  std::vector<Arg> args(n);
  std::vector<pthread_t> ts(n);
  for (int i = 0; i < n; i++) {
    args[i] = Arg{&f, i};
    auto start = [](void* p) -> void* {
      const Arg& a = *static_cast<Arg*>(p);
      (*a.f)(a.i);
      return nullptr;
    };
    if (pthread_create(&ts[i], &attr, start, &args[i]) != 0) {
      die("pthread_create");
    }
  }
  for (int i = 0; i < n; i++) {
    pthread_join(ts[i], nullptr);
  }
  pthread_attr_destroy(&attr);
}

// Runs a grid of gx * gy blocks of threads threads, one block at a time,
// blockIdx.y outer.
template <class F>
static void launch(int gx, int gy, int threads, F kernel) {
  for (int by = 0; by < gy; by++) {
    for (int bx = 0; bx < gx; bx++) {
      std::memset(__start_fp4_shared, 0x7F, __stop_fp4_shared - __start_fp4_shared);
      Block block(threads);
      std::vector<std::unique_ptr<Lanes>> warps;
      for (int i = 0; i < threads / 32; i++) {
        warps.emplace_back(new Lanes);
      }
      threads_of(threads, [&](int i) {
        threadIdx = Dim3{(unsigned)i, 0, 0};
        blockIdx = Dim3{(unsigned)bx, (unsigned)by, 0};
        blockDim = Dim3{(unsigned)threads, 1, 1};
        tl_block = &block;
        tl_lanes = warps[i / 32].get();
        tl_lane = i % 32;
        tl_turn = 0;
        kernel();
        tl_lanes->leave();
        block.bar.leave();
      });
    }
  }
}
"""

# One host function for each set of template values, as MLX wraps the body
# (not a function template: g++ ignores a section attribute on a
# template's static variables, and __shared__ needs one).
KERNEL = r"""
static void @NAME@(const @T@* x, const Shape x_shape, const uint32_t* w, const Shape w_shape, const uint8_t* scales,
                   const @I@* idx, const Shape idx_shape, const @B@* bias, @T@* y) {
  using T = @T@;
  constexpr int R = @R@, W = @W@, MR = @MR@, U = @U@, PMAX = @PMAX@;
  constexpr bool HAS_BIAS = @HB@;
"""

DRIVER = r"""
template <class T>
static uint32_t bits_of(T v) {
  uint32_t b = 0;
  std::memcpy(&b, &v, sizeof(T));
  return b;
}
template <class T>
static double value_of(uint32_t b) {
  T v;
  std::memcpy(&v, &b, sizeof(T));
  return (double)(float)v;
}

// MXFP4: E2M1 values by code, and the E8M0 scale 2^(s - 127) (s = 0 is
// 2^-127, a subnormal float).
static double e2m1(unsigned q) {
  static const double v[8] = {0, 0.5, 1, 1.5, 2, 3, 4, 6};
  return q & 8 ? -v[q & 7] : v[q & 7];
}
static double e8m0(unsigned s) { return std::ldexp(1.0, (int)s - 127); }

template <class T, class I, bool HB>
struct Variant {
  void (*kernel)(const T*, const Shape, const uint32_t*, const Shape, const uint8_t*, const I*, const Shape,
                 const std::conditional_t<HB, T, float>*, T*);
  int R, W, MR, U;
};

template <class T, class I>
struct Data {
  const char* type;
  const char* itype;
  int topk, rows, E, N, K;
  std::vector<T> x, bias;  // x [rows, K], bias [E, N] or none
  std::vector<uint32_t> w;  // [E, N, K / 8]
  std::vector<uint8_t> s;  // [E, N, K / 32]
  std::vector<I> idx;  // [rows * topk]
};

// Runs the pairs of x's rows [row0, row0 + rows) (x at xoff elements from
// 16-byte alignment), checks every output, and returns them as bits.
template <class T, class I, bool HB>
static std::vector<uint32_t> run(const Data<T, I>& d, const Variant<T, I, HB>& v, int xoff, int row0, int rows) {
  const int E = d.E, N = d.N, K = d.K, topk = d.topk, P = rows * topk;
  char name[200];
  snprintf(name, sizeof name, "%s TOPK=%d P=%d E=%d N=%d K=%d bias=%d idx=%s R:W:MR:U=%d:%d:%d:%d x at 16k+%zu",
           d.type, topk, P, E, N, K, HB, d.itype, v.R, v.W, v.MR, v.U, xoff * sizeof(T));
  printf("%s: ", name);
  fflush(stdout);
  const T* x = guarded<T>("x", d.x.data() + (size_t)row0 * K, (size_t)rows * K, xoff * sizeof(T));
  if (((uintptr_t)x & 15) != xoff * sizeof(T)) {
    die("emulator: x at %p", (const void*)x);
  }
  const uint32_t* w = guarded<uint32_t>("w", d.w.data(), d.w.size(), 0);
  const uint8_t* s = guarded<uint8_t>("scales", d.s.data(), d.s.size(), 0);
  const I* idx = guarded<I>("idx", d.idx.data() + (size_t)row0 * topk, P, 0);
  using B = std::conditional_t<HB, T, float>;
  const float zero = 0;
  const B* bias = HB ? guarded<B>("bias", d.bias.data(), d.bias.size(), 0) : guarded<B>("bias", &zero, 1, 0);
  const std::vector<unsigned char> nan((size_t)P * N * sizeof(T), 0xFF);  // NaN in every type
  T* y = guarded<T>("y", nan.data(), (size_t)P * N, 0);
  const Shape x_shape{{rows, K}}, w_shape{{E, N, K / 8}}, idx_shape{{P}};
  launch((N + v.W * v.R - 1) / (v.W * v.R), E, v.W * 32,
         [&] { v.kernel(x, x_shape, w, w_shape, s, idx, idx_shape, bias, y); });
  std::vector<uint32_t> out((size_t)P * N);
  for (size_t i = 0; i < out.size(); i++) {
    out[i] = bits_of(y[i]);
  }
  free_regions();

  // ulp: the spacing of T's values in [1, 2); tiny: the smallest, that of
  // its subnormals, where the scale 2^-127 makes a sum that small.
  const double ulp = sizeof(T) == 4 ? 0x1p-23 : std::is_same_v<T, bf16_t> ? 0x1p-7 : 0x1p-10;
  const double tiny = sizeof(T) == 4 ? 0x1p-149 : std::is_same_v<T, bf16_t> ? 0x1p-133 : 0x1p-24;
  Tally tally{name};
  std::vector<double> wd(K);
  for (int e = 0; e < E; e++) {
    for (int n = 0; n < N; n++) {
      const size_t row = (size_t)e * N + n;
      for (int k = 0; k < K; k++) {
        wd[k] = e2m1((d.w[row * (K / 8) + k / 8] >> (4 * (k % 8))) & 15) * e8m0(d.s[row * (K / 32) + k / 32]);
      }
      for (int p = 0; p < P; p++) {
        if ((int)d.idx[(size_t)row0 * topk + p] != e) {
          continue;
        }
        const T* xr = d.x.data() + (size_t)(row0 + p / topk) * K;
        double prod = 0, mag = 0;
        for (int k = 0; k < K; k++) {
          const double t = (double)(float)xr[k] * wd[k];
          prod += t;
          mag += std::fabs(t);
        }
        const double want = HB ? prod + (double)(float)d.bias[row] : prod;
        // Two ulps of T of the result (and of the product, rounded to T
        // before a bias is added), or two of its smallest steps, plus the
        // float sums' error: 1e-5 of the sum of |x * w|, and a few dozen
        // of float's smallest steps where the sums are subnormal.
        const double tol = 2 * std::max(ulp * (std::fabs(want) + (HB ? std::fabs(prod) : 0)), tiny) + 1e-5 * mag +
                           64 * 0x1p-149;
        tally.check(p, n, p * N + n, value_of<T>(out[(size_t)p * N + n]), want, tol);
      }
    }
  }
  tally.done(P * N);
  return out;
}

// same fails unless pairs [0, pairs) of a equal pairs [from, from + pairs)
// of b, bit for bit.
static void same(const char* what, const std::vector<uint32_t>& a, const std::vector<uint32_t>& b, int from, int pairs,
                 int N) {
  for (int i = 0; i < pairs * N; i++) {
    if (a[i] != b[(size_t)from * N + i]) {
      die("%s: y[%d, %d] is 0x%08x, against 0x%08x with all pairs", what, from + i / N, i % N, a[i],
          b[(size_t)from * N + i]);
    }
  }
}

template <class T, class I, bool HB>
static void check(const char* type, const char* itype, int topk, int rows, int E, int N, int K, int xoff,
                  uint64_t seed, Variant<T, I, HB> main, Variant<T, I, HB> other) {
  Data<T, I> d{type, itype, topk, rows, E, N, K, {}, {}, {}, {}, {}};
  rng_state = seed;
  d.x.resize((size_t)rows * K);
  for (auto& v : d.x) {
    v = T((float)gauss());
  }
  d.w.resize((size_t)E * N * K / 8);
  for (auto& v : d.w) {
    v = (uint32_t)next_u64();
  }
  // Scales 2^-7 to 2^4, and one in 16 the smallest, 2^-127.
  d.s.resize((size_t)E * N * K / 32);
  for (auto& v : d.s) {
    v = next_u64() % 16 == 0 ? 0 : (uint8_t)(120 + next_u64() % 12);
  }
  // Biases about as large as the products.
  if (HB) {
    d.bias.resize((size_t)E * N);
    for (auto& v : d.bias) {
      v = T((float)((uniform() - 0.5) * 8 * std::sqrt((double)K)));
    }
  }
  // Each row picks topk distinct experts: expert 0 four times as likely as
  // each other, expert 1 never where E > 2.
  for (int r = 0; r < rows; r++) {
    std::vector<int> picked;
    while ((int)picked.size() < topk) {
      int e = next_u64() % 8 < 3 ? 0 : (int)(next_u64() % E);
      if ((e == 1 && E > 2) || std::find(picked.begin(), picked.end(), e) != picked.end()) {
        continue;
      }
      picked.push_back(e);
    }
    for (int e : picked) {
      d.idx.push_back((I)e);
    }
  }
  const int off = xoff ? 0 : 3;
  const std::vector<uint32_t> all = run<T, I, HB>(d, main, xoff, 0, rows);
  same("the last row alone", run<T, I, HB>(d, main, off, rows - 1, 1), all, (rows - 1) * topk, topk, N);
  if (other.kernel) {
    same("another work shape", run<T, I, HB>(d, other, off, 0, rows), all, 0, rows * topk, N);
  }
  printf("  pairs bit-identical for the last row alone%s, x aligned and not\n",
         other.kernel ? " and another work shape" : "");
}

int main() {
  catch_faults();
@CASES@
  printf("passed %d\n", passed);
  return 0;
}
"""

CTYPE = mma_emulate.CTYPE
ITYPE = {"int32": "int32_t", "uint32": "uint32_t"}


def program(body, line):
    """The C++ program: one host function of the body (at its line of
    mlx/shim.cpp) for each set of template values the cases take, and the
    cases."""
    kernels = {}  # template values -> function name
    text = mma_emulate.PRELUDE + HOST

    def kernel(t, i, hb, shape):
        nonlocal text
        key = (t, i, hb, shape)
        if key not in kernels:
            fn = f"gather_fp4_{len(kernels)}"
            kernels[key] = fn
            r, w, mr, u = shape
            head = KERNEL
            for k, v in (("@NAME@", fn), ("@T@", CTYPE[t]), ("@I@", ITYPE[i]), ("@B@", CTYPE[t] if hb else "float"),
                         ("@R@", r), ("@W@", w), ("@MR@", mr), ("@U@", u), ("@PMAX@", PMAX),
                         ("@HB@", str(hb).lower())):
                head = head.replace(k, str(v))
            text += head + f'#line {line} "mlx/shim.cpp"\n' + body + "\n}\n"
            text += f'#line {text.count(chr(10)) + 2} "fp4_emulate.cpp"\n'
        r, w, mr, u = shape
        return f"Variant<{CTYPE[t]}, {ITYPE[i]}, {str(hb).lower()}>{{{kernels[key]}, {r}, {w}, {mr}, {u}}}"

    calls = []
    for n, (t, topk, rows, e, nn, k, hb, i, xoff, other) in enumerate(CASES):
        main = kernel(t, i, hb, SHAPE)
        alt = kernel(t, i, hb, other) if other else \
            f"Variant<{CTYPE[t]}, {ITYPE[i]}, {str(hb).lower()}>{{nullptr, 0, 0, 0, 0}}"
        calls.append(f'  check("{t}", "{i}", {topk}, {rows}, {e}, {nn}, {k}, {xoff}, {0xF4E00000 + n}, {main}, {alt});')
    return text + DRIVER.replace("@CASES@", "\n".join(calls))


def main():
    body, line = mma_emulate.pieces(NAME)
    mma_emulate.check_body("fp4_emulate", NAME, body, lambda b: program(b, line), MUTATIONS,
                           mma_emulate.arguments(__doc__))


if __name__ == "__main__":
    main()
