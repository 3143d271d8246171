package llama

import (
	"fmt"
	"math"
	"slices"

	"github.com/goprovider/provider/kvpool"
	"github.com/goprovider/provider/mlx"
	"github.com/goprovider/provider/model"
)

type layer struct {
	attnNorm, mlpNorm *model.Weight
	q, k, v, o        *model.Weight
	gate, up, down    *model.Weight
	// qkv and gateUp, where the upload fused them (model.FuseProjections),
	// stand for q, k and v and for gate and up, which are then nil.
	qkv, gateUp *model.Weight
}

// Model is a llama network bound to device weights.
type Model struct {
	cfg    model.Config
	embed  *model.Weight
	norm   *model.Weight
	lmHead *model.Weight
	layers []layer
	freqs  mlx.Array
	scale  float32
	// refScale is llama.cpp's 1.0f/sqrtf(headDim), in float32 arithmetic.
	refScale float32
}

// New binds the forward pass to uploaded weights.
func New(cfg model.Config, w *model.Weights) (*Model, error) {
	if cfg.Arch != "llama" {
		return nil, fmt.Errorf("llama: %w: %q", model.ErrUnsupportedArch, cfg.Arch)
	}
	get := func(name string) (*model.Weight, error) {
		x := w.Get(name)
		if x == nil {
			return nil, fmt.Errorf("llama: %w: %s", model.ErrMissingTensor, name)
		}
		return x, nil
	}
	m := &Model{cfg: cfg, scale: float32(1 / math.Sqrt(float64(cfg.HeadDim)))}
	one := float32(1)
	m.refScale = one / float32(math.Sqrt(float64(cfg.HeadDim)))
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
		type bind struct {
			dst  **model.Weight
			name string
		}
		need := []bind{
			{&l.attnNorm, "input_layernorm.weight"}, {&l.mlpNorm, "post_attention_layernorm.weight"},
			{&l.o, "self_attn.o_proj.weight"}, {&l.down, "mlp.down_proj.weight"},
		}
		if l.qkv = w.Get(p + "self_attn.qkv_proj.weight"); l.qkv == nil {
			need = append(need, []bind{{&l.q, "self_attn.q_proj.weight"}, {&l.k, "self_attn.k_proj.weight"}, {&l.v, "self_attn.v_proj.weight"}}...)
		} else if q, kv := cfg.Heads*cfg.HeadDim, cfg.KVHeads*cfg.HeadDim; !slices.Equal(l.qkv.Parts, []int{q, kv, kv}) {
			return nil, fmt.Errorf("llama: layer %d: fused q/k/v weight of parts %v, want [%d %d %d]", i, l.qkv.Parts, q, kv, kv)
		}
		if l.gateUp = w.Get(p + "mlp.gate_up_proj.weight"); l.gateUp == nil {
			need = append(need, []bind{{&l.gate, "mlp.gate_proj.weight"}, {&l.up, "mlp.up_proj.weight"}}...)
		} else if len(l.gateUp.Parts) != 2 || l.gateUp.Parts[0] != l.gateUp.Parts[1] {
			return nil, fmt.Errorf("llama: layer %d: fused gate/up weight of parts %v, want two equal", i, l.gateUp.Parts)
		}
		for _, b := range need {
			if *b.dst, err = get(p + b.name); err != nil {
				return nil, err
			}
		}
	}
	if cfg.RoPE.Freqs != nil {
		if m.freqs, err = mlx.FromFloat32s(cfg.RoPE.Freqs, len(cfg.RoPE.Freqs)); err != nil {
			return nil, err
		}
	}
	return m, nil
}

// Config is the architecture the model was built with.
func (m *Model) Config() model.Config { return m.cfg }

// Close releases arrays the Model created (not the weights).
func (m *Model) Close() { m.freqs.Free() }

// TakesLazyTokens: Forward reads token ids only through b.TokenIDs
// (model.LazyTokens).
func (m *Model) TakesLazyTokens() {}

// Forward runs one step of b through the network and returns the float32
// logits at b's logit rows, [rows, vocab].
func (m *Model) Forward(f *mlx.Frame, b *kvpool.Batch) mlx.Array {
	c := m.cfg
	if err := b.CheckTokens(c.Vocab); err != nil {
		f.Fail(fmt.Errorf("llama: %w", err))
		return mlx.Array{}
	}
	x := f.AsType(m.embed.Embed(f, b.TokenIDs()), c.ActDType) // [1, N, hidden]
	for li := range m.layers {
		l := &m.layers[li]
		x = m.attention(f, l, li, x, b)
		if c.ReferenceNumerics && li == len(m.layers)-1 {
			// llama.cpp drops the rows it does not output before the last
			// feed-forward, whose F32 matmuls then sum in single-row order.
			x = f.Take(x, b.SampleIndex(), 1)
		}
		x = l.down.LinearAdd(f, m.swiGLU(f, l, x), x)
		f.DispatchLayer(li, x)
	}
	if !c.ReferenceNumerics {
		x = f.Take(x, b.SampleIndex(), 1)
	}
	x = m.rmsNorm(f, x, m.norm)
	logits := m.lmHead.Linear(f, x)
	return f.AsType(f.Reshape(logits, len(b.LogitRows()), c.Vocab), mlx.Float32)
}

