package llama_test

import (
	"fmt"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/goprovider/provider/engine/enginetest"
	"github.com/goprovider/provider/kvpool"
	"github.com/goprovider/provider/mlx"
	"github.com/goprovider/provider/model"
	"github.com/goprovider/provider/model/llama"
)

// BenchmarkDecodeStep times one decode step of rows 1 and 8 (each after a
// prompt of about 128 tokens) with the numerics serve gives the device
// (the CPU: float32 and the fused kernels; a GPU: the checkpoint's half
// type and the MLX-ops path), and reports the primitives the step
// evaluates (each a kernel launch on a GPU). PROVIDER_BENCH_MODEL names
// the checkpoint (default SmolLM2), PROVIDER_BENCH_PROMPT the prompt length
// (default 120). build1 times only the host's building of a one-row
// step's graph (Begin, Forward and the argmax, nothing evaluated); ahead1
// and ahead8 time steps built ahead of the read of the step before
// (benchAheadStep).
func BenchmarkDecodeStep(b *testing.B) {
	path := os.Getenv("PROVIDER_BENCH_MODEL")
	if path == "" {
		path = enginetest.SmolLM2()
	}
	d := loadOnDevice(b, path)
	th := d.th
	for _, rows := range []int{1, 8} {
		b.Run(fmt.Sprint("rows", rows), func(b *testing.B) {
			th.Do(func() { benchDecodeStep(b, d.s, d.cfg, d.net, rows, d.w.Bytes(), true) })
		})
	}
	b.Run("build1", func(b *testing.B) {
		th.Do(func() { benchDecodeStep(b, d.s, d.cfg, d.net, 1, d.w.Bytes(), false) })
	})
	for _, rows := range []int{1, 8} {
		b.Run(fmt.Sprint("ahead", rows), func(b *testing.B) {
			th.Do(func() { benchAheadStep(b, d.s, d.cfg, d.net, rows, d.w.Bytes()) })
		})
	}
}

// onDevice is a Llama checkpoint uploaded to a stream of an MLX thread.
type onDevice struct {
	th  *mlx.Thread
	s   mlx.Stream
	cfg model.Config
	w   *model.Weights
	net *llama.Model
}

// loadOnDevice opens the checkpoint at path and uploads it, on a new MLX
// thread, to the default stream in the type serve gives that device (the
// checkpoint's half type on a GPU, float32 on the CPU); all of it is
// released when tb ends.
func loadOnDevice(tb testing.TB, path string) onDevice {
	tb.Helper()
	m, err := model.Open(path)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { m.Close() })
	th := mlx.NewThread()
	tb.Cleanup(th.Close)
	d := onDevice{th: th}
	th.Do(func() {
		d.s = mlx.DefaultStream()
		m.Config.ActDType = m.Config.AcceleratorDType()
		if d.s.IsCPU() {
			m.Config.ActDType = mlx.Float32
		}
		d.cfg = m.Config
		if d.w, err = m.Upload(d.s); err == nil {
			d.net, err = llama.New(m.Config, d.w)
		}
	})
	tb.Cleanup(func() {
		th.Do(func() {
			if d.net != nil {
				d.net.Close()
			}
			if d.w != nil {
				d.w.Free()
			}
			d.s.Free()
		})
	})
	if err != nil {
		tb.Fatal(err)
	}
	return d
}

// With HBM_BYTES_PER_S set, a step's time is also reported against the
// time the device's memory takes to read the weights once (weightBytes):
// the share of that bound a decode step reaches.
//
// Without evaluate, each timed step only builds its graph and drops it.
func benchDecodeStep(b *testing.B, s mlx.Stream, cfg model.Config, net *llama.Model, rows int, weightBytes int64, evaluate bool) {
	p, seqs, pre := benchPrompts(b, s, cfg, rows)
	defer p.Close()
	// build lays out a step of rs in f: its batch and its picks (nothing
	// evaluated).
	build := func(f *mlx.Frame, rs []kvpool.Row) (*kvpool.Batch, mlx.Array) {
		bt, err := p.Begin(f, rs)
		if err != nil {
			b.Fatal(err)
		}
		return bt, f.Argmax(net.Forward(f, bt), 1, false)
	}
	step := func(rs []kvpool.Row, count bool) []int32 {
		f := mlx.NewFrame(s)
		defer f.Free()
		bt, out := build(f, rs)
		if count {
			counts, err := mlx.GraphPrimitives(out)
			if err != nil {
				b.Fatal(err)
			}
			total, names := mlx.DescribePrimitives(counts)
			b.ReportMetric(float64(total), "primitives/step")
			b.Logf("%d rows: %d primitives: %s", rows, total, names)
		}
		ids := f.ToInt32s(out)
		if err := f.Err(); err != nil {
			b.Fatal(err)
		}
		bt.Commit()
		return ids
	}
	ids := step(pre, false)
	next := func() []kvpool.Row { return decodeRows(seqs, ids) }
	// Counted whole: no layer queued (and run) before the count.
	prev := mlx.SetDispatchLayers(0)
	ids = step(next(), true)
	mlx.SetDispatchLayers(prev)
	if !evaluate {
		// Building alone: no layer queued for the device on the way.
		defer mlx.SetDispatchLayers(mlx.SetDispatchLayers(0))
		b.ResetTimer()
		for range b.N {
			f := mlx.NewFrame(s)
			build(f, next())
			if err := f.Err(); err != nil {
				b.Fatal(err)
			}
			f.Free()
		}
		return
	}
	b.ResetTimer()
	start := time.Now()
	for range b.N {
		ids = step(next(), false)
	}
	if hbm, _ := strconv.ParseFloat(os.Getenv("HBM_BYTES_PER_S"), 64); hbm > 0 {
		per := time.Since(start).Seconds() / float64(b.N)
		b.ReportMetric(100*float64(weightBytes)/hbm/per, "%HBM")
	}
}

