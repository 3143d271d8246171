package stages

import (
	"context"
	"fmt"
)

// Stage is one request-level unit of the pipeline. Apply enriches req or
// says why it cannot; it must not keep req or ctx after it returns. It is
// called only on a request every earlier stage accepted (Run sees to it),
// so it may rely on what they set. A stage is deterministic: the same
// Request in gives the same Request (or error) out.
type Stage interface {
	// Name identifies the stage in records and logs.
	Name() string
	Apply(ctx context.Context, req *Request) error
}

// Run applies s to env unless env already failed or its context is done,
// marks env with the stage's error, records the step when rec is not nil,
// and returns env.
func Run(s Stage, env *Envelope, rec Recorder) *Envelope {
	if env.Err == nil {
		env.Err = env.Ctx.Err()
	}
	if env.Err != nil {
		return env
	}
	var in []byte
	if rec != nil {
		in = mustEncode(&env.Req)
	}
	err := s.Apply(env.Ctx, &env.Req)
	if err != nil {
		env.Err = fmt.Errorf("%s: %w", s.Name(), err)
	}
	if rec != nil {
		r := Record{Stage: s.Name(), In: in, Out: mustEncode(&env.Req)}
		if env.Err != nil {
			r.Err = env.Err.Error()
		}
		rec.Record(r)
	}
	return env
}
