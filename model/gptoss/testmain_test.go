package gptoss

import (
	"path/filepath"
	"testing"

	"github.com/goprovider/provider/internal/reftest"
	"github.com/goprovider/provider/kvpool"
	"github.com/goprovider/provider/mlx"
	"github.com/goprovider/provider/model"
)

// refDir holds the tiny checkpoints and mlx-lm's outputs for them
// (scripts/gen_gptoss_fixtures.py).
const refDir = "../../testdata/ref/gptoss_tiny"

// loaded is a checkpoint's network on a running MLX thread.
type loaded struct {
	th  *mlx.Thread
	s   mlx.Stream
	w   *model.Weights
	net *Model
	st  *model.Stepper
	cfg model.Config
}

// load opens a checkpoint directory of the fixture with activations (and
// KV pool) in act; adjust, when non-nil, edits the config first.
func load(tb testing.TB, variant string, act mlx.Dtype, adjust func(*model.Config)) *loaded {
	tb.Helper()
	m, err := model.Open(filepath.Join(refDir, variant))
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { m.Close() }) // after the network's cleanup, which start registers later
	m.Config.ActDType = act
	if adjust != nil {
		adjust(&m.Config)
	}
	return start(tb, m.Config, m.Upload)
}

// start makes the weights with upload on a new MLX thread's default
// stream and binds a network of cfg and its stepper to them, all released
// when the test ends.
func start(tb testing.TB, cfg model.Config, upload func(mlx.Stream) (*model.Weights, error)) *loaded {
	tb.Helper()
	l := &loaded{th: mlx.NewThread(), cfg: cfg}
	var err error
	l.th.Do(func() {
		l.s = mlx.DefaultStream()
		if l.w, err = upload(l.s); err != nil {
			return
		}
		if l.net, err = New(cfg, l.w); err != nil {
			return
		}
		l.st, err = model.NewStepper(l.net, l.s)
	})
	tb.Cleanup(func() {
		l.th.Do(func() {
			if l.st != nil {
				l.st.Close()
			}
			if l.net != nil {
				l.net.Close()
			}
			if l.w != nil {
				l.w.Free()
			}
			l.s.Free()
		})
		l.th.Close()
	})
	if err != nil {
		tb.Fatal(err)
	}
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
func (l *loaded) step(tb testing.TB, rows [][]int32, seqs []*kvpool.Seq) []float32 {
	tb.Helper()
	return l.stepOn(tb, l.st, rows, seqs)
}

// stepOn is step on another stepper of the network.
func (l *loaded) stepOn(tb testing.TB, st *model.Stepper, rows [][]int32, seqs []*kvpool.Seq) []float32 {
	tb.Helper()
	var out []float32
	var err error
	l.th.Do(func() {
		f := mlx.NewFrame(l.s)
		defer f.Free()
		out = f.ToFloat32s(st.Forward(f, rows, seqs))
		err = f.Err()
	})
	if err != nil {
		tb.Fatal(err)
	}
	return out
}

// opsStepper is a second stepper of the network whose pool attends through
// MLX ops (gathered keys under an explicit mask) where the default one may
// use the fused CPU kernel; it closes when the test ends.
func (l *loaded) opsStepper(tb testing.TB) *model.Stepper {
	tb.Helper()
	var p *kvpool.Pool
	var err error
	l.th.Do(func() { p, err = model.NewPool(l.net, l.s, kvpool.Options{Ops: true}) })
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { l.th.Do(p.Close) })
	return &model.Stepper{Net: l.net, Pool: p}
}

// newSeq returns an empty sequence of the default stepper's pool, freed
// when the test ends (before the pool closes).
func (l *loaded) newSeq(tb testing.TB) *kvpool.Seq {
	return l.newSeqOn(tb, l.st)
}

// newSeqOn is newSeq on st's pool (cleanups run last in, first out, so the
// sequence is freed before a pool made later closes).
func (l *loaded) newSeqOn(tb testing.TB, st *model.Stepper) *kvpool.Seq {
	s := st.NewSeq()
	tb.Cleanup(func() { l.th.Do(s.Free) })
	return s
}

// The fixture helpers every reference suite shares.
var (
	readF32    = reftest.ReadF32
	maxAbsDiff = reftest.MaxAbsDiff
)
