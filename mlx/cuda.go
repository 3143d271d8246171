package mlx

/*
#include "mlxc.h"
*/
import "C"

import (
	"fmt"
	"os"
	"sync"
	"sync/atomic"
)

// CUDAAvailable reports whether this build of MLX has its CUDA backend and
// it sees a device (false on the CPU and Metal builds).
func CUDAAvailable() (bool, error) {
	var ok C.bool
	if err := check("cuda_available", C.mlx_cuda_available(&ok)); err != nil {
		return false, err
	}
	RestoreSignals()
	return bool(ok), nil
}

var (
	cudaOnce     sync.Once
	cudaOn       bool
	layerKernels atomic.Bool // model threads read it; a test may set it
)

// onCUDAStream reports whether the frame's stream runs on MLX's CUDA
// backend, where this file's kernels run (asked of MLX once a process).
func (f *Frame) onCUDAStream() bool {
	if f.onCPU() {
		return false
	}
	cudaOnce.Do(cudaInit)
	return cudaOn
}

func cudaInit() {
	cudaOn, _ = CUDAAvailable()
	layerKernels.Store(os.Getenv("PROVIDER_GPU_LAYER_KERNELS") != "0")
}

// layerKernelsOn reports whether HeadsRoPE and SwiGLUHalves take their
// CUDA kernels: on a CUDA stream unless PROVIDER_GPU_LAYER_KERNELS=0 (read
// once).
func (f *Frame) layerKernelsOn() bool { return f.onCUDAStream() && layerKernels.Load() }

// SetLayerKernels turns HeadsRoPE's and SwiGLUHalves's CUDA kernels on or
// off (PROVIDER_GPU_LAYER_KERNELS's setting) and returns the setting before:
// for tests and benchmarks that compare the two in one process.
func SetLayerKernels(on bool) bool {
	cudaOnce.Do(cudaInit)
	return layerKernels.Swap(on)
}

// KVStore is where a q/k/v kernel may also write the keys and values it
// makes: a KV pool's key and value arrays K and V [slots, kvHeads,
// headDim], of the activations' type, and each token's row of them,
// Slots [N] int32 (kvpool.Batch.KernelStore). The zero KVStore asks for
// no store.
type KVStore struct{ K, V, Slots Array }

// HeadsRoPE splits a fused q/k/v projection y [..., N, (heads + 2*kvHeads)
// * headDim] (each token's query heads, then its key heads, then its value
// heads) into q [N, heads, headDim], k and v [N, kvHeads, headDim], q and
// k rotated as RoPEOffsets rotates them, each token at its own position
// (positions [N] int32). On a CUDA stream (unless PROVIDER_GPU_LAYER_KERNELS=0)
// it is one kernel, its three results one primitive; elsewhere it is MLX
// ops (views of y and one RoPE over q's and k's heads).
//
// The kernel also writes k and v into kv's pool, in place, where kv holds
// one that fits (stored then true): MLX sees the pool as an input only,
// so the caller must read the pool after this step's writes only through
// ops that take q (kvpool's attention does).
func (f *Frame) HeadsRoPE(y Array, heads, kvHeads, headDim, dims int, traditional bool, base, scale float32, positions, freqs Array, kv KVStore) (q, k, v Array, stored bool) {
	if !f.ready("heads_rope", []Array{y, positions}) {
		return
	}
	if f.layerKernelsOn() {
		var st C.bool
		out := f.vec("heads_rope", func(r *C.mlx_vector_array) C.int {
			b := C.mlx_optional_float{value: C.float(base), has_value: C.bool(!freqs.Valid())}
			return C.mlx_cuda_heads_rope(r, y.c, C.int(heads), C.int(kvHeads), C.int(headDim), C.int(dims), C.bool(traditional),
				b, C.float(scale), positions.c, freqs.c, kv.K.c, kv.V.c, kv.Slots.c, &st, f.s.c)
		}, 3)
		return out[0], out[1], out[2], bool(st) && f.err == nil
	}
	q, k, v = f.headsRoPEOps(y, heads, kvHeads, headDim, dims, traditional, base, scale, positions, freqs)
	return q, k, v, false
}

