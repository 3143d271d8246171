package model

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/goprovider/provider/mlx"
)

func readPublished(t *testing.T, name string) []byte {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("..", "testdata", "configs", name))
	if err != nil {
		t.Fatal(err)
	}
	return data
}

// kindCount tallies the layers of each kind.
func kindCount(kinds []LayerKind) map[LayerKind]int {
	out := map[LayerKind]int{}
	for _, k := range kinds {
		out[k]++
	}
	return out
}

func TestPublishedConfigs(t *testing.T) {
	tests := []struct {
		file, arch  string
		layers      int
		kinds       map[LayerKind]int
		firstGlobal int
		context     int
		eos         []int32
		params      int64
		weightBytes int64
		quant       string
	}{
		{
			file: "gpt-oss-20b.json", arch: "gpt_oss", layers: 24,
			kinds: map[LayerKind]int{
				{Window: 128, KVHeads: 8, HeadDim: 64, SharedFrom: -1}: 12,
				{KVHeads: 8, HeadDim: 64, SharedFrom: -1}:              12,
			},
			firstGlobal: 1, context: 131_072, eos: []int32{200002},
			// 24 layers of 32 experts (19.11 B MXFP4 parameters at 4.25
			// bits) and 1.80 B bf16 parameters: the published 20.9 B.
			params: 20_914_757_184, weightBytes: 13_761_264_768, quant: "mxfp4",
		},
		{
			file: "gemma-4-26B-A4B.json", arch: "gemma4", layers: 30,
			kinds: map[LayerKind]int{
				{Window: 1024, KVHeads: 8, HeadDim: 256, SharedFrom: -1}: 25,
				{KVHeads: 2, HeadDim: 512, SharedFrom: -1}:               5,
			},
			firstGlobal: 5, context: 262_144, eos: []int32{1, 106},
			// The text decoder's 25.2 B parameters, all bf16.
			params: 25_233_141_790, weightBytes: 50_466_283_580,
		},
	}
	for _, tt := range tests {
		t.Run(tt.file, func(t *testing.T) {
			data := readPublished(t, tt.file)
			c, err := ReadHFConfig(data)
			if err != nil {
				t.Fatal(err)
			}
			if c.Arch != tt.arch || c.Layers != tt.layers || c.ContextLength != tt.context {
				t.Fatalf("arch %q layers %d context %d", c.Arch, c.Layers, c.ContextLength)
			}
			if c.ActDType != mlx.BFloat16 {
				t.Errorf("ActDType = %v, want bfloat16", c.ActDType)
			}
			if got := kindCount(c.Kinds); !equalCounts(got, tt.kinds) {
				t.Errorf("kinds = %v, want %v", got, tt.kinds)
			}
			for i, k := range c.Kinds[:tt.firstGlobal] {
				if k.Window == 0 {
					t.Errorf("layer %d is global, want sliding", i)
				}
			}
			if c.Kinds[tt.firstGlobal].Window != 0 {
				t.Errorf("layer %d slides, want global", tt.firstGlobal)
			}
			if !slices.Equal(c.EOS, tt.eos) {
				t.Errorf("EOS = %v, want %v", c.EOS, tt.eos)
			}

			info, err := DescribeHF(data)
			if err != nil {
				t.Fatal(err)
			}
			if info.Params != tt.params || info.WeightBytes != tt.weightBytes {
				t.Errorf("params %d bytes %d, want %d and %d", info.Params, info.WeightBytes, tt.params, tt.weightBytes)
			}
			switch {
			case tt.quant == "" && info.Quant != nil:
				t.Errorf("quantization %+v, want none", info.Quant)
			case tt.quant != "" && (info.Quant == nil || info.Quant.Method != tt.quant):
				t.Errorf("quantization %+v, want %s", info.Quant, tt.quant)
			}
		})
	}
}

func equalCounts(a, b map[LayerKind]int) bool {
	if len(a) != len(b) {
		return false
	}
	for k, n := range a {
		if b[k] != n {
			return false
		}
	}
	return true
}

func jsonString(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}

