package model

import (
	"fmt"
	"math"
	"slices"
	"strings"

	"github.com/goprovider/provider/mlx"
	"github.com/goprovider/provider/safetensors"
)

// GPTOSSFacts is what the gpt-oss forward pass needs beyond Config's common
// fields. ReadHFConfig fills it for Arch "gpt_oss"; it is nil for every
// other architecture.
type GPTOSSFacts struct {
	// Experts per layer, PerToken of them routed to each token.
	Experts, PerToken int
	// The clamped SwiGLU of every expert: the gate is capped at
	// SwiGLULimit, the linear half clipped to [-SwiGLULimit, SwiGLULimit],
	// and the output is (linear+1) * gate*sigmoid(SwiGLUAlpha*gate).
	SwiGLUAlpha, SwiGLULimit float32
	// YaRNFactor is YaRN's attention factor: it scales the rotated queries
	// and keys (HF transformers multiplies cos and sin by it), hence every
	// query-key product by its square. 1 without YaRN.
	YaRNFactor float32
	// Packed is, by tensor name ("....weight"), the format of every matrix
	// the checkpoint stores quantized. The loader keeps such a matrix as
	// its packed uint32 words with its scales (and, for affine, biases)
	// beside it as plain tensors ("....scales", "....biases"), never
	// dequantized, so expert stacks of any rank upload as they are. Filled
	// by Open; empty when only the config was read.
	Packed map[string]QuantLevel
	// ExpertRange is the experts [lo, hi) of every layer that a rank of a
	// tensor-parallel split holds when the experts are divided whole (see
	// Sharding); its expert stacks then hold only those, while the router
	// still scores all Experts. Zero when the rank holds every expert.
	ExpertRange [2]int
}

// Defaults of gpt-oss's config keys, as HF transformers' GptOssConfig sets
// them.
const (
	gptossPerToken    = 4
	gptossSwiGLUAlpha = 1.702
	gptossSwiGLULimit = 7.0
	gptossRopeTheta   = 150000
)

// gptossFacts records on c what the forward pass reads beyond the shared
// facts: routing, the clamped SwiGLU, and YaRN rotary scaling.
func (hc *hfGPTOSS) gptossFacts(c *Config) error {
	g := &GPTOSSFacts{Experts: hc.NumLocalExperts, PerToken: gptossPerToken,
		SwiGLUAlpha: gptossSwiGLUAlpha, SwiGLULimit: gptossSwiGLULimit, YaRNFactor: 1}
	switch {
	case hc.NumExpertsPerTok > 0:
		g.PerToken = hc.NumExpertsPerTok
	case hc.ExpertsPerToken > 0:
		g.PerToken = hc.ExpertsPerToken
	}
	if g.PerToken > g.Experts {
		return fmt.Errorf("%w: gpt_oss routes %d of %d experts", ErrBadConfig, g.PerToken, g.Experts)
	}
	if hc.SwiGLUAlpha != nil {
		g.SwiGLUAlpha = float32(*hc.SwiGLUAlpha)
	}
	if hc.SwiGLULimit != nil {
		g.SwiGLULimit = float32(*hc.SwiGLULimit)
	}
	if hc.AttentionBias != nil && !*hc.AttentionBias {
		return fmt.Errorf("%w: gpt_oss without attention biases", ErrUnsupportedArch)
	}
	if c.RoPE.Base == 0 {
		c.RoPE.Base = gptossRopeTheta
	}
	factor, err := yarnRoPE(&c.RoPE, hc.RopeScaling)
	if err != nil {
		return err
	}
	g.YaRNFactor = float32(factor)
	c.GPTOSS = g
	return nil
}

