package model

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"os"
	"slices"
	"testing"

	"github.com/goprovider/provider/gguf"
	"github.com/goprovider/provider/mlx"
)

// gemma3GGUF is installed by scripts/setup_gemma3.sh (make setup).
const gemma3GGUF = "../.deps/gemma3/gemma-3-270m-q4_k_m.gguf"

func openGemma3(t *testing.T) *Model {
	t.Helper()
	if _, err := os.Stat(gemma3GGUF); err != nil {
		t.Fatalf("%s is missing: run make setup (%v)", gemma3GGUF, err)
	}
	m, err := Open(gemma3GGUF)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	return m
}

// gemma3Config270M is what HF's config.json for google/gemma-3-270m states,
// written in the transformers 4.5x form (layer_types listed).
const gemma3Config270M = `{
  "architectures": ["Gemma3ForCausalLM"], "model_type": "gemma3_text",
  "attn_logit_softcapping": null, "final_logit_softcapping": null,
  "bos_token_id": 2, "eos_token_id": 1, "pad_token_id": 0,
  "head_dim": 256, "hidden_activation": "gelu_pytorch_tanh", "hidden_size": 640,
  "intermediate_size": 2048, "max_position_embeddings": 32768,
  "num_attention_heads": 4, "num_hidden_layers": 18, "num_key_value_heads": 1,
  "query_pre_attn_scalar": 256, "rms_norm_eps": 1e-06,
  "rope_local_base_freq": 10000.0, "rope_scaling": null, "rope_theta": 1000000.0,
  "sliding_window": 512, "use_bidirectional_attention": false, "vocab_size": 262144,
  "layer_types": ["sliding_attention", "sliding_attention", "sliding_attention", "sliding_attention",
    "sliding_attention", "full_attention", "sliding_attention", "sliding_attention", "sliding_attention",
    "sliding_attention", "sliding_attention", "full_attention", "sliding_attention", "sliding_attention",
    "sliding_attention", "sliding_attention", "sliding_attention", "full_attention"]
}`

// globalLayers lists the full-attention layers of a config.
func globalLayers(c Config) []int {
	var out []int
	for i, k := range c.Kinds {
		if k.Window == 0 {
			out = append(out, i)
		}
	}
	return out
}

// TestGemma3GGUFConfig pins the facts llama.cpp reads from the 270M GGUF,
// and checks that HF's config.json of the same model gives the same shape.
func TestGemma3GGUFConfig(t *testing.T) {
	m := openGemma3(t)
	c := m.Config
	want := Config{
		Arch: "gemma3", Vocab: 262144, Hidden: 640, Intermediate: 2048, Layers: 18, Heads: 4, KVHeads: 1,
		HeadDim: 256, NormEps: 1e-6, ContextLength: 32768, TiedEmbedding: true, BOS: 2,
		RoPE:      RoPE{Dims: 256, Base: 1e6, Scale: 1},
		LocalRoPE: RoPE{Dims: 256, Base: 10000, Scale: 1},
		AttnScale: 1.0 / 16,
	}
	got := c
	got.Kinds, got.EOS, got.ActDType = nil, nil, 0
	if fmt.Sprintf("%+v", got) != fmt.Sprintf("%+v", want) {
		t.Errorf("config\n got %+v\nwant %+v", got, want)
	}
	if g := globalLayers(c); !slices.Equal(g, []int{5, 11, 17}) {
		t.Errorf("global layers %v, want [5 11 17]", g)
	}
	for i, k := range c.Kinds {
		if (k.Window == 0) != slices.Contains([]int{5, 11, 17}, i) || (k.Window != 0 && k.Window != 512) ||
			k.KVHeads != 1 || k.HeadDim != 256 || k.SharedFrom != -1 {
			t.Errorf("layer %d kind %+v", i, k)
		}
	}
	// llama.cpp's end-of-generation set for this file is {1, 106, 212}.
	for _, id := range []int32{1, 106} {
		if !slices.Contains(c.EOS, id) {
			t.Errorf("EOS %v lacks %d", c.EOS, id)
		}
	}

	hf, err := ReadHFConfig([]byte(gemma3Config270M))
	if err != nil {
		t.Fatal(err)
	}
	hf.EOS, hf.ActDType, c.EOS, c.ActDType = nil, 0, nil, 0
	if fmt.Sprintf("%+v", hf) != fmt.Sprintf("%+v", c) {
		t.Errorf("HF config.json and GGUF metadata disagree:\n   hf %+v\n gguf %+v", hf, c)
	}
}