// gemma4Text returns the published Gemma 4 text_config as a flat
// gemma4_text config, with edits applied.
func gemma4Text(t *testing.T, edit func(map[string]any)) []byte {
	t.Helper()
	var top map[string]any
	if err := json.Unmarshal(readPublished(t, "gemma-4-26B-A4B.json"), &top); err != nil {
		t.Fatal(err)
	}
	text := top["text_config"].(map[string]any)
	if edit != nil {
		edit(text)
	}
	b, err := json.Marshal(text)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestGemma4TextMatchesNested(t *testing.T) {
	nested, err := ReadHFConfig(readPublished(t, "gemma-4-26B-A4B.json"))
	if err != nil {
		t.Fatal(err)
	}
	flat, err := ReadHFConfig(gemma4Text(t, nil))
	if err != nil {
		t.Fatal(err)
	}
	if jsonString(flat.Kinds) != jsonString(nested.Kinds) || flat.Hidden != nested.Hidden || flat.Vocab != nested.Vocab {
		t.Fatalf("gemma4_text config differs from its text_config nesting")
	}
}

func TestGemma4Pattern(t *testing.T) {
	// Without layer_types, every sliding_window_pattern-th layer is global.
	c, err := ReadHFConfig(gemma4Text(t, func(m map[string]any) {
		delete(m, "layer_types")
		m["sliding_window_pattern"] = 6
	}))
	if err != nil {
		t.Fatal(err)
	}
	for i, k := range c.Kinds {
		if global := (i+1)%6 == 0; global != (k.Window == 0) {
			t.Errorf("layer %d: window %d", i, k.Window)
		}
	}
}

func TestGemma4SharedKV(t *testing.T) {
	// 12 layers, every 3rd global, the last 5 reuse the cache of the last
	// layer of their type before them: sliding layers 6 and full layer 5.
	types := []any{}
	for i := range 12 {
		if (i+1)%3 == 0 {
			types = append(types, "full_attention")
		} else {
			types = append(types, "sliding_attention")
		}
	}
	c, err := ReadHFConfig(gemma4Text(t, func(m map[string]any) {
		m["num_hidden_layers"] = 12
		m["layer_types"] = types
		m["num_kv_shared_layers"] = 5
	}))
	if err != nil {
		t.Fatal(err)
	}
	want := []int{-1, -1, -1, -1, -1, -1, -1, 6, 5, 6, 6, 5}
	for i, k := range c.Kinds {
		if k.SharedFrom != want[i] {
			t.Errorf("layer %d shares from %d, want %d", i, k.SharedFrom, want[i])
		}
	}
}

func TestConfigOnlyRefusals(t *testing.T) {
	tests := []struct {
		name string
		data []byte
		want error
	}{
		{"unknown model_type", []byte(`{"model_type": "mamba"}`), ErrUnsupportedArch},
		{"unknown attention type", gemma4Text(t, func(m map[string]any) {
			types := m["layer_types"].([]any)
			types[3] = "chunked_attention"
		}), ErrUnsupportedArch},
		{"layer_types length", gemma4Text(t, func(m map[string]any) { m["num_hidden_layers"] = 29 }), ErrBadConfig},
		{"no pattern", gemma4Text(t, func(m map[string]any) { delete(m, "layer_types") }), ErrBadConfig},
		{"too many shared", gemma4Text(t, func(m map[string]any) { m["num_kv_shared_layers"] = 30 }), ErrBadConfig},
		{"nested without text_config", []byte(`{"model_type": "gemma4"}`), ErrBadConfig},
		{"gpt-oss without window", []byte(strings.Replace(string(readPublished(t, "gpt-oss-20b.json")), `"sliding_window": 128`, `"sliding_window": 0`, 1)), ErrBadConfig},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := ReadHFConfig(tt.data); !errors.Is(err, tt.want) {
				t.Fatalf("err = %v, want %v", err, tt.want)
			}
			if _, err := DescribeHF(tt.data); !errors.Is(err, tt.want) {
				t.Fatalf("DescribeHF err = %v, want %v", err, tt.want)
			}
		})
	}
}

