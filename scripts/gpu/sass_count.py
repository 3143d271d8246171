#!/usr/bin/env python3
"""Counts the machine instructions of the affine matrix-vector kernels for
an H100 (sm_90), no GPU needed.

The kernels' bodies (mlx/shim.cpp) are wrapped as nvrtc_check.py wraps
them, compiled by NVRTC to a cubin for sm_90, and disassembled by
nvdisasm; the count of each opcode shows what a change to the loop costs
in instructions (on an H100 a one-row product runs near the rate the SMs
issue them, not only the rate memory delivers its weights). Each body
runs its loop twice, x loaded as vectors and one value at a time; the
counts are of the kernel as compiled, and of it with the vector loop
alone (--vector-only: the loop the aligned activations of a step take).

    make sass            (downloads NVRTC and nvdisasm wheels into .deps)
    python3 scripts/gpu/sass_count.py CUDA_DIR NVDISASM [--vector-only]
"""
import argparse
import collections
import ctypes
import re
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import mma_emulate  # noqa: E402
import nvrtc_check  # noqa: E402

# The call of the loop in kGemvSums, and the same with the vector loop only.
BOTH = "if ((reinterpret_cast<size_t>(x) & 15) == 0 && nwaligned) {\n    sums(vector_unit());\n  } else {\n    sums(T{});\n  }"
VECTOR = "sums(vector_unit());"


def cubin(nvrtc, name, text):
    """The sm_90 cubin of a wrapped body, and ptxas's report of it."""
    rc, log, prog = nvrtc_check.compile_ptx(nvrtc, name, text, b"sm_90", (b"--ptxas-options=-v",))
    if rc != 0:
        sys.exit(f"sass_count: {name} did not compile:\n{log}")
    n = ctypes.c_size_t()
    nvrtc.nvrtcGetCUBINSize(prog, ctypes.byref(n))
    out = ctypes.create_string_buffer(n.value)
    nvrtc.nvrtcGetCUBIN(prog, out)
    return out.raw, log


def opcodes(nvdisasm, blob):
    """The count of each opcode in a cubin's code, and the total."""
    with tempfile.NamedTemporaryFile(suffix=".cubin") as f:
        f.write(blob)
        f.flush()
        text = subprocess.run([nvdisasm, "-c", f.name], capture_output=True, text=True, check=True).stdout
    ops = collections.Counter()
    for line in text.splitlines():
        m = re.search(r"/\*[0-9a-f]{4,}\*/\s+(?:@!?U?P\w+\s+)?([A-Z][A-Z0-9_]*)", line)
        if m:
            ops[m.group(1)] += 1
    return ops, sum(ops.values())


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("cuda", type=Path, help="the CUDA folder with NVRTC (nvrtc_check reads it too)")
    ap.add_argument("nvdisasm")
    ap.add_argument("--vector-only", action="store_true")
    a = ap.parse_args()
    nvrtc = nvrtc_check.load_nvrtc()
    t = "float16"
    gemv = [("x", t), ("w", "uint32"), ("scales", t), ("biases", t)]
    norm = ([("nw", t)], [("EPS_BITS", 0x3727C5AC)])
    cases = []
    for m, r, u in ((1, 2, 4), (1, 4, 2), (2, 2, 4), (4, 2, 4)):
        shared = [("T", t), ("BITS", 4), ("G", 64), ("M", m), ("R", r), ("U", u)]
        cases.append((f"affine_gemv M={m} R={r} U={u}", "kAffineGemv", gemv, [("y", t)], shared))
        if m == 1:
            for suffix, (nin, nargs) in (("", ([], [])), ("Norm", norm)):
                cases.append((f"affine_gemv_swiglu{suffix} M={m} R={r} U={u}", "kAffineGemvSwiglu" + suffix,
                              gemv + nin, [("y", t)], shared + nargs))
    print(f"4-bit weights in groups of 64, float16 x; {'vector loop only' if a.vector_only else 'as compiled'}")
    print("instructions, registers, then the most frequent opcodes")
    for name, body, inputs, outputs, consts in cases:
        text = mma_emulate.pieces(body)[0]
        if a.vector_only:
            if BOTH not in text:
                sys.exit("sass_count: kGemvSums no longer calls its loop as this script expects")
            text = text.replace(BOTH, VECTOR)
        blob, log = cubin(nvrtc, name, nvrtc_check.wrap(text, inputs, outputs, consts))
        ops, total = opcodes(a.nvdisasm, blob)
        regs = re.search(r"Used (\d+) registers", log)
        spill = re.search(r"(\d+) bytes spill stores", log)
        top = " ".join(f"{k}={v}" for k, v in ops.most_common(10))
        print(f"{name:38} {total:5} {regs.group(1) if regs else '?':>4} regs"
              f"{', SPILLS ' + spill.group(1) + ' bytes' if spill and spill.group(1) != '0' else ''}  {top}")


if __name__ == "__main__":
    main()
