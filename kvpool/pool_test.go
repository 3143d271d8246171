package kvpool

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/goprovider/provider/mlx"
)

// The layers of the tests: full attention with GQA, a sliding window wider
// than a block, a narrow sliding window, and a layer reading the wide
// window's storage.
var testLayers = []Layer{
	{KVHeads: 2, HeadDim: 8, SharedFrom: -1},
	{KVHeads: 2, HeadDim: 8, Window: 300, SharedFrom: -1},
	{KVHeads: 1, HeadDim: 8, Window: 5, SharedFrom: -1},
	{KVHeads: 2, HeadDim: 8, Window: 300, SharedFrom: 1},
}

const testHeads = 4

// causalLayer attends with AttendCausal in TestAttendMatchesNaive: it
// shares the storage and group of a layer that attends with spans.
const causalLayer = 3

func TestRingBlocks(t *testing.T) {
	for _, c := range []struct{ w, want int }{{0, 0}, {1, 1}, {5, 2}, {256, 2}, {257, 2}, {258, 3}, {300, 3}, {1024, 5}} {
		if got := RingBlocks(c.w); got != c.want {
			t.Errorf("RingBlocks(%d) = %d, want %d", c.w, got, c.want)
		}
	}
}

func TestBlocksHeldAndReleased(t *testing.T) {
	onMLX(t, func(s mlx.Stream) { blocksHeldAndReleased(t, s) })
}