// yarnRoPE applies YaRN rope_scaling to r (none and "default" leave it
// alone) and returns the attention factor. Each rotated pair i gets the
// period that blends its original one, base^(2i/dims), with the one
// stretched by factor: pairs that turn more than beta_fast times over the
// original context keep theirs, pairs that turn fewer than beta_slow times
// take the stretched one, and a linear ramp over the pair index joins the
// two. The ramp's ends are rounded out to whole pairs unless the config
// says "truncate": false, as gpt-oss's does (HF transformers honours that
// key; mlx-lm always rounds).
func yarnRoPE(r *RoPE, rs map[string]any) (float64, error) {
	kind, _ := rs["rope_type"].(string)
	if kind == "" {
		kind, _ = rs["type"].(string)
	}
	switch kind {
	case "", "default":
		return 1, nil
	case "yarn":
	default:
		return 0, fmt.Errorf("%w: gpt_oss rope scaling %q", ErrUnsupportedArch, kind)
	}
	for _, k := range []string{"mscale", "mscale_all_dim"} {
		if _, ok := rs[k]; ok {
			return 0, fmt.Errorf("%w: yarn rope scaling with %s", ErrUnsupportedArch, k)
		}
	}
	factor := num(rs, "factor", 0)
	orig := num(rs, "original_max_position_embeddings", 4096)
	fast, slow := num(rs, "beta_fast", 32), num(rs, "beta_slow", 1)
	if factor < 1 || orig <= 0 || fast <= slow || slow <= 0 {
		return 0, fmt.Errorf("%w: yarn rope scaling %v", ErrBadConfig, rs)
	}
	truncate := true
	if t, ok := rs["truncate"].(bool); ok {
		truncate = t
	}
	dims, base := float64(r.Dims), float64(r.Base)
	// The pair index at which a pair turns the given number of times over
	// the original context.
	pairAt := func(turns float64) float64 {
		return dims * math.Log(orig/(turns*2*math.Pi)) / (2 * math.Log(base))
	}
	low, high := pairAt(fast), pairAt(slow)
	if truncate {
		low, high = math.Floor(low), math.Ceil(high)
	}
	low, high = math.Max(low, 0), math.Min(high, dims-1)
	if low == high {
		high += 0.001
	}
	r.Freqs = make([]float32, r.Dims/2)
	for i := range r.Freqs {
		period := math.Pow(base, float64(2*i)/dims)
		ramp := math.Min(math.Max((float64(i)-low)/(high-low), 0), 1)
		keep := 1 - ramp // weight of the original frequency
		stretched := factor * period
		r.Freqs[i] = float32(stretched * period / (stretched*keep + period*(1-keep)))
	}
	attn := 1.0
	if v, ok := rs["attention_factor"].(float64); ok {
		attn = v
	} else if factor > 1 {
		attn = 0.1*math.Log(factor) + 1
	}
	return attn, nil
}

// The expert stacks of a layer, as the three checkpoint layouts name them
// once loaded (P is "model.layers.N.mlp.experts."):
//
//   - split, as mlx-lm saves: P{gate,up,down}_proj.weight, [E, out, in],
//     packed or not, with P{gate,up,down}_proj.bias;
//   - HF MXFP4, as published: P{gate_up,down}_proj.weight, the
//     *_proj_blocks bytes read as uint32 words, [E, out, in/8], with
//     .scales and .bias; gate_up's output rows alternate gate and up;
//   - HF dense, as HF transformers saves: P{gate_up,down}_proj, [E, in,
//     out] (input rows), with .bias; gate_up's output columns alternate
//     gate and up.
const (
	gptossSplit = "split"
	gptossFused = "fused"
	gptossDense = "dense"
)

// GPTOSSExpertLayout names the layout a layer's expert tensors use (see
// above), or "" when they are missing.
func GPTOSSExpertLayout(has func(name string) bool, layer int) string {
	p := fmt.Sprintf("model.layers.%d.mlp.experts.", layer)
	switch {
	case has(p + "gate_proj.weight"):
		return gptossSplit
	case has(p + "gate_up_proj.weight"):
		return gptossFused
	case has(p + "gate_up_proj"):
		return gptossDense
	}
	return ""
}

