package model

import (
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"strings"
)

// Gemma4Facts is what a Gemma 4 text decoder needs beyond Config's common
// fields. ReadHFConfig fills it for Arch "gemma4"; it is nil for every
// other architecture. Config.Kinds carries the per-layer attention shapes
// (full-attention layers have their own head size and, with KEqV, their
// own KV head count) and which layers reuse another layer's KV.
type Gemma4Facts struct {
	// GlobalRoPE rotates the full-attention layers' heads. Dims is their
	// whole head size; with proportional RoPE, Freqs holds every pair's
	// period, +Inf past the rotated fraction so those pairs stay unrotated
	// (the periods use the whole head size as the exponent's denominator,
	// which a rotation of fewer dims would not).
	GlobalRoPE RoPE
	// KEqV: full-attention layers have no value projection; their values
	// are the key projection, RMS-normalized without scale and not rotated.
	KEqV bool
	// MLPWidths is each layer's dense MLP width, already doubled in the
	// KV-sharing layers of a checkpoint with use_double_wide_mlp.
	MLPWidths []int
	// Experts > 0 adds a mixture-of-experts block beside every layer's
	// dense MLP: TopK of Experts experts of width ExpertWidth per token.
	Experts, TopK, ExpertWidth int
	// PerLayerInput > 0 feeds every layer a PerLayerInput-wide input built
	// from a second embedding table of PerLayerVocab rows and a projection
	// of the token's embedding.
	PerLayerInput, PerLayerVocab int
	// VisionBidirectional (use_bidirectional_attention "vision"): the
	// placeholders of one image attend to each other in the sliding-window
	// layers; the full-attention layers stay causal over them. Without it
	// every layer is causal over images too.
	VisionBidirectional bool
	// MediaTokens are the placeholder ids of images, video and audio of a
	// multimodal checkpoint (none for gemma4_text). As HF transformers'
	// multimodal model does, the forward pass looks PadToken up in both
	// embedding tables in their place; soft tokens then replace the main
	// embedding, and the per-layer inputs keep the pad token's row.
	MediaTokens []int32
	PadToken    int32
}

// gemma4Facts checks the features of a Gemma 4 text config that the
// forward pass implements and records them on c. widths is each layer's
// dense MLP width as the config gives it.
func (hc *hfGemma4Text) gemma4Facts(c *Config, widths []int, media []int32) error {
	switch act := hc.HiddenActivation; act {
	case "", "gelu_pytorch_tanh", "gelu_tanh":
	default:
		return fmt.Errorf("%w: gemma4 activation %q", ErrUnsupportedArch, act)
	}
	var bidirectional string
	if len(hc.UseBidirectional) > 0 && json.Unmarshal(hc.UseBidirectional, &bidirectional) == nil && bidirectional == "all" {
		return fmt.Errorf("%w: gemma4 with bidirectional attention over all tokens", ErrUnsupportedArch)
	}
	var pad int32
	if hc.PadTokenID != nil {
		pad = *hc.PadTokenID
	}
	if pad < 0 || int(pad) >= c.Vocab {
		return fmt.Errorf("%w: gemma4 pad_token_id %d outside the vocabulary of %d", ErrBadConfig, pad, c.Vocab)
	}
	if hc.EnableMoEBlock && (hc.TopKExperts <= 0 || hc.TopKExperts > hc.NumExperts) {
		return fmt.Errorf("%w: gemma4 MoE block choosing %d of %d experts", ErrBadConfig, hc.TopKExperts, hc.NumExperts)
	}
	if kind := ropeType(hc.RopeParameters[slidingAttention]); kind != "default" {
		return fmt.Errorf("%w: gemma4 sliding-layer rope_type %q", ErrUnsupportedArch, kind)
	}
	g := &Gemma4Facts{KEqV: hc.AttentionKEqV, VisionBidirectional: bidirectional == "vision", MediaTokens: media, PadToken: pad}
	globalDim := c.HeadDim
	for _, k := range c.Kinds {
		if k.Window == 0 {
			globalDim = k.HeadDim
			break
		}
	}
	rp := hc.RopeParameters[fullAttention]
	base := num(rp, "rope_theta", 1e6)
	partial := num(rp, "partial_rotary_factor", 1)
	switch kind := ropeType(rp); kind {
	case "proportional":
		factor := num(rp, "factor", 1)
		rotated := int(partial * float64(globalDim) / 2)
		if rotated <= 0 || rotated > globalDim/2 || factor <= 0 {
			return fmt.Errorf("%w: proportional rope over %v of %d dims, factor %v", ErrBadConfig, partial, globalDim, factor)
		}
		g.GlobalRoPE = RoPE{Dims: globalDim, Base: float32(base), Scale: 1, Freqs: make([]float32, globalDim/2)}
		for i := range g.GlobalRoPE.Freqs {
			g.GlobalRoPE.Freqs[i] = float32(math.Inf(1))
			if i < rotated {
				g.GlobalRoPE.Freqs[i] = float32(factor * math.Pow(base, float64(2*i)/float64(globalDim)))
			}
		}
	case "default":
		g.GlobalRoPE = RoPE{Dims: int(partial * float64(globalDim)), Base: float32(base), Scale: 1}
		if g.GlobalRoPE.Dims <= 0 || g.GlobalRoPE.Dims > globalDim || g.GlobalRoPE.Dims%2 != 0 {
			return fmt.Errorf("%w: rope over %d of %d dims", ErrBadConfig, g.GlobalRoPE.Dims, globalDim)
		}
	default:
		return fmt.Errorf("%w: gemma4 full-attention rope_type %q", ErrUnsupportedArch, kind)
	}
	firstShared := c.Layers - hc.NumKVSharedLayers
	g.MLPWidths = make([]int, len(widths))
	for i, w := range widths {
		if hc.UseDoubleWideMLP && i >= firstShared {
			w *= 2
		}
		if w <= 0 {
			return fmt.Errorf("%w: layer %d MLP width %d", ErrBadConfig, i, w)
		}
		g.MLPWidths[i] = w
	}
	if hc.EnableMoEBlock {
		g.Experts, g.TopK, g.ExpertWidth = hc.NumExperts, hc.TopKExperts, hc.MoEIntermediateSize
	}
	if hc.HiddenSizePerLayerInput > 0 {
		g.PerLayerInput, g.PerLayerVocab = hc.HiddenSizePerLayerInput, hc.VocabSizePerLayerInput
		if g.PerLayerVocab == 0 {
			g.PerLayerVocab = c.Vocab
		}
	}
	// Queries and keys are RMS-normalized per head; Gemma 4 applies no
	// further scaling to their products.
	c.AttnScale = 1
	c.Gemma4 = g
	return nil
}

