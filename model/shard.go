package model

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/goprovider/provider/mlx"
)

// ErrShard marks a model that cannot be split the way it was asked.
var ErrShard = errors.New("cannot shard model")

// Part is the slice of a tensor one rank holds: [Lo, Hi) along Axis
// (negative counts from the last axis). With Blocks > 1 the axis is that
// many equal blocks stacked (a fused gate and up projection) and the part
// keeps [Lo, Hi) of each, the kept rows of every block in block order.
type Part struct{ Axis, Lo, Hi, Blocks int }

// Sharding is one rank's share of a model split over Size ranks by tensor
// parallelism: attention heads (with their KV heads) and the feed-forward
// width are divided, and the outputs of the layers that consume a divided
// input are summed over the ranks.
//
//   - Column-parallel weights (query, key and value projections, gate and up
//     projections) keep a range of their output rows; the activations they
//     produce stay divided.
//   - Row-parallel weights (the attention output and down projections) keep
//     the matching range of their input columns; their Linear ends with one
//     all-sum (Reduce), so every rank continues with the full hidden state.
//   - A mixture of experts divides every expert's width the same way (the
//     gate and up rows, the down columns) and sums its combination of the
//     experts' partial down products over the ranks once, adding the down
//     biases after the sum; where that width would cut quantization
//     groups (gpt-oss), whole experts are divided instead and a rank
//     combines only its own experts' choices before the sum. Gemma 4's
//     experts sit beside a dense MLP, each with its own norm, so its
//     feed-forward block ends in two all-sums.
//   - An untied output head keeps a range of the vocabulary and its logits
//     are all-gathered (Gather); a tied one is the embedding, replicated.
//   - Everything else (embeddings, per-layer inputs, norms, routers) is
//     replicated.
//
// Heads split by KV group: with at least as many KV heads as ranks, each
// rank holds a contiguous range of KV heads (uneven when they do not
// divide, the first ranks holding more: 3 over 2 ranks is 2 and 1, so rank
// 0, whose pool the ledger charges, holds the most) and their query heads; with fewer, each
// KV head is replicated on Size/KVHeads ranks that divide its query heads.
type Sharding struct {
	Rank, Size int
	// Parts is what each split tensor keeps; tensors not named are whole.
	Parts map[string]Part
	// Reduce and Gather name the weights whose Linear ends in a collective.
	Reduce, Gather map[string]bool
	// Heads and KVHeads are the rank's ranges [lo, hi) of the model's
	// query and KV heads; FFN its range of the feed-forward width.
	Heads, KVHeads, FFN [2]int
	// Experts is the rank's range of a mixture's experts when they are
	// divided whole instead of by width; zero when not.
	Experts [2]int
}

// Shard keeps only rank's share of m's tensors (of a split over size ranks)
// and makes m.Config that share's shape. Slices along the first axis share
// the host memory they come from (a mapped file is then read only where
// the rank's rows lie); others are copied.
func (m *Model) Shard(rank, size int) (*Sharding, error) {
	if size < 1 || rank < 0 || rank >= size {
		return nil, fmt.Errorf("%w: rank %d of %d", ErrShard, rank, size)
	}
	if size == 1 {
		return wholeSharding(m.Config), nil
	}
	s, cfg, err := planShards(m.Config, m.Tensors, rank, size)
	if err != nil {
		return nil, err
	}
	for _, name := range slices.Sorted(maps.Keys(s.Parts)) {
		t, ok := m.Tensors[name]
		if !ok {
			continue
		}
		part, err := t.Slice(s.Parts[name])
		if err != nil {
			return nil, fmt.Errorf("%w: %w", ErrShard, err)
		}
		m.Tensors[name] = part
	}
	m.Config = cfg
	return s, nil
}

// wholeSharding is the share of a split over one rank: everything.
func wholeSharding(c Config) *Sharding {
	return &Sharding{Size: 1, Heads: [2]int{0, c.Heads}, KVHeads: [2]int{0, c.KVHeads}, FFN: [2]int{0, c.Intermediate}}
}

