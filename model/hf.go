package model

import (
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"strings"

	"github.com/goprovider/provider/mlx"
	"github.com/goprovider/provider/safetensors"
	"github.com/goprovider/provider/tokenizer"
)

// hfConfig is the subset of an HF config.json the llama family reads.
type hfConfig struct {
	ModelType          string          `json:"model_type"`
	VocabSize          int             `json:"vocab_size"`
	HiddenSize         int             `json:"hidden_size"`
	IntermediateSize   int             `json:"intermediate_size"`
	NumHiddenLayers    int             `json:"num_hidden_layers"`
	NumAttentionHeads  int             `json:"num_attention_heads"`
	NumKeyValueHeads   int             `json:"num_key_value_heads"`
	HeadDim            int             `json:"head_dim"`
	RMSNormEps         float64         `json:"rms_norm_eps"`
	RopeTheta          float64         `json:"rope_theta"`
	RopeScaling        map[string]any  `json:"rope_scaling"`
	MaxPosition        int             `json:"max_position_embeddings"`
	TieWordEmbeddings  *bool           `json:"tie_word_embeddings"`
	BOSTokenID         json.RawMessage `json:"bos_token_id"`
	EOSTokenID         json.RawMessage `json:"eos_token_id"`
	Quantization       *hfQuant        `json:"quantization"`
	QuantizationConfig *hfQuant        `json:"quantization_config"`
	DType              string          `json:"dtype"`
	TorchDType         string          `json:"torch_dtype"`
}

type hfQuant struct {
	GroupSize int    `json:"group_size"`
	Bits      int    `json:"bits"`
	Mode      string `json:"mode"`
	// Modules holds the per-module entries MLX checkpoints put beside the
	// defaults (keyed by module path, e.g. "model.embed_tokens") when some
	// tensors are quantized with other bits or group sizes.
	Modules map[string]hfQuant `json:"-"`
}

// UnmarshalJSON reads the defaults and every per-module object; other
// entries (such as false for a module left unquantized, whose tensors
// then carry no scales) are ignored.
func (q *hfQuant) UnmarshalJSON(b []byte) error {
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(b, &fields); err != nil {
		return err
	}
	type plain hfQuant
	var p plain
	if err := json.Unmarshal(b, &p); err != nil {
		return err
	}
	*q = hfQuant(p)
	for k, raw := range fields {
		if !strings.HasPrefix(strings.TrimSpace(string(raw)), "{") {
			continue
		}
		var m hfQuant
		if err := json.Unmarshal(raw, &m); err != nil {
			return fmt.Errorf("quantization %q: %w", k, err)
		}
		if q.Modules == nil {
			q.Modules = map[string]hfQuant{}
		}
		q.Modules[k] = m
	}
	return nil
}

// forModule returns the quantization of one module: its own entry where
// it has one, the defaults otherwise.
func (q *hfQuant) forModule(module string) *hfQuant {
	if m, ok := q.Modules[module]; ok {
		if m.Mode == "" {
			m.Mode = q.Mode
		}
		return &m
	}
	return q
}

// ReadHFConfig parses an HF config.json into a Config without loading any
// weights, so a model can be sized before it is downloaded.
func ReadHFConfig(data []byte) (Config, error) {
	var hc hfConfig
	if err := json.Unmarshal(data, &hc); err != nil {
		return Config{}, fmt.Errorf("%w: config.json: %w", ErrBadConfig, err)
	}
	if isGemma3(hc.ModelType) {
		return gemma3HFConfig(data)
	}
	if configOnly(hc.ModelType) {
		d, err := describeConfigOnly(hc.ModelType, data)
		return d.cfg, err
	}
	return hc.config()
}

func (hc *hfConfig) config() (Config, error) {
	if hc.ModelType != "llama" {
		return Config{}, fmt.Errorf("%w: model_type %q", ErrUnsupportedArch, hc.ModelType)
	}
	c := Config{
		Arch:          hc.ModelType,
		Vocab:         hc.VocabSize,
		Hidden:        hc.HiddenSize,
		Intermediate:  hc.IntermediateSize,
		Layers:        hc.NumHiddenLayers,
		Heads:         hc.NumAttentionHeads,
		KVHeads:       hc.NumKeyValueHeads,
		HeadDim:       hc.HeadDim,
		NormEps:       float32(hc.RMSNormEps),
		ContextLength: hc.MaxPosition,
		TiedEmbedding: hc.TieWordEmbeddings != nil && *hc.TieWordEmbeddings,
		BOS:           -1,
		ActDType:      mlx.Float32,
	}
	if name := cmp.Or(hc.DType, hc.TorchDType); isFloatDType(name) {
		c.CheckpointDType = name
	}
	if c.KVHeads == 0 {
		c.KVHeads = c.Heads
	}
	if c.HeadDim == 0 && c.Heads > 0 {
		c.HeadDim = c.Hidden / c.Heads
	}
	if c.NormEps == 0 {
		c.NormEps = 1e-6
	}
	base := hc.RopeTheta
	if base == 0 {
		base = 10000
	}
	c.RoPE = RoPE{Dims: c.HeadDim, Base: float32(base), Scale: 1}
	if err := hfRopeScaling(&c.RoPE, hc.RopeScaling); err != nil {
		return Config{}, err
	}
	if ids := tokenIDs(hc.BOSTokenID); len(ids) > 0 {
		c.BOS = ids[0]
	}
	c.EOS = tokenIDs(hc.EOSTokenID)
	c.Kinds = uniformKinds(c.Layers, c.KVHeads, c.HeadDim)
	return c, c.Validate()
}

