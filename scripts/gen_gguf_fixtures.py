#!/usr/bin/env python3
"""Generate dequantization fixtures for the gguf package tests.

The reference is the PyPI `gguf` package (gguf.quants), an implementation
independent of ours. It must be importable together with numpy, for example:

    pip install --target DIR gguf numpy
    PYTHONPATH=DIR python3 scripts/gen_gguf_fixtures.py

For each tensor type this writes gguf/testdata/quant/<TYPE>.raw (block bytes)
and <TYPE>.f32 (the reference dequantization as little-endian float32). The
blocks are a mix of:
  - seeded random data quantized with gguf.quants.quantize, for the types it
    can quantize, including all-zero, tiny (subnormal fp16 scale) and large
    blocks;
  - seeded random raw blocks whose fp16 scale fields are overwritten with
    finite values (random, zero, negative zero, subnormal, negative), which
    exercise every bit pattern of the quant fields.
NaN is left out on purpose: its payload after conversion is not something the
fixture should pin down.
"""

import os
import sys

import numpy as np
from gguf import GGMLQuantizationType as T
from gguf import quants
from gguf.constants import GGML_QUANT_SIZES

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "gguf", "testdata", "quant")

# Offsets of the fp16 scale fields inside one block, per type.
HALF_FIELDS = {
    T.Q4_0: [0],
    T.Q4_1: [0, 2],
    T.Q5_0: [0],
    T.Q5_1: [0, 2],
    T.Q8_0: [0],
    T.Q2_K: [80, 82],
    T.Q3_K: [108],
    T.Q4_K: [0, 2],
    T.Q5_K: [0, 2],
    T.Q6_K: [208],
}

# Types gguf.quants can produce from floats.
QUANTIZABLE = {T.Q4_0, T.Q4_1, T.Q5_0, T.Q5_1, T.Q8_0, T.BF16}

SPECIAL_HALVES = np.array(
    [0.0, -0.0, 2.0**-24, -(2.0**-24), 2.0**-14, 6.1e-5, -1.0, 1.0, 0.5, 65504.0 / 8192, 1e-3],
    dtype=np.float16,
)


def finite_halves(rng, n):
    """n finite fp16 values: specials first, then random normal scales."""
    vals = rng.standard_normal(n).astype(np.float32) * np.float32(0.02)
    out = vals.astype(np.float16)
    k = min(n, len(SPECIAL_HALVES))
    out[:k] = SPECIAL_HALVES[:k]
    return out


def random_blocks(rng, qtype, nblocks):
    block_size, type_size = GGML_QUANT_SIZES[qtype]
    raw = rng.integers(0, 256, size=(nblocks, type_size), dtype=np.uint8)
    for off in HALF_FIELDS[qtype]:
        h = finite_halves(rng, nblocks).view(np.uint8).reshape(nblocks, 2)
        raw[:, off:off + 2] = h
    return raw


def float_input(rng, rows, cols):
    x = rng.standard_normal((rows, cols)).astype(np.float32)
    x[0, :] = 0.0                       # all-zero blocks: scale 0
    x[1, :] *= np.float32(1e-6)         # tiny: subnormal fp16 scales
    x[2, :] *= np.float32(100.0)        # large scales
    x[3, :] = np.abs(x[3, :])           # one-signed rows
    return x


def finite_bits16(rng, n, exp_mask, exp_shift):
    """Random 16-bit patterns whose exponent field is not all ones."""
    bits = rng.integers(0, 1 << 16, size=n, dtype=np.uint32).astype(np.uint16)
    exp = (bits >> exp_shift) & exp_mask
    bits[exp == exp_mask] &= np.uint16(~(1 << exp_shift) & 0xFFFF)
    return bits


def build(qtype, rng):
    if qtype == T.F32:
        x = rng.standard_normal(1024).astype(np.float32)
        x[:4] = [0.0, -0.0, np.inf, 1e-45]
        raw = x.view(np.uint8)
        return raw, quants.dequantize(raw, qtype)
    if qtype == T.F16:
        bits = finite_bits16(rng, 2048, 0x1F, 10)
        bits[:6] = [0x0000, 0x8000, 0x0001, 0x83FF, 0x7C00, 0xFBFF]  # zeros, subnormals, inf, -max
        raw = bits.view(np.uint8)
        return raw, quants.dequantize(raw, qtype)
    if qtype == T.BF16:
        x = rng.standard_normal(1024).astype(np.float32)
        q = quants.quantize(x, qtype).reshape(-1)
        bits = finite_bits16(rng, 1024, 0xFF, 7).view(np.uint8)
        raw = np.concatenate([q, bits])
        return raw, quants.dequantize(raw, qtype)

    block_size, type_size = GGML_QUANT_SIZES[qtype]
    parts = []
    if qtype in QUANTIZABLE:
        x = float_input(rng, 8, 256)
        parts.append(quants.quantize(x, qtype).reshape(-1, type_size))
    nrand = 64 if block_size == 32 else 12
    parts.append(random_blocks(rng, qtype, nrand))
    raw = np.concatenate(parts, axis=0).reshape(-1)
    ref = quants.dequantize(raw.reshape(1, -1), qtype).reshape(-1)
    return raw, ref


def main():
    os.makedirs(OUT, exist_ok=True)
    types = [T.F32, T.F16, T.BF16, T.Q4_0, T.Q4_1, T.Q5_0, T.Q5_1, T.Q8_0,
             T.Q2_K, T.Q3_K, T.Q4_K, T.Q5_K, T.Q6_K]
    total = 0
    for i, qtype in enumerate(types):
        rng = np.random.default_rng(1234 + i)
        raw, ref = build(qtype, rng)
        ref = np.ascontiguousarray(ref, dtype="<f4")
        block_size, type_size = GGML_QUANT_SIZES[qtype]
        assert raw.size % type_size == 0
        assert ref.size == raw.size // type_size * block_size, qtype.name
        assert not np.isnan(ref).any(), qtype.name
        base = os.path.join(OUT, qtype.name)
        with open(base + ".raw", "wb") as f:
            f.write(raw.astype(np.uint8).tobytes())
        with open(base + ".f32", "wb") as f:
            f.write(ref.tobytes())
        total += raw.size + ref.nbytes
        print(f"{qtype.name}: {ref.size} elements")
    print(f"total {total} bytes", file=sys.stderr)


if __name__ == "__main__":
    main()
