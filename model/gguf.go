package model

import (
	"fmt"
	"io"
	"math"
	"regexp"
	"slices"
	"strconv"

	"github.com/goprovider/provider/gguf"
	"github.com/goprovider/provider/mlx"
	"github.com/goprovider/provider/tokenizer"
)

func openGGUF(path string, lazy bool) (*Model, error) {
	f, err := gguf.Open(path)
	if err != nil {
		return nil, fmt.Errorf("model: %w", err)
	}
	m := &Model{Format: "gguf", Path: path, closers: []io.Closer{f}}
	err = m.readGGUF(f)
	if err == nil && !lazy {
		err = m.materialize()
	}
	if err != nil {
		m.Close()
		return nil, fmt.Errorf("model: %s: %w", path, err)
	}
	return m, nil
}

func (m *Model) readGGUF(f *gguf.File) error {
	arch, ok := f.String("general.architecture")
	if !ok {
		return fmt.Errorf("%w: general.architecture missing", ErrBadConfig)
	}
	fam, ok := ggufFamilies[arch]
	if !ok {
		return fmt.Errorf("%w: %q", ErrUnsupportedArch, arch)
	}
	cfg, err := fam.config(f, arch)
	if err != nil {
		return err
	}
	tok, err := tokenizer.FromGGUF(f)
	if err != nil {
		return fmt.Errorf("tokenizer: %w", err)
	}
	if cfg.Vocab == 0 {
		cfg.Vocab = tok.VocabSize()
	}
	cfg.BOS = tok.BOS()
	cfg.EOS = tok.EOSSet()
	m.Tokenizer = tok
	if arch == "gemma3" {
		cfg.EOS = gemma3EOS(m, cfg.EOS)
	}
	m.ChatTemplate, _ = f.String("tokenizer.chat_template")

	m.Tensors = make(map[string]*Tensor, len(f.Tensors))
	for _, ti := range f.Tensors {
		if ti.Name == "rope_freqs.weight" {
			factors, err := ggufTensor(f, ti, ti.Name)
			if err != nil {
				return err
			}
			vals, err := factors.Float32s()
			if err != nil {
				return err
			}
			cfg.RoPE.Freqs = ropeFreqsWithFactors(cfg.RoPE.Base, cfg.RoPE.Dims, vals)
			continue
		}
		name, ok := fam.name(ti.Name)
		if !ok {
			return fmt.Errorf("%w: unexpected tensor %q for %s", ErrBadConfig, ti.Name, arch)
		}
		t, err := ggufLazy(f, ti, name)
		if err != nil {
			return err
		}
		m.Tensors[name] = t
	}
	if _, ok := m.Tensors["lm_head.weight"]; !ok {
		cfg.TiedEmbedding = true
	}
	if err := cfg.Validate(); err != nil {
		return err
	}
	m.Config = cfg
	return fam.check(m)
}

// ggufFamilies are the GGUF architectures the loader reads: how to build
// the config, map tensor names to HF names, and check the tensor set.
var ggufFamilies = map[string]struct {
	config func(*gguf.File, string) (Config, error)
	name   func(string) (string, bool)
	check  func(*Model) error
}{
	"llama":  {llamaConfigFromGGUF, hfName, checkLlamaTensors},
	"gemma3": {gemma3ConfigFromGGUF, gemma3Name, checkGemma3Tensors},
}

