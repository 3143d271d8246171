package mlx

/*
#include <stdlib.h>
#include "mlxc.h"
#include "fastcpu.h"
*/
import "C"

import (
	"errors"
	"fmt"
	"math"
	"os"
	"unsafe"
)

// Frame owns the intermediate arrays of one unit of work (a forward pass, a
// sampling step) and carries its first error.
type Frame struct {
	s     Stream
	owned []C.mlx_array
	err   error
	// res is where ops write their result handle: C memory, so that
	// passing it to C costs no check of Go pointers (a step makes about a
	// thousand ops). Made by the first op, freed by Free; inOp keeps an
	// op made inside another's call from sharing it.
	res  *C.mlx_array
	inOp bool
	// cpu caches whether s is a CPU stream (asked of MLX by several ops
	// a layer): 0 not yet asked, 1 yes, 2 no.
	cpu int8
}

// NewFrame starts a frame whose ops run on s.
func NewFrame(s Stream) *Frame { return &Frame{s: s} }

// onCPU reports whether the frame's stream is a CPU stream.
func (f *Frame) onCPU() bool {
	if f.cpu == 0 {
		f.cpu = 2
		if f.s.IsCPU() {
			f.cpu = 1
		}
	}
	return f.cpu == 1
}

// Err is the frame's first error.
func (f *Frame) Err() error { return f.err }

// Fail records err as the frame's error unless one is already recorded.
func (f *Frame) Fail(err error) {
	if f.err == nil {
		f.err = err
	}
}

// Free releases every array the frame owns, in one call into C. The
// frame stays usable.
func (f *Frame) Free() {
	if len(f.owned) > 0 {
		C.mlx_array_free_n(&f.owned[0], C.size_t(len(f.owned)))
	}
	f.owned = f.owned[:0]
	if f.res != nil {
		C.free(unsafe.Pointer(f.res))
		f.res = nil
	}
}

// Keep returns a caller-owned reference to a; the frame's own reference is
// still released by Free.
func (f *Frame) Keep(a Array) Array {
	if !a.Valid() {
		return Array{}
	}
	return a.Clone()
}

// Detach hands the frame's own reference to a, the frame's newest array, to
// the caller, so that the frame no longer holds it (an array the frame
// still held could not be updated in place by a later step while the
// frame lives). It fails the frame when a is not its newest array.
func (f *Frame) Detach(a Array) Array {
	if !a.Valid() {
		return Array{}
	}
	n := len(f.owned)
	if n == 0 || f.owned[n-1] != a.c {
		f.Fail(errors.New("mlx: Detach of an array that is not the frame's newest"))
		return Array{}
	}
	f.owned = f.owned[:n-1]
	return a
}

// Track hands a caller-owned array to the frame.
func (f *Frame) Track(a Array) Array {
	if a.Valid() {
		f.owned = append(f.owned, a.c)
	}
	return a
}

func (f *Frame) op(name string, call func(res *C.mlx_array) C.int, inputs ...Array) Array {
	if !f.ready(name, inputs) {
		return Array{}
	}
	var res C.mlx_array
	var ok bool
	if f.inOp {
		res, ok = callNested(call)
	} else {
		if f.res == nil {
			f.res = (*C.mlx_array)(C.malloc(C.size_t(unsafe.Sizeof(res))))
		}
		*f.res = C.mlx_array{} // empty, as mlx_array_new makes it
		f.inOp = true
		ok = call(f.res) == 0
		f.inOp = false
		res = *f.res
	}
	if !ok {
		f.err = lastError(name)
		if res.ctx != 0 {
			C.mlx_array_free(res)
		}
		return Array{}
	}
	f.owned = append(f.owned, res)
	return Array{res}
}

// ready reports whether an op can run: the frame has not failed and
// every input is an array (else the frame fails with ErrEmpty).
func (f *Frame) ready(name string, inputs []Array) bool {
	if f.err != nil {
		return false
	}
	for _, in := range inputs {
		if !in.Valid() {
			f.err = fmt.Errorf("%s: %w", name, ErrEmpty)
			return false
		}
	}
	return true
}

// vec is op for a call that makes n arrays.
func (f *Frame) vec(name string, call func(res *C.mlx_vector_array) C.int, n int, inputs ...Array) []Array {
	out := f.vecAny(name, call, inputs...)
	if f.err == nil && len(out) != n {
		f.err = fmt.Errorf("%s: %d results, want %d", name, len(out), n)
	}
	if f.err != nil {
		return make([]Array, n)
	}
	return out
}

