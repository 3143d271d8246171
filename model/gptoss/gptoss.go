package gptoss

import (
	"fmt"
	"maps"
	"math"
	"slices"
	"strings"

	"github.com/goprovider/provider/kvpool"
	"github.com/goprovider/provider/mlx"
	"github.com/goprovider/provider/model"
)

// sortAt is the number of routed (token, expert) pairs from which the
// expert products run sorted by expert: below it the gather kernels touch
// few matrices anyway (a decode step), above it grouping the rows of each
// expert pays for the two sorts (prefill).
const sortAt = 64

// affine is y = x W^T + b.
type affine struct {
	w *model.Weight
	b mlx.Array
}

// apply rounds a dense product and its bias once, as a fused linear layer
// does; a packed product is rounded before its bias is added, and so is a
// product summed over the ranks of a tensor-parallel split (its bias is
// added once, after the sum).
func (a affine) apply(f *mlx.Frame, x mlx.Array) mlx.Array {
	if a.w.Quantized() || a.w.Reduce.Valid() {
		return f.Add(a.w.Linear(f, x), a.b)
	}
	return f.AddMM(a.b, x, f.Transpose(a.w.W, 1, 0), 1, 1)
}

// expertStack is one projection of every expert of a layer with its
// biases: W is [experts, out, in] (packed or not), or [experts, in, out]
// when inRows (HF transformers' dense layout).
type expertStack struct {
	w      *model.Weight
	inRows bool
	bias   mlx.Array // [experts, out]
}

// routing is which expert each row of an expert product takes. Unsorted,
// the tokens' x is [N, 1, 1, in], idx [N, k], and the products' result
// [N, k, 1, out]; sorted, x is [M, 1, in], idx [M] ascending, and the
// result [M, 1, out].
//
// The rows of x each product reads are, where valid, in and pairs; MLX
// would otherwise make them for every product, and copy them (a GPU's
// gather products take contiguous indices, shaped as the pairs). Unsorted,
// in [N, k] names each pair's token (the products of x), and pairs [N, k]
// each pair itself (the products of the [N, k, 1, mid] gated activations);
// stepRows makes them once a step for every layer, contiguous, and the
// mixture makes idx contiguous once a layer for its products.
type routing struct {
	idx       mlx.Array
	sorted    bool
	in, pairs mlx.Array
}

// stepRows makes the unsorted routing's rows for a step of n tokens with k
// experts each.
func stepRows(f *mlx.Frame, n, k int) (in, pairs mlx.Array) {
	in = f.Contiguous(f.BroadcastTo(f.Reshape(f.Arange(0, float64(n), 1, mlx.Uint32), n, 1), n, k))
	return in, f.Reshape(f.Arange(0, float64(n*k), 1, mlx.Uint32), n, k)
}

// apply multiplies each row of x by the experts r names, x's rows read
// as lhs says (invalid: in order), and adds their biases.
func (e *expertStack) apply(f *mlx.Frame, x, lhs mlx.Array, r routing) mlx.Array {
	return f.Add(e.product(f, x, lhs, r), f.ExpandDims(f.Take(e.bias, r.idx, 0), -2))
}

// product is apply without the biases.
func (e *expertStack) product(f *mlx.Frame, x, lhs mlx.Array, r routing) mlx.Array {
	var y mlx.Array
	switch w := e.w; {
	case w.Quantized():
		y = f.GatherQMM(x, w.W, w.Scales, w.Biases, lhs, r.idx, true, w.GroupSize, w.Bits, w.Mode, r.sorted)
	case e.inRows:
		y = f.GatherMM(x, w.W, lhs, r.idx, r.sorted)
	default:
		y = f.GatherMM(x, f.SwapAxes(w.W, -1, -2), lhs, r.idx, r.sorted)
	}
	return y
}

// experts is a layer's mixture: the gate and up projections either apart
// or fused with their output features alternating gate, up (gateUp).
// partial: the rank holds a slice of every expert's width (see
// model.Sharding), so its down products are partial sums that the mixture
// sums over the ranks before it adds the down biases.
type experts struct {
	gate, up, gateUp, down expertStack
	fused, partial         bool
}

