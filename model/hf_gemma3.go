package model

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math"
	"strings"

	"github.com/goprovider/provider/mlx"
)

// hfGemma3Text is the subset of a Gemma 3 text config.json the family
// reads. gemma3Defaults fills it first, so a key a checkpoint leaves out
// (the text_config of a multimodal checkpoint omits many) keeps the value
// HF transformers' Gemma3TextConfig gives it.
type hfGemma3Text struct {
	ModelType           string          `json:"model_type"`
	VocabSize           int             `json:"vocab_size"`
	HiddenSize          int             `json:"hidden_size"`
	IntermediateSize    int             `json:"intermediate_size"`
	NumHiddenLayers     int             `json:"num_hidden_layers"`
	NumAttentionHeads   int             `json:"num_attention_heads"`
	NumKeyValueHeads    int             `json:"num_key_value_heads"`
	HeadDim             int             `json:"head_dim"`
	RMSNormEps          float64         `json:"rms_norm_eps"`
	RopeTheta           float64         `json:"rope_theta"`
	RopeLocalBaseFreq   float64         `json:"rope_local_base_freq"`
	RopeScaling         map[string]any  `json:"rope_scaling"`
	RopeParameters      map[string]any  `json:"rope_parameters"`
	SlidingWindow       int             `json:"sliding_window"`
	SlidingPattern      int             `json:"sliding_window_pattern"`
	LayerTypes          []string        `json:"layer_types"`
	QueryPreAttnScalar  float64         `json:"query_pre_attn_scalar"`
	FinalLogitSoftcap   *float64        `json:"final_logit_softcapping"`
	AttnLogitSoftcap    *float64        `json:"attn_logit_softcapping"`
	HiddenActivation    string          `json:"hidden_activation"`
	MaxPosition         int             `json:"max_position_embeddings"`
	TieWordEmbeddings   *bool           `json:"tie_word_embeddings"`
	BOSTokenID          json.RawMessage `json:"bos_token_id"`
	EOSTokenID          json.RawMessage `json:"eos_token_id"`
	TextConfig          json.RawMessage `json:"text_config"`
	Quantization        *hfQuant        `json:"quantization"`
	QuantizationConfig  *hfQuant        `json:"quantization_config"`
	UseBidirectionalAtt *bool           `json:"use_bidirectional_attention"`
}

func gemma3Defaults() hfGemma3Text {
	return hfGemma3Text{
		VocabSize: 262208, HiddenSize: 2304, IntermediateSize: 9216, NumHiddenLayers: 26,
		NumAttentionHeads: 8, NumKeyValueHeads: 4, HeadDim: 256, RMSNormEps: 1e-6,
		RopeTheta: 1e6, RopeLocalBaseFreq: gemma3LocalBase, SlidingWindow: 4096, SlidingPattern: gemma3Pattern,
		QueryPreAttnScalar: 256, HiddenActivation: "gelu_pytorch_tanh", MaxPosition: 131072,
	}
}

// isGemma3 reports whether an HF model_type belongs to the Gemma 3 family:
// the text model, or the multimodal one whose text_config describes it.
func isGemma3(modelType string) bool { return modelType == "gemma3_text" || modelType == "gemma3" }

// gemma3HFConfig reads a Gemma 3 config.json; for model_type gemma3 the
// language model is its text_config (token ids may sit at either level).
func gemma3HFConfig(data []byte) (Config, error) {
	top := gemma3Defaults()
	if err := json.Unmarshal(data, &top); err != nil {
		return Config{}, fmt.Errorf("%w: config.json: %w", ErrBadConfig, err)
	}
	hc := top
	if top.ModelType == "gemma3" {
		if len(top.TextConfig) == 0 {
			return Config{}, fmt.Errorf("%w: gemma3 config.json without text_config", ErrBadConfig)
		}
		hc = gemma3Defaults()
		if err := json.Unmarshal(top.TextConfig, &hc); err != nil {
			return Config{}, fmt.Errorf("%w: text_config: %w", ErrBadConfig, err)
		}
		if len(hc.BOSTokenID) == 0 {
			hc.BOSTokenID = top.BOSTokenID
		}
		if len(hc.EOSTokenID) == 0 {
			hc.EOSTokenID = top.EOSTokenID
		}
	}
	return hc.config()
}

