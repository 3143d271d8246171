package kvpool

import (
	"errors"
	"fmt"
	"os"
	"strconv"

	"github.com/goprovider/provider/mlx"
)

// BlockTokens is how many token positions one block holds: the unit of
// allocation, of the ledger's charge and of the prefix cache.
const BlockTokens = 256

// Layer is one transformer layer's KV geometry.
type Layer struct {
	KVHeads, HeadDim int
	// Window is the sliding-window length in tokens; 0 is full attention.
	Window int
	// SharedFrom is -1 when the layer owns its keys and values, else the
	// layer whose pool it reads (that layer must own storage).
	SharedFrom int
}

// ErrFull: the pool may not grow to the blocks a step needs.
var ErrFull = errors.New("kvpool: out of blocks")

// Options configure a Pool.
type Options struct {
	// MaxBytes bounds the pool's storage; 0 is unbounded (the engine's
	// ledger bounds what rows may hold).
	MaxBytes int64
	// Ops forces the MLX-ops attention path even where the fused CPU kernel
	// applies (for tests that compare the two).
	Ops bool
}

// Pool is the KV storage of every row of one model: per storage-owning
// layer one key and one value array of [blocks*BlockTokens, KVHeads,
// HeadDim], and per group of layers with the same window one block
// allocator. All methods run on the MLX thread.
type Pool struct {
	s      mlx.Stream
	dtype  mlx.Dtype
	opt    Options
	fused  bool
	decode decodePath
	// loneKeys: with decodePaged, a lone row that sees at most this many
	// keys attends through the kernel even where its keys are a view.
	loneKeys int
	// kernelStore: decode steps may have the kernel that makes a layer's
	// keys and values write them into the pool (Batch.KernelStore).
	kernelStore bool
	layers      []Layer
	group       []int // per layer, sharing layers included
	groups      []*group
	k, v        []mlx.Array // per layer; invalid for sharing layers
	// onFull is told of every block a step fills, before sliding groups
	// let go of it (see SetOnFull).
	onFull func(s *Seq, block int)
}

// group is the block allocator of the layers with one window.
type group struct {
	window int
	// ring is how many of its newest blocks a sequence keeps between
	// steps; 0 keeps all (full attention).
	ring       int
	layers     []int // storage-owning layers
	blocks     int   // allocated
	free       []int32
	refs       []int32
	blockBytes int64 // one block across the group's layers, keys and values
}

// RingBlocks is how many blocks a sliding layer of window w keeps between
// steps: enough for the w-1 positions before the next query, wherever the
// block boundaries fall.
func RingBlocks(w int) int {
	if w <= 0 {
		return 0
	}
	return (w-1+BlockTokens-1)/BlockTokens + 1
}

// decodePath is how single-token rows attend on a GPU.
type decodePath uint8

const (
	// decodeOps: MLX's attention over gathered keys (or a view of the
	// pool), as prefill chunks do.
	decodeOps decodePath = iota
	// decodePaged: the CUDA paged decode kernel, but for a lone row whose
	// keys lie in consecutive slots (MLX's attention over a view of the
	// pool).
	decodePaged
	// decodeSplit: every row through the split kernel.
	decodeSplit
)

// pagedKeys is how many consecutive keys each warp of the CUDA paged
// decode kernel takes per turn (the tests also run 1).
var pagedKeys = 4

// pagedHeads reports whether the paged decode kernel takes every layer's
// head size (a multiple of 32, at most 512); a pool with others (the tiny
// test checkpoints) attends through the MLX-ops path.
func pagedHeads(layers []Layer) bool {
	for _, l := range layers {
		if l.HeadDim%32 != 0 || l.HeadDim > 512 {
			return false
		}
	}
	return true
}