type layer struct {
	inNorm, postNorm *model.Weight
	q, k, v, o       affine
	// qkv is q, k and v as one module where the upload fused them
	// (model.FuseProjections; then q, k and v are unset).
	qkv    *affine
	sinks  mlx.Array // [heads]
	router affine
	moe    experts

	// Of the activations' type, made once (Model.constants): the sinks,
	// and YaRN's factor as this layer's attention applies it (invalid
	// without YaRN).
	actSinks, yarn mlx.Array
}

// Model is a gpt-oss network bound to device weights.
type Model struct {
	cfg       model.Config
	facts     model.GPTOSSFacts
	embed     *model.Weight
	norm      *model.Weight
	lmHead    *model.Weight
	layers    []layer
	attnScale float32
	freqs     mlx.Array // YaRN periods per rotated pair; zero without scaling
	// made: the layers' arrays of the activations' type exist.
	made bool
	// yarnScalar and yarnJoined are YaRN's factor in the activations'
	// type, made with the layers' constants where a layer needs them: a
	// scalar for q and k apart, and a vector over a joined q/k/v's outputs
	// (the factor over q's and k's, 1, an exact product, over v's).
	yarnScalar, yarnJoined mlx.Array
}

// New binds the forward pass to uploaded weights; it runs on the MLX
// thread. Packed matrices (cfg.GPTOSS.Packed) are used as they are, through
// MLX's quantized kernels.
func New(cfg model.Config, w *model.Weights) (*Model, error) {
	if cfg.Arch != "gpt_oss" || cfg.GPTOSS == nil {
		return nil, fmt.Errorf("gptoss: %w: %q", model.ErrUnsupportedArch, cfg.Arch)
	}
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("gptoss: %w", err)
	}
	g := *cfg.GPTOSS
	if g.Experts <= 0 || g.PerToken <= 0 || g.PerToken > g.Experts {
		return nil, fmt.Errorf("gptoss: %w: %d of %d experts per token", model.ErrBadConfig, g.PerToken, g.Experts)
	}
	if cfg.RoPE.Dims != cfg.HeadDim || cfg.RoPE.Traditional || cfg.LocalRoPE.Dims != 0 {
		return nil, fmt.Errorf("gptoss: %w: rope %+v", model.ErrUnsupportedArch, cfg.RoPE)
	}
	m := &Model{cfg: cfg, facts: g, attnScale: cfg.AttnScale}
	if m.attnScale == 0 {
		m.attnScale = float32(1 / math.Sqrt(float64(cfg.HeadDim)))
	}
	b := binder{w: w, packed: maps.Clone(g.Packed)}
	m.embed, m.norm = b.matrix("model.embed_tokens.weight"), b.vector("model.norm.weight")
	m.lmHead = m.embed
	if !cfg.TiedEmbedding {
		m.lmHead = b.matrix("lm_head.weight")
	}
	has := func(n string) bool { return w.Get(n) != nil }
	m.layers = make([]layer, cfg.Layers)
	for i := range m.layers {
		p := fmt.Sprintf("model.layers.%d.", i)
		l := &m.layers[i]
		l.inNorm, l.postNorm = b.vector(p+"input_layernorm.weight"), b.vector(p+"post_attention_layernorm.weight")
		if has(p + "self_attn.qkv_proj.weight") {
			l.qkv = b.fused(p+"self_attn.qkv_proj", p+"self_attn.q_proj", p+"self_attn.k_proj", p+"self_attn.v_proj")
			q, kv := cfg.Heads*cfg.HeadDim, cfg.KVHeads*cfg.HeadDim
			if w := l.qkv.w; w != nil && !slices.Equal(w.Parts, []int{q, kv, kv}) {
				b.fail(fmt.Errorf("%w: layer %d: fused q/k/v weight of parts %v, want [%d %d %d]", model.ErrBadConfig, i, w.Parts, q, kv, kv))
			}
		} else {
			l.q, l.k, l.v = b.affine(p+"self_attn.q_proj"), b.affine(p+"self_attn.k_proj"), b.affine(p+"self_attn.v_proj")
		}
		l.o = b.affine(p + "self_attn.o_proj")
		if s := b.vector(p + "self_attn.sinks"); s != nil {
			l.sinks = s.W
		}
		l.router = b.affine(p + "mlp.router")
		e := p + "mlp.experts."
		switch layout := model.GPTOSSExpertLayout(has, i); layout {
		case "split":
			l.moe.gate, l.moe.up, l.moe.down = b.experts(e+"gate_proj", false), b.experts(e+"up_proj", false), b.experts(e+"down_proj", false)
		case "fused":
			l.moe.fused = true
			l.moe.gateUp, l.moe.down = b.experts(e+"gate_up_proj", false), b.experts(e+"down_proj", false)
		case "dense":
			l.moe.fused = true
			l.moe.gateUp, l.moe.down = b.experts(e+"gate_up_proj", true), b.experts(e+"down_proj", true)
		default:
			b.fail(fmt.Errorf("%w: %s: no expert tensors", model.ErrMissingTensor, e))
		}
		if d := l.moe.down.w; d != nil && d.Reduce.Valid() && g.ExpertRange[1] == 0 {
			l.moe.partial = true
		}
		kind := cfg.Kinds[i]
		if kind.SharedFrom >= 0 || kind.KVHeads != cfg.KVHeads || kind.HeadDim != cfg.HeadDim || kind.Window < 0 {
			b.fail(fmt.Errorf("%w: layer %d kind %+v", model.ErrBadConfig, i, kind))
		}
	}
	if b.err != nil {
		return nil, fmt.Errorf("gptoss: %w", b.err)
	}
	if cfg.RoPE.Freqs != nil {
		freqs, err := mlx.FromFloat32s(cfg.RoPE.Freqs, len(cfg.RoPE.Freqs))
		if err != nil {
			return nil, fmt.Errorf("gptoss: %w", err)
		}
		m.freqs = freqs
	}
	return m, nil
}

