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
// PROVIDER_GPU_DTYPE names (float32, float16, bfloat16). A bad value of
// either variable is an error that names it.
func ServeNumerics(c *Config, s mlx.Stream) error {
	if s.IsCPU() {
		c.ActDType = mlx.Float32
		switch v := os.Getenv("PROVIDER_CPU_INT8"); v {
		case "":
			c.Int8Activations = mlx.CPUInt8()
		case "0", "1":
			c.Int8Activations = v == "1"
		default:
			return fmt.Errorf("PROVIDER_CPU_INT8=%q: want 0 or 1", v)
		}
		return nil
	}
	c.ActDType = c.AcceleratorDType()
	if v := os.Getenv("PROVIDER_GPU_DTYPE"); v != "" {
		d, ok := FloatDType(v)
		if !ok {
			return fmt.Errorf("PROVIDER_GPU_DTYPE=%q: want float32, float16 or bfloat16", v)
		}
		c.ActDType = d
	}
	return nil
}