// Bind marks the uploaded weights that end in a collective over g.
func (s *Sharding) Bind(w *Weights, g mlx.Group) {
	for name := range s.Reduce {
		if x := w.Get(name); x != nil {
			x.Reduce = g
		}
	}
	for name := range s.Gather {
		if x := w.Get(name); x != nil {
			x.Gather = g
		}
	}
}

// planShards is rank's share of a split over size, as c's architecture
// plans it.
func planShards(c Config, tensors map[string]*Tensor, rank, size int) (*Sharding, Config, error) {
	arch, ok := checkpointArchs[c.Arch]
	if !ok || arch.shard == nil {
		return nil, c, fmt.Errorf("%w: tensor parallelism for %q is not implemented", ErrShard, c.Arch)
	}
	s := &Sharding{Rank: rank, Size: size, Parts: map[string]Part{}, Reduce: map[string]bool{}, Gather: map[string]bool{}}
	return arch.shard(s, c, tensors, rank, size)
}

// planDense is the split of a decoder with llama-style tensor names
// (llama, gemma3): q/k/v, o, gate/up, down, lm_head.
func planDense(s *Sharding, c Config, tensors map[string]*Tensor, rank, size int) (*Sharding, Config, error) {
	for _, k := range c.Kinds {
		if k.KVHeads != c.KVHeads || k.HeadDim != c.HeadDim || k.SharedFrom >= 0 {
			return nil, c, fmt.Errorf("%w: %s layers of different KV shapes", ErrShard, c.Arch)
		}
	}
	qa, qb, ka, kb, err := HeadRange(c.Heads, c.KVHeads, rank, size)
	if err != nil {
		return nil, c, err
	}
	unit := groupUnit(tensors)
	fa, fb, err := EvenRange(c.Intermediate, unit, rank, size)
	if err != nil {
		return nil, c, err
	}
	s.Heads, s.KVHeads, s.FFN = [2]int{qa, qb}, [2]int{ka, kb}, [2]int{fa, fb}
	hd := c.HeadDim
	for i := range c.Layers {
		p := fmt.Sprintf("model.layers.%d.", i)
		s.Parts[p+"self_attn.q_proj.weight"] = Part{Axis: 0, Lo: qa * hd, Hi: qb * hd}
		s.Parts[p+"self_attn.k_proj.weight"] = Part{Axis: 0, Lo: ka * hd, Hi: kb * hd}
		s.Parts[p+"self_attn.v_proj.weight"] = Part{Axis: 0, Lo: ka * hd, Hi: kb * hd}
		s.Parts[p+"self_attn.o_proj.weight"] = Part{Axis: -1, Lo: qa * hd, Hi: qb * hd}
		s.Parts[p+"mlp.gate_proj.weight"] = Part{Axis: 0, Lo: fa, Hi: fb}
		s.Parts[p+"mlp.up_proj.weight"] = Part{Axis: 0, Lo: fa, Hi: fb}
		s.Parts[p+"mlp.down_proj.weight"] = Part{Axis: -1, Lo: fa, Hi: fb}
		s.Reduce[p+"self_attn.o_proj.weight"] = true
		s.Reduce[p+"mlp.down_proj.weight"] = true
	}
	s.splitVocab(c, "lm_head.weight")
	local := c
	local.Heads, local.KVHeads, local.Intermediate = qb-qa, kb-ka, fb-fa
	local.Kinds = slices.Clone(c.Kinds)
	for i := range local.Kinds {
		local.Kinds[i].KVHeads = kb - ka
	}
	return s, local, nil
}

// splitVocab gives the rank an even share of an untied output head's
// rows (head, then the tensors that hold its rows beside it: packed scales
// and biases) and all-gathers its logits; a tied head, or a vocabulary
// that does not divide, stays whole.
func (s *Sharding) splitVocab(c Config, head string, beside ...string) {
	if c.TiedEmbedding || c.Vocab%s.Size != 0 {
		return
	}
	n := c.Vocab / s.Size
	for _, name := range append([]string{head}, beside...) {
		s.Parts[name] = Part{Axis: 0, Lo: s.Rank * n, Hi: (s.Rank + 1) * n}
	}
	s.Gather[head] = true
}