func llamaConfigFromGGUF(f *gguf.File, arch string) (Config, error) {
	u := func(key string) int {
		v, _ := f.Uint(arch + "." + key)
		if v > math.MaxInt32 {
			return -1
		}
		return int(v)
	}
	c := Config{
		Arch:          arch,
		Vocab:         u("vocab_size"),
		Hidden:        u("embedding_length"),
		Intermediate:  u("feed_forward_length"),
		Layers:        u("block_count"),
		Heads:         u("attention.head_count"),
		KVHeads:       u("attention.head_count_kv"),
		ContextLength: u("context_length"),
		ActDType:      mlx.Float32,
	}
	if c.KVHeads == 0 {
		c.KVHeads = c.Heads
	}
	if c.Heads > 0 {
		c.HeadDim = c.Hidden / c.Heads
	}
	if kl := u("attention.key_length"); kl > 0 {
		c.HeadDim = kl
	}
	eps, ok := f.Float(arch + ".attention.layer_norm_rms_epsilon")
	if !ok {
		eps = 1e-5
	}
	c.NormEps = float32(eps)
	base, ok := f.Float(arch + ".rope.freq_base")
	if !ok {
		base = 10000
	}
	c.RoPE = RoPE{Dims: u("rope.dimension_count"), Base: float32(base), Scale: 1, Traditional: true}
	if c.RoPE.Dims == 0 {
		c.RoPE.Dims = c.HeadDim
	}
	if kind, ok := f.String(arch + ".rope.scaling.type"); ok && kind != "none" {
		factor, _ := f.Float(arch + ".rope.scaling.factor")
		switch {
		case kind == "linear" && factor > 0:
			c.RoPE.Scale = float32(1 / factor)
		case kind == "linear":
		default:
			return c, fmt.Errorf("%w: rope scaling %q", ErrUnsupportedArch, kind)
		}
	}
	c.Kinds = uniformKinds(c.Layers, c.KVHeads, c.HeadDim)
	return c, nil
}

// ropeFreqsWithFactors turns llama.cpp's per-pair frequency divisors into
// MLX periods: base^(2i/d) * factor_i.
func ropeFreqsWithFactors(base float32, dims int, factors []float32) []float32 {
	out := make([]float32, dims/2)
	for i := range out {
		p := math.Pow(float64(base), float64(2*i)/float64(dims))
		fac := float32(1)
		if i < len(factors) {
			fac = factors[i]
		}
		out[i] = float32(p) * fac
	}
	return out
}

var blkName = regexp.MustCompile(`^blk\.(\d+)\.(\w+)\.(weight|bias)$`)

var ggufLayerNames = map[string]string{
	"attn_norm":   "input_layernorm",
	"ffn_norm":    "post_attention_layernorm",
	"attn_q":      "self_attn.q_proj",
	"attn_k":      "self_attn.k_proj",
	"attn_v":      "self_attn.v_proj",
	"attn_output": "self_attn.o_proj",
	"ffn_gate":    "mlp.gate_proj",
	"ffn_up":      "mlp.up_proj",
	"ffn_down":    "mlp.down_proj",
}

// hfName maps a llama.cpp tensor name to the HF name the families use.
func hfName(name string) (string, bool) {
	switch name {
	case "token_embd.weight":
		return "model.embed_tokens.weight", true
	case "output_norm.weight":
		return "model.norm.weight", true
	case "output.weight":
		return "lm_head.weight", true
	}
	sm := blkName.FindStringSubmatch(name)
	if sm == nil {
		return "", false
	}
	hf, ok := ggufLayerNames[sm[2]]
	if !ok {
		return "", false
	}
	idx, err := strconv.Atoi(sm[1])
	if err != nil {
		return "", false
	}
	return fmt.Sprintf("model.layers.%d.%s.%s", idx, hf, sm[3]), true
}

// ggufTensor converts one GGUF tensor: float types stay dense, Q4_0/Q4_1/
// Q8_0 matrices map exactly to MLX affine quantization with binary16 group
// parameters, Q4_K/Q5_K/Q5_0 ones with float32 parameters (a K-quant group
// scale d*sc needs 17 significant bits), anything else that gguf can decode
// (Q6_K, whose 16-element groups MLX lacks, among them) is dequantized to
// float32.
func ggufTensor(f *gguf.File, ti gguf.TensorInfo, name string) (*Tensor, error) {
	data, err := f.TensorData(ti)
	if err != nil {
		return nil, err
	}
	return convertGGUF(ti, data, name)
}

