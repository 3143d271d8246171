package llama_test

import (
	"fmt"
	"math"
	"os"
	"testing"

	"github.com/goprovider/provider/kvpool"
	"github.com/goprovider/provider/mlx"
	"github.com/goprovider/provider/model"
	"github.com/goprovider/provider/model/llama"
)

// TestLayerKernelsSameTokensCUDA decodes two rows greedily (prompts of 120
// and 57 tokens, then 12 steps of both) on a GPU with the checkpoint that
// PROVIDER_BENCH_MODEL names, in its half type with fused projections,
// once through MLX's ops and once with the layer kernels
// (mlx.SetLayerKernels: HeadsRoPE, SwiGLUHalves): the logits of every step
// must be close, and the tokens the same but where two choices all but
// tie.
func TestLayerKernelsSameTokensCUDA(t *testing.T) {
	sameTokensCUDA(t, "the layer kernels", mlx.SetLayerKernels, []int{120, 57})
}

// TestAffineMmaSameTokensCUDA is TestLayerKernelsSameTokensCUDA for the
// affine tensor-core kernel (mlx.SetAffineMMA) against MLX's quantized
// matmul, over eight rows (the product's rows then fill one tile).
func TestAffineMmaSameTokensCUDA(t *testing.T) {
	sameTokensCUDA(t, "the tensor-core products", mlx.SetAffineMMA, []int{120, 57, 33, 200, 9, 64, 150, 17})
}

// sameTokensCUDA decodes one row a prompt length greedily (then 12 steps
// of all rows) on a GPU with the checkpoint that PROVIDER_BENCH_MODEL
// names, with set(false) and then set(true): the logits of every step must
// be close, and a row's tokens the same until a step whose two choices all
// but tie.
func sameTokensCUDA(t *testing.T, what string, set func(bool) bool, prompts []int) {
	path := os.Getenv("PROVIDER_BENCH_MODEL")
	if path == "" {
		t.Skipf("NEEDS PROVIDER_BENCH_MODEL (a Llama checkpoint) and a CUDA device: %s are untested here", what)
	}
	var err error
	probe := mlx.NewThread()
	var ok bool
	probe.Do(func() { ok, err = mlx.CUDAAvailable() })
	probe.Close()
	if err != nil || !ok {
		t.Skipf("NEEDS A CUDA DEVICE (%v): %s are untested here", err, what)
	}
	d := loadOnDevice(t, path)
	d.th.Do(func() {
		defer set(set(false))
		var runs [2]greedyRun
		for i, on := range []bool{false, true} {
			set(on)
			runs[i] = decodeGreedy(t, d.s, d.cfg, d.net, prompts, 12)
		}
		worst, scale := 0.0, 0.0
		for i := range runs[0].logits {
			worst = math.Max(worst, math.Abs(float64(runs[0].logits[i]-runs[1].logits[i])))
			scale = math.Max(scale, math.Abs(float64(runs[0].logits[i])))
		}
		t.Logf("%d tokens; max |logit difference| %.3g of max |logit| %.3g", len(runs[0].tokens), worst, scale)
		if worst > 0.05*scale {
			t.Errorf("logits differ by up to %.3g (max |logit| %.3g)", worst, scale)
		}
		// A row's tokens must agree until a step whose two choices were
		// within twice the largest logit difference of each other (random
		// weights tie often); the row's sequences part there.
		rows, vocab := len(prompts), d.cfg.Vocab
		parted := make([]bool, rows)
		for i, tok := range runs[0].tokens {
			r := i % rows
			if parted[r] || tok == runs[1].tokens[i] {
				continue
			}
			logits := runs[0].logits[i*vocab : (i+1)*vocab]
			gap := float64(logits[tok] - logits[runs[1].tokens[i]])
			if gap > 2*worst {
				t.Errorf("step %d, row %d: token %d without %s, %d with them, logits %.4g apart (largest difference %.3g)",
					i/rows, r, tok, what, runs[1].tokens[i], gap, worst)
			} else {
				t.Logf("step %d, row %d: a near tie (%.3g apart) parted the rows: %d and %d", i/rows, r, gap, tok, runs[1].tokens[i])
			}
			parted[r] = true
		}
	})
}