// binder looks weights up by name, keeping the first failure.
type binder struct {
	w      *model.Weights
	packed map[string]model.QuantLevel
	err    error
}

func (b *binder) fail(err error) {
	if b.err == nil {
		b.err = err
	}
}

func (b *binder) vector(name string) *model.Weight {
	x := b.w.Get(name)
	if x == nil {
		b.fail(fmt.Errorf("%w: %s", model.ErrMissingTensor, name))
	}
	return x
}

// matrix is a weight matrix (or expert stack); a packed one is joined to
// its scales and biases, which the loader keeps as tensors of their own.
// The joined Weight shares their arrays, which stay owned by the Weights.
func (b *binder) matrix(name string) *model.Weight {
	x := b.vector(name)
	level, ok := b.packed[name]
	if x == nil || !ok {
		return x
	}
	base := strings.TrimSuffix(name, ".weight")
	joined := &model.Weight{W: x.W, Bits: level.Bits, GroupSize: level.GroupSize, Mode: level.Mode, Reduce: x.Reduce, Gather: x.Gather, Parts: x.Parts}
	if s := b.vector(base + ".scales"); s != nil {
		joined.Scales = s.W
	}
	if bi := b.w.Get(base + ".biases"); bi != nil {
		joined.Biases = bi.W
	}
	return joined
}

func (b *binder) affine(module string) affine {
	a := affine{w: b.matrix(module + ".weight")}
	if bias := b.vector(module + ".bias"); bias != nil {
		a.b = bias.W
	}
	return a
}

// fused binds the module into that the upload joined from parts: a packed
// matrix takes the parts' format, which must be one.
func (b *binder) fused(into string, parts ...string) *affine {
	if level, ok := b.packed[parts[0]+".weight"]; ok {
		for _, p := range parts[1:] {
			if b.packed[p+".weight"] != level {
				b.fail(fmt.Errorf("%w: %s joins %v, of different formats", model.ErrBadConfig, into, parts))
			}
		}
		b.packed[into+".weight"] = level
	}
	a := b.affine(into)
	return &a
}

// experts binds an expert stack: module.weight in the split and fused
// layouts, the bare HF name in the dense one.
func (b *binder) experts(module string, inRows bool) expertStack {
	name := module + ".weight"
	if inRows {
		name = module
	}
	e := expertStack{w: b.matrix(name), inRows: inRows}
	if bias := b.vector(module + ".bias"); bias != nil {
		e.bias = bias.W
	}
	return e
}

// Config is the architecture the model was built with.
func (m *Model) Config() model.Config { return m.cfg }

// Close releases what the Model created (the YaRN periods); the weights
// belong to the caller.
func (m *Model) Close() {
	m.freqs.Free()
	m.freqs = mlx.Array{}
	m.dropConstants()
}

