package cache

import (
	"slices"
	"testing"

	"github.com/goprovider/provider/kvpool"
	"github.com/goprovider/provider/mlx"
)

// ramLayers: full attention, a window wider than a block (ring 3) and a
// narrow window (ring 2).
var ramLayers = []kvpool.Layer{
	{KVHeads: 1, HeadDim: 4, SharedFrom: -1},
	{KVHeads: 1, HeadDim: 4, Window: 300, SharedFrom: -1},
	{KVHeads: 1, HeadDim: 4, Window: 5, SharedFrom: -1},
}

// onPool runs fn on an MLX thread with an empty CPU pool of ramLayers.
func onPool(t *testing.T, fn func(p *kvpool.Pool)) {
	t.Helper()
	th := mlx.NewThread()
	defer th.Close()
	th.Do(func() {
		s := mlx.CPU()
		defer s.Free()
		p, err := kvpool.New(s, mlx.Float32, ramLayers, kvpool.Options{})
		if err != nil {
			t.Fatal(err)
		}
		defer p.Close()
		fn(p)
	})
}

// feed stores tokens into s in steps of at most chunk tokens (the pool's
// bookkeeping only: no forward pass is needed to register blocks).
func feed(t *testing.T, p *kvpool.Pool, s *kvpool.Seq, tokens []int32, chunk int) {
	t.Helper()
	for at := 0; at < len(tokens); at += chunk {
		f := mlx.NewFrame(mlx.CPU())
		b, err := p.Begin(f, []kvpool.Row{{Seq: s, Tokens: tokens[at:min(at+chunk, len(tokens))]}})
		if err != nil {
			t.Fatal(err)
		}
		b.Commit()
		f.Free()
	}
}

func seqTokens(seed, n int) []int32 {
	out := make([]int32, n)
	for i := range out {
		out[i] = int32((i*31 + seed*1009) % 5000)
	}
	return out
}

// TestIndexAdoptsWhatItRegistered registers a sequence's blocks as they
// fill (in chunks that end off block boundaries, so sliding groups let go
// of blocks inside a step) and has a second sequence adopt them: it holds
// the first's physical blocks, every full-attention one and each sliding
// group's ring, and a third, diverging in block 1, adopts only block 0.
func TestIndexAdoptsWhatItRegistered(t *testing.T) {
	onPool(t, func(p *kvpool.Pool) {
		x := NewIndex(p, Namespace{LayoutEpoch: 1}, 1<<30)
		defer x.Close()
		toks := seqTokens(1, 1000)
		a := p.NewSeq()
		x.Track(a, NoScope, nil)
		feed(t, p, a, toks, 300)
		if st := x.Stats(); st.Entries != 3 {
			t.Fatalf("%d entries after 1000 tokens, want 3", st.Entries)
		}
		b := p.NewSeq()
		n, err := x.Adopt(b, NoScope, nil, toks, (len(toks)-1)/BlockTokens)
		if err != nil || n != 3*BlockTokens {
			t.Fatalf("Adopt = %d, %v; want %d", n, err, 3*BlockTokens)
		}
		if got, want := b.Blocks(), []int{3, 3, 2}; !slices.Equal(got, want) {
			t.Errorf("adopted blocks per group %v, want %v", got, want)
		}
		if !slices.Equal(b.Tokens(), toks[:n]) {
			t.Error("the adopting sequence does not hold the adopted tokens")
		}
		for j := range 3 {
			ab, bb := a.Block(j), b.Block(j)
			if ab[0] != bb[0] {
				t.Errorf("block %d: full-attention block %d, registered %d", j, bb[0], ab[0])
			}
		}
		// The adopter continues from there; its next full block registers.
		feed(t, p, b, seqTokens(2, 300), 300)
		if st := x.Stats(); st.Entries != 4 {
			t.Errorf("%d entries after the adopter filled a block, want 4", st.Entries)
		}
		c := p.NewSeq()
		diverged := slices.Clone(toks)
		diverged[BlockTokens+3]++
		if n, err := x.Adopt(c, NoScope, nil, diverged, 3); err != nil || n != BlockTokens {
			t.Errorf("diverging in block 1: Adopt = %d, %v; want %d", n, err, BlockTokens)
		}
		for _, s := range []*kvpool.Seq{a, b, c} {
			x.Untrack(s)
			s.Free()
		}
		st := x.Stats()
		if st.SharedBytes != 0 || st.Bytes != p.HeldBytes() {
			t.Errorf("with no sequence left the index holds %d bytes alone, %d shared; the pool holds %d", st.Bytes, st.SharedBytes, p.HeldBytes())
		}
		if st.Hits != 2 || st.TokensSaved != 4*BlockTokens {
			t.Errorf("hits %d, tokens saved %d", st.Hits, st.TokensSaved)
		}
	})
}

