package mlx

/*
#include "mlxc.h"
*/
import "C"

import (
	"fmt"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
)

// A step's graph is built op by op on the host, and MLX's CUDA backend
// starts a kernel only once its eval has encoded it. Evaluated at the end,
// the device waits while the host builds the whole step (about a third of
// a one-row 7B step). Queued every few layers (DispatchLayer), the device
// runs the first layers while the host builds the rest: the same graph,
// the same kernels, the same floats.

// DefaultDispatchLayers is how many layers a CUDA step builds before it
// queues them, unless PROVIDER_GPU_DISPATCH_LAYERS says otherwise (0 never
// queues before the step's end). On an H100, a one-row 7B step took 4.0 to
// 4.3 ms queued each 2 layers (each 4 within the noise of it), 4.6 each 8,
// and 5.3 to 6.2 unqueued (bench/results/dispatch-nvidia-h100-2026-12-06).
const DefaultDispatchLayers = 2

var (
	dispatchOnce  sync.Once
	dispatchGPU   int
	dispatchErr   error
	dispatchForce atomic.Int32 // -1: the device's setting; n >= 0: n on any stream
)

func init() { dispatchForce.Store(-1) }

// readDispatchLayers reads PROVIDER_GPU_DISPATCH_LAYERS once a process.
func readDispatchLayers() {
	dispatchGPU = DefaultDispatchLayers
	v := os.Getenv("PROVIDER_GPU_DISPATCH_LAYERS")
	if v == "" {
		return
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 0 {
		dispatchErr = fmt.Errorf("mlx: PROVIDER_GPU_DISPATCH_LAYERS=%q: want a count of layers, 0 for none", v)
		return
	}
	dispatchGPU = n
}

// SetDispatchLayers makes every frame, on any stream, queue its step each
// n layers (0 never) until it is called with -1, which restores the
// device's setting; it returns the setting before. For tests and
// benchmarks that compare the two in one process.
func SetDispatchLayers(n int) int {
	return int(dispatchForce.Swap(int32(n)))
}

// dispatchEvery is how many layers f's steps build before queueing them:
// the forced setting, else PROVIDER_GPU_DISPATCH_LAYERS's on a CUDA stream
// and 0 elsewhere.
func (f *Frame) dispatchEvery() int {
	if n := dispatchForce.Load(); n >= 0 {
		return int(n)
	}
	if !f.onCUDAStream() {
		return 0
	}
	dispatchOnce.Do(readDispatchLayers)
	if dispatchErr != nil {
		f.Fail(dispatchErr)
		return 0
	}
	return dispatchGPU
}

// DispatchLayer queues the evaluation of x, the output of a step's layer
// li (from 0), when li closes one of the step's groups of layers
// (dispatchEvery), so that the device runs those layers while the host
// builds the next. The step's final evaluation covers whatever is left;
// nothing is read back here.
func (f *Frame) DispatchLayer(li int, x Array) {
	if n := f.dispatchEvery(); n > 0 && (li+1)%n == 0 {
		f.AsyncEval(x)
	}
}

// queued reports whether a has been queued for evaluation or evaluated.
func queued(a Array) (bool, error) {
	var ok C.bool
	err := check("array_queued", C.mlx_array_queued(&ok, a.c))
	return bool(ok), err
}
