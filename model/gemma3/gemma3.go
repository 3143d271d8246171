package gemma3

import (
	"fmt"
	"math"

	"github.com/goprovider/provider/kvpool"
	"github.com/goprovider/provider/mlx"
	"github.com/goprovider/provider/model"
)

type layer struct {
	inNorm, postAttnNorm  *model.Weight
	preFFNorm, postFFNorm *model.Weight
	qNorm, kNorm          *model.Weight
	q, k, v, o            *model.Weight
	gate, up, down        *model.Weight
	rope                  model.RoPE
}

// Model is a Gemma 3 text network bound to device weights.
type Model struct {
	cfg        model.Config
	embed      *model.Weight
	norm       *model.Weight
	lmHead     *model.Weight
	layers     []layer
	attnScale  float32
	embedScale float32
	geluTable  bool
}

// New binds the forward pass to uploaded weights. Norm weights are the
// multipliers themselves (the loaders store Gemma's 1+w).
func New(cfg model.Config, w *model.Weights) (*Model, error) {
	if cfg.Arch != "gemma3" {
		return nil, fmt.Errorf("gemma3: %w: %q", model.ErrUnsupportedArch, cfg.Arch)
	}
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("gemma3: %w", err)
	}
	get := func(name string) (*model.Weight, error) {
		x := w.Get(name)
		if x == nil {
			return nil, fmt.Errorf("gemma3: %w: %s", model.ErrMissingTensor, name)
		}
		return x, nil
	}
	m := &Model{
		cfg:        cfg,
		attnScale:  cfg.AttnScale,
		embedScale: float32(math.Sqrt(float64(cfg.Hidden))),
		geluTable:  cfg.ReferenceNumerics,
	}
	if m.attnScale == 0 {
		m.attnScale = float32(1 / math.Sqrt(float64(cfg.HeadDim)))
	}
	var err error
	if m.embed, err = get("model.embed_tokens.weight"); err != nil {
		return nil, err
	}
	if m.norm, err = get("model.norm.weight"); err != nil {
		return nil, err
	}
	m.lmHead = m.embed
	if !cfg.TiedEmbedding {
		if m.lmHead, err = get("lm_head.weight"); err != nil {
			return nil, err
		}
	}
	m.layers = make([]layer, cfg.Layers)
	for i := range m.layers {
		p := fmt.Sprintf("model.layers.%d.", i)
		l := &m.layers[i]
		for _, b := range []struct {
			dst  **model.Weight
			name string
		}{
			{&l.inNorm, "input_layernorm.weight"}, {&l.postAttnNorm, "post_attention_layernorm.weight"},
			{&l.preFFNorm, "pre_feedforward_layernorm.weight"}, {&l.postFFNorm, "post_feedforward_layernorm.weight"},
			{&l.qNorm, "self_attn.q_norm.weight"}, {&l.kNorm, "self_attn.k_norm.weight"},
			{&l.q, "self_attn.q_proj.weight"}, {&l.k, "self_attn.k_proj.weight"},
			{&l.v, "self_attn.v_proj.weight"}, {&l.o, "self_attn.o_proj.weight"},
			{&l.gate, "mlp.gate_proj.weight"}, {&l.up, "mlp.up_proj.weight"}, {&l.down, "mlp.down_proj.weight"},
		} {
			if *b.dst, err = get(p + b.name); err != nil {
				return nil, err
			}
		}
		kind := cfg.Kinds[i]
		if kind.SharedFrom >= 0 || kind.KVHeads != cfg.KVHeads || kind.HeadDim != cfg.HeadDim || kind.Window < 0 {
			return nil, fmt.Errorf("gemma3: %w: layer %d kind %+v", model.ErrBadConfig, i, kind)
		}
		l.rope = cfg.RoPE
		if kind.Window > 0 && cfg.LocalRoPE.Dims > 0 {
			l.rope = cfg.LocalRoPE
		}
		if l.rope.Freqs != nil {
			return nil, fmt.Errorf("gemma3: %w: explicit RoPE frequencies", model.ErrUnsupportedArch)
		}
	}
	return m, nil
}

// Config is the architecture the model was built with.
func (m *Model) Config() model.Config { return m.cfg }

// Close releases arrays the Model created: none; the weights belong to the
// caller.
func (m *Model) Close() {}

// TakesLazyTokens: Forward reads token ids only through b.TokenIDs
// (model.LazyTokens).
func (m *Model) TakesLazyTokens() {}