// TestIndexEvictsLeastRecentlyUsed fills two chains, touches the older one,
// and shrinks the budget to what one chain needs: the untouched chain
// goes, the touched one stays adoptable, and what the index holds alone
// fits the budget.
func TestIndexEvictsLeastRecentlyUsed(t *testing.T) {
	onPool(t, func(p *kvpool.Pool) {
		x := NewIndex(p, Namespace{}, 1<<30)
		defer x.Close()
		old, young := seqTokens(1, 2*BlockTokens+1), seqTokens(2, 2*BlockTokens+1)
		for _, toks := range [][]int32{old, young} {
			s := p.NewSeq()
			x.Track(s, NoScope, nil)
			feed(t, p, s, toks, 100)
			x.Untrack(s)
			s.Free()
		}
		touch := p.NewSeq()
		if n, _ := x.Adopt(touch, NoScope, nil, old, 2); n != 2*BlockTokens {
			t.Fatalf("adopting the old chain gave %d tokens", n)
		}
		x.Untrack(touch)
		touch.Free()
		chain := x.Stats().Bytes / 2
		x.budget = chain
		x.Evict()
		st := x.Stats()
		if st.Bytes > st.Budget {
			t.Fatalf("after Evict the index holds %d bytes alone, budget %d", st.Bytes, st.Budget)
		}
		for name, c := range map[string]struct {
			toks []int32
			want int
		}{"touched": {old, 2 * BlockTokens}, "untouched": {young, 0}} {
			s := p.NewSeq()
			if n, _ := x.Adopt(s, NoScope, nil, c.toks, 2); n != c.want {
				t.Errorf("%s chain: adopted %d tokens, want %d", name, n, c.want)
			}
			x.Untrack(s)
			s.Free()
		}
	})
}

// TestIndexKeepsChainsWhileSlidingBlocksGo checks the partial eviction: a
// budget that cannot hold every block lets the sliding groups' blocks of
// the oldest entries go first, and a long prefix whose newest blocks keep
// their rings is still adopted in full.
func TestIndexKeepsChainsWhileSlidingBlocksGo(t *testing.T) {
	onPool(t, func(p *kvpool.Pool) {
		x := NewIndex(p, Namespace{}, 1<<30)
		defer x.Close()
		toks := seqTokens(3, 6*BlockTokens+1)
		s := p.NewSeq()
		x.Track(s, NoScope, nil)
		feed(t, p, s, toks, BlockTokens)
		x.Untrack(s)
		s.Free()
		all := x.Stats().Bytes
		x.budget = all * 3 / 4
		x.Evict()
		st := x.Stats()
		if st.Bytes > st.Budget || st.Entries != 6 {
			t.Fatalf("after Evict: %d bytes alone (budget %d), %d entries (want all 6 still chained)", st.Bytes, st.Budget, st.Entries)
		}
		a := p.NewSeq()
		if n, _ := x.Adopt(a, NoScope, nil, toks, 6); n != 6*BlockTokens {
			t.Errorf("adopted %d tokens of a 6-block chain whose newest rings are kept", n)
		}
		x.Untrack(a)
		a.Free()
	})
}

// TestIndexComparesTokensOnEveryHit plants an entry under the key of other
// tokens (what a hash collision would look like): the lookup counts the
// collision and adopts nothing.
func TestIndexComparesTokensOnEveryHit(t *testing.T) {
	onPool(t, func(p *kvpool.Pool) {
		x := NewIndex(p, Namespace{}, 1<<30)
		defer x.Close()
		stored, asked := seqTokens(4, BlockTokens), seqTokens(5, BlockTokens+1)
		s := p.NewSeq()
		x.Track(s, NoScope, nil)
		feed(t, p, s, stored, BlockTokens)
		blocks := s.Block(0)
		for g, b := range blocks {
			p.Retain(g, b)
		}
		x.Untrack(s)
		s.Free()
		key := Chain(x.ns, NoScope, asked, nil, 1)[0]
		if !x.Insert(NoScope, nil, key, stored, blocks) {
			t.Fatal("Insert refused the planted entry")
		}
		a := p.NewSeq()
		if n, _ := x.Adopt(a, NoScope, nil, asked, 1); n != 0 {
			t.Errorf("adopted %d tokens from an entry holding other tokens", n)
		}
		if st := x.Stats(); st.Collisions != 1 {
			t.Errorf("collisions %d, want 1", st.Collisions)
		}
		x.Untrack(a)
		a.Free()
	})
}