// TestGemma3GGUFTensors checks how each ggml type of the file arrives: Q5_0
// and Q4_K as MLX affine 5/4-bit with float32 group parameters, Q8_0 as
// 8-bit with binary16 ones, Q6_K dequantized, and every value equal to
// ggml's dequantization once MLX dequantizes it on the device.
func TestGemma3GGUFTensors(t *testing.T) {
	m := openGemma3(t)
	gf, err := gguf.Open(gemma3GGUF)
	if err != nil {
		t.Fatal(err)
	}
	defer gf.Close()
	th := mlx.NewThread()
	defer th.Close()
	for _, tc := range []struct {
		gguf, hf   string
		ggml       string
		bits       int
		scaleDType mlx.Dtype
	}{
		{"blk.0.attn_q.weight", "model.layers.0.self_attn.q_proj.weight", "Q5_0", 5, mlx.Float32},
		{"blk.0.attn_output.weight", "model.layers.0.self_attn.o_proj.weight", "Q4_K", 4, mlx.Float32},
		{"blk.0.attn_v.weight", "model.layers.0.self_attn.v_proj.weight", "Q8_0", 8, mlx.Float16},
		{"blk.0.ffn_down.weight", "model.layers.0.mlp.down_proj.weight", "Q6_K", 0, 0},
		{"blk.0.post_ffw_norm.weight", "model.layers.0.post_feedforward_layernorm.weight", "", 0, 0},
	} {
		t.Run(tc.gguf, func(t *testing.T) {
			tensor, err := m.Tensor(tc.hf)
			if err != nil {
				t.Fatal(err)
			}
			if tensor.GGMLType != tc.ggml {
				t.Errorf("ggml type %q, want %q", tensor.GGMLType, tc.ggml)
			}
			switch {
			case tc.bits == 0 && tensor.Quant != nil:
				t.Fatalf("quantized as %+v, want dense", tensor.Quant)
			case tc.bits != 0 && (tensor.Quant == nil || tensor.Quant.Bits != tc.bits || tensor.Quant.GroupSize != 32 ||
				tensor.Quant.ScaleDType != tc.scaleDType):
				t.Fatalf("quant %+v, want %d bits, group 32, %v scales", tensor.Quant, tc.bits, tc.scaleDType)
			}
			ti, _ := gf.Tensor(tc.gguf)
			raw, err := gf.TensorData(ti)
			if err != nil {
				t.Fatal(err)
			}
			want, err := gguf.Dequantize(ti.Type, raw, int(ti.Elements()))
			if err != nil {
				t.Fatal(err)
			}
			var got []float32
			th.Do(func() {
				s := mlx.DefaultStream()
				defer s.Free()
				w, uerr := upload(s, tensor, mlx.Float32, false)
				if uerr != nil {
					err = uerr
					return
				}
				defer w.Free()
				f := mlx.NewFrame(s)
				defer f.Free()
				a := w.W
				if w.Quantized() {
					a = f.Dequantize(w.W, w.Scales, w.Biases, w.GroupSize, w.Bits, w.Mode)
				}
				got = f.ToFloat32s(a)
				err = f.Err()
			})
			if err != nil {
				t.Fatal(err)
			}
			if len(got) != len(want) {
				t.Fatalf("%d values, want %d", len(got), len(want))
			}
			for i := range want {
				if got[i] != want[i] {
					t.Fatalf("element %d: device %g, ggml %g", i, got[i], want[i])
				}
			}
		})
	}
}

func sameRoPE(a, b RoPE) bool { return fmt.Sprintf("%+v", a) == fmt.Sprintf("%+v", b) }

func TestGemma3HFConfig(t *testing.T) {
	sliding6 := func(layers, window int) []LayerKind {
		return gemma3Kinds(layers, 4, 256, window, 6, nil)
	}
	for _, tc := range []struct {
		name  string
		json  string
		check func(t *testing.T, c Config)
	}{
		{
			// A multimodal checkpoint: the language model is text_config, which
			// leaves heads, head_dim and the RoPE bases to the defaults.
			name: "gemma3 with text_config",
			json: `{"model_type": "gemma3", "eos_token_id": [1, 106],
			  "text_config": {"model_type": "gemma3_text", "hidden_size": 2560, "intermediate_size": 10240,
			    "num_hidden_layers": 34, "sliding_window": 1024,
			    "rope_scaling": {"factor": 8.0, "rope_type": "linear"}},
			  "vision_config": {"model_type": "siglip_vision_model"}}`,
			check: func(t *testing.T, c Config) {
				if c.Hidden != 2560 || c.Layers != 34 || c.Heads != 8 || c.KVHeads != 4 || c.HeadDim != 256 || c.Vocab != 262208 {
					t.Errorf("shape %+v", c)
				}
				if !sameRoPE(c.RoPE, RoPE{Dims: 256, Base: 1e6, Scale: 0.125}) || !sameRoPE(c.LocalRoPE, RoPE{Dims: 256, Base: 10000, Scale: 1}) {
					t.Errorf("rope %+v local %+v", c.RoPE, c.LocalRoPE)
				}
				if !slices.Equal(c.Kinds, sliding6(34, 1024)) || !slices.Equal(c.EOS, []int32{1, 106}) || !c.TiedEmbedding {
					t.Errorf("kinds %v eos %v tied %v", c.Kinds, c.EOS, c.TiedEmbedding)
				}
			},
		},
		{
			name: "transformers 5 rope_parameters",
			json: `{"model_type": "gemma3_text", "num_hidden_layers": 12, "sliding_window_pattern": 3,
			  "query_pre_attn_scalar": 168, "final_logit_softcapping": 30.0, "tie_word_embeddings": false,
			  "rope_parameters": {"full_attention": {"rope_type": "linear", "factor": 4.0, "rope_theta": 500000.0},
			                      "sliding_attention": {"rope_type": "default", "rope_theta": 20000.0}}}`,
			check: func(t *testing.T, c Config) {
				if !sameRoPE(c.RoPE, RoPE{Dims: 256, Base: 5e5, Scale: 0.25}) || !sameRoPE(c.LocalRoPE, RoPE{Dims: 256, Base: 20000, Scale: 1}) {
					t.Errorf("rope %+v local %+v", c.RoPE, c.LocalRoPE)
				}
				if g := globalLayers(c); !slices.Equal(g, []int{2, 5, 8, 11}) {
					t.Errorf("global layers %v", g)
				}
				if c.AttnScale != float32(1/math.Sqrt(168)) || c.FinalLogitSoftcap != 30 || c.TiedEmbedding {
					t.Errorf("scale %v softcap %v tied %v", c.AttnScale, c.FinalLogitSoftcap, c.TiedEmbedding)
				}
			},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := ReadHFConfig([]byte(tc.json))
			if err != nil {
				t.Fatal(err)
			}
			if c.Arch != "gemma3" {
				t.Errorf("arch %q", c.Arch)
			}
			tc.check(t, c)
		})
	}
}

