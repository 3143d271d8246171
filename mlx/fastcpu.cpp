//go:build !mlxc

// A CPU kernel for affine-quantized linear layers, the op that dominates a
// decode step.
//
// MLX's CPU backend evaluates quantized_matmul as a scalar loop that unpacks
// every weight again for every activation row, so a step over eight rows
// costs eight single-row steps and continuous batching gains nothing. This
// kernel is weight-stationary: each output row's weights are unpacked once
// (into registers for up to four activation rows, else into an L1-resident
// buffer) and then multiplied with every activation row, with AVX2+FMA where
// the processor has it, spread over the CPU threads by output row.
//
// Batch invariance: an output element is the same float whatever the number
// of rows in the batch and whatever the thread split, because every row's
// dot product runs in one fixed order: two 8-lane accumulators taking
// alternate 8-element chunks, then a fixed reduction. The kernel never splits
// a dot product across threads.

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cmath>
#include <optional>
#include <condition_variable>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <thread>
#include <type_traits>

#if defined(__x86_64__) || defined(_M_X64)
#include <immintrin.h>
#define PROVIDER_X86 1
#endif

#include <malloc.h>
#include <sys/resource.h>
#include <unistd.h>

#include "fastcpu.h"
#include "hostop.h"

// MLX's CPU backend allocates every array with malloc and frees it when the
// array dies. glibc serves large blocks (the activations of a step: tens of
// kilobytes to megabytes) with fresh mappings that the kernel must zero on
// first touch, which measured at a quarter of a batched decode step. Keep
// them in the heap instead: freed blocks are reused by the next step.
// (32 MiB is the largest mmap threshold glibc accepts on 64-bit.) One
// arena: a thread arena is a chain of 64 MiB heaps, and one that empties is
// unmapped whatever the trim threshold, so a step's worth of activations
// freed on MLX's worker thread came back as fresh pages the next step.
static const int provider_malloc_tuned = [] {
  mallopt(M_ARENA_MAX, 1);
  mallopt(M_MMAP_THRESHOLD, 32 << 20);
  mallopt(M_TRIM_THRESHOLD, 1 << 30);
  return 0;
}();

namespace mx = mlx::core;
using provider_host::arr;
using provider_host::cuda_affine_gemv;
using provider_host::guard;
using provider_host::HostOp;
using provider_host::rows_of;
using provider_host::set;

namespace {

// ---------------------------------------------------------------------------
// Threads

// Pool runs a task function over indices [0, tasks) on its workers and the
// calling thread. Workers spin briefly before sleeping: a decode step issues
// a few hundred short calls back to back, and a condition-variable wake-up
// per call would cost as much as the work.
class Pool {
 public:
  static Pool& get() {
    static Pool* p = new Pool();  // never destroyed: workers outlive exit
    return *p;
  }

  int threads() {
    std::lock_guard<std::mutex> l(run_mu_);
    return static_cast<int>(workers_.size()) + 1;
  }

  int resize(int n) {
    std::lock_guard<std::mutex> l(run_mu_);
    if (n <= 0) {
      n = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
    }
    n = std::min(n, 64);
    while (static_cast<int>(workers_.size()) + 1 < n) {
      // The worker starts from the generation current now: a run may
      // begin before the thread gets to read it.
      const int id = static_cast<int>(workers_.size());
      const uint64_t start = gen_.load();
      workers_.emplace_back([this, id, start] { work(id, start); });
      workers_.back().detach();
    }
    // Workers beyond n - 1 stay parked: active_ bounds who takes tasks.
    active_.store(n - 1);
    return n;
  }

  // set_spin sets how long a worker waits awake for the next run, in
  // microseconds (negative: 0), and returns the previous setting.
  int set_spin(int us) { return spin_us_.exchange(std::max(0, us), std::memory_order_relaxed); }

  void run(int tasks, const std::function<void(int)>& fn) {
    // A background thread (one niced below the process's main thread, as
    // mlx.ThreadOptions.Background makes a vision tower's stream worker)
    // runs its tasks itself: the pool's workers run at normal priority and
    // one run holds the pool at a time, so lending them to it would let
    // background work delay the decode loop's kernels, and a low-priority
    // holder of run_mu_ would keep them waiting.
    if (background()) {
      for (int i = 0; i < tasks; i++) {
        fn(i);
      }
      return;
    }
    std::lock_guard<std::mutex> l(run_mu_);
    const int helpers = std::min(active_.load(), tasks - 1);
    if (helpers <= 0) {
      for (int i = 0; i < tasks; i++) {
        fn(i);
      }
      return;
    }
    fn_ = &fn;
    tasks_ = tasks;
    next_.store(0);
    pending_.store(helpers);
    helpers_ = helpers;
    {
      std::lock_guard<std::mutex> g(mu_);
      gen_.fetch_add(1);
    }
    cv_.notify_all();
    drain();
    while (pending_.load(std::memory_order_acquire) != 0) {
      pause();
    }
    fn_ = nullptr;
  }

 private:
  Pool() {
    int n = 0;
    if (const char* env = std::getenv("PROVIDER_CPU_THREADS")) {
      n = std::atoi(env);
    }
    resize(n);
  }

  static bool background() {
    // Read once per thread: a thread's priority is set before its work.
    static thread_local const bool bg = getpriority(PRIO_PROCESS, 0) > getpriority(PRIO_PROCESS, getpid());
    return bg;
  }

  static void pause() {
#if PROVIDER_X86
    _mm_pause();
#else
    std::this_thread::yield();
#endif
  }

  void drain() {
    for (;;) {
      int i = next_.fetch_add(1);
      if (i >= tasks_) {
        return;
      }
      (*fn_)(i);
    }
  }

  void work(int id, uint64_t seen) {
    for (;;) {
      // Wait for the next run awake for spin_us_ (set_spin; the processor
      // yielded after the first 100 microseconds), then sleep. Between two
      // decode steps the host builds the next step's graph, a millisecond
      // or two for a small model on two cores; a worker asleep by then is
      // woken by a system call at the next kernel. A one-row SmolLM2-135M
      // step measured 14 to 17 % slower awake for 200 microseconds than
      // for 2000 (serve's setting). An awake worker takes processor time
      // from other processes, hence the short default.
      bool woke = false;
      const int spin_us = spin_us_.load(std::memory_order_relaxed);
      const auto start = std::chrono::steady_clock::now();
      bool yielding = false;
      for (int i = 1;; i++) {
        if (gen_.load(std::memory_order_acquire) != seen) {
          woke = true;
          break;
        }
        if (yielding) {
          std::this_thread::yield();
        } else {
          pause();
          if (i % 64 != 0) {
            continue;
          }
        }
        const auto waited = std::chrono::steady_clock::now() - start;
        if (waited >= std::chrono::microseconds(spin_us)) {
          break;
        }
        yielding = waited >= std::chrono::microseconds(100);
      }
      if (!woke) {
        std::unique_lock<std::mutex> g(mu_);
        cv_.wait(g, [&] { return gen_.load() != seen; });
      }
      seen = gen_.load();
      if (id < helpers_) {
        drain();
        pending_.fetch_sub(1, std::memory_order_release);
      }
    }
  }

  std::mutex run_mu_;  // one run at a time
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<std::thread> workers_;
  std::atomic<int> active_{0};
  std::atomic<uint64_t> gen_{0};
  std::atomic<int> next_{0};
  std::atomic<int> pending_{0};
  const std::function<void(int)>* fn_ = nullptr;
  int tasks_ = 0;
  int helpers_ = 0;
  std::atomic<int> spin_us_{200};
};

// ---------------------------------------------------------------------------
// Kernel

// Scale is the float type of scales and biases.
template <typename S>
inline float to_float(S v) {
  return static_cast<float>(v);
}

struct Job {
  const float* x;  // [m, k]
  int m, k, n;
  const uint32_t* w;  // [n, k*bits/32]
  const void* scales;
  const void* biases;
  int group, bits;
  float* out;  // [m, n]
};

#if PROVIDER_X86

#define PROVIDER_AVX2 __attribute__((target("avx2,fma,f16c")))

// q8_block quantizes a block of 32 activations xb into t with scale d =
// max|x| / 127 (round half to even, the default rounding mode, clamped to
// +-127) and returns the sum of t. The integer kernels that call it run
// only on processors with AVX2.
PROVIDER_AVX2 int q8_block(const float* xb, int8_t* t, float& d) {
  const __m256 sign = _mm256_set1_ps(-0.0f);
  __m256 a[4];
  for (int i = 0; i < 4; i++) {
    a[i] = _mm256_loadu_ps(xb + 8 * i);
  }
  __m256 m = _mm256_max_ps(_mm256_max_ps(_mm256_andnot_ps(sign, a[0]), _mm256_andnot_ps(sign, a[1])),
                           _mm256_max_ps(_mm256_andnot_ps(sign, a[2]), _mm256_andnot_ps(sign, a[3])));
  __m128 h = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps(m, 1));
  h = _mm_max_ps(h, _mm_movehl_ps(h, h));
  h = _mm_max_ss(h, _mm_shuffle_ps(h, h, 1));
  const float amax = _mm_cvtss_f32(h);
  d = amax / 127.0f;
  const __m256 vi = _mm256_set1_ps(amax > 0 ? 127.0f / amax : 0.0f);
  const __m256i lo = _mm256_set1_epi32(-127), hi = _mm256_set1_epi32(127);
  __m256i q[4];
  for (int i = 0; i < 4; i++) {
    q[i] = _mm256_min_epi32(_mm256_max_epi32(_mm256_cvtps_epi32(_mm256_mul_ps(a[i], vi)), lo), hi);
  }
  const __m256i s4 = _mm256_add_epi32(_mm256_add_epi32(q[0], q[1]), _mm256_add_epi32(q[2], q[3]));
  __m128i s = _mm_add_epi32(_mm256_castsi256_si128(s4), _mm256_extracti128_si256(s4, 1));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0x4e));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0xb1));
  // Packing works within 128-bit lanes: the bytes come out as 4-element
  // runs of q[0], q[1], q[2], q[3] (low halves), then the high halves;
  // the permutation puts each register's two runs back together.
  const __m256i b = _mm256_packs_epi16(_mm256_packs_epi32(q[0], q[1]), _mm256_packs_epi32(q[2], q[3]));
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(t),
                      _mm256_permutevar8x32_epi32(b, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7)));
  return _mm_cvtsi128_si32(s);
}

// param_float is one group parameter (a scale or bias) as float.
template <typename S>
PROVIDER_AVX2 inline float param_float(const S* p) {
  if constexpr (std::is_same_v<S, float>) {
    return *p;
  } else {
    uint16_t h;
    std::memcpy(&h, p, 2);
    if constexpr (std::is_same_v<S, mx::float16_t>) {
      return _cvtsh_ss(h);
    } else {
      const uint32_t u = static_cast<uint32_t>(h) << 16;
      float f;
      std::memcpy(&f, &u, 4);
      return f;
    }
  }
}

// group_params converts a row's group scales and biases to float.
template <typename S>
PROVIDER_AVX2 inline void group_params(const S* s, const S* b, int groups, float* fs, float* fb) {
  for (int g = 0; g < groups; g++) {
    fs[g] = param_float(s + g);
    fb[g] = param_float(b + g);
  }
}

// unpack16 returns the 16 weights starting at element e (a multiple of 16)
// of a packed row, dequantized as q*s + b.
template <int BITS>
PROVIDER_AVX2 inline void unpack16(const uint32_t* row, int e, __m256 s, __m256 b, __m256& w0, __m256& w1) {
  if constexpr (BITS == 4) {
    const __m256i shifts = _mm256_setr_epi32(0, 4, 8, 12, 16, 20, 24, 28);
    const __m256i mask = _mm256_set1_epi32(0xF);
    const __m256i v0 = _mm256_set1_epi32(static_cast<int>(row[e / 8]));
    const __m256i v1 = _mm256_set1_epi32(static_cast<int>(row[e / 8 + 1]));
    w0 = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_and_si256(_mm256_srlv_epi32(v0, shifts), mask)), s, b);
    w1 = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_and_si256(_mm256_srlv_epi32(v1, shifts), mask)), s, b);
  } else {
    const __m128i q = _mm_loadu_si128(reinterpret_cast<const __m128i*>(reinterpret_cast<const uint8_t*>(row) + e));
    w0 = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(q)), s, b);
    w1 = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_srli_si128(q, 8))), s, b);
  }
}

PROVIDER_AVX2 inline float hsum(__m256 a, __m256 b) {
  __m256 s = _mm256_add_ps(a, b);
  __m128 lo = _mm256_castps256_ps128(s);
  __m128 hi = _mm256_extractf128_ps(s, 1);
  lo = _mm_add_ps(lo, hi);
  lo = _mm_add_ps(lo, _mm_movehl_ps(lo, lo));
  lo = _mm_add_ss(lo, _mm_shuffle_ps(lo, lo, 1));
  return _mm_cvtss_f32(lo);
}

// direct computes output n for M (at most 4) rows with the weights
// unpacked into registers.
template <int BITS, int M>
PROVIDER_AVX2 inline void direct(const Job& j, const uint32_t* row, const float* fs, const float* fb, int n) {
  __m256 acc[M][2];
  for (int r = 0; r < M; r++) {
    acc[r][0] = acc[r][1] = _mm256_setzero_ps();
  }
  for (int e = 0; e < j.k; e += 16) {
    const int g = e / j.group;
    __m256 w0, w1;
    unpack16<BITS>(row, e, _mm256_set1_ps(fs[g]), _mm256_set1_ps(fb[g]), w0, w1);
    for (int r = 0; r < M; r++) {
      const float* x = j.x + static_cast<size_t>(r) * j.k + e;
      acc[r][0] = _mm256_fmadd_ps(w0, _mm256_loadu_ps(x), acc[r][0]);
      acc[r][1] = _mm256_fmadd_ps(w1, _mm256_loadu_ps(x + 8), acc[r][1]);
    }
  }
  for (int r = 0; r < M; r++) {
    j.out[static_cast<size_t>(r) * j.n + n] = hsum(acc[r][0], acc[r][1]);
  }
}

// buffered computes output n for M (at most 4) rows starting at r0 from
// weights already unpacked into buf.
template <int M>
PROVIDER_AVX2 inline void buffered(const Job& j, const float* buf, int r0, int n) {
  __m256 acc[M][2];
  for (int r = 0; r < M; r++) {
    acc[r][0] = acc[r][1] = _mm256_setzero_ps();
  }
  const float* x0 = j.x + static_cast<size_t>(r0) * j.k;
  for (int e = 0; e < j.k; e += 16) {
    const __m256 w0 = _mm256_loadu_ps(buf + e);
    const __m256 w1 = _mm256_loadu_ps(buf + e + 8);
    for (int r = 0; r < M; r++) {
      const float* x = x0 + static_cast<size_t>(r) * j.k + e;
      acc[r][0] = _mm256_fmadd_ps(w0, _mm256_loadu_ps(x), acc[r][0]);
      acc[r][1] = _mm256_fmadd_ps(w1, _mm256_loadu_ps(x + 8), acc[r][1]);
    }
  }
  for (int r = 0; r < M; r++) {
    j.out[static_cast<size_t>(r0 + r) * j.n + n] = hsum(acc[r][0], acc[r][1]);
  }
}

// rows_avx2 computes output rows [n0, n1) for at most four activation rows.
template <typename S, int BITS>
PROVIDER_AVX2 void rows_avx2(const Job& j, int n0, int n1, float* fs, float* fb) {
  const int words = j.k * BITS / 32;
  const int groups = j.k / j.group;
  const S* sc = static_cast<const S*>(j.scales);
  const S* bi = static_cast<const S*>(j.biases);
  for (int n = n0; n < n1; n++) {
    const uint32_t* row = j.w + static_cast<size_t>(n) * words;
    group_params<S>(sc + static_cast<size_t>(n) * groups, bi + static_cast<size_t>(n) * groups, groups, fs, fb);
    switch (j.m) {
      case 1:
        direct<BITS, 1>(j, row, fs, fb, n);
        continue;
      case 2:
        direct<BITS, 2>(j, row, fs, fb, n);
        continue;
      case 3:
        direct<BITS, 3>(j, row, fs, fb, n);
        continue;
      case 4:
        direct<BITS, 4>(j, row, fs, fb, n);
        continue;
    }
  }
}

// unpack_rows dequantizes weight rows [n0, n1) into buf, k floats a row.
template <typename S, int BITS>
PROVIDER_AVX2 void unpack_rows(const Job& j, int n0, int n1, float* buf, float* fs, float* fb) {
  const int words = j.k * BITS / 32;
  const int groups = j.k / j.group;
  const S* sc = static_cast<const S*>(j.scales);
  const S* bi = static_cast<const S*>(j.biases);
  for (int n = n0; n < n1; n++) {
    const uint32_t* row = j.w + static_cast<size_t>(n) * words;
    float* wb = buf + static_cast<size_t>(n - n0) * j.k;
    group_params<S>(sc + static_cast<size_t>(n) * groups, bi + static_cast<size_t>(n) * groups, groups, fs, fb);
    for (int e = 0; e < j.k; e += 16) {
      const int g = e / j.group;
      __m256 w0, w1;
      unpack16<BITS>(row, e, _mm256_set1_ps(fs[g]), _mm256_set1_ps(fb[g]), w0, w1);
      _mm256_storeu_ps(wb + e, w0);
      _mm256_storeu_ps(wb + e + 8, w1);
    }
  }
}

// rows_many computes output rows [n0, n1) for more than four activation
// rows: each output row's weights are unpacked once into buf (the same
// floats direct computes), then blocks of activation rows small enough to
// stay in cache stream over them.
template <typename S, int BITS>
PROVIDER_AVX2 void rows_many(const Job& j, int n0, int n1, float* buf, float* fs, float* fb) {
  unpack_rows<S, BITS>(j, n0, n1, buf, fs, fb);
  constexpr int block = 16;
  for (int r0 = 0; r0 < j.m; r0 += block) {
    const int r1 = std::min(j.m, r0 + block);
    for (int n = n0; n < n1; n++) {
      const float* wb = buf + static_cast<size_t>(n - n0) * j.k;
      int r = r0;
      for (; r + 4 <= r1; r += 4) {
        buffered<4>(j, wb, r, n);
      }
      switch (r1 - r) {
        case 1:
          buffered<1>(j, wb, r, n);
          break;
        case 2:
          buffered<2>(j, wb, r, n);
          break;
        case 3:
          buffered<3>(j, wb, r, n);
          break;
      }
    }
  }
}

// The AVX-512 path for more than four activation rows: the same floats as
// rows_many (weights unpacked by unpack16 into a buffer, one 16-lane
// accumulator per output, which is rows_many's pair of 8-lane accumulators
// side by side, reduced in hsum's order), computed in register tiles of
// NW weight rows by MR activation rows, so every weight and activation load
// feeds several FMAs.
#define PROVIDER_AVX512 __attribute__((target("avx512f,avx2,fma,f16c")))

PROVIDER_AVX512 inline float hsum512(__m512 a) {
  return hsum(_mm512_castps512_ps256(a), _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(a), 1)));
}

template <int NW, int MR>
PROVIDER_AVX512 void tile512(const Job& j, const float* wb, int n, int r0) {
  __m512 acc[NW][MR];
  for (int i = 0; i < NW; i++) {
    for (int r = 0; r < MR; r++) {
      acc[i][r] = _mm512_setzero_ps();
    }
  }
  const float* x0 = j.x + static_cast<size_t>(r0) * j.k;
  for (int e = 0; e < j.k; e += 16) {
    __m512 xv[MR];
    for (int r = 0; r < MR; r++) {
      xv[r] = _mm512_loadu_ps(x0 + static_cast<size_t>(r) * j.k + e);
    }
    for (int i = 0; i < NW; i++) {
      const __m512 w = _mm512_loadu_ps(wb + static_cast<size_t>(i) * j.k + e);
      for (int r = 0; r < MR; r++) {
        acc[i][r] = _mm512_fmadd_ps(w, xv[r], acc[i][r]);
      }
    }
  }
  for (int i = 0; i < NW; i++) {
    for (int r = 0; r < MR; r++) {
      j.out[static_cast<size_t>(r0 + r) * j.n + n + i] = hsum512(acc[i][r]);
    }
  }
}

