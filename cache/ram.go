package cache

import (
	"cmp"
	"fmt"
	"slices"
	"sync"

	"github.com/goprovider/provider/kvpool"
)

// Index is the RAM tier: full blocks that rows of one model's pool stored,
// kept by a reference of their own and found again by chain key. It holds,
// for every group of the pool, the block of each entry (a sliding group's
// too, so adoption needs no recompute), and lets go of least recently used
// blocks no row holds once they exceed its byte budget.
//
// Every method but Has and Stats runs on the pool's MLX thread.
type Index struct {
	pool   *kvpool.Pool
	ns     Namespace
	groups []kvpool.Group
	budget int64

	mu      sync.Mutex // guards entries for Has; the rest is MLX-thread only
	entries map[uint64]*entry
	tracks  map[*kvpool.Seq]*track
	clock   uint64 // advances on every use, orders eviction
	stats   Stats
	// persist, when set, is handed every block the index registers.
	persist func(b Stored)
}

// entry is one cached block.
type entry struct {
	key, parent uint64
	root        bool
	scope       Scope
	tokens      []int32 // the block's own BlockTokens ids
	depth       int     // block index in its chain
	blocks      []int32 // per pool group; -1 where not held
	children    int     // entries whose parent this is
	used        uint64
}

// track is a sequence whose full blocks the index registers: its scope,
// its media spans and the keys of the blocks registered (or adopted) so
// far.
type track struct {
	scope Scope
	spans []Span
	keys  []uint64
}

// Stats counts what the RAM tier did.
type Stats struct {
	// Lookups that adopted at least one block, and those that adopted none.
	Hits, Misses uint64
	// TokensSaved sums the tokens adopted instead of computed.
	TokensSaved uint64
	// Collisions counts chain keys found holding other tokens (never used).
	Collisions uint64
	// Evicted counts blocks let go to stay within the budget.
	Evicted uint64
	// Entries is the blocks indexed; Bytes is the storage only the index
	// holds (what the budget bounds); SharedBytes is what it holds together
	// with running rows.
	Entries            int
	Bytes, SharedBytes int64
	Budget             int64
	// Disk is the SSD tier's counters when DiskOn (the engine fills them).
	Disk   DiskStats
	DiskOn bool
}

// Stored is a block the index registered: what the disk tier persists.
type Stored struct {
	Scope Scope
	Key   uint64
	// Prefix is every token up to the end of the block.
	Prefix []int32
	// Blocks is the block's physical block per pool group.
	Blocks []int32
}

// NewIndex indexes the full blocks of pool's sequences under ns, keeping at
// most budget bytes of blocks no sequence holds. It registers itself as the
// pool's full-block hook.
func NewIndex(pool *kvpool.Pool, ns Namespace, budget int64) *Index {
	x := &Index{pool: pool, ns: ns, groups: pool.Groups(), budget: budget,
		entries: map[uint64]*entry{}, tracks: map[*kvpool.Seq]*track{}}
	pool.SetOnFull(x.full)
	return x
}

// OnStore sets fn to be handed every block the index registers, on the MLX
// thread, right after its step (the disk tier's write-behind).
func (x *Index) OnStore(fn func(Stored)) { x.persist = fn }

// Track makes the index register s's full blocks as they fill, under scope,
// with spans its media placeholders. s must be empty.
func (x *Index) Track(s *kvpool.Seq, scope Scope, spans []Span) {
	x.tracks[s] = &track{scope: scope, spans: spans}
}

// Untrack stops registering s's blocks (call it before freeing s); what is
// registered stays.
func (x *Index) Untrack(s *kvpool.Seq) { delete(x.tracks, s) }

// Has reports whether a block of that key is indexed. Any goroutine.
func (x *Index) Has(key uint64) bool {
	x.mu.Lock()
	defer x.mu.Unlock()
	_, ok := x.entries[key]
	return ok
}

// Adopt gives the empty sequence s the longest cached prefix of tokens
// (whose media placeholders are spans) under scope, at most limit blocks,
// and tracks s for its later blocks. It returns the tokens adopted (a
// multiple of BlockTokens, 0 on a miss). Every block used is checked
// against the request: its stored tokens, parent and scope, not only its
// key, which also holds the media.
func (x *Index) Adopt(s *kvpool.Seq, scope Scope, spans []Span, tokens []int32, limit int) (int, error) {
	ents, collided := x.match(scope, spans, tokens, limit)
	if collided {
		x.stats.Collisions++
	}
	x.clock++
	for _, e := range ents {
		e.used = x.clock
	}
	tr := &track{scope: scope, spans: spans}
	x.tracks[s] = tr
	if len(ents) == 0 {
		x.stats.Misses++
		return 0, nil
	}
	blocks := make([][]int32, len(ents))
	for j, e := range ents {
		blocks[j] = e.blocks
		tr.keys = append(tr.keys, e.key)
	}
	n := len(ents) * BlockTokens
	if err := s.Adopt(tokens[:n], blocks); err != nil {
		delete(x.tracks, s)
		return 0, fmt.Errorf("cache: %w", err)
	}
	x.stats.Hits++
	x.stats.TokensSaved += uint64(n)
	return n, nil
}

