package kvpool

import (
	"fmt"

	"github.com/goprovider/provider/mlx"
)

// Row is one sequence's part of a step: the tokens it adds (a prefill chunk
// or one decode token) and whether the logits of its last one are wanted.
type Row struct {
	Seq    *Seq
	Tokens []int32
	Sample bool
	// Spans are bidirectional blocks (an image's placeholder run), as
	// absolute positions [Start, End) of the sequence: a token inside one
	// also sees the block's later tokens. A span the step's new tokens
	// reach must end within them (it may start among the stored ones).
	Spans []Span
	// Embeds are input embeddings that replace the token embeddings of
	// some positions (an image's soft tokens); Batch.Overlay writes those
	// the step's tokens reach over the embedded tokens.
	Embeds []Embed
}

// Span is a token range [Start, End) attended bidirectionally.
type Span struct{ Start, End int }

// Embed is a run of input embeddings for the absolute positions [Pos,
// Pos+Rows) of a sequence: Rows rows of the model's hidden size in Data,
// row-major, float32.
type Embed struct {
	Pos, Rows int
	Data      []float32
}

// Batch is one step over the pool: every row's new tokens flattened into N
// positions (row by row), their positions, the rows' block tables, and the
// index of each sampling row's last token. It is built by Begin, used by
// one forward pass on the frame it was built with, and ended by Commit
// once that pass has evaluated.
type Batch struct {
	p    *Pool
	f    *mlx.Frame
	rows []Row
	// Flat token ids, positions and owning rows of the step, N each.
	Tokens    []int32
	Positions []int32
	rowOf     []int32
	// last is, per token, the last position it sees: its own, or its
	// span's end - 1.
	last []int32
	// spans is set when any row has a span in this step.
	spans bool
	// lazy is set when the token ids are a device array (BeginNext): Tokens
	// holds placeholders until Resolve.
	lazy  bool
	start []int // per row: first flat index
	// SampleAt holds the flat index of each sampling row's last token, in
	// row order.
	SampleAt []int32

	tokens, positions, sampleAt mlx.Array
	// g is each group's step as Attend sees it; gc as AttendCausal does
	// when the step has spans (else g serves both).
	g, gc []*groupStep
	// stored marks the layers whose keys and values a kernel wrote into
	// the pool this step (Stored).
	stored []bool
}

// groupStep is what one group's layers share in a step, built on first use.
type groupStep struct {
	// The pool row each token's key and value go to, and as the MLX-ops
	// store's index [N, 1, 1] and KernelStore's [N], made on first use.
	slots            []int32
	scatter, slotIDs mlx.Array
	// idx is scatter broadcast to [N, idxKV, idxDim], for the layers of
	// that geometry (all of a group's, in most models).
	idx           mlx.Array
	idxKV, idxDim int
	// Fused kernel: write slots [N], block tables [R, MB], (row, position)
	// of each token [N, 2].
	write, table, meta mlx.Array
	// MLX ops: one padded attention per part (decode rows, prefill rows),
	// and where each token's output sits in the parts' concatenated
	// outputs, [N] (invalid when that is the identity).
	parts []opsPart
	oIdx  mlx.Array
}

// opsPart is one padded attention call of the MLX-ops path: R rows of at
// most Tq queries over at most L keys (L a whole number of blocks, so
// shapes change rarely), key gather [R*L], query gather [R*Tq], mask [R,
// 1, Tq, L]; qIdx is invalid when the part's queries are the step's in
// order (decode rows alone).
type opsPart struct {
	R, Tq, L           int
	gather, qIdx, mask mlx.Array
	// from is the first slot when the keys are the run of slots from ..
	// from+R*L-1 (gather invalid), else -1.
	from int
	// exact: one row, its keys unpadded and unmasked (mask invalid).
	exact bool
	// paged: single-token rows read through their block tables by the
	// CUDA kernel (table [R, MB], meta [R, 3]); gather and mask invalid.
	paged       bool
	table, meta mlx.Array
}

