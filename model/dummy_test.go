package model

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// The dummy model of a published config takes the device memory info
// estimates for the checkpoint, counted from the same manifest the family
// loads by: nothing is built.
func TestDummyPlanMatchesInfo(t *testing.T) {
	for _, tc := range []struct {
		file          string
		params, bytes int64
	}{
		{"gpt-oss-20b.json", 20_914_757_184, 13_761_264_768},
		{"gemma-4-26B-A4B.json", 25_233_141_790, 50_466_283_580},
	} {
		t.Run(tc.file, func(t *testing.T) {
			raw := readPublished(t, tc.file)
			d, err := PlanDummy(raw)
			if err != nil {
				t.Fatal(err)
			}
			info, err := DescribeHF(raw)
			if err != nil {
				t.Fatal(err)
			}
			if d.Params() != info.Params || d.Bytes() != info.WeightBytes {
				t.Errorf("dummy: %d params in %d bytes; info: %d in %d", d.Params(), d.Bytes(), info.Params, info.WeightBytes)
			}
			if d.Params() != tc.params || d.Bytes() != tc.bytes {
				t.Errorf("dummy: %d params in %d bytes, want %d in %d", d.Params(), d.Bytes(), tc.params, tc.bytes)
			}
		})
	}
}

// A quantization block decides each matrix's format: MLX defaults,
// per-module overrides and exclusions; vectors stay dense.
func TestDummyPlanQuantization(t *testing.T) {
	cfg := `{"model_type": "llama", "vocab_size": 1000, "hidden_size": 128, "intermediate_size": 256,
		"num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "torch_dtype": "bfloat16",
		"tie_word_embeddings": false,
		"quantization": {"group_size": 64, "bits": 4,
			"model.layers.1.mlp.down_proj": {"group_size": 64, "bits": 8},
			"lm_head": false}}`
	d, err := PlanDummy([]byte(cfg))
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{
		"model.embed_tokens.weight":              "affine 4-bit g64",
		"lm_head.weight":                         "dense",
		"model.norm.weight":                      "dense",
		"model.layers.0.input_layernorm.weight":  "dense",
		"model.layers.0.mlp.down_proj.weight":    "affine 4-bit g64",
		"model.layers.1.mlp.down_proj.weight":    "affine 8-bit g64",
		"model.layers.1.self_attn.k_proj.weight": "affine 4-bit g64",
	}
	got := map[string]string{}
	for _, x := range d.Tensors {
		got[x.Name] = "dense"
		if x.Quant != nil {
			got[x.Name] = x.Quant.String()
		}
		if x.Packed {
			t.Errorf("%s packed outside gpt-oss", x.Name)
		}
	}
	if len(got) != len(llamaTensors(d.Config)) {
		t.Errorf("%d tensors, manifest has %d", len(got), len(llamaTensors(d.Config)))
	}
	for name, f := range want {
		if got[name] != f {
			t.Errorf("%s: %s, want %s", name, got[name], f)
		}
	}
	// 4 heads of 32: an affine group of 64 halves a row of q_proj exactly.
	var bytes int64
	for _, x := range d.Tensors {
		bytes += d.tensorBytes(x)
	}
	if bytes != d.Bytes() || d.Bytes() <= 0 {
		t.Errorf("Bytes %d, sum %d", d.Bytes(), bytes)
	}
}

func TestDummyPlanRefuses(t *testing.T) {
	for _, tc := range []struct {
		name, cfg string
		want      error
	}{
		{"unknown architecture", `{"model_type": "mamba"}`, ErrUnsupportedArch},
		{"not json", `{"model_type": `, ErrBadConfig},
		{"fp8", `{"model_type": "llama", "vocab_size": 100, "hidden_size": 64, "intermediate_size": 64,
			"num_hidden_layers": 1, "num_attention_heads": 2, "quantization_config": {"quant_method": "fp8"}}`, ErrUnsupportedType},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := PlanDummy([]byte(tc.cfg)); !errors.Is(err, tc.want) {
				t.Fatalf("PlanDummy = %v, want %v", err, tc.want)
			}
		})
	}
	dir := t.TempDir()
	small := filepath.Join(dir, "tokenizer.json")
	cfg := filepath.Join(dir, "config.json")
	// A vocabulary of 260 tokens against an embedding of 200 rows.
	tok, err := os.ReadFile("../testdata/ref/gptoss_tiny/hf_mxfp4/tokenizer.json")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(small, tok, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(cfg, []byte(`{"model_type": "llama", "vocab_size": 200, "hidden_size": 64,
		"intermediate_size": 64, "num_hidden_layers": 1, "num_attention_heads": 2}`), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, _, err := OpenDummy(cfg, small); !errors.Is(err, ErrTokenizerVocab) {
		t.Fatalf("OpenDummy = %v, want ErrTokenizerVocab", err)
	}
}

// mlx-lm's own gpt-oss quantization: MXFP4 everywhere but the router,
// whose entry (8 bits in groups of 64, no mode) is affine.
func TestDummyPlanMLXGPTOSS(t *testing.T) {
	raw, err := os.ReadFile("../testdata/ref/gptoss_tiny/mlx_mxfp4/config.json")
	if err != nil {
		t.Fatal(err)
	}
	d, err := PlanDummy(raw)
	if err != nil {
		t.Fatal(err)
	}
	for _, x := range d.Tensors {
		var want *QuantLevel
		switch {
		case strings.HasSuffix(x.Name, ".mlp.router.weight"):
			want = &QuantLevel{Mode: "affine", Bits: 8, GroupSize: 64}
		case isMatrix(x.TensorSpec):
			want = &QuantLevel{Mode: "mxfp4", Bits: 4, GroupSize: 32}
		}
		switch {
		case (want == nil) != (x.Quant == nil) || want != nil && *want != *x.Quant:
			t.Errorf("%s: %v, want %v", x.Name, x.Quant, want)
		case want != nil && (!x.Packed || d.Config.GPTOSS.Packed[x.Name] != *want):
			t.Errorf("%s: not recorded as packed", x.Name)
		}
	}
}