func TestOpenRefusesUnknownArchitecture(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "config.json"), []byte(`{"model_type": "mamba"}`), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := Open(dir); !errors.Is(err, ErrUnsupportedArch) {
		t.Fatalf("Open = %v, want ErrUnsupportedArch", err)
	}
}

func TestMLXQuantizationEstimate(t *testing.T) {
	// A llama of 2 layers, hidden 128, ffn 256, vocab 1000, untied; MLX
	// 4-bit affine in groups of 64, one layer's down_proj at 8 bits, the
	// output head left in bf16.
	cfg := `{"model_type": "llama", "vocab_size": 1000, "hidden_size": 128, "intermediate_size": 256,
		"num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "torch_dtype": "bfloat16",
		"tie_word_embeddings": false,
		"quantization": {"group_size": 64, "bits": 4,
			"model.layers.1.mlp.down_proj": {"group_size": 64, "bits": 8},
			"lm_head": false}}`
	info, err := DescribeHF([]byte(cfg))
	if err != nil {
		t.Fatal(err)
	}
	// Row of in elements at b bits: in*b/8 bytes plus a bf16 scale and bias
	// per 64.
	row := func(in, bits int) int64 { return int64(in*bits/8 + in/64*4) }
	q, kv := 4*32, 2*32
	perLayer := int64(q)*row(128, 4) + 2*int64(kv)*row(128, 4) + 128*row(q, 4) + 2*256*row(128, 4)
	want := 1000*row(128, 4) + // embedding
		2*perLayer + 128*row(256, 4) + 128*row(256, 8) + // down_proj at 4 then 8 bits
		2*2*128*2 + 128*2 + // norms
		1000*128*2 // lm_head, bf16
	if info.WeightBytes != want {
		t.Errorf("WeightBytes = %d, want %d", info.WeightBytes, want)
	}
	formats := map[string]string{}
	for _, p := range info.Parts {
		formats[p.Module] = p.Format
	}
	if formats["model.layers.*.mlp.down_proj"] != "mixed" || formats["lm_head"] != "bfloat16" || formats["model.embed_tokens"] != "affine 4-bit g64" {
		t.Errorf("formats = %v", formats)
	}
	if info.Quant.Method != "mlx" || len(info.Quant.Unquantized) != 1 || len(info.Quant.Overrides) != 1 {
		t.Errorf("quantization = %+v", info.Quant)
	}
}

func TestUnknownQuantizationHasNoEstimate(t *testing.T) {
	data := strings.Replace(string(readPublished(t, "gpt-oss-20b.json")), `"quant_method": "mxfp4"`, `"quant_method": "bitnet"`, 1)
	info, err := DescribeHF([]byte(data))
	if err != nil {
		t.Fatal(err)
	}
	if info.WeightBytes != 0 || info.Params == 0 || !strings.Contains(strings.Join(info.Notes, "\n"), `"bitnet"`) {
		t.Fatalf("bytes %d params %d notes %q", info.WeightBytes, info.Params, info.Notes)
	}
}

func TestModuleMatches(t *testing.T) {
	tests := []struct {
		rule, module string
		want         bool
	}{
		{"model.layers.*.self_attn", "model.layers.3.self_attn.q_proj", true},
		{"model.layers.*.self_attn", "model.layers.3.mlp.router", false},
		{"lm_head", "lm_head", true},
		{"model.embed_tokens", "model.embed_tokens", true},
		// MLX and HF nest the language model differently.
		{"language_model.model.layers.0.router.proj", "model.language_model.layers.0.router.proj", true},
		{"language_model.model.layers.0.router.proj", "model.language_model.layers.1.router.proj", false},
		{"model.layers.1.mlp", "model.layers.10.mlp.down_proj", false},
	}
	for _, tt := range tests {
		if got := moduleMatches(tt.rule, tt.module); got != tt.want {
			t.Errorf("moduleMatches(%q, %q) = %v", tt.rule, tt.module, got)
		}
	}
}