// ggufRaw is a GGUF tensor not yet converted: its type and its bytes, row
// by row (a row is cols/BlockSize blocks). Slicing it before conversion
// converts only the part a tensor-parallel rank keeps.
type ggufRaw struct {
	info gguf.TensorInfo
	data []byte
}

// ggufLazy records a tensor for conversion by materialize: float tensors
// (a view of the file, nothing to convert) at once, others on demand.
func ggufLazy(f *gguf.File, ti gguf.TensorInfo, name string) (*Tensor, error) {
	switch ti.Type {
	case gguf.F32, gguf.F16, gguf.BF16:
		return ggufTensor(f, ti, name)
	}
	data, err := f.TensorData(ti)
	if err != nil {
		return nil, err
	}
	shape := make([]int, len(ti.Dims))
	for i, d := range ti.Dims {
		if d > math.MaxInt32 {
			return nil, fmt.Errorf("%w: %s dimension %d", ErrBadConfig, ti.Name, d)
		}
		shape[len(ti.Dims)-1-i] = int(d)
	}
	return &Tensor{Name: name, Shape: shape, GGMLType: ti.Type.String(), raw: &ggufRaw{info: ti, data: data}}, nil
}

// sliceRaw is part p of an unconverted matrix: rows, or whole blocks of
// every row.
func (t *Tensor) sliceRaw(p Part, axis int) (*Tensor, error) {
	r := t.raw
	bs, ts := r.info.Type.BlockSize(), r.info.Type.TypeSize()
	if len(t.Shape) != 2 || bs == 0 || t.Shape[1]%bs != 0 {
		return nil, fmt.Errorf("%s: slice of a %v %s tensor", t.Name, t.Shape, r.info.Type)
	}
	rowBytes := t.Shape[1] / bs * ts
	out := *t
	out.Shape = slices.Clone(t.Shape)
	out.Shape[axis] = p.Hi - p.Lo
	info := r.info
	info.Dims = []uint64{uint64(out.Shape[1]), uint64(out.Shape[0])}
	if axis == 0 {
		out.raw = &ggufRaw{info: info, data: r.data[p.Lo*rowBytes : p.Hi*rowBytes : p.Hi*rowBytes]}
		return &out, nil
	}
	if p.Lo%bs != 0 || p.Hi%bs != 0 {
		return nil, fmt.Errorf("%s: columns [%d, %d) cut %s blocks of %d", t.Name, p.Lo, p.Hi, r.info.Type, bs)
	}
	lo, hi := p.Lo/bs*ts, p.Hi/bs*ts
	data := make([]byte, 0, t.Shape[0]*(hi-lo))
	for row := range t.Shape[0] {
		data = append(data, r.data[row*rowBytes+lo:row*rowBytes+hi]...)
	}
	out.raw = &ggufRaw{info: info, data: data}
	return &out, nil
}

// Materialize converts every tensor still in its GGUF form (see
// OpenToShard); Upload does it itself.
func (m *Model) Materialize() error { return m.materialize() }

// materialize converts every tensor still in its GGUF form.
func (m *Model) materialize() error {
	for name, t := range m.Tensors {
		if t.raw == nil {
			continue
		}
		c, err := convertGGUF(t.raw.info, t.raw.data, t.Name)
		if err != nil {
			return err
		}
		m.Tensors[name] = c
	}
	return nil
}

