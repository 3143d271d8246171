package model

import (
	"cmp"
	"encoding/json"
	"fmt"
	"maps"
	"slices"

	"github.com/goprovider/provider/mlx"
)

// Architectures described from their config.json by their own readers:
// ReadHFConfig reads their layer kinds and shapes so they can be sized and
// reported. gpt-oss (hf_gptoss.go) and Gemma 4's text decoder
// (hf_gemma4.go) load.

// configOnly reports whether an HF model_type is read for description only.
func configOnly(modelType string) bool {
	switch modelType {
	case "gpt_oss", "gemma4", "gemma4_text":
		return true
	}
	return false
}

// describedHF is a config.json read for description: the architecture facts,
// the weight inventory, and what the reader saw but does not model.
type describedHF struct {
	cfg   Config
	parts []WeightPart
	notes []string
}

func describeConfigOnly(modelType string, data []byte) (describedHF, error) {
	if modelType == "gpt_oss" {
		return describeGPTOSS(data)
	}
	return describeGemma4(data)
}

// Layer types as HF configs name them in layer_types.
const (
	slidingAttention = "sliding_attention"
	fullAttention    = "full_attention"
)

// kindsFromTypes maps layer_types onto layer kinds: a sliding layer gets
// sliding (whose Window must be positive), a full-attention layer full.
func kindsFromTypes(types []string, layers int, sliding, full LayerKind) ([]LayerKind, error) {
	if len(types) != layers {
		return nil, fmt.Errorf("%w: %d layer_types for %d layers", ErrBadConfig, len(types), layers)
	}
	kinds := make([]LayerKind, layers)
	for i, t := range types {
		switch t {
		case slidingAttention:
			if sliding.Window <= 0 {
				return nil, fmt.Errorf("%w: sliding layer %d without a sliding_window", ErrBadConfig, i)
			}
			kinds[i] = sliding
		case fullAttention:
			kinds[i] = full
		default:
			return nil, fmt.Errorf("%w: layer %d has attention type %q", ErrUnsupportedArch, i, t)
		}
	}
	return kinds, nil
}

// FloatDType is the float type a name ("bfloat16", "float16",
// "float32") names, as config.json's dtype and the environment spell them.
func FloatDType(name string) (mlx.Dtype, bool) {
	switch name {
	case "bfloat16":
		return mlx.BFloat16, true
	case "float16":
		return mlx.Float16, true
	case "float32":
		return mlx.Float32, true
	}
	return 0, false
}

func isFloatDType(name string) bool {
	_, ok := FloatDType(name)
	return ok
}

// checkpointDType is the dtype a config.json declares for its unquantized
// weights ("dtype", or the older "torch_dtype"); bfloat16 when it names none.
func checkpointDType(names ...string) (mlx.Dtype, string, error) {
	for _, n := range names {
		if n == "" {
			continue
		}
		if d, ok := FloatDType(n); ok {
			return d, "", nil
		}
		return 0, "", fmt.Errorf("%w: checkpoint dtype %q", ErrUnsupportedType, n)
	}
	return mlx.BFloat16, "config.json names no dtype: unquantized weights counted as bfloat16", nil
}

// hfShape is the part of a decoder's config.json that every family names
// alike.
type hfShape struct {
	VocabSize         int             `json:"vocab_size"`
	HiddenSize        int             `json:"hidden_size"`
	NumHiddenLayers   int             `json:"num_hidden_layers"`
	NumAttentionHeads int             `json:"num_attention_heads"`
	NumKeyValueHeads  int             `json:"num_key_value_heads"`
	HeadDim           int             `json:"head_dim"`
	RMSNormEps        float64         `json:"rms_norm_eps"`
	MaxPosition       int             `json:"max_position_embeddings"`
	TieWordEmbeddings *bool           `json:"tie_word_embeddings"`
	BOSTokenID        json.RawMessage `json:"bos_token_id"`
	EOSTokenID        json.RawMessage `json:"eos_token_id"`
	DType             string          `json:"dtype"`
	TorchDType        string          `json:"torch_dtype"`
}

