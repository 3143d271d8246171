package model

import (
	"fmt"
	"os"

	"github.com/goprovider/provider/mlx"
)

// ServeNumerics sets c's numerics for a model served on stream s. On the
// CPU: float32 activations (MLX's CPU kernels, the experts' gathered
// matmuls among them, run in float32; a half-precision checkpoint is
// widened), and, where the processor has AVX2, 8-bit activation blocks
// into the integer matmul kernel (Config.Int8Activations, as llama.cpp
// quantizes activations for its quantized weights; mlx.CPUInt8): faster
// than the float kernel at every batch size, outputs moved by the
// activations' rounding. PROVIDER_CPU_INT8=0 keeps float activations; =1
// asks for 8-bit ones on any processor (without AVX2 the kernel is the
// float one). On a GPU: activations and the KV cache in
// Config.AcceleratorDType (the checkpoint's half type), or in the type
// PROVIDER_GPU_DTYPE names (float32, float16, bfloat16). On the CPU it
// also keeps the kernel threads awake between kernels as long as a server
// wants them (mlx.UseServeCPUSpin, PROVIDER_CPU_SPIN_US: across the host's
// work between two steps); restore puts back the wait it replaced (on a
// GPU it does nothing). A bad value of any of these variables is an error
// that names it, and changes nothing.
func ServeNumerics(c *Config, s mlx.Stream) (restore func(), err error) {
	if s.IsCPU() {
		int8 := false
		switch v := os.Getenv("PROVIDER_CPU_INT8"); v {
		case "":
			int8 = mlx.CPUInt8()
		case "0", "1":
			int8 = v == "1"
		default:
			return nil, fmt.Errorf("PROVIDER_CPU_INT8=%q: want 0 or 1", v)
		}
		if restore, err = mlx.UseServeCPUSpin(); err != nil {
			return nil, err
		}
		c.ActDType, c.Int8Activations = mlx.Float32, int8
		return restore, nil
	}
	d := c.AcceleratorDType()
	if v := os.Getenv("PROVIDER_GPU_DTYPE"); v != "" {
		var ok bool
		if d, ok = FloatDType(v); !ok {
			return nil, fmt.Errorf("PROVIDER_GPU_DTYPE=%q: want float32, float16 or bfloat16", v)
		}
	}
	c.ActDType = d
	return func() {}, nil
}