// swiGLU is the layer's gated activation of x normalized, before the
// down projection.
func (m *Model) swiGLU(f *mlx.Frame, l *layer, x mlx.Array) mlx.Array {
	if l.gateUp != nil && !m.cfg.ReferenceNumerics {
		// The norm goes into the projection's kernel where it can.
		return l.gateUp.LinearSwiGLU(f, x, l.mlpNorm.W, m.cfg.NormEps)
	}
	h := m.rmsNorm(f, x, l.mlpNorm)
	var g, u mlx.Array
	if l.gateUp != nil {
		gu := l.gateUp.LinearParts(f, h)
		g, u = gu[0], gu[1]
	} else {
		g, u = l.gate.Linear(f, h), l.up.Linear(f, h)
	}
	if m.cfg.ReferenceNumerics {
		return f.RefSwiGLU(g, u)
	}
	return f.SwiGLU(g, u)
}

// attention of the step's N tokens, added to the residual x [1, N,
// hidden].
func (m *Model) attention(f *mlx.Frame, l *layer, li int, x mlx.Array, b *kvpool.Batch) mlx.Array {
	c := m.cfg
	N := b.N()
	// A projection's n heads are laid out as [N, n, 1, headDim] for rope
	// (one RoPE row per token, each at its own position), and flat makes
	// them [N, n, headDim] for the pool.
	r := c.RoPE
	pos := b.PositionIDs()
	ref := c.ReferenceNumerics && r.Freqs == nil
	rope := func(a mlx.Array) mlx.Array {
		if ref {
			return f.RefRoPE(a, r.Dims, r.Traditional, r.Base, r.Scale, pos)
		}
		return f.RoPEOffsets(a, r.Dims, r.Traditional, r.Base, r.Scale, pos, m.freqs)
	}
	flat := func(a mlx.Array, n int) mlx.Array { return f.Reshape(a, N, n, c.HeadDim) }
	var q, k, v mlx.Array
	switch {
	case l.qkv != nil && !ref:
		// One product, laid out as heads (q's, then k's, then v's), split
		// and rotated in one step (one kernel on CUDA, which may take the
		// norm too, and write k and v into the pool; reference numerics
		// keep the norm apart).
		in, norm, kv := x, l.attnNorm.W, mlx.KVStore{}
		if c.ReferenceNumerics {
			in, norm = m.rmsNorm(f, x, l.attnNorm), mlx.Array{}
		} else {
			kv = b.KernelStore(li)
		}
		var stored bool
		q, k, v, stored = l.qkv.LinearHeadsRoPE(f, in, norm, c.NormEps, c.Heads, c.KVHeads, c.HeadDim, r.Dims, r.Traditional, r.Base, r.Scale, pos, m.freqs, kv)
		if stored {
			b.Stored(li)
		}
	default:
		h := m.rmsNorm(f, x, l.attnNorm)
		var yq, yk, yv mlx.Array
		if l.qkv != nil {
			// Reference numerics over fused weights: the projection's
			// parts as views.
			p := l.qkv.LinearParts(f, h)
			yq, yk, yv = p[0], p[1], p[2]
		} else {
			yq, yk, yv = l.q.Linear(f, h), l.k.Linear(f, h), l.v.Linear(f, h)
		}
		heads := func(y mlx.Array, n int) mlx.Array { return f.Reshape(y, N, n, 1, c.HeadDim) }
		q, k = flat(rope(heads(yq, c.Heads)), c.Heads), flat(rope(heads(yk, c.KVHeads)), c.KVHeads)
		v = flat(heads(yv, c.KVHeads), c.KVHeads)
	}
	var o mlx.Array
	if c.ReferenceNumerics {
		// llama.cpp sums differently once a batch holds two tokens.
		o = b.AttendRows(li, q, k, v, func(q, k, v mlx.Array) mlx.Array {
			return f.RefAttention(q, k, v, m.refScale, N >= 2)
		})
	} else {
		o = b.Attend(li, q, k, v, m.scale, mlx.Array{})
	}
	return l.o.LinearAdd(f, f.Reshape(o, 1, N, c.Heads*c.HeadDim), x)
}

// rmsNorm normalizes the last axis of x and scales it by w.
func (m *Model) rmsNorm(f *mlx.Frame, x mlx.Array, w *model.Weight) mlx.Array {
	if m.cfg.ReferenceNumerics {
		return f.RefRMSNorm(x, w.W, m.cfg.NormEps)
	}
	return f.RMSNorm(x, w.W, m.cfg.NormEps)
}

var _ model.Network = (*Model)(nil)