func (hc *hfGemma3Text) config() (Config, error) {
	switch {
	case hc.AttnLogitSoftcap != nil && *hc.AttnLogitSoftcap > 0:
		return Config{}, fmt.Errorf("%w: gemma3 with attention logit softcapping", ErrUnsupportedArch)
	case hc.UseBidirectionalAtt != nil && *hc.UseBidirectionalAtt:
		return Config{}, fmt.Errorf("%w: gemma3 with bidirectional attention", ErrUnsupportedArch)
	case hc.HiddenActivation != "gelu_pytorch_tanh" && hc.HiddenActivation != "gelu_tanh":
		return Config{}, fmt.Errorf("%w: gemma3 activation %q", ErrUnsupportedArch, hc.HiddenActivation)
	case hc.QueryPreAttnScalar <= 0:
		return Config{}, fmt.Errorf("%w: query_pre_attn_scalar %v", ErrBadConfig, hc.QueryPreAttnScalar)
	}
	c := Config{
		Arch:          "gemma3",
		Vocab:         hc.VocabSize,
		Hidden:        hc.HiddenSize,
		Intermediate:  hc.IntermediateSize,
		Layers:        hc.NumHiddenLayers,
		Heads:         hc.NumAttentionHeads,
		KVHeads:       hc.NumKeyValueHeads,
		HeadDim:       hc.HeadDim,
		NormEps:       float32(hc.RMSNormEps),
		ContextLength: hc.MaxPosition,
		// Gemma ties its output to the embedding unless told otherwise.
		TiedEmbedding: hc.TieWordEmbeddings == nil || *hc.TieWordEmbeddings,
		BOS:           -1,
		ActDType:      mlx.Float32,
		AttnScale:     float32(1 / math.Sqrt(hc.QueryPreAttnScalar)),
	}
	if hc.FinalLogitSoftcap != nil && *hc.FinalLogitSoftcap > 0 {
		c.FinalLogitSoftcap = float32(*hc.FinalLogitSoftcap)
	}
	global, local := hc.RopeScaling, map[string]any(nil)
	globalBase, localBase := hc.RopeTheta, hc.RopeLocalBaseFreq
	if rp := hc.RopeParameters; rp != nil {
		// transformers 5: one entry per attention type.
		full, _ := rp["full_attention"].(map[string]any)
		slide, _ := rp["sliding_attention"].(map[string]any)
		if full == nil || slide == nil {
			return Config{}, fmt.Errorf("%w: rope_parameters without full_attention and sliding_attention", ErrBadConfig)
		}
		global, local = full, slide
		globalBase, localBase = num(full, "rope_theta", globalBase), num(slide, "rope_theta", localBase)
	}
	c.RoPE = RoPE{Dims: c.HeadDim, Base: float32(globalBase), Scale: 1}
	c.LocalRoPE = RoPE{Dims: c.HeadDim, Base: float32(localBase), Scale: 1}
	if err := hfRopeScaling(&c.RoPE, global); err != nil {
		return Config{}, err
	}
	if err := hfRopeScaling(&c.LocalRoPE, local); err != nil {
		return Config{}, err
	}
	var sliding []bool
	if len(hc.LayerTypes) > 0 {
		if len(hc.LayerTypes) != c.Layers {
			return Config{}, fmt.Errorf("%w: %d layer_types for %d layers", ErrBadConfig, len(hc.LayerTypes), c.Layers)
		}
		sliding = make([]bool, c.Layers)
		for i, t := range hc.LayerTypes {
			switch t {
			case "sliding_attention":
				sliding[i] = true
			case "full_attention":
			default:
				return Config{}, fmt.Errorf("%w: layer type %q", ErrUnsupportedArch, t)
			}
		}
	}
	c.Kinds = gemma3Kinds(c.Layers, c.KVHeads, c.HeadDim, hc.SlidingWindow, hc.SlidingPattern, sliding)
	if ids := tokenIDs(hc.BOSTokenID); len(ids) > 0 {
		c.BOS = ids[0]
	}
	c.EOS = tokenIDs(hc.EOSTokenID)
	return c, c.Validate()
}

