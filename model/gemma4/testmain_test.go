package gemma4

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/goprovider/provider/internal/reftest"
	"github.com/goprovider/provider/kvpool"
	"github.com/goprovider/provider/mlx"
	"github.com/goprovider/provider/model"
)

// refDir holds the tiny random checkpoints and their mlx-lm fixtures
// (scripts/gen_gemma4_fixtures.py).
const refDir = "../../testdata/ref/gemma4_tiny"

// refModels are the checkpoints: moe is shaped like gemma-4-26B-A4B, ple
// like the small models with per-layer inputs and KV sharing.
var refModels = []string{"moe", "ple"}

// loaded is a checkpoint uploaded on its own MLX thread with a network over
// it and a stepper (the network's KV pool), shared by the tests of the
// package and released by TestMain.
type loaded struct {
	m   *model.Model
	th  *mlx.Thread
	s   mlx.Stream
	w   *model.Weights
	net *Model
	st  *model.Stepper
	cfg model.Config
}

var (
	loadedMu sync.Mutex
	loads    = map[string]*loaded{}
)

func TestMain(m *testing.M) {
	code := m.Run()
	for _, l := range loads {
		l.th.Do(func() {
			l.st.Close()
			l.net.Close()
			l.w.Free()
			l.s.Free()
		})
		l.th.Close()
		l.m.Close()
	}
	os.Exit(code)
}

// load opens and uploads one reference checkpoint once, with the
// checkpoint's own (float32) activations.
func load(tb testing.TB, name string) *loaded { return loadAs(tb, name, 0) }

// loadAs is load with activations, KV pool and float weights in act (0, an
// invalid activation dtype, keeps the checkpoint's).
func loadAs(tb testing.TB, name string, act mlx.Dtype) *loaded {
	tb.Helper()
	loadedMu.Lock()
	defer loadedMu.Unlock()
	key := fmt.Sprintf("%s/%v", name, act)
	if l := loads[key]; l != nil {
		return l
	}
	m, err := model.Open(filepath.Join(refDir, name))
	if err != nil {
		tb.Fatal(err)
	}
	if act != 0 {
		m.Config.ActDType = act
	}
	l := &loaded{m: m, th: mlx.NewThread(), cfg: m.Config}
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
		l.th.Do(func() {
			if l.net != nil {
				l.net.Close()
			}
			if l.w != nil {
				l.w.Free()
			}
			l.s.Free()
		})
		l.th.Close()
		m.Close()
		tb.Fatal(err)
	}
	loads[key] = l
	return l
}

// step runs one Forward of several rows, tokens[i] appended to seqs[i],
// and returns their logits, row-major.
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

// withPool is l with a stepper of its own over a new pool with options opt
// (and its network rebuilt for cfg), released when the test ends. Its
// sequences hold the only blocks of that pool.
func (l *loaded) withPool(tb testing.TB, cfg model.Config, opt kvpool.Options) *loaded {
	tb.Helper()
	other := &loaded{m: l.m, th: l.th, s: l.s, w: l.w, cfg: cfg}
	var err error
	l.th.Do(func() {
		if other.net, err = New(cfg, l.w); err != nil {
			return
		}
		var p *kvpool.Pool
		if p, err = model.NewPool(other.net, l.s, opt); err != nil {
			other.net.Close()
			return
		}
		other.st = &model.Stepper{Net: other.net, Pool: p}
	})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		l.th.Do(func() {
			other.st.Close()
			other.net.Close()
		})
	})
	return other
}

type refPrompt struct {
	PromptTokens []int32 `json:"prompt_tokens"`
	Generated    []int32 `json:"generated_tokens"`
	MinMargin    float64 `json:"min_margin"`
	Logits       string  `json:"logits"`
	BF16Logits   string  `json:"bf16_logits"`
}

type refFixture struct {
	Reference map[string]string `json:"reference"`
	Vocab     int               `json:"vocab"`
	Window    int               `json:"window"`
	Steps     int               `json:"steps"`
	Prompts   []refPrompt       `json:"prompts"`
}

func readFixture(tb testing.TB, name string) *refFixture {
	tb.Helper()
	raw, err := os.ReadFile(filepath.Join(refDir, name, "fixture.json"))
	if err != nil {
		tb.Fatal(err)
	}
	var fx refFixture
	if err := json.Unmarshal(raw, &fx); err != nil {
		tb.Fatal(err)
	}
	return &fx
}

// The fixture helpers every reference suite shares.
var (
	readF32    = reftest.ReadF32
	maxAbsDiff = reftest.MaxAbsDiff
)
