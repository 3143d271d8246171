package gemma4

import (
	"fmt"
	"math"
	"slices"

	"github.com/goprovider/provider/kvpool"
	"github.com/goprovider/provider/mlx"
	"github.com/goprovider/provider/model"
)

type layer struct {
	inNorm, postAttnNorm  *model.Weight
	preFFNorm, postFFNorm *model.Weight
	scalar                *model.Weight
	q, qNorm, o           *model.Weight
	k, kNorm, v           *model.Weight // nil in a sharing layer; v nil when keys are values
	gate, up, down        *model.Weight
	// Expert block; router nil without one.
	router, routerScale, expertScale *model.Weight
	gateUp, expertDown               *model.Weight
	preFF2Norm, postFF1Norm          *model.Weight
	postFF2Norm                      *model.Weight
	// Per-layer input; inGate nil without one.
	inGate, inProj, inNorm2 *model.Weight

	kind model.LayerKind
	rope model.RoPE
}

// Model is a Gemma 4 text network bound to device weights.
type Model struct {
	cfg    model.Config
	g      model.Gemma4Facts
	embed  *model.Weight
	norm   *model.Weight
	lmHead *model.Weight
	// Per-layer inputs; perLayerEmbed nil without them.
	perLayerEmbed, perLayerProj, perLayerNorm *model.Weight
	layers                                    []layer
}

// TensorManifest is every tensor New reads for cfg, with its shape.
func TensorManifest(cfg model.Config) []model.TensorSpec { return model.Gemma4Tensors(cfg) }

// New binds the forward pass to uploaded weights, after checking that
// every tensor of the manifest is there with its shape.
func New(cfg model.Config, w *model.Weights) (*Model, error) {
	if cfg.Arch != "gemma4" || cfg.Gemma4 == nil {
		return nil, fmt.Errorf("gemma4: %w: %q", model.ErrUnsupportedArch, cfg.Arch)
	}
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("gemma4: %w", err)
	}
	specs := TensorManifest(cfg)
	if specs == nil {
		return nil, fmt.Errorf("gemma4: %w: inconsistent Gemma 4 facts", model.ErrBadConfig)
	}
	for _, s := range specs {
		x := w.Get(s.Name)
		if x == nil {
			return nil, fmt.Errorf("gemma4: %w: %s", model.ErrMissingTensor, s.Name)
		}
		want := s.Shape
		if x.Gather.Valid() {
			// A vocabulary-split head: the rank's rows of it.
			want = slices.Clone(want)
			want[0] /= x.Gather.Size()
		}
		if !x.Quantized() && !slices.Equal(x.W.Shape(), want) {
			return nil, fmt.Errorf("gemma4: %w: %s has shape %v, want %v", model.ErrBadConfig, s.Name, x.W.Shape(), want)
		}
		if x.Quantized() && len(s.Shape) != 2 {
			return nil, fmt.Errorf("gemma4: %w: quantized %s", model.ErrUnsupportedType, s.Name)
		}
	}
	m := &Model{cfg: cfg, g: *cfg.Gemma4}
	get := func(name string) *model.Weight { return w.Get(name) }
	m.embed, m.norm = get("model.embed_tokens.weight"), get("model.norm.weight")
	m.lmHead = m.embed
	if !cfg.TiedEmbedding {
		m.lmHead = get("lm_head.weight")
	}
	if m.g.PerLayerInput > 0 {
		m.perLayerEmbed = get("model.embed_tokens_per_layer.weight")
		m.perLayerProj = get("model.per_layer_model_projection.weight")
		m.perLayerNorm = get("model.per_layer_projection_norm.weight")
	}
	m.layers = make([]layer, cfg.Layers)
	for i := range m.layers {
		p := fmt.Sprintf("model.layers.%d.", i)
		at := func(name string) *model.Weight { return get(p + name) }
		l := &m.layers[i]
		l.inNorm, l.postAttnNorm = at("input_layernorm.weight"), at("post_attention_layernorm.weight")
		l.preFFNorm, l.postFFNorm = at("pre_feedforward_layernorm.weight"), at("post_feedforward_layernorm.weight")
		l.scalar = at("layer_scalar")
		l.q, l.qNorm, l.o = at("self_attn.q_proj.weight"), at("self_attn.q_norm.weight"), at("self_attn.o_proj.weight")
		l.kind = cfg.Kinds[i]
		if l.kind.SharedFrom >= i || (l.kind.SharedFrom >= 0 && cfg.Kinds[l.kind.SharedFrom].SharedFrom >= 0) {
			return nil, fmt.Errorf("gemma4: %w: layer %d shares the KV of layer %d", model.ErrBadConfig, i, l.kind.SharedFrom)
		}
		if l.kind.SharedFrom < 0 {
			l.k, l.kNorm = at("self_attn.k_proj.weight"), at("self_attn.k_norm.weight")
			if !m.g.KEqV || l.kind.Window > 0 {
				l.v = at("self_attn.v_proj.weight")
			}
		}
		l.gate, l.up, l.down = at("mlp.gate_proj.weight"), at("mlp.up_proj.weight"), at("mlp.down_proj.weight")
		if m.g.Experts > 0 {
			l.router, l.routerScale, l.expertScale = at("router.proj.weight"), at("router.scale"), at("router.per_expert_scale")
			l.gateUp, l.expertDown = at("experts.gate_up_proj"), at("experts.down_proj")
			l.preFF2Norm = at("pre_feedforward_layernorm_2.weight")
			l.postFF1Norm, l.postFF2Norm = at("post_feedforward_layernorm_1.weight"), at("post_feedforward_layernorm_2.weight")
		}
		if m.g.PerLayerInput > 0 {
			l.inGate, l.inProj = at("per_layer_input_gate.weight"), at("per_layer_projection.weight")
			l.inNorm2 = at("post_per_layer_input_norm.weight")
		}
		l.rope = cfg.LocalRoPE
		if l.kind.Window == 0 {
			l.rope = m.g.GlobalRoPE
		}
		if l.rope.Dims <= 0 || l.rope.Dims > l.kind.HeadDim || (l.rope.Freqs != nil && len(l.rope.Freqs) != l.rope.Dims/2) {
			return nil, fmt.Errorf("gemma4: %w: layer %d rope %d dims (%d periods) for head %d", model.ErrBadConfig, i, l.rope.Dims, len(l.rope.Freqs), l.kind.HeadDim)
		}
	}
	return m, nil
}

