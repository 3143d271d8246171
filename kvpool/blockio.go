package kvpool

import (
	"fmt"

	"github.com/goprovider/provider/mlx"
)

// PayloadBytes is the size of one block's keys and values across every
// group: what ReadBlock returns and WriteBlock takes.
func (p *Pool) PayloadBytes() int {
	n := 0
	for _, g := range p.groups {
		n += int(g.blockBytes)
	}
	return n
}

// blockParts calls fn for every array slice one block spans: per group in
// order, per storage-owning layer of the group, keys then values; pool is
// where the slice lives and at its first row.
func (p *Pool) blockParts(blocks []int32, fn func(pool *mlx.Array, at, rows int, l Layer) error) error {
	if len(blocks) != len(p.groups) {
		return fmt.Errorf("kvpool: %d blocks for %d groups", len(blocks), len(p.groups))
	}
	for g, gr := range p.groups {
		b := blocks[g]
		if b < 0 || int(b) >= gr.blocks || gr.refs[b] <= 0 {
			return fmt.Errorf("kvpool: block %d of group %d is not held", b, g)
		}
		for _, li := range gr.layers {
			for _, a := range []*mlx.Array{&p.k[li], &p.v[li]} {
				if err := fn(a, int(b)*BlockTokens, BlockTokens, p.layers[li]); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

// ReadBlock copies out the keys and values one block holds in every group
// (blocks: one per group, as Seq.Block gives them, all held), PayloadBytes
// long. The parts are gathered into one new array on the device and read
// once: the host never reads the pool's own buffers (on CUDA they are
// managed memory, whose pages a host read would migrate away from the
// device under the next step).
func (p *Pool) ReadBlock(f *mlx.Frame, blocks []int32) ([]byte, error) {
	var parts []mlx.Array
	err := p.blockParts(blocks, func(pool *mlx.Array, at, rows int, l Layer) error {
		s := f.Slice(*pool, []int{at, 0, 0}, []int{at + rows, l.KVHeads, l.HeadDim})
		parts = append(parts, f.Reshape(s, rows*l.KVHeads*l.HeadDim))
		return nil
	})
	if err != nil || len(parts) == 0 {
		return []byte{}, err
	}
	out := f.ToBytes(f.Concatenate(0, parts...))
	if f.Err() != nil {
		return nil, fmt.Errorf("kvpool: read block: %w", f.Err())
	}
	if len(out) != p.PayloadBytes() {
		return nil, fmt.Errorf("kvpool: read block: %d bytes, want %d", len(out), p.PayloadBytes())
	}
	return out, nil
}

// AllocBlock takes one free block in every group, growing the storage as
// needed, and hands the caller their one reference each (Release returns
// them).
func (p *Pool) AllocBlock() ([]int32, error) {
	out := make([]int32, len(p.groups))
	for g := range p.groups {
		b, err := p.alloc(g)
		if err != nil {
			for i := range g {
				p.release(i, out[i])
			}
			return nil, err
		}
		out[g] = b
	}
	return out, nil
}

// WriteBlock stores payload, laid out as ReadBlock returns it, into blocks
// (one per group, held). The pool's arrays are updated in place.
func (p *Pool) WriteBlock(f *mlx.Frame, blocks []int32, payload []byte) error {
	if len(payload) != p.PayloadBytes() {
		return fmt.Errorf("kvpool: block payload of %d bytes, want %d", len(payload), p.PayloadBytes())
	}
	var updated []mlx.Array
	err := p.blockParts(blocks, func(pool *mlx.Array, at, rows int, l Layer) error {
		n := rows * l.KVHeads * l.HeadDim * p.dtype.Size()
		src, err := mlx.FromBytes(payload[:n], p.dtype, rows, l.KVHeads, l.HeadDim)
		if err != nil {
			return fmt.Errorf("kvpool: write block: %w", err)
		}
		payload = payload[n:]
		f.Track(src)
		next := f.Keep(f.SliceUpdate(*pool, src, []int{at, 0, 0}, []int{at + rows, l.KVHeads, l.HeadDim}))
		if !next.Valid() {
			return fmt.Errorf("kvpool: write block: %w", f.Err())
		}
		// Drop the old handle so the update happens in place.
		pool.Free()
		*pool = next
		updated = append(updated, next)
		return nil
	})
	if err != nil {
		return err
	}
	return f.Eval(updated...)
}
