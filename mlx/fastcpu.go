package mlx

/*
#include <stdlib.h>
#include "fastcpu.h"
*/
import "C"

import (
	"fmt"
	"os"
	"strconv"
	"unsafe"
)

// AffineLinear computes x @ dequantize(w).T for MLX affine quantized
// weights. On a CPU stream with 4- or 8-bit weights it runs the package's
// weight-stationary kernel (fastcpu.cpp): a row's weights are unpacked once
// for every activation row of the step, so a batch of rows costs far less
// than that many single rows, and each output is the same float whatever
// the batch. Elsewhere it is QuantizedMatMul. Setting PROVIDER_CPU_QMM=mlx
// in the environment selects MLX's own CPU kernel instead (for comparison).
func (f *Frame) AffineLinear(x, w, scales, biases Array, groupSize, bits int) Array {
	return f.op("affine_linear", func(r *C.mlx_array) C.int {
		return C.mlx_fast_affine_linear(r, x.c, w.c, scales.c, biases.c, C.int(groupSize), C.int(bits), f.s.c)
	}, x, w, scales, biases)
}

// AffineLinearQ8 is AffineLinear with the activations quantized to signed
// 8-bit blocks of 32 elements, each with a float scale max|x|/127 (as
// llama.cpp's Q8 activation blocks), and the products taken in integers
// with AVX-512 VNNI or AVX2, faster than the float kernel at every batch
// size. Each output is the same float whatever the batch. Where the
// processor lacks AVX2, the input length is not whole chunks of 64 or the
// groups are not whole blocks of 32 (a power of two up to 512), it is
// AffineLinear.
func (f *Frame) AffineLinearQ8(x, w, scales, biases Array, groupSize, bits int) Array {
	return f.op("affine_linear_q8", func(r *C.mlx_array) C.int {
		return C.mlx_fast_affine_linear_q8(r, x.c, w.c, scales.c, biases.c, C.int(groupSize), C.int(bits), f.s.c)
	}, x, w, scales, biases)
}

// CPUInt8 reports whether AffineLinearQ8 takes its integer path on this
// processor (AVX2, or AVX-512 VNNI); 4- and 8-bit weights can then also be
// packed for AffineLinearPacked (PackedQ8).
func CPUInt8() bool { return C.mlx_fast_cpu_int8() != 0 }

// SetCPUThreads sets how many threads the CPU kernels use (0: one per
// hardware thread, the default unless PROVIDER_CPU_THREADS is set) and
// returns the number now in use.
func SetCPUThreads(n int) int { return int(C.mlx_fast_cpu_threads(C.int(n))) }

// SetCPUSpin sets how many microseconds the CPU kernels' threads wait
// awake for the next kernel before they sleep (200 unless set; negative:
// 0), and returns the previous setting. A server that owns the processors
// wants them awake across the host's work between two decode steps
// (ServeCPUSpin); awake threads slow other processes that share the
// processors.
func SetCPUSpin(us int) int { return int(C.mlx_fast_cpu_spin(C.int(us))) }

// ServeCPUSpin is the kernel threads' wait (SetCPUSpin) for a process that
// serves a model: PROVIDER_CPU_SPIN_US's value, a count of microseconds,
// or 2000 where it is unset.
func ServeCPUSpin() (int, error) {
	v := os.Getenv("PROVIDER_CPU_SPIN_US")
	if v == "" {
		return 2000, nil
	}
	us, err := strconv.Atoi(v)
	if err != nil || us < 0 {
		return 0, fmt.Errorf("PROVIDER_CPU_SPIN_US=%q: want a count of microseconds", v)
	}
	return us, nil
}

// UseServeCPUSpin sets the kernel threads' wait to ServeCPUSpin's and
// returns a function that puts back the wait it replaced.
func UseServeCPUSpin() (restore func(), err error) {
	us, err := ServeCPUSpin()
	if err != nil {
		return nil, err
	}
	before := SetCPUSpin(us)
	return func() { SetCPUSpin(before) }, nil
}

// The MLX implementations the fused CPU ops replace, for comparison in
// tests.

func (f *Frame) mlxRMSNorm(x, weight Array, eps float32) Array {
	return f.op("rms_norm", func(r *C.mlx_array) C.int {
		return C.mlx_fast_rms_norm(r, x.c, weight.c, C.float(eps), f.s.c)
	}, x)
}

func (f *Frame) mlxRoPE(x Array, dims int, traditional bool, base, scale float32, offset int, offsets, freqs Array) Array {
	b := C.mlx_optional_float{value: C.float(base), has_value: C.bool(!freqs.Valid())}
	return f.op("rope", func(r *C.mlx_array) C.int {
		if offsets.Valid() {
			return C.mlx_fast_rope_dynamic(r, x.c, C.int(dims), C.bool(traditional), b, C.float(scale), offsets.c, freqs.c, f.s.c)
		}
		return C.mlx_fast_rope(r, x.c, C.int(dims), C.bool(traditional), b, C.float(scale), C.int(offset), freqs.c, f.s.c)
	}, x)
}

func (f *Frame) mlxAttention(q, k, v Array, scale float32, maskMode string, sinks Array) Array {
	cmode := C.CString(maskMode)
	defer C.free(unsafe.Pointer(cmode))
	return f.op("scaled_dot_product_attention", func(r *C.mlx_array) C.int {
		return C.mlx_fast_scaled_dot_product_attention(r, q.c, k.c, v.c, C.float(scale), cmode, C.mlx_array{}, sinks.c, f.s.c)
	}, q, k, v)
}

