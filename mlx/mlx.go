package mlx

/*
#cgo CXXFLAGS: -std=c++20 -O2 -I${SRCDIR}/../.deps/mlx/mlx/include
#cgo LDFLAGS: -L${SRCDIR}/../.deps/mlx/mlx/lib -lmlx -Wl,-rpath,$ORIGIN/../lib/provider/mlx/lib -Wl,-rpath,$ORIGIN/../.deps/mlx/mlx/lib -Wl,-rpath,${SRCDIR}/../.deps/mlx/mlx/lib
#include <stdlib.h>
#include <malloc.h>
#include <string.h>
#include "mlxc.h"

static __thread char provider_mlx_err[4096];
static __thread int provider_mlx_err_set;

static void provider_mlx_on_error(const char* msg, void* data) {
	(void)data;
	strncpy(provider_mlx_err, msg, sizeof(provider_mlx_err) - 1);
	provider_mlx_err[sizeof(provider_mlx_err) - 1] = 0;
	provider_mlx_err_set = 1;
}

static void provider_mlx_install_handler(void) {
	mlx_set_error_handler(provider_mlx_on_error, NULL, NULL);
}

static const char* provider_mlx_take_error(void) {
	if (!provider_mlx_err_set) {
		return NULL;
	}
	provider_mlx_err_set = 0;
	return provider_mlx_err;
}
*/
import "C"

import (
	"errors"
	"fmt"
	"runtime"
	"slices"
	"strings"
	"sync"
	"unsafe"
)

// Error is an error reported by MLX.
type Error struct {
	Op  string
	Msg string
}

func (e *Error) Error() string { return "mlx: " + e.Op + ": " + e.Msg }

// ErrEmpty is returned when an op receives an array that holds nothing,
// usually because an earlier op of the same Frame failed.
var ErrEmpty = errors.New("mlx: empty array")

var initOnce sync.Once

// Init installs the error handler. It is idempotent and safe from any
// thread; Thread calls it for you.
func Init() {
	initOnce.Do(func() { C.provider_mlx_install_handler() })
}

func lastError(op string) error {
	msg := C.provider_mlx_take_error()
	if msg == nil {
		return &Error{Op: op, Msg: "failed"}
	}
	return &Error{Op: op, Msg: C.GoString(msg)}
}

func check(op string, rc C.int) error {
	if rc != 0 {
		return lastError(op)
	}
	return nil
}

// Thread runs functions on one goroutine locked to its OS thread, where all
// MLX work of its owner happens.
type Thread struct {
	work chan func()
	done chan struct{}
}

// ThreadOptions shape the OS thread of a Thread. The zero value is a
// plain thread. Threads MLX starts from the thread (the CPU worker of each
// stream it first uses) inherit both settings, so the thread should create
// its streams after it starts, not borrow them.
type ThreadOptions struct {
	// Name names the OS thread (Linux, at most 15 bytes, cut beyond), as
	// ps -L and top -H show it; "" keeps the name it was started with.
	Name string
	// Background gives the thread the lowest scheduling priority (Linux:
	// nice 19 for this thread alone), for work that must yield the CPU to
	// the process's other threads whenever they want it, such as a vision
	// tower beside the decode loop. It changes when the work runs, never
	// what it computes.
	Background bool
}

// NewThread starts the locked goroutine.
func NewThread() *Thread {
	t, _ := NewThreadWith(ThreadOptions{})
	return t
}

// NewThreadWith starts the locked goroutine with its OS thread shaped by o.
// On an error applying o no thread is left running.
func NewThreadWith(o ThreadOptions) (*Thread, error) {
	t := &Thread{work: make(chan func()), done: make(chan struct{})}
	ready := make(chan error)
	go func() {
		runtime.LockOSThread()
		// A thread whose name or priority changed is not handed back to
		// the Go scheduler: it exits with the goroutine.
		if o == (ThreadOptions{}) {
			defer runtime.UnlockOSThread()
		}
		defer close(t.done)
		if err := setupThread(o); err != nil {
			ready <- err
			return
		}
		Init()
		ready <- nil
		for fn := range t.work {
			fn()
		}
	}()
	if err := <-ready; err != nil {
		<-t.done
		return nil, err
	}
	return t, nil
}

