package gemma3

import (
	"fmt"
	"math"

	"github.com/goprovider/provider/mlx"
	"github.com/goprovider/provider/model"
)

// cacheStep is the KV growth granule in tokens: buffers grow by whole steps
// (a sliding layer's never past its window) so most appends write in place.
const cacheStep = 256

type layer struct {
	inNorm, postAttnNorm  *model.Weight
	preFFNorm, postFFNorm *model.Weight
	qNorm, kNorm          *model.Weight
	q, k, v, o            *model.Weight
	gate, up, down        *model.Weight
	window                int // 0: global attention
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
		l.window, l.rope = kind.Window, cfg.RoPE
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

// NewCache returns an empty cache for one sequence.
func (m *Model) NewCache() model.Cache { return m.newCache() }

func (m *Model) newCache() *Cache { return newCache(m.cfg.Kinds) }

// newCache returns an empty cache for layers of the given kinds.
func newCache(kinds []model.LayerKind) *Cache {
	c := &Cache{
		k:      make([]mlx.Array, len(kinds)),
		v:      make([]mlx.Array, len(kinds)),
		slots:  make([]int, len(kinds)),
		window: make([]int, len(kinds)),
	}
	for i, k := range kinds {
		c.window[i] = k.Window
	}
	return c
}

// Forward appends tokens[i] to caches[i] for every row and returns the
// logits of each row's last new position, [rows, vocab] in float32. Every
// row needs at least one token. The returned array belongs to f.
func (m *Model) Forward(f *mlx.Frame, tokens [][]int32, generic []model.Cache) mlx.Array {
	return model.ForwardCaches(f, "gemma3", m.cfg.Vocab, tokens, generic, func(c *Cache) bool { return len(c.k) == m.cfg.Layers },
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
				f.Fail(fmt.Errorf("gemma3: token id %d outside vocabulary of %d", id, c.Vocab))
				return mlx.Array{}
			}
		}
	}
	for _, cc := range caches {
		cc.reserve(f, c, T)
	}
	ids := f.Int32s(flat, B, T)
	var offs mlx.Array
	if B > 1 {
		offs = f.Int32s(offsets, B)
	}
	act := c.ActDType
	x := f.AsType(m.embed.Embed(f, ids), act)
	x = f.Multiply(x, f.AsType(f.Scalar(m.embedScale), act))
	for li := range m.layers {
		l := &m.layers[li]
		h := f.RMSNorm(x, l.inNorm.W, c.NormEps)
		a := m.attention(f, l, li, h, caches, offsets, offs)
		x = f.Add(x, f.RMSNorm(a, l.postAttnNorm.W, c.NormEps))
		h = f.RMSNorm(x, l.preFFNorm.W, c.NormEps)
		g := m.gelu(f, l.gate.Linear(f, h))
		mlp := l.down.Linear(f, f.Multiply(g, l.up.Linear(f, h)))
		x = f.Add(x, f.RMSNorm(mlp, l.postFFNorm.W, c.NormEps))
	}
	for _, cc := range caches {
		cc.n += T
	}
	if T > 1 {
		x = f.Slice(x, []int{0, T - 1, 0}, []int{B, T, c.Hidden})
	}
	x = f.RMSNorm(x, m.norm.W, c.NormEps)
	logits := f.AsType(f.Reshape(m.lmHead.Linear(f, x), B, c.Vocab), mlx.Float32)
	if sc := c.FinalLogitSoftcap; sc > 0 {
		logits = f.Multiply(f.Tanh(f.Multiply(logits, f.Scalar(1/sc))), f.Scalar(sc))
	}
	return logits
}