// vecAny is op for a call that makes any number of arrays (none on error).
func (f *Frame) vecAny(name string, call func(res *C.mlx_vector_array) C.int, inputs ...Array) []Array {
	if !f.ready(name, inputs) {
		return nil
	}
	v := C.mlx_vector_array_new()
	defer C.mlx_vector_array_free(v)
	if err := check(name, call(&v)); err != nil {
		f.err = err
		return nil
	}
	out := make([]Array, int(C.mlx_vector_array_size(v)))
	for i := range out {
		res := C.mlx_array_new()
		C.mlx_vector_array_get(&res, v, C.size_t(i))
		out[i] = f.Track(Array{res})
	}
	return out
}

// callNested runs an op's call made inside another op's call, with a
// handle of its own.
func callNested(call func(res *C.mlx_array) C.int) (C.mlx_array, bool) {
	var res C.mlx_array
	ok := call(&res) == 0
	return res, ok
}

// Eval evaluates arrays, recording any error on the frame.
func (f *Frame) Eval(arrays ...Array) error { return f.eval(Eval, arrays) }

// eval runs one of the package's evaluations on arrays unless the frame
// has failed, and keeps its error.
func (f *Frame) eval(run func(...Array) error, arrays []Array) error {
	if f.err != nil {
		return f.err
	}
	if err := run(arrays...); err != nil {
		f.err = err
	}
	return f.err
}

// EvalStepwise evaluates arrays one primitive at a time (see
// EvalStepwise) unless the frame has failed.
func (f *Frame) EvalStepwise(arrays ...Array) error { return f.eval(EvalStepwise, arrays) }

// AsyncEval queues the evaluation of arrays (see AsyncEval) unless the
// frame has failed.
func (f *Frame) AsyncEval(arrays ...Array) error { return f.eval(AsyncEval, arrays) }

// Scalar returns a frame-owned float32 scalar.
func (f *Frame) Scalar(v float32) Array { return f.Track(Scalar(v)) }

// ScalarInt returns a frame-owned int32 scalar.
func (f *Frame) ScalarInt(v int) Array { return f.Track(ScalarInt(v)) }

// Int32s returns a frame-owned int32 array holding data.
func (f *Frame) Int32s(data []int32, shape ...int) Array {
	if f.err != nil {
		return Array{}
	}
	a, err := FromInt32s(data, shape...)
	if err != nil {
		f.err = err
		return Array{}
	}
	return f.Track(a)
}

// Float32s returns a frame-owned float32 array holding data.
func (f *Frame) Float32s(data []float32, shape ...int) Array {
	if f.err != nil {
		return Array{}
	}
	a, err := FromFloat32s(data, shape...)
	if err != nil {
		f.err = err
		return Array{}
	}
	return f.Track(a)
}

// Element-wise arithmetic with broadcasting.
func (f *Frame) Add(a, b Array) Array {
	return f.op("add", func(r *C.mlx_array) C.int { return C.mlx_add(r, a.c, b.c, f.s.c) }, a, b)
}
func (f *Frame) Subtract(a, b Array) Array {
	return f.op("subtract", func(r *C.mlx_array) C.int { return C.mlx_subtract(r, a.c, b.c, f.s.c) }, a, b)
}
func (f *Frame) Multiply(a, b Array) Array {
	return f.op("multiply", func(r *C.mlx_array) C.int { return C.mlx_multiply(r, a.c, b.c, f.s.c) }, a, b)
}
func (f *Frame) Divide(a, b Array) Array {
	return f.op("divide", func(r *C.mlx_array) C.int { return C.mlx_divide(r, a.c, b.c, f.s.c) }, a, b)
}
func (f *Frame) Maximum(a, b Array) Array {
	return f.op("maximum", func(r *C.mlx_array) C.int { return C.mlx_maximum(r, a.c, b.c, f.s.c) }, a, b)
}
func (f *Frame) Minimum(a, b Array) Array {
	return f.op("minimum", func(r *C.mlx_array) C.int { return C.mlx_minimum(r, a.c, b.c, f.s.c) }, a, b)
}
func (f *Frame) Power(a, b Array) Array {
	return f.op("power", func(r *C.mlx_array) C.int { return C.mlx_power(r, a.c, b.c, f.s.c) }, a, b)
}
func (f *Frame) Greater(a, b Array) Array {
	return f.op("greater", func(r *C.mlx_array) C.int { return C.mlx_greater(r, a.c, b.c, f.s.c) }, a, b)
}
func (f *Frame) Less(a, b Array) Array {
	return f.op("less", func(r *C.mlx_array) C.int { return C.mlx_less(r, a.c, b.c, f.s.c) }, a, b)
}
func (f *Frame) Equal(a, b Array) Array {
	return f.op("equal", func(r *C.mlx_array) C.int { return C.mlx_equal(r, a.c, b.c, f.s.c) }, a, b)
}
func (f *Frame) MatMul(a, b Array) Array {
	return f.op("matmul", func(r *C.mlx_array) C.int { return C.mlx_matmul(r, a.c, b.c, f.s.c) }, a, b)
}