// GPTOSSTensors is the manifest of a gpt-oss config: every tensor the
// forward pass reads, in the split layout mlx-lm saves, with logical shapes
// ([experts, out, in] for expert stacks). It is nil for a config without
// its gpt-oss facts.
func GPTOSSTensors(c Config) []TensorSpec {
	g := c.GPTOSS
	if g == nil {
		return nil
	}
	h, q, kv, e, w := c.Hidden, c.Heads*c.HeadDim, c.KVHeads*c.HeadDim, g.Experts, c.Intermediate
	specs := []TensorSpec{
		{Name: "model.embed_tokens.weight", Shape: []int{c.Vocab, h}},
		{Name: "model.norm.weight", Shape: []int{h}},
	}
	if !c.TiedEmbedding {
		specs = append(specs, TensorSpec{Name: "lm_head.weight", Shape: []int{c.Vocab, h}})
	}
	for i := range c.Layers {
		p := fmt.Sprintf("model.layers.%d.", i)
		for _, s := range []TensorSpec{
			{Name: "input_layernorm.weight", Shape: []int{h}},
			{Name: "post_attention_layernorm.weight", Shape: []int{h}},
			{Name: "self_attn.q_proj.weight", Shape: []int{q, h}}, {Name: "self_attn.q_proj.bias", Shape: []int{q}},
			{Name: "self_attn.k_proj.weight", Shape: []int{kv, h}}, {Name: "self_attn.k_proj.bias", Shape: []int{kv}},
			{Name: "self_attn.v_proj.weight", Shape: []int{kv, h}}, {Name: "self_attn.v_proj.bias", Shape: []int{kv}},
			{Name: "self_attn.o_proj.weight", Shape: []int{h, q}}, {Name: "self_attn.o_proj.bias", Shape: []int{h}},
			{Name: "self_attn.sinks", Shape: []int{c.Heads}},
			{Name: "mlp.router.weight", Shape: []int{e, h}}, {Name: "mlp.router.bias", Shape: []int{e}},
			{Name: "mlp.experts.gate_proj.weight", Shape: []int{e, w, h}}, {Name: "mlp.experts.gate_proj.bias", Shape: []int{e, w}},
			{Name: "mlp.experts.up_proj.weight", Shape: []int{e, w, h}}, {Name: "mlp.experts.up_proj.bias", Shape: []int{e, w}},
			{Name: "mlp.experts.down_proj.weight", Shape: []int{e, h, w}}, {Name: "mlp.experts.down_proj.bias", Shape: []int{e, h}},
		} {
			s.Name = p + s.Name
			specs = append(specs, s)
		}
	}
	return specs
}

// readGPTOSSSafetensors collects a gpt-oss checkpoint's tensors in any of
// the three expert layouts, without converting or copying data: HF MXFP4
// blocks are reinterpreted as uint32 words, quantized matrices of any rank
// stay packed (see GPTOSSFacts.Packed), and every name is normalized to the
// forms GPTOSSExpertLayout describes. It records in c.GPTOSS.Packed the
// format of every packed matrix, found from its shapes and checked against
// the bits and group size config.json's quantization block (q, may be nil)
// declares.
func (m *Model) readGPTOSSSafetensors(st *safetensors.Dir, c *Config, q *hfQuant) error {
	if c.GPTOSS == nil {
		return fmt.Errorf("%w: gpt_oss config without its gpt-oss facts", ErrBadConfig)
	}
	c.GPTOSS.Packed = map[string]QuantLevel{}
	m.Tensors = map[string]*Tensor{}
	read := func(name string) (*Tensor, error) {
		f, info, ok := st.Lookup(name)
		if !ok {
			return nil, fmt.Errorf("%w: %s", ErrMissingTensor, name)
		}
		dt, ok := safetensorsDTypes[info.DType]
		if !ok {
			return nil, fmt.Errorf("%w: %s has dtype %s", ErrUnsupportedType, name, info.DType)
		}
		data, err := f.Data(info)
		if err != nil {
			return nil, err
		}
		return &Tensor{Name: name, Shape: slices.Clone(info.Shape), DType: dt, Data: data}, nil
	}
	names := st.Names()
	has := func(n string) bool { return slices.Contains(names, n) }
	for _, name := range names {
		t, err := read(name)
		if err != nil {
			return err
		}
		switch {
		case strings.HasSuffix(name, "_proj_blocks"):
			// HF MXFP4: [E, out, in/32, 16] bytes, 32 four-bit values a
			// block, beside one uint8 exponent per block.
			base := strings.TrimSuffix(name, "_blocks")
			sc, err := read(base + "_scales")
			if err != nil {
				return err
			}
			sh := t.Shape
			if t.DType != mlx.Uint8 || sc.DType != mlx.Uint8 || len(sh) != 4 || sh[3] != 16 || !slices.Equal(sc.Shape, sh[:3]) {
				return fmt.Errorf("%w: MXFP4 %s %v %v with scales %v %v", ErrBadConfig, name, t.DType, sh, sc.DType, sc.Shape)
			}
			t.Name, t.DType, t.Shape = base+".weight", mlx.Uint32, []int{sh[0], sh[1], sh[2] * 4}
			sc.Name = base + ".scales"
			m.Tensors[t.Name], m.Tensors[sc.Name] = t, sc
			c.GPTOSS.Packed[t.Name] = QuantLevel{Mode: "mxfp4", Bits: 4, GroupSize: 32}
		case strings.HasSuffix(name, "_proj_scales") && has(strings.TrimSuffix(name, "_scales")+"_blocks"):
			// Read with its blocks.
		case strings.HasSuffix(name, "_proj_bias"):
			t.Name = strings.TrimSuffix(name, "_bias") + ".bias"
			m.Tensors[t.Name] = t
		default:
			m.Tensors[name] = t
		}
	}
	return m.packGPTOSS(c, q)
}