// New makes an empty pool for layers whose cached elements have dtype d,
// on stream s (which must outlive the pool).
func New(s mlx.Stream, d mlx.Dtype, layers []Layer, opt Options) (*Pool, error) {
	p := &Pool{s: s, dtype: d, opt: opt, layers: layers, group: make([]int, len(layers)),
		k: make([]mlx.Array, len(layers)), v: make([]mlx.Array, len(layers))}
	p.fused = !opt.Ops && d == mlx.Float32 && s.IsCPU()
	// On CUDA, decode rows attend through the paged kernel unless
	// PROVIDER_GPU_PAGED=0 keeps the MLX-ops path; =split sends every
	// single-token row through the split kernel (mlx PagedDecode with split).
	if !opt.Ops && !s.IsCPU() {
		switch v := os.Getenv("PROVIDER_GPU_PAGED"); v {
		case "", "1", "split":
			ok, err := mlx.CUDAAvailable()
			if err != nil {
				return nil, err
			}
			switch {
			case !ok || !pagedHeads(layers):
			case v == "split":
				p.decode = decodeSplit
			default:
				p.decode = decodePaged
			}
		case "0":
		default:
			return nil, fmt.Errorf("kvpool: PROVIDER_GPU_PAGED=%q: want 0, 1 or split", v)
		}
		// PROVIDER_GPU_KV_STORE=0: decode steps scatter their keys and
		// values into the pool, never through the kernel that makes them.
		switch v := os.Getenv("PROVIDER_GPU_KV_STORE"); v {
		case "", "1":
			p.kernelStore = p.decode != decodeOps
		case "0":
		default:
			return nil, fmt.Errorf("kvpool: PROVIDER_GPU_KV_STORE=%q: want 0 or 1", v)
		}
		// PROVIDER_GPU_PAGED_LONE: the most keys a lone decode row may see
		// and still go through the paged kernel rather than MLX's attention
		// over a view (default 0: never).
		if v := os.Getenv("PROVIDER_GPU_PAGED_LONE"); v != "" {
			n, err := strconv.Atoi(v)
			if err != nil || n < 0 {
				return nil, fmt.Errorf("kvpool: PROVIDER_GPU_PAGED_LONE=%q: want a count of keys, 0 or more", v)
			}
			p.loneKeys = n
		}
	}
	byWindow := map[int]int{}
	for i, l := range layers {
		if l.SharedFrom >= 0 {
			continue
		}
		if l.KVHeads <= 0 || l.HeadDim <= 0 || l.Window < 0 {
			return nil, fmt.Errorf("kvpool: layer %d: bad geometry %+v", i, l)
		}
		g, ok := byWindow[l.Window]
		if !ok {
			g = len(p.groups)
			byWindow[l.Window] = g
			p.groups = append(p.groups, &group{window: l.Window, ring: RingBlocks(l.Window)})
		}
		p.group[i] = g
		gr := p.groups[g]
		gr.layers = append(gr.layers, i)
		gr.blockBytes += int64(BlockTokens) * 2 * int64(l.KVHeads) * int64(l.HeadDim) * int64(d.Size())
	}
	for i, l := range layers {
		if l.SharedFrom < 0 {
			continue
		}
		j := l.SharedFrom
		if j >= len(layers) || j == i || layers[j].SharedFrom >= 0 {
			return nil, fmt.Errorf("kvpool: layer %d shares layer %d, which owns no storage", i, j)
		}
		p.group[i] = p.group[j]
	}
	return p, nil
}

// Fused reports whether attention runs as the fused in-place CPU kernel.
func (p *Pool) Fused() bool { return p.fused }

// Bytes is the storage the pool has allocated (held and free blocks).
func (p *Pool) Bytes() int64 {
	var n int64
	for _, g := range p.groups {
		n += int64(g.blocks) * g.blockBytes
	}
	return n
}

// HeldBytes is the storage of blocks some sequence holds.
func (p *Pool) HeldBytes() int64 {
	var n int64
	for _, g := range p.groups {
		n += int64(g.blocks-len(g.free)) * g.blockBytes
	}
	return n
}

// Close frees the storage. Sequences of the pool must not be used after.
func (p *Pool) Close() {
	for i := range p.k {
		p.k[i].Free()
		p.v[i].Free()
	}
	for _, g := range p.groups {
		g.blocks, g.free, g.refs = 0, nil, nil
	}
}

// alloc takes one block of group g, growing the storage when none is free.
func (p *Pool) alloc(gi int) (int32, error) {
	g := p.groups[gi]
	if len(g.free) == 0 {
		if err := p.grow(gi); err != nil {
			return -1, err
		}
	}
	b := g.free[len(g.free)-1]
	g.free = g.free[:len(g.free)-1]
	g.refs[b] = 1
	return b, nil
}

// Retain adds a reference to block b of group g: a holder other than a
// sequence (the prefix cache) keeps it allocated.
func (p *Pool) Retain(g int, b int32) {
	if p.groups[g].refs[b] <= 0 {
		panic(fmt.Sprintf("kvpool: block %d of group %d retained while free", b, g))
	}
	p.groups[g].refs[b]++
}