// Element-wise functions.
func (f *Frame) Negative(a Array) Array {
	return f.op("negative", func(r *C.mlx_array) C.int { return C.mlx_negative(r, a.c, f.s.c) }, a)
}
func (f *Frame) Exp(a Array) Array {
	return f.op("exp", func(r *C.mlx_array) C.int { return C.mlx_exp(r, a.c, f.s.c) }, a)
}
func (f *Frame) Log(a Array) Array {
	return f.op("log", func(r *C.mlx_array) C.int { return C.mlx_log(r, a.c, f.s.c) }, a)
}
func (f *Frame) Sqrt(a Array) Array {
	return f.op("sqrt", func(r *C.mlx_array) C.int { return C.mlx_sqrt(r, a.c, f.s.c) }, a)
}
func (f *Frame) Rsqrt(a Array) Array {
	return f.op("rsqrt", func(r *C.mlx_array) C.int { return C.mlx_rsqrt(r, a.c, f.s.c) }, a)
}
func (f *Frame) Square(a Array) Array {
	return f.op("square", func(r *C.mlx_array) C.int { return C.mlx_square(r, a.c, f.s.c) }, a)
}
func (f *Frame) Sigmoid(a Array) Array {
	return f.op("sigmoid", func(r *C.mlx_array) C.int { return C.mlx_sigmoid(r, a.c, f.s.c) }, a)
}
func (f *Frame) Tanh(a Array) Array {
	return f.op("tanh", func(r *C.mlx_array) C.int { return C.mlx_tanh(r, a.c, f.s.c) }, a)
}
func (f *Frame) Erf(a Array) Array {
	return f.op("erf", func(r *C.mlx_array) C.int { return C.mlx_erf(r, a.c, f.s.c) }, a)
}
func (f *Frame) Cos(a Array) Array {
	return f.op("cos", func(r *C.mlx_array) C.int { return C.mlx_cos(r, a.c, f.s.c) }, a)
}
func (f *Frame) Sin(a Array) Array {
	return f.op("sin", func(r *C.mlx_array) C.int { return C.mlx_sin(r, a.c, f.s.c) }, a)
}
func (f *Frame) Copy(a Array) Array {
	return f.op("copy", func(r *C.mlx_array) C.int { return C.mlx_copy(r, a.c, f.s.c) }, a)
}

// Abs is the element-wise absolute value.
func (f *Frame) Abs(a Array) Array {
	return f.op("abs", func(r *C.mlx_array) C.int { return C.mlx_abs(r, a.c, f.s.c) }, a)
}

// Round rounds to the nearest value with decimals digits (ties to even).
func (f *Frame) Round(a Array, decimals int) Array {
	return f.op("round", func(r *C.mlx_array) C.int { return C.mlx_round(r, a.c, C.int(decimals), f.s.c) }, a)
}

// SiLU is x * sigmoid(x).
func (f *Frame) SiLU(x Array) Array { return f.Multiply(x, f.Sigmoid(x)) }

// SwiGLU is SiLU(g) * u, as one fused primitive: on a GPU a compiled
// kernel, on the CPU (float32) the package's vectorized one (fastcpu.cpp;
// MLX's CPU sigmoid is scalar and was a sixth of a prefill step).
func (f *Frame) SwiGLU(g, u Array) Array {
	if f.onCPU() {
		return f.op("swiglu", func(r *C.mlx_array) C.int { return C.mlx_fast_cpu_swiglu(r, g.c, u.c, f.s.c) }, g, u)
	}
	return f.swigluCompiled(g, u)
}

func (f *Frame) swigluCompiled(g, u Array) Array {
	return f.op("swiglu", func(r *C.mlx_array) C.int { return C.mlx_swiglu_compiled(r, g.c, u.c, f.s.c) }, g, u)
}