// Config is the architecture the model was built with.
func (m *Model) Config() model.Config { return m.cfg }

// Close releases arrays the Model created: none; the weights belong to the
// caller.
func (m *Model) Close() {}

// scalar is v as a scalar of dtype dt, so that scaling keeps x's dtype.
func scalar(f *mlx.Frame, v float64, dt mlx.Dtype) mlx.Array {
	return f.AsType(f.Scalar(float32(v)), dt)
}

// Forward runs one step of b through the network and returns the float32
// logits at b's logit rows, [rows, vocab].
func (m *Model) Forward(f *mlx.Frame, b *kvpool.Batch) mlx.Array {
	c := m.cfg
	if err := b.CheckTokens(c.Vocab); err != nil {
		f.Fail(fmt.Errorf("gemma4: %w", err))
		return mlx.Array{}
	}
	act, N := c.ActDType, b.N()
	ids := m.lookupIDs(f, b)
	x := f.AsType(m.embed.Embed(f, ids), act) // [1, N, hidden]
	x = f.Multiply(x, scalar(f, math.Sqrt(float64(c.Hidden)), act))
	// Soft tokens (an image's) replace the scaled embeddings of their
	// placeholders unscaled, before the per-layer inputs project the
	// embeddings, as HF transformers computes them.
	x = b.Overlay(x)
	perLayer := m.perLayerInputs(f, ids, x)

	for li := range m.layers {
		l := &m.layers[li]
		h := f.RMSNorm(x, l.inNorm.W, c.NormEps)
		a := m.attention(f, l, li, h, b)
		x = f.Add(x, f.RMSNorm(a, l.postAttnNorm.W, c.NormEps))

		ff := m.mlp(f, l.gate, l.up, l.down, f.RMSNorm(x, l.preFFNorm.W, c.NormEps))
		if l.router != nil {
			ff = f.Add(f.RMSNorm(ff, l.postFF1Norm.W, c.NormEps), f.RMSNorm(m.experts(f, l, x), l.postFF2Norm.W, c.NormEps))
		}
		x = f.Add(x, f.RMSNorm(ff, l.postFFNorm.W, c.NormEps))

		if l.inGate != nil {
			p := m.g.PerLayerInput
			in := f.Reshape(f.Slice(perLayer, []int{0, 0, li, 0}, []int{1, N, li + 1, p}), 1, N, p)
			g := f.Multiply(gelu(f, l.inGate.Linear(f, x)), in)
			x = f.Add(x, f.RMSNorm(l.inProj.Linear(f, g), l.inNorm2.W, c.NormEps))
		}
		x = f.Multiply(x, l.scalar.W)
		f.DispatchLayer(li, x)
	}
	x = f.Take(x, b.SampleIndex(), 1)
	x = f.RMSNorm(x, m.norm.W, c.NormEps)
	logits := f.AsType(f.Reshape(m.lmHead.Linear(f, x), len(b.LogitRows()), c.Vocab), mlx.Float32)
	if sc := c.FinalLogitSoftcap; sc > 0 {
		logits = f.Multiply(f.Tanh(f.Divide(logits, f.Scalar(sc))), f.Scalar(sc))
	}
	return logits
}

// lookupIDs is the step's token ids for the embedding tables, [1, N]: a
// multimodal placeholder is looked up as the pad token.
func (m *Model) lookupIDs(f *mlx.Frame, b *kvpool.Batch) mlx.Array {
	media := m.g.MediaTokens
	if !slices.ContainsFunc(b.Tokens, func(id int32) bool { return slices.Contains(media, id) }) {
		return b.TokenIDs()
	}
	ids := slices.Clone(b.Tokens)
	for i, id := range ids {
		if slices.Contains(media, id) {
			ids[i] = m.g.PadToken
		}
	}
	return f.Int32s(ids, 1, len(ids))
}

