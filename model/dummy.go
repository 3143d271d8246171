package model

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/fnv"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/goprovider/provider/mlx"
	"github.com/goprovider/provider/tokenizer"
)

// A dummy model is a config.json made runnable with seeded random weights
// of the true shapes and storage formats, so that serving can be measured
// at a model's real size (memory, bandwidth, kernels) without its
// checkpoint. The values are chosen to keep activations finite through
// every layer, not to mean anything: matrices normal with standard
// deviation dummyStd, norm and scale vectors 1 (the multiplier every
// family's RMSNorm applies once loaded), biases and attention sinks 0.

// dummyStd is the standard deviation of every random matrix: small enough
// that a product over a hidden size of a few thousand stays near unit
// scale, as trained models' initializers choose it.
const dummyStd = 0.02

// dummyMXScale is the shared exponent of every MXFP4 group (2^(e-127)):
// uniformly random E2M1 codes have a root mean square of about 2.9, so
// 2^-7 puts the values near dummyStd.
const dummyMXScale = 127 - 7

// DummyTensor is one weight of a dummy model: its manifest entry and the
// format the loader would hold it in.
type DummyTensor struct {
	TensorSpec
	// Quant is the quantized format of a matrix, nil for a dense tensor
	// (held in Config.ActDType, as Upload converts float tensors).
	Quant *QuantLevel
	// Packed: the packed words, scales and biases are separate tensors
	// ("X.weight", "X.scales", "X.biases"), as the gpt-oss loader keeps
	// them; otherwise one quantized Weight.
	Packed bool
}

// Dummy is the weight plan of a dummy model: the architecture read from a
// config.json and every tensor its family's manifest lists, each in the
// format the checkpoint the config describes stores it (its quantization
// block, else its dtype). Planning touches no device memory, so a model's
// size can be checked before it is built.
type Dummy struct {
	Config  Config
	Tensors []DummyTensor
	// parts is what a rank keeps of each stored array (see Shard); arrays
	// not named are whole.
	parts map[string]Part
}

// PlanDummy plans a dummy model of an HF config.json (gpt_oss, gemma4,
// gemma4_text, gemma3, gemma3_text, llama). It refuses what the loader
// would refuse to serve: an architecture without an adapter, a
// quantization MLX cannot hold, a quantized matrix the family cannot use.
func PlanDummy(configJSON []byte) (*Dummy, error) {
	cfg, err := ReadHFConfig(configJSON)
	if err != nil {
		return nil, err
	}
	q, err := readHFQuantization(configJSON)
	if err != nil {
		return nil, err
	}
	arch, ok := checkpointArchs[cfg.Arch]
	if !ok {
		return nil, fmt.Errorf("%w: no dummy weights for %q", ErrUnsupportedArch, cfg.Arch)
	}
	specs := arch.tensors(cfg)
	if cfg.GPTOSS != nil {
		// Which of gpt-oss's matrices are packed is settled below, in
		// a copy of its facts.
		g := *cfg.GPTOSS
		g.Packed = map[string]QuantLevel{}
		cfg.GPTOSS = &g
	}
	d := &Dummy{Config: cfg}
	for _, s := range specs {
		t := DummyTensor{TensorSpec: s}
		if isMatrix(s) {
			level, quantized := q.levelFor(strings.TrimSuffix(s.Name, ".weight"), s.Shape[len(s.Shape)-1])
			if quantized {
				if level, err = mlxLevel(level); err != nil {
					return nil, fmt.Errorf("%s: %w", s.Name, err)
				}
				t.Quant = &level
			}
		}
		switch {
		case t.Quant == nil:
		case cfg.GPTOSS != nil:
			t.Packed = true
			cfg.GPTOSS.Packed[s.Name] = *t.Quant
		case len(s.Shape) != 2:
			return nil, fmt.Errorf("%w: %s adapter cannot use quantized %s of rank %d", ErrUnsupportedType, cfg.Arch, s.Name, len(s.Shape))
		}
		d.Tensors = append(d.Tensors, t)
	}
	return d, nil
}