// PagedAttention is one layer's attention over a paged KV pool, as one
// primitive on the CPU stream (float32): it writes kNew and vNew ([N, KVH,
// D]; invalid for a layer that reads another layer's pool) into kPool and
// vPool ([slots, KVH, D], made by NewBuffer) at slots, in place, then
// query token i of q [N, H, D], of row meta[i][0] at position p =
// meta[i][1], attends over its row's positions max(0, p-window+1) ..
// meta[i][2] (window 0: from 0; meta[i][2] is p for causal attention, the
// end of a bidirectional span for its tokens), found at slot
// table[row][pos/block]*block + pos%block. sinks (may be invalid) adds one logit per head to each
// softmax's denominator. The result is [N, H, D].
func (f *Frame) PagedAttention(q, kNew, vNew, kPool, vPool, slots, table, meta Array, block, window int, scale float32, sinks Array) Array {
	in := []Array{q, kPool, vPool, table, meta}
	if kNew.Valid() {
		in = append(in, kNew, vNew, slots)
	}
	return f.op("paged_attention", func(r *C.mlx_array) C.int {
		return C.mlx_fast_paged_attention(r, q.c, kNew.c, vNew.c, kPool.c, vPool.c, slots.c, table.c, meta.c,
			C.int(block), C.int(window), C.float(scale), sinks.c, f.s.c)
	}, in...)
}

// NewBuffer allocates an evaluated, row-contiguous, caller-owned array on
// stream s: uninitialized on the CPU (pages never touched cost no memory),
// zeros elsewhere.
func NewBuffer(s Stream, d Dtype, shape ...int) (Array, error) {
	cs := cShape(shape)
	res := C.mlx_array_new()
	if C.mlx_fast_buffer(&res, ptr(cs), C.size_t(len(cs)), C.mlx_dtype(d), s.c) != 0 {
		return Array{}, lastError("buffer")
	}
	return Array{res}, nil
}

// GrowBuffer returns a caller-owned copy of a NewBuffer array whose first
// dimension is grown to rows, once the stream's pending work is done. The
// old array stays the caller's to free.
func GrowBuffer(s Stream, old Array, rows int) (Array, error) {
	res := C.mlx_array_new()
	if C.mlx_fast_buffer_grow(&res, old.c, C.int(rows), s.c) != 0 {
		return Array{}, lastError("buffer_grow")
	}
	return Array{res}, nil
}

// IsCPU reports whether the stream runs on the CPU.
func (s Stream) IsCPU() bool { return C.mlx_fast_stream_is_cpu(s.c) == 1 }

// CPUThreads is how many threads the CPU kernels use.
func CPUThreads() int { return int(C.mlx_fast_cpu_threads_in_use()) }

// Version is the version of the MLX library the binary runs on.
func Version() string { return C.GoString(C.mlx_fast_version()) }

// PackedQ8 reports whether PackQ8 takes weights of k inputs at bits on
// this processor: AVX2 or AVX-512 VNNI, 4- or 8-bit weights, k whole
// blocks of 32.
func PackedQ8(k, bits int) bool { return C.mlx_fast_packed_ok(C.int(k), C.int(bits)) == 1 }

// PackQ8 repacks 2-D affine quantized weights (groups a multiple of 32)
// for AffineLinearPacked, now, on CPU stream s: w as uint8 [n, k*bits/8]
// in the kernel's order, scales and biases as one per block of 32 inputs
// [n, k/32] (a group's repeated), in their type. The results are
// caller-owned; the inputs stay the caller's.
func PackQ8(s Stream, w, scales, biases Array, groupSize, bits int) (pw, ps, pb Array, err error) {
	pw, ps, pb = Array{C.mlx_array_new()}, Array{C.mlx_array_new()}, Array{C.mlx_array_new()}
	if C.mlx_fast_pack_q8(&pw.c, &ps.c, &pb.c, w.c, scales.c, biases.c, C.int(groupSize), C.int(bits), s.c) != 0 {
		pw.Free()
		ps.Free()
		pb.Free()
		return Array{}, Array{}, Array{}, lastError("pack_q8")
	}
	return pw, ps, pb, nil
}

// AffineLinearPacked is AffineLinearQ8 over weights PackQ8 repacked: the
// same 8-bit activation blocks, with each block's integer products summed
// before any float arithmetic (16 blocks to a register), several times
// fewer instructions per product. Each output is the same float whatever
// the batch and thread split (not the same float as AffineLinearQ8: the
// sums are grouped differently). CPU only.
func (f *Frame) AffineLinearPacked(x, pw, ps, pb Array, bits int) Array {
	return f.op("affine_linear_packed", func(r *C.mlx_array) C.int {
		return C.mlx_fast_affine_linear_packed(r, x.c, pw.c, ps.c, pb.c, C.int(bits), f.s.c)
	}, x, pw, ps, pb)
}

// PackedEmbed gathers rows ids of weights PackQ8 repacked, dequantized as
// Dequantize would the originals (in the scales' type), [ids..., k]. CPU
// only.
func (f *Frame) PackedEmbed(ids, pw, ps, pb Array, bits int) Array {
	return f.op("packed_embed", func(r *C.mlx_array) C.int {
		return C.mlx_fast_packed_embed(r, ids.c, pw.c, ps.c, pb.c, C.int(bits), f.s.c)
	}, ids, pw, ps, pb)
}