// unpack16_512 is unpack16 in one 16-lane register: lanes 0-7 are w0's,
// lanes 8-15 w1's, each computed by the same operations.
template <int BITS>
PROVIDER_AVX512 inline __m512 unpack16_512(const uint32_t* row, int e, __m512 s, __m512 b) {
  if constexpr (BITS == 4) {
    const __m512i shifts = _mm512_setr_epi32(0, 4, 8, 12, 16, 20, 24, 28, 0, 4, 8, 12, 16, 20, 24, 28);
    const __m512i pick = _mm512_setr_epi32(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1);
    uint64_t two;
    std::memcpy(&two, row + e / 8, 8);
    const __m512i v = _mm512_permutexvar_epi32(pick, _mm512_castsi128_si512(_mm_cvtsi64_si128(static_cast<long long>(two))));
    const __m512i q = _mm512_and_si512(_mm512_srlv_epi32(v, shifts), _mm512_set1_epi32(0xF));
    return _mm512_fmadd_ps(_mm512_cvtepi32_ps(q), s, b);
  } else {
    const __m128i q = _mm_loadu_si128(reinterpret_cast<const __m128i*>(reinterpret_cast<const uint8_t*>(row) + e));
    return _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(q)), s, b);
  }
}

// direct512 is direct with 16-lane registers: the same floats.
template <int BITS, int M>
PROVIDER_AVX512 void direct512(const Job& j, const uint32_t* row, const float* fs, const float* fb, int n) {
  __m512 acc[M];
  for (int r = 0; r < M; r++) {
    acc[r] = _mm512_setzero_ps();
  }
  for (int e = 0; e < j.k; e += 16) {
    const int g = e / j.group;
    const __m512 w = unpack16_512<BITS>(row, e, _mm512_set1_ps(fs[g]), _mm512_set1_ps(fb[g]));
    for (int r = 0; r < M; r++) {
      acc[r] = _mm512_fmadd_ps(w, _mm512_loadu_ps(j.x + static_cast<size_t>(r) * j.k + e), acc[r]);
    }
  }
  for (int r = 0; r < M; r++) {
    j.out[static_cast<size_t>(r) * j.n + n] = hsum512(acc[r]);
  }
}

// prefetch_row asks for a weight row's bytes and its group parameters
// ahead of use: the three streams of a decode matmul are followed poorly
// by the hardware prefetchers, and at one activation row the kernel
// otherwise waits on memory.
inline void prefetch_row(const void* w, int wbytes, const void* s, const void* b, int pbytes) {
  const char* wc = static_cast<const char*>(w);
  for (int o = 0; o < wbytes; o += 64) {
    _mm_prefetch(wc + o, _MM_HINT_T0);
  }
  for (int o = 0; o < pbytes; o += 64) {
    _mm_prefetch(static_cast<const char*>(s) + o, _MM_HINT_T0);
    _mm_prefetch(static_cast<const char*>(b) + o, _MM_HINT_T0);
  }
}

// prefetch_outputs is prefetch_row for count consecutive outputs from
// output ahead, each of rb weight bytes and groups group parameters of
// type S: the next outputs a kernel's task computes.
template <typename S>
inline void prefetch_outputs(const void* w, const void* scales, const void* biases, size_t rb, int groups, size_t ahead,
                             int count) {
  prefetch_row(static_cast<const char*>(w) + ahead * rb, static_cast<int>(count * rb),
               static_cast<const S*>(scales) + ahead * groups, static_cast<const S*>(biases) + ahead * groups,
               count * groups * static_cast<int>(sizeof(S)));
}

// rows512 is rows_avx2 with direct512. It is a copy, not a template over
// the two: a function compiled for the AVX-512 target may use AVX-512
// instructions anywhere in its body, so the AVX2 path must not share one.
template <typename S, int BITS>
PROVIDER_AVX512 void rows512(const Job& j, int n0, int n1, float* fs, float* fb) {
  const int words = j.k * BITS / 32;
  const int groups = j.k / j.group;
  const S* sc = static_cast<const S*>(j.scales);
  const S* bi = static_cast<const S*>(j.biases);
  for (int n = n0; n < n1; n++) {
    if (n + 2 < n1) {
      prefetch_outputs<S>(j.w, sc, bi, static_cast<size_t>(words) * 4, groups, n + 2, 1);
    }
    const uint32_t* row = j.w + static_cast<size_t>(n) * words;
    group_params<S>(sc + static_cast<size_t>(n) * groups, bi + static_cast<size_t>(n) * groups, groups, fs, fb);
    switch (j.m) {
      case 1: direct512<BITS, 1>(j, row, fs, fb, n); continue;
      case 2: direct512<BITS, 2>(j, row, fs, fb, n); continue;
      case 3: direct512<BITS, 3>(j, row, fs, fb, n); continue;
      case 4: direct512<BITS, 4>(j, row, fs, fb, n); continue;
      case 5: direct512<BITS, 5>(j, row, fs, fb, n); continue;
      case 6: direct512<BITS, 6>(j, row, fs, fb, n); continue;
      case 7: direct512<BITS, 7>(j, row, fs, fb, n); continue;
      case 8: direct512<BITS, 8>(j, row, fs, fb, n); continue;
    }
  }
}

// direct_rows512 is the most activation rows the AVX-512 direct kernel
// takes (each weight unpacked once into a register for all of them); more
// go through the unpacked tiles. PROVIDER_CPU_DIRECT_ROWS overrides it
// (1 to 8), for comparison.
int direct_rows512() {
  static const int n = [] {
    const char* env = std::getenv("PROVIDER_CPU_DIRECT_ROWS");
    const int v = env != nullptr ? std::atoi(env) : 8;
    return v >= 1 && v <= 8 ? v : 8;
  }();
  return n;
}

template <int NW>
PROVIDER_AVX512 void tile512_rows(int mr, const Job& j, const float* wb, int n, int r0) {
  switch (mr) {
    case 1: tile512<NW, 1>(j, wb, n, r0); break;
    case 2: tile512<NW, 2>(j, wb, n, r0); break;
    case 3: tile512<NW, 3>(j, wb, n, r0); break;
    case 4: tile512<NW, 4>(j, wb, n, r0); break;
    case 5: tile512<NW, 5>(j, wb, n, r0); break;
    default: tile512<NW, 6>(j, wb, n, r0); break;
  }
}

// rows_many512 computes output rows [n0, n1) for more than four activation
// rows with AVX-512 tiles of 4 weight rows by 6 activation rows.
template <typename S, int BITS>
PROVIDER_AVX512 void rows_many512(const Job& j, int n0, int n1, float* buf, float* fs, float* fb) {
  unpack_rows<S, BITS>(j, n0, n1, buf, fs, fb);
  constexpr int MR = 6, NW = 4;
  for (int r0 = 0; r0 < j.m; r0 += MR) {
    const int mr = std::min(MR, j.m - r0);
    for (int n = n0; n < n1; n += NW) {
      const float* wb = buf + static_cast<size_t>(n - n0) * j.k;
      switch (std::min(NW, n1 - n)) {
        case 1: tile512_rows<1>(mr, j, wb, n, r0); break;
        case 2: tile512_rows<2>(mr, j, wb, n, r0); break;
        case 3: tile512_rows<3>(mr, j, wb, n, r0); break;
        default: tile512_rows<4>(mr, j, wb, n, r0); break;
      }
    }
  }
}

bool have_avx512() {
  static const bool ok = [] {
    const char* env = std::getenv("PROVIDER_CPU_AVX512");
    if (env != nullptr && std::strcmp(env, "0") == 0) {
      return false;
    }
    return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
           __builtin_cpu_supports("f16c");
  }();
  return ok;
}

bool have_avx2() {
  static const bool ok =
      __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && __builtin_cpu_supports("f16c");
  return ok;
}

// ---------------------------------------------------------------------------
// Integer kernel (AffineLinearQ8): activations quantized to signed 8-bit
// blocks of 32, each with a float scale d = max|x| / 127 (as llama.cpp's Q8
// activation blocks), multiplied with the unsigned 4- or 8-bit weights in
// integers by AVX-512 VNNI's dot product, four products to a 32-bit lane.
// Per weight group (scale s, bias b) and activation block (scale d, values
// q): sum (s*qw + b) * (d*qx) = s*d*sum(qw*qx) + b*d*sum(qx). The first term
// accumulates per 64-element chunk in float as ((dot * d) * s) + acc, lane
// by lane; the second is a scalar sum over blocks added after the lanes'
// fixed reduction. Each output is computed in that one order whatever the
// batch and the thread split.
//
// A chunk of 64 4-bit weights is 32 bytes: byte i holds elements 2i (low
// nibble) and 2i+1. Masked and shifted, the low nibbles then the high ones
// fill one 64-byte register in the order (block 0 evens, block 1 evens,
// block 0 odds, block 1 odds); the activations of the chunk are stored in
// that order once per call, so the weights need no shuffle. 8-bit weights
// are in element order already.

#define PROVIDER_VNNI __attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")))

bool have_vnni() {
  static const bool ok = [] {
    const char* env = std::getenv("PROVIDER_CPU_AVX512");
    if (env != nullptr && std::strcmp(env, "0") == 0) {
      return false;
    }
    return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
           __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512vnni") && __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
           __builtin_cpu_supports("f16c");
  }();
  return ok;
}

// int8_isa reports whether the processor runs the integer kernels: AVX-512
// VNNI (q8_rows, pk_rows) or AVX2 (q8a_rows, pka_rows).
bool int8_isa() { return have_vnni() || have_avx2(); }

// q8_ok reports whether the integer kernel takes a linear of k inputs,
// groups of group_size and bits-bit weights: k whole chunks of 64, groups a
// power of two from 32 to 512, 4 or 8 bits, and AVX2 (q8a_rows) or AVX-512
// VNNI (q8_rows).
bool q8_ok(int k, int group_size, int bits) {
  if (k % 64 != 0 || group_size % 32 != 0) {
    return false;
  }
  if (group_size > 512 || (group_size & (group_size - 1)) != 0) {
    return false;
  }
  return (bits == 4 || bits == 8) && int8_isa();
}

// Q8 is a call's quantized activations: values [m, k] in the weights'
// chunk order; per chunk the 16-lane pattern of its two blocks' scales
// ([m, k/64, 16]); and per block d * sum(q), each row's padded with zeros
// to a whole number of 16-lane registers ([m, bp]).
struct Q8 {
  std::vector<int8_t> xq;
  std::vector<float> dv, dsx;
  int bp = 0;  // padded blocks per row
  // Without VNNI (q8a_rows): per row and group, the sum of its blocks'
  // d * sum(q) ([m, k/group]).
  std::vector<float> gsx;
};

// q8_prepare quantizes activation rows [r0, r1) of j.x into q.
void q8_prepare(const Job& j, int bits, Q8& q, int r0, int r1) {
  const int chunks = j.k / 64;
  for (int r = r0; r < r1; r++) {
    const float* x = j.x + static_cast<size_t>(r) * j.k;
    int8_t* xq = q.xq.data() + static_cast<size_t>(r) * j.k;
    float* dsx = q.dsx.data() + static_cast<size_t>(r) * q.bp;
    std::fill(dsx, dsx + q.bp, 0.0f);
    for (int c = 0; c < chunks; c++) {
      float d[2];
      int8_t v[64];
      for (int h = 0; h < 2; h++) {
        const int sum = q8_block(x + c * 64 + h * 32, v + h * 32, d[h]);
        dsx[2 * c + h] = d[h] * static_cast<float>(sum);
      }
      int8_t* dst = xq + c * 64;
      float* dv = q.dv.data() + (static_cast<size_t>(r) * chunks + c) * 16;
      if (bits == 4) {
        for (int i = 0; i < 16; i++) {
          dst[i] = v[2 * i];
          dst[16 + i] = v[32 + 2 * i];
          dst[32 + i] = v[2 * i + 1];
          dst[48 + i] = v[32 + 2 * i + 1];
        }
        for (int l = 0; l < 16; l++) {
          dv[l] = d[(l / 4) & 1];
        }
      } else {
        std::memcpy(dst, v, 64);
        for (int l = 0; l < 16; l++) {
          dv[l] = d[l / 8];
        }
      }
    }
  }
}

// q8_groups loads up to 16 group parameters (count of them, the rest zero)
// as float.
template <typename S>
PROVIDER_VNNI inline __m512 q8_groups(const S* p, int count) {
  const __mmask16 m = count >= 16 ? 0xFFFF : static_cast<__mmask16>((1u << count) - 1);
  if constexpr (std::is_same_v<S, float>) {
    return _mm512_maskz_loadu_ps(m, p);
  } else if constexpr (std::is_same_v<S, mx::float16_t>) {
    return _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, p));
  } else {
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(m, p)), 16));
  }
}

// q8_bias is the bias terms of one output and row as a 16-lane vector:
// lane l sums, over blocks b = l, l+16, ..., the bias of b's group times
// the row's d*sum(q) of b (ds, zero-padded). bpg is blocks per group (a
// power of two up to 16), spread holds l / bpg per lane.
template <typename S>
PROVIDER_VNNI inline __m512 q8_bias(const S* bias, int blocks, int bpg, __m512i spread, const float* ds, int bp) {
  __m512 acc = _mm512_setzero_ps();
  for (int b = 0; b < bp; b += 16) {
    const int g0 = b / bpg;
    const int count = std::min(16, (blocks - b + bpg - 1) / bpg);
    __m512 fb = q8_groups<S>(bias + g0, std::max(count, 0));
    if (bpg > 1) {
      fb = _mm512_permutexvar_ps(spread, fb);
    }
    acc = _mm512_fmadd_ps(fb, _mm512_loadu_ps(ds + b), acc);
  }
  return acc;
}

// q8_chunk adds chunk c's products for outputs n .. n+NW-1 and rows r0 ..
// r0+M-1 (xq and dv at row r0) into accumulator A of each.
template <int BITS, int M, int NW, int A>
PROVIDER_VNNI inline void q8_chunk(const Job& j, const int8_t* xq, const float* dv, int chunks, const uint8_t* row,
                                   int bytes, const float* fs, int gs, int per, int c, __m512 (&acc)[NW][M][2]) {
  // A chunk's two blocks' scales spread to its lane pattern (groups of 32).
  const __m512i pattern = BITS == 4 ? _mm512_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1, 0, 0, 0, 0, 1, 1, 1, 1)
                                    : _mm512_setr_epi32(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1);
  __m512i w[NW];
  __m512 sv[NW];
  for (int i = 0; i < NW; i++) {
    const uint8_t* ri = row + static_cast<size_t>(i) * bytes;
    if constexpr (BITS == 4) {
      const __m256i p = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(ri + c * 32));
      const __m256i m4 = _mm256_set1_epi8(0x0F);
      w[i] = _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_and_si256(p, m4)),
                                _mm256_and_si256(_mm256_srli_epi16(p, 4), m4), 1);
    } else {
      w[i] = _mm512_loadu_si512(ri + c * 64);
    }
    const float* f = fs + static_cast<size_t>(i) * gs;
    if (per > 0) {
      sv[i] = _mm512_set1_ps(f[c / per]);
    } else {
      sv[i] = _mm512_permutexvar_ps(
          pattern, _mm512_castps128_ps512(_mm_castpd_ps(_mm_load_sd(reinterpret_cast<const double*>(f + 2 * c)))));
    }
  }
  for (int r = 0; r < M; r++) {
    const __m512i xv = _mm512_loadu_si512(xq + static_cast<size_t>(r) * j.k + c * 64);
    const __m512 d = _mm512_loadu_ps(dv + (static_cast<size_t>(r) * chunks + c) * 16);
    for (int i = 0; i < NW; i++) {
      const __m512i dot = _mm512_dpbusd_epi32(_mm512_setzero_si512(), w[i], xv);
      acc[i][r][A] = _mm512_fmadd_ps(_mm512_mul_ps(_mm512_cvtepi32_ps(dot), d), sv[i], acc[i][r][A]);
    }
  }
}

// q8_direct computes outputs n .. n+NW-1 for activation rows r0 ..
// r0+M-1 (M at most 4, NW at most 2): each chunk's weights are unpacked
// once into registers and each chunk's activations loaded once for all of
// them. sc and bi point at output n's group scales and biases (rows
// groups apart); per is the number of chunks in a group (0: groups of 32,
// two to a chunk). Per output and row: products of even and odd chunks
// accumulate apart, the bias terms (q8_bias) in a third register, and the
// three are added and reduced in that order.
template <typename S, int BITS, int M, int NW>
PROVIDER_VNNI void q8_direct(const Job& j, const Q8& q, int r0, const uint8_t* row, int bytes, const float* fs, int gs,
                             const S* bi, int groups, int per, __m512i spread, int n) {
  const int chunks = j.k / 64;
  __m512 acc[NW][M][2];
  for (int i = 0; i < NW; i++) {
    for (int r = 0; r < M; r++) {
      acc[i][r][0] = acc[i][r][1] = _mm512_setzero_ps();
    }
  }
  const int8_t* xq = q.xq.data() + static_cast<size_t>(r0) * j.k;
  const float* dv = q.dv.data() + static_cast<size_t>(r0) * chunks * 16;
  // Even chunks into accumulator 0, odd ones into 1, by constant index so
  // that the accumulators stay in registers.
  int c = 0;
  for (; c + 2 <= chunks; c += 2) {
    q8_chunk<BITS, M, NW, 0>(j, xq, dv, chunks, row, bytes, fs, gs, per, c, acc);
    q8_chunk<BITS, M, NW, 1>(j, xq, dv, chunks, row, bytes, fs, gs, per, c + 1, acc);
  }
  if (c < chunks) {
    q8_chunk<BITS, M, NW, 0>(j, xq, dv, chunks, row, bytes, fs, gs, per, c, acc);
  }
  const int blocks = j.k / 32, bpg = j.group / 32;
  for (int i = 0; i < NW; i++) {
    for (int r = 0; r < M; r++) {
      const float* ds = q.dsx.data() + static_cast<size_t>(r0 + r) * q.bp;
      const __m512 bias = q8_bias<S>(bi + static_cast<size_t>(i) * groups, blocks, bpg, spread, ds, q.bp);
      const __m512 sum = _mm512_add_ps(_mm512_add_ps(acc[i][r][0], acc[i][r][1]), bias);
      j.out[static_cast<size_t>(r0 + r) * j.n + n + i] = hsum512(sum);
    }
  }
}

// by_shape calls f.template operator()<M, NW>() for m activation rows (1
// to 4) and nw outputs (1 or 2): the integer kernels' shapes, each its own
// instantiation so that its accumulators stay in registers.
template <typename F>
inline void by_shape(int m, int nw, F&& f) {
  if (nw == 2) {
    switch (m) {
      case 1: f.template operator()<1, 2>(); break;
      case 2: f.template operator()<2, 2>(); break;
      case 3: f.template operator()<3, 2>(); break;
      default: f.template operator()<4, 2>(); break;
    }
    return;
  }
  switch (m) {
    case 1: f.template operator()<1, 1>(); break;
    case 2: f.template operator()<2, 1>(); break;
    case 3: f.template operator()<3, 1>(); break;
    default: f.template operator()<4, 1>(); break;
  }
}

