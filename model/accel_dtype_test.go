package model

import (
	"testing"

	"github.com/goprovider/provider/mlx"
)

// TestAcceleratorDType pins the GPU numerics policy: the checkpoint's
// declared float type, bfloat16 for Gemma unless float32 is declared,
// float16 when nothing is declared.
func TestAcceleratorDType(t *testing.T) {
	for _, tc := range []struct {
		arch, declared string
		want           mlx.Dtype
	}{
		{"llama", "float16", mlx.Float16},
		{"llama", "bfloat16", mlx.BFloat16},
		{"llama", "float32", mlx.Float32},
		{"llama", "", mlx.Float16},
		{"gemma3", "float16", mlx.BFloat16},
		{"gemma3", "", mlx.BFloat16},
		{"gemma4", "float32", mlx.Float32},
		{"gpt_oss", "bfloat16", mlx.BFloat16},
	} {
		c := Config{Arch: tc.arch, CheckpointDType: tc.declared, ActDType: mlx.Float32}
		if got := c.AcceleratorDType(); got != tc.want {
			t.Errorf("%s declaring %q: %v, want %v", tc.arch, tc.declared, got, tc.want)
		}
	}
	c, err := ReadHFConfig([]byte(`{"model_type": "llama", "vocab_size": 32, "hidden_size": 8, "intermediate_size": 16,
		"num_hidden_layers": 1, "num_attention_heads": 2, "num_key_value_heads": 2, "torch_dtype": "float16"}`))
	if err != nil {
		t.Fatal(err)
	}
	if c.CheckpointDType != "float16" || c.ActDType != mlx.Float32 {
		t.Errorf("llama config.json declaring float16: CheckpointDType %q, ActDType %v; want float16, float32 until a device is chosen", c.CheckpointDType, c.ActDType)
	}
}