// convertGGUF converts one GGUF tensor's bytes (see ggufTensor).
func convertGGUF(ti gguf.TensorInfo, data []byte, name string) (*Tensor, error) {
	shape := make([]int, len(ti.Dims))
	for i, d := range ti.Dims {
		if d > math.MaxInt32 {
			return nil, fmt.Errorf("%w: %s dimension %d", ErrBadConfig, ti.Name, d)
		}
		shape[len(ti.Dims)-1-i] = int(d)
	}
	t := &Tensor{Name: name, Shape: shape}
	if ti.Type != gguf.F32 && ti.Type != gguf.F16 && ti.Type != gguf.BF16 {
		t.GGMLType = ti.Type.String()
	}
	switch ti.Type {
	case gguf.F32:
		t.DType, t.Data = mlx.Float32, data
		return t, nil
	case gguf.F16:
		t.DType, t.Data = mlx.Float16, data
		return t, nil
	case gguf.BF16:
		t.DType, t.Data = mlx.BFloat16, data
		return t, nil
	case gguf.Q4_0, gguf.Q4_1, gguf.Q8_0:
		if len(shape) == 2 && shape[1]%32 == 0 {
			a, err := gguf.ToAffine(ti.Type, data, shape[0], shape[1])
			if err != nil {
				return nil, fmt.Errorf("%s: %w", ti.Name, err)
			}
			t.DType, t.Data = mlx.Uint32, uint32Bytes(a.Packed)
			t.Quant = &Quant{Bits: a.Bits, GroupSize: a.GroupSize, Mode: "affine",
				Scales: uint16Bytes(a.Scales), Biases: uint16Bytes(a.Biases), ScaleDType: mlx.Float16}
			return t, nil
		}
	case gguf.Q4_K, gguf.Q5_K, gguf.Q5_0:
		if len(shape) == 2 && shape[1]%ti.Type.BlockSize() == 0 {
			a, err := gguf.ToAffineF32(ti.Type, data, shape[0], shape[1])
			if err != nil {
				return nil, fmt.Errorf("%s: %w", ti.Name, err)
			}
			t.DType, t.Data = mlx.Uint32, uint32Bytes(a.Packed)
			t.Quant = &Quant{Bits: a.Bits, GroupSize: a.GroupSize, Mode: "affine",
				Scales: float32Bytes(a.Scales), Biases: float32Bytes(a.Biases), ScaleDType: mlx.Float32}
			return t, nil
		}
	}
	vals, err := gguf.Dequantize(ti.Type, data, int(ti.Elements()))
	if err != nil {
		return nil, fmt.Errorf("%s: %w: %w", ti.Name, ErrUnsupportedType, err)
	}
	t.DType, t.Data = mlx.Float32, float32Bytes(vals)
	return t, nil
}

func checkLlamaTensors(m *Model) error {
	c := m.Config
	want := []struct {
		name  string
		shape []int
	}{
		{"model.embed_tokens.weight", []int{c.Vocab, c.Hidden}},
		{"model.norm.weight", []int{c.Hidden}},
	}
	if !c.TiedEmbedding {
		want = append(want, struct {
			name  string
			shape []int
		}{"lm_head.weight", []int{c.Vocab, c.Hidden}})
	}
	for i := range c.Layers {
		p := fmt.Sprintf("model.layers.%d.", i)
		q, kv := c.Heads*c.HeadDim, c.KVHeads*c.HeadDim
		for _, w := range []struct {
			n string
			s []int
		}{
			{"input_layernorm.weight", []int{c.Hidden}},
			{"post_attention_layernorm.weight", []int{c.Hidden}},
			{"self_attn.q_proj.weight", []int{q, c.Hidden}},
			{"self_attn.k_proj.weight", []int{kv, c.Hidden}},
			{"self_attn.v_proj.weight", []int{kv, c.Hidden}},
			{"self_attn.o_proj.weight", []int{c.Hidden, q}},
			{"mlp.gate_proj.weight", []int{c.Intermediate, c.Hidden}},
			{"mlp.up_proj.weight", []int{c.Intermediate, c.Hidden}},
			{"mlp.down_proj.weight", []int{c.Hidden, c.Intermediate}},
		} {
			want = append(want, struct {
				name  string
				shape []int
			}{p + w.n, w.s})
		}
	}
	for _, w := range want {
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

func sameShape(a, b []int) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}