// Do runs fn on the thread and waits for it. On a thread whose goroutine
// has exited (a test's t.Fatal inside an earlier Do ends it) it does
// nothing, so that the test's cleanups fail no further than the test
// itself did, instead of waiting forever.
func (t *Thread) Do(fn func()) {
	finished := make(chan struct{})
	select {
	case t.work <- func() {
		defer close(finished)
		fn()
	}:
	case <-t.done:
		return
	}
	<-finished
}

// Close stops the thread after the work already queued.
func (t *Thread) Close() {
	close(t.work)
	<-t.done
}

// Dtype is an MLX element type.
type Dtype int

// The element types, in mlx-c's order.
const (
	Bool Dtype = iota
	Uint8
	Uint16
	Uint32
	Uint64
	Int8
	Int16
	Int32
	Int64
	Float16
	Float32
	Float64
	BFloat16
	Complex64
)

var dtypeNames = [...]string{"bool", "uint8", "uint16", "uint32", "uint64", "int8", "int16", "int32", "int64",
	"float16", "float32", "float64", "bfloat16", "complex64"}

func (d Dtype) String() string {
	if d >= 0 && int(d) < len(dtypeNames) {
		return dtypeNames[d]
	}
	return fmt.Sprintf("dtype(%d)", int(d))
}

// Size is the element size in bytes.
func (d Dtype) Size() int {
	switch d {
	case Bool, Uint8, Int8:
		return 1
	case Uint16, Int16, Float16, BFloat16:
		return 2
	case Uint32, Int32, Float32:
		return 4
	default:
		return 8
	}
}

// Array is a handle to an MLX array. The zero Array holds nothing.
type Array struct {
	c C.mlx_array
}

// Valid reports whether the handle holds an array.
func (a Array) Valid() bool { return a.c.ctx != 0 }

// Free releases a caller-owned array. Freeing the zero Array is a no-op.
func (a *Array) Free() {
	if a.c.ctx != 0 {
		C.mlx_array_free(a.c)
		a.c.ctx = 0
	}
}

// Shape returns the array's dimensions.
func (a Array) Shape() []int {
	if !a.Valid() {
		return nil
	}
	n := int(C.mlx_array_ndim(a.c))
	if n == 0 {
		return []int{}
	}
	p := unsafe.Slice(C.mlx_array_shape(a.c), n)
	out := make([]int, n)
	for i, v := range p {
		out[i] = int(v)
	}
	return out
}

// Dim returns one dimension; negative indices count from the end.
func (a Array) Dim(i int) int {
	if !a.Valid() {
		return 0
	}
	n := int(C.mlx_array_ndim(a.c))
	if i < 0 {
		i += n
	}
	return int(C.mlx_array_dim(a.c, C.int(i)))
}

// Ndim is the number of dimensions.
func (a Array) Ndim() int {
	if !a.Valid() {
		return 0
	}
	return int(C.mlx_array_ndim(a.c))
}

// Dtype is the element type.
func (a Array) Dtype() Dtype {
	if !a.Valid() {
		return Float32
	}
	return Dtype(C.mlx_array_dtype(a.c))
}

// Size is the number of elements.
func (a Array) Size() int {
	if !a.Valid() {
		return 0
	}
	return int(C.mlx_array_size(a.c))
}

// Nbytes is the size of the array's data in bytes.
func (a Array) Nbytes() int {
	if !a.Valid() {
		return 0
	}
	return int(C.mlx_array_nbytes(a.c))
}

// Clone returns a new caller-owned handle to the same array.
func (a Array) Clone() Array {
	if !a.Valid() {
		return Array{}
	}
	res := C.mlx_array_new()
	C.mlx_array_set(&res, a.c)
	return Array{res}
}