// ClampedSwiGLU is gpt-oss's gate: (clip(u, ±limit) + 1) * g' *
// sigmoid(alpha * g') with g' = min(g, limit), each op in g's dtype. On a
// GPU it is one compiled kernel (PROVIDER_GPU_CLAMPED_SWIGLU=0 runs the
// ops one by one); on the CPU the ops, whose results the family's
// reference suites pin.
func (f *Frame) ClampedSwiGLU(g, u Array, alpha, limit float32) Array {
	if f.onCPU() || clampedSwiGLUByOps {
		return f.clampedSwiGLUOps(g, u, alpha, limit)
	}
	return f.clampedSwiGLUCompiled(g, u, alpha, limit)
}

// clampedSwiGLUByOps is PROVIDER_GPU_CLAMPED_SWIGLU=0, read once.
var clampedSwiGLUByOps = os.Getenv("PROVIDER_GPU_CLAMPED_SWIGLU") == "0"

func (f *Frame) clampedSwiGLUOps(g, u Array, alpha, limit float32) Array {
	dt := g.Dtype()
	k := func(v float32) Array { return f.AsType(f.Scalar(v), dt) }
	g = f.Minimum(g, k(limit))
	u = f.Clip(u, k(-limit), k(limit))
	glu := f.Multiply(g, f.Sigmoid(f.Multiply(k(alpha), g)))
	return f.Multiply(f.Add(u, k(1)), glu)
}

func (f *Frame) clampedSwiGLUCompiled(g, u Array, alpha, limit float32) Array {
	return f.op("clamped_swiglu", func(r *C.mlx_array) C.int {
		return C.mlx_clamped_swiglu_compiled(r, g.c, u.c, C.float(alpha), C.float(limit), f.s.c)
	}, g, u)
}

// Where selects x where cond holds, else y.
func (f *Frame) Where(cond, x, y Array) Array {
	return f.op("where", func(r *C.mlx_array) C.int { return C.mlx_where(r, cond.c, x.c, y.c, f.s.c) }, cond, x, y)
}

// Clip bounds a to [lo, hi]; either bound may be the zero Array.
func (f *Frame) Clip(a, lo, hi Array) Array {
	return f.op("clip", func(r *C.mlx_array) C.int { return C.mlx_clip(r, a.c, lo.c, hi.c, f.s.c) }, a)
}

// AsType converts the element type.
func (f *Frame) AsType(a Array, d Dtype) Array {
	if a.Valid() && a.Dtype() == d {
		return a
	}
	return f.op("astype", func(r *C.mlx_array) C.int { return C.mlx_astype(r, a.c, C.mlx_dtype(d), f.s.c) }, a)
}

// Reductions along one axis.
func (f *Frame) Sum(a Array, axis int, keep bool) Array {
	return f.op("sum", func(r *C.mlx_array) C.int { return C.mlx_sum_axis(r, a.c, C.int(axis), C.bool(keep), f.s.c) }, a)
}
func (f *Frame) Mean(a Array, axis int, keep bool) Array {
	return f.op("mean", func(r *C.mlx_array) C.int { return C.mlx_mean_axis(r, a.c, C.int(axis), C.bool(keep), f.s.c) }, a)
}
func (f *Frame) Max(a Array, axis int, keep bool) Array {
	return f.op("max", func(r *C.mlx_array) C.int { return C.mlx_max_axis(r, a.c, C.int(axis), C.bool(keep), f.s.c) }, a)
}
func (f *Frame) Argmax(a Array, axis int, keep bool) Array {
	return f.op("argmax", func(r *C.mlx_array) C.int { return C.mlx_argmax_axis(r, a.c, C.int(axis), C.bool(keep), f.s.c) }, a)
}
func (f *Frame) LogSumExp(a Array, axis int, keep bool) Array {
	return f.op("logsumexp", func(r *C.mlx_array) C.int { return C.mlx_logsumexp_axis(r, a.c, C.int(axis), C.bool(keep), f.s.c) }, a)
}

// Softmax along axis, in float32 internally when precise.
func (f *Frame) Softmax(a Array, axis int, precise bool) Array {
	return f.op("softmax", func(r *C.mlx_array) C.int {
		return C.mlx_softmax_axis(r, a.c, C.int(axis), C.bool(precise), f.s.c)
	}, a)
}

// CumSum along axis.
func (f *Frame) CumSum(a Array, axis int, reverse, inclusive bool) Array {
	return f.op("cumsum", func(r *C.mlx_array) C.int {
		return C.mlx_cumsum(r, a.c, C.int(axis), C.bool(reverse), C.bool(inclusive), f.s.c)
	}, a)
}

// Argsort along axis (ascending).
func (f *Frame) Argsort(a Array, axis int) Array {
	return f.op("argsort", func(r *C.mlx_array) C.int { return C.mlx_argsort_axis(r, a.c, C.int(axis), f.s.c) }, a)
}