// Cached is how many tokens Adopt would adopt now, without adopting,
// counting or touching anything.
func (x *Index) Cached(scope Scope, spans []Span, tokens []int32, limit int) int {
	ents, _ := x.match(scope, spans, tokens, limit)
	return len(ents) * BlockTokens
}

// match walks the chain of tokens' blocks and returns the entries of the
// longest prefix a sequence can adopt: every full-attention group's block
// present along the way, and each sliding group's newest Ring blocks.
// collided reports a key found holding other tokens; match counts nothing.
func (x *Index) match(scope Scope, spans []Span, tokens []int32, limit int) (ents []*entry, collided bool) {
	limit = min(limit, len(tokens)/BlockTokens)
	var parent uint64
	for j := range limit {
		block := tokens[j*BlockTokens : (j+1)*BlockTokens]
		key := ChainKey(x.ns, parent, j == 0, scope, blockMedia(spans, j), block)
		e := x.entries[key]
		if e == nil {
			break
		}
		if !e.is(parent, j == 0, scope, block) {
			collided = true
			break
		}
		if !x.holdsFull(e) {
			break
		}
		ents = append(ents, e)
		parent = key
	}
	for k := len(ents); k > 0; k-- {
		if x.ringsHeld(ents[:k]) {
			return ents[:k], collided
		}
	}
	return nil, collided
}

// is reports whether e is the block of tokens after parent under scope.
func (e *entry) is(parent uint64, root bool, scope Scope, tokens []int32) bool {
	if e.root != root || !slices.Equal(e.tokens, tokens) {
		return false
	}
	if root {
		return e.scope == scope
	}
	return e.parent == parent
}

func (x *Index) holdsFull(e *entry) bool {
	for g, gr := range x.groups {
		if gr.Ring == 0 && e.blocks[g] < 0 {
			return false
		}
	}
	return true
}

// ringsHeld reports whether every sliding group holds the blocks a
// sequence adopting ents keeps: the newest Ring of them.
func (x *Index) ringsHeld(ents []*entry) bool {
	k := len(ents)
	for g, gr := range x.groups {
		if gr.Ring == 0 {
			continue
		}
		for j := max(0, k-gr.Ring); j < k; j++ {
			if ents[j].blocks[g] < 0 {
				return false
			}
		}
	}
	return true
}

// full is the pool's hook: block j of s is stored whole. A tracked
// sequence's block is registered (or completes the entry already there)
// and the index takes its own reference on it.
func (x *Index) full(s *kvpool.Seq, j int) {
	tr := x.tracks[s]
	if tr == nil || len(tr.keys) != j {
		return
	}
	block := s.Tokens()[j*BlockTokens : (j+1)*BlockTokens]
	var parent uint64
	var up *entry
	if j > 0 {
		parent = tr.keys[j-1]
		if up = x.entries[parent]; up == nil {
			// The chain above was let go; nothing below it can be found.
			delete(x.tracks, s)
			return
		}
	}
	key := ChainKey(x.ns, parent, j == 0, tr.scope, blockMedia(tr.spans, j), block)
	phys := s.Block(j)
	x.clock++
	e := x.entries[key]
	switch {
	case e == nil:
		e = &entry{key: key, parent: parent, root: j == 0, scope: tr.scope, tokens: slices.Clone(block), depth: j,
			blocks: slices.Repeat([]int32{-1}, len(x.groups))}
		x.mu.Lock()
		x.entries[key] = e
		x.mu.Unlock()
		if up != nil {
			up.children++
		}
	case !e.is(parent, j == 0, tr.scope, block):
		x.stats.Collisions++
		delete(x.tracks, s)
		return
	}
	for g, b := range phys {
		if e.blocks[g] < 0 && b >= 0 {
			x.pool.Retain(g, b)
			e.blocks[g] = b
		}
	}
	e.used = x.clock
	tr.keys = append(tr.keys, key)
	if x.persist != nil {
		x.persist(Stored{Scope: tr.scope, Key: key, Prefix: s.Tokens()[:(j+1)*BlockTokens], Blocks: slices.Clone(e.blocks)})
	}
}

