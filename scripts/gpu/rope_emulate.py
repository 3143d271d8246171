#!/usr/bin/env python3
"""Runs the q/k/v rotation kernel of mlx/shim.cpp on the host, no GPU needed.

kHeadsRope splits a fused q/k/v projection y [N, (H + 2 KV) * D] into q [N,
H, D], k and v [N, KV, D], q's and k's heads rotated at each token's
position; in kHeadsRopeKV the same body also writes k and v into a KV pool
[S, KV, D] at each token's slot (kKVPut, which the matrix-vector kernel's
fused q/k/v store shares). This script compiles the unmodified pieces with
g++ as a host function run once per simulated CUDA thread, for both
variants, and checks:

  - v's heads and the elements past DIMS copied exactly, q's and k's
    rotated pairs within two roundings of x's type of a rotation in
    double, plus what the float angle the kernel takes (as MLX's RoPE
    does) moves them;
  - the variant with the store gives the same q, k and v, bit for bit;
  - the pool's rows at the tokens' slots hold k and v exactly, and every
    other row is untouched.

Cases cover float16, bfloat16 and float32, full and partial rotations, the
traditional pairing, explicit frequencies, and one and five tokens.

    python3 scripts/gpu/rope_emulate.py            (g++ with C++20)
    python3 scripts/gpu/rope_emulate.py --mutate   (also checks that a few
        deliberate bugs in the body are caught)

It does not check what the device's compiler makes of the body:
nvrtc_check.py compiles it for sm_90, and TestHeadsRoPECUDA in
mlx/fused_cuda_test.go runs it on a GPU.
"""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import mma_emulate  # noqa: E402

NAME = "kHeadsRopeKV"

# The cases: x's type, H, KV, D, DIMS, TRAD, explicit frequencies, tokens.
CASES = [
    ("float16", 8, 2, 128, 128, False, False, 1),
    ("float16", 8, 2, 128, 128, False, False, 5),
    ("bfloat16", 4, 4, 64, 64, False, True, 5),
    ("float32", 4, 2, 64, 32, True, False, 5),
    ("float32", 6, 3, 64, 48, False, False, 1),
    ("bfloat16", 2, 1, 128, 64, True, True, 5),
]

# Deliberate bugs for --mutate: (what, text of the body, replacement); the
# first occurrence is replaced. Each must make the check fail.
MUTATIONS = [
    ("values written to the key pool", "key ? kpool : vpool", "kpool"),
    ("every token to the first token's slot", "(size_t)slots[t] * KV", "(size_t)slots[0] * KV"),
    ("value heads at the key heads' rows", "(key ? hh - H : hh - H - KV)", "(hh - H - KV * key)"),
    ("query heads stored too", "if (hh < H) {\n      return;", "if (hh < 0) {\n      return;"),
    ("pair element b of the pool left unwritten", "at[b] = vb;", ""),
    ("value heads rotated", "const bool turn = hh < H + KV && j < RH;", "const bool turn = j < RH;"),
    ("second element of a pair off by one", "b = j < RH ? j + RH : a + 1;", "b = j < RH ? j + RH - 1 : a + 1;"),
    ("the pool given the unrotated pair", "kv_put(n, hh, a, b, va, vb);", "kv_put(n, hh, a, b, src[a], src[b]);"),
]

KERNEL = r"""
template <class T_, int H_, int KV_, int D_, int DIMS_, bool TRAD_, bool HAS_FREQS_, int LOG2_BASE_BITS_, int SCALE_BITS_>
static void @NAME@(const T_* y, const int32_t* pos, const float* freqs, @POOL@T_* q, T_* k, T_* v) {
  using T = T_;
  constexpr int H = H_, KV = KV_, D = D_, DIMS = DIMS_;
  constexpr bool TRAD = TRAD_, HAS_FREQS = HAS_FREQS_;
  constexpr int LOG2_BASE_BITS = LOG2_BASE_BITS_, SCALE_BITS = SCALE_BITS_;
"""

