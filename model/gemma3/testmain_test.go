package gemma3

import (
	"os"
	"sync"
	"testing"

	"github.com/goprovider/provider/kvpool"
	"github.com/goprovider/provider/mlx"
	"github.com/goprovider/provider/model"
)

// gemmaPath is where scripts/setup_gemma3.sh (run by make setup) puts the
// Gemma 3 270M Q4_K_M GGUF.
const gemmaPath = "../../.deps/gemma3/gemma-3-270m-q4_k_m.gguf"

// numerics selects how closely the forward pass follows llama.cpp's CPU
// kernels: quantized activations into ggml-quantized matmuls (set when the
// weights upload), and the binary16-table GELU (set on the network).
type numerics struct {
	quantizedActivations bool
	geluTable            bool
}

// uploaded is the checkpoint on a running MLX thread. Uploads are shared by
// the tests of the package (one per activation setting) and released by
// TestMain; networks over them are cheap to build.
type uploaded struct {
	m  *model.Model
	th *mlx.Thread
	s  mlx.Stream
	w  *model.Weights
}

var (
	uploadsMu sync.Mutex
	uploads   = map[bool]*uploaded{}
)

func TestMain(m *testing.M) {
	code := m.Run()
	for _, u := range uploads {
		u.th.Do(func() {
			u.w.Free()
			u.s.Free()
		})
		u.th.Close()
		u.m.Close()
	}
	os.Exit(code)
}

// upload opens and uploads the real checkpoint once per activation
// setting; a missing file is a setup error, never a skip.
func upload(tb testing.TB, quantizedActivations bool) *uploaded {
	tb.Helper()
	uploadsMu.Lock()
	defer uploadsMu.Unlock()
	if u := uploads[quantizedActivations]; u != nil {
		return u
	}
	if _, err := os.Stat(gemmaPath); err != nil {
		tb.Fatalf("%s is missing: run make setup (%v)", gemmaPath, err)
	}
	m, err := model.Open(gemmaPath)
	if err != nil {
		tb.Fatal(err)
	}
	m.Config.ReferenceNumerics = quantizedActivations
	u := &uploaded{m: m, th: mlx.NewThread()}
	u.th.Do(func() {
		u.s = mlx.DefaultStream()
		u.w, err = m.Upload(u.s)
	})
	if err != nil {
		u.th.Do(u.s.Free)
		u.th.Close()
		m.Close()
		tb.Fatal(err)
	}
	uploads[quantizedActivations] = u
	return u
}

// loaded is a network over shared uploaded weights, with a stepper (its own
// KV pool) released when the test ends.
type loaded struct {
	*uploaded
	cfg model.Config
	net *Model
	st  *model.Stepper
}

// load builds a network with the given numerics; adjust, when non-nil,
// edits its config first (the weights stay the checkpoint's).
func load(tb testing.TB, num numerics, adjust func(*model.Config)) *loaded {
	tb.Helper()
	u := upload(tb, num.quantizedActivations)
	cfg := u.m.Config
	cfg.Kinds = append([]model.LayerKind(nil), cfg.Kinds...)
	cfg.ReferenceNumerics = num.geluTable
	if adjust != nil {
		adjust(&cfg)
	}
	net, err := New(cfg, u.w)
	if err != nil {
		tb.Fatal(err)
	}
	l := &loaded{uploaded: u, cfg: cfg, net: net}
	u.th.Do(func() { l.st, err = model.NewStepper(net, u.s) })
	if err != nil {
		u.th.Do(net.Close)
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		u.th.Do(func() {
			l.st.Close()
			net.Close()
		})
	})
	return l
}

// withWindow sets every sliding layer's window to w.
func withWindow(w int) func(*model.Config) {
	return func(c *model.Config) {
		for i := range c.Kinds {
			if c.Kinds[i].Window > 0 {
				c.Kinds[i].Window = w
			}
		}
	}
}

// step runs one Forward of several rows and returns their logits, row-major.
func (l *loaded) step(tb testing.TB, rows [][]int32, seqs []*kvpool.Seq) []float32 {
	tb.Helper()
	var out []float32
	var err error
	l.th.Do(func() {
		f := mlx.NewFrame(l.s)
		defer f.Free()
		out = f.ToFloat32s(l.st.Forward(f, rows, seqs))
		err = f.Err()
	})
	if err != nil {
		tb.Fatal(err)
	}
	return out
}

// newSeq returns an empty sequence of the stepper's pool, freed when the
// test ends.
func (l *loaded) newSeq(tb testing.TB) *kvpool.Seq {
	var s *kvpool.Seq
	l.th.Do(func() { s = l.st.NewSeq() })
	tb.Cleanup(func() { l.th.Do(s.Free) })
	return s
}