func cShape(shape []int) []C.int {
	out := make([]C.int, len(shape))
	for i, v := range shape {
		out[i] = C.int(v)
	}
	return out
}

func ptr(s []C.int) *C.int {
	if len(s) == 0 {
		return nil
	}
	return &s[0]
}

func elements(shape []int) int {
	n := 1
	for _, d := range shape {
		n *= d
	}
	return n
}

// FromBytes copies raw little-endian element data into a new caller-owned
// array of the given shape and type.
func FromBytes(data []byte, dtype Dtype, shape ...int) (Array, error) {
	if want := elements(shape) * dtype.Size(); len(data) != want {
		return Array{}, fmt.Errorf("mlx: FromBytes: %d bytes for %v %v (want %d)", len(data), dtype, shape, want)
	}
	cs := cShape(shape)
	var p unsafe.Pointer
	if len(data) > 0 {
		p = unsafe.Pointer(&data[0])
	}
	res := C.mlx_array_new_data(p, ptr(cs), C.int(len(cs)), C.mlx_dtype(dtype))
	if res.ctx == 0 {
		return Array{}, lastError("array_new_data")
	}
	return Array{res}, nil
}

func fromSlice[T any](data []T, dtype Dtype, shape []int) (Array, error) {
	var zero T
	n := len(data) * int(unsafe.Sizeof(zero))
	var b []byte
	if n > 0 {
		b = unsafe.Slice((*byte)(unsafe.Pointer(&data[0])), n)
	}
	return FromBytes(b, dtype, shape...)
}

// FromFloat32s copies data into a new caller-owned float32 array.
func FromFloat32s(data []float32, shape ...int) (Array, error) {
	return fromSlice(data, Float32, shape)
}

// FromInt32s copies data into a new caller-owned int32 array.
func FromInt32s(data []int32, shape ...int) (Array, error) {
	return fromSlice(data, Int32, shape)
}

// FromUint32s copies data into a new caller-owned uint32 array.
func FromUint32s(data []uint32, shape ...int) (Array, error) {
	return fromSlice(data, Uint32, shape)
}

// FromUint16s copies half-precision bit patterns into a new caller-owned
// array of dtype Float16 or BFloat16.
func FromUint16s(data []uint16, dtype Dtype, shape ...int) (Array, error) {
	return fromSlice(data, dtype, shape)
}

// Scalar returns a caller-owned float32 scalar.
func Scalar(v float32) Array { return Array{C.mlx_array_new_float(C.float(v))} }

// ScalarInt returns a caller-owned int32 scalar.
func ScalarInt(v int) Array { return Array{C.mlx_array_new_int(C.int(v))} }

// Stream is an MLX stream (a device queue).
type Stream struct {
	c C.mlx_stream
}

// CPU returns the default CPU stream.
func CPU() Stream { return Stream{C.mlx_default_cpu_stream_new()} }

// GPU returns the default GPU stream, or an error when no GPU backend is
// available.
func GPU() (Stream, error) {
	ok, err := GPUAvailable()
	RestoreSignals()
	if err != nil {
		return Stream{}, err
	}
	if !ok {
		return Stream{}, errors.New("mlx: no GPU backend in this build of MLX")
	}
	s := C.mlx_default_gpu_stream_new()
	RestoreSignals()
	if s.ctx == 0 {
		return Stream{}, lastError("default_gpu_stream")
	}
	return Stream{s}, nil
}

// DefaultStream is the GPU stream when a GPU backend is available, else the
// CPU stream.
func DefaultStream() Stream {
	if s, err := GPU(); err == nil {
		return s
	}
	return CPU()
}

// GPUAvailable reports whether this MLX build has a usable GPU backend.
func GPUAvailable() (bool, error) {
	var ok C.bool
	if err := check("gpu_is_available", C.mlx_gpu_is_available(&ok)); err != nil {
		return false, err
	}
	return bool(ok), nil
}

// Free releases the stream handle.
func (s *Stream) Free() {
	if s.c.ctx != 0 {
		C.mlx_stream_free(s.c)
		s.c.ctx = 0
	}
}