func ropeType(rp map[string]any) string {
	if t, _ := rp["rope_type"].(string); t != "" {
		return t
	}
	return "default"
}

// gemma4Dropped are the checkpoint tensors the text decoder never reads:
// the towers and projections of other modalities, and the calibration
// statistics of quantization-aware checkpoints.
var gemma4Dropped = []string{
	"model.vision_tower.", "model.embed_vision.", "model.audio_tower.", "model.embed_audio.",
	"model.multi_modal_projector.", "model.vision_embedder.",
}

var gemma4DroppedSuffixes = []string{
	".input_max", ".input_min", ".output_max", ".output_min",
}

// adaptGemma4HF renames a multimodal checkpoint's language-model tensors to
// the text model's names (model.language_model.X to model.X) and drops what
// the decoder never reads, including the key and value weights of layers
// that reuse another layer's KV. Norm weights stay as they are: Gemma 4's
// RMSNorm multiplies by w itself, not by 1+w as Gemma 3's does.
func (m *Model) adaptGemma4HF(c Config) {
	out := make(map[string]*Tensor, len(m.Tensors))
	for name, t := range m.Tensors {
		if rest, ok := strings.CutPrefix(name, "model.language_model."); ok {
			name = "model." + rest
		}
		if dropGemma4(name, c) {
			continue
		}
		t.Name = name
		out[name] = t
	}
	m.Tensors = out
}

func dropGemma4(name string, c Config) bool {
	if strings.Contains(name, "self_attn.rotary_emb") {
		return true
	}
	for _, p := range gemma4Dropped {
		if strings.HasPrefix(name, p) {
			return true
		}
	}
	for _, s := range gemma4DroppedSuffixes {
		if strings.HasSuffix(name, s) {
			return true
		}
	}
	var layer int
	var rest string
	if n, _ := fmt.Sscanf(name, "model.layers.%d.%s", &layer, &rest); n == 2 && layer >= 0 && layer < len(c.Kinds) && c.Kinds[layer].SharedFrom >= 0 {
		for _, kv := range []string{"self_attn.k_proj.", "self_attn.v_proj.", "self_attn.k_norm.", "self_attn.v_norm."} {
			if strings.HasPrefix(rest, kv) {
				return true
			}
		}
	}
	return false
}