// mlxLevel is the MLX format a quantization level stores a matrix in. A
// microscaling mode holds only at its own bits and group size: mlx-lm
// writes a module's own entry without a mode when it quantizes that module
// affinely under a microscaling default (as it does gpt-oss's router), and
// the loader reads such a matrix as affine from its biases.
func mlxLevel(l QuantLevel) (QuantLevel, error) {
	switch l.Mode {
	case "affine", "mxfp4", "nvfp4", "mxfp8":
	default:
		return l, fmt.Errorf("%w: quantized as %q", ErrUnsupportedType, l.Mode)
	}
	if l.Bits <= 0 || l.GroupSize <= 0 {
		return l, fmt.Errorf("%w: quantized as %v", ErrBadConfig, l)
	}
	if l.Mode != "affine" {
		micro := map[string]QuantLevel{
			"mxfp4": {Mode: "mxfp4", Bits: 4, GroupSize: 32},
			"nvfp4": {Mode: "nvfp4", Bits: 4, GroupSize: 16},
			"mxfp8": {Mode: "mxfp8", Bits: 8, GroupSize: 32},
		}
		if micro[l.Mode] != l {
			l.Mode = "affine"
		}
	}
	return l, nil
}

// isMatrix reports whether a manifest tensor is a matrix (or a stack of
// them) that quantization may compress; biases, norms and scales never
// are, whatever their rank.
func isMatrix(s TensorSpec) bool {
	return len(s.Shape) >= 2 && !isZeroVector(s.Name)
}

// isZeroVector reports whether a tensor is an additive term (a bias, an
// attention sink logit), which a dummy model leaves at 0.
func isZeroVector(name string) bool {
	return strings.HasSuffix(name, ".bias") || strings.HasSuffix(name, ".sinks")
}

// Params is the number of weight elements, unpacked.
func (d *Dummy) Params() int64 {
	var n int64
	for _, t := range d.Tensors {
		n += elementsOf(t.Shape)
	}
	return n
}

// Bytes is the device memory the built weights take: dense tensors in the
// activation dtype, quantized ones as packed words plus their scales (one
// byte per group in the microscaling modes; a scale and a bias in the
// activation dtype per affine group). After Shard, it is the rank's share.
func (d *Dummy) Bytes() int64 {
	var n int64
	for _, t := range d.Tensors {
		n += d.tensorBytes(t)
	}
	return n
}

func (d *Dummy) tensorBytes(t DummyTensor) int64 {
	var n int64
	for _, x := range d.stored(t) {
		shape, groups := x.Shape, []int(nil)
		if x.Quant != nil {
			shape, groups = x.storedShapes()
		}
		if p, ok := d.parts[x.Name]; ok {
			// Shard checked every part.
			dc, gc, _ := x.cuts(p)
			shape = dc.shape(shape)
			if x.Quant != nil {
				groups = gc.shape(groups)
			}
		}
		if x.Quant == nil {
			n += elementsOf(shape) * int64(x.DType.Size())
			continue
		}
		n += elementsOf(shape) * 4
		if x.Quant.Mode == "affine" {
			n += 2 * elementsOf(groups) * int64(x.Quant.ScaleDType.Size())
		} else {
			n += elementsOf(groups) * int64(x.Quant.ScaleDType.Size())
		}
	}
	return n
}

// stored are shape-only descriptors (no data) of the arrays a checkpoint
// holds a dummy tensor in, as the loader reads them: a dense tensor in the
// activation dtype; a quantized matrix with its format, or, Packed, as
// its plain words ("X.weight", uint32, the last axis in words), scales
// ("X.scales", the last axis in groups) and affine biases ("X.biases").
// Microscaling scales are one byte, affine ones in the activation dtype.
func (d *Dummy) stored(t DummyTensor) []*Tensor {
	act := d.Config.ActDType
	if t.Quant == nil {
		return []*Tensor{{Name: t.Name, Shape: t.Shape, DType: act}}
	}
	scale := mlx.Uint8
	if t.Quant.Mode == "affine" {
		scale = act
	}
	q := &Tensor{Name: t.Name, Shape: t.Shape, DType: mlx.Uint32,
		Quant: &Quant{Bits: t.Quant.Bits, GroupSize: t.Quant.GroupSize, Mode: t.Quant.Mode, ScaleDType: scale}}
	if !t.Packed {
		return []*Tensor{q}
	}
	words, groups := q.storedShapes()
	base := strings.TrimSuffix(t.Name, ".weight")
	out := []*Tensor{
		{Name: t.Name, Shape: words, DType: mlx.Uint32},
		{Name: base + ".scales", Shape: groups, DType: scale},
	}
	if t.Quant.Mode == "affine" {
		out = append(out, &Tensor{Name: base + ".biases", Shape: groups, DType: scale})
	}
	return out
}