// Release drops a reference Retain added.
func (p *Pool) Release(g int, b int32) { p.release(g, b) }

// Refs is how many holders block b of group g has.
func (p *Pool) Refs(g int, b int32) int { return int(p.groups[g].refs[b]) }

// Group describes one block allocator: the window of its layers (0: full
// attention), the blocks a sequence keeps between steps (RingBlocks; 0:
// all) and the bytes of one block across its layers.
type Group struct {
	Window, Ring int
	BlockBytes   int64
}

// Groups describes the pool's groups in order; a block id is per group.
func (p *Pool) Groups() []Group {
	out := make([]Group, len(p.groups))
	for i, g := range p.groups {
		out[i] = Group{Window: g.window, Ring: g.ring, BlockBytes: g.blockBytes}
	}
	return out
}

// SetOnFull registers fn to be told, at each Commit, of every logical block
// the step filled (all BlockTokens positions stored), before sliding groups
// let go of it: fn may Retain the block's physical blocks (Seq.Block) to
// keep them past the sequence's hold. nil unregisters.
func (p *Pool) SetOnFull(fn func(s *Seq, block int)) { p.onFull = fn }

// release drops a reference; the last one returns the block.
func (p *Pool) release(gi int, b int32) {
	g := p.groups[gi]
	if g.refs[b] <= 0 {
		panic(fmt.Sprintf("kvpool: block %d of group %d released while free", b, gi))
	}
	g.refs[b]--
	if g.refs[b] == 0 {
		g.free = append(g.free, b)
	}
}

// Reserve grows every group's storage to at least blocks blocks, so that
// steps after it find the pool at that size; ErrFull where MaxBytes stops
// a group short of it (grown as far as the bound allows).
func (p *Pool) Reserve(blocks int) error {
	for gi, g := range p.groups {
		if g.blocks >= blocks {
			continue
		}
		if err := p.growTo(gi, blocks); err != nil {
			return err
		}
		if g.blocks < blocks {
			return ErrFull
		}
	}
	return nil
}

// grow doubles group g's storage (at least 4 blocks), copying what it holds.
func (p *Pool) grow(gi int) error {
	return p.growTo(gi, max(2*p.groups[gi].blocks, 4))
}

// growTo makes group g's storage n blocks (within MaxBytes), copying what
// it holds.
func (p *Pool) growTo(gi, n int) error {
	g := p.groups[gi]
	if p.opt.MaxBytes > 0 {
		others := p.Bytes() - int64(g.blocks)*g.blockBytes
		n = min(n, int((p.opt.MaxBytes-others)/g.blockBytes))
		if n <= g.blocks {
			return ErrFull
		}
	}
	for _, li := range g.layers {
		l := p.layers[li]
		for _, a := range []*mlx.Array{&p.k[li], &p.v[li]} {
			var next mlx.Array
			var err error
			if a.Valid() {
				next, err = mlx.GrowBuffer(p.s, *a, n*BlockTokens)
			} else {
				next, err = mlx.NewBuffer(p.s, p.dtype, n*BlockTokens, l.KVHeads, l.HeadDim)
			}
			if err != nil {
				return fmt.Errorf("kvpool: %w", err)
			}
			a.Free()
			*a = next
		}
	}
	// The old arrays' buffers go back to the system now, not to MLX's
	// buffer cache: on CUDA that cache may keep as much as the device's
	// memory limit, and MLX allocates managed memory, so a pool grown to a
	// large share of the card, beside its own cached former copies, would
	// oversubscribe the device and page to the host on every step instead
	// of failing.
	mlx.ClearCache()
	for b := n - 1; b >= g.blocks; b-- {
		g.free = append(g.free, int32(b))
	}
	g.refs = append(g.refs, make([]int32, n-g.blocks)...)
	g.blocks = n
	return nil
}

// Seq is one sequence's block tables: per group, the physical block of each
// logical block (position/BlockTokens), -1 once a sliding group has let it
// go.
type Seq struct {
	p    *Pool
	n    int
	tab  [][]int32
	live []int // per group: first logical block still held
	// toks are the token ids whose keys and values the sequence stores.
	toks []int32
}

// NewSeq returns an empty sequence.
func (p *Pool) NewSeq() *Seq {
	return &Seq{p: p, tab: make([][]int32, len(p.groups)), live: make([]int, len(p.groups))}
}

