package model

import (
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"

	"github.com/goprovider/provider/mlx"
)

// Info is what a checkpoint is and costs, read without building it: its
// architecture facts and its weights, counted part by part. The KV-cache
// figures are not here: they belong to the engine's layout of Config.
type Info struct {
	ModelType string // as the checkpoint names it
	Config    Config
	// DType is the dtype of the checkpoint's unquantized weights, as its
	// config.json declares it; unset when described from tensors.
	DType mlx.Dtype
	// Params counts every weight element; WeightBytes is their size in the
	// checkpoint's own formats, 0 when a format is not understood (Notes
	// then says which).
	Params      int64
	WeightBytes int64
	// Measured is true when the figures come from the tensors themselves,
	// false when they are estimated from config.json.
	Measured bool
	Parts    []PartCost
	Quant    *Quantization // nil: unquantized
	Notes    []string
}

// WeightPart is one module of a weight inventory estimated from a config:
// Count stacked [Out, In] matrices (experts; 1 when Count is 0) that
// quantization may compress, plus Vector parameters (biases, norms, scales)
// always kept in the checkpoint dtype. Module is the checkpoint's module
// path with "*" for the layer index; Layers lists the layers that hold it,
// nil for a module outside the layer stack.
type WeightPart struct {
	Module  string
	Layers  []int
	Count   int
	Out, In int
	Vector  int64
}

func (p WeightPart) matrix() int64 { return int64(max(p.Count, 1)) * int64(p.Out) * int64(p.In) }

// instances are the concrete module paths of the part.
func (p WeightPart) instances() []string {
	if p.Layers == nil {
		return []string{p.Module}
	}
	out := make([]string, len(p.Layers))
	for i, l := range p.Layers {
		out[i] = strings.Replace(p.Module, "*", strconv.Itoa(l), 1)
	}
	return out
}

// PartCost is one part's share of the weights.
type PartCost struct {
	Module    string
	Layers    []int // the layers holding it, when estimated; nil outside the layer stack
	Instances int
	Params    int64
	Bytes     int64
	Format    string // "bfloat16", "mxfp4", "affine 4-bit g64", "mixed", a GGUF type...
}

// Quantization is how a checkpoint compresses its weights.
type Quantization struct {
	// Method is "mxfp4", "fp8", ... (HF quantization_config quant_method),
	// "mlx" (MLX's quantization block) or "gguf".
	Method string
	QuantLevel
	// Unquantized lists the module patterns kept in the checkpoint dtype
	// (modules_to_not_convert, or MLX per-module entries set to false).
	Unquantized []string
	// Overrides are MLX per-module settings that differ from the default.
	Overrides map[string]QuantLevel
	// TensorTypes counts a GGUF file's tensors by llama.cpp type.
	TensorTypes map[string]int
}

// QuantLevel is one quantized format: Bits per element and GroupSize
// elements sharing a scale. Mode is MLX's ("affine", "mxfp4", "nvfp4",
// "mxfp8") or the HF quant_method.
type QuantLevel struct {
	Mode      string
	Bits      int
	GroupSize int
}

func (q QuantLevel) String() string {
	if q.Mode == "affine" {
		return fmt.Sprintf("affine %d-bit g%d", q.Bits, q.GroupSize)
	}
	return q.Mode
}

// rowBytes is the size of one quantized row of in elements, or false when
// the format is unknown. Affine groups carry a scale and a bias in the
// checkpoint dtype; the microscaling formats one 8-bit scale per group.
func (q QuantLevel) rowBytes(in int, dtypeBytes int) (int64, bool) {
	switch q.Mode {
	case "affine":
		return int64(in*q.Bits/8 + in/q.GroupSize*2*dtypeBytes), true
	case "mxfp4", "nvfp4", "mxfp8":
		return int64(in*q.Bits/8 + in/q.GroupSize), true
	case "fp8":
		return int64(in), true
	}
	return 0, false
}

