package model

import (
	"fmt"
	"math"
	"strconv"

	"github.com/goprovider/provider/gguf"
	"github.com/goprovider/provider/mlx"
)

// Gemma 3 text models. Facts shared by the GGUF and HF loaders:
//
//   - Every fifth of six layers (index i with i%6 == 5) attends globally, the
//     others over a sliding window of the last Window tokens, the query's own
//     included (a key at position k is visible from position p when
//     0 <= p-k < Window). A checkpoint may override the period or list the
//     kind of every layer.
//   - Global layers rotate with RoPE (base 1,000,000, linear scaling in the
//     larger models), local layers with LocalRoPE (base 10,000, unscaled);
//     both rotate halves (NeoX layout) over the whole head.
//   - Queries and keys are RMS-normalized per head before RoPE; attention
//     scales by query_pre_attn_scalar^-1/2.
//   - Norm weights are stored here as the multiplier the forward pass
//     applies. HF checkpoints hold w and Gemma's RMSNorm multiplies by 1+w;
//     llama.cpp's converter writes 1+w into the GGUF, so only the HF loader
//     adds the 1.

// gemma3Pattern is the default period of global layers.
const gemma3Pattern = 6

// gemma3LocalBase is the RoPE base of the sliding-window layers when a
// checkpoint does not state one (llama.cpp's default and HF's
// rope_local_base_freq).
const gemma3LocalBase = 10000

// gemma3Kinds lays out the layers: Window 0 for global layers, window for
// sliding ones. sliding, when non-nil, names each layer's kind; otherwise
// layer i slides unless i%pattern == pattern-1, so pattern 1 makes every
// layer global and pattern 0 every layer sliding (llama.cpp's reading). A
// non-positive window makes every layer global.
func gemma3Kinds(layers, kvHeads, headDim, window, pattern int, sliding []bool) []LayerKind {
	kinds := uniformKinds(layers, kvHeads, headDim)
	if window <= 0 {
		return kinds
	}
	for i := range kinds {
		local := pattern == 0 || i%pattern < pattern-1
		if sliding != nil {
			local = sliding[i]
		}
		if local {
			kinds[i].Window = window
		}
	}
	return kinds
}

// gemma3AttnScale mirrors query_pre_attn_scalar, which GGUF files do not
// record: head_dim for every size except 27B (62 layers), where it is
// hidden/heads. llama.cpp derives it the same way.
func gemma3AttnScale(layers, hidden, heads, headDim int) float32 {
	d := headDim
	if layers == 62 && heads > 0 {
		d = hidden / heads
	}
	return float32(1 / math.Sqrt(float64(d)))
}

func gemma3ConfigFromGGUF(f *gguf.File, arch string) (Config, error) {
	u := func(key string) int {
		v, _ := f.Uint(arch + "." + key)
		if v > math.MaxInt32 {
			return -1
		}
		return int(v)
	}
	c := Config{
		Arch:          "gemma3",
		Vocab:         u("vocab_size"),
		Hidden:        u("embedding_length"),
		Intermediate:  u("feed_forward_length"),
		Layers:        u("block_count"),
		Heads:         u("attention.head_count"),
		KVHeads:       u("attention.head_count_kv"),
		HeadDim:       u("attention.key_length"),
		ContextLength: u("context_length"),
		ActDType:      mlx.Float32,
	}
	if c.KVHeads == 0 {
		c.KVHeads = c.Heads
	}
	if c.HeadDim == 0 && c.Heads > 0 {
		c.HeadDim = c.Hidden / c.Heads
	}
	if vl := u("attention.value_length"); vl != 0 && vl != c.HeadDim {
		return c, fmt.Errorf("%w: value length %d differs from key length %d", ErrUnsupportedArch, vl, c.HeadDim)
	}
	eps, ok := f.Float(arch + ".attention.layer_norm_rms_epsilon")
	if !ok {
		eps = 1e-6
	}
	c.NormEps = float32(eps)
	base, ok := f.Float(arch + ".rope.freq_base")
	if !ok {
		base = 1e6
	}
	c.RoPE = RoPE{Dims: c.HeadDim, Base: float32(base), Scale: 1}
	if kind, ok := f.String(arch + ".rope.scaling.type"); ok && kind != "none" {
		factor, _ := f.Float(arch + ".rope.scaling.factor")
		if kind != "linear" {
			return c, fmt.Errorf("%w: rope scaling %q", ErrUnsupportedArch, kind)
		}
		if factor > 0 {
			c.RoPE.Scale = float32(1 / factor)
		}
	}
	local, ok := f.Float(arch + ".rope.freq_base_swa")
	if !ok {
		local = gemma3LocalBase
	}
	c.LocalRoPE = RoPE{Dims: c.HeadDim, Base: float32(local), Scale: 1}
	if softcap, ok := f.Float(arch + ".final_logit_softcapping"); ok && softcap > 0 {
		c.FinalLogitSoftcap = float32(softcap)
	}
	c.AttnScale = gemma3AttnScale(c.Layers, c.Hidden, c.Heads, c.HeadDim)

	pattern, sliding := gemma3Pattern, []bool(nil)
	if v, ok := f.Lookup(arch + ".attention.sliding_window_pattern"); ok {
		if n, isNum := v.AsUint(); isNum && n <= math.MaxInt32 {
			pattern = int(n)
		} else if v.Len() == c.Layers {
			sliding = make([]bool, c.Layers)
			for i := range sliding {
				e, _ := v.Index(i)
				if sliding[i], ok = e.AsBool(); !ok {
					return c, fmt.Errorf("%w: sliding_window_pattern element %d is not a bool", ErrBadConfig, i)
				}
			}
		} else {
			return c, fmt.Errorf("%w: sliding_window_pattern of %d elements for %d layers", ErrBadConfig, v.Len(), c.Layers)
		}
	}
	c.Kinds = gemma3Kinds(c.Layers, c.KVHeads, c.HeadDim, u("attention.sliding_window"), pattern, sliding)
	return c, nil
}

