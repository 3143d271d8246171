package model

import (
	"fmt"

	"github.com/goprovider/provider/kvpool"
	"github.com/goprovider/provider/mlx"
)

// Network is a family's forward pass bound to device weights. All methods
// run on the MLX thread.
type Network interface {
	Config() Config
	// Forward runs one step: every token of b (rows' prefill chunks and
	// decode tokens, flattened) through the network, storing keys and
	// values in b's pool through b.Attend, and returns the float32 logits
	// at b.SampleIndex(), [len(b.LogitRows()), vocab], owned by f. After an
	// error on f the sequences of b are unusable.
	Forward(f *mlx.Frame, b *kvpool.Batch) mlx.Array
	// Close releases what the network created (not the weights).
	Close()
}

// EmbedReader is a Network whose Forward writes the rows' input embeddings
// (kvpool.Row.Embeds, through kvpool.Batch.Overlay) over its token
// embeddings. Engines refuse embeddings for any other network rather than
// drop them.
type EmbedReader interface {
	Network
	ReadsEmbeds()
}

// LazyTokens is a Network whose Forward reads a step's token ids only
// through kvpool.Batch.TokenIDs, so a step can be built before its tokens
// reach the host (kvpool.Pool.BeginNext): the engine then builds a decode
// step while the device still runs the one before.
type LazyTokens interface {
	Network
	TakesLazyTokens()
}

// PoolLayers is the KV geometry of a config's layers, for kvpool.New.
func PoolLayers(c Config) []kvpool.Layer {
	out := make([]kvpool.Layer, len(c.Kinds))
	for i, k := range c.Kinds {
		out[i] = kvpool.Layer{KVHeads: k.KVHeads, HeadDim: k.HeadDim, Window: k.Window, SharedFrom: k.SharedFrom}
	}
	return out
}

// NewPool is an empty KV pool for net's layers on stream s.
func NewPool(net Network, s mlx.Stream, opt kvpool.Options) (*kvpool.Pool, error) {
	c := net.Config()
	return kvpool.New(s, c.ActDType, PoolLayers(c), opt)
}

// Stepper runs sequences through a network outside the engine (the
// generate command, tools, tests): one pool, one step at a time.
type Stepper struct {
	Net  Network
	Pool *kvpool.Pool
}

// NewStepper makes a Stepper with its own pool on stream s.
func NewStepper(net Network, s mlx.Stream) (*Stepper, error) {
	p, err := NewPool(net, s, kvpool.Options{})
	if err != nil {
		return nil, err
	}
	return &Stepper{Net: net, Pool: p}, nil
}

// NewSeq is an empty sequence of the stepper's pool.
func (st *Stepper) NewSeq() *kvpool.Seq { return st.Pool.NewSeq() }

// Close frees the pool.
func (st *Stepper) Close() { st.Pool.Close() }

// Forward appends tokens[i] to seqs[i] for every row and returns the
// evaluated float32 logits of each row's last new position, [rows, vocab],
// owned by f.
func (st *Stepper) Forward(f *mlx.Frame, tokens [][]int32, seqs []*kvpool.Seq) mlx.Array {
	if len(tokens) != len(seqs) {
		f.Fail(fmt.Errorf("model: %d token rows for %d sequences", len(tokens), len(seqs)))
		return mlx.Array{}
	}
	if f.Err() != nil {
		return mlx.Array{}
	}
	rows := make([]kvpool.Row, len(tokens))
	for i := range tokens {
		rows[i] = kvpool.Row{Seq: seqs[i], Tokens: tokens[i], Sample: true}
	}
	return st.ForwardRows(f, rows)
}

// ForwardRows is Forward over rows given whole (spans, input embeddings).
func (st *Stepper) ForwardRows(f *mlx.Frame, rows []kvpool.Row) mlx.Array {
	if f.Err() != nil {
		return mlx.Array{}
	}
	b, err := st.Pool.Begin(f, rows)
	if err != nil {
		f.Fail(err)
		return mlx.Array{}
	}
	logits := st.Net.Forward(f, b)
	if f.Eval(logits) != nil {
		return mlx.Array{}
	}
	b.Commit()
	return logits
}

// DecodeStepPrimitives counts, by name, the primitives of net's one-row
// decode step of token next after a prefill of prefill, on a pool of its
// own made with opt: what a step costs the host in MLX primitives (each
// evaluated one a kernel launch on a GPU), for tests and benchmarks. It
// must run on the MLX thread.
func DecodeStepPrimitives(net Network, s mlx.Stream, opt kvpool.Options, prefill []int32, next int32) (map[string]int, error) {
	p, err := NewPool(net, s, opt)
	if err != nil {
		return nil, err
	}
	defer p.Close()
	seq := p.NewSeq()
	defer seq.Free()
	var counts map[string]int
	for _, toks := range [][]int32{prefill, {next}} {
		if counts, err = countStep(net, s, p, seq, toks); err != nil {
			return nil, err
		}
	}
	return counts, nil
}

// countStep runs one step of toks for seq and returns its primitives.
func countStep(net Network, s mlx.Stream, p *kvpool.Pool, seq *kvpool.Seq, toks []int32) (map[string]int, error) {
	f := mlx.NewFrame(s)
	defer f.Free()
	b, err := p.Begin(f, []kvpool.Row{{Seq: seq, Tokens: toks, Sample: true}})
	if err != nil {
		return nil, err
	}
	out := f.Argmax(net.Forward(f, b), 1, false)
	counts, err := mlx.GraphPrimitives(out)
	if err != nil {
		return nil, err
	}
	if err := f.Eval(out); err != nil {
		return nil, err
	}
	b.Commit()
	return counts, nil
}