// q8_rows computes output rows [n0, n1) for every activation row: pairs
// of outputs by up to four rows at a time. fs has room for two rows' group
// scales as float, each padded to whole 16-lane registers.
template <typename S, int BITS>
PROVIDER_VNNI void q8_rows(const Job& j, const Q8& q, int n0, int n1, float* fs) {
  const int bytes = j.k * BITS / 8;
  const int groups = j.k / j.group;
  const int per = j.group / 64;
  const int bpg = j.group / 32;  // blocks per group
  alignas(64) int32_t lanes[16];
  for (int l = 0; l < 16; l++) {
    lanes[l] = l / bpg;
  }
  const __m512i spread = _mm512_load_si512(lanes);
  const S* sc = static_cast<const S*>(j.scales);
  const S* bi = static_cast<const S*>(j.biases);
  for (int n = n0; n < n1; n += 2) {
    const int nw = std::min(2, n1 - n);
    const uint8_t* row = reinterpret_cast<const uint8_t*>(j.w) + static_cast<size_t>(n) * bytes;
    const S* s = sc + static_cast<size_t>(n) * groups;
    const S* b = bi + static_cast<size_t>(n) * groups;
    const int gs = (groups + 15) / 16 * 16;
    // The next pair's weights and group parameters.
    if (n + 2 < n1) {
      prefetch_outputs<S>(j.w, sc, bi, bytes, groups, n + 2, std::min(2, n1 - n - 2));
    }
    for (int i = 0; i < nw; i++) {
      for (int g = 0; g < groups; g += 16) {
        _mm512_storeu_ps(fs + i * gs + g, q8_groups<S>(s + static_cast<size_t>(i) * groups + g, std::min(16, groups - g)));
      }
    }
    for (int r0 = 0; r0 < j.m; r0 += 4) {
      by_shape(std::min(4, j.m - r0), nw, [&]<int M, int NW>() {
        q8_direct<S, BITS, M, NW>(j, q, r0, row, bytes, fs, gs, b, groups, per, spread, n);
      });
    }
  }
}

// The integer kernel without VNNI (q8a_*): the same sums as q8_rows in
// 8-lane registers, through AVX2's unsigned-by-signed byte products
// (_mm256_maddubs_epi16, pairs summed to 16 bits) summed to 32-bit lanes
// by _mm256_madd_epi16.
//
// 4-bit weights: a chunk of 64 inputs is 32 bytes, its low nibbles
// against the first 32 of q8_prepare's activations and its high nibbles
// against the last 32 (pairs at most 2 * 15 * 127, two such added); lanes
// 0-3 are the chunk's first block and 4-7 its second (dv's first eight
// lanes, d0 x4 and d1 x4).
//
// 8-bit weights (q in 0..255) would overflow a pair's 16 bits, so they
// are taken as q - 128 (the bias gains 128 * scale): |q - 128| against the
// activations carrying q - 128's sign (pairs at most 2 * 128 * 127); each
// block of 32 is a register of its own.
//
// Group parameters are read where they lie, with no per-output copy: a
// copy followed by a wide load of it stalls on store forwarding.

// q8a_eight is eight group parameters as float.
template <typename S>
PROVIDER_AVX2 inline __m256 q8a_eight(const S* p) {
  if constexpr (std::is_same_v<S, float>) {
    return _mm256_loadu_ps(p);
  } else {
    const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
    if constexpr (std::is_same_v<S, mx::float16_t>) {
      return _mm256_cvtph_ps(h);
    } else {
      return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
    }
  }
}

// q8a_scales is chunk c's scales for one output's group scales s: all
// lanes s[c / per] for groups of per chunks, else (groups of 32) lanes 0-3
// s[2c] and 4-7 s[2c+1].
template <typename S>
PROVIDER_AVX2 inline __m256 q8a_scales(const S* s, int c, int per) {
  if (per > 0) {
    return _mm256_set1_ps(param_float(s + c / per));
  }
  __m128 two;
  if constexpr (std::is_same_v<S, float>) {
    two = _mm_castpd_ps(_mm_load_sd(reinterpret_cast<const double*>(s + 2 * c)));
  } else {
    uint32_t u;
    std::memcpy(&u, s + 2 * c, 4);
    const __m128i h = _mm_cvtsi32_si128(static_cast<int>(u));
    if constexpr (std::is_same_v<S, mx::float16_t>) {
      two = _mm_cvtph_ps(h);
    } else {
      two = _mm_castsi128_ps(_mm_slli_epi32(_mm_cvtepu16_epi32(h), 16));
    }
  }
  return _mm256_permutevar8x32_ps(_mm256_castps128_ps256(two), _mm256_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1));
}

// q8a_direct computes outputs n .. n+NW-1 (NW at most 2) for activation
// rows r0 .. r0+M-1 (M at most 4): each chunk's weights are split into
// nibbles once and each chunk's activations loaded once for all of them.
// sc and bi point at output n's group scales and biases (rows groups
// apart); per is the number of chunks in a group (0: groups of 32, two to
// a chunk). Per output and row the chunks accumulate in order into one
// register; the bias terms, each group's bias times the row's sum of d *
// sum(q) over the group's blocks (q.gsx), go eight groups to a register
// and the rest one by one; then lanes and rest are added. The same
// operations whatever M, NW and the thread split, so a row's output does
// not depend on its batch.
template <typename S, int BITS, int M, int NW>
PROVIDER_AVX2 void q8a_direct(const Job& j, const Q8& q, int r0, const uint8_t* row, int bytes, const S* sc,
                              const S* bi, int groups, int per, int n) {
  const int chunks = j.k / 64;
  const __m256i nibble = _mm256_set1_epi8(0x0F), ones = _mm256_set1_epi16(1);
  const __m256i flip = _mm256_set1_epi8(static_cast<char>(0x80));
  __m256 acc[NW][M];
  for (int i = 0; i < NW; i++) {
    for (int r = 0; r < M; r++) {
      acc[i][r] = _mm256_setzero_ps();
    }
  }
  const int8_t* xq = q.xq.data() + static_cast<size_t>(r0) * j.k;
  const float* dv = q.dv.data() + static_cast<size_t>(r0) * chunks * 16;
  for (int c = 0; c < chunks; c++) {
    // 4 bits: a chunk's low and high nibbles; 8 bits: its two blocks as
    // |q - 128|, and q - 128 for the signs.
    __m256i u0[NW], u1[NW], s0[NW], s1[NW];
    __m256 sv[NW], sv1[NW];
    for (int i = 0; i < NW; i++) {
      const uint8_t* wi = row + static_cast<size_t>(i) * bytes + c * BITS * 8;
      const S* si = sc + static_cast<size_t>(i) * groups;
      if constexpr (BITS == 4) {
        const __m256i w = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(wi));
        u0[i] = _mm256_and_si256(w, nibble);
        u1[i] = _mm256_and_si256(_mm256_srli_epi16(w, 4), nibble);
        sv[i] = q8a_scales(si, c, per);
      } else {
        s0[i] = _mm256_xor_si256(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(wi)), flip);
        s1[i] = _mm256_xor_si256(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(wi + 32)), flip);
        u0[i] = _mm256_abs_epi8(s0[i]);
        u1[i] = _mm256_abs_epi8(s1[i]);
        sv[i] = _mm256_set1_ps(param_float(si + (per > 0 ? c / per : 2 * c)));
        sv1[i] = _mm256_set1_ps(param_float(si + (per > 0 ? c / per : 2 * c + 1)));
      }
    }
    for (int r = 0; r < M; r++) {
      const int8_t* x = xq + static_cast<size_t>(r) * j.k + c * 64;
      const __m256i x0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x));
      const __m256i x1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x + 32));
      const float* dr = dv + (static_cast<size_t>(r) * chunks + c) * 16;
      for (int i = 0; i < NW; i++) {
        if constexpr (BITS == 4) {
          const __m256i p = _mm256_add_epi16(_mm256_maddubs_epi16(u0[i], x0), _mm256_maddubs_epi16(u1[i], x1));
          const __m256 dot = _mm256_cvtepi32_ps(_mm256_madd_epi16(p, ones));
          acc[i][r] = _mm256_fmadd_ps(_mm256_mul_ps(dot, _mm256_loadu_ps(dr)), sv[i], acc[i][r]);
        } else {
          const __m256i p0 = _mm256_madd_epi16(_mm256_maddubs_epi16(u0[i], _mm256_sign_epi8(x0, s0[i])), ones);
          const __m256i p1 = _mm256_madd_epi16(_mm256_maddubs_epi16(u1[i], _mm256_sign_epi8(x1, s1[i])), ones);
          acc[i][r] = _mm256_fmadd_ps(_mm256_mul_ps(_mm256_cvtepi32_ps(p0), _mm256_broadcast_ss(dr)), sv[i], acc[i][r]);
          acc[i][r] =
              _mm256_fmadd_ps(_mm256_mul_ps(_mm256_cvtepi32_ps(p1), _mm256_broadcast_ss(dr + 8)), sv1[i], acc[i][r]);
        }
      }
    }
  }
  for (int i = 0; i < NW; i++) {
    const S* b = bi + static_cast<size_t>(i) * groups;
    const S* s = sc + static_cast<size_t>(i) * groups;
    for (int r = 0; r < M; r++) {
      const float* gx = q.gsx.data() + static_cast<size_t>(r0 + r) * groups;
      __m256 bias = _mm256_setzero_ps();
      int g = 0;
      for (; g + 8 <= groups; g += 8) {
        __m256 bg = q8a_eight(b + g);
        if constexpr (BITS == 8) {
          bg = _mm256_fmadd_ps(q8a_eight(s + g), _mm256_set1_ps(128.0f), bg);
        }
        bias = _mm256_fmadd_ps(bg, _mm256_loadu_ps(gx + g), bias);
      }
      float rest = 0;
      for (; g < groups; g++) {
        const float bg = BITS == 8 ? std::fma(param_float(s + g), 128.0f, param_float(b + g)) : param_float(b + g);
        rest = std::fma(bg, gx[g], rest);
      }
      j.out[static_cast<size_t>(r0 + r) * j.n + n + i] = hsum(acc[i][r], bias) + rest;
    }
  }
}

// q8a_group_sums fills q.gsx [m, k/group] from q.dsx: per row and group,
// the sum of d * sum(q) over the group's blocks, in block order.
void q8a_group_sums(const Job& j, Q8& q) {
  const int groups = j.k / j.group, bpg = j.group / 32;
  q.gsx.resize(static_cast<size_t>(j.m) * groups);
  for (int r = 0; r < j.m; r++) {
    const float* ds = q.dsx.data() + static_cast<size_t>(r) * q.bp;
    float* gx = q.gsx.data() + static_cast<size_t>(r) * groups;
    for (int g = 0; g < groups; g++) {
      float s = 0;
      for (int b = g * bpg; b < (g + 1) * bpg; b++) {
        s += ds[b];
      }
      gx[g] = s;
    }
  }
}

// q8a_rows is q8_rows without VNNI: output rows [n0, n1) for every
// activation row, pairs of outputs by up to four rows at a time.
template <typename S, int BITS>
PROVIDER_AVX2 void q8a_rows(const Job& j, const Q8& q, int n0, int n1) {
  const int bytes = j.k * BITS / 8;
  const int groups = j.k / j.group;
  const int per = j.group / 64;
  const S* sc = static_cast<const S*>(j.scales);
  const S* bi = static_cast<const S*>(j.biases);
  for (int n = n0; n < n1; n += 2) {
    const int nw = std::min(2, n1 - n);
    const uint8_t* row = reinterpret_cast<const uint8_t*>(j.w) + static_cast<size_t>(n) * bytes;
    const S* s = sc + static_cast<size_t>(n) * groups;
    const S* b = bi + static_cast<size_t>(n) * groups;
    if (n + 2 < n1) {
      prefetch_outputs<S>(j.w, sc, bi, bytes, groups, n + 2, std::min(2, n1 - n - 2));
    }
    for (int r0 = 0; r0 < j.m; r0 += 4) {
      by_shape(std::min(4, j.m - r0), nw, [&]<int M, int NW>() {
        q8a_direct<S, BITS, M, NW>(j, q, r0, row, bytes, s, b, groups, per, n);
      });
    }
  }
}

#endif  // PROVIDER_X86

// rows_portable is the same computation in plain C++, in the same order
// (lanes, alternating accumulators, reduction), for processors without
// AVX2.
template <typename S>
void rows_portable(const Job& j, int n0, int n1, float* buf) {
  const int words = j.k * j.bits / 32;
  const int groups = j.k / j.group;
  const int per = 32 / j.bits;
  const uint32_t mask = (1u << j.bits) - 1;
  const S* sc = static_cast<const S*>(j.scales);
  const S* bi = static_cast<const S*>(j.biases);
  for (int n = n0; n < n1; n++) {
    const uint32_t* row = j.w + static_cast<size_t>(n) * words;
    for (int e = 0; e < j.k; e++) {
      const int g = e / j.group;
      const float q = static_cast<float>((row[e / per] >> ((e % per) * j.bits)) & mask);
      buf[e] = std::fma(q, to_float(sc[static_cast<size_t>(n) * groups + g]), to_float(bi[static_cast<size_t>(n) * groups + g]));
    }
    for (int r = 0; r < j.m; r++) {
      float a[2][8] = {};
      const float* xr = j.x + static_cast<size_t>(r) * j.k;
      for (int e = 0; e < j.k; e += 8) {
        float* acc = a[(e / 8) & 1];
        for (int l = 0; l < 8; l++) {
          acc[l] = std::fma(buf[e + l], xr[e + l], acc[l]);
        }
      }
      float s[8];
      for (int l = 0; l < 8; l++) {
        s[l] = a[0][l] + a[1][l];
      }
      float v0 = s[0] + s[4], v1 = s[1] + s[5], v2 = s[2] + s[6], v3 = s[3] + s[7];
      v0 = v0 + v2;
      v1 = v1 + v3;
      j.out[static_cast<size_t>(r) * j.n + n] = v0 + v1;
    }
  }
}

// streamed_chunk is how many of n outputs a task takes in a kernel that
// prefetches each next output's weights within its task: about four tasks
// a thread, of up to 256 outputs, a multiple of step (the outputs the
// kernel computes together). A boundary breaks the prefetch stream: tasks
// of at most 16 outputs made SmolLM2-135M's decode step 4 to 25 % slower
// with the packed kernel at 1, 8 and 32 rows, and 15 % slower at one row
// with the float one.
inline int streamed_chunk(int n, int step) {
  return std::max(step, std::min(256, n / (4 * Pool::get().threads())) / step * step);
}

template <typename S>
void run_job(const Job& j) {
  // The AVX-512 direct kernel prefetches (streamed_chunk). The others take
  // tasks of a few outputs, enough of them to balance the threads: the
  // unpacking kernels' buffer stays in cache, and the AVX2 direct kernel,
  // which does not prefetch, gained nothing from more.
#if PROVIDER_X86
  const bool direct = have_avx512() && j.m <= direct_rows512();
#else
  const bool direct = false;
#endif
  const int chunk = direct ? streamed_chunk(j.n, 1) : std::max(1, std::min(16, j.n / (8 * Pool::get().threads())));
  const int tasks = (j.n + chunk - 1) / chunk;
  Pool::get().run(tasks, [&](int t) {
    thread_local std::vector<float> buf, fs, fb;
    // Sized separately: a job of fewer, longer rows than the last needs
    // more group parameters even when its buffer fits. The direct kernel
    // unpacks nothing (its tasks are the long ones).
    if (!direct && buf.size() < static_cast<size_t>(chunk) * j.k) {
      buf.resize(static_cast<size_t>(chunk) * j.k);
    }
    if (fs.size() < static_cast<size_t>(j.k / 16)) {
      fs.resize(j.k / 16);
      fb.resize(j.k / 16);
    }
    const int n0 = t * chunk;
    const int n1 = std::min(j.n, n0 + chunk);
#if PROVIDER_X86
    if (have_avx2()) {
      if (direct) {
        j.bits == 4 ? rows512<S, 4>(j, n0, n1, fs.data(), fb.data()) : rows512<S, 8>(j, n0, n1, fs.data(), fb.data());
      } else if (j.m <= 4) {
        j.bits == 4 ? rows_avx2<S, 4>(j, n0, n1, fs.data(), fb.data()) : rows_avx2<S, 8>(j, n0, n1, fs.data(), fb.data());
      } else if (have_avx512()) {
        j.bits == 4 ? rows_many512<S, 4>(j, n0, n1, buf.data(), fs.data(), fb.data())
                    : rows_many512<S, 8>(j, n0, n1, buf.data(), fs.data(), fb.data());
      } else {
        j.bits == 4 ? rows_many<S, 4>(j, n0, n1, buf.data(), fs.data(), fb.data())
                    : rows_many<S, 8>(j, n0, n1, buf.data(), fs.data(), fb.data());
      }
      return;
    }
#endif
    rows_portable<S>(j, n0, n1, buf.data());
  });
}

// run_job_q8 is run_job for the integer kernel (the caller checked q8_ok).
template <typename S>
void run_job_q8(const Job& j) {
#if PROVIDER_X86
  Q8 q;
  q.bp = (j.k / 32 + 15) / 16 * 16;
  q.xq.resize(static_cast<size_t>(j.m) * j.k);
  q.dv.resize(static_cast<size_t>(j.m) * (j.k / 64) * 16);
  q.dsx.resize(static_cast<size_t>(j.m) * q.bp);
  const int prep = std::max(1, std::min(j.m, Pool::get().threads() * 4));
  const int per = (j.m + prep - 1) / prep;
  Pool::get().run(prep, [&](int t) { q8_prepare(j, j.bits, q, t * per, std::min(j.m, (t + 1) * per)); });
  // Outputs in pairs; both kernels prefetch the next pair's weights.
  const int chunk = streamed_chunk(j.n, 2);
  const int tasks = (j.n + chunk - 1) / chunk;
  if (!have_vnni()) {
    q8a_group_sums(j, q);
    Pool::get().run(tasks, [&](int t) {
      const int n0 = t * chunk, n1 = std::min(j.n, n0 + chunk);
      j.bits == 4 ? q8a_rows<S, 4>(j, q, n0, n1) : q8a_rows<S, 8>(j, q, n0, n1);
    });
    return;
  }
  Pool::get().run(tasks, [&](int t) {
    thread_local std::vector<float> fs;
    const size_t need = 2 * static_cast<size_t>((j.k / j.group + 15) / 16 * 16);
    if (fs.size() < need) {
      fs.resize(need);
    }
    const int n0 = t * chunk;
    const int n1 = std::min(j.n, n0 + chunk);
    j.bits == 4 ? q8_rows<S, 4>(j, q, n0, n1, fs.data()) : q8_rows<S, 8>(j, q, n0, n1, fs.data());
  });
#endif
}

bool use_mlx_kernel() {
  static const bool v = [] {
    const char* env = std::getenv("PROVIDER_CPU_QMM");
    return env != nullptr && std::strcmp(env, "mlx") == 0;
  }();
  return v;
}

// ---------------------------------------------------------------------------
// Packed integer kernel (AffineLinearPacked). The integer kernel above
// turns every 64-element dot product into float (convert, two multiplies)
// before the next: per 64 products, one VNNI instruction and three float
// ones, so it runs at a quarter of the processor's integer rate. Here the
// weights are repacked once at load so that the 16 lanes of a register
// hold 16 different blocks of 32 elements, four consecutive elements each:
// eight VNNI steps finish all 32 elements of 16 blocks in integers, and
// one conversion and two fused multiply-adds per 16 blocks apply the
// scales and biases. A row's blocks go in spans of 16; the rest go in
// pairs, a pair in one register laid out as the integer kernel's chunks,
// and an odd last block in half of one.
//
// Packed layout of one output row (k elements, blocks of 32):
//   span g (blocks 16g .. 16g+15), 4-bit: 256 bytes, four words of 64;
//     byte 64u + 4L + j holds element 8u + j of block 16g+L in its low
//     nibble and element 8u + 4 + j in its high nibble (the low nibbles of
//     word u are VNNI step 2u, the high ones step 2u+1; step s covers
//     elements 4s .. 4s+3 of every block);
//   span g, 8-bit: 512 bytes, byte 64s + 4L + j = element 4s + j of block
//     16g+L;
//   pair p (blocks b, b+1 after the spans), 4-bit: 32 bytes, byte 16h + i
//     holds element i of block b+h low and element 16+i high; 8-bit: 64
//     bytes, the two blocks in order;
//   a last block alone (k an odd number of blocks): a pair's first half,
//     16 bytes (4-bit) or 32 (8-bit).
// Scales and biases are one per block ([n, k/32], a group's repeated for
// every block in it), in the checkpoint's float type. The activations are
// quantized per block of 32 as in the integer kernel (the same values) and
// laid out in the same order as the weights.