// Len is the number of tokens the sequence has stored.
func (s *Seq) Len() int { return s.n }

// Tokens are the ids of the tokens the sequence has stored, in order. The
// slice is the sequence's own: read it, do not keep it across steps.
func (s *Seq) Tokens() []int32 { return s.toks[:s.n] }

// Block is, per group, the physical block holding logical block j (its
// positions j*BlockTokens ..), -1 where a sliding group has let it go.
func (s *Seq) Block(j int) []int32 {
	out := make([]int32, len(s.tab))
	for g, tab := range s.tab {
		out[g] = -1
		if j < len(tab) && j >= s.live[g] {
			out[g] = tab[j]
		}
	}
	return out
}

// Adopt makes an empty sequence hold the keys and values of tokens, whose
// len(blocks) = len(tokens)/BlockTokens whole blocks are stored already:
// blocks[j] is Block(j) of their holder. The sequence takes a reference on
// what it keeps between steps (every block of a full-attention group, the
// newest Ring blocks of a sliding group, which must be present); its next
// step continues at position len(tokens).
func (s *Seq) Adopt(tokens []int32, blocks [][]int32) error {
	if s.n != 0 || len(s.toks) != 0 {
		return errors.New("kvpool: Adopt into a sequence that holds tokens")
	}
	if len(tokens) != len(blocks)*BlockTokens {
		return fmt.Errorf("kvpool: Adopt of %d tokens in %d blocks", len(tokens), len(blocks))
	}
	k := len(blocks)
	for g, gr := range s.p.groups {
		first := 0
		if gr.ring > 0 {
			first = max(0, k-gr.ring)
		}
		for j := first; j < k; j++ {
			if len(blocks[j]) != len(s.p.groups) || blocks[j][g] < 0 || s.p.groups[g].refs[blocks[j][g]] <= 0 {
				return fmt.Errorf("kvpool: Adopt: block %d of group %d is not held", j, g)
			}
		}
	}
	for g, gr := range s.p.groups {
		first := 0
		if gr.ring > 0 {
			first = max(0, k-gr.ring)
		}
		s.tab[g] = s.tab[g][:0]
		for j := range k {
			b := int32(-1)
			if j >= first {
				b = blocks[j][g]
				s.p.Retain(g, b)
			}
			s.tab[g] = append(s.tab[g], b)
		}
		s.live[g] = first
	}
	s.toks = append(s.toks[:0], tokens...)
	s.n = len(tokens)
	return nil
}

// Blocks is the number of blocks the sequence holds in each group.
func (s *Seq) Blocks() []int {
	out := make([]int, len(s.tab))
	for g := range s.tab {
		out[g] = len(s.tab[g]) - s.live[g]
	}
	return out
}

// Bytes is the storage of the blocks the sequence holds.
func (s *Seq) Bytes() int64 {
	var n int64
	for g, b := range s.Blocks() {
		n += int64(b) * s.p.groups[g].blockBytes
	}
	return n
}

// Free returns every block; the sequence is empty after.
func (s *Seq) Free() {
	for g := range s.tab {
		for _, b := range s.tab[g][s.live[g]:] {
			s.p.release(g, b)
		}
		s.tab[g], s.live[g] = s.tab[g][:0], 0
	}
	s.n, s.toks = 0, s.toks[:0]
}

// reserve allocates the blocks positions up to total-1 need.
func (s *Seq) reserve(total int) error {
	want := (total + BlockTokens - 1) / BlockTokens
	for g := range s.tab {
		for len(s.tab[g]) < want {
			b, err := s.p.alloc(g)
			if err != nil {
				return err
			}
			s.tab[g] = append(s.tab[g], b)
		}
	}
	return nil
}

// trim lets sliding groups keep only their newest ring blocks.
func (s *Seq) trim() {
	for g, gr := range s.p.groups {
		if gr.ring == 0 {
			continue
		}
		for len(s.tab[g])-s.live[g] > gr.ring {
			s.p.release(g, s.tab[g][s.live[g]])
			s.tab[g][s.live[g]] = -1
			s.live[g]++
		}
	}
}

// slot is the pool row of position pos in group g.
func (s *Seq) slot(g, pos int) int32 {
	return s.tab[g][pos/BlockTokens]*BlockTokens + int32(pos%BlockTokens)
}