// Shard makes d rank's share of a split over size ranks: the plan a
// checkpoint of d.Config would get (Model.Shard), over the arrays such a
// checkpoint stores. d.Config must be the settled, unsharded
// configuration; it becomes the share's. Build then generates every
// tensor whole, with the values the whole model has, and keeps only the
// rank's part, as Tensor.Slice cuts a checkpoint's on the host.
func (d *Dummy) Shard(rank, size int) (*Sharding, error) {
	if size < 1 || rank < 0 || rank >= size {
		return nil, fmt.Errorf("%w: rank %d of %d", ErrShard, rank, size)
	}
	if d.parts != nil {
		return nil, fmt.Errorf("%w: dummy model already sharded", ErrShard)
	}
	if size == 1 {
		return wholeSharding(d.Config), nil
	}
	tensors := map[string]*Tensor{}
	for _, t := range d.Tensors {
		for _, x := range d.stored(t) {
			tensors[x.Name] = x
		}
	}
	s, cfg, err := planShards(d.Config, tensors, rank, size)
	if err != nil {
		return nil, err
	}
	parts := map[string]Part{}
	for name, p := range s.Parts {
		x, ok := tensors[name]
		if !ok {
			continue
		}
		if _, _, err := x.cuts(p); err != nil {
			return nil, fmt.Errorf("%w: %w", ErrShard, err)
		}
		parts[name] = p
	}
	d.Config, d.parts = cfg, parts
	return s, nil
}

func elementsOf(shape []int) int64 {
	n := int64(1)
	for _, s := range shape {
		n *= int64(s)
	}
	return n
}

// Build generates the weights on stream s, tensor by tensor, evaluating
// each before the next so that peak memory stays near the model's size
// plus one tensor's transient. Each tensor's values depend only on seed
// and its name. progress, when not nil, is called after every tensor with
// the bytes built so far and in all. It must run on the MLX thread.
func (d *Dummy) Build(s mlx.Stream, seed uint64, progress func(done, total int64)) (*Weights, error) {
	w := &Weights{byName: make(map[string]*Weight, len(d.Tensors))}
	total, done := d.Bytes(), int64(0)
	for _, t := range d.Tensors {
		if err := d.build(s, seed, t, w); err != nil {
			w.Free()
			return nil, fmt.Errorf("model: dummy %s: %w", t.Name, err)
		}
		done += d.tensorBytes(t)
		if progress != nil {
			progress(done, total)
		}
	}
	// Laid out as a checkpoint's upload to s lays them out (q/k/v joined
	// on a GPU).
	if err := w.fuseFor(s, d.Config); err != nil {
		w.Free()
		return nil, fmt.Errorf("model: dummy: %w", err)
	}
	// The transients of the largest tensors need not stay cached.
	mlx.ClearCache()
	return w, nil
}