// packed_at is where element e of a packed row lives: its byte and the
// shift of its value in that byte.
inline void packed_at(int k, int bits, int e, size_t& byte, int& shift) {
  const int blocks = k / 32, spans = blocks / 16;
  const int b = e / 32, i = e % 32;
  shift = 0;
  if (b < 16 * spans) {
    const int g = b / 16, L = b % 16, s = i / 4, j = i % 4;
    if (bits == 4) {
      byte = static_cast<size_t>(g) * 256 + (s / 2) * 64 + 4 * L + j;
      shift = (s % 2) * 4;
    } else {
      byte = static_cast<size_t>(g) * 512 + s * 64 + 4 * L + j;
    }
    return;
  }
  // Pairs, then (k an odd number of blocks) a last block alone, laid out
  // as the first block of a pair.
  const int p = (b - 16 * spans) / 2, h = (b - 16 * spans) % 2;
  if (bits == 4) {
    byte = static_cast<size_t>(spans) * 256 + p * 32 + 16 * h + i % 16;
    shift = (i / 16) * 4;
  } else {
    byte = static_cast<size_t>(spans) * 512 + p * 64 + 32 * h + i;
  }
}

// PackedIndex is packed_at for every element of a row of k at bits.
struct PackedIndex {
  std::vector<size_t> byte;
  std::vector<int> shift;
};

// packed_index is the row layout for (k, bits), computed once per process
// (a model has a few distinct input lengths; embedding reads it every
// step).
const PackedIndex& packed_index(int k, int bits) {
  static std::mutex mu;
  static std::map<std::pair<int, int>, PackedIndex> made;
  std::lock_guard<std::mutex> l(mu);
  PackedIndex& x = made[{k, bits}];
  if (x.byte.empty()) {
    x.byte.resize(k);
    x.shift.resize(k);
    for (int e = 0; e < k; e++) {
      packed_at(k, bits, e, x.byte[e], x.shift[e]);
    }
  }
  return x;
}

// pack_rows packs rows [n0, n1) of MLX-layout weights w (k*bits/32 words a
// row, element e at bits (e % (32/bits))*bits of word e / (32/bits)).
void pack_rows(const uint32_t* w, int k, int bits, int n0, int n1, uint8_t* out) {
  const int per = 32 / bits, words = k / per;
  const uint32_t mask = (1u << bits) - 1;
  const size_t rb = static_cast<size_t>(k) * bits / 8;
  const PackedIndex& ix = packed_index(k, bits);
  const size_t* byte = ix.byte.data();
  const int* shift = ix.shift.data();
  for (int n = n0; n < n1; n++) {
    const uint32_t* src = w + static_cast<size_t>(n) * words;
    uint8_t* dst = out + static_cast<size_t>(n) * rb;
    std::memset(dst, 0, rb);
    for (int e = 0; e < k; e++) {
      const uint32_t q = (src[e / per] >> ((e % per) * bits)) & mask;
      dst[byte[e]] |= static_cast<uint8_t>(q << shift[e]);
    }
  }
}

// PJob is one call of the packed kernel.
struct PJob {
  const float* x;  // [m, k]
  int m, k, n, bits;
  const uint8_t* w;  // [n, k*bits/8], packed
  const void* scales;  // [n, k/32]
  const void* biases;
  float* out;  // [m, n]
};

// PQ8 is a call's quantized activations in the packed order: values [m,
// k]; per block its scale d and d*sum(q), [m, bp] each (bp: blocks padded
// to 16, the padding zero).
struct PQ8 {
  std::vector<int8_t> xq;
  std::vector<float> d, dsx;
  int bp = 0;
};

// pq8_place puts block b's 32 quantized activations t into a row's packed
// order xq: in a span of 16 blocks, four bytes of each block in turn; past
// the spans, pairs of blocks as the packed weights pair them, and a last
// block alone in order.
inline void pq8_place(int bits, int blocks, int8_t* xq, int b, const int8_t* t) {
  const int spans = blocks / 16;
  if (b < 16 * spans) {
    int8_t* o = xq + (b / 16) * 512 + 4 * (b % 16);
    for (int s = 0; s < 8; s++) {
      std::memcpy(o + 64 * s, t + 4 * s, 4);
    }
  } else if (b == blocks - 1 && (blocks - 16 * spans) % 2 == 1) {
    // A last block alone: its elements in order (both widths).
    std::memcpy(xq + spans * 512 + (blocks - 16 * spans) / 2 * 64, t, 32);
  } else {
    const int p = (b - 16 * spans) / 2, h = (b - 16 * spans) % 2;
    int8_t* o = xq + spans * 512 + p * 64;
    if (bits == 4) {
      std::memcpy(o + 16 * h, t, 16);
      std::memcpy(o + 32 + 16 * h, t + 16, 16);
    } else {
      std::memcpy(o + 32 * h, t, 32);
    }
  }
}

// pq8_prepare is pq8_prepare512 on AVX2 (q8_block, as q8_prepare):
// the same bytes, scales and sums.
void pq8_prepare(const PJob& j, PQ8& q, int r0, int r1) {
  const int blocks = j.k / 32;
  for (int r = r0; r < r1; r++) {
    const float* x = j.x + static_cast<size_t>(r) * j.k;
    int8_t* xq = q.xq.data() + static_cast<size_t>(r) * j.k;
    float* d = q.d.data() + static_cast<size_t>(r) * q.bp;
    float* dsx = q.dsx.data() + static_cast<size_t>(r) * q.bp;
    for (int b = 0; b < blocks; b++) {
      int8_t t[32];
      const int sum = q8_block(x + b * 32, t, d[b]);
      pq8_place(j.bits, blocks, xq, b, t);
      dsx[b] = d[b] * static_cast<float>(sum);
    }
    for (int b = blocks; b < q.bp; b++) {
      d[b] = dsx[b] = 0;
    }
  }
}

#if PROVIDER_X86

// pq8_prepare512 quantizes activation rows [r0, r1) of j.x into q, each
// block of 32 as q8_prepare does (the same maxima, float products,
// round-half-even conversion and integer sums), its bytes in the packed
// order.
PROVIDER_VNNI void pq8_prepare512(const PJob& j, PQ8& q, int r0, int r1) {
  const int blocks = j.k / 32, spans = blocks / 16;
  const __m512i lo = _mm512_set1_epi32(-127), hi = _mm512_set1_epi32(127);
  for (int r = r0; r < r1; r++) {
    const float* x = j.x + static_cast<size_t>(r) * j.k;
    int8_t* xq = q.xq.data() + static_cast<size_t>(r) * j.k;
    float* d = q.d.data() + static_cast<size_t>(r) * q.bp;
    float* dsx = q.dsx.data() + static_cast<size_t>(r) * q.bp;
    for (int b = 0; b < blocks; b++) {
      const __m512 a0 = _mm512_loadu_ps(x + b * 32), a1 = _mm512_loadu_ps(x + b * 32 + 16);
      const float amax = _mm512_reduce_max_ps(_mm512_max_ps(_mm512_abs_ps(a0), _mm512_abs_ps(a1)));
      const float inv = amax > 0 ? 127.0f / amax : 0.0f;
      const __m512 vi = _mm512_set1_ps(inv);
      const __m512i q0 = _mm512_min_epi32(_mm512_max_epi32(_mm512_cvtps_epi32(_mm512_mul_ps(a0, vi)), lo), hi);
      const __m512i q1 = _mm512_min_epi32(_mm512_max_epi32(_mm512_cvtps_epi32(_mm512_mul_ps(a1, vi)), lo), hi);
      const int sum = _mm512_reduce_add_epi32(_mm512_add_epi32(q0, q1));
      alignas(64) int8_t t[32];
      _mm_store_si128(reinterpret_cast<__m128i*>(t), _mm512_cvtsepi32_epi8(q0));
      _mm_store_si128(reinterpret_cast<__m128i*>(t + 16), _mm512_cvtsepi32_epi8(q1));
      pq8_place(j.bits, blocks, xq, b, t);
      d[b] = amax / 127.0f;
      dsx[b] = d[b] * static_cast<float>(sum);
    }
    for (int b = blocks; b < q.bp; b++) {
      d[b] = dsx[b] = 0;
    }
  }
}

// PTileAt is where a packed tile's operands start: output n's weights
// and block parameters, activation row r0's values, scales and sums.
template <typename S>
struct PTileAt {
  int blocks, spans, pairs;
  size_t rb;  // bytes of a row of weights
  const uint8_t* w;
  const S *sc, *bi;
  const int8_t* xq;
  const float *dr, *sr;
};

template <typename S>
inline PTileAt<S> ptile_at(const PJob& j, const PQ8& q, int bits, int r0, int n) {
  const int blocks = j.k / 32, spans = blocks / 16;
  const size_t rb = static_cast<size_t>(j.k) * bits / 8;
  return {blocks,
          spans,
          (blocks - 16 * spans) / 2,
          rb,
          j.w + static_cast<size_t>(n) * rb,
          static_cast<const S*>(j.scales) + static_cast<size_t>(n) * blocks,
          static_cast<const S*>(j.biases) + static_cast<size_t>(n) * blocks,
          q.xq.data() + static_cast<size_t>(r0) * j.k,
          q.d.data() + static_cast<size_t>(r0) * q.bp,
          q.dsx.data() + static_cast<size_t>(r0) * q.bp};
}

// pk_tile computes outputs n .. n+NW-1 for activation rows r0 .. r0+M-1.
// Per output and row, one float accumulator takes, span by span, the
// span's integer dot products times scale*d, then its bias terms; then
// pair by pair the same; then it is reduced. The order is the same for
// every tile shape, batch and thread split.
template <typename S, int BITS, int M, int NW>
PROVIDER_VNNI void pk_tile(const PJob& j, const PQ8& q, int r0, int n) {
  const auto [blocks, spans, pairs, rb, w, sc, bi, xq, dr, sr] = ptile_at<S>(j, q, BITS, r0, n);
  __m512 acc[NW][M];
  #pragma GCC unroll 16
  for (int i = 0; i < NW; i++) {
    #pragma GCC unroll 16
    for (int r = 0; r < M; r++) {
      acc[i][r] = _mm512_setzero_ps();
    }
  }
  const __m512i m4 = _mm512_set1_epi8(0x0F);
  for (int g = 0; g < spans; g++) {
    __m512i ia[NW][M];
    #pragma GCC unroll 16
    for (int i = 0; i < NW; i++) {
      #pragma GCC unroll 16
      for (int r = 0; r < M; r++) {
        ia[i][r] = _mm512_setzero_si512();
      }
    }
    if constexpr (BITS == 4) {
      #pragma GCC unroll 8
      for (int u = 0; u < 4; u++) {
        __m512i lo[NW], hi[NW];
        #pragma GCC unroll 16
        for (int i = 0; i < NW; i++) {
          const __m512i raw = _mm512_loadu_si512(w + i * rb + g * 256 + u * 64);
          lo[i] = _mm512_and_si512(raw, m4);
          hi[i] = _mm512_and_si512(_mm512_srli_epi16(raw, 4), m4);
        }
        #pragma GCC unroll 16
        for (int r = 0; r < M; r++) {
          const int8_t* xr = xq + static_cast<size_t>(r) * j.k + g * 512 + u * 128;
          const __m512i x0 = _mm512_loadu_si512(xr);
          const __m512i x1 = _mm512_loadu_si512(xr + 64);
          #pragma GCC unroll 16
          for (int i = 0; i < NW; i++) {
            ia[i][r] = _mm512_dpbusd_epi32(ia[i][r], lo[i], x0);
            ia[i][r] = _mm512_dpbusd_epi32(ia[i][r], hi[i], x1);
          }
        }
      }
    } else {
      #pragma GCC unroll 8
      for (int s = 0; s < 8; s++) {
        __m512i wv[NW];
        #pragma GCC unroll 16
        for (int i = 0; i < NW; i++) {
          wv[i] = _mm512_loadu_si512(w + i * rb + g * 512 + s * 64);
        }
        #pragma GCC unroll 16
        for (int r = 0; r < M; r++) {
          const __m512i x = _mm512_loadu_si512(xq + static_cast<size_t>(r) * j.k + g * 512 + s * 64);
          #pragma GCC unroll 16
          for (int i = 0; i < NW; i++) {
            ia[i][r] = _mm512_dpbusd_epi32(ia[i][r], wv[i], x);
          }
        }
      }
    }
    __m512 sv[NW], bv[NW];
    #pragma GCC unroll 16
    for (int i = 0; i < NW; i++) {
      sv[i] = q8_groups<S>(sc + static_cast<size_t>(i) * blocks + 16 * g, 16);
      bv[i] = q8_groups<S>(bi + static_cast<size_t>(i) * blocks + 16 * g, 16);
    }
    #pragma GCC unroll 16
    for (int r = 0; r < M; r++) {
      const __m512 d = _mm512_loadu_ps(dr + static_cast<size_t>(r) * q.bp + 16 * g);
      const __m512 ds = _mm512_loadu_ps(sr + static_cast<size_t>(r) * q.bp + 16 * g);
      #pragma GCC unroll 16
      for (int i = 0; i < NW; i++) {
        acc[i][r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(ia[i][r]), _mm512_mul_ps(sv[i], d), acc[i][r]);
        acc[i][r] = _mm512_fmadd_ps(bv[i], ds, acc[i][r]);
      }
    }
  }
  // A pair's lanes: 4-bit, lanes 0-3 and 8-11 block b, the rest b+1;
  // 8-bit, lanes 0-7 block b, 8-15 b+1.
  const __m512i pattern = BITS == 4 ? _mm512_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1, 0, 0, 0, 0, 1, 1, 1, 1)
                                    : _mm512_setr_epi32(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1);
  for (int p = 0; p < pairs; p++) {
    const int b = 16 * spans + 2 * p;
    __m512i wv[NW];
    __m512 sv[NW], bv[NW];
    #pragma GCC unroll 16
    for (int i = 0; i < NW; i++) {
      if constexpr (BITS == 4) {
        const __m256i raw = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w + i * rb + spans * 256 + p * 32));
        const __m256i l4 = _mm256_set1_epi8(0x0F);
        wv[i] = _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_and_si256(raw, l4)),
                                   _mm256_and_si256(_mm256_srli_epi16(raw, 4), l4), 1);
      } else {
        wv[i] = _mm512_loadu_si512(w + i * rb + spans * 512 + p * 64);
      }
      sv[i] = _mm512_permutexvar_ps(pattern, q8_groups<S>(sc + static_cast<size_t>(i) * blocks + b, 2));
      bv[i] = q8_groups<S>(bi + static_cast<size_t>(i) * blocks + b, 2);
    }
    #pragma GCC unroll 16
    for (int r = 0; r < M; r++) {
      const __m512i x = _mm512_loadu_si512(xq + static_cast<size_t>(r) * j.k + spans * 512 + p * 64);
      const __m512 d = _mm512_permutexvar_ps(pattern, _mm512_maskz_loadu_ps(0x3, dr + static_cast<size_t>(r) * q.bp + b));
      const __m512 ds = _mm512_maskz_loadu_ps(0x3, sr + static_cast<size_t>(r) * q.bp + b);
      #pragma GCC unroll 16
      for (int i = 0; i < NW; i++) {
        const __m512i dot = _mm512_dpbusd_epi32(_mm512_setzero_si512(), wv[i], x);
        acc[i][r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(dot), _mm512_mul_ps(sv[i], d), acc[i][r]);
        acc[i][r] = _mm512_fmadd_ps(bv[i], ds, acc[i][r]);
      }
    }
  }
  if ((blocks - 16 * spans) % 2 == 1) {
    // The last block alone: its 32 elements in lanes 0-7, the rest zero.
    const int b = blocks - 1;
    const size_t at = BITS == 4 ? static_cast<size_t>(spans) * 256 + pairs * 32 : static_cast<size_t>(spans) * 512 + pairs * 64;
    __m512i wv[NW];
    __m512 sv[NW], bv[NW];
    #pragma GCC unroll 16
    for (int i = 0; i < NW; i++) {
      if constexpr (BITS == 4) {
        const __m128i raw = _mm_loadu_si128(reinterpret_cast<const __m128i*>(w + i * rb + at));
        const __m128i l4 = _mm_set1_epi8(0x0F);
        wv[i] = _mm512_zextsi256_si512(_mm256_inserti128_si256(_mm256_castsi128_si256(_mm_and_si128(raw, l4)),
                                                               _mm_and_si128(_mm_srli_epi16(raw, 4), l4), 1));
      } else {
        wv[i] = _mm512_zextsi256_si512(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(w + i * rb + at)));
      }
      sv[i] = _mm512_permutexvar_ps(_mm512_setzero_si512(), q8_groups<S>(sc + static_cast<size_t>(i) * blocks + b, 1));
      bv[i] = q8_groups<S>(bi + static_cast<size_t>(i) * blocks + b, 1);
    }
    #pragma GCC unroll 16
    for (int r = 0; r < M; r++) {
      const __m512i x = _mm512_zextsi256_si512(
          _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xq + static_cast<size_t>(r) * j.k + spans * 512 + pairs * 64)));
      const __m512 d = _mm512_set1_ps(dr[static_cast<size_t>(r) * q.bp + b]);
      const __m512 ds = _mm512_maskz_loadu_ps(0x1, sr + static_cast<size_t>(r) * q.bp + b);
      #pragma GCC unroll 16
      for (int i = 0; i < NW; i++) {
        const __m512i dot = _mm512_dpbusd_epi32(_mm512_setzero_si512(), wv[i], x);
        acc[i][r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(dot), _mm512_mul_ps(sv[i], d), acc[i][r]);
        acc[i][r] = _mm512_fmadd_ps(bv[i], ds, acc[i][r]);
      }
    }
  }
  #pragma GCC unroll 16
  for (int i = 0; i < NW; i++) {
    #pragma GCC unroll 16
    for (int r = 0; r < M; r++) {
      j.out[static_cast<size_t>(r0 + r) * j.n + n + i] = hsum512(acc[i][r]);
    }
  }
}

// pk_by_rows is pk_tile with its row count m (1 to 4) made a constant.
template <typename S, int BITS, int NW>
PROVIDER_VNNI void pk_by_rows(const PJob& j, const PQ8& q, int m, int r0, int n) {
  switch (m) {
    case 1: pk_tile<S, BITS, 1, NW>(j, q, r0, n); break;
    case 2: pk_tile<S, BITS, 2, NW>(j, q, r0, n); break;
    case 3: pk_tile<S, BITS, 3, NW>(j, q, r0, n); break;
    default: pk_tile<S, BITS, 4, NW>(j, q, r0, n); break;
  }
}

// pk_rows computes outputs [n0, n1) for every activation row: four
// outputs (the last one or two: fewer) by up to four rows, rows in blocks
// of 32 so that a block's activations stay in the first-level cache while
// the outputs' weights pass over them.
template <typename S, int BITS>
PROVIDER_VNNI void pk_rows(const PJob& j, const PQ8& q, int n0, int n1) {
  const size_t rb = static_cast<size_t>(j.k) * BITS / 8;
  const int blocks = j.k / 32;
  for (int rb0 = 0; rb0 < j.m; rb0 += 32) {
    const int rb1 = std::min(j.m, rb0 + 32);
    for (int n = n0; n < n1;) {
      const int nw = n1 - n >= 4 ? 4 : std::min(2, n1 - n);
      if (rb0 == 0 && n + nw < n1) {
        // The next tile's weights and block parameters.
        prefetch_outputs<S>(j.w, j.scales, j.biases, rb, blocks, n + nw, std::min(nw, n1 - n - nw));
      }
      for (int r0 = rb0; r0 < rb1; r0 += 4) {
        const int m = std::min(4, rb1 - r0);
        if (nw == 4) {
          pk_by_rows<S, BITS, 4>(j, q, m, r0, n);
        } else if (nw == 2) {
          pk_by_rows<S, BITS, 2>(j, q, m, r0, n);
        } else {
          pk_by_rows<S, BITS, 1>(j, q, m, r0, n);
        }
      }
      n += nw;
    }
  }
}