// Forward runs one step of b through the network and returns the float32
// logits at b's logit rows, [rows, vocab].
func (m *Model) Forward(f *mlx.Frame, b *kvpool.Batch) mlx.Array {
	c := m.cfg
	if err := b.CheckTokens(c.Vocab); err != nil {
		f.Fail(fmt.Errorf("gemma3: %w", err))
		return mlx.Array{}
	}
	act := c.ActDType
	x := f.AsType(m.embed.Embed(f, b.TokenIDs()), act) // [1, N, hidden]
	x = f.Multiply(x, f.AsType(f.Scalar(m.embedScale), act))
	// Soft tokens (an image's) replace the scaled embeddings of their
	// placeholders unscaled, as HF transformers writes them.
	x = b.Overlay(x)
	for li := range m.layers {
		l := &m.layers[li]
		h := f.RMSNorm(x, l.inNorm.W, c.NormEps)
		a := m.attention(f, l, li, h, b)
		x = f.Add(x, f.RMSNorm(a, l.postAttnNorm.W, c.NormEps))
		h = f.RMSNorm(x, l.preFFNorm.W, c.NormEps)
		g := m.gelu(f, l.gate.Linear(f, h))
		mlp := l.down.Linear(f, f.Multiply(g, l.up.Linear(f, h)))
		x = f.Add(x, f.RMSNorm(mlp, l.postFFNorm.W, c.NormEps))
		f.DispatchLayer(li, x)
	}
	x = f.Take(x, b.SampleIndex(), 1)
	x = f.RMSNorm(x, m.norm.W, c.NormEps)
	logits := f.AsType(f.Reshape(m.lmHead.Linear(f, x), len(b.LogitRows()), c.Vocab), mlx.Float32)
	if sc := c.FinalLogitSoftcap; sc > 0 {
		logits = f.Multiply(f.Tanh(f.Multiply(logits, f.Scalar(1/sc))), f.Scalar(sc))
	}
	return logits
}

// attention of the step's N tokens; h is [1, N, hidden]. b.Attend applies
// the layer's window.
func (m *Model) attention(f *mlx.Frame, l *layer, li int, h mlx.Array, b *kvpool.Batch) mlx.Array {
	c := m.cfg
	N := b.N()
	// heads projects h, normalizes each head when norm is set, and lays it
	// out as [N, n, 1, headDim]: one RoPE row per token, each at its own
	// position.
	heads := func(w *model.Weight, n int, norm *model.Weight) mlx.Array {
		x := f.Reshape(w.Linear(f, h), N, n, 1, c.HeadDim)
		if norm != nil {
			x = f.RMSNorm(x, norm.W, c.NormEps)
		}
		return x
	}
	q, k, v := heads(l.q, c.Heads, l.qNorm), heads(l.k, c.KVHeads, l.kNorm), heads(l.v, c.KVHeads, nil)
	r := l.rope
	pos := b.PositionIDs()
	q = f.RoPEOffsets(q, r.Dims, r.Traditional, r.Base, r.Scale, pos, mlx.Array{})
	k = f.RoPEOffsets(k, r.Dims, r.Traditional, r.Base, r.Scale, pos, mlx.Array{})
	flat := func(a mlx.Array, n int) mlx.Array { return f.Reshape(a, N, n, c.HeadDim) }
	q, k, v = flat(q, c.Heads), flat(k, c.KVHeads), flat(v, c.KVHeads)
	o := b.Attend(li, q, k, v, m.attnScale, mlx.Array{})
	return l.o.Linear(f, f.Reshape(o, 1, N, c.Heads*c.HeadDim))
}

// GELU tanh-approximation constants, as float32 (llama.cpp's and PyTorch's
// values).
const (
	geluCoefA     = 0.044715
	geluSqrt2OnPi = 0.79788456080286535587989211986876
)

// gelu is 0.5*x*(1+tanh(sqrt(2/pi)*(x+0.044715*x^3))) in x's dtype; with
// the table emulation it reproduces llama.cpp's CPU GELU (see the package
// comment).
func (m *Model) gelu(f *mlx.Frame, x mlx.Array) mlx.Array {
	dt := x.Dtype()
	k := func(v float32) mlx.Array { return f.AsType(f.Scalar(v), dt) }
	formula := func(x mlx.Array) mlx.Array {
		inner := f.Multiply(f.Multiply(k(geluSqrt2OnPi), x), f.Add(k(1), f.Multiply(k(geluCoefA), f.Multiply(x, x))))
		return f.Multiply(f.Multiply(k(0.5), x), f.Add(k(1), f.Tanh(inner)))
	}
	if !m.geluTable {
		return formula(x)
	}
	half := func(a mlx.Array) mlx.Array { return f.AsType(f.AsType(a, mlx.Float16), dt) }
	g := half(formula(half(x)))
	g = f.Where(f.Less(x, k(10)), g, x)
	return f.Where(f.Greater(x, k(-10)), g, k(0))
}

// ReadsEmbeds marks Forward as applying kvpool.Row.Embeds.
func (m *Model) ReadsEmbeds() {}

var _ model.EmbedReader = (*Model)(nil)