// headsRoPEOps is HeadsRoPE through MLX ops, on any stream.
func (f *Frame) headsRoPEOps(y Array, heads, kvHeads, headDim, dims int, traditional bool, base, scale float32, positions, freqs Array) (q, k, v Array) {
	N := positions.Dim(0)
	t := f.Reshape(y, N, heads+2*kvHeads, 1, headDim)
	part := func(lo, n int) Array { return f.Slice(t, []int{0, lo, 0, 0}, []int{N, lo + n, 1, headDim}) }
	flat := func(a Array, n int) Array { return f.Reshape(a, N, n, headDim) }
	rope := func(a Array) Array { return f.RoPEOffsets(a, dims, traditional, base, scale, positions, freqs) }
	v = flat(part(heads+kvHeads, kvHeads), kvHeads)
	if N > 1 {
		return flat(rope(part(0, heads)), heads), flat(rope(part(heads, kvHeads)), kvHeads), v
	}
	// One token: one rotation over q's and k's heads together (a kernel
	// fewer), whose views of them stay contiguous.
	qk := flat(rope(part(0, heads+kvHeads)), heads+kvHeads)
	q = f.Slice(qk, []int{0, 0, 0}, []int{1, heads, headDim})
	k = f.Slice(qk, []int{0, heads, 0}, []int{1, heads + kvHeads, headDim})
	return q, k, v
}

// SwiGLUHalves is SwiGLU(x[..., :F], x[..., F:]) for x [..., 2F] (a fused
// gate/up projection's output): on a CUDA stream one kernel (unless
// PROVIDER_GPU_LAYER_KERNELS=0), elsewhere two views and SwiGLU.
func (f *Frame) SwiGLUHalves(x Array) Array {
	if f.layerKernelsOn() {
		return f.op("swiglu_halves", func(r *C.mlx_array) C.int { return C.mlx_cuda_swiglu_halves(r, x.c, f.s.c) }, x)
	}
	return f.swigluHalvesOps(x)
}

// swigluHalvesOps is SwiGLUHalves through MLX ops, on any stream.
func (f *Frame) swigluHalvesOps(x Array) Array {
	if !f.ready("swiglu_halves", []Array{x}) {
		return Array{}
	}
	gu := f.Split(x, 2, x.Ndim()-1)
	return f.SwiGLU(gu[0], gu[1])
}

// PagedDecode is one layer's attention of P single-token queries q [P, H,
// D] over a paged KV pool, as one CUDA kernel (MLX compiles it on first use
// of each dtype, head size, window and scale). kPool and vPool are [slots,
// KVHeads, D] in q's dtype; table [R, MB] int32 holds each row's blocks of
// block slots; meta [P, 3] int32 holds each query's row, position and last
// visible position. A query sees the keys of its row from max(0, position
// - window + 1) (0 when window is 0) through its last visible position;
// heads share a key head in groups of H / KVHeads; sinks [H] (invalid for
// none) is one logit per head in each softmax's denominator. Each warp of
// a query's block takes keys consecutive keys per turn (1 to 8: loads in
// flight against registers). The result is
// [P, H, D] in q's dtype. It runs only on a CUDA stream: elsewhere the
// frame fails, and callers use the MLX-ops attention (Attention over
// gathered keys), which computes the same.
//
// split computes the same in two kernels: the first takes one block of a
// row's table per block of threads (so a few rows at a long context still
// fill the GPU), the second merges each query's blocks in order. A row
// splits at its own block boundaries, so a query's result does not depend
// on the other rows of the call.
func (f *Frame) PagedDecode(q, kPool, vPool, table, meta Array, block, window int, scale float32, sinks Array, keys int, split bool) Array {
	return f.op("paged_decode", func(r *C.mlx_array) C.int {
		return C.mlx_cuda_paged_decode(r, q.c, kPool.c, vPool.c, table.c, meta.c, C.int(block), C.int(window),
			C.float(scale), sinks.c, C.int(keys), C.bool(split), f.s.c)
	}, q, kPool, vPool, table, meta)
}

// SetAffineMMA turns the affine tensor-core kernel (PROVIDER_GPU_QMMA) on
// or off for AffineLinear's next products on a CUDA stream and returns the
// setting before: for tests and benchmarks that compare it with the other
// products in one process. Without a CUDA device it stays off.
func SetAffineMMA(on bool) bool { return bool(C.mlx_cuda_set_qmma(C.bool(on))) }