// benchPrompts makes a pool for cfg and rows sequences with their prompt
// rows (PROVIDER_BENCH_PROMPT tokens, default 120, plus the row's index),
// nothing run yet. PROVIDER_BENCH_POOL_BLOCKS grows the pool to that many
// blocks first, as a server's is once its prefix cache holds many blocks.
func benchPrompts(b *testing.B, s mlx.Stream, cfg model.Config, rows int) (*kvpool.Pool, []*kvpool.Seq, []kvpool.Row) {
	promptLen := 120
	if n, err := strconv.Atoi(os.Getenv("PROVIDER_BENCH_PROMPT")); err == nil && n > 0 {
		promptLen = n
	}
	p, err := kvpool.New(s, cfg.ActDType, model.PoolLayers(cfg), kvpool.Options{})
	if err != nil {
		b.Fatal(err)
	}
	if n, err := strconv.Atoi(os.Getenv("PROVIDER_BENCH_POOL_BLOCKS")); err == nil && n > 0 {
		if err := p.Reserve(n); err != nil {
			p.Close()
			b.Fatal(err)
		}
	}
	seqs := make([]*kvpool.Seq, rows)
	pre := make([]kvpool.Row, rows)
	for r := range seqs {
		seqs[r] = p.NewSeq()
		pre[r] = kvpool.Row{Seq: seqs[r], Tokens: syntheticPrompt(promptLen+r, r), Sample: true}
	}
	return p, seqs, pre
}

// syntheticPrompt is row r's prompt of n tokens in the step benchmarks and
// tests: ids that differ by row, within any checkpoint's vocabulary.
func syntheticPrompt(n, r int) []int32 {
	toks := make([]int32, n)
	for i := range toks {
		toks[i] = int32(100 + (i*7+r)%1000)
	}
	return toks
}

// decodeRows is a decode step's rows: each sequence's next token.
func decodeRows(seqs []*kvpool.Seq, ids []int32) []kvpool.Row {
	rs := make([]kvpool.Row, len(seqs))
	for r, s := range seqs {
		rs[r] = kvpool.Row{Seq: s, Tokens: []int32{ids[r]}, Sample: true}
	}
	return rs
}

// benchAheadStep times decode steps of rows built ahead, as the engine
// builds them with PROVIDER_STEP_AHEAD=1: each step is built from the
// step before's picks still on the device (kvpool.BeginNext) and queued
// (AsyncEval) before the host reads those picks, so that the host's
// building and dispatch of a step overlap the device's running of the one
// before. A step whose rows' next position starts a block is built after
// the read instead, as the engine does. The picks are queued as the host
// reads them (mlx.Frame.Flat), so that their read waits for their step
// alone.
func benchAheadStep(b *testing.B, s mlx.Stream, cfg model.Config, net *llama.Model, rows int, weightBytes int64) {
	p, seqs, pre := benchPrompts(b, s, cfg, rows)
	defer p.Close()
	type running struct {
		f   *mlx.Frame
		bt  *kvpool.Batch
		ids mlx.Array
	}
	// start queues a step of rs (host tokens) and commits it.
	start := func(rs []kvpool.Row) running {
		f := mlx.NewFrame(s)
		bt, err := p.Begin(f, rs)
		if err != nil {
			b.Fatal(err)
		}
		r := running{f, bt, f.Flat(f.Argmax(net.Forward(f, bt), 1, false), mlx.Int32)}
		f.AsyncEval(r.ids)
		bt.Commit()
		return r
	}
	decode := func(ids []int32) []kvpool.Row { return decodeRows(seqs, ids) }
	// A step built ahead takes its tokens from the device (BeginNext
	// ignores these).
	ahead := decode(make([]int32, rows))
	cur := start(pre)
	read := func(r running) []int32 {
		ids := r.f.ToInt32s(r.ids)
		if err := r.f.Err(); err != nil {
			b.Fatal(err)
		}
		r.f.Free()
		return ids
	}
	cur = start(decode(read(cur)))
	built, after := 0, 0
	b.ResetTimer()
	begin := time.Now()
	for range b.N {
		f := mlx.NewFrame(s)
		bt, err := p.BeginNext(f, ahead, cur.ids)
		if err != nil {
			// The rows' next position starts a block.
			f.Free()
			cur = start(decode(read(cur)))
			after++
			continue
		}
		next := running{f, bt, f.Flat(f.Argmax(net.Forward(f, bt), 1, false), mlx.Int32)}
		f.AsyncEval(next.ids)
		bt.Resolve(read(cur))
		bt.Commit()
		cur = next
		built++
	}
	read(cur)
	per := time.Since(begin).Seconds() / float64(b.N)
	b.ReportMetric(float64(built), "ahead")
	b.ReportMetric(float64(after), "after-read")
	if hbm, _ := strconv.ParseFloat(os.Getenv("HBM_BYTES_PER_S"), 64); hbm > 0 {
		b.ReportMetric(100*float64(weightBytes)/hbm/per, "%HBM")
	}
}