// greedyRun is what decodeGreedy saw: every row's token of every step,
// every step's logits, and the primitives of the last step's graph (whole
// only where no layer was queued before the step's end).
type greedyRun struct {
	tokens []int32
	logits []float32
	last   map[string]int
}

// decodeGreedy prefills one row per prompt length (synthetic tokens),
// then decodes steps greedy steps of all rows together.
func decodeGreedy(t *testing.T, s mlx.Stream, cfg model.Config, net *llama.Model, prompts []int, steps int) greedyRun {
	p, err := kvpool.New(s, cfg.ActDType, model.PoolLayers(cfg), kvpool.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	var run greedyRun
	rows := make([]kvpool.Row, len(prompts))
	for r, n := range prompts {
		rows[r] = kvpool.Row{Seq: p.NewSeq(), Tokens: syntheticPrompt(n, r), Sample: true}
	}
	for step := range steps + 1 {
		f := mlx.NewFrame(s)
		bt, err := p.Begin(f, rows)
		if err != nil {
			t.Fatal(err)
		}
		logits := net.Forward(f, bt)
		if step == steps {
			if run.last, err = mlx.GraphPrimitives(logits); err != nil {
				t.Fatal(err)
			}
		}
		ids := f.ToInt32s(f.Argmax(logits, 1, false))
		run.logits = append(run.logits, f.ToFloat32s(logits)...)
		if err := f.Err(); err != nil {
			t.Fatal(fmt.Errorf("step: %w", err))
		}
		bt.Commit()
		f.Free()
		run.tokens = append(run.tokens, ids...)
		for r := range rows {
			rows[r].Tokens = []int32{ids[r]}
		}
	}
	for _, r := range rows {
		r.Seq.Free()
	}
	return run
}

// TestDispatchedLayersSameLogitsCUDA decodes four rows greedily on a GPU
// with the checkpoint PROVIDER_BENCH_MODEL names, evaluated at each
// step's end and queued each 1 and 4 layers (mlx.SetDispatchLayers): the
// same graph, so every logit must be the same float.
func TestDispatchedLayersSameLogitsCUDA(t *testing.T) {
	d := benchCheckpoint(t, "layers queued during a step are")
	d.th.Do(func() {
		defer mlx.SetDispatchLayers(mlx.SetDispatchLayers(0))
		prompts := []int{120, 57, 33, 9}
		want := decodeGreedy(t, d.s, d.cfg, d.net, prompts, 8)
		for _, every := range []int{1, 4} {
			mlx.SetDispatchLayers(every)
			got := decodeGreedy(t, d.s, d.cfg, d.net, prompts, 8)
			sameLogits(t, fmt.Sprintf("queued each %d layers", every), "evaluated at the step's end", got, want)
			t.Logf("queued each %d layers: %d logits the same", every, len(want.logits))
		}
	})
}

// TestFusedGemvSameLogitsCUDA decodes greedily on a GPU with the
// checkpoint PROVIDER_BENCH_MODEL names, with the matrix-vector kernel's
// products fused with the residual add, the SwiGLU and the q/k/v
// rotation (mlx.SetFusedGemv(1)) and kept apart: one row (the kernel's
// default), then two with the tensor-core kernel off (the matrix-vector
// kernel then takes both). The fused kernels round and compute as the ops
// they replace, so every logit must be the same float.
func TestFusedGemvSameLogitsCUDA(t *testing.T) {
	d := benchCheckpoint(t, "the fused products are")
	d.th.Do(func() {
		defer mlx.SetFusedGemv(mlx.SetFusedGemv(1))
		defer mlx.SetAffineMMA(mlx.SetAffineMMA(true))
		for _, c := range []struct {
			prompts []int
			mma     bool
		}{{[]int{120}, true}, {[]int{120, 57}, false}} {
			mlx.SetAffineMMA(c.mma)
			mlx.SetFusedGemv(0)
			want := decodeGreedy(t, d.s, d.cfg, d.net, c.prompts, 8)
			mlx.SetFusedGemv(1)
			got := decodeGreedy(t, d.s, d.cfg, d.net, c.prompts, 8)
			sameLogits(t, fmt.Sprintf("%d rows fused", len(c.prompts)), "apart", got, want)
			t.Logf("%d rows: %d logits the same fused and apart", len(c.prompts), len(want.logits))
		}
	})
}

// TestKernelStoreSameLogitsCUDA decodes greedily on a GPU with the
// checkpoint PROVIDER_BENCH_MODEL names, with each decode step's keys and
// values written into the pool by the kernel that makes them
// (kvpool.Batch.KernelStore, the default) and scattered into it by MLX
// (PROVIDER_GPU_KV_STORE=0): one row (the matrix-vector kernel's product
// and rotation), two with the tensor-core kernel off (the same kernel),
// and eight (the tensor-core product, then the rotation's own kernel). The
// pool holds the same floats either way, so every logit must be the same
// float; and a decode step must scatter nothing with the store and
// something without it.
func TestKernelStoreSameLogitsCUDA(t *testing.T) {
	d := benchCheckpoint(t, "keys and values stored by the q/k/v kernels are")
	for _, c := range []struct {
		prompts []int
		mma     bool
	}{{[]int{120}, true}, {[]int{120, 57}, false}, {[]int{120, 57, 33, 200, 9, 64, 150, 17}, true}} {
		var runs [2]greedyRun
		for i, env := range []string{"0", "1"} {
			t.Setenv("PROVIDER_GPU_KV_STORE", env)
			d.th.Do(func() {
				defer mlx.SetAffineMMA(mlx.SetAffineMMA(c.mma))
				// The last step's graph counted whole.
				defer mlx.SetDispatchLayers(mlx.SetDispatchLayers(0))
				runs[i] = decodeGreedy(t, d.s, d.cfg, d.net, c.prompts, 8)
			})
		}
		scattered, stored := runs[0].last["ScatterAxis"], runs[1].last["ScatterAxis"]
		if scattered == 0 || stored != 0 {
			t.Fatalf("%d rows: a decode step scattered %d times without the store, %d with it", len(c.prompts), scattered, stored)
		}
		sameLogits(t, fmt.Sprintf("%d rows, stored by the kernels", len(c.prompts)), "scattered", runs[1], runs[0])
		t.Logf("%d rows: %d logits the same stored and scattered (%d scatters a step fewer)", len(c.prompts), len(runs[0].logits), scattered)
	}
}

// TestFusedNormSameTokensCUDA is TestLayerKernelsSameTokensCUDA for the
// RMSNorms inside the fused q/k/v and gate/up products (mlx.SetFusedGemv
// 2) against the norms apart (1), for one row, which the matrix-vector
// kernel takes.
func TestFusedNormSameTokensCUDA(t *testing.T) {
	sameTokensCUDA(t, "the norms in the products", func(on bool) bool {
		level := 1
		if on {
			level = 2
		}
		return mlx.SetFusedGemv(level) == 2
	}, []int{120})
}

// benchCheckpoint is the checkpoint PROVIDER_BENCH_MODEL names, loaded on
// the default device, or a loud skip naming what goes untested.
func benchCheckpoint(t *testing.T, untested string) onDevice {
	path := os.Getenv("PROVIDER_BENCH_MODEL")
	if path == "" {
		t.Skipf("NEEDS PROVIDER_BENCH_MODEL (a Llama checkpoint) and a CUDA device: %s untested here", untested)
	}
	return loadOnDevice(t, path)
}

// sameLogits requires every logit of got (what names it) to be the same
// float as want's (than names it).
func sameLogits(t *testing.T, what, than string, got, want greedyRun) {
	t.Helper()
	if len(got.logits) != len(want.logits) {
		t.Fatalf("%s: %d logits, %d %s", what, len(got.logits), len(want.logits), than)
	}
	for i := range want.logits {
		if got.logits[i] != want.logits[i] {
			t.Fatalf("%s: logit %d is %v, %v %s", what, i, got.logits[i], want.logits[i], than)
		}
	}
}
