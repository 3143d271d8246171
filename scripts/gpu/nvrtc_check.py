#!/usr/bin/env python3
"""Compiles the CUDA kernels of mlx/shim.cpp with NVRTC, no GPU needed.

MLX's CUDA backend compiles a custom kernel at run time: it wraps the body
in a __global__ function whose parameters are the inputs (with NAME_shape
and NAME_ndim where the body uses them), then the outputs, and declares the template
arguments as constants. This script wraps each body the same way, for the
template values the server uses, and compiles it to PTX, so a syntax or
type error shows here and not on a device. It does not run the kernels:
TestAttendPagedCUDA does, on a device.

    python3 -m pip download --no-deps --only-binary :all: -d W nvidia-cuda-nvrtc nvidia-cuda-runtime nvidia-cuda-cccl
    (unzip the wheels into W/x; make cuda-check does all of this)
    python3 scripts/gpu/nvrtc_check.py W/x/nvidia/cu13
"""
import ctypes
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import mma_emulate  # noqa: E402

CUDA = Path(sys.argv[1] if len(sys.argv) > 1 else "/usr/local/cuda")

HEADER = """
#include <cuda_fp16.h>
#include <cuda_bf16.h>
#include <cooperative_groups.h>
struct Shape {
  int d[8];
  __device__ int operator[](int i) const { return d[i]; }
};
namespace mlx::core::cu {
namespace cg = cooperative_groups;
"""

CTYPE = {"float32": "float", "float16": "__half", "bfloat16": "__nv_bfloat16", "int32": "int32_t", "uint32": "uint32_t",
         "uint8": "uint8_t"}


def wrap(body, inputs, outputs, consts):
    params = []
    for name, dtype in inputs:
        params.append(f"const {CTYPE[dtype]}* {name}")
        if name + "_shape" in body:
            params.append(f"const __grid_constant__ Shape {name}_shape")
        if name + "_ndim" in body:
            params.append(f"const __grid_constant__ int {name}_ndim")
    params += [f"{CTYPE[dtype]}* {name}" for name, dtype in outputs]
    decl = []
    for name, value in consts:
        if isinstance(value, bool):
            decl.append(f"  constexpr bool {name} = {str(value).lower()};")
        elif isinstance(value, int):
            decl.append(f"  constexpr int {name} = {value};")
        else:
            decl.append(f"  using {name} = {CTYPE[value]};")
    return HEADER + "__global__ void kernel(" + ", ".join(params) + ") {\n" + "\n".join(decl) + "\n" + body + "\n}\n}\n"


def compile_ptx(nvrtc, name, src, arch=b"compute_90", more=()):
    """Compiles src for arch (PTX for a virtual one, a cubin for sm_NN),
    with more options; returns NVRTC's status, its log and the program."""
    prog = ctypes.c_void_p()
    check(nvrtc, nvrtc.nvrtcCreateProgram(ctypes.byref(prog), src.encode(), name.encode(), 0, None, None))
    inc = CUDA / "include"
    opts = [b"--std=c++17", b"-arch=" + arch, b"-I" + str(inc).encode(), b"-I" + str(inc / "cccl").encode(), *more]
    arr = (ctypes.c_char_p * len(opts))(*opts)
    rc = nvrtc.nvrtcCompileProgram(prog, len(opts), arr)
    size = ctypes.c_size_t()
    nvrtc.nvrtcGetProgramLogSize(prog, ctypes.byref(size))
    log = ctypes.create_string_buffer(size.value)
    nvrtc.nvrtcGetProgramLog(prog, log)
    return rc, log.value.decode(errors="replace").strip(), prog


def load_nvrtc():
    """NVRTC's library under CUDA."""
    lib = next((p for p in (CUDA / "lib").glob("libnvrtc.so*")), None) or next(
        (p for p in (CUDA / "lib64").glob("libnvrtc.so*")), None)
    if lib is None:
        sys.exit(f"nvrtc_check: no libnvrtc.so under {CUDA}")
    return ctypes.CDLL(str(lib))


def check(nvrtc, rc):
    if rc != 0:
        nvrtc.nvrtcGetErrorString.restype = ctypes.c_char_p
        sys.exit("nvrtc: " + nvrtc.nvrtcGetErrorString(rc).decode())


def POOL(t):
    """The inputs of a q/k/v kernel that also writes a KV pool (kKVPut)."""
    return [("kpool", t), ("vpool", t), ("slots", "int32")]