// config fills the shared facts of arch's Config; the cache and activations
// are taken to be in the checkpoint dtype. The note, when not empty, says
// what was assumed.
func (s *hfShape) config(arch string, tiedByDefault bool) (Config, string, error) {
	dtype, note, err := checkpointDType(s.DType, s.TorchDType)
	if err != nil {
		return Config{}, "", err
	}
	c := Config{
		Arch:          arch,
		Vocab:         s.VocabSize,
		Hidden:        s.HiddenSize,
		Layers:        s.NumHiddenLayers,
		Heads:         s.NumAttentionHeads,
		KVHeads:       s.NumKeyValueHeads,
		HeadDim:       s.HeadDim,
		NormEps:       float32(s.RMSNormEps),
		ContextLength: s.MaxPosition,
		TiedEmbedding: tiedByDefault,
		BOS:           -1,
		EOS:           tokenIDs(s.EOSTokenID),
		ActDType:      dtype,
		// A declared type checkpointDType accepted.
		CheckpointDType: cmp.Or(s.DType, s.TorchDType),
	}
	if s.TieWordEmbeddings != nil {
		c.TiedEmbedding = *s.TieWordEmbeddings
	}
	if c.HeadDim == 0 && c.Heads > 0 {
		c.HeadDim = c.Hidden / c.Heads
	}
	if ids := tokenIDs(s.BOSTokenID); len(ids) > 0 {
		c.BOS = ids[0]
	}
	return c, note, nil
}

// hfGPTOSS is the subset of a gpt-oss config.json that shapes its cache and
// its weights.
type hfGPTOSS struct {
	hfShape
	IntermediateSize int            `json:"intermediate_size"`
	NumLocalExperts  int            `json:"num_local_experts"`
	SlidingWindow    int            `json:"sliding_window"`
	LayerTypes       []string       `json:"layer_types"`
	RopeTheta        float64        `json:"rope_theta"`
	RopeScaling      map[string]any `json:"rope_scaling"`
	AttentionBias    *bool          `json:"attention_bias"`
	// The forward pass's facts (hf_gptoss.go).
	NumExpertsPerTok int      `json:"num_experts_per_tok"`
	ExpertsPerToken  int      `json:"experts_per_token"`
	SwiGLUAlpha      *float64 `json:"swiglu_alpha"`
	SwiGLULimit      *float64 `json:"swiglu_limit"`
}

// describeGPTOSS reads a gpt-oss config: layers alternate a sliding window
// and full attention (layer_types, or even layers sliding when it is absent),
// every layer with the same KV heads and head size; the MLP is a mixture of
// num_local_experts experts of width intermediate_size behind a router.
func describeGPTOSS(data []byte) (describedHF, error) {
	var hc hfGPTOSS
	if err := json.Unmarshal(data, &hc); err != nil {
		return describedHF{}, fmt.Errorf("%w: config.json: %w", ErrBadConfig, err)
	}
	c, note, err := hc.config("gpt_oss", false)
	if err != nil {
		return describedHF{}, err
	}
	c.Intermediate = hc.IntermediateSize
	// gptossFacts adds rope_scaling (YaRN) to this unscaled rotation.
	c.RoPE = RoPE{Dims: c.HeadDim, Base: float32(hc.RopeTheta), Scale: 1}
	types := hc.LayerTypes
	if types == nil {
		for i := range c.Layers {
			t := fullAttention
			if i%2 == 0 {
				t = slidingAttention
			}
			types = append(types, t)
		}
	}
	layer := LayerKind{KVHeads: c.KVHeads, HeadDim: c.HeadDim, SharedFrom: -1}
	sliding := layer
	sliding.Window = hc.SlidingWindow
	if c.Kinds, err = kindsFromTypes(types, c.Layers, sliding, layer); err != nil {
		return describedHF{}, err
	}
	if err := c.Validate(); err != nil {
		return describedHF{}, err
	}
	if hc.NumLocalExperts <= 0 {
		return describedHF{}, fmt.Errorf("%w: gpt_oss without num_local_experts", ErrBadConfig)
	}
	if err := hc.gptossFacts(&c); err != nil {
		return describedHF{}, err
	}

	bias := func(n int) int64 {
		if hc.AttentionBias == nil || *hc.AttentionBias {
			return int64(n)
		}
		return 0
	}
	q, kv := c.Heads*c.HeadDim, c.KVHeads*c.HeadDim
	experts, width := hc.NumLocalExperts, c.Intermediate
	all := allLayers(c.Layers)
	parts := []WeightPart{
		{Module: "model.embed_tokens", Out: c.Vocab, In: c.Hidden},
		{Module: "model.layers.*.input_layernorm", Layers: all, Vector: int64(c.Hidden)},
		{Module: "model.layers.*.self_attn.q_proj", Layers: all, Out: q, In: c.Hidden, Vector: bias(q)},
		{Module: "model.layers.*.self_attn.k_proj", Layers: all, Out: kv, In: c.Hidden, Vector: bias(kv)},
		{Module: "model.layers.*.self_attn.v_proj", Layers: all, Out: kv, In: c.Hidden, Vector: bias(kv)},
		{Module: "model.layers.*.self_attn.o_proj", Layers: all, Out: c.Hidden, In: q, Vector: bias(c.Hidden)},
		// One attention sink logit per query head.
		{Module: "model.layers.*.self_attn.sinks", Layers: all, Vector: int64(c.Heads)},
		{Module: "model.layers.*.post_attention_layernorm", Layers: all, Vector: int64(c.Hidden)},
		{Module: "model.layers.*.mlp.router", Layers: all, Out: experts, In: c.Hidden, Vector: int64(experts)},
		// gate and up projections fused; each expert has its own biases.
		{Module: "model.layers.*.mlp.experts.gate_up_proj", Layers: all, Count: experts, Out: 2 * width, In: c.Hidden,
			Vector: int64(experts) * int64(2*width)},
		{Module: "model.layers.*.mlp.experts.down_proj", Layers: all, Count: experts, Out: c.Hidden, In: width,
			Vector: int64(experts) * int64(c.Hidden)},
		{Module: "model.norm", Vector: int64(c.Hidden)},
	}
	if !c.TiedEmbedding {
		parts = append(parts, WeightPart{Module: "lm_head", Out: c.Vocab, In: c.Hidden})
	}
	d := describedHF{cfg: c, parts: parts}
	if note != "" {
		d.notes = append(d.notes, note)
	}
	return d, nil
}

