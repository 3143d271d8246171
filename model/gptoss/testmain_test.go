package gptoss

import (
	"encoding/binary"
	"math"
	"os"
	"path/filepath"
	"testing"

	"github.com/goprovider/provider/mlx"
	"github.com/goprovider/provider/model"
)

// refDir holds the tiny checkpoints and mlx-lm's outputs for them
// (scripts/gen_gptoss_fixtures.py).
const refDir = "../../testdata/ref/gptoss_tiny"

// loaded is a checkpoint's network on a running MLX thread.
type loaded struct {
	m   *model.Model
	th  *mlx.Thread
	s   mlx.Stream
	w   *model.Weights
	net *Model
	cfg model.Config
}

// load opens a checkpoint directory of the fixture with activations (and
// cache) in act; adjust, when non-nil, edits the config first.
func load(tb testing.TB, variant string, act mlx.Dtype, adjust func(*model.Config)) *loaded {
	tb.Helper()
	m, err := model.Open(filepath.Join(refDir, variant))
	if err != nil {
		tb.Fatal(err)
	}
	m.Config.ActDType = act
	if adjust != nil {
		adjust(&m.Config)
	}
	l := &loaded{m: m, th: mlx.NewThread(), cfg: m.Config}
	l.th.Do(func() {
		l.s = mlx.DefaultStream()
		if l.w, err = m.Upload(l.s); err != nil {
			return
		}
		l.net, err = New(m.Config, l.w)
	})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		l.th.Do(func() {
			l.net.Close()
			l.w.Free()
			l.s.Free()
		})
		l.th.Close()
		m.Close()
	})
	return l
}

// withWindow sets every sliding layer's window to w.
func withWindow(w int) func(*model.Config) {
	return func(c *model.Config) {
		c.Kinds = append([]model.LayerKind(nil), c.Kinds...)
		for i := range c.Kinds {
			if c.Kinds[i].Window > 0 {
				c.Kinds[i].Window = w
			}
		}
	}
}

// step runs one Forward of several rows and returns their logits,
// row-major.
func (l *loaded) step(tb testing.TB, rows [][]int32, caches []*Cache) []float32 {
	tb.Helper()
	var out []float32
	var err error
	l.th.Do(func() {
		f := mlx.NewFrame(l.s)
		defer f.Free()
		gen := make([]model.Cache, len(caches))
		for i, c := range caches {
			gen[i] = c
		}
		out = f.ToFloat32s(l.net.Forward(f, rows, gen))
		err = f.Err()
	})
	if err != nil {
		tb.Fatal(err)
	}
	return out
}

// newCache returns an empty cache released when the test ends.
func (l *loaded) newCache(tb testing.TB) *Cache {
	c := l.net.NewCache().(*Cache)
	tb.Cleanup(func() { l.th.Do(c.Free) })
	return c
}

func readF32(tb testing.TB, path string) []float32 {
	tb.Helper()
	raw, err := os.ReadFile(path)
	if err != nil {
		tb.Fatal(err)
	}
	out := make([]float32, len(raw)/4)
	for i := range out {
		out[i] = math.Float32frombits(binary.LittleEndian.Uint32(raw[4*i:]))
	}
	return out
}

func maxAbsDiff(a, b []float32) (float64, int) {
	worst, at := 0.0, -1
	for i := range a {
		if d := math.Abs(float64(a[i]) - float64(b[i])); d > worst || math.IsNaN(d) {
			worst, at = d, i
		}
	}
	return worst, at
}
