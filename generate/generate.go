// Package generate runs one sequence from prompt to stop on a Network: the
// simplest driver of the forward pass, used by the generate command and by
// correctness tests. Batched serving lives in engine.
package generate

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/goprovider/provider/kvpool"
	"github.com/goprovider/provider/mlx"
	"github.com/goprovider/provider/model"
	"github.com/goprovider/provider/sample"
)

// Options bound one generation.
type Options struct {
	MaxTokens int
	Sampler   *sample.Sampler // nil: greedy
	Stop      []int32         // end-of-generation tokens; generation stops after emitting none of them
	// OnLogits, when set, sees every step's logits before sampling.
	OnLogits func(step int, logits []float32)
}

// Stats describe a finished generation.
type Stats struct {
	PromptTokens    int
	Generated       int
	PrefillDuration time.Duration
	DecodeDuration  time.Duration // from the first token to the last
	StoppedByEOS    bool
}

// PrefillTPS is prompt tokens per second of prefill.
func (s Stats) PrefillTPS() float64 { return rate(s.PromptTokens, s.PrefillDuration) }

// DecodeTPS is generated tokens per second after the first one.
func (s Stats) DecodeTPS() float64 { return rate(s.Generated-1, s.DecodeDuration) }

func rate(n int, d time.Duration) float64 {
	if n <= 0 || d <= 0 {
		return 0
	}
	return float64(n) / d.Seconds()
}

// ErrEmptyPrompt is returned for a prompt with no tokens.
var ErrEmptyPrompt = errors.New("generate: empty prompt")

// Run prefills prompt and decodes until a stop token, MaxTokens, or ctx ends,
// calling emit with each token (stop tokens are not emitted). It must run on
// the MLX thread.
func Run(ctx context.Context, s mlx.Stream, net model.Network, prompt []int32, o Options, emit func(int32)) (Stats, error) {
	st := Stats{PromptTokens: len(prompt)}
	if len(prompt) == 0 {
		return st, ErrEmptyPrompt
	}
	stepper, err := model.NewStepper(net, s)
	if err != nil {
		return st, fmt.Errorf("generate: %w", err)
	}
	defer stepper.Close()
	seq := stepper.NewSeq()
	stop := make(map[int32]bool, len(o.Stop))
	for _, id := range o.Stop {
		stop[id] = true
	}
	sampler := o.Sampler
	if sampler == nil {
		sampler = sample.New(sample.Params{})
	}
	start := time.Now()
	var firstTok time.Time
	next := prompt
	for step := 0; step < o.MaxTokens; step++ {
		if err := ctx.Err(); err != nil {
			return st, err
		}
		f := mlx.NewFrame(s)
		logits := f.ToFloat32s(stepper.Forward(f, [][]int32{next}, []*kvpool.Seq{seq}))
		f.Free()
		if err := f.Err(); err != nil {
			return st, fmt.Errorf("generate: step %d: %w", step, err)
		}
		if step == 0 {
			firstTok = time.Now()
			st.PrefillDuration = firstTok.Sub(start)
		}
		if o.OnLogits != nil {
			o.OnLogits(step, logits)
		}
		tok := sampler.Next(logits)
		if stop[tok] {
			st.StoppedByEOS = true
			break
		}
		st.Generated++
		emit(tok)
		next = []int32{tok}
	}
	if !firstTok.IsZero() {
		st.DecodeDuration = time.Since(firstTok)
	}
	return st, nil
}