// hfGemma4Text is the subset of a Gemma 4 text config that shapes its cache
// and its weights. Absent keys keep zero values, which mean "none" for every
// optional feature (no MoE block, no per-layer input, no KV sharing).
type hfGemma4Text struct {
	hfShape
	ModelType               string                    `json:"model_type"`
	IntermediateSize        json.RawMessage           `json:"intermediate_size"`
	NumGlobalKVHeads        int                       `json:"num_global_key_value_heads"`
	GlobalHeadDim           int                       `json:"global_head_dim"`
	AttentionKEqV           bool                      `json:"attention_k_eq_v"`
	AttentionBias           bool                      `json:"attention_bias"`
	NumKVSharedLayers       int                       `json:"num_kv_shared_layers"`
	SlidingWindow           int                       `json:"sliding_window"`
	SlidingPattern          int                       `json:"sliding_window_pattern"`
	LayerTypes              []string                  `json:"layer_types"`
	RopeParameters          map[string]map[string]any `json:"rope_parameters"`
	FinalLogitSoftcap       *float64                  `json:"final_logit_softcapping"`
	EnableMoEBlock          bool                      `json:"enable_moe_block"`
	NumExperts              int                       `json:"num_experts"`
	MoEIntermediateSize     int                       `json:"moe_intermediate_size"`
	HiddenSizePerLayerInput int                       `json:"hidden_size_per_layer_input"`
	VocabSizePerLayerInput  int                       `json:"vocab_size_per_layer_input"`
	UseDoubleWideMLP        bool                      `json:"use_double_wide_mlp"`
	TopKExperts             int                       `json:"top_k_experts"`
	HiddenActivation        string                    `json:"hidden_activation"`
	UseBidirectional        json.RawMessage           `json:"use_bidirectional_attention"`
	PadTokenID              *int32                    `json:"pad_token_id"`
}

// gemma4MediaDefaults are transformers' Gemma4Config placeholder ids of
// images, video and audio, for a multimodal config that leaves them out.
var gemma4MediaDefaults = map[string]int32{"image_token_id": 258880, "video_token_id": 258884, "audio_token_id": 258881}

