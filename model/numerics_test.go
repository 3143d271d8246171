package model

import (
	"strings"
	"testing"

	"github.com/goprovider/provider/mlx"
)

// TestServeNumericsCPU: on the CPU, float32 activations, and 8-bit ones
// where the processor has the integer kernels unless PROVIDER_CPU_INT8
// says otherwise; any other value of the variable is an error naming it.
// The kernel threads' wait becomes PROVIDER_CPU_SPIN_US's until restore;
// a bad wait is an error that leaves the config as it was.
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
		t.Setenv("PROVIDER_CPU_SPIN_US", "350")
		cfg := Config{ActDType: mlx.BFloat16, Int8Activations: !c.int8}
		before := mlx.SetCPUSpin(70)
		restore, err := ServeNumerics(&cfg, s)
		if c.bad {
			if err == nil || !strings.Contains(err.Error(), "PROVIDER_CPU_INT8") {
				t.Errorf("PROVIDER_CPU_INT8=%q: error %v, want one naming the variable", c.env, err)
			}
			if got := mlx.SetCPUSpin(before); got != 70 {
				t.Errorf("PROVIDER_CPU_INT8=%q: the refused call set the wait to %d", c.env, got)
			}
			continue
		}
		if err != nil {
			t.Fatalf("PROVIDER_CPU_INT8=%q: %v", c.env, err)
		}
		if cfg.ActDType != mlx.Float32 || cfg.Int8Activations != c.int8 {
			t.Errorf("PROVIDER_CPU_INT8=%q: activations %v, 8-bit %v; want float32, %v", c.env, cfg.ActDType, cfg.Int8Activations, c.int8)
		}
		if got := mlx.SetCPUSpin(350); got != 350 {
			t.Errorf("PROVIDER_CPU_SPIN_US=350: the wait is %d", got)
		}
		restore()
		if got := mlx.SetCPUSpin(before); got != 70 {
			t.Errorf("after restore, the wait is %d, want the 70 it replaced", got)
		}
	}
	t.Setenv("PROVIDER_CPU_INT8", "")
	t.Setenv("PROVIDER_CPU_SPIN_US", "2ms")
	cfg := Config{ActDType: mlx.BFloat16}
	if _, err := ServeNumerics(&cfg, s); err == nil || !strings.Contains(err.Error(), "PROVIDER_CPU_SPIN_US") {
		t.Errorf("PROVIDER_CPU_SPIN_US=2ms: error %v, want one naming the variable", err)
	}
	if cfg.ActDType != mlx.BFloat16 {
		t.Errorf("after a bad PROVIDER_CPU_SPIN_US the activations are %v, want them left bfloat16", cfg.ActDType)
	}
}