DRIVER = r"""
template <class T>
static double value_of(T v) {
  return (double)(float)v;
}

// Runs one variant over a grid of 128-thread blocks by tokens, one thread
// at a time (the kernel has no barrier).
template <class F>
static void grid(int threads, int N, F kernel) {
  const int block = 128;
  for (int n = 0; n < N; n++) {
    for (int bx = 0; bx < (threads + block - 1) / block; bx++) {
      for (int tx = 0; tx < block; tx++) {
        threadIdx = Dim3{(unsigned)tx, 0, 0};
        blockIdx = Dim3{(unsigned)bx, (unsigned)n, 0};
        blockDim = Dim3{(unsigned)block, 1, 1};
        kernel();
      }
    }
  }
}

template <class T, int H, int KV, int D, int DIMS, bool TRAD, bool FREQS>
static void check(const char* type, int N, uint64_t seed) {
  char name[160];
  snprintf(name, sizeof name, "%s H=%d KV=%d D=%d DIMS=%d traditional=%d freqs=%d N=%d", type, H, KV, D, DIMS, TRAD,
           FREQS, N);
  printf("%s: ", name);
  fflush(stdout);
  constexpr int HEADS = H + 2 * KV;
  constexpr int LOG2_BASE = 0x41549A78;  // log2(10000)
  constexpr int SCALE = 0x3F000000;      // 0.5
  rng_state = seed;
  std::vector<T> y((size_t)N * HEADS * D);
  for (auto& e : y) {
    e = T((float)(4 * uniform() - 2));
  }
  std::vector<int32_t> pos(N);
  for (auto& p : pos) {
    p = (int32_t)(next_u64() % 70000);
  }
  std::vector<float> fr(DIMS / 2);
  for (int j = 0; j < DIMS / 2; j++) {
    fr[j] = (float)(std::pow(10000.0, 2.0 * j / DIMS) * (1 + uniform()));
  }
  // The pool: 2N + 3 rows, each token at a distinct slot, every element
  // of it a sentinel the kernel must leave where it writes nothing.
  const int S = 2 * N + 3;
  std::vector<int32_t> slots(N);
  for (int i = 0; i < N; i++) {
    int s;
    do {
      s = (int)(next_u64() % S);
    } while (std::find(slots.begin(), slots.begin() + i, s) != slots.begin() + i);
    slots[i] = s;
  }
  const T sentinel = T(-1234.0f);
  std::vector<T> pool0((size_t)S * KV * D, sentinel);
  const T* yg = guarded<T>("y", y.data(), y.size(), 0);
  const int32_t* pg = guarded<int32_t>("pos", pos.data(), N, 0);
  const float* fg = guarded<float>("freqs", fr.data(), fr.size(), 0);
  const int32_t* sg = guarded<int32_t>("slots", slots.data(), N, 0);
  T* kp = guarded<T>("kpool", pool0.data(), pool0.size(), 0);
  T* vp = guarded<T>("vpool", pool0.data(), pool0.size(), 0);
  std::vector<T> nan_q((size_t)N * H * D, T(12345.0f)), nan_kv((size_t)N * KV * D, T(12345.0f));
  T* out[2][3];
  for (int r = 0; r < 2; r++) {
    out[r][0] = guarded<T>("q", nan_q.data(), nan_q.size(), 0);
    out[r][1] = guarded<T>("k", nan_kv.data(), nan_kv.size(), 0);
    out[r][2] = guarded<T>("v", nan_kv.data(), nan_kv.size(), 0);
  }
  const int threads = HEADS * D / 2;
  grid(threads, N, [&] {
    rope<T, H, KV, D, DIMS, TRAD, FREQS, LOG2_BASE, SCALE>(yg, pg, fg, out[0][0], out[0][1], out[0][2]);
  });
  grid(threads, N, [&] {
    rope_kv<T, H, KV, D, DIMS, TRAD, FREQS, LOG2_BASE, SCALE>(yg, pg, fg, kp, vp, sg, out[1][0], out[1][1], out[1][2]);
  });

  // Against double: copies exact, rotations within a few roundings of T
  // (the angle is the kernel's float one, which MLX's ops share).
  const double ulp = sizeof(T) == 4 ? 0x1p-24 : std::is_same_v<T, bf16_t> ? 0x1p-8 : 0x1p-11;
  Tally tally{name};
  constexpr int RH = DIMS / 2;
  int outputs = 0;
  for (int n = 0; n < N; n++) {
    for (int hh = 0; hh < HEADS; hh++) {
      const T* src = y.data() + ((size_t)n * HEADS + hh) * D;
      const T* dst = hh < H ? out[0][0] + ((size_t)n * H + hh) * D
                     : hh < H + KV ? out[0][1] + ((size_t)n * KV + hh - H) * D
                                   : out[0][2] + ((size_t)n * KV + hh - H - KV) * D;
      // A copy must be exact; a rotated element may move by its rounding
      // to T (up to 2^-8 of it in bfloat16), and by what an angle computed
      // in float moves it: the kernel's frequency and angle are a few
      // dozen roundings of theta off, times the pair's magnitude.
      std::vector<double> want(D), tol(D, 0.0);
      for (int e = 0; e < D; e++) {
        want[e] = value_of(src[e]);
      }
      if (hh < H + KV) {
        for (int j = 0; j < RH; j++) {
          const double inv = FREQS ? 1.0 / fr[j] : std::pow(10000.0, -(double)j / RH);
          const double theta = 0.5 * pos[n] * inv;
          const int a = TRAD ? 2 * j : j, b = TRAD ? 2 * j + 1 : j + RH;
          const double x1 = value_of(src[a]), x2 = value_of(src[b]);
          want[a] = x1 * std::cos(theta) - x2 * std::sin(theta);
          want[b] = x1 * std::sin(theta) + x2 * std::cos(theta);
          const double slack = 32 * 0x1p-24 * (std::fabs(theta) + 1) * (std::fabs(x1) + std::fabs(x2));
          tol[a] = 2 * ulp * std::fabs(want[a]) + slack;
          tol[b] = 2 * ulp * std::fabs(want[b]) + slack;
        }
      }
      for (int e = 0; e < D; e++) {
        tally.check(n, hh * D + e, outputs++, value_of(dst[e]), want[e], tol[e]);
      }
    }
  }
  // The variant with the store: the same q, k and v, bit for bit.
  for (int p = 0; p < 3; p++) {
    const size_t len = (p == 0 ? (size_t)H : (size_t)KV) * N * D;
    if (std::memcmp(out[0][p], out[1][p], len * sizeof(T)) != 0) {
      die("%s: %s differs with the store", name, p == 0 ? "q" : p == 1 ? "k" : "v");
    }
  }
  // The pool: k and v at the tokens' slots, the sentinel elsewhere.
  for (int which = 0; which < 2; which++) {
    const T* pool = which == 0 ? kp : vp;
    const T* want = out[0][1 + which];
    for (int s = 0; s < S; s++) {
      const int n = (int)(std::find(slots.begin(), slots.end(), s) - slots.begin());
      for (int e = 0; e < KV * D; e++) {
        const T got = pool[(size_t)s * KV * D + e];
        const T w = n < N ? want[(size_t)n * KV * D + e] : sentinel;
        if (std::memcmp(&got, &w, sizeof(T)) != 0) {
          printf("\nFAIL: %s: %s pool row %d element %d is %.9g, want %.9g (%s)", name, which ? "value" : "key", s, e,
                 value_of(got), value_of(w), n < N ? "a token's" : "untouched");
          die("%s: the pool is wrong", name);
        }
      }
    }
  }
  free_regions();
  tally.done(outputs);
}

int main() {
  catch_faults();
@CASES@
  printf("passed %d\n", passed);
  return 0;
}
"""