func TestGemma3HFConfigRejects(t *testing.T) {
	for _, tc := range []struct {
		name, json string
		want       error
	}{
		{"layer_types of the wrong length", `{"model_type": "gemma3_text", "num_hidden_layers": 2, "layer_types": ["full_attention"]}`, ErrBadConfig},
		{"unknown layer type", `{"model_type": "gemma3_text", "num_hidden_layers": 1, "layer_types": ["chunked_attention"]}`, ErrUnsupportedArch},
		{"attention softcapping", `{"model_type": "gemma3_text", "attn_logit_softcapping": 50.0}`, ErrUnsupportedArch},
		{"other activation", `{"model_type": "gemma3_text", "hidden_activation": "silu"}`, ErrUnsupportedArch},
		{"bidirectional attention", `{"model_type": "gemma3_text", "use_bidirectional_attention": true}`, ErrUnsupportedArch},
		{"multimodal without text_config", `{"model_type": "gemma3"}`, ErrBadConfig},
		{"rope_parameters without sliding entry", `{"model_type": "gemma3_text", "rope_parameters": {"full_attention": {"rope_theta": 1e6}}}`, ErrBadConfig},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := ReadHFConfig([]byte(tc.json)); !errors.Is(err, tc.want) {
				t.Fatalf("error %v, want %v", err, tc.want)
			}
		})
	}
}

// TestGemma3HFNames checks the HF weight adaptation: multimodal prefixes
// dropped, the vision tower left out, and norm weights w turned into 1+w
// in float32 from every float encoding.
func TestGemma3HFNames(t *testing.T) {
	bf16 := func(v float32) []byte {
		return binary.LittleEndian.AppendUint16(nil, uint16(math.Float32bits(v)>>16))
	}
	m := &Model{Tensors: map[string]*Tensor{
		"language_model.model.layers.0.input_layernorm.weight": {Shape: []int{1}, DType: mlx.BFloat16, Data: bf16(-0.5)},
		"model.language_model.norm.weight":                     {Shape: []int{1}, DType: mlx.Float16, Data: []byte{0x00, 0x38}}, // 0.5
		"model.layers.1.self_attn.q_norm.weight":               {Shape: []int{1}, DType: mlx.Float32, Data: float32Bytes([]float32{0.25})},
		"language_model.model.embed_tokens.weight":             {Shape: []int{1, 1}, DType: mlx.Float32, Data: float32Bytes([]float32{3})},
		"vision_tower.vision_model.post_layernorm.weight":      {Shape: []int{1}, DType: mlx.Float32, Data: float32Bytes([]float32{1})},
		"multi_modal_projector.mm_input_projection_weight":     {Shape: []int{1, 1}, DType: mlx.Float32, Data: float32Bytes([]float32{1})},
	}}
	if err := m.adaptGemma3HF(); err != nil {
		t.Fatal(err)
	}
	want := map[string]float32{
		"model.layers.0.input_layernorm.weight":  0.5,
		"model.norm.weight":                      1.5,
		"model.layers.1.self_attn.q_norm.weight": 1.25,
		"model.embed_tokens.weight":              3,
	}
	if len(m.Tensors) != len(want) {
		t.Errorf("tensors %v", slices.Sorted(func(yield func(string) bool) {
			for n := range m.Tensors {
				if !yield(n) {
					return
				}
			}
		}))
	}
	for name, v := range want {
		tensor, err := m.Tensor(name)
		if err != nil {
			t.Fatal(err)
		}
		vals, err := tensor.Float32s()
		if err != nil {
			t.Fatal(err)
		}
		if len(vals) != 1 || vals[0] != v || tensor.Name != name {
			t.Errorf("%s = %v (name %q), want %v", name, vals, tensor.Name, v)
		}
	}
}