func blocksHeldAndReleased(t *testing.T, s mlx.Stream) {
	p, err := New(s, mlx.Float32, testLayers, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	a, b := p.NewSeq(), p.NewSeq()
	grow := func(q *Seq, n int) {
		t.Helper()
		if err := q.reserve(q.n + n); err != nil {
			t.Fatal(err)
		}
		q.n += n
		q.trim()
	}
	grow(a, 1)
	// Groups in layer order: full, window 300, window 5.
	if got := a.Blocks(); got[0] != 1 || got[1] != 1 || got[2] != 1 {
		t.Fatalf("after 1 token: %v", got)
	}
	grow(a, 1000)
	if got, want := a.Blocks(), []int{4, 3, 2}; !slices.Equal(got, want) {
		t.Fatalf("after 1001 tokens: blocks %v, want %v", got, want)
	}
	grow(b, 300)
	held := p.HeldBytes()
	if held != a.Bytes()+b.Bytes() {
		t.Fatalf("pool holds %d bytes, sequences %d", held, a.Bytes()+b.Bytes())
	}
	a.Free()
	b.Free()
	if p.HeldBytes() != 0 || a.Len() != 0 {
		t.Fatalf("after Free: pool holds %d bytes, a.Len %d", p.HeldBytes(), a.Len())
	}
	// Freed blocks are reused before the pool grows again.
	before := p.Bytes()
	grow(a, 1001)
	if p.Bytes() != before {
		t.Fatalf("pool grew from %d to %d bytes refilling freed blocks", before, p.Bytes())
	}
}

func TestMaxBytes(t *testing.T) { onMLX(t, func(s mlx.Stream) { maxBytes(t, s) }) }

// boundedPool is a pool of one float32 layer of one head of 4, bounded at
// blocks blocks, and the bytes of one block (the caller closes it, on the
// MLX thread).
func boundedPool(t *testing.T, s mlx.Stream, blocks int) (*Pool, int64) {
	t.Helper()
	layers := []Layer{{KVHeads: 1, HeadDim: 4, SharedFrom: -1}}
	blockBytes := int64(BlockTokens * 2 * 4 * 4)
	p, err := New(s, mlx.Float32, layers, Options{MaxBytes: int64(blocks) * blockBytes})
	if err != nil {
		t.Fatal(err)
	}
	return p, blockBytes
}

func maxBytes(t *testing.T, s mlx.Stream) {
	p, _ := boundedPool(t, s, 5)
	defer p.Close()
	q := p.NewSeq()
	if err := q.reserve(5 * BlockTokens); err != nil {
		t.Fatalf("5 blocks within a 5-block bound: %v", err)
	}
	if err := q.reserve(5*BlockTokens + 1); err != ErrFull {
		t.Fatalf("a sixth block: err %v, want ErrFull", err)
	}
}

func TestReserve(t *testing.T) { onMLX(t, func(s mlx.Stream) { reserve(t, s) }) }

// reserve: Reserve grows the pool to the blocks asked (never shrinks it),
// within MaxBytes.
func reserve(t *testing.T, s mlx.Stream) {
	p, blockBytes := boundedPool(t, s, 6)
	defer p.Close()
	for _, n := range []int{5, 3} {
		if err := p.Reserve(n); err != nil {
			t.Fatalf("Reserve(%d): %v", n, err)
		}
		if got := p.Bytes(); got != 5*blockBytes {
			t.Fatalf("after Reserve(%d): %d bytes, want 5 blocks (%d)", n, got, 5*blockBytes)
		}
	}
	if err := p.Reserve(7); err != ErrFull {
		t.Fatalf("Reserve(7) beyond a 6-block bound: err %v, want ErrFull", err)
	}
}

// history is the host copy of every key and value a row stored, per layer.
type history struct{ k, v [][]float32 } // [layer][pos*KVH*D]

// TestAttendMatchesNaive runs the same steps (prefill chunks crossing block
// boundaries, decode rows, rows joining and leaving) through the fused CPU
// kernel and the MLX-ops path, and compares both with attention computed
// in float64 on the host from the same keys and values.
//
// Head sizes 64 and 128 take the fused kernel's AVX-512 path where the
// processor has it (query tiles; at 128 the lone row's steps split across
// the threads phase by phase), 8 its portable one.
func TestAttendMatchesNaive(t *testing.T) {
	for _, c := range []struct {
		ops bool
		D   int
	}{{false, 8}, {true, 8}, {false, 64}, {false, 128}} {
		name := fmt.Sprintf("fused-%d", c.D)
		if c.ops {
			name = fmt.Sprintf("ops-%d", c.D)
		}
		t.Run(name, func(t *testing.T) {
			onMLX(t, func(s mlx.Stream) {
				layers := make([]Layer, len(testLayers))
				for i, l := range testLayers {
					l.HeadDim = c.D
					layers[i] = l
				}
				p, err := New(s, mlx.Float32, layers, Options{Ops: c.ops})
				if err != nil {
					t.Fatal(err)
				}
				defer p.Close()
				if p.Fused() == c.ops {
					t.Fatalf("Fused() = %v with Ops %v", p.Fused(), c.ops)
				}
				runAttend(t, p, c.D, 1e-5)
			})
		})
	}
}

// runAttend drives p (made of layers like testLayers, head size D)
// through steps and checks every output against naive within tol. It
// reports a failure with t.Errorf and returns, never t.Fatal: it runs on
// an MLX thread's goroutine, which t.Fatal would end.
func runAttend(t *testing.T, p *Pool, D int, tol float64) {
	s := p.s
	rng := rand.New(rand.NewPCG(1, 2))
	sinks := make([]float32, testHeads)
	for i := range sinks {
		sinks[i] = rng.Float32() - 0.5
	}
	type rowState struct {
		seq  *Seq
		hist history
	}
	newRow := func() *rowState {
		return &rowState{seq: p.NewSeq(), hist: history{k: make([][]float32, len(p.layers)), v: make([][]float32, len(p.layers))}}
	}
	rows := []*rowState{newRow(), newRow()}
	// Each step lists how many tokens each live row adds; a third row joins
	// at step 3 and the first leaves after step 4.
	// At step 7 the second leaves too: a lone row prefills and decodes
	// (the MLX-ops path then attends over its exact keys, unmasked).
	steps := [][]int{{300, 7}, {1, 260}, {1, 1}, {1, 1, 290}, {1, 1, 1}, {1, 1}, {1, 1}, {40}, {1}, {1}}
	// Bidirectional spans (an image's block), relative to the step's first
	// new token of the row: two in the first chunk (one crossing a block
	// boundary and the narrow window), one in the joining row's chunk, one
	// in the lone row's.
	spans := map[[2]int][]Span{{0, 0}: {{10, 50}, {240, 270}}, {3, 2}: {{100, 200}}, {7, 0}: {{5, 20}}}
	for si, counts := range steps {
		if si == 3 {
			rows = append(rows, newRow())
		}
		if si == 5 || si == 7 {
			rows[0].seq.Free()
			rows = rows[1:]
		}
		f := mlx.NewFrame(s)
		var br []Row
		stepSpans := make([][]Span, len(counts))
		for r, n := range counts {
			var sp []Span
			for _, x := range spans[[2]int{si, r}] {
				at := rows[r].seq.Len()
				sp = append(sp, Span{at + x.Start, at + x.End})
			}
			stepSpans[r] = sp
			br = append(br, Row{Seq: rows[r].seq, Tokens: make([]int32, n), Sample: true, Spans: sp})
		}
		b, err := p.Begin(f, br)
		if err != nil {
			t.Error(err)
			return
		}
		N := b.N()
		q := randVals(rng, N*testHeads*D)
		outs := make([]mlx.Array, len(p.layers))
		kvs := make([][2][]float32, len(p.layers))
		for li, l := range p.layers {
			kvs[li] = [2][]float32{randVals(rng, N*l.KVHeads*D), randVals(rng, N*l.KVHeads*D)}
			k := f.Float32s(kvs[li][0], N, l.KVHeads, D)
			v := f.Float32s(kvs[li][1], N, l.KVHeads, D)
			var sk mlx.Array
			if li == 0 {
				sk = f.Float32s(sinks, testHeads)
			}
			if li == causalLayer {
				outs[li] = b.AttendCausal(li, f.Float32s(q, N, testHeads, D), k, v, 0.3, sk)
			} else {
				outs[li] = b.Attend(li, f.Float32s(q, N, testHeads, D), k, v, 0.3, sk)
			}
		}
		got := make([][]float32, len(outs))
		for li := range outs {
			got[li] = f.ToFloat32s(outs[li])
		}
		if err := f.Err(); err != nil {
			t.Errorf("step %d: %v", si, err)
			return
		}
		b.Commit()
		f.Free()
		// Host reference.
		for r, n := range counts {
			st := rows[r]
			base := b.start[r]
			for li, l := range p.layers {
				src := li
				if l.SharedFrom >= 0 {
					src = l.SharedFrom
				} else {
					row := l.KVHeads * D
					st.hist.k[li] = append(st.hist.k[li], kvs[li][0][base*row:(base+n)*row]...)
					st.hist.v[li] = append(st.hist.v[li], kvs[li][1][base*row:(base+n)*row]...)
				}
				sl := p.layers[src]
				var sk []float32
				if li == 0 {
					sk = sinks
				}
				for tk := range n {
					i := base + tk
					pos := int(b.Positions[i])
					last := pos
					for _, sp := range stepSpans[r] {
						if pos >= sp.Start && pos < sp.End && li != causalLayer {
							last = sp.End - 1
						}
					}
					want := naive(q[i*testHeads*D:(i+1)*testHeads*D], st.hist.k[src], st.hist.v[src], pos, last, sl.Window, sl.KVHeads, D, 0.3, sk)
					for j, w := range want {
						g := got[li][i*testHeads*D+j]
						if math.Abs(float64(g)-w) > tol {
							t.Errorf("step %d row %d layer %d pos %d: element %d = %v, want %v", si, r, li, pos, j, g, w)
							return
						}
					}
				}
			}
		}
		var sum int64
		for _, st := range rows {
			sum += st.seq.Bytes()
		}
		if held := p.HeldBytes(); held != sum {
			t.Errorf("step %d: pool holds %d bytes, sequences %d", si, held, sum)
			return
		}
	}
}

func randVals(rng *rand.Rand, n int) []float32 {
	out := make([]float32, n)
	for i := range out {
		out[i] = rng.Float32()*2 - 1
	}
	return out
}

// naive is softmax(scale q.k) v for one token at pos, seeing positions up
// to last (pos, or its span's end), over keys and values [pos'*KVH*D] in
// float64, heads testHeads, head dim D.
func naive(q, keys, vals []float32, pos, last, window, kvh, D int, scale float64, sinks []float32) []float64 {
	rep := testHeads / kvh
	out := make([]float64, testHeads*D)
	lo := 0
	if window > 0 {
		lo = max(0, pos-window+1)
	}
	for h := range testHeads {
		kh := h / rep
		sc := make([]float64, 0, last-lo+1)
		m := math.Inf(-1)
		if sinks != nil {
			m = float64(sinks[h])
		}
		for s := lo; s <= last; s++ {
			var d float64
			for e := range D {
				d += float64(q[h*D+e]) * scale * float64(keys[(s*kvh+kh)*D+e])
			}
			sc = append(sc, d)
			m = math.Max(m, d)
		}
		var sum float64
		if sinks != nil {
			sum = math.Exp(float64(sinks[h]) - m)
		}
		for i := range sc {
			sc[i] = math.Exp(sc[i] - m)
			sum += sc[i]
		}
		for i, w := range sc {
			s := lo + i
			for e := range D {
				out[h*D+e] += w / sum * float64(vals[(s*kvh+kh)*D+e])
			}
		}
	}
	return out
}

// onMLX runs fn on a fresh MLX thread with the CPU stream.
func onMLX(t *testing.T, fn func(s mlx.Stream)) {
	t.Helper()
	th := mlx.NewThread()
	defer th.Close()
	th.Do(func() { fn(mlx.CPU()) })
}

func TestCheckTokens(t *testing.T) {
	onMLX(t, func(s mlx.Stream) {
		p, err := New(s, mlx.Float32, testLayers, Options{})
		if err != nil {
			t.Fatal(err)
		}
		defer p.Close()
		f := mlx.NewFrame(s)
		defer f.Free()
		q := p.NewSeq()
		defer q.Free()
		for _, c := range []struct {
			tokens []int32
			ok     bool
		}{{[]int32{0, 5, 9}, true}, {[]int32{0, 10}, false}, {[]int32{-1}, false}} {
			b, err := p.Begin(f, []Row{{Seq: q, Tokens: c.tokens}})
			if err != nil {
				t.Fatal(err)
			}
			if err := b.CheckTokens(10); (err == nil) != c.ok {
				t.Errorf("tokens %v in a vocabulary of 10: %v", c.tokens, err)
			}
		}
	})
}

// TestOverlay writes embeds over the token embeddings of the positions a
// step reaches: a row whose embed starts among its stored tokens, one whose
// step ends inside an embed, and a row without any.
func TestOverlay(t *testing.T) { onMLX(t, func(s mlx.Stream) { overlay(t, s) }) }

func overlay(t *testing.T, s mlx.Stream) {
	const H = 3
	p, err := New(s, mlx.Float32, testLayers, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	a, b, c := p.NewSeq(), p.NewSeq(), p.NewSeq()
	if err := a.reserve(4); err != nil {
		t.Fatal(err)
	}
	a.n = 4 // four tokens already stored
	embed := func(pos, rows int, base float32) Embed {
		d := make([]float32, rows*H)
		for i := range d {
			d[i] = base + float32(i)
		}
		return Embed{Pos: pos, Rows: rows, Data: d}
	}
	ea := embed(2, 4, 100)  // positions 2..5: the step (4, 5, 6) reaches 4 and 5
	eb := embed(1, 5, 200)  // positions 1..5: the step (0, 1, 2) reaches 1 and 2
	ec := embed(40, 2, 300) // beyond c's step: untouched
	rows := []Row{
		{Seq: a, Tokens: []int32{1, 1, 1}, Embeds: []Embed{ea}},
		{Seq: b, Tokens: []int32{1, 1, 1}, Embeds: []Embed{eb}},
		{Seq: c, Tokens: []int32{1, 1}, Embeds: []Embed{ec}},
	}
	f := mlx.NewFrame(s)
	defer f.Free()
	batch, err := p.Begin(f, rows)
	if err != nil {
		t.Fatal(err)
	}
	N := batch.N()
	x := make([]float32, N*H)
	for i := range x {
		x[i] = -float32(i)
	}
	got := f.ToFloat32s(batch.Overlay(f.Float32s(x, 1, N, H)))
	if err := f.Err(); err != nil {
		t.Fatal(err)
	}
	want := slices.Clone(x)
	// Flat index i of the step takes embed row r.
	for _, m := range []struct {
		e    Embed
		i, r int
	}{{ea, 0, 2}, {ea, 1, 3}, {eb, 4, 0}, {eb, 5, 1}} {
		copy(want[m.i*H:(m.i+1)*H], m.e.Data[m.r*H:(m.r+1)*H])
	}
	if !slices.Equal(got, want) {
		t.Fatalf("overlay:\n got %v\nwant %v", got, want)
	}

	// Without embeds in the step the input comes back unchanged; data of
	// the wrong size fails the frame.
	g := mlx.NewFrame(s)
	defer g.Free()
	bad := []Row{{Seq: c, Tokens: []int32{1}, Embeds: []Embed{{Pos: 0, Rows: 2, Data: make([]float32, 5)}}}}
	batch, err = p.Begin(g, bad)
	if err != nil {
		t.Fatal(err)
	}
	batch.Overlay(g.Float32s(make([]float32, H), 1, 1, H))
	if g.Err() == nil {
		t.Fatal("an embed of 5 values for 2 rows of 3 was accepted")
	}
}

// TestKernelStoreOffered checks where a batch offers a layer's store to
// the kernel that makes its keys and values (KernelStore): on a pool that
// allows it (as a CUDA pool does), in steps of single-token rows only, for
// layers that own their storage, each token's slot in order; and that
// Attend leaves the pool of a layer marked Stored to that kernel while it
// scatters into the others.
func TestKernelStoreOffered(t *testing.T) {
	onMLX(t, func(s mlx.Stream) {
		p, err := New(s, mlx.Float32, testLayers, Options{Ops: true})
		if err != nil {
			t.Fatal(err)
		}
		defer p.Close()
		a, b := p.NewSeq(), p.NewSeq()
		defer a.Free()
		defer b.Free()
		step := func(counts []int, check func(bt *Batch)) {
			t.Helper()
			f := mlx.NewFrame(s)
			defer f.Free()
			bt, err := p.Begin(f, []Row{{Seq: a, Tokens: make([]int32, counts[0]), Sample: true}, {Seq: b, Tokens: make([]int32, counts[1]), Sample: true}})
			if err != nil {
				t.Fatal(err)
			}
			check(bt)
			N := bt.N()
			outs := make([]mlx.Array, len(p.layers))
			for li, l := range p.layers {
				k := f.Float32s(make([]float32, N*l.KVHeads*l.HeadDim), N, l.KVHeads, l.HeadDim)
				outs[li] = bt.Attend(li, f.Float32s(make([]float32, N*testHeads*l.HeadDim), N, testHeads, l.HeadDim), k, k, 0.3, mlx.Array{})
			}
			if err := f.Eval(outs...); err != nil {
				t.Fatal(err)
			}
			bt.Commit()
		}
		offered := func(bt *Batch) []bool {
			var got []bool
			for li := range p.layers {
				got = append(got, bt.KernelStore(li).K.Valid())
			}
			return got
		}
		// Off (a CPU pool's setting): never offered.
		step([]int{3, 1}, func(bt *Batch) {
			if got := offered(bt); slices.Contains(got, true) {
				t.Fatalf("store off: offered to layers %v", got)
			}
		})
		p.kernelStore = true
		step([]int{2, 1}, func(bt *Batch) {
			if got := offered(bt); slices.Contains(got, true) {
				t.Fatalf("a step with a prefill row: offered to layers %v", got)
			}
		})
		step([]int{1, 1}, func(bt *Batch) {
			if got, want := offered(bt), []bool{true, true, true, false}; !slices.Equal(got, want) {
				t.Fatalf("decode rows: offered to layers %v, want %v (layer 3 shares layer 1's storage)", got, want)
			}
			st := bt.KernelStore(2)
			gi := p.group[2]
			want := []int32{a.slot(gi, a.n), b.slot(gi, b.n)}
			if got := bt.f.ToInt32s(st.Slots); !slices.Equal(got, want) {
				t.Fatalf("layer 2's slots %v, want %v", got, want)
			}
			if st.K != p.k[2] || st.V != p.v[2] {
				t.Fatal("layer 2's store is not its pool's arrays")
			}
			bt.Stored(2)
		})
		// The layer marked Stored kept its arrays (no scatter made new
		// ones); the others' were replaced by their scatters' results.
		k0, k2 := p.k[0], p.k[2]
		step([]int{1, 1}, func(bt *Batch) { bt.Stored(2) })
		if p.k[2] != k2 || p.k[0] == k0 {
			t.Fatalf("after a step that stored layer 2 itself: layer 2's keys replaced %v, layer 0's %v", p.k[2] != k2, p.k[0] != k0)
		}
		// Row-by-row attention, whose reads would not wait for the
		// kernel's writes, refuses a stored layer.
		f := mlx.NewFrame(s)
		defer f.Free()
		bt, err := p.Begin(f, []Row{{Seq: a, Tokens: []int32{0}, Sample: true}})
		if err != nil {
			t.Fatal(err)
		}
		bt.Stored(0)
		l := p.layers[0]
		k := f.Float32s(make([]float32, l.KVHeads*l.HeadDim), 1, l.KVHeads, l.HeadDim)
		bt.AttendRows(0, f.Float32s(make([]float32, testHeads*l.HeadDim), 1, testHeads, l.HeadDim), k, k,
			func(q, k, v mlx.Array) mlx.Array { return q })
		if err := f.Err(); err == nil || !strings.Contains(err.Error(), "kernel stored") {
			t.Fatalf("AttendRows over a stored layer: %v, want a refusal", err)
		}
	})
}