CTYPE = mma_emulate.CTYPE


def kernel(fn, body, line, pool):
    head = KERNEL.replace("@NAME@", fn).replace(
        "@POOL@", "const T_* kpool, const T_* vpool, const int32_t* slots, " if pool else "")
    return head + f'#line {line} "mlx/shim.cpp"\n' + body + "\n}\n"


def program(body, line, plain, plain_line):
    calls = []
    for i, (t, h, kv, d, dims, trad, freqs, n) in enumerate(CASES):
        calls.append(f'  check<{CTYPE[t]}, {h}, {kv}, {d}, {dims}, {str(trad).lower()}, {str(freqs).lower()}>'
                     f'("{t}", {n}, {0x52AE0000 + i});')
    head = mma_emulate.PRELUDE + "#include <type_traits>\n"
    text = head + kernel("rope", plain, plain_line, False) + kernel("rope_kv", body, line, True)
    after = text.count("\n") + 2
    return text + f'#line {after} "rope_emulate.cpp"\n' + DRIVER.replace("@CASES@", "\n".join(calls))


def main():
    body, line = mma_emulate.pieces(NAME)
    plain, plain_line = mma_emulate.pieces("kHeadsRopeParts")
    mma_emulate.check_body("rope_emulate", NAME, body, lambda b: program(b, line, plain, plain_line), MUTATIONS,
                           mma_emulate.arguments(__doc__))


if __name__ == "__main__":
    main()