// The packed kernel without VNNI (pka_*): each 512-bit register of the
// packed weights as two of 256 bits (blocks 0-7 and 8-15 of a span), the
// products through _mm256_maddubs_epi16 summed to 32-bit lanes by
// _mm256_madd_epi16. 4-bit: a span's sixteen products per pair of lanes
// (at most 4 * 2 * 2 * 15 * 127) are summed in 16 bits first. 8-bit
// weights are taken as q - 128 against the activations carrying its sign,
// the bias gaining 128 * scale (as q8a_direct).

// pka_lanes adds, for one output and row, a register of eight lanes'
// integer dots ia times their weights' scales sv and activations' scales d,
// then the bias terms bv * ds, into acc.
PROVIDER_AVX2 inline __m256 pka_lanes(__m256 acc, __m256i ia, __m256 sv, __m256 d, __m256 bv, __m256 ds) {
  acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(ia), _mm256_mul_ps(sv, d), acc);
  return _mm256_fmadd_ps(bv, ds, acc);
}

// pka_dot8 is the eight 32-bit lanes of 8-bit weights w (as stored)
// against activations x: |w - 128| by x with w - 128's sign.
PROVIDER_AVX2 inline __m256i pka_dot8(__m256i w, __m256i x) {
  const __m256i sw = _mm256_xor_si256(w, _mm256_set1_epi8(static_cast<char>(0x80)));
  return _mm256_madd_epi16(_mm256_maddubs_epi16(_mm256_abs_epi8(sw), _mm256_sign_epi8(x, sw)), _mm256_set1_epi16(1));
}

// pka_bias is block b's bias as the lanes take it: with 8-bit weights,
// corrected by 128 * its scale.
template <typename S, int BITS>
PROVIDER_AVX2 inline float pka_bias(const S* sc, const S* bi, int b) {
  const float v = param_float(bi + b);
  return BITS == 8 ? std::fma(param_float(sc + b), 128.0f, v) : v;
}

// pka_tile is pk_tile without VNNI: outputs n .. n+NW-1 for activation
// rows r0 .. r0+M-1. Per output and row one float accumulator takes, span
// by span, each half's dots times scale*d and its bias terms; then the
// pairs and a last block the same; then it is reduced. The order is the
// same for every tile shape, batch and thread split.
template <typename S, int BITS, int M, int NW>
PROVIDER_AVX2 void pka_tile(const PJob& j, const PQ8& q, int r0, int n) {
  const auto [blocks, spans, pairs, rb, w, sc, bi, xq, dr, sr] = ptile_at<S>(j, q, BITS, r0, n);
  const __m256i m4 = _mm256_set1_epi8(0x0F), ones = _mm256_set1_epi16(1);
  __m256 acc[NW][M];
  for (int i = 0; i < NW; i++) {
    for (int r = 0; r < M; r++) {
      acc[i][r] = _mm256_setzero_ps();
    }
  }
  for (int g = 0; g < spans; g++) {
    for (int h = 0; h < 2; h++) {
      __m256i ia[NW][M];
      if constexpr (BITS == 4) {
        __m256i s16[NW][M];
        for (int i = 0; i < NW; i++) {
          for (int r = 0; r < M; r++) {
            s16[i][r] = _mm256_setzero_si256();
          }
        }
        for (int u = 0; u < 4; u++) {
          __m256i lo[NW], hi[NW];
          for (int i = 0; i < NW; i++) {
            const __m256i raw = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w + i * rb + g * 256 + u * 64 + 32 * h));
            lo[i] = _mm256_and_si256(raw, m4);
            hi[i] = _mm256_and_si256(_mm256_srli_epi16(raw, 4), m4);
          }
          for (int r = 0; r < M; r++) {
            const int8_t* xr = xq + static_cast<size_t>(r) * j.k + g * 512 + u * 128 + 32 * h;
            const __m256i x0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xr));
            const __m256i x1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xr + 64));
            for (int i = 0; i < NW; i++) {
              s16[i][r] = _mm256_add_epi16(s16[i][r], _mm256_add_epi16(_mm256_maddubs_epi16(lo[i], x0),
                                                                       _mm256_maddubs_epi16(hi[i], x1)));
            }
          }
        }
        for (int i = 0; i < NW; i++) {
          for (int r = 0; r < M; r++) {
            ia[i][r] = _mm256_madd_epi16(s16[i][r], ones);
          }
        }
      } else {
        for (int i = 0; i < NW; i++) {
          for (int r = 0; r < M; r++) {
            ia[i][r] = _mm256_setzero_si256();
          }
        }
        for (int e = 0; e < 8; e++) {
          __m256i wv[NW];
          for (int i = 0; i < NW; i++) {
            wv[i] = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w + i * rb + g * 512 + e * 64 + 32 * h));
          }
          for (int r = 0; r < M; r++) {
            const __m256i x = _mm256_loadu_si256(
                reinterpret_cast<const __m256i*>(xq + static_cast<size_t>(r) * j.k + g * 512 + e * 64 + 32 * h));
            for (int i = 0; i < NW; i++) {
              ia[i][r] = _mm256_add_epi32(ia[i][r], pka_dot8(wv[i], x));
            }
          }
        }
      }
      const int b0 = 16 * g + 8 * h;
      __m256 sv[NW], bv[NW];
      for (int i = 0; i < NW; i++) {
        sv[i] = q8a_eight(sc + static_cast<size_t>(i) * blocks + b0);
        bv[i] = q8a_eight(bi + static_cast<size_t>(i) * blocks + b0);
        if constexpr (BITS == 8) {
          bv[i] = _mm256_fmadd_ps(sv[i], _mm256_set1_ps(128.0f), bv[i]);
        }
      }
      for (int r = 0; r < M; r++) {
        const __m256 d = _mm256_loadu_ps(dr + static_cast<size_t>(r) * q.bp + b0);
        const __m256 ds = _mm256_loadu_ps(sr + static_cast<size_t>(r) * q.bp + b0);
        for (int i = 0; i < NW; i++) {
          acc[i][r] = pka_lanes(acc[i][r], ia[i][r], sv[i], d, bv[i], ds);
        }
      }
    }
  }
  // Past the spans, pairs of blocks b and b+1, then a last block alone:
  // 4-bit, lanes 0-3 block b and 4-7 b+1 (a last block: all eight); 8-bit,
  // one register a block. The bias terms go in lanes 0 and 1.
  for (int b = 16 * spans; b < blocks;) {
    const bool two = b + 1 < blocks && (b - 16 * spans) / 2 < pairs;
    const size_t at = BITS == 4 ? static_cast<size_t>(spans) * 256 + (b - 16 * spans) / 2 * 32
                                : static_cast<size_t>(spans) * 512 + (b - 16 * spans) / 2 * 64;
    const int nb = two ? 2 : 1;
    for (int i = 0; i < NW; i++) {
      const S* si = sc + static_cast<size_t>(i) * blocks;
      const S* bii = bi + static_cast<size_t>(i) * blocks;
      const uint8_t* wi = w + i * rb + at;
      __m256i wl[2];
      if constexpr (BITS == 4) {
        if (two) {
          const __m256i raw = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(wi));
          wl[0] = _mm256_and_si256(raw, m4);
          wl[1] = _mm256_and_si256(_mm256_srli_epi16(raw, 4), m4);
        } else {
          const __m128i raw = _mm_loadu_si128(reinterpret_cast<const __m128i*>(wi));
          const __m128i l4 = _mm_set1_epi8(0x0F);
          wl[0] = _mm256_inserti128_si256(_mm256_castsi128_si256(_mm_and_si128(raw, l4)),
                                          _mm_and_si128(_mm_srli_epi16(raw, 4), l4), 1);
        }
      } else {
        for (int e = 0; e < nb; e++) {
          wl[e] = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(wi + 32 * e));
        }
      }
      const float s0 = param_float(si + b), s1 = two ? param_float(si + b + 1) : s0;
      const float c0 = pka_bias<S, BITS>(si, bii, b), c1 = two ? pka_bias<S, BITS>(si, bii, b + 1) : 0.0f;
      for (int r = 0; r < M; r++) {
        const int8_t* xr = xq + static_cast<size_t>(r) * j.k + (BITS == 4 ? 2 * at : at);
        const float* drr = dr + static_cast<size_t>(r) * q.bp;
        const float* srr = sr + static_cast<size_t>(r) * q.bp;
        const float d0 = drr[b], d1 = two ? drr[b + 1] : d0;
        const __m256 bv = _mm256_setr_ps(c0, c1, 0, 0, 0, 0, 0, 0);
        const __m256 ds = _mm256_setr_ps(srr[b], two ? srr[b + 1] : 0.0f, 0, 0, 0, 0, 0, 0);
        if constexpr (BITS == 4) {
          const __m256i x0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xr));
          __m256i p16 = _mm256_maddubs_epi16(wl[0], x0);
          __m256 sv = _mm256_set1_ps(s0), d = _mm256_set1_ps(d0);
          if (two) {
            const __m256i x1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xr + 32));
            p16 = _mm256_add_epi16(p16, _mm256_maddubs_epi16(wl[1], x1));
            sv = _mm256_setr_ps(s0, s0, s0, s0, s1, s1, s1, s1);
            d = _mm256_setr_ps(d0, d0, d0, d0, d1, d1, d1, d1);
          }
          acc[i][r] = pka_lanes(acc[i][r], _mm256_madd_epi16(p16, ones), sv, d, bv, ds);
        } else {
          const __m256i x0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xr));
          acc[i][r] = pka_lanes(acc[i][r], pka_dot8(wl[0], x0), _mm256_set1_ps(s0), _mm256_set1_ps(d0), bv, ds);
          if (two) {
            const __m256i x1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xr + 32));
            acc[i][r] = pka_lanes(acc[i][r], pka_dot8(wl[1], x1), _mm256_set1_ps(s1), _mm256_set1_ps(d1),
                                  _mm256_setzero_ps(), _mm256_setzero_ps());
          }
        }
      }
    }
    b += nb;
  }
  for (int i = 0; i < NW; i++) {
    for (int r = 0; r < M; r++) {
      j.out[static_cast<size_t>(r0 + r) * j.n + n + i] = hsum(acc[i][r], _mm256_setzero_ps());
    }
  }
}

// pka_rows is pk_rows without VNNI: outputs [n0, n1) for every activation
// row, pairs of outputs by up to four rows, rows in blocks of 32.
template <typename S, int BITS>
PROVIDER_AVX2 void pka_rows(const PJob& j, const PQ8& q, int n0, int n1) {
  const size_t rb = static_cast<size_t>(j.k) * BITS / 8;
  const int blocks = j.k / 32;
  for (int rb0 = 0; rb0 < j.m; rb0 += 32) {
    const int rb1 = std::min(j.m, rb0 + 32);
    for (int n = n0; n < n1; n += 2) {
      const int nw = std::min(2, n1 - n);
      if (rb0 == 0 && n + nw < n1) {
        prefetch_outputs<S>(j.w, j.scales, j.biases, rb, blocks, n + nw, std::min(2, n1 - n - nw));
      }
      for (int r0 = rb0; r0 < rb1; r0 += 4) {
        by_shape(std::min(4, rb1 - r0), nw, [&]<int M, int NW>() { pka_tile<S, BITS, M, NW>(j, q, r0, n); });
      }
    }
  }
}

#endif  // PROVIDER_X86

// packed_ok reports whether the packed kernel can take weights of k
// inputs at bits on this processor (pk_rows with VNNI, else pka_rows).
bool packed_ok(int k, int bits) {
#if PROVIDER_X86
  return int8_isa() && (bits == 4 || bits == 8) && k > 0 && k % 32 == 0;
#else
  (void)k;
  (void)bits;
  return false;
#endif
}

// run_packed runs a packed job over the pool (the caller checked
// packed_ok).
template <typename S>
void run_packed(const PJob& j) {
#if PROVIDER_X86
  PQ8 q;
  q.bp = (j.k / 32 + 15) / 16 * 16;
  q.xq.resize(static_cast<size_t>(j.m) * j.k);
  q.d.resize(static_cast<size_t>(j.m) * q.bp);
  q.dsx.resize(static_cast<size_t>(j.m) * q.bp);
  const int prep = std::max(1, std::min(j.m, Pool::get().threads() * 4));
  const int per = (j.m + prep - 1) / prep;
  const bool vnni = have_vnni();
  Pool::get().run(prep, [&](int t) {
    const int r0 = t * per, r1 = std::min(j.m, (t + 1) * per);
    vnni ? pq8_prepare512(j, q, r0, r1) : pq8_prepare(j, q, r0, r1);
  });
  // Outputs in pairs (or fours); a task's tiles prefetch the next tile's.
  const int chunk = streamed_chunk(j.n, 2);
  const int tasks = (j.n + chunk - 1) / chunk;
  Pool::get().run(tasks, [&](int t) {
    const int n0 = t * chunk;
    const int n1 = std::min(j.n, n0 + chunk);
    if (vnni) {
      j.bits == 4 ? pk_rows<S, 4>(j, q, n0, n1) : pk_rows<S, 8>(j, q, n0, n1);
    } else {
      j.bits == 4 ? pka_rows<S, 4>(j, q, n0, n1) : pka_rows<S, 8>(j, q, n0, n1);
    }
  });
#else
  (void)j;
#endif
}

// packed_embed dequantizes packed rows ids[0..count) into out ([count, k])
// the way MLX's dequantize does: s * q + b in the scales' type.
template <typename S>
void packed_embed(const int32_t* ids, size_t count, int rows, const uint8_t* w, const S* sc, const S* bi, int k,
                  int bits, S* out) {
  const size_t rb = static_cast<size_t>(k) * bits / 8;
  const int blocks = k / 32;
  const PackedIndex& ix = packed_index(k, bits);
  const size_t* byte = ix.byte.data();
  const int* shift = ix.shift.data();
  const uint32_t mask = (1u << bits) - 1;
  for (size_t t = 0; t < count; t++) {
    const int id = ids[t];
    S* o = out + t * k;
    if (id < 0 || id >= rows) {
      // Callers check ids first; a bad one reads as zeros, never out of
      // bounds (this runs on the stream's worker, which cannot throw).
      std::fill(o, o + k, static_cast<S>(0.0f));
      continue;
    }
    const uint8_t* row = w + static_cast<size_t>(id) * rb;
    const S* s = sc + static_cast<size_t>(id) * blocks;
    const S* b = bi + static_cast<size_t>(id) * blocks;
    for (int e = 0; e < k; e++) {
      const S q = static_cast<S>(static_cast<float>((row[byte[e]] >> shift[e]) & mask));
      o[e] = s[e / 32] * q + b[e / 32];
    }
  }
}


// ---------------------------------------------------------------------------
// Small fused ops. MLX's CPU backend evaluates fast::rms_norm, fast::rope
// and fast::scaled_dot_product_attention as graphs of a dozen generic ops
// each; at decode sizes each op costs more in dispatch than in arithmetic,
// and a step of a 30-layer model spends most of its time there. These run
// each as one primitive. Every output element is computed in an order that
// does not depend on the batch, so batching stays invariant.

// View4 reads a 4-D float32 array through its strides (slices of a KV
// buffer and transposed projections arrive as views; copying them first
// would cost what the kernel saves).
struct View4 {
  const float* p;
  int64_t s0, s1, s2, s3;
  const float& at(int a, int b, int c, int d) const {
    return p[a * s0 + b * s1 + c * s2 + d * s3];
  }
};

View4 view4(const mx::array& a) {
  const auto& st = a.strides();
  return View4{a.data<float>(), static_cast<int64_t>(st[0]), static_cast<int64_t>(st[1]), static_cast<int64_t>(st[2]),
               static_cast<int64_t>(st[3])};
}

#if PROVIDER_X86
// dot_avx2 is dot with its eight lanes in one register: the same products,
// sums and reduction, so the same float.
PROVIDER_AVX2 float dot_avx2(const float* a, const float* b, int n) {
  __m256 acc = _mm256_setzero_ps();
  int i = 0;
  for (; i + 8 <= n; i += 8) {
    acc = _mm256_add_ps(acc, _mm256_mul_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i)));
  }
  alignas(32) float l[8];
  _mm256_store_ps(l, acc);
  float s = ((l[0] + l[4]) + (l[2] + l[6])) + ((l[1] + l[5]) + (l[3] + l[7]));
  for (; i < n; i++) {
    s += a[i] * b[i];
  }
  return s;
}

// axpy_avx2 is acc[d] += p * v[d], a product then a sum per element as in
// the plain loop.
PROVIDER_AVX2 void axpy_avx2(float* acc, float p, const float* v, int n) {
  const __m256 pp = _mm256_set1_ps(p);
  int d = 0;
  for (; d + 8 <= n; d += 8) {
    _mm256_storeu_ps(acc + d, _mm256_add_ps(_mm256_loadu_ps(acc + d), _mm256_mul_ps(pp, _mm256_loadu_ps(v + d))));
  }
  for (; d < n; d++) {
    acc[d] += p * v[d];
  }
}
#endif

#if PROVIDER_X86
// hsum8 is dot_avx2's final sum of its eight lanes.
PROVIDER_AVX2 inline float hsum8(__m256 acc) {
  alignas(32) float l[8];
  _mm256_store_ps(l, acc);
  return ((l[0] + l[4]) + (l[2] + l[6])) + ((l[1] + l[5]) + (l[3] + l[7]));
}

// scores_avx2 is sc[j*n + x] = dot_avx2(q + j*D, kpool + at[x], D) for
// heads j < hpt and keys x < n, four keys at a time: four independent sums,
// each in dot_avx2's order, so the floats are the same. D % 8 == 0.
PROVIDER_AVX2 void scores_avx2(const float* q, int hpt, int D, const float* kpool, const size_t* at, int n, float* sc) {
  int x = 0;
  for (; x + 4 <= n; x += 4) {
    const float *k0 = kpool + at[x], *k1 = kpool + at[x + 1], *k2 = kpool + at[x + 2], *k3 = kpool + at[x + 3];
    for (int j = 0; j < hpt; j++) {
      const float* qj = q + static_cast<size_t>(j) * D;
      __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps(), a2 = _mm256_setzero_ps(), a3 = _mm256_setzero_ps();
      for (int i = 0; i < D; i += 8) {
        const __m256 qq = _mm256_loadu_ps(qj + i);
        a0 = _mm256_add_ps(a0, _mm256_mul_ps(qq, _mm256_loadu_ps(k0 + i)));
        a1 = _mm256_add_ps(a1, _mm256_mul_ps(qq, _mm256_loadu_ps(k1 + i)));
        a2 = _mm256_add_ps(a2, _mm256_mul_ps(qq, _mm256_loadu_ps(k2 + i)));
        a3 = _mm256_add_ps(a3, _mm256_mul_ps(qq, _mm256_loadu_ps(k3 + i)));
      }
      float* s = sc + static_cast<size_t>(j) * n + x;
      s[0] = hsum8(a0);
      s[1] = hsum8(a1);
      s[2] = hsum8(a2);
      s[3] = hsum8(a3);
    }
  }
  for (; x < n; x++) {
    for (int j = 0; j < hpt; j++) {
      sc[static_cast<size_t>(j) * n + x] = dot_avx2(q + static_cast<size_t>(j) * D, kpool + at[x], D);
    }
  }
}