def main():
    nvrtc = load_nvrtc()
    scale = 0x3DB504F3  # 1/sqrt(128) as float bits
    cases = []
    for t in ("float16", "float32", "bfloat16"):
        for d in (64, 128):
            for window in (0, 512):
                common = [("T", t), ("D", d), ("W", 8), ("BLOCK", 256), ("WINDOW", window), ("SCALE_BITS", scale)]
                pool = [("q", t), ("kpool", t), ("vpool", t), ("table", "int32"), ("meta", "int32")]
                cases.append((f"paged_decode {t} D={d} window={window}", "kPagedDecodeParts",
                              pool + [("sinks", "float32")], [("o", t)], common + [("HAS_SINKS", True), ("U", 4)]))
                cases.append((f"paged_decode_split {t} D={d} window={window}", "kPagedSplitParts",
                              pool, [("po", "float32"), ("pml", "float32")], common + [("U", 4)]))
            for sinks in (False, True):
                cases.append((f"paged_decode_merge {t} D={d} sinks={sinks}", "kPagedMergeParts",
                              [("po", "float32"), ("pml", "float32"), ("sinks", "float32")], [("o", t)],
                              [("T", t), ("D", d), ("HAS_SINKS", sinks)]))
    for t, st in (("float16", "float16"), ("bfloat16", "bfloat16"), ("float32", "float16")):
        for bits in (4, 8):
            for m, r, u in ((1, 2, 4), (8, 2, 4), (3, 1, 8)):
                cases.append((f"affine_gemv {t} bits={bits} M={m} R={r} U={u}", "kAffineGemv",
                              [("x", t), ("w", "uint32"), ("scales", st), ("biases", st)], [("y", t)],
                              [("T", t), ("BITS", bits), ("G", 64), ("M", m), ("R", r), ("U", u)]))
    for t in ("float16", "bfloat16", "float32"):
        gemv = [("x", t), ("w", "uint32"), ("scales", t), ("biases", t)]
        for bits, m, r, u in ((4, 1, 2, 4), (8, 3, 4, 2)):
            shared = [("T", t), ("BITS", bits), ("G", 64), ("M", m), ("R", r), ("U", u)]
            cases.append((f"affine_gemv_add {t} bits={bits} M={m} R={r}", "kAffineGemvAdd", gemv + [("res", t)],
                          [("y", t)], shared))
            norm = ([("nw", t)], [("EPS_BITS", 0x3727C5AC)])  # 1e-5
            for suffix, (nin, nargs) in (("", ([], [])), ("Norm", norm)):
                cases.append((f"affine_gemv_swiglu{suffix} {t} bits={bits} M={m} R={r}", "kAffineGemvSwiglu" + suffix,
                              gemv + nin, [("y", t)], shared + nargs))
                for dims, trad, freqs in ((128, False, False), (64, True, True)):
                    for kv, kin in (("", []), ("KV", POOL(t))):
                        cases.append((f"affine_gemv_heads_rope{suffix}{kv} {t} bits={bits} M={m} R={r} dims={dims} "
                                      f"traditional={trad}", "kAffineGemvHeads" + suffix + kv,
                                      gemv + [("pos", "int32"), ("freqs", "float32")] + kin + nin,
                                      [("q", t), ("k", t), ("v", t)],
                                      shared + [("H", 32), ("KV", 8), ("D", 128), ("DIMS", dims), ("TRAD", trad),
                                                ("HAS_FREQS", freqs), ("LOG2_BASE_BITS", 0x41549A78),
                                                ("SCALE_BITS", 0x3F800000)] + nargs))
    for t in ("float16", "bfloat16"):
        for nt, g, w, u, pf in ((1, 64, 4, 4, False), (1, 32, 4, 4, True), (2, 128, 1, 2, False), (4, 64, 8, 4, True)):
            cases.append((f"affine_mma {t} NT={nt} G={g} W={w} U={u} PF={pf}", "kAffineMma",
                          [("x", t), ("w", "uint32"), ("scales", t), ("biases", t)], [("y", t)],
                          [("T", t), ("BF16", t == "bfloat16"), ("G", g), ("NT", nt), ("W", w), ("U", u),
                           ("PF", pf)]))
    log2_base = 0x41549A78  # log2(10000) as float bits
    for t in ("float16", "float32", "bfloat16"):
        for dims, trad, freqs in ((128, False, False), (64, True, False), (128, False, True)):
            for kv, body, kin in (("", "kHeadsRopeParts", []), (" kv", "kHeadsRopeKV", POOL(t))):
                cases.append((f"heads_rope{kv} {t} dims={dims} traditional={trad} freqs={freqs}", body,
                              [("y", t), ("pos", "int32"), ("freqs", "float32")] + kin, [("q", t), ("k", t), ("v", t)],
                              [("T", t), ("H", 32), ("KV", 8), ("D", 128), ("DIMS", dims), ("TRAD", trad),
                               ("HAS_FREQS", freqs), ("LOG2_BASE_BITS", log2_base), ("SCALE_BITS", 0x3F800000)]))
        cases.append((f"swiglu_halves {t}", "kSwigluHalves", [("x", t)], [("y", t)], [("T", t), ("F", 11008)]))
        for idx, bias, mr in (("int32", True, 4), ("uint32", False, 1)):
            cases.append((f"gather_fp4 {t} idx={idx} bias={bias} MR={mr}", "kGatherFp4",
                          [("x", t), ("w", "uint32"), ("scales", "uint8"), ("idx", idx),
                           ("bias", t if bias else "float32")], [("y", t)],
                          [("T", t), ("R", 4), ("W", 4), ("MR", mr), ("U", 2), ("PMAX", 1024),
                           ("HAS_BIAS", bias)]))
    failed = 0
    for name, body, inputs, outputs, consts in cases:
        rc, log, _ = compile_ptx(nvrtc, name, wrap(mma_emulate.pieces(body)[0], inputs, outputs, consts))
        if rc != 0 or "warning" in log:
            print(("FAIL " if rc != 0 else "warn ") + name)
            print(log)
        failed += rc != 0
    if failed:
        sys.exit(f"nvrtc_check: {failed} of {len(cases)} failed")
    print(f"nvrtc_check: {len(cases)} kernels compiled")


if __name__ == "__main__":
    main()
