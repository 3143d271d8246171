package model

import (
	"strings"
	"testing"

	"github.com/goprovider/provider/mlx"
)

// TestServeNumericsCPU: on the CPU, float32 activations, and 8-bit ones
// where the processor has the integer kernels unless PROVIDER_CPU_INT8
// says otherwise; any other value of the variable is an error naming it.
func TestServeNumericsCPU(t *testing.T) {
	th := mlx.NewThread()
	defer th.Close()
	var s mlx.Stream
	th.Do(func() { s = mlx.CPU() })
	defer th.Do(func() { s.Free() })
	for _, c := range []struct {
		env  string
		int8 bool
		bad  bool
	}{{"", mlx.CPUInt8(), false}, {"0", false, false}, {"1", true, false}, {"yes", false, true}} {
		t.Setenv("PROVIDER_CPU_INT8", c.env)
		cfg := Config{ActDType: mlx.BFloat16, Int8Activations: !c.int8}
		err := ServeNumerics(&cfg, s)
		if c.bad {
			if err == nil || !strings.Contains(err.Error(), "PROVIDER_CPU_INT8") {
				t.Errorf("PROVIDER_CPU_INT8=%q: error %v, want one naming the variable", c.env, err)
			}
			continue
		}
		if err != nil {
			t.Fatalf("PROVIDER_CPU_INT8=%q: %v", c.env, err)
		}
		if cfg.ActDType != mlx.Float32 || cfg.Int8Activations != c.int8 {
			t.Errorf("PROVIDER_CPU_INT8=%q: activations %v, 8-bit %v; want float32, %v", c.env, cfg.ActDType, cfg.Int8Activations, c.int8)
		}
	}
}