// accumulate_avx2 is, for heads j < hpt, acc[j*D + d] += sc[j*n + x] *
// v_x[d] for the keys x in order (axpy_avx2's arithmetic, so the same
// floats), each 64 floats of a head's sum held in registers across the
// keys instead of loaded and stored per key. D % 64 == 0.
PROVIDER_AVX2 void accumulate_avx2(float* acc, int hpt, int D, const float* vpool, const size_t* at, int n,
                                   const float* sc) {
  for (int j = 0; j < hpt; j++) {
    const float* scj = sc + static_cast<size_t>(j) * n;
    for (int c = 0; c < D; c += 64) {
      float* aj = acc + static_cast<size_t>(j) * D + c;
      __m256 r0 = _mm256_loadu_ps(aj), r1 = _mm256_loadu_ps(aj + 8), r2 = _mm256_loadu_ps(aj + 16),
             r3 = _mm256_loadu_ps(aj + 24), r4 = _mm256_loadu_ps(aj + 32), r5 = _mm256_loadu_ps(aj + 40),
             r6 = _mm256_loadu_ps(aj + 48), r7 = _mm256_loadu_ps(aj + 56);
      for (int x = 0; x < n; x++) {
        const __m256 pp = _mm256_set1_ps(scj[x]);
        const float* v = vpool + at[x] + c;
        r0 = _mm256_add_ps(r0, _mm256_mul_ps(pp, _mm256_loadu_ps(v)));
        r1 = _mm256_add_ps(r1, _mm256_mul_ps(pp, _mm256_loadu_ps(v + 8)));
        r2 = _mm256_add_ps(r2, _mm256_mul_ps(pp, _mm256_loadu_ps(v + 16)));
        r3 = _mm256_add_ps(r3, _mm256_mul_ps(pp, _mm256_loadu_ps(v + 24)));
        r4 = _mm256_add_ps(r4, _mm256_mul_ps(pp, _mm256_loadu_ps(v + 32)));
        r5 = _mm256_add_ps(r5, _mm256_mul_ps(pp, _mm256_loadu_ps(v + 40)));
        r6 = _mm256_add_ps(r6, _mm256_mul_ps(pp, _mm256_loadu_ps(v + 48)));
        r7 = _mm256_add_ps(r7, _mm256_mul_ps(pp, _mm256_loadu_ps(v + 56)));
      }
      _mm256_storeu_ps(aj, r0);
      _mm256_storeu_ps(aj + 8, r1);
      _mm256_storeu_ps(aj + 16, r2);
      _mm256_storeu_ps(aj + 24, r3);
      _mm256_storeu_ps(aj + 32, r4);
      _mm256_storeu_ps(aj + 40, r5);
      _mm256_storeu_ps(aj + 48, r6);
      _mm256_storeu_ps(aj + 56, r7);
    }
  }
}
#endif

// axpy is acc[d] += p * v[d*stride].
inline void axpy(float* acc, float p, const float* v, int64_t stride, int n) {
#if PROVIDER_X86
  if (stride == 1 && have_avx2()) {
    axpy_avx2(acc, p, v, n);
    return;
  }
#endif
  for (int d = 0; d < n; d++) {
    acc[d] += p * v[d * stride];
  }
}

float dot(const float* a, const float* b, int n) {
#if PROVIDER_X86
  if (have_avx2()) {
    return dot_avx2(a, b, n);
  }
#endif
  float acc[8] = {};
  int i = 0;
  for (; i + 8 <= n; i += 8) {
    for (int l = 0; l < 8; l++) {
      acc[l] += a[i + l] * b[i + l];
    }
  }
  float s = ((acc[0] + acc[4]) + (acc[2] + acc[6])) + ((acc[1] + acc[5]) + (acc[3] + acc[7]));
  for (; i < n; i++) {
    s += a[i] * b[i];
  }
  return s;
}

// scores is sc[j*n + x] = dot(q + j*D, kpool + at[x], D) for heads j < hpt
// and keys x < n.
void scores(const float* q, int hpt, int D, const float* kpool, const size_t* at, int n, float* sc) {
#if PROVIDER_X86
  if (have_avx2() && D % 8 == 0) {
    scores_avx2(q, hpt, D, kpool, at, n, sc);
    return;
  }
#endif
  for (int x = 0; x < n; x++) {
    for (int j = 0; j < hpt; j++) {
      sc[static_cast<size_t>(j) * n + x] = dot(q + static_cast<size_t>(j) * D, kpool + at[x], D);
    }
  }
}

// accumulate is, for heads j < hpt, acc[j*D + d] += sc[j*n + x] * v_x[d]
// for the keys x < n in order, v_x at vpool + at[x].
void accumulate(float* acc, int hpt, int D, const float* vpool, const size_t* at, int n, const float* sc) {
#if PROVIDER_X86
  if (have_avx2() && D % 64 == 0) {
    accumulate_avx2(acc, hpt, D, vpool, at, n, sc);
    return;
  }
#endif
  for (int x = 0; x < n; x++) {
    for (int j = 0; j < hpt; j++) {
      axpy(acc + static_cast<size_t>(j) * D, sc[static_cast<size_t>(j) * n + x], vpool + at[x], 1, D);
    }
  }
}

#if PROVIDER_X86
// exp512 is exp of 16 floats: a degree-6 polynomial, within 2 ulp.
PROVIDER_AVX512 inline __m512 exp512(__m512 x) {
  x = _mm512_min_ps(_mm512_max_ps(x, _mm512_set1_ps(-88.0f)), _mm512_set1_ps(88.0f));
  const __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)),
                                        _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693359375f), x);
  r = _mm512_fnmadd_ps(n, _mm512_set1_ps(-2.12194440e-4f), r);
  __m512 p = _mm512_set1_ps(1.9875691500e-4f);
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.3981999507e-3f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(8.3334519073e-3f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(4.1665795894e-2f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.6666665459e-1f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(5.0000001201e-1f));
  const __m512 y = _mm512_add_ps(_mm512_fmadd_ps(p, _mm512_mul_ps(r, r), r), _mm512_set1_ps(1.0f));
  return _mm512_scalef_ps(y, n);
}

PROVIDER_AVX512 void swiglu512(const float* g, const float* u, size_t i0, size_t i1, float* out) {
  const __m512 one = _mm512_set1_ps(1.0f);
  for (size_t i = i0; i < i1; i += 16) {
    const __mmask16 m = i1 - i >= 16 ? 0xFFFF : static_cast<__mmask16>((1u << (i1 - i)) - 1);
    const __m512 gv = _mm512_maskz_loadu_ps(m, g + i);
    const __m512 uv = _mm512_maskz_loadu_ps(m, u + i);
    const __m512 e = exp512(_mm512_sub_ps(_mm512_setzero_ps(), gv));
    _mm512_mask_storeu_ps(out + i, m, _mm512_mul_ps(_mm512_div_ps(gv, _mm512_add_ps(one, e)), uv));
  }
}
#endif

// exp_sum replaces s[0..n) by exp(s[x] - m) and returns their sum: with
// AVX-512, 16 lanes at a time (exp512, masked tail, lane sums reduced in a
// fixed order), else the C library's exp in order. The result depends only
// on s and m.
#if PROVIDER_X86
PROVIDER_AVX512 float exp_sum512(float* s, int n, float m) {
  const __m512 mv = _mm512_set1_ps(m);
  __m512 acc = _mm512_setzero_ps();
  for (int x = 0; x < n; x += 16) {
    const __mmask16 k = n - x >= 16 ? 0xFFFF : static_cast<__mmask16>((1u << (n - x)) - 1);
    const __m512 e = exp512(_mm512_sub_ps(_mm512_maskz_loadu_ps(k, s + x), mv));
    _mm512_mask_storeu_ps(s + x, k, e);
    acc = _mm512_add_ps(acc, _mm512_maskz_mov_ps(k, e));
  }
  return hsum512(acc);
}
#endif

float exp_sum(float* s, int n, float m) {
#if PROVIDER_X86
  if (have_avx512()) {
    return exp_sum512(s, n, m);
  }
#endif
  float sum = 0;
  for (int x = 0; x < n; x++) {
    s[x] = std::exp(s[x] - m);
    sum += s[x];
  }
  return sum;
}

// swiglu_range computes out[i] = g[i] / (1 + exp(-g[i])) * u[i] for i in
// [i0, i1): with AVX-512, every element by the same masked vector code, so
// an element's value depends on its inputs only; else with the C
// library's exp.
void swiglu_range(const float* g, const float* u, size_t i0, size_t i1, float* out) {
#if PROVIDER_X86
  if (have_avx512()) {
    swiglu512(g, u, i0, i1, out);
    return;
  }
#endif
  for (size_t i = i0; i < i1; i++) {
    out[i] = g[i] / (1.0f + std::exp(-g[i])) * u[i];
  }
}

void rms_norm_rows(const float* x, const float* w, size_t rows, int n, float eps, float* out) {
  for (size_t r = 0; r < rows; r++) {
    const float* xr = x + r * n;
    float* o = out + r * n;
    const float inv = 1.0f / std::sqrt(dot(xr, xr, n) / static_cast<float>(n) + eps);
    for (int i = 0; i < n; i++) {
      o[i] = w != nullptr ? (xr[i] * inv) * w[i] : xr[i] * inv;
    }
  }
}

// rope_rows rotates x [B, H, T, D] (any strides) into out (contiguous):
// position of (b, t) is (offsets ? offsets[b] : offset) + t, times scale;
// pair i turns by position * inv_freq[i].
void rope_rows(const View4& x, int B, int H, int T, int D, const int32_t* offsets, int offset, float scale,
               const std::vector<double>& inv_freq, int dims, bool traditional, float* out) {
  const int half = dims / 2;
  std::vector<float> c(half), sn(half);
  for (int b = 0; b < B; b++) {
    for (int t = 0; t < T; t++) {
      // Angles in double: the float32 product of a large position and a
      // frequency is off by up to half a unit in its last place, which at
      // hundreds of radians is ~1e-5 rad, and Gemma's wide residual
      // stream turns that into visible logit error.
      const double pos = static_cast<double>((offsets != nullptr ? offsets[b] : offset) + t) * scale;
      for (int i = 0; i < half; i++) {
        const double theta = pos * inv_freq[i];
        c[i] = static_cast<float>(std::cos(theta));
        sn[i] = static_cast<float>(std::sin(theta));
      }
      for (int h = 0; h < H; h++) {
        float* o = out + ((static_cast<size_t>(b) * H + h) * T + t) * D;
        for (int i = 0; i < half; i++) {
          const int i1 = traditional ? 2 * i : i;
          const int i2 = traditional ? 2 * i + 1 : i + half;
          const float x1 = x.at(b, h, t, i1), x2 = x.at(b, h, t, i2);
          o[i1] = x1 * c[i] - x2 * sn[i];
          o[i2] = x1 * sn[i] + x2 * c[i];
        }
        for (int d = dims; d < D; d++) {
          o[d] = x.at(b, h, t, d);
        }
      }
    }
  }
}

// softmax_attend writes to o (D floats) the sum over positions s in [lo, hi]
// of softmax(score(s)) times the value row at value(s) (element d at
// value(s)[d * vstride]); sink, when not null, joins the softmax's
// denominator as one more logit. sc holds hi-lo+1 floats, acc D. Both
// attention kernels use it, so every query sums in the same order.
template <typename Score, typename Value>
inline void softmax_attend(int lo, int hi, int D, const float* sink, Score score, Value value, int64_t vstride,
                           float* sc, float* acc, float* o) {
  float m = sink != nullptr ? *sink : -INFINITY;
  for (int s = lo; s <= hi; s++) {
    sc[s - lo] = score(s);
    m = std::max(m, sc[s - lo]);
  }
  const float sum = (sink != nullptr ? std::exp(*sink - m) : 0.0f) + exp_sum(sc, hi - lo + 1, m);
  std::fill(acc, acc + D, 0.0f);
  for (int s = lo; s <= hi; s++) {
    axpy(acc, sc[s - lo], value(s), vstride, D);
  }
  const float inv = 1.0f / sum;
  for (int d = 0; d < D; d++) {
    o[d] = acc[d] * inv;
  }
}

// run_tasks runs task(0..tasks-1) on the calling thread when the work (in
// multiply-adds) is too small to be worth the pool, else across it.
template <typename F>
void run_tasks(int tasks, size_t work, F task) {
  if (work < (1u << 18)) {
    for (int i = 0; i < tasks; i++) {
      task(i);
    }
  } else {
    Pool::get().run(tasks, task);
  }
}

// attend computes softmax(scale * q.k) v for q [B, H, T, D] against k, v
// [B, KVH, S, D]: query t sits at position S-T+t and, when causal, sees keys
// up to it; sinks (one logit per head, may be null) join the denominator.
void attend(const View4& q, const View4& k, const View4& v, int B, int H, int KVH, int T, int S, int D, float scale,
            bool causal, const float* sinks, float* out) {
  const int rep = H / KVH;
  const int tasks = B * H;
  run_tasks(tasks, static_cast<size_t>(tasks) * T * S * D, [&](int i) {
    const int b = i / H, h = i % H, kh = h / rep;
    thread_local std::vector<float> sc, qv, acc;
    sc.resize(S);
    qv.resize(D);
    acc.resize(D);
    const bool kd = k.s3 == 1;
    auto score = [&](int s) {
      if (kd) {
        return dot(qv.data(), &k.at(b, kh, s, 0), D);
      }
      float d_ = 0;
      for (int d = 0; d < D; d++) {
        d_ += qv[d] * k.at(b, kh, s, d);
      }
      return d_;
    };
    for (int t = 0; t < T; t++) {
      for (int d = 0; d < D; d++) {
        qv[d] = q.at(b, h, t, d) * scale;
      }
      softmax_attend(0, causal ? S - T + t : S - 1, D, sinks != nullptr ? sinks + h : nullptr, score,
                     [&](int s) { return &v.at(b, kh, s, 0); }, v.s3, sc.data(), acc.data(),
                     out + ((static_cast<size_t>(b) * H + h) * T + t) * D);
    }
  });
}

// paged_attend writes the step's new keys and values into the pools, then
// computes softmax(scale * q.k) v for every query token i of the step
// against the keys of its own row. meta[i] = (row, position, last): the
// row's keys live in the pools at slot table[row][pos / block] * block +
// pos % block, and the query at position p sees positions max(0, p -
// window + 1) .. last (0 .. last when window is 0); last is p for causal
// attention and the end of its span for a token of a bidirectional span. Every token's write precedes every read, so
// a prefill chunk sees its own earlier tokens. Each output is computed in one
// fixed order whatever the rest of the step holds.
struct Paged {
  const float* q;  // [N, H, D]
  const float *knew, *vnew;  // [N, KVH, D] or null: nothing to write
  float *kpool, *vpool;  // [slots, KVH, D]
  const int32_t* slots;  // [N] write slots
  const int32_t* table;  // [R, MB]
  const int32_t* meta;   // [N, 3]
  const float* sinks;    // [H] or null
  int N, H, KVH, D, MB, block, window;
  float scale;
};

// key_offsets writes at[s - lo], for positions s in [lo, hi] of a row with
// block table tab, the offset of key-value head kh's elements in the
// pools: a block's run at a time (a division per position cost more than
// the attention itself).
void key_offsets(const Paged& a, const int32_t* tab, int kh, int lo, int hi, size_t* at) {
  const size_t row = static_cast<size_t>(a.KVH) * a.D;
  for (int s = lo; s <= hi;) {
    const int blk = s / a.block, off = s - blk * a.block;
    const int run = std::min(a.block - off, hi - s + 1);
    size_t o = (static_cast<size_t>(tab[blk]) * a.block + off) * row + static_cast<size_t>(kh) * a.D;
    for (int x = 0; x < run; x++, o += row) {
      at[s - lo + x] = o;
    }
    s += run;
  }
}

#if PROVIDER_X86
// PTile is one unit of paged_attend's AVX-512 path: the query heads of
// key-value head kh for tokens i0 .. i0+T-1 (one row, consecutive
// positions), one query (token, head) to a lane, L = T * rep <= 16 lanes.
// Keys go in groups of 16 aligned to their positions (the joint range
// widened to multiples of 16; keys outside a lane's range are computed
// and ignored). Its phases: scores take every group once for all lanes,
// lane l's score for a key 16 chains of D/16 fused multiply-adds (one per
// element mod 16) reduced by one fixed network, in which a key's slot is
// its position mod 16; then per lane, 16 keys at a time, the maximum (from
// the sink's logit, if any), the exponentials, and their sum: 16 running
// sums by position mod 16 over the lane's own keys in order, reduced in a
// fixed order, plus the sink's term; then per lane and 16 elements, the
// values' weighted sum over its keys in order. A query's floats are
// therefore the same whichever tokens share its tile and however the
// phases are split among threads (by whole groups): alone, in a decode
// batch or inside a prefill chunk.
struct PTile {
  const Paged* a;
  int i0, L, kh, rep, klo, n;
  int lo[16], hi[16];
  float sums[16];
  std::vector<float> qt, sc, acc;  // [L][D], [L][n], [L][D]
  std::vector<size_t> at;          // [n] key and value offsets

  PROVIDER_AVX512 void setup(const Paged& pa, int first, int T, int head) {
    a = &pa;
    i0 = first;
    kh = head;
    rep = pa.H / pa.KVH;
    L = T * rep;
    const int D = pa.D;
    int khi = -1, kmin = INT32_MAX;
    for (int l = 0; l < L; l++) {
      const int i = i0 + l / rep, p = pa.meta[3 * i + 1];
      lo[l] = pa.window > 0 ? std::max(0, p - pa.window + 1) : 0;
      hi[l] = pa.meta[3 * i + 2];
      kmin = std::min(kmin, lo[l]);
      khi = std::max(khi, hi[l]);
    }
    klo = kmin & ~15;
    n = (khi - klo + 16) & ~15;
    qt.resize(static_cast<size_t>(L) * D);
    sc.resize(static_cast<size_t>(L) * n);
    at.resize(n);
    acc.assign(static_cast<size_t>(L) * D, 0.0f);
    for (int l = 0; l < L; l++) {
      const float* qi = pa.q + (static_cast<size_t>(i0 + l / rep) * pa.H + kh * rep + l % rep) * D;
      for (int d = 0; d < D; d++) {
        qt[static_cast<size_t>(l) * D + d] = qi[d] * pa.scale;
      }
    }
    key_offsets(pa, pa.table + static_cast<size_t>(pa.meta[3 * i0]) * pa.MB, kh, kmin, khi, at.data() + (kmin - klo));
    // The widening's keys have no slot of their own: they read a valid one.
    std::fill(at.begin(), at.begin() + (kmin - klo), at[kmin - klo]);
    std::fill(at.begin() + (khi - klo + 1), at.end(), at[kmin - klo]);
  }

  // sum16 reduces 16 vectors to one: lane m the sum of v[slot[m]]'s lanes,
  // two shuffles and an add per output vector at each of four levels.
  static constexpr int slot[16] = {0, 2, 1, 3, 8, 10, 9, 11, 4, 6, 5, 7, 12, 14, 13, 15};
  PROVIDER_AVX512 static __m512 sum16(const __m512* v) {
    __m512 w[8], z[4], u[2];
    #pragma GCC unroll 8
    for (int j = 0; j < 8; j++) {
      w[j] = _mm512_add_ps(_mm512_shuffle_f32x4(v[j], v[j + 8], 0x44), _mm512_shuffle_f32x4(v[j], v[j + 8], 0xEE));
    }
    #pragma GCC unroll 4
    for (int j = 0; j < 4; j++) {
      z[j] = _mm512_add_ps(_mm512_shuffle_f32x4(w[j], w[j + 4], 0x88), _mm512_shuffle_f32x4(w[j], w[j + 4], 0xDD));
    }
    #pragma GCC unroll 2
    for (int j = 0; j < 2; j++) {
      u[j] = _mm512_add_ps(_mm512_shuffle_ps(z[j], z[j + 2], 0x44), _mm512_shuffle_ps(z[j], z[j + 2], 0xEE));
    }
    return _mm512_add_ps(_mm512_shuffle_ps(u[0], u[1], 0x88), _mm512_shuffle_ps(u[0], u[1], 0xDD));
  }