// HeadRange is the query heads [qa, qb) and KV heads [ka, kb) rank holds of
// a split over size ranks (see Sharding).
func HeadRange(heads, kvHeads, rank, size int) (qa, qb, ka, kb int, err error) {
	if kvHeads <= 0 || heads%kvHeads != 0 {
		return 0, 0, 0, 0, fmt.Errorf("%w: %d query heads over %d KV heads", ErrShard, heads, kvHeads)
	}
	g := heads / kvHeads
	if kvHeads >= size {
		ka, kb = ceilDiv(rank*kvHeads, size), ceilDiv((rank+1)*kvHeads, size)
		return ka * g, kb * g, ka, kb, nil
	}
	per := size / kvHeads
	if size%kvHeads != 0 || g%per != 0 {
		return 0, 0, 0, 0, fmt.Errorf("%w: %d KV heads of %d query heads each do not split over %d ranks", ErrShard, kvHeads, g, size)
	}
	k := rank / per
	qa = k*g + rank%per*(g/per)
	return qa, qa + g/per, k, k + 1, nil
}

// EvenRange is rank's share [lo, hi) of n split over size ranks in whole
// units; when they do not divide, the first ranks hold one more.
func EvenRange(n, unit, rank, size int) (lo, hi int, err error) {
	if n%unit != 0 || n/unit < size {
		return 0, 0, fmt.Errorf("%w: width %d is not %d units of %d", ErrShard, n, size, unit)
	}
	units := n / unit
	return ceilDiv(rank*units, size) * unit, ceilDiv((rank+1)*units, size) * unit, nil
}

func ceilDiv(a, b int) int { return (a + b - 1) / b }

// groupUnit is the widest quantization group among the tensors (32 when
// none is quantized), the unit a split along the input axis keeps whole.
func groupUnit(tensors map[string]*Tensor) int {
	u := 32
	for _, t := range tensors {
		if t.Quant != nil && t.Quant.GroupSize > u {
			u = t.Quant.GroupSize
		}
		if t.raw != nil && t.raw.info.Type.BlockSize() > u {
			// An unconverted GGUF tensor is cut in whole blocks.
			u = t.raw.info.Type.BlockSize()
		}
	}
	return u
}

// Slice is the part p of t. A slice along the first axis shares t's
// memory.
func (t *Tensor) Slice(p Part) (*Tensor, error) {
	data, groups, err := t.cuts(p)
	if err != nil {
		return nil, err
	}
	if t.raw != nil {
		if data.blocks != 1 {
			return nil, fmt.Errorf("%s: part %+v of a GGUF tensor", t.Name, p)
		}
		return t.sliceRaw(p, data.axis)
	}
	out := *t
	out.Shape = cut{axis: data.axis, blocks: data.blocks, lo: p.Lo, hi: p.Hi}.shape(t.Shape)
	if t.Quant == nil {
		out.Data = data.bytes(t.Data, t.Shape, t.DType.Size())
		return &out, nil
	}
	q := *t.Quant
	out.Quant = &q
	words, grouped := t.storedShapes()
	out.Data = data.bytes(t.Data, words, 4)
	ss := q.ScaleDType.Size()
	q.Scales = groups.bytes(q.Scales, grouped, ss)
	if q.Biases != nil {
		q.Biases = groups.bytes(q.Biases, grouped, ss)
	}
	return &out, nil
}

// cut is what a part keeps of one stored array: [lo, hi) of each of blocks
// equal blocks along axis (non-negative).
type cut struct{ axis, blocks, lo, hi int }

// shape is the shape of the cut of an array of shape s.
func (c cut) shape(s []int) []int {
	out := slices.Clone(s)
	out[c.axis] = c.blocks * (c.hi - c.lo)
	return out
}