// dropConstants frees what constants made.
func (m *Model) dropConstants() {
	for i := range m.layers {
		l := &m.layers[i]
		l.actSinks.Free()
		l.actSinks, l.yarn = mlx.Array{}, mlx.Array{}
	}
	m.yarnScalar.Free()
	m.yarnJoined.Free()
	m.yarnScalar, m.yarnJoined, m.made = mlx.Array{}, mlx.Array{}, false
}

// TakesLazyTokens: Forward reads token ids only through b.TokenIDs
// (model.LazyTokens).
func (m *Model) TakesLazyTokens() {}

// Forward runs one step of b through the network: every row's new tokens,
// flattened, and returns the float32 logits at b's logit rows, [rows,
// vocab]. The returned array belongs to f.
func (m *Model) Forward(f *mlx.Frame, b *kvpool.Batch) mlx.Array {
	c := m.cfg
	if err := b.CheckTokens(c.Vocab); err != nil {
		f.Fail(fmt.Errorf("gptoss: %w", err))
		return mlx.Array{}
	}
	m.constants(f)
	x := f.AsType(m.embed.Embed(f, b.TokenIDs()), c.ActDType) // [1, N, hidden]
	// The unsorted expert products' rows (routing), made once a step.
	var rows routing
	if N, K := b.N(), m.facts.PerToken; N*K < sortAt {
		rows.in, rows.pairs = stepRows(f, N, K)
	}
	for li := range m.layers {
		l := &m.layers[li]
		x = f.Add(x, m.attention(f, l, li, f.RMSNorm(x, l.inNorm.W, c.NormEps), b))
		x = f.Add(x, m.mixture(f, l, f.RMSNorm(x, l.postNorm.W, c.NormEps), rows))
		f.DispatchLayer(li, x)
	}
	x = f.Take(x, b.SampleIndex(), 1)
	x = f.RMSNorm(x, m.norm.W, c.NormEps)
	return f.AsType(f.Reshape(m.lmHead.Linear(f, x), len(b.LogitRows()), c.Vocab), mlx.Float32)
}

// constants makes, on the first step, what every step reads in the
// activations' type: each layer's sinks (as mlx-lm passes them to its
// attention; the fused CPU kernel reads them as float32) and YaRN's factor
// as the layer applies it. They are evaluated with that step and kept
// until Close; a failed frame leaves them to the next step.
func (m *Model) constants(f *mlx.Frame) {
	if m.made || f.Err() != nil {
		return
	}
	m.dropConstants() // a failed step's
	c := m.cfg
	yarn := m.facts.YaRNFactor != 1
	for i := range m.layers {
		l := &m.layers[i]
		l.actSinks = f.Keep(f.AsType(l.sinks, c.ActDType))
		switch {
		case !yarn:
		case l.qkv == nil:
			if !m.yarnScalar.Valid() {
				m.yarnScalar = f.Keep(f.AsType(f.Scalar(m.facts.YaRNFactor), c.ActDType))
			}
			l.yarn = m.yarnScalar
		default:
			if !m.yarnJoined.Valid() {
				qk, v := (c.Heads+c.KVHeads)*c.HeadDim, c.KVHeads*c.HeadDim
				factors := make([]float32, qk+v)
				for j := range factors {
					factors[j] = 1
					if j < qk {
						factors[j] = m.facts.YaRNFactor
					}
				}
				m.yarnJoined = f.Keep(f.AsType(f.Float32s(factors, qk+v), c.ActDType))
			}
			l.yarn = m.yarnJoined
		}
	}
	m.made = f.Err() == nil
}