// Begin reserves the blocks rows need and lays out the step on f. On an
// error nothing was written, but blocks reserved so far stay with their
// sequences (the caller frees the sequences of a failed step).
func (p *Pool) Begin(f *mlx.Frame, rows []Row) (*Batch, error) {
	b := &Batch{p: p, f: f, rows: rows, start: make([]int, len(rows)), g: make([]*groupStep, len(p.groups)), gc: make([]*groupStep, len(p.groups))}
	for r, row := range rows {
		if row.Seq == nil || row.Seq.p != p {
			return nil, fmt.Errorf("kvpool: row %d: sequence of another pool", r)
		}
		if len(row.Tokens) == 0 {
			return nil, fmt.Errorf("kvpool: row %d adds no tokens", r)
		}
		if err := row.Seq.reserve(row.Seq.n + len(row.Tokens)); err != nil {
			return nil, err
		}
		b.start[r] = len(b.Tokens)
		from, to := row.Seq.n, row.Seq.n+len(row.Tokens)
		for _, sp := range row.Spans {
			if sp.End <= from || sp.Start >= to {
				continue
			}
			if sp.End > to || sp.Start >= sp.End {
				return nil, fmt.Errorf("kvpool: row %d: span [%d, %d) does not end within the step's positions [%d, %d)", r, sp.Start, sp.End, from, to)
			}
			b.spans = true
		}
		for t, id := range row.Tokens {
			pos := row.Seq.n + t
			last := pos
			for _, sp := range row.Spans {
				if pos >= sp.Start && pos < sp.End {
					last = sp.End - 1
				}
			}
			b.Tokens = append(b.Tokens, id)
			b.Positions = append(b.Positions, int32(pos))
			b.last = append(b.last, int32(last))
			b.rowOf = append(b.rowOf, int32(r))
		}
		if row.Sample {
			b.SampleAt = append(b.SampleAt, int32(len(b.Tokens)-1))
		}
	}
	return b, nil
}

// BeginNext is Begin for decode rows whose one new token each is not on
// the host yet: ids, [len(rows)] int32 on the device (the picks of a step
// still running), in row order. Rows' Tokens are ignored. It refuses a row
// whose next position would need a new block, so a step built ahead and
// then dropped never changes what sequences hold; Resolve gives the batch
// its host tokens before Commit.
func (p *Pool) BeginNext(f *mlx.Frame, rows []Row, ids mlx.Array) (*Batch, error) {
	next := make([]Row, len(rows))
	for r, row := range rows {
		if row.Seq == nil || row.Seq.n%BlockTokens == 0 {
			return nil, fmt.Errorf("kvpool: row %d: its next position starts a block", r)
		}
		next[r] = row
		next[r].Tokens = []int32{-1}
		next[r].Spans = nil
		next[r].Embeds = nil
	}
	b, err := p.Begin(f, next)
	if err != nil {
		return nil, err
	}
	b.lazy = true
	b.tokens = f.Reshape(f.AsType(ids, mlx.Int32), 1, len(rows))
	return b, nil
}

// Resolve gives a BeginNext batch its rows' tokens, once they are known,
// in row order.
func (b *Batch) Resolve(tokens []int32) {
	for r := range b.rows {
		b.rows[r].Tokens = []int32{tokens[r]}
		b.Tokens[b.start[r]] = tokens[r]
	}
}

// CheckTokens reports a token id outside [0, vocab). The ids of a BeginNext
// batch are a model's own picks over its vocabulary and are not checked.
func (b *Batch) CheckTokens(vocab int) error {
	if b.lazy {
		return nil
	}
	for _, id := range b.Tokens {
		if id < 0 || int(id) >= vocab {
			return fmt.Errorf("token id %d outside vocabulary of %d", id, vocab)
		}
	}
	return nil
}