// Argpartition along axis around the kth element.
func (f *Frame) Argpartition(a Array, kth, axis int) Array {
	return f.op("argpartition", func(r *C.mlx_array) C.int {
		return C.mlx_argpartition_axis(r, a.c, C.int(kth), C.int(axis), f.s.c)
	}, a)
}

// TopK returns the k largest values along axis (unordered).
func (f *Frame) TopK(a Array, k, axis int) Array {
	return f.op("topk", func(r *C.mlx_array) C.int { return C.mlx_topk_axis(r, a.c, C.int(k), C.int(axis), f.s.c) }, a)
}

// Reshape to shape; one dimension may be -1.
func (f *Frame) Reshape(a Array, shape ...int) Array {
	cs := cShape(shape)
	return f.op("reshape", func(r *C.mlx_array) C.int {
		return C.mlx_reshape(r, a.c, ptr(cs), C.size_t(len(cs)), f.s.c)
	}, a)
}

// Transpose permutes axes.
func (f *Frame) Transpose(a Array, axes ...int) Array {
	cs := cShape(axes)
	return f.op("transpose", func(r *C.mlx_array) C.int {
		return C.mlx_transpose_axes(r, a.c, ptr(cs), C.size_t(len(cs)), f.s.c)
	}, a)
}

// SwapAxes exchanges two axes.
func (f *Frame) SwapAxes(a Array, a1, a2 int) Array {
	return f.op("swapaxes", func(r *C.mlx_array) C.int { return C.mlx_swapaxes(r, a.c, C.int(a1), C.int(a2), f.s.c) }, a)
}

// ExpandDims inserts a unit axis.
func (f *Frame) ExpandDims(a Array, axis int) Array {
	return f.op("expand_dims", func(r *C.mlx_array) C.int { return C.mlx_expand_dims(r, a.c, C.int(axis), f.s.c) }, a)
}

// Squeeze removes a unit axis.
func (f *Frame) Squeeze(a Array, axis int) Array {
	return f.op("squeeze", func(r *C.mlx_array) C.int { return C.mlx_squeeze_axis(r, a.c, C.int(axis), f.s.c) }, a)
}

// BroadcastTo broadcasts a to shape.
func (f *Frame) BroadcastTo(a Array, shape ...int) Array {
	cs := cShape(shape)
	return f.op("broadcast_to", func(r *C.mlx_array) C.int {
		return C.mlx_broadcast_to(r, a.c, ptr(cs), C.size_t(len(cs)), f.s.c)
	}, a)
}

// Concatenate joins arrays along axis.
func (f *Frame) Concatenate(axis int, arrays ...Array) Array {
	if f.err != nil {
		return Array{}
	}
	v := C.mlx_vector_array_new()
	defer C.mlx_vector_array_free(v)
	for _, a := range arrays {
		if !a.Valid() {
			f.err = fmt.Errorf("concatenate: %w", ErrEmpty)
			return Array{}
		}
		C.mlx_vector_array_append_value(v, a.c)
	}
	return f.op("concatenate", func(r *C.mlx_array) C.int { return C.mlx_concatenate_axis(r, v, C.int(axis), f.s.c) })
}

// Split cuts a into n equal parts along axis.
func (f *Frame) Split(a Array, n, axis int) []Array {
	return f.vec("split", func(r *C.mlx_vector_array) C.int { return C.mlx_split(r, a.c, C.int(n), C.int(axis), f.s.c) }, n, a)
}

// Slice takes a[start:stop] along every axis (stride 1).
func (f *Frame) Slice(a Array, start, stop []int) Array {
	strides := make([]int, len(start))
	for i := range strides {
		strides[i] = 1
	}
	cs, ce, st := cShape(start), cShape(stop), cShape(strides)
	return f.op("slice", func(r *C.mlx_array) C.int {
		return C.mlx_slice(r, a.c, ptr(cs), C.size_t(len(cs)), ptr(ce), C.size_t(len(ce)), ptr(st), C.size_t(len(st)), f.s.c)
	}, a)
}

// ViewStrided is a view of a's elements, a being row-contiguous when
// evaluated (a fresh result, not a view itself): element i of the view is
// a's element offset + sum(i[d] * strides[d]). One primitive, where a
// slice, a reshape and a transpose would be three.
func (f *Frame) ViewStrided(a Array, shape, strides []int, offset int) Array {
	cs := cShape(shape)
	st := make([]C.int64_t, len(strides))
	for i, v := range strides {
		st[i] = C.int64_t(v)
	}
	return f.op("view_strided", func(r *C.mlx_array) C.int {
		var sp *C.int64_t
		if len(st) > 0 {
			sp = &st[0]
		}
		return C.mlx_view_strided(r, a.c, ptr(cs), C.size_t(len(cs)), sp, C.size_t(len(st)), C.size_t(offset), f.s.c)
	}, a)
}

