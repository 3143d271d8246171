package llama

import (
	"fmt"
	"sort"
	"strings"
	"testing"

	"github.com/goprovider/provider/kvpool"
	"github.com/goprovider/provider/mlx"
	"github.com/goprovider/provider/model"
)

// TestOneRowStepPrimitives builds SmolLM2's one-row decode step in the
// GPU path's layout (fused projections, attention through MLX ops) on the
// CPU and counts its primitives: a lone token's q and k heads take one
// RoPE a layer, and its attention no transposes of the query or output
// and one view each of the pool's keys and values (on a GPU the host's
// work per primitive paces such a step). It logs every count.
func TestOneRowStepPrimitives(t *testing.T) {
	l := loadWith(t, smolPath, func(c *model.Config) { c.ReferenceNumerics, c.Int8Activations = false, false })
	cfg := l.m.Config
	l.th.Do(func() {
		if _, err := l.w.FuseProjections(l.s, "llama", cfg.Layers); err != nil {
			t.Error(err)
			return
		}
		net, err := New(cfg, l.w)
		if err != nil {
			t.Error(err)
			return
		}
		defer net.Close()
		p, err := kvpool.New(l.s, mlx.Float32, model.PoolLayers(cfg), kvpool.Options{Ops: true})
		if err != nil {
			t.Error(err)
			return
		}
		defer p.Close()
		seq := p.NewSeq()
		defer seq.Free()
		step := func(toks []int32) map[string]int {
			f := mlx.NewFrame(l.s)
			defer f.Free()
			bt, err := p.Begin(f, []kvpool.Row{{Seq: seq, Tokens: toks, Sample: true}})
			if err != nil {
				t.Fatal(err)
			}
			out := f.Argmax(net.Forward(f, bt), 1, false)
			counts, err := mlx.GraphPrimitives(out)
			if err != nil {
				t.Fatal(err)
			}
			f.ToInt32s(out)
			if err := f.Err(); err != nil {
				t.Fatal(err)
			}
			bt.Commit()
			return counts
		}
		step([]int32{1, 2, 3, 4, 5, 6, 7, 8, 9, 10})
		counts := step([]int32{11})
		total, names := DescribePrimitives(counts)
		t.Logf("one-row step: %d primitives: %s", total, names)
		if counts["FastRoPE"] != cfg.Layers {
			t.Errorf("%d RoPE calls in a one-row step of %d layers, want one a layer", counts["FastRoPE"], cfg.Layers)
		}
		// The keys' and values' views of the pool are one primitive each,
		// not a slice, a reshape and a transpose.
		if counts["AsStrided"] != 2*cfg.Layers || counts["Transpose"] > 1 {
			t.Errorf("%d strided views and %d transposes in a one-row step of %d layers, want %d and at most 1",
				counts["AsStrided"], counts["Transpose"], cfg.Layers, 2*cfg.Layers)
		}
	})
}

// DescribePrimitives is the total of a graph's primitive counts and the
// counts as NAME=N, sorted by name (for this package's tests and
// benchmarks, the external ones included).
func DescribePrimitives(counts map[string]int) (int, string) {
	total := 0
	var names []string
	for n, c := range counts {
		total += c
		names = append(names, fmt.Sprintf("%s=%d", n, c))
	}
	sort.Strings(names)
	return total, strings.Join(names, " ")
}