// Overlay returns the step's input embeddings: x, the token embeddings
// [1, N, hidden], with every row's Embeds written over the positions they
// cover. x is returned as it is when the step reaches no embed. It fails the
// frame when an embed's data is not Rows x hidden.
func (b *Batch) Overlay(x mlx.Array) mlx.Array {
	f := b.f
	if f.Err() != nil || !x.Valid() {
		return x
	}
	N := len(b.Tokens)
	H := x.Dim(-1)
	var soft []float32
	var idx []int32
	for r, row := range b.rows {
		from := row.Seq.n
		for _, e := range row.Embeds {
			if e.Rows <= 0 || len(e.Data) != e.Rows*H {
				f.Fail(fmt.Errorf("kvpool: row %d: embed at %d holds %d values, want %d rows of %d", r, e.Pos, len(e.Data), e.Rows, H))
				return x
			}
			lo, hi := max(e.Pos, from), min(e.Pos+e.Rows, from+len(row.Tokens))
			if lo >= hi {
				continue
			}
			if idx == nil {
				idx = make([]int32, N)
				for i := range idx {
					idx[i] = int32(i)
				}
			}
			for pos := lo; pos < hi; pos++ {
				idx[b.start[r]+pos-from] = int32(N + len(soft)/H)
				soft = append(soft, e.Data[(pos-e.Pos)*H:(pos-e.Pos+1)*H]...)
			}
		}
	}
	if idx == nil {
		return x
	}
	all := f.Concatenate(0, f.Reshape(x, N, H), f.AsType(f.Float32s(soft, len(soft)/H, H), x.Dtype()))
	return f.Reshape(f.Take(all, f.Int32s(idx, N), 0), 1, N, H)
}

// N is the number of tokens in the step.
func (b *Batch) N() int { return len(b.Tokens) }

// TokenIDs is the step's tokens as [1, N] int32.
func (b *Batch) TokenIDs() mlx.Array {
	if !b.tokens.Valid() {
		b.tokens = b.f.Int32s(b.Tokens, 1, len(b.Tokens))
	}
	return b.tokens
}

// PositionIDs is the position of each token, [N] int32.
func (b *Batch) PositionIDs() mlx.Array {
	if !b.positions.Valid() {
		b.positions = b.f.Int32s(b.Positions, len(b.Positions))
	}
	return b.positions
}

// LogitRows is where the forward pass computes logits: SampleAt, or the
// step's last token when no row samples (a step's writes to the pool are
// evaluated through its output, so it always has one).
func (b *Batch) LogitRows() []int32 {
	if len(b.SampleAt) == 0 {
		return []int32{int32(len(b.Tokens) - 1)}
	}
	return b.SampleAt
}

// SampleIndex is LogitRows as an int32 array.
func (b *Batch) SampleIndex() mlx.Array {
	if !b.sampleAt.Valid() {
		at := b.LogitRows()
		b.sampleAt = b.f.Int32s(at, len(at))
	}
	return b.sampleAt
}

// Commit records the step's tokens as stored and lets sliding groups drop
// the blocks no later query can see. Call it once the forward pass has
// evaluated without error.
func (b *Batch) Commit() { b.CommitRows(nil) }

// CommitRows is Commit for the rows r with keep[r] (every row when keep is
// nil); the others' sequences stay as they were before the step (what the
// step wrote past their length is never read).
func (b *Batch) CommitRows(keep []bool) {
	for r, row := range b.rows {
		if keep != nil && !keep[r] {
			continue
		}
		s := row.Seq
		before := s.n
		s.toks = append(s.toks[:s.n], row.Tokens...)
		s.n += len(row.Tokens)
		if b.p.onFull != nil {
			for j := before / BlockTokens; j < s.n/BlockTokens; j++ {
				b.p.onFull(s, j)
			}
		}
		s.trim()
	}
}

// keyRange is the span of positions row r's queries read in a group of
// window w: lo .. hi.
func (b *Batch) keyRange(r, w int) (lo, hi int) {
	s := b.rows[r].Seq
	hi = s.n + len(b.rows[r].Tokens) - 1
	if w > 0 {
		lo = max(0, s.n-w+1)
	}
	return lo, hi
}

// keyCount is how many keys row r sees in group gi.
func (b *Batch) keyCount(r, gi int) int {
	lo, hi := b.keyRange(r, b.p.groups[gi].window)
	return hi - lo + 1
}