// Insert indexes a block staged from another tier: key's block of prefix
// (whose last BlockTokens tokens are the block's; spans its media),
// stored in blocks, on which the caller hands the index one reference
// each. It reports false, and takes nothing, when the parent is not
// indexed or the key is taken.
func (x *Index) Insert(scope Scope, spans []Span, key uint64, prefix []int32, blocks []int32) bool {
	j := len(prefix)/BlockTokens - 1
	if j < 0 || len(prefix)%BlockTokens != 0 || len(blocks) != len(x.groups) {
		return false
	}
	var parent uint64
	var up *entry
	if j > 0 {
		parent = Chain(x.ns, scope, prefix, spans, j)[j-1]
		if up = x.entries[parent]; up == nil {
			return false
		}
	}
	if _, taken := x.entries[key]; taken {
		return false
	}
	x.clock++
	e := &entry{key: key, parent: parent, root: j == 0, scope: scope, tokens: slices.Clone(prefix[j*BlockTokens:]),
		depth: j, blocks: slices.Clone(blocks), used: x.clock}
	x.mu.Lock()
	x.entries[key] = e
	x.mu.Unlock()
	if up != nil {
		up.children++
	}
	return true
}

// SetBudget changes the byte budget and evicts down to it.
func (x *Index) SetBudget(budget int64) {
	x.budget = max(budget, 0)
	x.Evict()
}

// Evict lets go of least recently used blocks only the index holds until
// they fit the budget: a sliding group's block first goes alone (the entry
// still chains its descendants), a whole entry goes only once no entry
// below it is left.
func (x *Index) Evict() {
	over := x.soleBytes() - x.budget
	if over <= 0 {
		return
	}
	order := make([]*entry, 0, len(x.entries))
	for _, e := range x.entries {
		order = append(order, e)
	}
	// Least recently used first; among equals the deepest, so children go
	// before their parents.
	slices.SortFunc(order, func(a, b *entry) int {
		if c := cmp.Compare(a.used, b.used); c != 0 {
			return c
		}
		if c := cmp.Compare(b.depth, a.depth); c != 0 {
			return c
		}
		return cmp.Compare(a.key, b.key)
	})
	for progress := true; over > 0 && progress; {
		progress = false
		for _, e := range order {
			if over <= 0 {
				break
			}
			if _, live := x.entries[e.key]; !live {
				continue
			}
			for g, gr := range x.groups {
				if b := e.blocks[g]; gr.Ring > 0 && b >= 0 && x.pool.Refs(g, b) == 1 {
					x.pool.Release(g, b)
					e.blocks[g] = -1
					over -= gr.BlockBytes
					x.stats.Evicted++
					progress = true
				}
			}
			// A dropped leaf may leave its parent a leaf: it goes next, so
			// one stale chain goes whole before a fresher one loses blocks.
			for e != nil && over > 0 && e.children == 0 && x.soleHeld(e) {
				over -= x.drop(e)
				progress = true
				if e.root {
					break
				}
				e = x.entries[e.parent]
			}
		}
	}
}

// soleHeld reports whether no sequence holds any of e's blocks.
func (x *Index) soleHeld(e *entry) bool {
	for g, b := range e.blocks {
		if b >= 0 && x.pool.Refs(g, b) > 1 {
			return false
		}
	}
	return true
}

// drop removes e, releasing its blocks, and returns the bytes that freed.
func (x *Index) drop(e *entry) int64 {
	var freed int64
	for g, b := range e.blocks {
		if b < 0 {
			continue
		}
		if x.pool.Refs(g, b) == 1 {
			freed += x.groups[g].BlockBytes
		}
		x.pool.Release(g, b)
		x.stats.Evicted++
	}
	x.mu.Lock()
	delete(x.entries, e.key)
	x.mu.Unlock()
	if up := x.entries[e.parent]; !e.root && up != nil {
		up.children--
	}
	return freed
}

// soleBytes is the storage of blocks only the index holds.
func (x *Index) soleBytes() int64 {
	var n int64
	for _, e := range x.entries {
		for g, b := range e.blocks {
			if b >= 0 && x.pool.Refs(g, b) == 1 {
				n += x.groups[g].BlockBytes
			}
		}
	}
	return n
}

// Stats reports the counters and what the index holds. MLX thread.
func (x *Index) Stats() Stats {
	st := x.stats
	st.Entries = len(x.entries)
	st.Budget = x.budget
	for _, e := range x.entries {
		for g, b := range e.blocks {
			switch {
			case b < 0:
			case x.pool.Refs(g, b) == 1:
				st.Bytes += x.groups[g].BlockBytes
			default:
				st.SharedBytes += x.groups[g].BlockBytes
			}
		}
	}
	return st
}

// Close releases every block the index holds and unhooks it from the pool.
func (x *Index) Close() {
	x.pool.SetOnFull(nil)
	for _, e := range x.entries {
		for g, b := range e.blocks {
			if b >= 0 {
				x.pool.Release(g, b)
			}
		}
	}
	x.mu.Lock()
	x.entries = map[uint64]*entry{}
	x.mu.Unlock()
	x.tracks = map[*kvpool.Seq]*track{}
}