func tokenIDs(raw json.RawMessage) []int32 {
	var one int32
	if json.Unmarshal(raw, &one) == nil && len(raw) > 0 && string(raw) != "null" {
		return []int32{one}
	}
	var many []int32
	if json.Unmarshal(raw, &many) == nil {
		return many
	}
	return nil
}

func num(m map[string]any, key string, def float64) float64 {
	if v, ok := m[key].(float64); ok {
		return v
	}
	return def
}

// hfRopeScaling applies rope_scaling: linear divides positions by the
// factor; llama3 rescales each pair's period by its wavelength band.
func hfRopeScaling(r *RoPE, rs map[string]any) error {
	if rs == nil {
		return nil
	}
	kind, _ := rs["rope_type"].(string)
	if kind == "" {
		kind, _ = rs["type"].(string)
	}
	factor := num(rs, "factor", 1)
	switch kind {
	case "", "default":
		return nil
	case "linear":
		if factor <= 0 {
			return fmt.Errorf("%w: linear rope factor %v", ErrBadConfig, factor)
		}
		r.Scale = float32(1 / factor)
		return nil
	case "llama3":
		low := num(rs, "low_freq_factor", 1)
		high := num(rs, "high_freq_factor", 4)
		orig := num(rs, "original_max_position_embeddings", 8192)
		if factor <= 0 || high <= low {
			return fmt.Errorf("%w: llama3 rope scaling %v", ErrBadConfig, rs)
		}
		lowWave, highWave := orig/low, orig/high
		r.Freqs = make([]float32, r.Dims/2)
		for i := range r.Freqs {
			period := math.Pow(float64(r.Base), float64(2*i)/float64(r.Dims))
			wave := 2 * math.Pi * period
			switch {
			case wave < highWave:
			case wave > lowWave:
				period *= factor
			default:
				smooth := (orig/wave - low) / (high - low)
				period /= (1-smooth)/factor + smooth
			}
			r.Freqs[i] = float32(period)
		}
		return nil
	default:
		return fmt.Errorf("%w: rope scaling %q", ErrUnsupportedArch, kind)
	}
}

func openHF(dir string) (*Model, error) {
	m, err := readHF(dir)
	if err != nil {
		return nil, fmt.Errorf("model: %s: %w", dir, err)
	}
	return m, nil
}

func readHF(dir string) (*Model, error) {
	raw, err := os.ReadFile(filepath.Join(dir, "config.json"))
	if err != nil {
		return nil, err
	}
	var hc hfConfig
	if err := json.Unmarshal(raw, &hc); err != nil {
		return nil, fmt.Errorf("%w: config.json: %w", ErrBadConfig, err)
	}
	cfg, err := ReadHFConfig(raw)
	if err != nil {
		return nil, err
	}
	arch, ok := checkpointArchs[cfg.Arch]
	if !ok {
		return nil, fmt.Errorf("%w: %s is described from its config only; no adapter loads its weights", ErrUnsupportedArch, cfg.Arch)
	}
	m := &Model{Format: "hf", Path: dir}
	tokJSON, err := os.ReadFile(filepath.Join(dir, "tokenizer.json"))
	if err != nil {
		return nil, fmt.Errorf("tokenizer: %w", err)
	}
	tokCfg, err := os.ReadFile(filepath.Join(dir, "tokenizer_config.json"))
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, err
	}
	if m.Tokenizer, err = tokenizer.FromJSON(tokJSON, tokCfg); err != nil {
		return nil, fmt.Errorf("tokenizer: %w", err)
	}
	m.ChatTemplate = hfChatTemplate(dir, tokCfg)
	if cfg.BOS < 0 {
		cfg.BOS = m.Tokenizer.BOS()
	}
	cfg.EOS = mergeIDs(cfg.EOS, m.Tokenizer.EOSSet())
	if arch.eos != nil {
		cfg.EOS = arch.eos(m, cfg.EOS)
	}
	read := m.readSafetensors
	if arch.read != nil {
		read = func(st *safetensors.Dir, q *hfQuant) error { return arch.read(m, st, &cfg, q) }
	}

	st, err := safetensors.OpenDir(dir)
	if err != nil {
		return nil, err
	}
	m.closers = []io.Closer{st}
	q := hc.Quantization
	if q == nil {
		q = hc.QuantizationConfig
	}
	if err := read(st, q); err != nil {
		m.Close()
		return nil, err
	}
	if arch.adapt != nil {
		if err := arch.adapt(m, cfg); err != nil {
			m.Close()
			return nil, err
		}
	}
	if _, ok := m.Tensors["lm_head.weight"]; !ok {
		cfg.TiedEmbedding = true
	}
	m.Config = cfg
	if err := arch.check(m); err != nil {
		m.Close()
		return nil, err
	}
	return m, nil
}