// gemma3GGUFNames maps llama.cpp's per-layer tensor names for gemma3 to HF
// names. llama.cpp calls the pre-feed-forward norm ffn_norm, which the
// llama mapping sends to post_attention_layernorm; in Gemma 3 that HF name
// belongs to the norm after attention.
var gemma3GGUFNames = map[string]string{
	"attn_norm":           "input_layernorm",
	"attn_q":              "self_attn.q_proj",
	"attn_k":              "self_attn.k_proj",
	"attn_v":              "self_attn.v_proj",
	"attn_output":         "self_attn.o_proj",
	"attn_q_norm":         "self_attn.q_norm",
	"attn_k_norm":         "self_attn.k_norm",
	"post_attention_norm": "post_attention_layernorm",
	"ffn_norm":            "pre_feedforward_layernorm",
	"ffn_gate":            "mlp.gate_proj",
	"ffn_up":              "mlp.up_proj",
	"ffn_down":            "mlp.down_proj",
	"post_ffw_norm":       "post_feedforward_layernorm",
}

func gemma3Name(name string) (string, bool) {
	switch name {
	case "token_embd.weight", "output_norm.weight", "output.weight":
		return hfName(name)
	}
	sm := blkName.FindStringSubmatch(name)
	if sm == nil {
		return "", false
	}
	hf, ok := gemma3GGUFNames[sm[2]]
	if !ok {
		return "", false
	}
	idx, err := strconv.Atoi(sm[1])
	if err != nil {
		return "", false
	}
	return fmt.Sprintf("model.layers.%d.%s.%s", idx, hf, sm[3]), true
}

// gemma3Norms are the per-layer norm tensors, by HF name suffix.
var gemma3Norms = []string{
	"input_layernorm.weight", "post_attention_layernorm.weight",
	"pre_feedforward_layernorm.weight", "post_feedforward_layernorm.weight",
	"self_attn.q_norm.weight", "self_attn.k_norm.weight",
}

func checkGemma3Tensors(m *Model) error {
	c := m.Config
	type want struct {
		name  string
		shape []int
	}
	ws := []want{
		{"model.embed_tokens.weight", []int{c.Vocab, c.Hidden}},
		{"model.norm.weight", []int{c.Hidden}},
	}
	if !c.TiedEmbedding {
		ws = append(ws, want{"lm_head.weight", []int{c.Vocab, c.Hidden}})
	}
	q, kv := c.Heads*c.HeadDim, c.KVHeads*c.HeadDim
	for i := range c.Layers {
		p := fmt.Sprintf("model.layers.%d.", i)
		for _, n := range gemma3Norms {
			dim := c.Hidden
			if n == "self_attn.q_norm.weight" || n == "self_attn.k_norm.weight" {
				dim = c.HeadDim
			}
			ws = append(ws, want{p + n, []int{dim}})
		}
		ws = append(ws,
			want{p + "self_attn.q_proj.weight", []int{q, c.Hidden}},
			want{p + "self_attn.k_proj.weight", []int{kv, c.Hidden}},
			want{p + "self_attn.v_proj.weight", []int{kv, c.Hidden}},
			want{p + "self_attn.o_proj.weight", []int{c.Hidden, q}},
			want{p + "mlp.gate_proj.weight", []int{c.Intermediate, c.Hidden}},
			want{p + "mlp.up_proj.weight", []int{c.Intermediate, c.Hidden}},
			want{p + "mlp.down_proj.weight", []int{c.Hidden, c.Intermediate}},
		)
	}
	for _, w := range ws {
		t, err := m.Tensor(w.name)
		if err != nil {
			return err
		}
		if !sameShape(t.Shape, w.shape) {
			return fmt.Errorf("%w: %s has shape %v, want %v", ErrBadConfig, w.name, t.Shape, w.shape)
		}
	}
	return nil
}

// gemma3EOS adds <end_of_turn>, which ends a Gemma chat turn, to the
// tokenizer's end-of-generation set when the vocabulary has it.
func gemma3EOS(m *Model, eos []int32) []int32 {
	if m.Tokenizer == nil {
		return eos
	}
	if id, ok := m.Tokenizer.TokenID("<end_of_turn>"); ok {
		return mergeIDs(eos, []int32{id})
	}
	return eos
}