// packGPTOSS finds the MLX-quantized matrices (a uint32 "X.weight" with
// "X.scales" beside it), works out their format from the shapes and the
// logical input width the config gives the module, and checks it against
// config.json's quantization block. The mode is not compared: mlx-lm
// writes a module's own entry without one when it is affine under
// another default mode.
func (m *Model) packGPTOSS(c *Config, q *hfQuant) error {
	for name, t := range m.Tensors {
		base, ok := strings.CutSuffix(name, ".weight")
		sc := m.Tensors[base+".scales"]
		if !ok || sc == nil {
			continue
		}
		if _, done := c.GPTOSS.Packed[name]; done {
			continue
		}
		in, ok := gptossInputWidth(*c, base)
		if !ok {
			return fmt.Errorf("%w: quantized %s is not a gpt-oss matrix", ErrBadConfig, name)
		}
		_, biased := m.Tensors[base+".biases"]
		level, err := packedLevel(t, sc, in, biased)
		if err != nil {
			return err
		}
		if q != nil {
			if d := q.forModule(base); d.Bits > 0 && (d.Bits != level.Bits || d.GroupSize != level.GroupSize) {
				return fmt.Errorf("%w: %s is stored as %v, config.json declares %d bits in groups of %d",
					ErrBadConfig, name, level, d.Bits, d.GroupSize)
			}
		}
		c.GPTOSS.Packed[name] = level
	}
	return nil
}

// packedLevel is the MLX quantization a packed matrix of input width in
// was stored with: bits from its words per row, group size from its scales
// per row; affine when it has biases, else the microscaling format of that
// bits and group size (their scales are uint8).
func packedLevel(w, scales *Tensor, in int, biased bool) (QuantLevel, error) {
	ws, ss := w.Shape, scales.Shape
	bad := func() (QuantLevel, error) {
		return QuantLevel{}, fmt.Errorf("%w: packed %s %v %v with scales %v %v for input width %d",
			ErrBadConfig, w.Name, w.DType, ws, scales.DType, ss, in)
	}
	if w.DType != mlx.Uint32 || len(ws) < 2 || len(ss) != len(ws) || !slices.Equal(ws[:len(ws)-1], ss[:len(ss)-1]) {
		return bad()
	}
	words, groups := ws[len(ws)-1], ss[len(ss)-1]
	if words*32%in != 0 || groups == 0 || in%groups != 0 {
		return bad()
	}
	l := QuantLevel{Mode: "affine", Bits: words * 32 / in, GroupSize: in / groups}
	switch {
	case biased:
	case scales.DType != mlx.Uint8:
		return bad()
	case l.Bits == 4 && l.GroupSize == 32:
		l.Mode = "mxfp4"
	case l.Bits == 4 && l.GroupSize == 16:
		l.Mode = "nvfp4"
	case l.Bits == 8 && l.GroupSize == 32:
		l.Mode = "mxfp8"
	default:
		return bad()
	}
	return l, nil
}