// gemma3HFPrefixes are the prefixes under which checkpoints of the
// multimodal model keep the language model, with the HF name they stand
// for; tensors of the vision tower and projector are dropped.
var gemma3HFPrefixes = []struct{ from, to string }{
	{"language_model.model.", "model."},
	{"model.language_model.", "model."},
	{"language_model.lm_head.", "lm_head."},
}

// adaptGemma3HF renames a multimodal checkpoint's language-model tensors to
// the text model's names, drops the rest, and turns every RMSNorm weight w
// into the multiplier 1+w, computed in float32 as Gemma's RMSNorm does.
func (m *Model) adaptGemma3HF() error {
	out := make(map[string]*Tensor, len(m.Tensors))
	for name, t := range m.Tensors {
		for _, p := range gemma3HFPrefixes {
			if strings.HasPrefix(name, p.from) {
				name = p.to + strings.TrimPrefix(name, p.from)
				break
			}
		}
		if !strings.HasPrefix(name, "model.") && !strings.HasPrefix(name, "lm_head.") {
			continue
		}
		if strings.HasSuffix(name, "norm.weight") {
			shifted, err := plusOne(t)
			if err != nil {
				return fmt.Errorf("%s: %w", name, err)
			}
			t = shifted
		}
		t.Name = name
		out[name] = t
	}
	m.Tensors = out
	return nil
}

// plusOne returns a float32 copy of a dense float tensor with 1 added to
// every element.
func plusOne(t *Tensor) (*Tensor, error) {
	if t.Quant != nil {
		return nil, fmt.Errorf("%w: quantized norm weight", ErrUnsupportedType)
	}
	var vals []float32
	switch t.DType {
	case mlx.Float32:
		vals = make([]float32, len(t.Data)/4)
		for i := range vals {
			vals[i] = math.Float32frombits(binary.LittleEndian.Uint32(t.Data[4*i:]))
		}
	case mlx.BFloat16:
		vals = make([]float32, len(t.Data)/2)
		for i := range vals {
			vals[i] = math.Float32frombits(uint32(binary.LittleEndian.Uint16(t.Data[2*i:])) << 16)
		}
	case mlx.Float16:
		vals = make([]float32, len(t.Data)/2)
		for i := range vals {
			vals[i] = halfBits(binary.LittleEndian.Uint16(t.Data[2*i:]))
		}
	default:
		return nil, fmt.Errorf("%w: norm weight of %v", ErrUnsupportedType, t.DType)
	}
	for i := range vals {
		vals[i]++
	}
	return &Tensor{Name: t.Name, Shape: t.Shape, DType: mlx.Float32, Data: float32Bytes(vals)}, nil
}

// halfBits decodes IEEE binary16.
func halfBits(h uint16) float32 {
	sign := float32(1)
	if h&0x8000 != 0 {
		sign = -1
	}
	exp, frac := int(h>>10&0x1f), float64(h&0x3ff)
	switch exp {
	case 0:
		return sign * float32(math.Ldexp(frac, -24))
	case 0x1f:
		if frac != 0 {
			return float32(math.NaN())
		}
		return sign * float32(math.Inf(1))
	}
	return sign * float32(math.Ldexp(1024+frac, exp-25))
}
