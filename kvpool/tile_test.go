package kvpool

import (
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/goprovider/provider/mlx"
)

// TestAttendSameAloneAndBatched: the CPU kernel splits a lone decode row's
// attention at a long context across the threads phase by phase, and runs
// each row of a batch whole in one task; a row's output is the same floats
// either way, and the same whatever its prefill chunking (the head size 64
// takes the AVX-512 path where the processor has it).
func TestAttendSameAloneAndBatched(t *testing.T) {
	const heads, kvh, D, ctx = 9, 3, 64, 1100
	layers := []Layer{{KVHeads: kvh, HeadDim: D, SharedFrom: -1}}
	onMLX(t, func(s mlx.Stream) {
		rng := rand.New(rand.NewPCG(5, 6))
		prompt := [2][]float32{randVals(rng, ctx*kvh*D), randVals(rng, ctx*kvh*D)}
		next := [3][]float32{randVals(rng, heads*D), randVals(rng, kvh*D), randVals(rng, kvh*D)}
		// run prefills the row in chunks, then decodes one token beside
		// others decoding rows (each with a 40-token history), and returns
		// the row's output for that token.
		run := func(chunks []int, others int) []float32 {
			p, err := New(s, mlx.Float32, layers, Options{})
			if err != nil {
				t.Error(err)
				return nil
			}
			defer p.Close()
			row := p.NewSeq()
			peers := make([]*Seq, others)
			for i := range peers {
				peers[i] = p.NewSeq()
			}
			step := func(rows []Row, q, k, v []float32) []float32 {
				f := mlx.NewFrame(s)
				defer f.Free()
				b, err := p.Begin(f, rows)
				if err != nil {
					t.Error(err)
					return nil
				}
				N := b.N()
				out := f.ToFloat32s(b.Attend(0, f.Float32s(q, N, heads, D), f.Float32s(k, N, kvh, D), f.Float32s(v, N, kvh, D), 0.125, mlx.Array{}))
				if f.Err() != nil {
					t.Error(f.Err())
					return nil
				}
				b.Commit()
				return out
			}
			at := 0
			for _, n := range chunks {
				step([]Row{{Seq: row, Tokens: make([]int32, n), Sample: true}}, randVals(rng, n*heads*D),
					prompt[0][at*kvh*D:(at+n)*kvh*D], prompt[1][at*kvh*D:(at+n)*kvh*D])
				at += n
			}
			if others > 0 {
				var rows []Row
				for _, sq := range peers {
					rows = append(rows, Row{Seq: sq, Tokens: make([]int32, 40), Sample: true})
				}
				step(rows, randVals(rng, others*40*heads*D), randVals(rng, others*40*kvh*D), randVals(rng, others*40*kvh*D))
			}
			rows := []Row{{Seq: row, Tokens: []int32{0}, Sample: true}}
			q, k, v := slices.Clone(next[0]), slices.Clone(next[1]), slices.Clone(next[2])
			for range others {
				rows = append(rows, Row{Seq: peers[len(rows)-1], Tokens: []int32{0}, Sample: true})
				q = append(q, randVals(rng, heads*D)...)
				k = append(k, randVals(rng, kvh*D)...)
				v = append(v, randVals(rng, kvh*D)...)
			}
			out := step(rows, q, k, v)
			if out == nil {
				return nil
			}
			return out[:heads*D]
		}
		alone := run([]int{ctx}, 0)
		for _, c := range []struct {
			chunks []int
			others int
		}{{[]int{ctx}, 7}, {[]int{300, 513, 287}, 0}, {[]int{1, 1098, 1}, 3}} {
			got := run(c.chunks, c.others)
			if alone == nil || got == nil {
				return
			}
			if !slices.Equal(got, alone) {
				t.Errorf("chunks %v beside %d rows: the decode row's output differs from alone", c.chunks, c.others)
			}
		}
	})
}