// SliceUpdate writes update into src[start:stop] and returns the result.
func (f *Frame) SliceUpdate(src, update Array, start, stop []int) Array {
	strides := make([]int, len(start))
	for i := range strides {
		strides[i] = 1
	}
	cs, ce, st := cShape(start), cShape(stop), cShape(strides)
	return f.op("slice_update", func(r *C.mlx_array) C.int {
		return C.mlx_slice_update(r, src.c, update.c, ptr(cs), C.size_t(len(cs)), ptr(ce), C.size_t(len(ce)),
			ptr(st), C.size_t(len(st)), f.s.c)
	}, src, update)
}

// Take gathers indices along axis.
func (f *Frame) Take(a, indices Array, axis int) Array {
	return f.op("take", func(r *C.mlx_array) C.int { return C.mlx_take_axis(r, a.c, indices.c, C.int(axis), f.s.c) }, a, indices)
}

// TakeAlongAxis gathers with per-position indices.
func (f *Frame) TakeAlongAxis(a, indices Array, axis int) Array {
	return f.op("take_along_axis", func(r *C.mlx_array) C.int {
		return C.mlx_take_along_axis(r, a.c, indices.c, C.int(axis), f.s.c)
	}, a, indices)
}

// PutAlongAxis scatters values at per-position indices.
func (f *Frame) PutAlongAxis(a, indices, values Array, axis int) Array {
	return f.op("put_along_axis", func(r *C.mlx_array) C.int {
		return C.mlx_put_along_axis(r, a.c, indices.c, values.c, C.int(axis), f.s.c)
	}, a, indices, values)
}

// Contiguous returns a row-contiguous version of a.
func (f *Frame) Contiguous(a Array) Array {
	return f.op("contiguous", func(r *C.mlx_array) C.int { return C.mlx_contiguous(r, a.c, false, f.s.c) }, a)
}

// Zeros returns a zero-filled array.
func (f *Frame) Zeros(d Dtype, shape ...int) Array {
	cs := cShape(shape)
	return f.op("zeros", func(r *C.mlx_array) C.int {
		return C.mlx_zeros(r, ptr(cs), C.size_t(len(cs)), C.mlx_dtype(d), f.s.c)
	})
}

// Full returns an array of shape filled with v.
func (f *Frame) Full(v float32, d Dtype, shape ...int) Array {
	cs := cShape(shape)
	val := f.Scalar(v)
	return f.op("full", func(r *C.mlx_array) C.int {
		return C.mlx_full(r, ptr(cs), C.size_t(len(cs)), val.c, C.mlx_dtype(d), f.s.c)
	}, val)
}

// Arange returns [start, stop) by step.
func (f *Frame) Arange(start, stop, step float64, d Dtype) Array {
	return f.op("arange", func(r *C.mlx_array) C.int {
		return C.mlx_arange(r, C.double(start), C.double(stop), C.double(step), C.mlx_dtype(d), f.s.c)
	})
}

// Tril keeps the lower triangle (diagonal offset k).
func (f *Frame) Tril(a Array, k int) Array {
	return f.op("tril", func(r *C.mlx_array) C.int { return C.mlx_tril(r, a.c, C.int(k), f.s.c) }, a)
}

func optInt(v int) C.mlx_optional_int {
	if v <= 0 {
		return C.mlx_optional_int{}
	}
	return C.mlx_optional_int{value: C.int(v), has_value: C.bool(true)}
}

// Quantize quantizes w along its last axis; it returns the packed weights,
// scales and (affine mode) biases as frame-owned arrays.
func (f *Frame) Quantize(w Array, groupSize, bits int, mode string) (wq, scales, biases Array) {
	if f.err != nil {
		return
	}
	cmode := C.CString(mode)
	defer C.free(unsafe.Pointer(cmode))
	v := C.mlx_vector_array_new()
	defer C.mlx_vector_array_free(v)
	if err := check("quantize", C.mlx_quantize(&v, w.c, optInt(groupSize), optInt(bits), cmode, C.mlx_array{}, f.s.c)); err != nil {
		f.err = err
		return
	}
	parts := make([]Array, int(C.mlx_vector_array_size(v)))
	for i := range parts {
		res := C.mlx_array_new()
		C.mlx_vector_array_get(&res, v, C.size_t(i))
		parts[i] = f.Track(Array{res})
	}
	wq, scales = parts[0], parts[1]
	if len(parts) > 2 {
		biases = parts[2]
	}
	return
}