// Describe counts an estimated weight inventory: each part's matrices in
// the format quantization gives their module (the checkpoint dtype when
// unquantized, excluded, or when the input width is not a whole number of
// groups), and its vectors in the checkpoint dtype.
func Describe(c Config, dtype mlx.Dtype, parts []WeightPart, q *Quantization) Info {
	info := Info{ModelType: c.Arch, Config: c, DType: dtype, Quant: q}
	known := true
	for _, p := range parts {
		cost := PartCost{Module: p.Module, Layers: p.Layers}
		formats := map[string]bool{}
		for _, module := range p.instances() {
			cost.Instances++
			cost.Params += p.matrix() + p.Vector
			bytes := p.Vector * int64(dtype.Size())
			level, quantized := q.levelFor(module, p.In)
			if p.matrix() == 0 {
				quantized = false
			}
			switch row, ok := level.rowBytes(p.In, dtype.Size()); {
			case !quantized:
				bytes += p.matrix() * int64(dtype.Size())
				formats[dtype.String()] = true
			case ok:
				bytes += int64(max(p.Count, 1)) * int64(p.Out) * row
				formats[level.String()] = true
			default:
				known = false
				formats[level.String()] = true
			}
			cost.Bytes += bytes
		}
		cost.Format = "mixed"
		if len(formats) == 1 {
			for f := range formats {
				cost.Format = f
			}
		}
		info.Params += cost.Params
		info.WeightBytes += cost.Bytes
		info.Parts = append(info.Parts, cost)
	}
	if !known {
		info.WeightBytes = 0
		info.Notes = append(info.Notes, fmt.Sprintf("quantization %q: element size unknown, no weight estimate", q.Method))
	}
	return info
}

// levelFor is the format a module's matrix is stored in, and whether it is
// quantized at all.
func (q *Quantization) levelFor(module string, in int) (QuantLevel, bool) {
	if q == nil || q.Method == "gguf" {
		return QuantLevel{}, false
	}
	for _, rule := range q.Unquantized {
		if moduleMatches(rule, module) {
			return QuantLevel{}, false
		}
	}
	level := q.QuantLevel
	for key, o := range q.Overrides {
		if moduleMatches(key, module) {
			level = o
		}
	}
	if level.GroupSize > 0 && in%level.GroupSize != 0 {
		// MLX leaves a matrix whose rows are not whole groups unquantized.
		return QuantLevel{}, false
	}
	return level, true
}

// moduleMatches reports whether a quantization rule covers a module: the
// rule's path, with "*" matching any one segment, is the module's path or a
// parent of it. Both are compared without the "model" and
// "language_model" wrapper segments, whose nesting differs between HF and
// MLX checkpoints of one architecture.
func moduleMatches(rule, module string) bool {
	r, m := canonicalModule(rule), canonicalModule(module)
	if len(r) == 0 || len(r) > len(m) {
		return false
	}
	for i := range r {
		if r[i] != "*" && r[i] != m[i] {
			return false
		}
	}
	return true
}

func canonicalModule(path string) []string {
	var out []string
	for _, s := range strings.Split(strings.TrimSuffix(path, ".weight"), ".") {
		if s != "model" && s != "language_model" {
			out = append(out, s)
		}
	}
	return out
}

// DescribeHF describes an HF or MLX checkpoint from its config.json alone:
// architecture facts from ReadHFConfig, weights estimated from the shapes
// the config implies and the quantization it declares.
func DescribeHF(data []byte) (Info, error) {
	var head struct {
		ModelType  string          `json:"model_type"`
		DType      string          `json:"dtype"`
		TorchDType string          `json:"torch_dtype"`
		TextConfig json.RawMessage `json:"text_config"`
	}
	if err := json.Unmarshal(data, &head); err != nil {
		return Info{}, fmt.Errorf("%w: config.json: %w", ErrBadConfig, err)
	}
	var d describedHF
	var err error
	if configOnly(head.ModelType) {
		d, err = describeConfigOnly(head.ModelType, data)
	} else {
		d.cfg, err = ReadHFConfig(data)
		d.parts = denseParts(d.cfg)
	}
	if err != nil {
		return Info{}, err
	}
	var inner struct {
		DType      string `json:"dtype"`
		TorchDType string `json:"torch_dtype"`
	}
	if len(head.TextConfig) > 0 {
		_ = json.Unmarshal(head.TextConfig, &inner)
	}
	dtype, note, err := checkpointDType(head.DType, head.TorchDType, inner.DType, inner.TorchDType)
	if err != nil {
		return Info{}, err
	}
	q, err := readHFQuantization(data)
	if err != nil {
		return Info{}, err
	}
	info := Describe(d.cfg, dtype, d.parts, q)
	info.ModelType = head.ModelType
	info.Notes = append(d.notes, info.Notes...)
	if note != "" && !slices.Contains(info.Notes, note) {
		info.Notes = append(info.Notes, note)
	}
	return info, nil
}