// build generates one tensor into w, whole, and keeps the rank's part of
// each of its arrays.
func (d *Dummy) build(s mlx.Stream, seed uint64, t DummyTensor, w *Weights) error {
	f := mlx.NewFrame(s)
	defer f.Free()
	act := d.Config.ActDType
	shape := t.Shape
	var out Weight
	switch {
	case t.Quant == nil && isZeroVector(t.Name):
		out.W = f.Zeros(act, shape...)
	case t.Quant == nil && isMatrix(t.TensorSpec):
		out.W = f.RandomNormal(act, 0, dummyStd, f.RandomKey(tensorSeed(seed, t.Name)), shape...)
	case t.Quant == nil:
		out.W = f.Full(1, act, shape...)
	case t.Quant.Mode == "mxfp4":
		// Uniform codes need no float pass over the largest tensors.
		lead, in := shape[:len(shape)-1], shape[len(shape)-1]
		key := f.RandomKey(tensorSeed(seed, t.Name))
		out.W = f.RandomBits(4, key, append(slices.Clone(lead), in*t.Quant.Bits/32)...)
		out.Scales = f.Full(dummyMXScale, mlx.Uint8, append(slices.Clone(lead), in/t.Quant.GroupSize)...)
	default:
		dense := f.RandomNormal(act, 0, dummyStd, f.RandomKey(tensorSeed(seed, t.Name)), shape...)
		out.W, out.Scales, out.Biases = f.Quantize(dense, t.Quant.GroupSize, t.Quant.Bits, t.Quant.Mode)
		if t.Quant.Mode == "affine" {
			out.Scales, out.Biases = f.AsType(out.Scales, act), f.AsType(out.Biases, act)
		}
	}
	stored := d.stored(t)
	if t.Packed {
		// One plain array per stored tensor, each with its own part.
		for i, a := range []*mlx.Array{&out.W, &out.Scales, &out.Biases}[:len(stored)] {
			if p, ok := d.parts[stored[i].Name]; ok {
				c, _, _ := stored[i].cuts(p) // checked by Shard
				*a = c.take(f, *a)
			}
		}
	} else if p, ok := d.parts[t.Name]; ok {
		c, g, _ := stored[0].cuts(p)
		out.W = c.take(f, out.W)
		if out.Scales.Valid() {
			out.Scales = g.take(f, out.Scales)
		}
		if out.Biases.Valid() {
			out.Biases = g.take(f, out.Biases)
		}
	}
	var arrays []mlx.Array
	for _, a := range []mlx.Array{out.W, out.Scales, out.Biases} {
		if a.Valid() {
			arrays = append(arrays, a)
		}
	}
	if err := f.Eval(arrays...); err != nil {
		return err
	}
	keep := func(a mlx.Array) *Weight { return &Weight{W: f.Keep(a)} }
	switch {
	case t.Quant == nil:
		w.byName[t.Name] = keep(out.W)
	case t.Packed:
		w.byName[t.Name] = keep(out.W)
		w.byName[stored[1].Name] = keep(out.Scales)
		if out.Biases.Valid() {
			w.byName[stored[2].Name] = keep(out.Biases)
		}
	default:
		w.byName[t.Name] = &Weight{W: f.Keep(out.W), Scales: f.Keep(out.Scales), Biases: f.Keep(out.Biases),
			Bits: t.Quant.Bits, GroupSize: t.Quant.GroupSize, Mode: t.Quant.Mode}
	}
	return nil
}

// take is the cut c of a, gathered into an array of its own: a slice would
// be a view that keeps the whole tensor's memory alive.
func (c cut) take(f *mlx.Frame, a mlx.Array) mlx.Array {
	n := a.Dim(c.axis) / c.blocks
	idx := make([]int32, 0, c.blocks*(c.hi-c.lo))
	for b := range c.blocks {
		for i := c.lo; i < c.hi; i++ {
			idx = append(idx, int32(b*n+i))
		}
	}
	return f.Take(a, f.Int32s(idx, len(idx)), c.axis)
}

// tensorSeed is the PRNG seed of one tensor: the model's seed and the
// tensor's name, hashed, so a tensor's values do not depend on which
// others are built or in what order.
func tensorSeed(seed uint64, name string) uint64 {
	h := fnv.New64a()
	var b [8]byte
	binary.LittleEndian.PutUint64(b[:], seed)
	h.Write(b[:])
	h.Write([]byte(name))
	return h.Sum64()
}

// ErrTokenizerVocab is returned when a tokenizer has ids the model's
// embedding has no rows for.
var ErrTokenizerVocab = errors.New("tokenizer vocabulary larger than the model's")

