package gptoss

import (
	"os"
	"testing"

	"github.com/goprovider/provider/kvpool"
	"github.com/goprovider/provider/mlx"
	"github.com/goprovider/provider/model"
)

// BenchmarkOneRowStepBuild times the host's building of a gpt-oss-20b
// one-row decode step's graph (Begin, Forward and the argmax, nothing
// evaluated) in the layout an upload to a GPU gives (q/k/v joined unless
// PROVIDER_GPU_FUSE=0, as there; the pool's attention through MLX ops),
// on the CPU. The network has gpt-oss-20b's layers, heads, experts and routing
// (testdata/configs/gpt-oss-20b.json) but widths of 64 and a vocabulary
// of 1,024: the host's work per primitive does not depend on them. On a
// GPU that building paces a one-row step; it reports the step's
// primitives.
func BenchmarkOneRowStepBuild(b *testing.B) {
	d := narrow20B(b, 0, 0)
	// float32: the CPU then takes RoPE as one primitive, as a GPU does
	// in its half type.
	d.Config.ActDType = mlx.Float32
	th := mlx.NewThread()
	defer th.Close()
	th.Do(func() {
		s := mlx.DefaultStream()
		defer s.Free()
		w, err := d.Build(s, 7, nil)
		if err != nil {
			b.Fatal(err)
		}
		defer w.Free()
		// The CPU's build keeps them apart; join them as a GPU's does.
		if os.Getenv("PROVIDER_GPU_FUSE") != "0" {
			if _, err := w.FuseProjections(s, "gpt_oss", d.Config.Layers); err != nil {
				b.Fatal(err)
			}
		}
		net, err := New(d.Config, w)
		if err != nil {
			b.Fatal(err)
		}
		defer net.Close()
		p, err := model.NewPool(net, s, kvpool.Options{Ops: true})
		if err != nil {
			b.Fatal(err)
		}
		defer p.Close()
		seq := p.NewSeq()
		defer seq.Free()
		build := func(f *mlx.Frame, toks []int32) (*kvpool.Batch, mlx.Array) {
			bt, err := p.Begin(f, []kvpool.Row{{Seq: seq, Tokens: toks, Sample: true}})
			if err != nil {
				b.Fatal(err)
			}
			return bt, f.Argmax(net.Forward(f, bt), 1, false)
		}
		f := mlx.NewFrame(s)
		bt, out := build(f, []int32{1, 2, 3, 4, 5, 6, 7, 8, 9, 10})
		if f.Eval(out) != nil {
			b.Fatal(f.Err())
		}
		bt.Commit()
		f.Free()
		f = mlx.NewFrame(s)
		_, out = build(f, []int32{11})
		counts, err := mlx.GraphPrimitives(out)
		if err != nil {
			b.Fatal(err)
		}
		f.Free()
		total, names := mlx.DescribePrimitives(counts)
		b.Logf("one-row step of %d layers: %d primitives: %s", d.Config.Layers, total, names)
		b.ReportMetric(float64(total), "primitives/step")
		defer mlx.SetDispatchLayers(mlx.SetDispatchLayers(0))
		b.ResetTimer()
		for range b.N {
			f := mlx.NewFrame(s)
			build(f, []int32{11})
			if err := f.Err(); err != nil {
				b.Fatal(err)
			}
			f.Free()
		}
	})
}