// perLayerInputs is every token's input to every layer, [1, N, layers,
// width]: its row of the per-layer embedding (scaled by sqrt(width)) plus
// the RMS-normalized projection of its scaled embedding x (scaled by
// 1/sqrt(hidden)), the sum scaled by 1/sqrt(2). ids is [1, N], x
// [1, N, hidden]. Invalid without per-layer inputs.
func (m *Model) perLayerInputs(f *mlx.Frame, ids, x mlx.Array) mlx.Array {
	p := m.g.PerLayerInput
	if p == 0 {
		return mlx.Array{}
	}
	c, act := m.cfg, m.cfg.ActDType
	N := ids.Dim(1)
	tok := f.AsType(m.perLayerEmbed.Embed(f, ids), act)
	tok = f.Reshape(f.Multiply(tok, scalar(f, math.Sqrt(float64(p)), act)), 1, N, c.Layers, p)
	proj := f.Multiply(m.perLayerProj.Linear(f, x), scalar(f, 1/math.Sqrt(float64(c.Hidden)), act))
	proj = f.RMSNorm(f.Reshape(proj, 1, N, c.Layers, p), m.perLayerNorm.W, c.NormEps)
	return f.Multiply(f.Add(proj, tok), scalar(f, 1/math.Sqrt2, act))
}

// attention of the step's N tokens; h is [1, N, hidden]. A layer that
// shares another's KV computes queries only: b.Attend reads the keys and
// values its source layer stored in this step and before, and applies the
// layer's window.
func (m *Model) attention(f *mlx.Frame, l *layer, li int, h mlx.Array, b *kvpool.Batch) mlx.Array {
	c := m.cfg
	N := b.N()
	heads, kvHeads, hd := c.Heads, l.kind.KVHeads, l.kind.HeadDim
	// split lays a projection out as [N, n, 1, headDim]: one RoPE row per
	// token, each at its own position.
	split := func(x mlx.Array, n int) mlx.Array { return f.Reshape(x, N, n, 1, hd) }
	flat := func(x mlx.Array, n int) mlx.Array { return f.Reshape(x, N, n, hd) }
	r := l.rope
	var freqs mlx.Array
	if r.Freqs != nil {
		freqs = f.Float32s(r.Freqs, len(r.Freqs))
	}
	pos := b.PositionIDs()
	rope := func(x mlx.Array) mlx.Array {
		return f.RoPEOffsets(x, r.Dims, r.Traditional, r.Base, r.Scale, pos, freqs)
	}
	q := flat(rope(f.RMSNorm(split(l.q.Linear(f, h), heads), l.qNorm.W, c.NormEps)), heads)
	var k, v mlx.Array
	if l.k != nil {
		raw := split(l.k.Linear(f, h), kvHeads)
		k = flat(rope(f.RMSNorm(raw, l.kNorm.W, c.NormEps)), kvHeads)
		if l.v != nil {
			raw = split(l.v.Linear(f, h), kvHeads)
		}
		v = flat(f.RMSNorm(raw, mlx.Array{}, c.NormEps), kvHeads)
	}
	// Queries and keys arrive RMS-normalized: Gemma 4 scales their
	// products by 1, whatever the head size. An image's placeholders see
	// each other only in sliding layers, and only with VisionBidirectional.
	var o mlx.Array
	if m.g.VisionBidirectional && l.kind.Window > 0 {
		o = b.Attend(li, q, k, v, 1, mlx.Array{})
	} else {
		o = b.AttendCausal(li, q, k, v, 1, mlx.Array{})
	}
	return l.o.Linear(f, f.Reshape(o, 1, N, heads*hd))
}

// mlp is down(gelu(gate(x)) * up(x)).
func (m *Model) mlp(f *mlx.Frame, gate, up, down *model.Weight, x mlx.Array) mlx.Array {
	return down.Linear(f, f.Multiply(gelu(f, gate.Linear(f, x)), up.Linear(f, x)))
}

// GELU tanh-approximation constants.
const (
	geluCoefA     = 0.044715
	geluSqrt2OnPi = 0.79788456080286535587989211986876
)

// gelu is 0.5*x*(1+tanh(sqrt(2/pi)*(x+0.044715*x^3))) in x's dtype.
func gelu(f *mlx.Frame, x mlx.Array) mlx.Array {
	dt := x.Dtype()
	k := func(v float64) mlx.Array { return scalar(f, v, dt) }
	cube := f.Multiply(f.Multiply(x, x), x)
	inner := f.Multiply(k(geluSqrt2OnPi), f.Add(x, f.Multiply(k(geluCoefA), cube)))
	return f.Multiply(f.Multiply(k(0.5), x), f.Add(k(1), f.Tanh(inner)))
}

// ReadsEmbeds marks Forward as applying kvpool.Row.Embeds.
func (m *Model) ReadsEmbeds() {}

var (
	_ model.Network     = (*Model)(nil)
	_ model.EmbedReader = (*Model)(nil)
)