func mergeIDs(a, b []int32) []int32 {
	seen := map[int32]bool{}
	var out []int32
	for _, id := range append(append([]int32{}, a...), b...) {
		if !seen[id] {
			seen[id] = true
			out = append(out, id)
		}
	}
	return out
}

func hfChatTemplate(dir string, tokCfg []byte) string {
	if b, err := os.ReadFile(filepath.Join(dir, "chat_template.jinja")); err == nil {
		return string(b)
	}
	var tc struct {
		ChatTemplate json.RawMessage `json:"chat_template"`
	}
	if json.Unmarshal(tokCfg, &tc) != nil || len(tc.ChatTemplate) == 0 {
		return ""
	}
	var s string
	if json.Unmarshal(tc.ChatTemplate, &s) == nil {
		return s
	}
	var named []struct{ Name, Template string }
	if json.Unmarshal(tc.ChatTemplate, &named) == nil {
		for _, n := range named {
			if n.Name == "default" {
				return n.Template
			}
		}
	}
	return ""
}

var safetensorsDTypes = map[string]mlx.Dtype{
	"F32": mlx.Float32, "F16": mlx.Float16, "BF16": mlx.BFloat16, "U32": mlx.Uint32,
	"I32": mlx.Int32, "U8": mlx.Uint8, "I8": mlx.Int8, "I64": mlx.Int64, "U16": mlx.Uint16,
}

// readSafetensors collects tensors; an MLX-quantized linear is a U32
// "X.weight" with "X.scales" (and "X.biases") beside it.
func (m *Model) readSafetensors(st *safetensors.Dir, q *hfQuant) error {
	m.Tensors = map[string]*Tensor{}
	names := st.Names()
	for _, name := range names {
		if strings.HasSuffix(name, ".scales") || strings.HasSuffix(name, ".biases") {
			continue
		}
		f, info, _ := st.Lookup(name)
		data, err := f.Data(info)
		if err != nil {
			return err
		}
		dt, ok := safetensorsDTypes[info.DType]
		if !ok {
			return fmt.Errorf("%w: %s has dtype %s", ErrUnsupportedType, name, info.DType)
		}
		t := &Tensor{Name: name, Shape: info.Shape, DType: dt, Data: data}
		base := strings.TrimSuffix(name, ".weight")
		if sf, si, ok := st.Lookup(base + ".scales"); ok && base != name {
			if q == nil {
				return fmt.Errorf("%w: %s is quantized but config.json has no quantization", ErrBadConfig, name)
			}
			q := q.forModule(base)
			if q.Bits == 0 || q.GroupSize == 0 {
				return fmt.Errorf("%w: %s is quantized but config.json has no quantization", ErrBadConfig, name)
			}
			if dt != mlx.Uint32 || len(info.Shape) != 2 {
				return fmt.Errorf("%w: quantized %s is %s %v", ErrBadConfig, name, info.DType, info.Shape)
			}
			mode := q.Mode
			if mode == "" {
				mode = "affine"
			}
			qt := &Quant{Bits: q.Bits, GroupSize: q.GroupSize, Mode: mode}
			if qt.ScaleDType, ok = safetensorsDTypes[si.DType]; !ok {
				return fmt.Errorf("%w: %s.scales has dtype %s", ErrUnsupportedType, base, si.DType)
			}
			if qt.Scales, err = sf.Data(si); err != nil {
				return err
			}
			if bf, bi, ok := st.Lookup(base + ".biases"); ok {
				if qt.Biases, err = bf.Data(bi); err != nil {
					return err
				}
			}
			cols := info.Shape[1] * 32 / q.Bits
			if len(si.Shape) != 2 || si.Shape[0] != info.Shape[0] || si.Shape[1]*q.GroupSize != cols {
				return fmt.Errorf("%w: %s scales %v for packed %v", ErrBadConfig, name, si.Shape, info.Shape)
			}
			t.Shape = []int{info.Shape[0], cols}
			t.Quant = qt
		}
		m.Tensors[name] = t
	}
	return nil
}