// describeGemma4 reads a Gemma 4 config; for model_type gemma4 the language
// model is its text_config (token ids and dtype may sit at either level).
func describeGemma4(data []byte) (describedHF, error) {
	var top struct {
		hfGemma4Text
		TextConfig json.RawMessage `json:"text_config"`
	}
	if err := json.Unmarshal(data, &top); err != nil {
		return describedHF{}, fmt.Errorf("%w: config.json: %w", ErrBadConfig, err)
	}
	hc := top.hfGemma4Text
	var eos, media []int32
	if top.ModelType == "gemma4" {
		if len(top.TextConfig) == 0 {
			return describedHF{}, fmt.Errorf("%w: gemma4 config.json without text_config", ErrBadConfig)
		}
		hc = hfGemma4Text{}
		if err := json.Unmarshal(top.TextConfig, &hc); err != nil {
			return describedHF{}, fmt.Errorf("%w: text_config: %w", ErrBadConfig, err)
		}
		if len(hc.BOSTokenID) == 0 {
			hc.BOSTokenID = top.BOSTokenID
		}
		if hc.TieWordEmbeddings == nil {
			hc.TieWordEmbeddings = top.TieWordEmbeddings
		}
		if hc.DType == "" && hc.TorchDType == "" {
			hc.DType, hc.TorchDType = top.DType, top.TorchDType
		}
		eos = tokenIDs(top.EOSTokenID)
		var err error
		if media, err = gemma4MediaTokens(data); err != nil {
			return describedHF{}, err
		}
	}
	return hc.describe(eos, media)
}

// gemma4MediaTokens reads the multimodal placeholder ids at the top level
// of a gemma4 config: present, absent (transformers' default) or null
// (none).
func gemma4MediaTokens(data []byte) ([]int32, error) {
	var keys map[string]json.RawMessage
	if err := json.Unmarshal(data, &keys); err != nil {
		return nil, fmt.Errorf("%w: config.json: %w", ErrBadConfig, err)
	}
	var ids []int32
	for _, k := range []string{"image_token_id", "video_token_id", "audio_token_id"} {
		raw, ok := keys[k]
		if !ok {
			ids = append(ids, gemma4MediaDefaults[k])
			continue
		}
		var id *int32
		if err := json.Unmarshal(raw, &id); err != nil {
			return nil, fmt.Errorf("%w: %s: %w", ErrBadConfig, k, err)
		}
		if id != nil {
			ids = append(ids, *id)
		}
	}
	return ids, nil
}

func (hc *hfGemma4Text) describe(outerEOS, media []int32) (describedHF, error) {
	// Gemma ties its output to the embedding unless told otherwise.
	c, note, err := hc.config("gemma4", true)
	if err != nil {
		return describedHF{}, err
	}
	c.EOS = mergeIDs(outerEOS, c.EOS)
	if hc.FinalLogitSoftcap != nil && *hc.FinalLogitSoftcap > 0 {
		c.FinalLogitSoftcap = float32(*hc.FinalLogitSoftcap)
	}
	widths, err := gemma4Widths(hc.IntermediateSize, c.Layers)
	if err != nil {
		return describedHF{}, err
	}
	if c.Layers > 0 {
		c.Intermediate = widths[0]
	}

	// Global (full-attention) layers have their own KV head count and head
	// size; a config that leaves them out uses the sliding layers' values.
	globalHeads, globalDim := hc.NumGlobalKVHeads, hc.GlobalHeadDim
	if globalHeads == 0 || !hc.AttentionKEqV {
		// As HF transformers and mlx-lm read it: the global KV head count
		// only applies to checkpoints whose global layers use keys as values.
		globalHeads = c.KVHeads
	}
	if globalDim == 0 {
		globalDim = c.HeadDim
	}
	types := hc.LayerTypes
	if types == nil {
		if hc.SlidingPattern <= 0 {
			return describedHF{}, fmt.Errorf("%w: gemma4 config without layer_types or sliding_window_pattern", ErrBadConfig)
		}
		// Every pattern-th layer is global, the others slide.
		for i := range c.Layers {
			t := slidingAttention
			if (i+1)%hc.SlidingPattern == 0 {
				t = fullAttention
			}
			types = append(types, t)
		}
	}
	sliding := LayerKind{Window: hc.SlidingWindow, KVHeads: c.KVHeads, HeadDim: c.HeadDim, SharedFrom: -1}
	full := LayerKind{KVHeads: globalHeads, HeadDim: globalDim, SharedFrom: -1}
	if c.Kinds, err = kindsFromTypes(types, c.Layers, sliding, full); err != nil {
		return describedHF{}, err
	}
	if err := shareKV(c.Kinds, types, hc.NumKVSharedLayers); err != nil {
		return describedHF{}, err
	}

	// Rotary embedding: the full-attention layers rotate a fraction of their
	// (global) head; the sliding layers rotate the whole head.
	globalRope, localRope := hc.RopeParameters[fullAttention], hc.RopeParameters[slidingAttention]
	c.RoPE = RoPE{Dims: int(float64(globalDim) * num(globalRope, "partial_rotary_factor", 1)), Base: float32(num(globalRope, "rope_theta", 1e6)), Scale: 1}
	c.LocalRoPE = RoPE{Dims: int(float64(c.HeadDim) * num(localRope, "partial_rotary_factor", 1)), Base: float32(num(localRope, "rope_theta", 1e4)), Scale: 1}
	if c.RoPE.Dims > c.HeadDim {
		// Config.RoPE is checked against the sliding head; the global layers'
		// rotation is recorded in their kinds' head size.
		c.RoPE.Dims = c.HeadDim
	}
	if err := c.Validate(); err != nil {
		return describedHF{}, err
	}
	if hc.EnableMoEBlock && (hc.NumExperts <= 0 || hc.MoEIntermediateSize <= 0) {
		return describedHF{}, fmt.Errorf("%w: gemma4 MoE block without num_experts or moe_intermediate_size", ErrBadConfig)
	}

	if err := hc.gemma4Facts(&c, widths, media); err != nil {
		return describedHF{}, err
	}
	d := describedHF{cfg: c, parts: hc.weightParts(c, types, widths)}
	if note != "" {
		d.notes = append(d.notes, note)
	}
	if hc.AttentionKEqV {
		d.notes = append(d.notes, "attention_k_eq_v: full-attention layers use their keys as values; the cache is counted with keys and values stored separately")
	}
	d.notes = append(d.notes, "weights: the text decoder only; vision and audio towers are not counted")
	return d, nil
}