// reloadGemvEnv makes the next affine product read PROVIDER_GPU_QMV and
// PROVIDER_GPU_QMV_ROWS again (they are read once otherwise): for tests
// and benchmarks that change them between products.
func reloadGemvEnv() { C.mlx_cuda_gemv_reload() }

// SetFusedGemv sets how far the matrix-vector products fuse
// (PROVIDER_GPU_QMV_FUSED) for the next products and returns the setting
// before: 0 not at all, 1 (the default) with what the layer does next
// (AffineLinearAdd, AffineLinearSwiGLU and AffineLinearHeadsRoPE as one
// kernel each), 2 also with the RMSNorm before (their norm argument; not
// the floats of MLX's RMSNorm apart, and on an H100 no faster). For tests
// and benchmarks that compare them with the separate ops in one process.
func SetFusedGemv(level int) int { return int(C.mlx_cuda_set_qmv_fused(C.int(level))) }

// AffineLinearAdd is res + AffineLinear(x, w, scales, biases, groupSize,
// bits), res shaped as the product (a residual connection). On a CUDA
// stream, where the matrix-vector kernel takes the product (a few rows of
// x), it is one kernel that adds as it stores, with the same floats as the
// two ops; elsewhere it is the two ops.
func (f *Frame) AffineLinearAdd(x, w, scales, biases Array, groupSize, bits int, res Array) Array {
	if f.onCUDAStream() {
		out, ok := f.fusedGemv("affine_gemv_add", 1, func(r *C.mlx_vector_array) C.int {
			return C.mlx_cuda_affine_gemv_add(r, x.c, w.c, scales.c, biases.c, C.int(groupSize), C.int(bits), res.c, f.s.c)
		}, x, w, scales, biases, res)
		if ok {
			return out[0]
		}
	}
	return f.Add(res, f.AffineLinear(x, w, scales, biases, groupSize, bits))
}

// AffineLinearSwiGLU is SwiGLUHalves(AffineLinear(RMSNorm(x, norm, eps),
// w, scales, biases, groupSize, bits)) for a fused gate/up projection w,
// without the RMSNorm where norm is invalid. On a CUDA stream, where the
// matrix-vector kernel takes the product and the layer kernels are on, the
// product and the activation are one kernel, with the same floats as the
// ops; the RMSNorm stays MLX's unless PROVIDER_GPU_QMV_FUSED=2 moves it
// into the kernel, which does not round the normalized x to x's type as
// RMSNorm's result is. Elsewhere it is the ops.
func (f *Frame) AffineLinearSwiGLU(x, w, scales, biases Array, groupSize, bits int, norm Array, eps float32) Array {
	if f.layerKernelsOn() {
		out, ok := f.fusedGemv("affine_gemv_swiglu", 1, func(r *C.mlx_vector_array) C.int {
			return C.mlx_cuda_affine_gemv_swiglu(r, x.c, w.c, scales.c, biases.c, C.int(groupSize), C.int(bits), norm.c,
				C.float(eps), f.s.c)
		}, x, w, scales, biases)
		if ok {
			return out[0]
		}
	}
	return f.SwiGLUHalves(f.AffineLinear(f.RMSNormIf(x, norm, eps), w, scales, biases, groupSize, bits))
}

// AffineLinearHeadsRoPE is HeadsRoPE(AffineLinear(RMSNorm(x, norm, eps),
// w, scales, biases, groupSize, bits), ...) for a fused q/k/v projection
// w, without the RMSNorm where norm is invalid: one kernel or the ops, as
// AffineLinearSwiGLU, k and v written into kv's pool as HeadsRoPE writes
// them.
func (f *Frame) AffineLinearHeadsRoPE(x, w, scales, biases Array, groupSize, bits int, norm Array, eps float32, heads, kvHeads, headDim, dims int, traditional bool, base, scale float32, positions, freqs Array, kv KVStore) (q, k, v Array, stored bool) {
	if f.layerKernelsOn() {
		in := []Array{x, w, scales, biases, positions}
		if freqs.Valid() {
			in = append(in, freqs)
		}
		var st C.bool
		out, ok := f.fusedGemv("affine_gemv_heads_rope", 3, func(r *C.mlx_vector_array) C.int {
			b := C.mlx_optional_float{value: C.float(base), has_value: C.bool(!freqs.Valid())}
			return C.mlx_cuda_affine_gemv_heads_rope(r, x.c, w.c, scales.c, biases.c, C.int(groupSize), C.int(bits),
				norm.c, C.float(eps), C.int(heads), C.int(kvHeads), C.int(headDim), C.int(dims), C.bool(traditional), b,
				C.float(scale), positions.c, freqs.c, kv.K.c, kv.V.c, kv.Slots.c, &st, f.s.c)
		}, in...)
		if ok {
			return out[0], out[1], out[2], bool(st) && f.err == nil
		}
	}
	return f.HeadsRoPE(f.AffineLinear(f.RMSNormIf(x, norm, eps), w, scales, biases, groupSize, bits), heads, kvHeads, headDim,
		dims, traditional, base, scale, positions, freqs, kv)
}