// bytes is the cut of a row-major array of shape and element size es.
func (c cut) bytes(data []byte, shape []int, es int) []byte {
	// The axis seen as [blocks, rows per block]: the cut is [lo, hi)
	// along the second.
	stacked := slices.Concat(shape[:c.axis], []int{c.blocks, shape[c.axis] / c.blocks}, shape[c.axis+1:])
	return sliceBytes(data, stacked, c.axis+1, c.lo, c.hi, es)
}

// cuts checks the part p of t and returns what it keeps of t's stored
// arrays: its data (a quantized tensor's packed words) and its scales and
// biases (the zero cut for a dense tensor). A quantized tensor is cut
// along its input axis only in whole groups and whole words.
func (t *Tensor) cuts(p Part) (data, groups cut, err error) {
	if len(t.Shape) == 0 {
		return cut{}, cut{}, fmt.Errorf("%s: slice of a scalar", t.Name)
	}
	axis := p.Axis
	if axis < 0 {
		axis += len(t.Shape)
	}
	blocks := max(p.Blocks, 1)
	if axis < 0 || axis >= len(t.Shape) || t.Shape[axis]%blocks != 0 || p.Lo < 0 || p.Hi > t.Shape[axis]/blocks || p.Lo >= p.Hi {
		return cut{}, cut{}, fmt.Errorf("%s: part %+v of shape %v", t.Name, p, t.Shape)
	}
	data = cut{axis: axis, blocks: blocks, lo: p.Lo, hi: p.Hi}
	if t.Quant == nil {
		return data, cut{}, nil
	}
	q, groups := t.Quant, data
	if axis == len(t.Shape)-1 {
		g := q.GroupSize
		if blocks > 1 || p.Lo%g != 0 || p.Hi%g != 0 || p.Lo*q.Bits%32 != 0 || p.Hi*q.Bits%32 != 0 {
			return cut{}, cut{}, fmt.Errorf("%s: columns [%d, %d) cut quantization groups of %d", t.Name, p.Lo, p.Hi, g)
		}
		data.lo, data.hi = p.Lo*q.Bits/32, p.Hi*q.Bits/32
		groups.lo, groups.hi = p.Lo/g, p.Hi/g
	}
	return data, groups, nil
}

// storedShapes are the shapes a quantized tensor's packed words and its
// scales and biases are stored in: its own, with the last axis in 32-bit
// words and in groups.
func (t *Tensor) storedShapes() (words, groups []int) {
	last := len(t.Shape) - 1
	words, groups = slices.Clone(t.Shape), slices.Clone(t.Shape)
	words[last] = t.Shape[last] * t.Quant.Bits / 32
	groups[last] = t.Shape[last] / t.Quant.GroupSize
	return words, groups
}

// sliceBytes is [lo, hi) along axis of a row-major array of shape and
// element size es.
func sliceBytes(data []byte, shape []int, axis, lo, hi, es int) []byte {
	outer := 1
	for _, d := range shape[:axis] {
		outer *= d
	}
	inner := es
	for _, d := range shape[axis+1:] {
		inner *= d
	}
	stride := shape[axis] * inner
	if outer == 1 {
		return data[lo*inner : hi*inner : hi*inner]
	}
	out := make([]byte, 0, outer*(hi-lo)*inner)
	for o := range outer {
		out = append(out, data[o*stride+lo*inner:o*stride+hi*inner]...)
	}
	return out
}

// String names the rank's share, for logs.
func (s *Sharding) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "rank %d/%d: heads [%d,%d) kv heads [%d,%d) ffn [%d,%d)", s.Rank, s.Size, s.Heads[0], s.Heads[1], s.KVHeads[0], s.KVHeads[1], s.FFN[0], s.FFN[1])
	if s.Experts[1] > 0 {
		fmt.Fprintf(&b, " experts [%d,%d)", s.Experts[0], s.Experts[1])
	}
	return b.String()
}