// Dequantize reverses Quantize; biases may be the zero Array.
func (f *Frame) Dequantize(w, scales, biases Array, groupSize, bits int, mode string) Array {
	cmode := C.CString(mode)
	defer C.free(unsafe.Pointer(cmode))
	return f.op("dequantize", func(r *C.mlx_array) C.int {
		return C.mlx_dequantize(r, w.c, scales.c, biases.c, optInt(groupSize), optInt(bits), cmode, C.mlx_array{},
			C.mlx_optional_dtype{}, f.s.c)
	}, w, scales)
}

// QuantizedMatMul is x @ dequantize(w).T when transpose holds.
func (f *Frame) QuantizedMatMul(x, w, scales, biases Array, transpose bool, groupSize, bits int, mode string) Array {
	cmode := C.CString(mode)
	defer C.free(unsafe.Pointer(cmode))
	return f.op("quantized_matmul", func(r *C.mlx_array) C.int {
		return C.mlx_quantized_matmul(r, x.c, w.c, scales.c, biases.c, C.bool(transpose), optInt(groupSize),
			optInt(bits), cmode, f.s.c)
	}, x, w, scales)
}

// AddMM is alpha*(a @ b) + beta*c, rounded once: a linear layer's product
// and bias in one op.
func (f *Frame) AddMM(c, a, b Array, alpha, beta float32) Array {
	return f.op("addmm", func(r *C.mlx_array) C.int {
		return C.mlx_addmm(r, c.c, a.c, b.c, C.float(alpha), C.float(beta), f.s.c)
	}, c, a, b)
}

// GatherMM multiplies each matrix of a by the matrix of b its index picks:
// out[i] = a[lhs[i]] @ b[rhs[i]], with a or b used in order where its index
// array is the zero Array. It is the mixture-of-experts product, each token
// against its own experts' weights without gathering them into a copy.
// sorted promises that rhs is ascending, which lets MLX group the products
// by matrix.
func (f *Frame) GatherMM(a, b, lhs, rhs Array, sorted bool) Array {
	return f.op("gather_mm", func(r *C.mlx_array) C.int {
		return C.mlx_gather_mm(r, a.c, b.c, lhs.c, rhs.c, C.bool(sorted), f.s.c)
	}, a, b)
}

// GatherQMM is GatherMM against quantized matrices: out[i] = x[lhs[i]] @
// dequantize(w[rhs[i]]).T when transpose holds, computed from the packed
// values (mode "affine", "mxfp4", ...); biases may be the zero Array.
func (f *Frame) GatherQMM(x, w, scales, biases, lhs, rhs Array, transpose bool, groupSize, bits int, mode string, sorted bool) Array {
	cmode := C.CString(mode)
	defer C.free(unsafe.Pointer(cmode))
	return f.op("gather_qmm", func(r *C.mlx_array) C.int {
		return C.mlx_gather_qmm(r, x.c, w.c, scales.c, biases.c, lhs.c, rhs.c, C.bool(transpose), optInt(groupSize),
			optInt(bits), cmode, C.bool(sorted), f.s.c)
	}, x, w, scales)
}

// RMSNorm normalizes the last axis; weight may be the zero Array. RMSNorm,
// RoPE, RoPEOffsets and Attention run as single fused primitives on a CPU
// stream with float32 inputs (fastcpu.cpp) and as MLX's fast ops elsewhere.
func (f *Frame) RMSNorm(x, weight Array, eps float32) Array {
	return f.op("rms_norm", func(r *C.mlx_array) C.int {
		return C.mlx_fast_cpu_rms_norm(r, x.c, weight.c, C.float(eps), f.s.c)
	}, x)
}

// RoPE rotates the first dims features of x, positions starting at offset.
// freqs (optional) overrides the base-derived frequencies.
func (f *Frame) RoPE(x Array, dims int, traditional bool, base, scale float32, offset int, freqs Array) Array {
	b := C.mlx_optional_float{value: C.float(base), has_value: C.bool(!freqs.Valid())}
	return f.op("rope", func(r *C.mlx_array) C.int {
		return C.mlx_fast_cpu_rope(r, x.c, C.int(dims), C.bool(traditional), b, C.float(scale), C.int(offset), C.mlx_array{},
			freqs.c, f.s.c)
	}, x)
}

