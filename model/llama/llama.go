package llama

import (
	"fmt"
	"math"

	"github.com/goprovider/provider/mlx"
	"github.com/goprovider/provider/model"
)

// cacheStep is the KV growth granule in tokens: buffers grow by whole steps
// so most appends write in place.
const cacheStep = 256

type layer struct {
	attnNorm, mlpNorm *model.Weight
	q, k, v, o        *model.Weight
	gate, up, down    *model.Weight
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
		for _, b := range []struct {
			dst  **model.Weight
			name string
		}{
			{&l.attnNorm, "input_layernorm.weight"}, {&l.mlpNorm, "post_attention_layernorm.weight"},
			{&l.q, "self_attn.q_proj.weight"}, {&l.k, "self_attn.k_proj.weight"},
			{&l.v, "self_attn.v_proj.weight"}, {&l.o, "self_attn.o_proj.weight"},
			{&l.gate, "mlp.gate_proj.weight"}, {&l.up, "mlp.up_proj.weight"}, {&l.down, "mlp.down_proj.weight"},
		} {
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

// Cache is one sequence's keys and values for every layer.
type Cache struct {
	k, v []mlx.Array // [1, kvHeads, capacity, headDim]
	n    int         // tokens held
	cap  int
}

// NewCache returns an empty cache for one sequence.
func (m *Model) NewCache() model.Cache { return m.newCache() }

func (m *Model) newCache() *Cache {
	return &Cache{k: make([]mlx.Array, m.cfg.Layers), v: make([]mlx.Array, m.cfg.Layers)}
}

// Len is the number of tokens the cache holds.
func (c *Cache) Len() int { return c.n }

// Bytes is the device memory the cache's buffers occupy.
func (c *Cache) Bytes() int64 {
	var n int64
	for i := range c.k {
		if c.k[i].Valid() {
			n += int64(c.k[i].Nbytes() + c.v[i].Nbytes())
		}
	}
	return n
}

// Free releases the cache's arrays.
func (c *Cache) Free() {
	for i := range c.k {
		c.k[i].Free()
		c.v[i].Free()
	}
	c.n, c.cap = 0, 0
}

// Forward appends tokens[i] to caches[i] for every row and returns the
// logits of each row's last new position, [rows, vocab] in float32. Every
// row needs at least one token. The returned array belongs to f.
func (m *Model) Forward(f *mlx.Frame, tokens [][]int32, generic []model.Cache) mlx.Array {
	return model.ForwardCaches(f, "llama", m.cfg.Vocab, tokens, generic, nil,
		func(t [][]int32, c []*Cache) mlx.Array { return m.forward(f, t, c) })
}

// forward runs rows that all add the same number of tokens T.
func (m *Model) forward(f *mlx.Frame, tokens [][]int32, caches []*Cache) mlx.Array {
	c := m.cfg
	B, T := len(tokens), len(tokens[0])
	flat := make([]int32, 0, B*T)
	offsets := make([]int32, B)
	for i, t := range tokens {
		flat = append(flat, t...)
		offsets[i] = int32(caches[i].n)
		for _, id := range t {
			if id < 0 || int(id) >= c.Vocab {
				f.Fail(fmt.Errorf("llama: token id %d outside vocabulary of %d", id, c.Vocab))
				return mlx.Array{}
			}
		}
	}
	for _, cc := range caches {
		m.reserve(f, cc, T)
	}
	ids := f.Int32s(flat, B, T)
	var offs mlx.Array
	if B > 1 {
		offs = f.Int32s(offsets, B)
	}
	x := f.AsType(m.embed.Embed(f, ids), c.ActDType)
	for li := range m.layers {
		l := &m.layers[li]
		h := m.rmsNorm(f, x, l.attnNorm)
		x = f.Add(x, m.attention(f, l, li, h, caches, offsets, offs))
		if c.ReferenceNumerics && T > 1 && li == len(m.layers)-1 {
			// llama.cpp drops the rows it does not output before the last
			// feed-forward, whose F32 matmuls then sum in single-row order.
			x = f.Slice(x, []int{0, T - 1, 0}, []int{B, T, c.Hidden})
		}
		h = m.rmsNorm(f, x, l.mlpNorm)
		g := l.gate.Linear(f, h)
		u := l.up.Linear(f, h)
		var act mlx.Array
		if c.ReferenceNumerics {
			act = f.RefSwiGLU(g, u)
		} else {
			act = f.Multiply(f.SiLU(g), u)
		}
		x = f.Add(x, l.down.Linear(f, act))
	}
	for _, cc := range caches {
		cc.n += T
	}
	if T > 1 && !c.ReferenceNumerics {
		x = f.Slice(x, []int{0, T - 1, 0}, []int{B, T, c.Hidden})
	}
	x = m.rmsNorm(f, x, m.norm)
	logits := m.lmHead.Linear(f, x)
	return f.AsType(f.Reshape(logits, B, c.Vocab), mlx.Float32)
}

// attention for rows adding T tokens each; h is [B, T, hidden].
func (m *Model) attention(f *mlx.Frame, l *layer, li int, h mlx.Array, caches []*Cache, offsets []int32, offs mlx.Array) mlx.Array {
	c := m.cfg
	B, T := len(caches), h.Dim(1)
	heads := func(w *model.Weight, n int) mlx.Array {
		return f.Transpose(f.Reshape(w.Linear(f, h), B, T, n, c.HeadDim), 0, 2, 1, 3)
	}
	q, k, v := heads(l.q, c.Heads), heads(l.k, c.KVHeads), heads(l.v, c.KVHeads)
	r := c.RoPE
	ref := c.ReferenceNumerics
	switch {
	case ref && r.Freqs == nil:
		pos := offs
		if B == 1 {
			pos = f.Int32s(offsets, 1)
		}
		q = f.RefRoPE(q, r.Dims, r.Traditional, r.Base, r.Scale, pos)
		k = f.RefRoPE(k, r.Dims, r.Traditional, r.Base, r.Scale, pos)
	case B == 1:
		q = f.RoPE(q, r.Dims, r.Traditional, r.Base, r.Scale, int(offsets[0]), m.freqs)
		k = f.RoPE(k, r.Dims, r.Traditional, r.Base, r.Scale, int(offsets[0]), m.freqs)
	default:
		q = f.RoPEOffsets(q, r.Dims, r.Traditional, r.Base, r.Scale, offs, m.freqs)
		k = f.RoPEOffsets(k, r.Dims, r.Traditional, r.Base, r.Scale, offs, m.freqs)
	}
	mask := ""
	if T > 1 {
		mask = "causal"
	}
	rows := make([]mlx.Array, B)
	for i, cc := range caches {
		qi, ki, vi := q, k, v
		if B > 1 {
			qi = f.Slice(q, []int{i, 0, 0, 0}, []int{i + 1, c.Heads, T, c.HeadDim})
			ki = f.Slice(k, []int{i, 0, 0, 0}, []int{i + 1, c.KVHeads, T, c.HeadDim})
			vi = f.Slice(v, []int{i, 0, 0, 0}, []int{i + 1, c.KVHeads, T, c.HeadDim})
		}
		keys, values := cc.append(f, li, ki, vi, T)
		if ref {
			// llama.cpp sums differently once a batch holds two tokens.
			rows[i] = f.RefAttention(qi, keys, values, m.refScale, B*T >= 2)
		} else {
			rows[i] = f.Attention(qi, keys, values, m.scale, mask, mlx.Array{}, mlx.Array{})
		}
	}
	o := rows[0]
	if B > 1 {
		o = f.Concatenate(0, rows...)
	}
	o = f.Reshape(f.Transpose(o, 0, 2, 1, 3), B, T, c.Heads*c.HeadDim)
	return l.o.Linear(f, o)
}

// rmsNorm normalizes the last axis of x and scales it by w.
func (m *Model) rmsNorm(f *mlx.Frame, x mlx.Array, w *model.Weight) mlx.Array {
	if m.cfg.ReferenceNumerics {
		return f.RefRMSNorm(x, w.W, m.cfg.NormEps)
	}
	return f.RMSNorm(x, w.W, m.cfg.NormEps)
}

// reserve grows every layer buffer so that T more tokens fit.
func (m *Model) reserve(f *mlx.Frame, cc *Cache, T int) {
	if f.Err() != nil {
		return
	}
	need := cc.n + T
	if need <= cc.cap {
		return
	}
	c := m.cfg
	newCap := (need + cacheStep - 1) / cacheStep * cacheStep
	for li := range cc.k {
		kv := c.Kinds[li]
		for _, buf := range []*mlx.Array{&cc.k[li], &cc.v[li]} {
			grown := f.Zeros(c.ActDType, 1, kv.KVHeads, newCap, kv.HeadDim)
			if buf.Valid() && cc.n > 0 {
				old := f.Slice(*buf, []int{0, 0, 0, 0}, []int{1, kv.KVHeads, cc.n, kv.HeadDim})
				grown = f.SliceUpdate(grown, old, []int{0, 0, 0, 0}, []int{1, kv.KVHeads, cc.n, kv.HeadDim})
			}
			kept := f.Keep(grown)
			buf.Free()
			*buf = kept
		}
	}
	cc.cap = newCap
}

// append writes T new keys and values at the cache's end and returns views
// of everything held so far.
func (cc *Cache) append(f *mlx.Frame, li int, k, v mlx.Array, T int) (mlx.Array, mlx.Array) {
	if f.Err() != nil {
		return mlx.Array{}, mlx.Array{}
	}
	kvh, hd := k.Dim(1), k.Dim(3)
	start := []int{0, 0, cc.n, 0}
	stop := []int{1, kvh, cc.n + T, hd}
	views := [2]mlx.Array{}
	for j, p := range []struct {
		buf *mlx.Array
		val mlx.Array
	}{{&cc.k[li], k}, {&cc.v[li], v}} {
		updated := f.SliceUpdate(*p.buf, f.AsType(p.val, p.buf.Dtype()), start, stop)
		kept := f.Keep(updated)
		p.buf.Free()
		*p.buf = kept
		views[j] = f.Slice(kept, []int{0, 0, 0, 0}, stop)
	}
	return views[0], views[1]
}

var _ model.Network = (*Model)(nil)