func (b *Batch) step(gi int, causal bool) *groupStep {
	steps := b.g
	if causal && b.spans {
		steps = b.gc
	} else {
		causal = false
	}
	if steps[gi] != nil {
		return steps[gi]
	}
	gs := &groupStep{}
	steps[gi] = gs
	f, N, R := b.f, len(b.Tokens), len(b.rows)
	slots := make([]int32, N)
	for i := range slots {
		slots[i] = b.rows[b.rowOf[i]].Seq.slot(gi, int(b.Positions[i]))
	}
	gs.slots = slots
	if b.p.fused {
		all := make([]int, R)
		for r := range all {
			all[r] = r
		}
		table := b.blockTable(gi, all)
		meta := make([]int32, 3*N)
		for i := range N {
			meta[3*i], meta[3*i+1], meta[3*i+2] = b.rowOf[i], b.Positions[i], b.lastSeen(i, causal)
		}
		gs.write, gs.table, gs.meta = f.Int32s(slots, N), table, f.Int32s(meta, N, 3)
		return gs
	}
	// Decode rows form one part and prefill rows another, so a long chunk
	// does not pad every decode row to its length.
	var decode, prefill []int
	for r, row := range b.rows {
		if len(row.Tokens) == 1 {
			decode = append(decode, r)
		} else {
			prefill = append(prefill, r)
		}
	}
	oIdx := make([]int32, N)
	base := 0
	for _, rows := range [][]int{decode, prefill} {
		if len(rows) == 0 {
			continue
		}
		var part opsPart
		paged := b.p.decode != decodeOps && len(b.rows[rows[0]].Tokens) == 1
		// The kernel, unless a lone row past loneKeys keys has them as a
		// view of the pool (the split kernel takes every row).
		view := !paged || len(rows) == 1 && b.p.decode == decodePaged && b.keyCount(rows[0], gi) > b.p.loneKeys
		if view {
			part = b.opsPart(gi, rows, causal)
		}
		if paged && (!view || part.from < 0) {
			part = b.pagedPart(gi, rows, causal)
		}
		for j, r := range rows {
			for t := range b.rows[r].Tokens {
				oIdx[b.start[r]+t] = int32(base + j*part.Tq + t)
			}
		}
		base += part.R * part.Tq
		gs.parts = append(gs.parts, part)
	}
	if base != N || !isRun(oIdx, 0) {
		gs.oIdx = f.Int32s(oIdx, N)
	}
	return gs
}

// lastSeen is the last position flat token i attends to: its span's
// last, or its own when causal.
func (b *Batch) lastSeen(i int, causal bool) int32 {
	if causal {
		return b.Positions[i]
	}
	return b.last[i]
}

// opsPart lays out one padded attention over rows of group gi; causal
// ignores the rows' spans.
func (b *Batch) opsPart(gi int, rows []int, causal bool) opsPart {
	f, g := b.f, b.p.groups[gi]
	part := opsPart{R: len(rows)}
	for _, r := range rows {
		lo, hi := b.keyRange(r, g.window)
		part.L = max(part.L, hi-lo+1)
		part.Tq = max(part.Tq, len(b.rows[r].Tokens))
	}
	// A lone row needs no padding and, but for a sliding prefill chunk, no
	// mask: its exact keys go to the fused attention kernels that refuse
	// masks (CUDA's), causal for a chunk (MLX aligns the chunk's queries
	// with the last keys).
	part.exact = part.R == 1 && (part.Tq == 1 || g.window == 0) && (!b.spans || causal)
	if !part.exact {
		part.L = (part.L + BlockTokens - 1) / BlockTokens * BlockTokens
	}
	R, L, Tq := part.R, part.L, part.Tq
	gather := make([]int32, R*L)
	qIdx := make([]int32, R*Tq)
	var mask []int32 // 1 where a query sees a key
	if !part.exact {
		mask = make([]int32, R*Tq*L)
	}
	for j, r := range rows {
		s := b.rows[r].Seq
		n := len(b.rows[r].Tokens)
		lo, hi := b.keyRange(r, g.window)
		for k := range L {
			pos := lo
			if lo+k <= hi {
				pos = lo + k
			}
			gather[j*L+k] = s.slot(gi, pos)
		}
		for t := range Tq {
			if t >= n {
				// A padding query sees one key, so its softmax stays finite.
				qIdx[j*Tq+t] = int32(b.start[r])
				if mask != nil {
					mask[(j*Tq+t)*L] = 1
				}
				continue
			}
			qIdx[j*Tq+t] = int32(b.start[r] + t)
			if mask == nil {
				continue
			}
			p, last := s.n+t, int(b.lastSeen(b.start[r]+t, causal))
			for k := range L {
				if kp := lo + k; kp <= last && (g.window == 0 || p-kp < g.window) {
					mask[(j*Tq+t)*L+k] = 1
				}
			}
		}
	}
	// Keys in consecutive slots (a row within one block, or blocks
	// allocated in a run) are a slice of the pool: a view, where a gather
	// would copy them.
	part.from = -1
	if len(gather) > 0 && isRun(gather, gather[0]) {
		part.from = int(gather[0])
	} else {
		part.gather = f.Int32s(gather, R*L)
	}
	if len(qIdx) != len(b.Tokens) || !isRun(qIdx, 0) {
		part.qIdx = f.Int32s(qIdx, R*Tq)
	}
	if mask != nil {
		part.mask = f.Greater(f.Int32s(mask, R, 1, Tq, L), f.ScalarInt(0))
	}
	return part
}