// gemma4EOS adds the end-of-turn marker to the stop set when the
// tokenizer has it: a chat reply ends there.
func gemma4EOS(m *Model, eos []int32) []int32 {
	if m.Tokenizer == nil {
		return eos
	}
	if id, ok := m.Tokenizer.TokenID("<turn|>"); ok {
		return mergeIDs(eos, []int32{id})
	}
	return eos
}

// Gemma4Tensors is every tensor the Gemma 4 text forward pass reads for
// cfg, under the text model's names: all of them must be present with
// these shapes, and nothing else is read. Experts are stacked: gate and up
// projections fused as [experts, 2*width, hidden] (gate first), down as
// [experts, hidden, width].
func Gemma4Tensors(c Config) []TensorSpec {
	g := c.Gemma4
	if g == nil || len(c.Kinds) != c.Layers || len(g.MLPWidths) != c.Layers {
		return nil
	}
	h := c.Hidden
	specs := []TensorSpec{
		{"model.embed_tokens.weight", []int{c.Vocab, h}},
		{"model.norm.weight", []int{h}},
	}
	if !c.TiedEmbedding {
		specs = append(specs, TensorSpec{"lm_head.weight", []int{c.Vocab, h}})
	}
	if p := g.PerLayerInput; p > 0 {
		specs = append(specs,
			TensorSpec{"model.embed_tokens_per_layer.weight", []int{g.PerLayerVocab, c.Layers * p}},
			TensorSpec{"model.per_layer_model_projection.weight", []int{c.Layers * p, h}},
			TensorSpec{"model.per_layer_projection_norm.weight", []int{p}})
	}
	for i, k := range c.Kinds {
		pre := fmt.Sprintf("model.layers.%d.", i)
		add := func(name string, shape ...int) { specs = append(specs, TensorSpec{pre + name, shape}) }
		for _, n := range []string{"input_layernorm", "post_attention_layernorm", "pre_feedforward_layernorm", "post_feedforward_layernorm"} {
			add(n+".weight", h)
		}
		add("layer_scalar", 1)
		q := c.Heads * k.HeadDim
		add("self_attn.q_proj.weight", q, h)
		add("self_attn.q_norm.weight", k.HeadDim)
		add("self_attn.o_proj.weight", h, q)
		if k.SharedFrom < 0 {
			add("self_attn.k_proj.weight", k.KVHeads*k.HeadDim, h)
			add("self_attn.k_norm.weight", k.HeadDim)
			if !g.KEqV || k.Window > 0 {
				add("self_attn.v_proj.weight", k.KVHeads*k.HeadDim, h)
			}
		}
		w := g.MLPWidths[i]
		add("mlp.gate_proj.weight", w, h)
		add("mlp.up_proj.weight", w, h)
		add("mlp.down_proj.weight", h, w)
		if e := g.Experts; e > 0 {
			add("router.proj.weight", e, h)
			add("router.scale", h)
			add("router.per_expert_scale", e)
			add("experts.gate_up_proj", e, 2*g.ExpertWidth, h)
			add("experts.down_proj", e, h, g.ExpertWidth)
			for _, n := range []string{"pre_feedforward_layernorm_2", "post_feedforward_layernorm_1", "post_feedforward_layernorm_2"} {
				add(n+".weight", h)
			}
		}
		if p := g.PerLayerInput; p > 0 {
			add("per_layer_input_gate.weight", p, h)
			add("per_layer_projection.weight", h, p)
			add("post_per_layer_input_norm.weight", h)
		}
	}
	return specs
}

// checkGemma4Tensors checks a loaded checkpoint against Gemma4Tensors
// before anything is uploaded.
func checkGemma4Tensors(m *Model) error {
	specs := Gemma4Tensors(m.Config)
	if specs == nil {
		return fmt.Errorf("%w: gemma4 config without its Gemma 4 facts", ErrBadConfig)
	}
	for _, s := range specs {
		t, err := m.Tensor(s.Name)
		if err != nil {
			return err
		}
		if !slices.Equal(t.Shape, s.Shape) {
			return fmt.Errorf("%w: %s has shape %v, want %v", ErrBadConfig, s.Name, t.Shape, s.Shape)
		}
		if t.Quant != nil && len(s.Shape) != 2 {
			return fmt.Errorf("%w: quantized %s", ErrUnsupportedType, s.Name)
		}
	}
	return nil
}