// OpenDummy reads a config.json and a tokenizer.json (with the
// tokenizer_config.json and chat template beside it, when there) into a
// Model that holds no host tensors, and plans its dummy weights. The
// Model's Config and the plan's are the same, with the BOS and EOS rules
// Open applies to a checkpoint.
func OpenDummy(configPath, tokenizerPath string) (*Model, *Dummy, error) {
	raw, err := os.ReadFile(configPath)
	if err != nil {
		return nil, nil, fmt.Errorf("model: %w", err)
	}
	d, err := PlanDummy(raw)
	if err != nil {
		return nil, nil, fmt.Errorf("model: %s: %w", configPath, err)
	}
	tokJSON, err := os.ReadFile(tokenizerPath)
	if err != nil {
		return nil, nil, fmt.Errorf("model: tokenizer: %w", err)
	}
	dir := filepath.Dir(tokenizerPath)
	tokCfg, err := os.ReadFile(filepath.Join(dir, "tokenizer_config.json"))
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, nil, fmt.Errorf("model: tokenizer: %w", err)
	}
	m := &Model{Format: "dummy", Path: configPath}
	if m.Tokenizer, err = tokenizer.FromJSON(tokJSON, tokCfg); err != nil {
		return nil, nil, fmt.Errorf("model: tokenizer %s: %w", tokenizerPath, err)
	}
	if n := m.Tokenizer.VocabSize(); n > d.Config.Vocab {
		return nil, nil, fmt.Errorf("model: %s: %w: %d tokens, vocab_size %d", tokenizerPath, ErrTokenizerVocab, n, d.Config.Vocab)
	}
	m.ChatTemplate = hfChatTemplate(dir, tokCfg)
	cfg := d.Config
	if cfg.BOS < 0 {
		cfg.BOS = m.Tokenizer.BOS()
	}
	cfg.EOS = mergeIDs(cfg.EOS, m.Tokenizer.EOSSet())
	if eos := checkpointArchs[cfg.Arch].eos; eos != nil {
		cfg.EOS = eos(m, cfg.EOS)
	}
	m.Config, d.Config = cfg, cfg
	return m, d, nil
}

// llamaTensors is the llama family's manifest: the tensors
// checkLlamaTensors requires, under their HF names.
func llamaTensors(c Config) []TensorSpec {
	return denseTensors(c, []string{"input_layernorm.weight", "post_attention_layernorm.weight"}, nil)
}

// gemma3Tensors is the Gemma 3 family's manifest: the llama tensors with
// Gemma 3's four norms per layer and its per-head query and key norms.
func gemma3Tensors(c Config) []TensorSpec {
	return denseTensors(c, []string{"input_layernorm.weight", "post_attention_layernorm.weight",
		"pre_feedforward_layernorm.weight", "post_feedforward_layernorm.weight"},
		[]string{"self_attn.q_norm.weight", "self_attn.k_norm.weight"})
}

func denseTensors(c Config, norms, headNorms []string) []TensorSpec {
	h, q, kv, w := c.Hidden, c.Heads*c.HeadDim, c.KVHeads*c.HeadDim, c.Intermediate
	specs := []TensorSpec{
		{"model.embed_tokens.weight", []int{c.Vocab, h}},
		{"model.norm.weight", []int{h}},
	}
	if !c.TiedEmbedding {
		specs = append(specs, TensorSpec{"lm_head.weight", []int{c.Vocab, h}})
	}
	for i := range c.Layers {
		p := fmt.Sprintf("model.layers.%d.", i)
		add := func(name string, shape ...int) { specs = append(specs, TensorSpec{p + name, shape}) }
		for _, n := range norms {
			add(n, h)
		}
		for _, n := range headNorms {
			add(n, c.HeadDim)
		}
		add("self_attn.q_proj.weight", q, h)
		add("self_attn.k_proj.weight", kv, h)
		add("self_attn.v_proj.weight", kv, h)
		add("self_attn.o_proj.weight", h, q)
		add("mlp.gate_proj.weight", w, h)
		add("mlp.up_proj.weight", w, h)
		add("mlp.down_proj.weight", h, w)
	}
	return specs
}