// gemma4Widths is each layer's dense MLP width: intermediate_size is one
// number or a per-layer list.
func gemma4Widths(raw json.RawMessage, layers int) ([]int, error) {
	widths := make([]int, layers)
	var one int
	if err := json.Unmarshal(raw, &one); err == nil {
		for i := range widths {
			widths[i] = one
		}
		return widths, nil
	}
	var each []int
	if err := json.Unmarshal(raw, &each); err != nil || len(each) != layers {
		return nil, fmt.Errorf("%w: intermediate_size %s for %d layers", ErrBadConfig, raw, layers)
	}
	return each, nil
}

// shareKV marks the last shared layers as reading the cache of the last
// layer of the same attention type before them, the Gemma 3n scheme Gemma 4
// keeps: those layers compute queries only.
func shareKV(kinds []LayerKind, types []string, shared int) error {
	first := len(kinds) - shared
	if shared < 0 || first < 0 {
		return fmt.Errorf("%w: %d KV-shared layers of %d", ErrBadConfig, shared, len(kinds))
	}
	for i := first; i < len(kinds); i++ {
		kinds[i].SharedFrom = -1
		for j := first - 1; j >= 0; j-- {
			if types[j] == types[i] {
				kinds[i].SharedFrom = j
				break
			}
		}
		if kinds[i].SharedFrom < 0 {
			return fmt.Errorf("%w: KV-shared layer %d has no earlier %s layer", ErrBadConfig, i, types[i])
		}
	}
	return nil
}