// attention of the step's N tokens, each over its own row's keys in the
// pool (within the layer's window); h is [1, N, hidden].
func (m *Model) attention(f *mlx.Frame, l *layer, li int, h mlx.Array, b *kvpool.Batch) mlx.Array {
	c := m.cfg
	N, D := b.N(), c.HeadDim
	yarn, sinks := l.yarn, l.actSinks
	if l.qkv != nil {
		// One product and its bias, YaRN's factor over q's and k's
		// outputs, then the heads split and rotated in one step (one
		// kernel on CUDA, which may also write k and v into the pool).
		y := l.qkv.apply(f, h)
		if yarn.Valid() {
			y = f.Multiply(y, yarn)
		}
		q, k, v, stored := f.HeadsRoPE(y, c.Heads, c.KVHeads, D, D, false, c.RoPE.Base, c.RoPE.Scale, b.PositionIDs(), m.freqs, b.KernelStore(li))
		if stored {
			b.Stored(li)
		}
		o := b.Attend(li, q, k, v, m.attnScale, sinks)
		return l.o.apply(f, f.Reshape(o, 1, N, c.Heads*D))
	}
	// heads projects h and lays it out as [N, n, 1, D]: one RoPE row per
	// token, each at its own position.
	heads := func(a affine, n int) mlx.Array {
		return f.Reshape(a.apply(f, h), N, n, 1, D)
	}
	pos := b.PositionIDs()
	rope := func(x mlx.Array) mlx.Array {
		if yarn.Valid() {
			// YaRN's attention factor scales both queries and keys.
			x = f.Multiply(x, yarn)
		}
		return f.RoPEOffsets(x, D, false, c.RoPE.Base, c.RoPE.Scale, pos, m.freqs)
	}
	flat := func(a mlx.Array, n int) mlx.Array { return f.Reshape(a, N, n, D) }
	q := flat(rope(heads(l.q, c.Heads)), c.Heads)
	k := flat(rope(heads(l.k, c.KVHeads)), c.KVHeads)
	v := flat(heads(l.v, c.KVHeads), c.KVHeads)
	o := b.Attend(li, q, k, v, m.attnScale, sinks) // [N, heads, D]
	return l.o.apply(f, f.Reshape(o, 1, N, c.Heads*D))
}

// mixture is the routed MLP: the router picks each token's PerToken
// highest-scoring experts, their scores are softmaxed among themselves, and
// the token's output is the so-weighted sum of those experts' clamped
// SwiGLU MLPs. h is [B, T, hidden] (a step's tokens flattened: [1, N,
// hidden]); rows holds the unsorted products' rows (routing.in and pairs,
// made where a step's routed pairs are below sortAt).
func (m *Model) mixture(f *mlx.Frame, l *layer, h mlx.Array, rows routing) mlx.Array {
	B, T, H := h.Dim(0), h.Dim(1), h.Dim(2)
	E, K := m.facts.Experts, m.facts.PerToken
	N := B * T
	x := f.Reshape(h, N, H)
	scores := l.router.apply(f, x)
	idx := f.Slice(f.Argpartition(scores, E-K, -1), []int{0, E - K}, []int{N, E})
	weights := f.Softmax(f.TakeAlongAxis(scores, idx, -1), -1, true)
	if lo, hi := m.facts.ExpertRange[0], m.facts.ExpertRange[1]; hi > 0 {
		// The rank holds experts [lo, hi): a choice of another's weighs
		// nothing here (it runs as the rank's first expert) and is summed
		// in by the rank that holds it.
		local := f.Subtract(idx, f.ScalarInt(lo))
		own := f.Multiply(f.Greater(local, f.ScalarInt(-1)), f.Less(local, f.ScalarInt(hi-lo)))
		idx = f.AsType(f.Where(own, local, f.ScalarInt(0)), idx.Dtype())
		weights = f.Where(own, weights, f.AsType(f.Scalar(0), weights.Dtype()))
	}

	var out mlx.Array
	if y, ok := m.expertsPairs(f, &l.moe, x, idx); ok {
		out = f.Reshape(y, N, K, 1, H)
	} else if N*K < sortAt {
		rows.idx = f.Contiguous(idx)
		out = m.experts(f, &l.moe, f.Reshape(x, N, 1, 1, H), rows) // [N, K, 1, H]
	} else {
		// Rows ordered by expert: each (token, expert) pair becomes a row
		// of its token's input, and the results go back in pair order.
		pairs := f.Reshape(idx, N*K)
		order := f.Argsort(pairs, 0)
		tokenOf := make([]int32, N*K)
		for j := range tokenOf {
			tokenOf[j] = int32(j / K)
		}
		rows := f.Take(f.Reshape(x, N, 1, H), f.Take(f.Int32s(tokenOf, N*K), order, 0), 0)
		y := m.experts(f, &l.moe, rows, routing{idx: f.Take(pairs, order, 0), sorted: true}) // [N*K, 1, H]
		out = f.Reshape(f.Take(y, f.Argsort(order, 0), 0), N, K, 1, H)
	}
	out = f.Multiply(f.Squeeze(out, -2), f.ExpandDims(weights, -1))
	y := f.Sum(out, -2, false) // [N, H]
	if g := l.moe.down.w.Reduce; g.Valid() {
		y = f.AllSum(y, g)
		if l.moe.partial {
			bias := f.Multiply(f.Take(l.moe.down.bias, idx, 0), f.ExpandDims(weights, -1))
			y = f.Add(y, f.Sum(bias, -2, false))
		}
	}
	return f.Reshape(y, B, T, H)
}

