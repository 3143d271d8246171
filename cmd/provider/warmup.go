package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/goprovider/provider/engine"
	"github.com/goprovider/provider/mlx"
)

// A GPU backend compiles a kernel the first time a shape needs it (MLX's
// CUDA backend: NVRTC, seconds per kernel), and a step that meets a new
// number of tokens or rows then stalls every row in it, for half a minute
// on a 7B model. Before a model on a GPU is served, warmUp runs it
// through the step shapes serving meets: one-row prefills of a spread of
// lengths, then growing numbers of rows decoding together. MLX keeps what
// it compiles on disk (usePTXCache), so a later start pays only the
// forwards. PROVIDER_WARMUP=0 skips it; PROVIDER_WARMUP=1 runs it on the
// CPU too (where nothing is compiled; the tests run it there).

// warmPlan is a GPU warm-up: the prompt lengths of one-row prefills and
// the numbers of rows to decode together. Prompts stay under one prefix
// cache block, so the warm-up leaves no cached blocks behind.
func warmPlan(maxConc, ctxLen int) (prefills, rows []int) {
	for _, n := range []int{1, 2, 3, 4, 5, 6, 7, 8, 10, 12, 16, 20, 24, 32, 40, 48, 64, 96, 128, 160, 192, 255} {
		if ctxLen > 0 && n >= ctxLen {
			break
		}
		prefills = append(prefills, n)
	}
	for c := 2; c <= maxConc; c *= 2 {
		rows = append(rows, c)
	}
	if len(rows) > 0 && rows[len(rows)-1] != maxConc && maxConc > 1 {
		rows = append(rows, maxConc)
	}
	return prefills, rows
}

// warmUp runs warmPlan's generations through g (greedy, each ends after a
// few tokens) and logs how long it took.
func warmUp(ctx context.Context, name string, g *slotGen, vocab, maxConc, ctxLen int, log *slog.Logger) error {
	start := time.Now()
	prefills, rows := warmPlan(maxConc, ctxLen)
	log.Info("warm-up: compiling the GPU kernels of each step shape", "model", name, "prefills", len(prefills), "row_counts", rows)
	ctx, cancel := context.WithTimeout(ctx, 15*time.Minute)
	defer cancel()
	// gen runs concurrently for the row counts: each takes its own number.
	var seq atomic.Int64
	gen := func(promptLen, tokens int) error {
		n := int(seq.Add(1))
		prompt := make([]int32, promptLen)
		for i := range prompt {
			prompt[i] = int32((n*131 + i*17) % vocab)
		}
		ch, err := g.Submit(ctx, engine.Generation{ID: engine.RequestID(fmt.Sprintf("warm-up-%s-%d", name, n)), Prompt: prompt,
			MaxTokens: tokens, TopLogprobs: -1, IgnoreEOS: true})
		if err != nil {
			return err
		}
		var last engine.Event
		for ev := range ch {
			last = ev
		}
		if last.Kind != engine.EventFinished {
			return fmt.Errorf("warm-up generation: %v", last.Err)
		}
		return nil
	}
	for _, n := range prefills {
		if err := gen(n, 1); err != nil {
			return err
		}
	}
	log.Info("warm-up: prefills done", "model", name, "seconds", time.Since(start).Seconds())
	for _, c := range rows {
		var wg sync.WaitGroup
		errs := make(chan error, c)
		for range c {
			wg.Add(1)
			go func() {
				defer wg.Done()
				errs <- gen(8, 4)
			}()
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			if err != nil {
				return err
			}
		}
	}
	log.Info("warm-up done", "model", name, "seconds", time.Since(start).Seconds())
	return nil
}

// usePTXCache points MLX's cache of compiled CUDA kernels at the user's
// cache directory (per MLX version), unless MLX_PTX_CACHE_DIR is set:
// MLX's default is under the temporary directory, which a reboot or a
// fresh container empties. Call it before MLX compiles anything.
func usePTXCache() {
	if os.Getenv("MLX_PTX_CACHE_DIR") != "" {
		return
	}
	dir, err := os.UserCacheDir()
	if err != nil {
		return
	}
	// MLX makes the directory when it first compiles a kernel.
	os.Setenv("MLX_PTX_CACHE_DIR", filepath.Join(dir, "provider", "mlx", mlx.Version(), "ptx"))
}