// weightParts is the Gemma 4 text decoder's inventory, under the module
// names of its HF checkpoints.
func (hc *hfGemma4Text) weightParts(c Config, types []string, widths []int) []WeightPart {
	const p = "model.language_model."
	var sliding, full, all []int
	firstShared := c.Layers - hc.NumKVSharedLayers
	for i, t := range types {
		all = append(all, i)
		if t == slidingAttention {
			sliding = append(sliding, i)
		} else {
			full = append(full, i)
		}
	}
	hidden := int64(c.Hidden)
	parts := []WeightPart{
		{Module: p + "embed_tokens", Out: c.Vocab, In: c.Hidden},
		{Module: p + "norm", Vector: hidden},
		// input, post-attention, pre- and post-feedforward norms, and the
		// scalar that multiplies the layer's output.
		{Module: p + "layers.*.norms", Layers: all, Vector: 4*hidden + 1},
	}
	attention := func(layers []int, heads, dim int, values bool) {
		if len(layers) == 0 {
			return
		}
		q, kv := c.Heads*dim, heads*dim
		bias := func(n int) int64 {
			if hc.AttentionBias {
				return int64(n)
			}
			return 0
		}
		parts = append(parts,
			WeightPart{Module: p + "layers.*.self_attn.q_proj", Layers: layers, Out: q, In: c.Hidden, Vector: bias(q)},
			WeightPart{Module: p + "layers.*.self_attn.k_proj", Layers: layers, Out: kv, In: c.Hidden, Vector: bias(kv)},
			WeightPart{Module: p + "layers.*.self_attn.o_proj", Layers: layers, Out: c.Hidden, In: q, Vector: bias(c.Hidden)},
			WeightPart{Module: p + "layers.*.self_attn.qk_norms", Layers: layers, Vector: 2 * int64(dim)})
		if values {
			parts = append(parts, WeightPart{Module: p + "layers.*.self_attn.v_proj", Layers: layers, Out: kv, In: c.Hidden, Vector: bias(kv)})
		}
	}
	attention(sliding, c.KVHeads, c.HeadDim, true)
	globalHeads, globalDim := c.KVHeads, c.HeadDim
	if len(full) > 0 {
		globalHeads, globalDim = c.Kinds[full[0]].KVHeads, c.Kinds[full[0]].HeadDim
	}
	// With attention_k_eq_v the full-attention layers have no value projection.
	attention(full, globalHeads, globalDim, !hc.AttentionKEqV)

	// Dense MLP, double width in the KV-shared layers when use_double_wide_mlp.
	byWidth := map[int][]int{}
	for i, w := range widths {
		if hc.UseDoubleWideMLP && i >= firstShared {
			w *= 2
		}
		byWidth[w] = append(byWidth[w], i)
	}
	for _, w := range slices.Sorted(maps.Keys(byWidth)) {
		layers := byWidth[w]
		parts = append(parts,
			WeightPart{Module: p + "layers.*.mlp.gate_proj", Layers: layers, Out: w, In: c.Hidden},
			WeightPart{Module: p + "layers.*.mlp.up_proj", Layers: layers, Out: w, In: c.Hidden},
			WeightPart{Module: p + "layers.*.mlp.down_proj", Layers: layers, Out: c.Hidden, In: w})
	}

	if hc.EnableMoEBlock {
		e, w := hc.NumExperts, hc.MoEIntermediateSize
		parts = append(parts,
			// router.proj plus its input scale and per-expert output scale.
			WeightPart{Module: p + "layers.*.router.proj", Layers: all, Out: e, In: c.Hidden, Vector: hidden + int64(e)},
			WeightPart{Module: p + "layers.*.experts.gate_up_proj", Layers: all, Count: e, Out: 2 * w, In: c.Hidden},
			WeightPart{Module: p + "layers.*.experts.down_proj", Layers: all, Count: e, Out: c.Hidden, In: w},
			// the expert branch's own pre- and post-feedforward norms.
			WeightPart{Module: p + "layers.*.moe_norms", Layers: all, Vector: 3 * hidden})
	}
	if per := hc.HiddenSizePerLayerInput; per > 0 {
		vocab := hc.VocabSizePerLayerInput
		if vocab == 0 {
			vocab = c.Vocab
		}
		// Per-layer inputs, laid out as in Gemma 3n: one embedding row of
		// layers x per features per token, a projection from the hidden
		// state, and a gate and projection in every layer.
		parts = append(parts,
			WeightPart{Module: p + "embed_tokens_per_layer", Out: vocab, In: c.Layers * per},
			WeightPart{Module: p + "per_layer_model_projection", Out: c.Layers * per, In: c.Hidden, Vector: int64(per)},
			WeightPart{Module: p + "layers.*.per_layer_input_gate", Layers: all, Out: per, In: c.Hidden},
			WeightPart{Module: p + "layers.*.per_layer_projection", Layers: all, Out: c.Hidden, In: per, Vector: hidden})
	}
	if !c.TiedEmbedding {
		parts = append(parts, WeightPart{Module: "lm_head", Out: c.Vocab, In: c.Hidden})
	}
	return parts
}

func allLayers(n int) []int {
	out := make([]int, n)
	for i := range out {
		out[i] = i
	}
	return out
}