// RMSNormIf is RMSNorm(x, norm, eps), or x where norm is invalid.
func (f *Frame) RMSNormIf(x, norm Array, eps float32) Array {
	if norm.Valid() {
		return f.RMSNorm(x, norm, eps)
	}
	return x
}

// fusedGemv runs call, one of the fused matrix-vector products, which
// makes want arrays, or none where its kernel does not take the product:
// then ok is false and the frame unchanged, for the caller to build the
// separate ops. A failed call fails the frame (ok true, empty arrays).
func (f *Frame) fusedGemv(name string, want int, call func(res *C.mlx_vector_array) C.int, inputs ...Array) (out []Array, ok bool) {
	out = f.vecAny(name, call, inputs...)
	switch {
	case f.err != nil:
		return make([]Array, want), true
	case len(out) == 0:
		return nil, false
	case len(out) != want:
		f.err = fmt.Errorf("%s: %d results, want %d", name, len(out), want)
		return make([]Array, want), true
	}
	return out, true
}

// GatherFP4 is a mixture's expert products for MXFP4 expert stacks, where
// its CUDA kernel takes them: y [P, N] holds, for each routed pair p (of
// idx [P], int32 or uint32, each an expert of w), x[p / topk] @
// dequantize(w[idx[p]]).T, plus bias[idx[p]] where bias [E, N] (x's type)
// is valid, rounded as the product and the sum apart would be. x is
// [rows, K] with topk = P / rows pairs a row, w [E, N, K / 8] uint32 and
// scales [E, N, K / 32] uint8 (MLX's "mxfp4" mode, groups of 32). The
// kernel reads each expert's weights once for up to four of its pairs,
// where MLX's gather_qmm reads them once for every pair; it takes up to
// 1,024 pairs where GatherFP4On holds. Where it does not run, ok is false
// and the frame unchanged, for the caller to build GatherQMM's products; a
// failed call fails the frame (ok true).
func (f *Frame) GatherFP4(x, w, scales, idx, bias Array) (y Array, ok bool) {
	if !f.GatherFP4On() {
		return Array{}, false
	}
	in := []Array{x, w, scales, idx}
	if bias.Valid() {
		in = append(in, bias)
	}
	out, ok := f.fusedGemv("gather_fp4", 1, func(r *C.mlx_vector_array) C.int {
		return C.mlx_cuda_gather_fp4(r, x.c, w.c, scales.c, idx.c, bias.c, f.s.c)
	}, in...)
	if !ok {
		return Array{}, false
	}
	return out[0], true
}

var (
	gatherFP4Once sync.Once
	gatherFP4     atomic.Bool
)

// GatherFP4On reports whether GatherFP4's kernel may run on the frame's
// stream: a CUDA stream, with PROVIDER_GPU_GATHER_FP4=1 (read once) or
// SetGatherFP4 on. It is off by default until a device has run
// TestGatherFP4CUDA in full (its host emulation, scripts/gpu/fp4_emulate.py,
// and NVRTC's compile of it pass).
func (f *Frame) GatherFP4On() bool {
	gatherFP4Once.Do(readGatherFP4)
	return f.onCUDAStream() && gatherFP4.Load()
}

func readGatherFP4() { gatherFP4.Store(os.Getenv("PROVIDER_GPU_GATHER_FP4") == "1") }

// SetGatherFP4 turns GatherFP4's kernel on or off
// (PROVIDER_GPU_GATHER_FP4's setting) and returns the setting before: for
// tests and benchmarks that compare it with GatherQMM in one process.
func SetGatherFP4(on bool) bool {
	gatherFP4Once.Do(readGatherFP4)
	return gatherFP4.Swap(on)
}