// experts runs the routed rows through their experts' MLPs (see
// routing for the shapes).
func (m *Model) experts(f *mlx.Frame, e *experts, x mlx.Array, r routing) mlx.Array {
	var gate, up mlx.Array
	if e.fused {
		gate, up = splitGateUp(f, e.gateUp.apply(f, x, r.in, r))
	} else {
		up, gate = e.up.apply(f, x, r.in, r), e.gate.apply(f, x, r.in, r)
	}
	if e.partial {
		return e.down.product(f, m.swiglu(f, gate, up), r.pairs, r)
	}
	return e.down.apply(f, m.swiglu(f, gate, up), r.pairs, r)
}

// splitGateUp splits a fused gate/up product [..., 2F], its output
// features alternating gate, up, into gate and up [..., F].
func splitGateUp(f *mlx.Frame, gu mlx.Array) (gate, up mlx.Array) {
	if !gu.Valid() {
		return gu, gu // a failed frame's
	}
	sh := gu.Shape()
	lead, width := sh[:len(sh)-1], sh[len(sh)-1]/2
	pairs := f.Reshape(gu, append(append([]int{}, lead...), width, 2)...)
	half := func(j int) mlx.Array {
		start := make([]int, len(lead)+2)
		stop := append(append([]int{}, lead...), width, j+1)
		start[len(start)-1] = j
		return f.Reshape(f.Slice(pairs, start, stop), append(append([]int{}, lead...), width)...)
	}
	return half(0), half(1)
}

// expertsPairs runs each routed pair through its expert's MLP with the
// MXFP4 expert kernel (mlx.Frame.GatherFP4), which needs neither the rows
// sorted by expert nor copies of them: x is [N, H], idx [N, K] (each
// token's K experts), and the result [N*K, H] in pair order. ok is false
// where the kernel does not take the stacks (another mode, off a CUDA
// stream, too many pairs), for the caller to run experts.
func (m *Model) expertsPairs(f *mlx.Frame, e *experts, x, idx mlx.Array) (y mlx.Array, ok bool) {
	stacks := []*expertStack{&e.gateUp, &e.down}
	if !e.fused {
		stacks = []*expertStack{&e.gate, &e.up, &e.down}
	}
	for _, s := range stacks {
		if w := s.w; s.inRows || !w.Quantized() || w.Mode != "mxfp4" || w.Reduce.Valid() {
			return mlx.Array{}, false
		}
	}
	if !f.GatherFP4On() {
		return mlx.Array{}, false
	}
	// The pairs in one contiguous array that the three products share.
	pairs := f.Reshape(idx, idx.Size())
	product := func(s *expertStack, in mlx.Array, bias bool) (mlx.Array, bool) {
		var b mlx.Array
		if bias {
			b = s.bias
		}
		return f.GatherFP4(in, s.w.W, s.w.Scales, pairs, b)
	}
	var gate, up mlx.Array
	if e.fused {
		var gu mlx.Array
		if gu, ok = product(&e.gateUp, x, true); ok {
			gate, up = splitGateUp(f, gu)
		}
	} else if gate, ok = product(&e.gate, x, true); ok {
		up, ok = product(&e.up, x, true)
	}
	if !ok {
		return mlx.Array{}, false
	}
	return product(&e.down, m.swiglu(f, gate, up), !e.partial)
}

// swiglu is gpt-oss's clamped gate: (clip(up, ±limit) + 1) *
// g*sigmoid(alpha*g) with g = min(gate, limit), in the activations' dtype
// (mlx.Frame.ClampedSwiGLU: one compiled kernel on a GPU).
func (m *Model) swiglu(f *mlx.Frame, gate, up mlx.Array) mlx.Array {
	return f.ClampedSwiGLU(gate, up, m.facts.SwiGLUAlpha, m.facts.SwiGLULimit)
}

var _ model.Network = (*Model)(nil)