// pagedPart lays out single-token rows of group gi for the CUDA paged
// decode kernel: each row's block table and each query's (row, position,
// last visible position).
func (b *Batch) pagedPart(gi int, rows []int, causal bool) opsPart {
	f := b.f
	part := opsPart{R: len(rows), Tq: 1, paged: true, from: -1, table: b.blockTable(gi, rows)}
	meta := make([]int32, 3*len(rows))
	qIdx := make([]int32, len(rows))
	for j, r := range rows {
		i := b.start[r]
		meta[3*j], meta[3*j+1], meta[3*j+2] = int32(j), b.Positions[i], b.lastSeen(i, causal)
		qIdx[j] = int32(i)
	}
	part.meta = f.Int32s(meta, len(rows), 3)
	if len(qIdx) != len(b.Tokens) || !isRun(qIdx, 0) {
		part.qIdx = f.Int32s(qIdx, len(rows))
	}
	return part
}

// blockTable is the block tables of rows in group gi as one [len(rows),
// MB] array, shorter tables padded with -1.
func (b *Batch) blockTable(gi int, rows []int) mlx.Array {
	mb := 1
	for _, r := range rows {
		mb = max(mb, len(b.rows[r].Seq.tab[gi]))
	}
	table := make([]int32, len(rows)*mb)
	for j, r := range rows {
		t := b.rows[r].Seq.tab[gi]
		copy(table[j*mb:], t)
		for k := len(t); k < mb; k++ {
			table[j*mb+k] = -1
		}
	}
	return b.f.Int32s(table, len(rows), mb)
}

// isRun reports whether xs is from, from+1, from+2, ...
func isRun(xs []int32, from int32) bool {
	for i, x := range xs {
		if x != from+int32(i) {
			return false
		}
	}
	return true
}

// KernelStore is where the kernel that makes layer li's keys and values
// this step may write them into the pool itself (mlx.KVStore, for
// mlx.Frame.HeadsRoPE and the products fused with it), or the zero
// KVStore where Attend must store them. A kernel writes the pool's arrays
// in place though MLX sees them only as its inputs; that is sound only
// where nothing reads the pool in the step before the layer's attention,
// and the attention reads it only through ops that take the queries the
// same kernel makes. So it is offered for steps of single-token rows on
// CUDA (the paged kernel, or MLX's attention over a view of the pool for
// a lone row), for a layer that owns its storage, unless
// PROVIDER_GPU_KV_STORE=0. A caller whose kernel wrote them calls Stored
// before Attend.
func (b *Batch) KernelStore(li int) mlx.KVStore {
	p := b.p
	gi, src, shared := p.source(li)
	if !p.kernelStore || shared || len(b.Tokens) != len(b.rows) || b.f.Err() != nil {
		return mlx.KVStore{}
	}
	gs := b.step(gi, false)
	if !gs.slotIDs.Valid() {
		gs.slotIDs = b.f.Int32s(gs.slots, len(gs.slots))
	}
	return mlx.KVStore{K: p.k[src], V: p.v[src], Slots: gs.slotIDs}
}