// denseParts is the inventory of a dense decoder (llama, Gemma 3) under HF
// module names: embeddings, attention and gated-MLP projections, norms.
func denseParts(c Config) []WeightPart {
	all := allLayers(c.Layers)
	q, kv := c.Heads*c.HeadDim, c.KVHeads*c.HeadDim
	norms := int64(2 * c.Hidden)
	if c.Arch == "gemma3" {
		// pre/post attention and feedforward norms, and query/key norms.
		norms = int64(4*c.Hidden + 2*c.HeadDim)
	}
	parts := []WeightPart{
		{Module: "model.embed_tokens", Out: c.Vocab, In: c.Hidden},
		{Module: "model.layers.*.self_attn.q_proj", Layers: all, Out: q, In: c.Hidden},
		{Module: "model.layers.*.self_attn.k_proj", Layers: all, Out: kv, In: c.Hidden},
		{Module: "model.layers.*.self_attn.v_proj", Layers: all, Out: kv, In: c.Hidden},
		{Module: "model.layers.*.self_attn.o_proj", Layers: all, Out: c.Hidden, In: q},
		{Module: "model.layers.*.mlp.gate_proj", Layers: all, Out: c.Intermediate, In: c.Hidden},
		{Module: "model.layers.*.mlp.up_proj", Layers: all, Out: c.Intermediate, In: c.Hidden},
		{Module: "model.layers.*.mlp.down_proj", Layers: all, Out: c.Hidden, In: c.Intermediate},
		{Module: "model.layers.*.norms", Layers: all, Vector: norms},
		{Module: "model.norm", Vector: int64(c.Hidden)},
	}
	if !c.TiedEmbedding {
		parts = append(parts, WeightPart{Module: "lm_head", Out: c.Vocab, In: c.Hidden})
	}
	return parts
}

// readHFQuantization reads the quantization a config.json declares: MLX's
// "quantization" block (defaults plus per-module entries), or HF's
// "quantization_config" (quant_method and the modules it leaves alone). MLX
// writes both with the same content; its block is read first.
func readHFQuantization(data []byte) (*Quantization, error) {
	var top struct {
		MLX json.RawMessage `json:"quantization"`
		HF  json.RawMessage `json:"quantization_config"`
	}
	if err := json.Unmarshal(data, &top); err != nil {
		return nil, fmt.Errorf("%w: config.json: %w", ErrBadConfig, err)
	}
	raw := top.MLX
	if isNull(raw) {
		raw = top.HF
	}
	if isNull(raw) {
		return nil, nil
	}
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(raw, &fields); err != nil {
		return nil, fmt.Errorf("%w: quantization: %w", ErrBadConfig, err)
	}
	var method string
	if m, ok := fields["quant_method"]; ok {
		if err := json.Unmarshal(m, &method); err != nil {
			return nil, fmt.Errorf("%w: quant_method: %w", ErrBadConfig, err)
		}
	}
	if method != "" {
		return hfQuantization(method, fields)
	}
	return mlxQuantization(fields)
}

func isNull(raw json.RawMessage) bool { return len(raw) == 0 || string(raw) == "null" }

// hfQuantization reads an HF quantization_config. MXFP4 (gpt-oss) stores
// 4-bit elements in groups of 32 sharing one 8-bit scale.
func hfQuantization(method string, fields map[string]json.RawMessage) (*Quantization, error) {
	q := &Quantization{Method: method, QuantLevel: QuantLevel{Mode: method}}
	switch method {
	case "mxfp4":
		q.Bits, q.GroupSize = 4, 32
	case "fp8":
		q.Bits = 8
	}
	for _, key := range []string{"modules_to_not_convert", "ignored_layers", "ignore"} {
		if raw, ok := fields[key]; ok && !isNull(raw) {
			var mods []string
			if err := json.Unmarshal(raw, &mods); err != nil {
				return nil, fmt.Errorf("%w: quantization_config %s: %w", ErrBadConfig, key, err)
			}
			q.Unquantized = append(q.Unquantized, mods...)
		}
	}
	return q, nil
}

