package engine

import (
	"errors"

	"github.com/goprovider/provider/cache"
	"github.com/goprovider/provider/kvpool"
	"github.com/goprovider/provider/sample"
)

// Generation is one request as the engine loop receives it: tokens in,
// sampling settings, bounds. Text, templates and stop strings are handled
// before and after the engine.
type Generation struct {
	// ID must be unique among the engine's live generations.
	ID RequestID
	// Prompt is the tokenized prompt; it must not be empty.
	Prompt []int32
	// MaxTokens caps generated tokens; <= 0 finishes at once with "length".
	MaxTokens int
	Sampling  sample.Params
	// TopLogprobs asks for the log-probability of each sampled token and
	// that many alternatives; negative asks for none.
	TopLogprobs int
	Priority    int
	// IgnoreEOS generates past end-of-sequence tokens until MaxTokens.
	IgnoreEOS bool
	// CacheScope is the tenant scope of the prefix cache (cache.SaltScope):
	// only rows of the same scope share cached blocks.
	CacheScope cache.Scope
	// Spans are the prompt's media placeholder runs, one per image or
	// video frame, in order: each is attended bidirectionally, never split
	// by a prefill chunk, and keys the prefix cache's blocks by its hash.
	Spans []cache.Span
	// Embeds replace the token embeddings of prompt positions with given
	// input embeddings (an image's soft tokens, written over its
	// placeholders): each Rows x the model's hidden size, inside the
	// prompt. The model applies them only where its family reads them
	// (model.Network); the prefix cache keys those positions by their
	// span's hash.
	Embeds []kvpool.Embed
	// Grammar, when set, constrains the generated tokens (structured
	// outputs): the engine starts one Constraint from it per generation.
	// The row samples on the host, only among the tokens its mask allows,
	// and stops ("stop") once the grammar is complete.
	Grammar Grammar `msgpack:"-"`
}

// Grammar is a compiled grammar (package grammar implements it; the
// engine never sees how). It is safe for concurrent use.
type Grammar interface {
	// NewConstraint starts a generation at the grammar's start.
	NewConstraint() Constraint
}

// Constraint is one generation's place in its grammar. The engine calls
// it from one goroutine at a time (not always the same one), in the
// order Mask, Accept of a token that mask allowed, Mask, ..., and Close
// once, when the row ends, after any Mask has returned.
type Constraint interface {
	// Mask returns the tokens allowed at the next step: bit i%32 of word
	// i/32 is token i, and ids past the mask's end are not allowed. Once
	// the grammar is complete only end-of-sequence tokens are allowed.
	// The slice stays valid until the next call.
	Mask() ([]uint32, error)
	// Accept advances past tok and reports whether the grammar is
	// complete: only end of sequence may follow.
	Accept(tok int32) (done bool, err error)
	// Close releases the constraint.
	Close()
}

// EventKind tells the three kinds of Event apart.
type EventKind uint8

// Event kinds.
const (
	// EventDelta carries newly sampled tokens.
	EventDelta EventKind = iota + 1
	// EventFinished ends a stream normally; Reason and Usage are set.
	EventFinished
	// EventError ends a stream with Err.
	EventError
)

// Logprob is one sampled token's log-probability and its top alternatives.
type Logprob struct {
	Token   int32
	Logprob float64
	Top     []sample.TokenLogprob
}

// Usage counts tokens of one generation.
type Usage struct {
	PromptTokens     int
	CompletionTokens int
	CachedTokens     int
}

// Event is what a generation's stream delivers, in order: deltas, then
// exactly one EventFinished or EventError, then the channel closes.
type Event struct {
	Kind     EventKind
	Tokens   []int32
	Logprobs []Logprob // parallel to Tokens when TopLogprobs >= 0
	Reason   FinishReason
	Usage    Usage
	Err      error
}

// Errors of the engine loop (the scheduler's ErrQueueFull, ErrNeverFits,
// ErrDuplicateID and ErrEmptyPrompt are returned by Submit too).
var (
	// ErrDraining: the engine is shutting down and takes no new work.
	ErrDraining = errors.New("engine: draining")
	// ErrStepFailed: the MLX step of the row failed.
	ErrStepFailed = errors.New("engine: generation step failed")
	// ErrStuck: the row made no progress within its lease.
	ErrStuck = errors.New("engine: row made no progress within its lease")
	// ErrShutdown: the drain period ended before the row finished.
	ErrShutdown = errors.New("engine: shut down before the generation finished")
	// ErrConstraint: the row's grammar constraint failed (its mask or its
	// advance past a token).
	ErrConstraint = errors.New("engine: grammar constraint failed")
)