// withVector calls fn with a vector of arrays (freed after), or fails
// with ErrEmpty when one is not valid.
func withVector(arrays []Array, fn func(C.mlx_vector_array) error) error {
	v := C.mlx_vector_array_new()
	defer C.mlx_vector_array_free(v)
	for _, a := range arrays {
		if !a.Valid() {
			return ErrEmpty
		}
		C.mlx_vector_array_append_value(v, a.c)
	}
	return fn(v)
}

// Eval evaluates arrays.
func Eval(arrays ...Array) error {
	return withVector(arrays, func(v C.mlx_vector_array) error { return check("eval", C.mlx_eval(v)) })
}

// EvalStepwise evaluates arrays as Eval does, but one primitive at a
// time, waiting for each before the next, so that this thread never has
// more than one task queued in MLX's scheduler. MLX bounds the tasks queued
// by all threads together (ten) and makes an evaluating thread that finds
// more wait for any of them to finish: a background thread (a vision
// tower at low priority) with a deep queue would make the decode loop
// wait on its slow, low-priority work. Its results equal Eval's.
func EvalStepwise(arrays ...Array) error {
	return withVector(arrays, func(v C.mlx_vector_array) error { return check("eval_stepwise", C.mlx_eval_stepwise(v)) })
}

// AsyncEval queues the evaluation of arrays on their streams and returns
// without waiting; a later Eval (or a read) of them waits for the result.
func AsyncEval(arrays ...Array) error {
	return withVector(arrays, func(v C.mlx_vector_array) error { return check("async_eval", C.mlx_async_eval(v)) })
}

// GraphPrimitives counts, by name, the primitives evaluating arrays would
// run (arrays already evaluated are leaves): what a step costs in kernel
// launches.
func GraphPrimitives(arrays ...Array) (map[string]int, error) {
	var res *C.char
	err := withVector(arrays, func(v C.mlx_vector_array) error {
		return check("graph_primitives", C.mlx_graph_primitives(&res, v))
	})
	if err != nil {
		return nil, err
	}
	defer C.free(unsafe.Pointer(res))
	counts := map[string]int{}
	for _, name := range strings.Fields(C.GoString(res)) {
		counts[name]++
	}
	return counts, nil
}

// DescribePrimitives is the total of GraphPrimitives' counts and the
// counts as NAME=N, sorted by name, for logs.
func DescribePrimitives(counts map[string]int) (int, string) {
	total := 0
	names := make([]string, 0, len(counts))
	for n, c := range counts {
		total += c
		names = append(names, fmt.Sprintf("%s=%d", n, c))
	}
	slices.Sort(names)
	return total, strings.Join(names, " ")
}

// Memory statistics, in bytes.
func ActiveMemory() uint64 {
	var n C.size_t
	C.mlx_get_active_memory(&n)
	return uint64(n)
}

// PeakMemory is the highest active memory since the last ResetPeakMemory.
func PeakMemory() uint64 {
	var n C.size_t
	C.mlx_get_peak_memory(&n)
	return uint64(n)
}

// ResetPeakMemory restarts peak tracking.
func ResetPeakMemory() { C.mlx_reset_peak_memory() }

// CacheMemory is memory MLX keeps for reuse after arrays are freed.
func CacheMemory() uint64 {
	var n C.size_t
	C.mlx_get_cache_memory(&n)
	return uint64(n)
}

// ClearCache returns cached buffers to the system.
func ClearCache() { C.mlx_clear_cache() }

// TrimHostHeap returns the C heap's free memory to the system
// (malloc_trim): what the host allocator keeps after MLX and the kernels
// freed it, which otherwise stays in the process's resident set.
func TrimHostHeap() { C.malloc_trim(0) }

// SetCacheLimit bounds the buffer cache and returns the previous limit.
func SetCacheLimit(limit uint64) uint64 {
	var prev C.size_t
	C.mlx_set_cache_limit(&prev, C.size_t(limit))
	return uint64(prev)
}