  // group writes lanes' scores for the 16 keys at k (key m at k + m *
  // stride), NC = D / 16 chunks (0: D at run time). Key m's score is the
  // product of its first chunk, then a fused multiply-add of each further
  // chunk in order, then sum16; the loops' order changes none of it.
  template <int NC>
  PROVIDER_AVX512 void group(const float* k, size_t stride, int x) {
    const int D = NC > 0 ? NC * 16 : a->D;
    for (int l = 0; l < L; l++) {
      const float* q = qt.data() + static_cast<size_t>(l) * D;
      __m512 v[16];
      if constexpr (NC > 0) {
        __m512 qc[NC];
        #pragma GCC unroll 16
        for (int c = 0; c < NC; c++) {
          qc[c] = _mm512_loadu_ps(q + 16 * c);
        }
        const float* p = k;
        #pragma GCC unroll 16
        for (int m = 0; m < 16; m++, p += stride) {
          __m512 s = _mm512_mul_ps(qc[0], _mm512_loadu_ps(p));
          #pragma GCC unroll 16
          for (int c = 1; c < NC; c++) {
            s = _mm512_fmadd_ps(qc[c], _mm512_loadu_ps(p + 16 * c), s);
          }
          v[slot[m]] = s;
        }
      } else {
        const __m512 q0 = _mm512_loadu_ps(q);
        const float* p = k;
        #pragma GCC unroll 16
        for (int m = 0; m < 16; m++, p += stride) {
          v[slot[m]] = _mm512_mul_ps(q0, _mm512_loadu_ps(p));
        }
        for (int c = 16; c < D; c += 16) {
          const __m512 qc = _mm512_loadu_ps(q + c);
          p = k + c;
          #pragma GCC unroll 16
          for (int m = 0; m < 16; m++, p += stride) {
            v[slot[m]] = _mm512_fmadd_ps(qc, _mm512_loadu_ps(p), v[slot[m]]);
          }
        }
      }
      _mm512_storeu_ps(sc.data() + static_cast<size_t>(l) * n + x, sum16(v));
    }
  }

  // scores computes keys [x0, x1) (multiples of 16) of the joint range for
  // every lane, a group of 16 keys at a time: each key's elements are read
  // once from the pool (or a copy, where the group is not 16 consecutive
  // slots) and stay in the first-level cache for the other lanes.
  PROVIDER_AVX512 void scores(int x0, int x1) {
    const int D = a->D;
    const size_t row = static_cast<size_t>(a->KVH) * D;
    thread_local std::vector<float> copy;
    for (int x = x0; x < x1; x += 16) {
      const float* k = a->kpool + at[x];
      size_t stride = row;
      bool flat = true;
      for (int m = 1; m < 16; m++) {
        flat &= at[x + m] == at[x] + m * row;
      }
      if (!flat) {
        copy.resize(static_cast<size_t>(16) * D);
        for (int m = 0; m < 16; m++) {
          std::memcpy(copy.data() + static_cast<size_t>(m) * D, a->kpool + at[x + m], D * sizeof(float));
        }
        k = copy.data();
        stride = D;
      }
      switch (D) {
        case 64: group<4>(k, stride, x); break;
        case 128: group<8>(k, stride, x); break;
        default: group<0>(k, stride, x);
      }
    }
  }

  // softmax turns every lane's scores over its own keys into exponentials
  // (in place; a lane's entries outside its range but in its groups become
  // 0) and records their sums, 16 keys at a time: a pass for the lane's
  // maximum (from the sink's logit, if any), then a pass that
  // exponentiates and adds each key to the running sum of its position
  // mod 16. Lane l's sum is thus the sink's term plus the fixed reduction
  // of 16 chains over its own keys in order, whatever the other lanes hold.
  PROVIDER_AVX512 void softmax() {
    for (int l = 0; l < L; l++) {
      float* S = sc.data() + static_cast<size_t>(l) * n;
      const int y0 = lo[l] - klo, y1 = hi[l] - klo, g0 = y0 & ~15, g1 = y1 & ~15;
      const float sink = a->sinks != nullptr ? a->sinks[kh * rep + l % rep] : -INFINITY;
      auto within = [&](int g) {
        __mmask16 k = 0xFFFF;
        if (g == g0) {
          k &= static_cast<__mmask16>(0xFFFFu << (y0 - g));
        }
        if (g == g1) {
          k &= static_cast<__mmask16>(0xFFFFu >> (15 - (y1 - g)));
        }
        return k;
      };
      // The maximum is exact whatever the order: two chains, for latency.
      __m512 m2[2] = {_mm512_set1_ps(sink), _mm512_set1_ps(sink)};
      for (int g = g0; g <= g1; g += 16) {
        const int c = (g >> 4) & 1;
        m2[c] = _mm512_mask_max_ps(m2[c], within(g), m2[c], _mm512_loadu_ps(S + g));
      }
      const float mx = _mm512_reduce_max_ps(_mm512_max_ps(m2[0], m2[1]));
      const __m512 m = _mm512_set1_ps(mx);
      __m512 sum = _mm512_setzero_ps();
      for (int g = g0; g <= g1; g += 16) {
        const __mmask16 k = within(g);
        const __m512 e = _mm512_maskz_mov_ps(k, exp512(_mm512_maskz_sub_ps(k, _mm512_loadu_ps(S + g), m)));
        _mm512_storeu_ps(S + g, e);
        sum = _mm512_add_ps(sum, e);
      }
      sums[l] = (a->sinks != nullptr ? std::exp(sink - mx) : 0.0f) + hsum512(sum);
    }
  }

  // values adds, for lane l and elements [d0, d0 + 16*G) (G <= 8 chunks
  // of 16, each its own chain), the weighted values of its keys in [b0,
  // b1] (in order) to its accumulator.
  PROVIDER_AVX512 void values(int l, int d0, int G, int b0, int b1) {
    const int y0 = std::max(b0, lo[l] - klo), y1 = std::min(b1, hi[l] - klo);
    float* A = acc.data() + static_cast<size_t>(l) * a->D + d0;
    const float* S = sc.data() + static_cast<size_t>(l) * n;
    __m512 av[8];
    for (int g = 0; g < G; g++) {
      av[g] = _mm512_loadu_ps(A + 16 * g);
    }
    for (int y = y0; y <= y1; y++) {
      const __m512 w = _mm512_set1_ps(S[y]);
      const float* v = a->vpool + at[y] + d0;
      switch (G) {
        case 8: av[7] = _mm512_fmadd_ps(w, _mm512_loadu_ps(v + 112), av[7]); [[fallthrough]];
        case 7: av[6] = _mm512_fmadd_ps(w, _mm512_loadu_ps(v + 96), av[6]); [[fallthrough]];
        case 6: av[5] = _mm512_fmadd_ps(w, _mm512_loadu_ps(v + 80), av[5]); [[fallthrough]];
        case 5: av[4] = _mm512_fmadd_ps(w, _mm512_loadu_ps(v + 64), av[4]); [[fallthrough]];
        case 4: av[3] = _mm512_fmadd_ps(w, _mm512_loadu_ps(v + 48), av[3]); [[fallthrough]];
        case 3: av[2] = _mm512_fmadd_ps(w, _mm512_loadu_ps(v + 32), av[2]); [[fallthrough]];
        case 2: av[1] = _mm512_fmadd_ps(w, _mm512_loadu_ps(v + 16), av[1]); [[fallthrough]];
        default: av[0] = _mm512_fmadd_ps(w, _mm512_loadu_ps(v), av[0]);
      }
    }
    for (int g = 0; g < G; g++) {
      _mm512_storeu_ps(A + 16 * g, av[g]);
    }
  }

  // finish writes lane l's elements [d0, d0+16): its sum over the
  // exponentials' sum.
  PROVIDER_AVX512 void finish(int l, int d0, float* out) {
    const float* A = acc.data() + static_cast<size_t>(l) * a->D + d0;
    float* o = out + (static_cast<size_t>(i0 + l / rep) * a->H + kh * rep + l % rep) * a->D + d0;
    _mm512_storeu_ps(o, _mm512_mul_ps(_mm512_loadu_ps(A), _mm512_set1_ps(1.0f / sums[l])));
  }

  // run is every phase in one thread: the values a block of keys at a
  // time for every lane, so that the block's value rows stay in the
  // first-level cache.
  PROVIDER_AVX512 void run(float* out) {
    scores(0, n);
    softmax();
    const int KB = 32;
    for (int b0 = 0; b0 < n; b0 += KB) {
      for (int l = 0; l < L; l++) {
        for (int d0 = 0; d0 < a->D; d0 += 128) {
          values(l, d0, std::min(8, (a->D - d0) / 16), b0, std::min(n - 1, b0 + KB - 1));
        }
      }
    }
    for (int l = 0; l < L; l++) {
      for (int d0 = 0; d0 < a->D; d0 += 16) {
        finish(l, d0, out);
      }
    }
  }
};
#endif

void paged_attend(const Paged& a, float* out) {
  const size_t row = static_cast<size_t>(a.KVH) * a.D;
  if (a.knew != nullptr) {
    for (int i = 0; i < a.N; i++) {
      const size_t at = static_cast<size_t>(a.slots[i]) * row;
      std::memcpy(a.kpool + at, a.knew + i * row, row * sizeof(float));
      std::memcpy(a.vpool + at, a.vnew + i * row, row * sizeof(float));
    }
  }
  const int rep = a.H / a.KVH;
  size_t work = 0;
  for (int i = 0; i < a.N; i++) {
    work += static_cast<size_t>(a.meta[3 * i + 2] + 1) * a.H * a.D;
  }
#if PROVIDER_X86
  if (have_avx512() && a.D % 16 == 0 && rep <= 16) {
    // Tiles of up to 16 / rep tokens of one row at consecutive positions.
    const int most = 16 / rep;
    thread_local std::vector<int> tiles;
    tiles.clear();
    for (int i = 0; i < a.N;) {
      int j = i + 1;
      while (j < a.N && j - i < most && a.meta[3 * j] == a.meta[3 * i] && a.meta[3 * j + 1] == a.meta[3 * (j - 1) + 1] + 1) {
        j++;
      }
      tiles.push_back(i);
      tiles.push_back(j - i);
      i = j;
    }
    const int count = static_cast<int>(tiles.size() / 2);
    const int* tl = tiles.data();
    const int units = count * a.KVH;
    if (units >= 2 * Pool::get().threads() || work < (1u << 18)) {
      // Enough units for the threads (or too little work to share): each
      // runs whole in one task.
      run_tasks(units, work, [&](int t) {
        thread_local PTile u;
        u.setup(a, tl[2 * (t / a.KVH)], tl[2 * (t / a.KVH) + 1], t % a.KVH);
        u.run(out);
      });
      return;
    }
    // Few units (a small decode batch at a long context): each phase split
    // across the threads, by keys, by tiles, then by lanes and elements.
    // (A thread_local named inside the tasks would be each worker's own:
    // they reach the caller's through this reference.)
    thread_local std::vector<PTile> held;
    std::vector<PTile>& us = held;
    us.resize(units);
    for (int t = 0; t < units; t++) {
      us[t].setup(a, tl[2 * (t / a.KVH)], tl[2 * (t / a.KVH) + 1], t % a.KVH);
    }
    const int KC = 256;
    std::vector<std::array<int, 3>> jobs;
    for (int t = 0; t < units; t++) {
      for (int x = 0; x < us[t].n; x += KC) {
        jobs.push_back({t, x, std::min(us[t].n, x + KC)});
      }
    }
    Pool::get().run(static_cast<int>(jobs.size()), [&](int q) { us[jobs[q][0]].scores(jobs[q][1], jobs[q][2]); });
    Pool::get().run(units, [&](int t) { us[t].softmax(); });
    jobs.clear();
    for (int t = 0; t < units; t++) {
      for (int l = 0; l < us[t].L; l++) {
        for (int d0 = 0; d0 < a.D; d0 += 128) {
          jobs.push_back({t, l, d0});
        }
      }
    }
    Pool::get().run(static_cast<int>(jobs.size()), [&](int q) {
      PTile& u = us[jobs[q][0]];
      const int l = jobs[q][1], d0 = jobs[q][2], G = std::min(8, (a.D - d0) / 16);
      u.values(l, d0, G, 0, u.n - 1);
      for (int g = 0; g < G; g++) {
        u.finish(l, d0 + 16 * g, out);
      }
    });
    return;
  }
#endif
  // A task is a token's query heads of one key-value head (they read each
  // key and value once, while it is hot), or a single head when that
  // leaves the threads too few tasks (a lone decode row). Every head's sums
  // run in one fixed order, so outputs do not depend on the grouping.
  const int hpt = a.N * a.KVH >= 4 * Pool::get().threads() ? rep : 1;
  const int per = rep / hpt;
  const int tasks = a.N * a.KVH * per;
  run_tasks(tasks, work, [&](int t) {
    const int i = t / (a.KVH * per), kh = t / per % a.KVH, h0 = kh * rep + t % per * hpt;
    const int r = a.meta[3 * i], p = a.meta[3 * i + 1], last = a.meta[3 * i + 2];
    const int lo = a.window > 0 ? std::max(0, p - a.window + 1) : 0;
    const int32_t* tab = a.table + static_cast<size_t>(r) * a.MB;
    const int n = last - lo + 1, D = a.D;
    thread_local std::vector<float> sc, qv, acc;
    thread_local std::vector<size_t> at;
    sc.resize(static_cast<size_t>(hpt) * n);
    at.resize(n);
    qv.resize(static_cast<size_t>(hpt) * D);
    acc.resize(static_cast<size_t>(hpt) * D);
    for (int j = 0; j < hpt; j++) {
      const float* qi = a.q + (static_cast<size_t>(i) * a.H + h0 + j) * D;
      for (int d = 0; d < D; d++) {
        qv[j * D + d] = qi[d] * a.scale;
      }
    }
    key_offsets(a, tab, kh, lo, last, at.data());
    scores(qv.data(), hpt, D, a.kpool, at.data(), n, sc.data());
    thread_local std::vector<float> inv;
    inv.resize(hpt);
    for (int j = 0; j < hpt; j++) {
      const float* sink = a.sinks != nullptr ? a.sinks + h0 + j : nullptr;
      float* scj = sc.data() + j * n;
      float m = sink != nullptr ? *sink : -INFINITY;
      for (int x = 0; x < n; x++) {
        m = std::max(m, scj[x]);
      }
      const float sum = (sink != nullptr ? std::exp(*sink - m) : 0.0f) + exp_sum(scj, n, m);
      inv[j] = 1.0f / sum;
    }
    std::fill(acc.begin(), acc.end(), 0.0f);
    accumulate(acc.data(), hpt, D, a.vpool, at.data(), n, sc.data());
    for (int j = 0; j < hpt; j++) {
      float* o = out + (static_cast<size_t>(i) * a.H + h0 + j) * D;
      for (int d = 0; d < D; d++) {
        o[d] = acc[j * D + d] * inv[j];
      }
    }
  });
}

// by_scale_type calls f with a value of the C++ type of scale dtype sd
// (float32, float16 or bfloat16).
template <typename F>
void by_scale_type(mx::Dtype sd, F&& f) {
  if (sd == mx::float32) {
    f(float{});
  } else if (sd == mx::float16) {
    f(mx::float16_t{});
  } else {
    f(mx::bfloat16_t{});
  }
}

bool on_cpu(const mx::Stream& s) {
  return s.device == mx::Device::cpu && !use_mlx_kernel();
}

}  // namespace

// rowc is a in row-contiguous layout on stream st, for data read directly
// after an eval: a itself when it is already evaluated that way (uploaded
// weights, host data); else a Contiguous of it. (HostOp's inputs need no
// such node: it copies a strided input densely when it runs.)
static mx::array rowc(const mx::array& a, const mx::Stream& st) {
  if (a.is_available() && a.flags().row_contiguous) {
    return a;
  }
  return mx::contiguous(a, false, st);
}

