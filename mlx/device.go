package mlx

/*
#include "mlxc.h"
*/
import "C"

import (
	"errors"
	"fmt"
)

// DeviceMemory is what MLX reports about the memory of a stream's device
// (MLX's device_info).
type DeviceMemory struct {
	// GPU reports whether the device is a GPU (CUDA or Metal).
	GPU bool
	// Total is the memory the device offers, in bytes: Metal's recommended
	// maximum working set (the GPU's share of unified memory), CUDA's total
	// device memory. 0 when MLX reports none, as for the CPU device.
	Total int64
	// TotalKey is the device_info key Total came from; empty when Total is 0.
	TotalKey string
	// Free is the device memory free now, for the whole device (CUDA); -1
	// when the backend does not report it.
	Free int64
}

// DeviceMemory asks MLX about the memory of the stream's device. Call it on
// the stream's MLX thread.
func (s Stream) DeviceMemory() (DeviceMemory, error) {
	if s.c.ctx == 0 {
		return DeviceMemory{}, errors.New("mlx: device memory of a freed stream")
	}
	var (
		gpu, hasFree C.bool
		total, free  C.size_t
		key          *C.char
	)
	rc := C.mlx_stream_device_memory(&gpu, &total, &key, &free, &hasFree, s.c)
	// Querying a GPU backend may initialize its libraries.
	RestoreSignals()
	if err := check("stream_device_memory", rc); err != nil {
		return DeviceMemory{}, err
	}
	m := DeviceMemory{GPU: bool(gpu), Total: clampInt64(uint64(total)), Free: -1}
	if key != nil {
		m.TotalKey = C.GoString(key)
	}
	if hasFree {
		m.Free = clampInt64(uint64(free))
	}
	return m, nil
}

func clampInt64(v uint64) int64 {
	return int64(min(v, 1<<63-1))
}

// ErrUnknownDevice: a device name other than auto, cpu or gpu.
var ErrUnknownDevice = errors.New("unknown device")

// StreamFor is the default stream of a device name: auto (MLX's default
// device), cpu or gpu ("" is auto).
func StreamFor(device string) (Stream, error) {
	switch device {
	case "", "auto":
		return DefaultStream(), nil
	case "cpu":
		return CPU(), nil
	case "gpu":
		return GPU()
	default:
		return Stream{}, fmt.Errorf("mlx: %w %q (want auto, cpu or gpu)", ErrUnknownDevice, device)
	}
}
