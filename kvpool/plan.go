package kvpool

import (
	"fmt"

	"github.com/goprovider/provider/mlx"
)

// Plan is a step as another process holding the same pool geometry (a
// tensor-parallel rank, with its share of every layer's KV heads) needs it
// to run the same forward pass: each row's block tables and new tokens, and
// how many blocks each group has. Such a follower keeps no allocator: it
// writes and reads its arrays where the plan's tables say, so its pool
// holds the same blocks as the leader's whatever the leader's prefix cache
// shares or frees.
type Plan struct {
	Rows []PlanRow
	// Blocks is the storage of each group, in blocks.
	Blocks []int
}

// PlanRow is one row of a Plan: the row's sequence as Begin left it (stored
// length, tables with every block the step writes, first live block per
// group) and the row itself.
type PlanRow struct {
	Stored int
	Tables [][]int32
	Live   []int
	Tokens []int32
	Sample bool
	Spans  []Span
	Embeds []Embed
}

// Plan describes b for a follower (see Plan). Call it after Begin, before
// Commit.
func (b *Batch) Plan() Plan {
	pl := Plan{Rows: make([]PlanRow, len(b.rows)), Blocks: make([]int, len(b.p.groups))}
	for g, gr := range b.p.groups {
		pl.Blocks[g] = gr.blocks
	}
	for i, r := range b.rows {
		s := r.Seq
		pr := PlanRow{Stored: s.n, Tables: make([][]int32, len(s.tab)), Live: append([]int(nil), s.live...),
			Tokens: r.Tokens, Sample: r.Sample, Spans: r.Spans, Embeds: r.Embeds}
		for g, t := range s.tab {
			pr.Tables[g] = append([]int32(nil), t...)
		}
		pl.Rows[i] = pr
	}
	return pl
}

// Pool is the pool b steps over.
func (b *Batch) Pool() *Pool { return b.p }

// BeginPlan lays out a leader's step on this pool (see Plan): it grows the
// storage to the leader's and builds a Batch over transient sequences that
// hold no references. Run the forward pass over it; never Commit it.
func (p *Pool) BeginPlan(f *mlx.Frame, pl Plan) (*Batch, error) {
	if len(pl.Blocks) != len(p.groups) {
		return nil, fmt.Errorf("kvpool: plan of %d groups for a pool of %d", len(pl.Blocks), len(p.groups))
	}
	for g, n := range pl.Blocks {
		if n > p.groups[g].blocks {
			if err := p.growTo(g, n); err != nil {
				return nil, err
			}
		}
	}
	rows := make([]Row, len(pl.Rows))
	for i, r := range pl.Rows {
		if len(r.Tables) != len(p.groups) || len(r.Live) != len(p.groups) {
			return nil, fmt.Errorf("kvpool: plan row %d has tables for %d groups, pool has %d", i, len(r.Tables), len(p.groups))
		}
		want := (r.Stored + len(r.Tokens) + BlockTokens - 1) / BlockTokens
		for g, t := range r.Tables {
			if len(t) < want {
				return nil, fmt.Errorf("kvpool: plan row %d: group %d table of %d blocks for %d positions", i, g, len(t), r.Stored+len(r.Tokens))
			}
			for j, b := range t[r.Live[g]:want] {
				if b < 0 || int(b) >= pl.Blocks[g] {
					return nil, fmt.Errorf("kvpool: plan row %d: group %d block %d is %d of %d", i, g, r.Live[g]+j, b, pl.Blocks[g])
				}
			}
		}
		s := &Seq{p: p, n: r.Stored, tab: r.Tables, live: r.Live}
		rows[i] = Row{Seq: s, Tokens: r.Tokens, Sample: r.Sample, Spans: r.Spans, Embeds: r.Embeds}
	}
	return p.Begin(f, rows)
}