extern "C" {

int mlx_fast_cpu_rms_norm(mlx_array* res, const mlx_array x, const mlx_array weight, float eps, const mlx_stream s) {
  return guard([&] {
    const mx::Stream st = *static_cast<mx::Stream*>(s.ctx);
    const mx::array& xa = arr(x);
    const bool has_w = weight.ctx != nullptr;
    const int n = xa.ndim() > 0 ? xa.shape(-1) : 0;
    if (!on_cpu(st) || xa.dtype() != mx::float32 || n == 0 ||
        (has_w && (arr(weight).dtype() != mx::float32 || arr(weight).size() != static_cast<size_t>(n)))) {
      set(res, mx::fast::rms_norm(xa, has_w ? std::optional<mx::array>(arr(weight)) : std::nullopt, eps, st));
      return;
    }
    std::vector<mx::array> in{xa};
    if (has_w) {
      in.push_back(arr(weight));
    }
    set(res, mx::array(xa.shape(), mx::float32,
                       std::make_shared<HostOp>(st, "FastRMSNorm",
                                                [n, eps, has_w](const std::vector<mx::array>& in, mx::array& out) {
                                                  rms_norm_rows(in[0].data<float>(),
                                                                has_w ? in[1].data<float>() : nullptr, rows_of(in[0]),
                                                                n, eps, out.data<float>());
                                                }),
                       std::move(in)));
  });
}

int mlx_fast_cpu_swiglu(mlx_array* res, const mlx_array g, const mlx_array u, const mlx_stream s) {
  return guard([&] {
    const mx::Stream st = *static_cast<mx::Stream*>(s.ctx);
    const mx::array &ga = arr(g), &ua = arr(u);
    if (!on_cpu(st) || ga.dtype() != mx::float32 || ua.dtype() != mx::float32 || ga.shape() != ua.shape()) {
      set(res, mx::multiply(mx::multiply(ga, mx::sigmoid(ga, st), st), ua, st));
      return;
    }
    set(res, mx::array(ga.shape(), mx::float32,
                       std::make_shared<HostOp>(st, "FastSwiGLU",
                                                [](const std::vector<mx::array>& in, mx::array& out) {
                                                  const size_t n = out.size();
                                                  const size_t chunk = 1 << 14;
                                                  const int tasks = static_cast<int>((n + chunk - 1) / chunk);
                                                  const float *g = in[0].data<float>(), *u = in[1].data<float>();
                                                  float* o = out.data<float>();
                                                  run_tasks(tasks, n, [&](int t) {
                                                    swiglu_range(g, u, t * chunk, std::min(n, (t + 1) * chunk), o);
                                                  });
                                                }),
                       {ga, ua}));
  });
}

int mlx_fast_cpu_rope(mlx_array* res, const mlx_array x, int dims, bool traditional, mlx_optional_float base,
                      float scale, int offset, const mlx_array offsets, const mlx_array freqs, const mlx_stream s) {
  return guard([&] {
    const mx::Stream st = *static_cast<mx::Stream*>(s.ctx);
    const mx::array& xa = arr(x);
    const bool dyn = offsets.ctx != nullptr;
    const bool has_f = freqs.ctx != nullptr;
    const bool fits = on_cpu(st) && xa.dtype() == mx::float32 && xa.ndim() == 4 && dims > 0 && dims % 2 == 0 &&
                      dims <= xa.shape(3) && (!dyn || arr(offsets).size() == static_cast<size_t>(xa.shape(0))) &&
                      (!has_f || (arr(freqs).size() == static_cast<size_t>(dims / 2)));
    std::optional<float> b = base.has_value ? std::optional<float>(base.value) : std::nullopt;
    std::optional<mx::array> f = has_f ? std::optional<mx::array>(arr(freqs)) : std::nullopt;
    if (!fits) {
      set(res, dyn ? mx::fast::rope(xa, dims, traditional, b, scale, arr(offsets), f, st)
                   : mx::fast::rope(xa, dims, traditional, b, scale, offset, f, st));
      return;
    }
    std::vector<mx::array> in{xa};
    if (dyn) {
      in.push_back(mx::astype(arr(offsets), mx::int32, st));
    }
    if (has_f) {
      in.push_back(mx::astype(arr(freqs), mx::float32, st));
    }
    const float bv = base.has_value ? base.value : 10000.0f;
    auto fn = [dims, traditional, bv, scale, offset, dyn, has_f](const std::vector<mx::array>& in, mx::array& out) {
      const auto& sh = in[0].shape();
      std::vector<double> inv(dims / 2);
      for (int i = 0; i < dims / 2; i++) {
        inv[i] = has_f ? 1.0 / in[dyn ? 2 : 1].data<float>()[i]
                       : std::pow(static_cast<double>(bv), -static_cast<double>(i) / static_cast<double>(dims / 2));
      }
      rope_rows(view4(in[0]), sh[0], sh[1], sh[2], sh[3], dyn ? in[1].data<int32_t>() : nullptr, offset, scale, inv,
                dims, traditional, out.data<float>());
    };
    set(res, mx::array(xa.shape(), mx::float32, std::make_shared<HostOp>(st, "FastRoPE", std::move(fn)), std::move(in)));
  });
}

int mlx_fast_cpu_sdpa(mlx_array* res, const mlx_array q, const mlx_array k, const mlx_array v, float scale,
                      const char* mask_mode, const mlx_array mask, const mlx_array sinks, const mlx_stream s) {
  return guard([&] {
    const mx::Stream st = *static_cast<mx::Stream*>(s.ctx);
    const mx::array &qa = arr(q), &ka = arr(k), &va = arr(v);
    const std::string mode = mask_mode != nullptr ? mask_mode : "";
    const bool has_s = sinks.ctx != nullptr;
    const bool fits = on_cpu(st) && (mode.empty() || mode == "causal") && mask.ctx == nullptr &&
                      qa.dtype() == mx::float32 && ka.dtype() == mx::float32 && va.dtype() == mx::float32 &&
                      qa.ndim() == 4 && ka.ndim() == 4 && ka.shape() == va.shape() && qa.shape(0) == ka.shape(0) &&
                      qa.shape(3) == ka.shape(3) && ka.shape(1) > 0 && qa.shape(1) % ka.shape(1) == 0 &&
                      qa.shape(2) <= ka.shape(2) && ka.shape(2) > 0 &&
                      (!has_s || (arr(sinks).size() == static_cast<size_t>(qa.shape(1))));
    if (!fits) {
      set(res, mx::fast::scaled_dot_product_attention(
                   qa, ka, va, scale, mode, mask.ctx != nullptr ? std::optional<mx::array>(arr(mask)) : std::nullopt,
                   has_s ? std::optional<mx::array>(arr(sinks)) : std::nullopt, false, st));
      return;
    }
    std::vector<mx::array> in{qa, ka, va};
    if (has_s) {
      in.push_back(mx::astype(arr(sinks), mx::float32, st));
    }
    const bool causal = mode == "causal";
    auto fn = [scale, causal, has_s](const std::vector<mx::array>& in, mx::array& out) {
      const auto& qs = in[0].shape();
      const auto& ks = in[1].shape();
      attend(view4(in[0]), view4(in[1]), view4(in[2]), qs[0], qs[1], ks[1], qs[2], ks[2], qs[3], scale, causal,
             has_s ? in[3].data<float>() : nullptr, out.data<float>());
    };
    set(res, mx::array(qa.shape(), mx::float32, std::make_shared<HostOp>(st, "FastAttention", std::move(fn)),
                       std::move(in)));
  });
}


static int affine_linear(mlx_array* res, const mlx_array x, const mlx_array w, const mlx_array scales,
                         const mlx_array biases, int group_size, int bits, bool int8, const mlx_stream s) {
  return guard([&] {
    const mx::Stream st = *static_cast<mx::Stream*>(s.ctx);
    const mx::array& xa = arr(x);
    const mx::array& wa = arr(w);
    const mx::array& sa = arr(scales);
    const mx::array& ba = arr(biases);
    const bool fits = st.device == mx::Device::cpu && !use_mlx_kernel() && (bits == 4 || bits == 8) &&
                      group_size % 16 == 0 && xa.ndim() >= 1 && wa.ndim() == 2 && wa.dtype() == mx::uint32 &&
                      sa.ndim() == 2 && sa.shape() == ba.shape() && sa.dtype() == ba.dtype() &&
                      (sa.dtype() == mx::float32 || sa.dtype() == mx::float16 || sa.dtype() == mx::bfloat16) &&
                      xa.shape(-1) % group_size == 0 && sa.shape(0) == wa.shape(0) &&
                      sa.shape(1) == xa.shape(-1) / group_size && wa.shape(1) == xa.shape(-1) * bits / 32;
    if (!fits) {
      if (auto y = cuda_affine_gemv(xa, wa, sa, ba, group_size, bits, st)) {
        set(res, *y);
        return;
      }
      set(res, mx::quantized_matmul(xa, wa, sa, ba, true, group_size, bits, "affine", st));
      return;
    }
    const int k = xa.shape(-1);
    const int n = wa.shape(0);
    mx::Shape shape = xa.shape();
    shape.back() = n;
    const mx::Dtype out_type = xa.dtype();
    // Weights, scales and biases are used as uploaded; only activations
    // convert.
    std::vector<mx::array> in{mx::astype(xa, mx::float32, st), wa, sa, ba};
    const mx::Dtype sd = sa.dtype();
#if PROVIDER_X86
    const bool q8 = int8 && q8_ok(k, group_size, bits);
#else
    const bool q8 = false;
#endif
    auto fn = [k, n, group_size, bits, sd, q8](const std::vector<mx::array>& in, mx::array& out) {
      Job j{in[0].data<float>(), static_cast<int>(rows_of(in[0])), k, n, in[1].data<uint32_t>(),
            in[2].data<void>(), in[3].data<void>(), group_size, bits, out.data<float>()};
      if (j.m == 0) {
        return;
      }
      by_scale_type(sd, [&](auto s) { q8 ? run_job_q8<decltype(s)>(j) : run_job<decltype(s)>(j); });
    };
    mx::array y(std::move(shape), mx::float32, std::make_shared<HostOp>(st, "FastAffineLinear", std::move(fn)),
                std::move(in));
    set(res, out_type == mx::float32 ? y : mx::astype(y, out_type, st));
  });
}

int mlx_fast_affine_linear(mlx_array* res, const mlx_array x, const mlx_array w, const mlx_array scales,
                           const mlx_array biases, int group_size, int bits, const mlx_stream s) {
  return affine_linear(res, x, w, scales, biases, group_size, bits, false, s);
}

int mlx_fast_affine_linear_q8(mlx_array* res, const mlx_array x, const mlx_array w, const mlx_array scales,
                              const mlx_array biases, int group_size, int bits, const mlx_stream s) {
  return affine_linear(res, x, w, scales, biases, group_size, bits, true, s);
}

// packed_params checks packed weights for x of k inputs and returns n.
static int packed_params(const mx::array& wp, const mx::array& sp, const mx::array& bp, int k, int bits) {
  if (!packed_ok(k, bits) || wp.ndim() != 2 || wp.dtype() != mx::uint8 ||
      wp.shape(1) != static_cast<int64_t>(k) * bits / 8 || sp.ndim() != 2 || sp.shape(0) != wp.shape(0) ||
      sp.shape(1) != k / 32 || sp.shape() != bp.shape() || sp.dtype() != bp.dtype() ||
      (sp.dtype() != mx::float32 && sp.dtype() != mx::float16 && sp.dtype() != mx::bfloat16)) {
    throw std::invalid_argument("affine_linear_packed: weights are not packed for this input length and bit width");
  }
  return wp.shape(0);
}

int mlx_fast_pack_q8(mlx_array* wp, mlx_array* sp, mlx_array* bp, const mlx_array w, const mlx_array scales,
                     const mlx_array biases, int group_size, int bits, const mlx_stream s) {
  return guard([&] {
    const mx::Stream st = *static_cast<mx::Stream*>(s.ctx);
    const mx::array &wa = arr(w), &sa = arr(scales), &ba = arr(biases);
    if (st.device != mx::Device::cpu || wa.ndim() != 2 || wa.dtype() != mx::uint32 || sa.ndim() != 2 ||
        sa.shape() != ba.shape() || sa.dtype() != ba.dtype() || sa.shape(0) != wa.shape(0) ||
        (sa.dtype() != mx::float32 && sa.dtype() != mx::float16 && sa.dtype() != mx::bfloat16) ||
        group_size % 32 != 0 || group_size <= 0) {
      throw std::invalid_argument("pack_q8: needs 2-D affine weights with groups of a multiple of 32 on the CPU");
    }
    const int n = wa.shape(0);
    const int k = static_cast<int>(wa.shape(1)) * 32 / bits;
    if (!packed_ok(k, bits) || sa.shape(1) * group_size != k) {
      throw std::invalid_argument("pack_q8: this processor or shape does not take the packed kernel");
    }
    mx::array wc = rowc(wa, st), sc = rowc(sa, st), bc = rowc(ba, st);
    mx::eval({wc, sc, bc});
    const size_t rb = static_cast<size_t>(k) * bits / 8;
    mx::array wo(mx::allocator::malloc(rb * n), {n, static_cast<int>(rb)}, mx::uint8);
    const int blocks = k / 32, per = group_size / 32;
    const size_t es = mx::size_of(sa.dtype());
    mx::array so(mx::allocator::malloc(es * blocks * n), {n, blocks}, sa.dtype());
    mx::array bo(mx::allocator::malloc(es * blocks * n), {n, blocks}, sa.dtype());
    const uint32_t* src = wc.data<uint32_t>();
    uint8_t* dst = wo.data<uint8_t>();
    const int groups = k / group_size;
    const char *s_in = sc.data<char>(), *b_in = bc.data<char>();
    char *s_out = so.data<char>(), *b_out = bo.data<char>();
    const int chunk = 64;
    Pool::get().run((n + chunk - 1) / chunk, [&](int t) {
      const int n0 = t * chunk, n1 = std::min(n, n0 + chunk);
      pack_rows(src, k, bits, n0, n1, dst);
      for (int r = n0; r < n1; r++) {
        for (int b = 0; b < blocks; b++) {
          const size_t from = (static_cast<size_t>(r) * groups + b / per) * es;
          const size_t to = (static_cast<size_t>(r) * blocks + b) * es;
          std::memcpy(s_out + to, s_in + from, es);
          std::memcpy(b_out + to, b_in + from, es);
        }
      }
    });
    set(wp, wo);
    set(sp, so);
    set(bp, bo);
  });
}

int mlx_fast_affine_linear_packed(mlx_array* res, const mlx_array x, const mlx_array w, const mlx_array scales,
                                  const mlx_array biases, int bits, const mlx_stream s) {
  return guard([&] {
    const mx::Stream st = *static_cast<mx::Stream*>(s.ctx);
    const mx::array &xa = arr(x), &wa = arr(w), &sa = arr(scales), &ba = arr(biases);
    if (st.device != mx::Device::cpu || xa.ndim() < 1) {
      throw std::invalid_argument("affine_linear_packed: runs on the CPU only");
    }
    const int k = xa.shape(-1);
    const int n = packed_params(wa, sa, ba, k, bits);
    mx::Shape shape = xa.shape();
    shape.back() = n;
    const mx::Dtype out_type = xa.dtype();
    std::vector<mx::array> in{mx::astype(xa, mx::float32, st), wa, sa, ba};
    const mx::Dtype sd = sa.dtype();
    auto fn = [k, n, bits, sd](const std::vector<mx::array>& in, mx::array& out) {
      PJob j{in[0].data<float>(), static_cast<int>(rows_of(in[0])), k, n, bits, in[1].data<uint8_t>(),
             in[2].data<void>(), in[3].data<void>(), out.data<float>()};
      if (j.m == 0) {
        return;
      }
      by_scale_type(sd, [&](auto s) { run_packed<decltype(s)>(j); });
    };
    mx::array y(std::move(shape), mx::float32, std::make_shared<HostOp>(st, "FastAffineLinearPacked", std::move(fn)),
                std::move(in));
    set(res, out_type == mx::float32 ? y : mx::astype(y, out_type, st));
  });
}

int mlx_fast_packed_embed(mlx_array* res, const mlx_array ids, const mlx_array w, const mlx_array scales,
                          const mlx_array biases, int bits, const mlx_stream s) {
  return guard([&] {
    const mx::Stream st = *static_cast<mx::Stream*>(s.ctx);
    const mx::array &ia = arr(ids), &wa = arr(w), &sa = arr(scales), &ba = arr(biases);
    if (st.device != mx::Device::cpu || wa.ndim() != 2) {
      throw std::invalid_argument("packed_embed: runs on the CPU only");
    }
    const int k = static_cast<int>(wa.shape(1)) * 8 / bits;
    const int rows = packed_params(wa, sa, ba, k, bits);
    mx::Shape shape = ia.shape();
    shape.push_back(k);
    std::vector<mx::array> in{mx::astype(ia, mx::int32, st), wa, sa, ba};
    const mx::Dtype sd = sa.dtype();
    auto fn = [k, bits, rows, sd](const std::vector<mx::array>& in, mx::array& out) {
      const int32_t* id = in[0].data<int32_t>();
      const size_t count = in[0].size();
      const uint8_t* w = in[1].data<uint8_t>();
      by_scale_type(sd, [&](auto s) {
        using S = decltype(s);
        packed_embed<S>(id, count, rows, w, in[2].data<S>(), in[3].data<S>(), k, bits, out.data<S>());
      });
    };
    set(res, mx::array(std::move(shape), sd, std::make_shared<HostOp>(st, "PackedEmbed", std::move(fn)),
                       std::move(in)));
  });
}

int mlx_fast_packed_ok(int k, int bits) { return packed_ok(k, bits) ? 1 : 0; }

// float_dtype maps the pool dtypes.
static mx::Dtype float_dtype(mlx_dtype d) {
  switch (d) {
    case MLX_FLOAT32: return mx::float32;
    case MLX_FLOAT16: return mx::float16;
    case MLX_BFLOAT16: return mx::bfloat16;
    default: throw std::invalid_argument("buffer: float32, float16 or bfloat16 only");
  }
}

int mlx_fast_paged_attention(mlx_array* res, const mlx_array q, const mlx_array k_new, const mlx_array v_new,
                             const mlx_array k_pool, const mlx_array v_pool, const mlx_array slots,
                             const mlx_array table, const mlx_array meta, int block, int window, float scale,
                             const mlx_array sinks, const mlx_stream s) {
  return guard([&] {
    const mx::Stream st = *static_cast<mx::Stream*>(s.ctx);
    const mx::array &qa = arr(q), &kp = arr(k_pool), &vp = arr(v_pool);
    const bool write = k_new.ctx != nullptr;
    const bool has_s = sinks.ctx != nullptr;
    if (st.device != mx::Device::cpu || qa.dtype() != mx::float32 || kp.dtype() != mx::float32 ||
        vp.dtype() != mx::float32 || qa.ndim() != 3 || kp.ndim() != 3 || kp.shape() != vp.shape() ||
        qa.shape(2) != kp.shape(2) || qa.shape(1) % kp.shape(1) != 0 || !kp.is_available() || !vp.is_available() ||
        !kp.flags().row_contiguous || !vp.flags().row_contiguous || kp.data_size() != kp.size() ||
        vp.data_size() != vp.size() || arr(meta).ndim() != 2 || arr(meta).shape(1) != 3) {
      throw std::invalid_argument("paged_attention: needs float32 q [N, H, D], evaluated row-contiguous pools [slots, KVH, D] on the CPU and meta [N, 3]");
    }
    std::vector<mx::array> in{qa, kp, vp,
                              mx::astype(arr(table), mx::int32, st),
                              mx::astype(arr(meta), mx::int32, st)};
    if (write) {
      const mx::array &kn = arr(k_new), &vn = arr(v_new);
      if (kn.ndim() != 3 || kn.shape(0) != qa.shape(0) || kn.shape(1) != kp.shape(1) || kn.shape(2) != kp.shape(2) ||
          vn.shape() != kn.shape()) {
        throw std::invalid_argument("paged_attention: new keys and values must be [N, KVH, D]");
      }
      in.push_back(mx::astype(kn, mx::float32, st));
      in.push_back(mx::astype(vn, mx::float32, st));
      in.push_back(mx::astype(arr(slots), mx::int32, st));
    }
    if (has_s) {
      in.push_back(mx::astype(arr(sinks), mx::float32, st));
    }
    const int N = qa.shape(0), H = qa.shape(1), D = qa.shape(2), KVH = kp.shape(1);
    auto fn = [=](const std::vector<mx::array>& in, mx::array& out) {
      // The pools are written in place: they belong to the KV pool, which
      // hands them to no other primitive while a step is in flight.
      Paged a{in[0].data<float>(),
              write ? in[5].data<float>() : nullptr,
              write ? in[6].data<float>() : nullptr,
              const_cast<float*>(in[1].data<float>()),
              const_cast<float*>(in[2].data<float>()),
              write ? in[7].data<int32_t>() : nullptr,
              in[3].data<int32_t>(),
              in[4].data<int32_t>(),
              has_s ? in.back().data<float>() : nullptr,
              N, H, KVH, D, in[3].shape(1), block, window, scale};
      paged_attend(a, out.data<float>());
    };
    set(res, mx::array({N, H, D}, mx::float32, std::make_shared<HostOp>(st, "PagedAttention", std::move(fn)),
                       std::move(in)));
  });
}

int mlx_fast_buffer(mlx_array* res, const int* shape, size_t ndim, mlx_dtype dtype, const mlx_stream s) {
  return guard([&] {
    const mx::Stream st = *static_cast<mx::Stream*>(s.ctx);
    mx::Shape sh(shape, shape + ndim);
    const mx::Dtype dt = float_dtype(dtype);
    if (st.device == mx::Device::cpu) {
      // Uninitialized: pages the pool never touches cost no memory.
      size_t n = mx::size_of(dt);
      for (int d : sh) {
        n *= static_cast<size_t>(d);
      }
      set(res, mx::array(mx::allocator::malloc(n), sh, dt));
      return;
    }
    mx::array z = rowc(mx::zeros(sh, dt, st), st);
    mx::eval(z);
    set(res, z);
  });
}

int mlx_fast_buffer_grow(mlx_array* res, const mlx_array old, int rows, const mlx_stream s) {
  return guard([&] {
    const mx::Stream st = *static_cast<mx::Stream*>(s.ctx);
    const mx::array& o = arr(old);
    mx::Shape sh = o.shape();
    if (rows < sh[0]) {
      throw std::invalid_argument("buffer_grow: cannot shrink");
    }
    const int held = sh[0];
    sh[0] = rows;
    if (st.device == mx::Device::cpu) {
      // Writes into the old buffer run on the stream's worker: let them land.
      mx::synchronize(st);
      mx::array g(mx::allocator::malloc(o.nbytes() / std::max(held, 1) * rows), sh, o.dtype());
      if (o.nbytes() > 0) {
        std::memcpy(g.data<char>(), o.data<char>(), o.nbytes());
      }
      set(res, g);
      return;
    }
    mx::Shape rest = sh;
    rest[0] = rows - held;
    mx::array g = mx::contiguous(mx::concatenate({o, mx::zeros(rest, o.dtype(), st)}, 0, st), false, st);
    mx::eval(g);
    set(res, g);
  });
}

int mlx_fast_stream_is_cpu(const mlx_stream s) {
  return static_cast<mx::Stream*>(s.ctx)->device == mx::Device::cpu ? 1 : 0;
}

int mlx_fast_cpu_int8() {
#if PROVIDER_X86
  return int8_isa() ? 1 : 0;
#else
  return 0;
#endif
}

int mlx_fast_cpu_threads(int n) {
  return Pool::get().resize(n);
}

int mlx_fast_cpu_spin(int us) { return Pool::get().set_spin(us); }

const char* mlx_fast_version() { return mx::version(); }

int mlx_fast_cpu_threads_in_use() { return Pool::get().threads(); }

}  // extern "C"