// mlxQuantization reads MLX's quantization block: default group_size, bits
// and mode, and per-module entries that are either another level or false
// (left unquantized).
func mlxQuantization(fields map[string]json.RawMessage) (*Quantization, error) {
	var def struct {
		GroupSize int    `json:"group_size"`
		Bits      int    `json:"bits"`
		Mode      string `json:"mode"`
	}
	b, _ := json.Marshal(fields)
	if err := json.Unmarshal(b, &def); err != nil {
		return nil, fmt.Errorf("%w: quantization: %w", ErrBadConfig, err)
	}
	if def.Mode == "" {
		def.Mode = "affine"
	}
	if def.Bits <= 0 || def.GroupSize <= 0 {
		return nil, fmt.Errorf("%w: quantization without bits and group_size", ErrBadConfig)
	}
	q := &Quantization{Method: "mlx", QuantLevel: QuantLevel{Mode: def.Mode, Bits: def.Bits, GroupSize: def.GroupSize}}
	for _, key := range slices.Sorted(maps.Keys(fields)) {
		switch key {
		case "group_size", "bits", "mode", "quant_method":
			continue
		}
		raw := fields[key]
		var keep bool
		if json.Unmarshal(raw, &keep) == nil {
			if !keep {
				q.Unquantized = append(q.Unquantized, key)
			}
			continue
		}
		var o struct {
			GroupSize int    `json:"group_size"`
			Bits      int    `json:"bits"`
			Mode      string `json:"mode"`
		}
		if err := json.Unmarshal(raw, &o); err != nil {
			return nil, fmt.Errorf("%w: quantization of %s: %w", ErrBadConfig, key, err)
		}
		level := QuantLevel{Mode: o.Mode, Bits: o.Bits, GroupSize: o.GroupSize}
		if level.Mode == "" {
			level.Mode = def.Mode
		}
		if level.Bits == 0 {
			level.Bits = def.Bits
		}
		if level.GroupSize == 0 {
			level.GroupSize = def.GroupSize
		}
		if level != q.QuantLevel {
			if q.Overrides == nil {
				q.Overrides = map[string]QuantLevel{}
			}
			q.Overrides[key] = level
		}
	}
	return q, nil
}

// DescribeModel describes a loaded checkpoint from its tensors: exact
// parameter counts and host bytes, grouped by module across layers, and for
// GGUF the llama.cpp types the tensors came in.
func DescribeModel(m *Model) Info {
	info := Info{ModelType: m.Config.Arch, Config: m.Config, Measured: true}
	types := map[string]int{}
	quantized := false
	index := map[string]int{}
	for _, name := range slices.Sorted(maps.Keys(m.Tensors)) {
		t := m.Tensors[name]
		n := int64(1)
		for _, d := range t.Shape {
			n *= int64(d)
		}
		typ := t.GGMLType
		if typ == "" {
			typ = t.DType.String()
			if t.Quant != nil {
				typ = QuantLevel{Mode: t.Quant.Mode, Bits: t.Quant.Bits, GroupSize: t.Quant.GroupSize}.String()
			}
		}
		switch typ {
		case "F32", "F16", "BF16", "float32", "float16", "bfloat16":
		default:
			quantized = true
		}
		types[typ]++
		info.Params += n
		info.WeightBytes += int64(t.Bytes())

		module := layerPattern(strings.TrimSuffix(name, ".weight"))
		i, ok := index[module]
		if !ok {
			i = len(info.Parts)
			index[module] = i
			info.Parts = append(info.Parts, PartCost{Module: module, Format: typ})
		}
		part := &info.Parts[i]
		part.Instances++
		part.Params += n
		part.Bytes += int64(t.Bytes())
		if part.Format != typ {
			part.Format = "mixed"
		}
	}
	if quantized {
		method := m.Format
		if method != "gguf" {
			method = "mlx"
		}
		info.Quant = &Quantization{Method: method, TensorTypes: types}
	}
	return info
}

// layerPattern writes a tensor name's layer index as "*", so the same
// module of every layer groups together.
func layerPattern(name string) string {
	segs := strings.Split(name, ".")
	for i := 1; i < len(segs); i++ {
		if segs[i-1] == "layers" {
			if _, err := strconv.Atoi(segs[i]); err == nil {
				segs[i] = "*"
			}
		}
	}
	return strings.Join(segs, ".")
}