// attention for rows adding T tokens each; h is [B, T, hidden].
func (m *Model) attention(f *mlx.Frame, l *layer, li int, h mlx.Array, caches []*Cache, offsets []int32, offs mlx.Array) mlx.Array {
	c := m.cfg
	B, T := len(caches), h.Dim(1)
	heads := func(w *model.Weight, n int, norm *model.Weight) mlx.Array {
		x := f.Reshape(w.Linear(f, h), B, T, n, c.HeadDim)
		if norm != nil {
			x = f.RMSNorm(x, norm.W, c.NormEps)
		}
		return f.Transpose(x, 0, 2, 1, 3)
	}
	q, k, v := heads(l.q, c.Heads, l.qNorm), heads(l.k, c.KVHeads, l.kNorm), heads(l.v, c.KVHeads, nil)
	r := l.rope
	if B == 1 {
		q = f.RoPE(q, r.Dims, r.Traditional, r.Base, r.Scale, int(offsets[0]), mlx.Array{})
		k = f.RoPE(k, r.Dims, r.Traditional, r.Base, r.Scale, int(offsets[0]), mlx.Array{})
	} else {
		q = f.RoPEOffsets(q, r.Dims, r.Traditional, r.Base, r.Scale, offs, mlx.Array{})
		k = f.RoPEOffsets(k, r.Dims, r.Traditional, r.Base, r.Scale, offs, mlx.Array{})
	}
	rows := make([]mlx.Array, B)
	for i, cc := range caches {
		qi, ki, vi := q, k, v
		if B > 1 {
			qi = f.Slice(q, []int{i, 0, 0, 0}, []int{i + 1, c.Heads, T, c.HeadDim})
			ki = f.Slice(k, []int{i, 0, 0, 0}, []int{i + 1, c.KVHeads, T, c.HeadDim})
			vi = f.Slice(v, []int{i, 0, 0, 0}, []int{i + 1, c.KVHeads, T, c.HeadDim})
		}
		keys, values, mode, mask := cc.attend(f, li, ki, vi, c.ActDType)
		rows[i] = f.Attention(qi, keys, values, m.attnScale, mode, mask, mlx.Array{})
	}
	o := rows[0]
	if B > 1 {
		o = f.Concatenate(0, rows...)
	}
	o = f.Reshape(f.Transpose(o, 0, 2, 1, 3), B, T, c.Heads*c.HeadDim)
	return l.o.Linear(f, o)
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

// Cache is one sequence's keys and values for every layer.
type Cache struct {
	k, v   []mlx.Array // [1, kvHeads, slots, headDim]
	slots  []int       // allocated token slots per layer
	window []int       // per layer; 0: global
	n      int         // tokens appended so far
}

// Len is the number of tokens the sequence holds (appended so far; a
// sliding layer retains only the last Window of them).
func (c *Cache) Len() int { return c.n }

// Bytes is the device memory the cache's buffers occupy.
func (c *Cache) Bytes() int64 {
	var n int64
	for i := range c.k {
		n += c.LayerBytes(i)
	}
	return n
}

// LayerBytes is the device memory of one layer's keys and values.
func (c *Cache) LayerBytes(layer int) int64 {
	if !c.k[layer].Valid() {
		return 0
	}
	return int64(c.k[layer].Nbytes() + c.v[layer].Nbytes())
}

// Free releases the cache's arrays.
func (c *Cache) Free() {
	for i := range c.k {
		c.k[i].Free()
		c.v[i].Free()
		c.slots[i] = 0
	}
	c.n = 0
}

// slotsFor is the slot count a layer needs to hold n tokens.
func slotsFor(window, n int) int {
	s := (n + cacheStep - 1) / cacheStep * cacheStep
	if window > 0 && s > window {
		s = window
	}
	return s
}

// reserve grows every layer's buffer so that T more tokens fit. A sliding
// layer only grows before it wraps, while slot s still holds position s.
func (c *Cache) reserve(f *mlx.Frame, cfg model.Config, T int) {
	for li := range c.k {
		need := slotsFor(c.window[li], c.n+T)
		if f.Err() != nil || need <= c.slots[li] {
			continue
		}
		kv := cfg.Kinds[li]
		held := min(c.n, c.slots[li])
		for _, buf := range []*mlx.Array{&c.k[li], &c.v[li]} {
			grown := f.Zeros(cfg.ActDType, 1, kv.KVHeads, need, kv.HeadDim)
			if buf.Valid() && held > 0 {
				old := f.Slice(*buf, []int{0, 0, 0, 0}, []int{1, kv.KVHeads, held, kv.HeadDim})
				grown = f.SliceUpdate(grown, old, []int{0, 0, 0, 0}, []int{1, kv.KVHeads, held, kv.HeadDim})
			}
			kept := f.Keep(grown)
			buf.Free()
			*buf = kept
		}
		c.slots[li] = need
	}
}

// attend stores the T new keys and values of layer li (k and v are
// [1, kvHeads, T, headDim]) and returns what the new queries attend over:
// keys, values, the mask mode and, for mode "array", an additive mask.
func (c *Cache) attend(f *mlx.Frame, li int, k, v mlx.Array, act mlx.Dtype) (keys, values mlx.Array, mode string, mask mlx.Array) {
	if f.Err() != nil {
		return
	}
	T, n, w := k.Dim(2), c.n, c.window[li]
	if T > 1 {
		mode = "causal"
	}
	if w == 0 || n+T <= w {
		// Nothing has left any window yet: slot p holds position p.
		keys, values = c.write(f, li, k, v, n)
		return keys, values, mode, mlx.Array{}
	}
	if T == 1 {
		// The new key replaces the one leaving the window; the whole ring
		// is then exactly the window of the new query.
		c.write(f, li, k, v, n%w)
		return c.view(f, li, w), c.viewV(f, li, w), "", mlx.Array{}
	}
	// A chunk that slides: attend over the held keys followed by the new
	// ones under a window mask, then keep the chunk's last w keys.
	held := min(n, w)
	keys, values = k, v
	if held > 0 {
		keys = f.Concatenate(2, c.view(f, li, held), k)
		values = f.Concatenate(2, c.viewV(f, li, held), v)
	}
	mask = f.AsType(f.Float32s(windowMask(n, T, w), T, held+T), act)
	keep := min(T, w)
	first := n + T - keep // position of the first kept token
	src := T - keep
	for keep > 0 {
		slot := first % w
		run := min(keep, w-slot)
		c.write(f, li, f.Slice(k, []int{0, 0, src, 0}, []int{1, k.Dim(1), src + run, k.Dim(3)}),
			f.Slice(v, []int{0, 0, src, 0}, []int{1, v.Dim(1), src + run, v.Dim(3)}), slot)
		first, src, keep = first+run, src+run, keep-run
	}
	return keys, values, "array", mask
}

// windowMask is the additive [T, held+T] mask of queries at positions
// n..n+T-1 over a ring of w slots holding the min(n, w) tokens before them,
// followed by the T new keys: 0 where the key is at most w-1 positions
// before or at the query, -inf elsewhere.
func windowMask(n, T, w int) []float32 {
	held := min(n, w)
	L := held + T
	pos := make([]int, L)
	for s := range held {
		// Slot s holds the latest position before n congruent to s mod w.
		pos[s] = n - 1 - ((n-1-s)%w+w)%w
	}
	for j := range T {
		pos[held+j] = n + j
	}
	mask := make([]float32, T*L)
	inf := float32(math.Inf(-1))
	for i := range T {
		p := n + i
		for j, kp := range pos {
			if kp > p || p-kp >= w {
				mask[i*L+j] = inf
			}
		}
	}
	return mask
}

// write stores the keys and values k and v ([1, kvHeads, T, headDim]) in
// slots slot..slot+T-1 of layer li and returns views of slots 0..slot+T-1.
func (c *Cache) write(f *mlx.Frame, li int, k, v mlx.Array, slot int) (mlx.Array, mlx.Array) {
	if f.Err() != nil {
		return mlx.Array{}, mlx.Array{}
	}
	kvh, T, hd := k.Dim(1), k.Dim(2), k.Dim(3)
	start := []int{0, 0, slot, 0}
	stop := []int{1, kvh, slot + T, hd}
	views := [2]mlx.Array{}
	for j, p := range []struct {
		buf *mlx.Array
		val mlx.Array
	}{{&c.k[li], k}, {&c.v[li], v}} {
		updated := f.SliceUpdate(*p.buf, f.AsType(p.val, p.buf.Dtype()), start, stop)
		kept := f.Keep(updated)
		p.buf.Free()
		*p.buf = kept
		views[j] = f.Slice(kept, []int{0, 0, 0, 0}, stop)
	}
	return views[0], views[1]
}

// view is the first n slots of layer li's keys; viewV of its values.
func (c *Cache) view(f *mlx.Frame, li, n int) mlx.Array  { return sliceSlots(f, c.k[li], n) }
func (c *Cache) viewV(f *mlx.Frame, li, n int) mlx.Array { return sliceSlots(f, c.v[li], n) }

func sliceSlots(f *mlx.Frame, a mlx.Array, n int) mlx.Array {
	if f.Err() != nil {
		return mlx.Array{}
	}
	return f.Slice(a, []int{0, 0, 0, 0}, []int{1, a.Dim(1), n, a.Dim(3)})
}

var _ model.Network = (*Model)(nil)