// Stored tells Attend that a kernel wrote layer li's keys and values into
// the pool through KernelStore: Attend then only reads them.
func (b *Batch) Stored(li int) {
	if b.stored == nil {
		b.stored = make([]bool, len(b.p.layers))
	}
	b.stored[li] = true
}

// Attend stores layer li's new keys and values k, v ([N, KVHeads, HeadDim];
// ignored for a layer that shares another's storage, or whose kernel
// stored them itself: Stored) and returns the
// attention of q [N, Heads, HeadDim] for every token of the step over its
// own row's keys: causal (a token of one of the row's spans also sees the
// span's later tokens), within the layer's window, GQA by head groups,
// sinks (one logit per head, may be invalid) in each softmax's denominator.
// The result is [N, Heads, HeadDim] in the activation dtype.
func (b *Batch) Attend(li int, q, k, v mlx.Array, scale float32, sinks mlx.Array) mlx.Array {
	return b.attend(li, q, k, v, scale, sinks, false)
}

// AttendCausal is Attend with the rows' spans ignored: every token
// attends causally, inside a span too (a layer that a model keeps causal
// over an image, such as Gemma 4's full-attention layers).
func (b *Batch) AttendCausal(li int, q, k, v mlx.Array, scale float32, sinks mlx.Array) mlx.Array {
	return b.attend(li, q, k, v, scale, sinks, true)
}

func (b *Batch) attend(li int, q, k, v mlx.Array, scale float32, sinks mlx.Array, causal bool) mlx.Array {
	p, f := b.p, b.f
	if f.Err() != nil {
		return mlx.Array{}
	}
	gi, src, shared := p.source(li)
	if shared {
		k, v = mlx.Array{}, mlx.Array{}
	}
	gs := b.step(gi, causal)
	if p.fused {
		return f.PagedAttention(q, k, v, p.k[src], p.v[src], gs.write, gs.table, gs.meta, BlockTokens, p.groups[gi].window, scale, sinks)
	}
	if k.Valid() && (b.stored == nil || !b.stored[li]) {
		b.store(src, gs, k, v)
	}
	l := p.layers[src]
	H, D := q.Dim(1), q.Dim(2)
	outs := make([]mlx.Array, len(gs.parts))
	for i, part := range gs.parts {
		// [R, KVHeads, L, HeadDim]: consecutive slots as one view of the
		// pool [slots, KVHeads, HeadDim], others gathered.
		keys := func(pool mlx.Array) mlx.Array {
			if part.from >= 0 {
				kd := l.KVHeads * l.HeadDim
				return f.ViewStrided(pool, []int{part.R, l.KVHeads, part.L, l.HeadDim}, []int{part.L * kd, l.HeadDim, kd, 1}, part.from*kd)
			}
			x := f.Reshape(f.Take(pool, part.gather, 0), part.R, part.L, l.KVHeads, l.HeadDim)
			return f.Transpose(x, 0, 2, 1, 3)
		}
		qp := q
		if part.qIdx.Valid() {
			qp = f.Take(q, part.qIdx, 0)
		}
		if part.paged {
			outs[i] = f.PagedDecode(qp, p.k[src], p.v[src], part.table, part.meta, BlockTokens, p.groups[gi].window, scale, sinks,
				pagedKeys, p.decode == decodeSplit)
			continue
		}
		// [R, H, Tq, D] for the attention; one query needs no transpose
		// (every view is a primitive the host builds and MLX walks each step).
		one := part.R*part.Tq == 1
		var qq mlx.Array
		if one {
			qq = f.Reshape(qp, 1, H, 1, D)
		} else {
			qq = f.Transpose(f.Reshape(qp, part.R, part.Tq, H, D), 0, 2, 1, 3)
		}
		mode := "array"
		switch {
		case part.exact && part.Tq > 1:
			mode = "causal"
		case part.exact:
			mode = ""
		}
		o := f.Attention(qq, keys(p.k[src]), keys(p.v[src]), scale, mode, part.mask, sinks)
		if one {
			outs[i] = f.Reshape(o, 1, H, D)
		} else {
			outs[i] = f.Reshape(f.Transpose(o, 0, 2, 1, 3), part.R*part.Tq, H, D)
		}
	}
	o := outs[0]
	if len(outs) > 1 {
		o = f.Concatenate(0, outs...)
	}
	if gs.oIdx.Valid() {
		o = f.Take(o, gs.oIdx, 0)
	}
	return o
}