// RoPEOffsets is RoPE with per-batch offsets (an int32 array of shape [B]).
func (f *Frame) RoPEOffsets(x Array, dims int, traditional bool, base, scale float32, offsets, freqs Array) Array {
	b := C.mlx_optional_float{value: C.float(base), has_value: C.bool(!freqs.Valid())}
	return f.op("rope", func(r *C.mlx_array) C.int {
		return C.mlx_fast_cpu_rope(r, x.c, C.int(dims), C.bool(traditional), b, C.float(scale), 0, offsets.c, freqs.c, f.s.c)
	}, x, offsets)
}

// Attention is fused scaled dot-product attention. maskMode is "", "causal"
// or "array" (then mask is used); sinks may be the zero Array.
func (f *Frame) Attention(q, k, v Array, scale float32, maskMode string, mask, sinks Array) Array {
	cmode := C.CString(maskMode)
	defer C.free(unsafe.Pointer(cmode))
	return f.op("scaled_dot_product_attention", func(r *C.mlx_array) C.int {
		return C.mlx_fast_cpu_sdpa(r, q.c, k.c, v.c, C.float(scale), cmode, mask.c, sinks.c, f.s.c)
	}, q, k, v)
}

// RandomKey returns a PRNG key for seed.
func (f *Frame) RandomKey(seed uint64) Array {
	return f.op("random_key", func(r *C.mlx_array) C.int { return C.mlx_random_key(r, C.uint64_t(seed)) })
}

// Categorical samples indices from logits along axis.
func (f *Frame) Categorical(logits Array, axis int, key Array) Array {
	return f.op("random_categorical", func(r *C.mlx_array) C.int {
		return C.mlx_random_categorical(r, logits.c, C.int(axis), key.c, f.s.c)
	}, logits)
}

// Flat is a as dtype t in one dimension: a itself when it already is.
// The To* reads below read an array of this form without evaluating
// anything new. A step whose results the host will read queues them in
// this form (AsyncEval): a read that added a primitive would have it
// evaluated behind whatever was queued since, a step built ahead
// included, and would wait for all of that.
func (f *Frame) Flat(a Array, t Dtype) Array {
	if !a.Valid() {
		return f.AsType(a, t)
	}
	return f.Reshape(f.AsType(a, t), a.Size())
}

// readable is a as t in one dimension, evaluated and row-contiguous, for
// the host to copy out: a itself when it is already so (see Flat); not
// Valid once the frame has failed.
func (f *Frame) readable(a Array, t Dtype) Array {
	c := f.Flat(a, t)
	if f.Eval(c) != nil {
		return Array{}
	}
	var dense C.bool
	if err := check("array_row_contiguous", C.mlx_array_row_contiguous(&dense, c.c)); err != nil {
		f.Fail(err)
		return Array{}
	}
	if !dense {
		// A strided view: copied, behind whatever is queued.
		c = f.Contiguous(c)
		if f.Eval(c) != nil {
			return Array{}
		}
	}
	return c
}

// ToFloat32s evaluates a and copies it out as float32.
func (f *Frame) ToFloat32s(a Array) []float32 {
	c := f.readable(a, Float32)
	if !c.Valid() {
		return nil
	}
	p := C.mlx_array_data_float32(c.c)
	if p == nil {
		f.Fail(lastError("data_float32"))
		return nil
	}
	return append([]float32(nil), unsafe.Slice((*float32)(unsafe.Pointer(p)), c.Size())...)
}

// ToBytes evaluates a and copies out its elements' raw little-endian
// bytes, in row-major order, whatever its dtype.
func (f *Frame) ToBytes(a Array) []byte {
	c := f.Contiguous(a)
	if f.Eval(c) != nil {
		return nil
	}
	n := c.Nbytes()
	if n == 0 {
		return []byte{}
	}
	p := C.mlx_array_data_uint8(c.c)
	if p == nil {
		f.Fail(lastError("data_uint8"))
		return nil
	}
	return append([]byte(nil), unsafe.Slice((*byte)(unsafe.Pointer(p)), n)...)
}

// ToInt32s evaluates a and copies it out as int32.
func (f *Frame) ToInt32s(a Array) []int32 {
	c := f.readable(a, Int32)
	if !c.Valid() {
		return nil
	}
	p := C.mlx_array_data_int32(c.c)
	if p == nil {
		f.Fail(lastError("data_int32"))
		return nil
	}
	return append([]int32(nil), unsafe.Slice((*int32)(unsafe.Pointer(p)), c.Size())...)
}

// NegInf is the float32 negative infinity, for masks.
var NegInf = float32(math.Inf(-1))