// gptossInputWidth is the logical input width of a gpt-oss matrix module.
func gptossInputWidth(c Config, module string) (int, bool) {
	switch {
	case module == "model.embed_tokens" || module == "lm_head":
		return c.Hidden, true
	case strings.HasSuffix(module, ".self_attn.o_proj"):
		return c.Heads * c.HeadDim, true
	case strings.HasSuffix(module, ".experts.down_proj"):
		return c.Intermediate, true
	}
	for _, s := range []string{".self_attn.q_proj", ".self_attn.k_proj", ".self_attn.v_proj", ".mlp.router",
		".experts.gate_proj", ".experts.up_proj", ".experts.gate_up_proj"} {
		if strings.HasSuffix(module, s) {
			return c.Hidden, true
		}
	}
	return 0, false
}

// checkGPTOSSTensors checks every tensor of the manifest against the
// checkpoint: present, and of the manifest's logical shape (a packed
// matrix unpacked by its recorded format). A layer whose experts come in
// a fused layout is checked against that layout's tensors instead.
func checkGPTOSSTensors(m *Model) error {
	c := m.Config
	specs := GPTOSSTensors(c)
	if specs == nil {
		return fmt.Errorf("%w: gpt_oss config without its gpt-oss facts", ErrBadConfig)
	}
	has := func(n string) bool { _, ok := m.Tensors[n]; return ok }
	layouts := make([]string, c.Layers)
	for i := range layouts {
		if layouts[i] = GPTOSSExpertLayout(has, i); layouts[i] == "" {
			return fmt.Errorf("%w: model.layers.%d.mlp.experts: no expert tensors", ErrMissingTensor, i)
		}
	}
	var want []TensorSpec
	for _, s := range specs {
		if i, ok := expertLayer(s.Name); !ok || layouts[i] == gptossSplit {
			want = append(want, s)
		}
	}
	e, w, h := c.GPTOSS.Experts, c.Intermediate, c.Hidden
	for i, layout := range layouts {
		p := fmt.Sprintf("model.layers.%d.mlp.experts.", i)
		gateUp, down, suffix := []int{e, 2 * w, h}, []int{e, h, w}, ".weight"
		switch layout {
		case gptossSplit:
			continue
		case gptossDense:
			gateUp, down, suffix = []int{e, h, 2 * w}, []int{e, w, h}, ""
		}
		want = append(want,
			TensorSpec{Name: p + "gate_up_proj" + suffix, Shape: gateUp}, TensorSpec{Name: p + "gate_up_proj.bias", Shape: []int{e, 2 * w}},
			TensorSpec{Name: p + "down_proj" + suffix, Shape: down}, TensorSpec{Name: p + "down_proj.bias", Shape: []int{e, h}})
	}
	for _, s := range want {
		t, err := m.Tensor(s.Name)
		if err != nil {
			return err
		}
		shape := t.Shape
		if l, ok := c.GPTOSS.Packed[s.Name]; ok {
			shape = slices.Clone(shape)
			shape[len(shape)-1] = shape[len(shape)-1] * 32 / l.Bits
		}
		if !slices.Equal(shape, s.Shape) {
			return fmt.Errorf("%w: %s has shape %v, want %v", ErrBadConfig, s.Name, shape, s.Shape)
		}
	}
	return nil
}

// expertLayer is the layer of an expert tensor's name.
func expertLayer(name string) (int, bool) {
	var i int
	if !strings.Contains(name, ".mlp.experts.") {
		return 0, false
	}
	if _, err := fmt.Sscanf(name, "model.layers.%d.", &i); err != nil {
		return 0, false
	}
	return i, true
}