// source is layer li's group and the layer whose storage it reads (itself
// unless it shares another's).
func (p *Pool) source(li int) (group, src int, shared bool) {
	if from := p.layers[li].SharedFrom; from >= 0 {
		return p.group[li], from, true
	}
	return p.group[li], li, false
}

// store scatters the step's keys and values into layer li's pools. The
// pool's old arrays are released before evaluation so MLX updates them in
// place.
func (b *Batch) store(li int, gs *groupStep, k, v mlx.Array) {
	p, f := b.p, b.f
	l := p.layers[li]
	if !gs.scatter.Valid() {
		gs.scatter = f.Int32s(gs.slots, len(gs.slots), 1, 1)
	}
	if !gs.idx.Valid() || gs.idxKV != l.KVHeads || gs.idxDim != l.HeadDim {
		gs.idx, gs.idxKV, gs.idxDim = f.BroadcastTo(gs.scatter, len(b.Tokens), l.KVHeads, l.HeadDim), l.KVHeads, l.HeadDim
	}
	idx := gs.idx
	for _, x := range []struct {
		pool *mlx.Array
		val  mlx.Array
	}{{&p.k[li], k}, {&p.v[li], v}} {
		// The frame keeps no reference to the new array: the next step's
		// store can update it in place even while this frame lives (a
		// step built ahead of the read of this one).
		updated := f.Detach(f.PutAlongAxis(*x.pool, idx, f.AsType(x.val, p.dtype), 0))
		if !updated.Valid() {
			return
		}
		x.pool.Free()
		*x.pool = updated
	}
}

// AttendRows is Attend for attention that must run one row at a time
// (reference numerics): it stores k and v as Attend does, then calls fn
// for each row with its queries [1, Heads, T, HeadDim] and its keys and
// values [1, KVHeads, S, HeadDim] (the row's positions lo .. its last, lo
// being where the layer's window starts for the row's first new token),
// fn returning [1, Heads, T, HeadDim]. The result is [N, Heads, HeadDim].
func (b *Batch) AttendRows(li int, q, k, v mlx.Array, fn func(q, k, v mlx.Array) mlx.Array) mlx.Array {
	p, f := b.p, b.f
	if f.Err() != nil {
		return mlx.Array{}
	}
	if b.spans {
		f.Fail(fmt.Errorf("kvpool: row-by-row attention has no bidirectional spans"))
		return mlx.Array{}
	}
	if b.stored != nil && b.stored[li] {
		// Its reads of the pool would not wait for the kernel's writes.
		f.Fail(fmt.Errorf("kvpool: layer %d: row-by-row attention over keys a kernel stored (KernelStore is for Attend)", li))
		return mlx.Array{}
	}
	gi, src, shared := p.source(li)
	if !shared {
		b.store(src, b.step(gi, false), k, v)
	}
	l := p.layers[src]
	H, D := q.Dim(1), q.Dim(2)
	out := make([]mlx.Array, len(b.rows))
	for r, row := range b.rows {
		lo, hi := b.keyRange(r, p.groups[gi].window)
		idx := make([]int32, 0, hi-lo+1)
		for pos := lo; pos <= hi; pos++ {
			idx = append(idx, row.Seq.slot(gi, pos))
		}
		ix := f.Int32s(idx, len(idx))
		kv := func(pool mlx.Array) mlx.Array {
			return f.Transpose(f.Reshape(f.Take(pool, ix, 0), 1, len(idx), l.KVHeads, l.HeadDim), 0, 2, 1, 3)
		}
		T := len(row.Tokens)
		qr := f.Slice(q, []int{b.start[r], 0, 0}, []int{b.start[r] + T, H, D})
		qr = f.Transpose(f.Reshape(qr, 1, T, H, D), 0, 2, 1, 3)
		o := fn(qr, kv(p.k[src]), kv(p.v[src]))
		out[r] = f.Reshape(f.Transpose(o, 0, 2, 1, 3), T, H, D)
	}
	if len(out) == 1 {
		return out[0]
	}
	return f.Concatenate(0, out...)
}
