package engine

import (
	"fmt"
	"slices"
	"time"

	"github.com/goprovider/provider/kvpool"
	"github.com/goprovider/provider/mlx"
	"github.com/goprovider/provider/model"
	"github.com/goprovider/provider/sample"
)

// A step runs as at most two forward passes: the decode rows a step built
// ahead covers (queued on the device while the host read the step before),
// and one pass over the rest of the plan. Before reading either, the
// engine builds the next step ahead for the rows it can predict: greedy
// rows whose next token is the device's argmax, with no grammar, that will
// not reach their token limit and whose next position lies in a block they
// hold. That step's tokens are the running step's picks as a device array,
// so the host's work (reading, delivering, planning, building the next
// graph) overlaps the device's.
//
// No step is built ahead of a step that samples a row's first token: the
// host builds the next step before it reads this one's picks, and MLX lets
// it queue only so much ahead of the device, so the building ends after the
// device has run part of the next step, and the first token (the TTFT)
// would wait for that (on this repository's 2-core CPU, about one decode
// step: 102 against 76 ms at c=1, BenchmarkSmolLM2Throughput).
//
// A step built ahead is used for the rows the next plan decodes that it
// covers, and otherwise dropped. Dropping changes nothing: its rows'
// sequences were not advanced, and what it wrote past their length is
// either written again with the same token at the same position or never
// read (blocks are reused only by steps queued after it).

// ahead is a decode step built before the step it follows was read.
type ahead struct {
	f    *mlx.Frame
	b    *kvpool.Batch
	rows []*live
	// seqs, seqLen and kvLen are each row's sequence, len(seq) and stored
	// tokens when the step was built: the row continues from it only if
	// the step it follows appended exactly one token and stored nothing
	// else.
	seqs          []*kvpool.Seq
	seqLen, kvLen []int
	// ids are the step's picks, [len(rows)] int32, queued on the device.
	ids mlx.Array
}

// pass is one forward pass of a step.
type pass struct {
	f *mlx.Frame
	b *kvpool.Batch
	// keep marks the rows the step commits (a pass built ahead); nil: all.
	keep []bool
	// sampling holds, per row of ids, the batch index of the sampling row
	// it picks for, -1 for a row the step does not use.
	sampling []int
	ids      mlx.Array // argmax per sampling row, int32 (mlx.Frame.Flat)
	// hostAt are the positions in ids of rows sampled on the host, whose
	// rows of logits host holds, float32 and flat. ids and host are in the
	// form the host reads, so that reading them once queued waits for
	// nothing queued after them (a step built ahead).
	hostAt []int32
	host   mlx.Array
}

// StepTimes are where the loop's steps spent their time: building and
// queueing the forward passes on the host, waiting for the device's
// results, and how many steps ran (partly) from a step built ahead.
type StepTimes struct {
	Steps, AheadSteps uint64
	Build, Wait       time.Duration
}

// StepTimes returns the engine's cumulative step times.
func (e *Engine) StepTimes() StepTimes {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.times
}

// lazyTokens reports whether steps may be built ahead for this network.
func (e *Engine) lazyTokens() bool {
	_, ok := e.net.(model.LazyTokens)
	return ok && e.opt.Ahead
}

// dropAhead releases a step built ahead that no step will use.
func (e *Engine) dropAhead() {
	if e.ahead != nil {
		e.ahead.f.Free()
		e.ahead = nil
	}
}

// run executes batch and returns each sampling row's pick, by batch index.
// An error fails the whole step.
func (e *Engine) run(batch []work) ([]pick, error) {
	t0 := e.opt.Clock.Now()
	picks := make([]pick, len(batch))
	var passes []*pass
	defer func() {
		for _, p := range passes {
			p.f.Free()
		}
	}()
	covered := make([]bool, len(batch))
	if a := e.ahead; a != nil {
		e.ahead = nil
		p := &pass{f: a.f, b: a.b, keep: make([]bool, len(a.rows)), ids: a.ids, sampling: make([]int, len(a.rows))}
		passes = append(passes, p)
		at := make(map[*live]int, len(a.rows))
		for j, l := range a.rows {
			at[l] = j
			p.sampling[j] = -1
		}
		tokens := make([]int32, len(a.rows))
		for i, w := range batch {
			j, ok := at[w.l]
			if !ok || !w.decode || w.l.kv != a.seqs[j] || len(w.l.seq) != a.seqLen[j]+1 || w.l.kv.Len() != a.kvLen[j] {
				continue
			}
			p.keep[j], p.sampling[j], tokens[j], covered[i] = true, i, w.tokens[0], true
		}
		if !slices.Contains(p.keep, true) {
			passes = passes[:0]
			a.f.Free()
		} else {
			a.b.Resolve(tokens)
		}
	}
	var rest []int
	for i := range batch {
		if !covered[i] {
			rest = append(rest, i)
		}
	}
	if len(rest) > 0 {
		p := &pass{f: mlx.NewFrame(e.s)}
		passes = append(passes, p)
		rows := make([]kvpool.Row, len(rest))
		for k, i := range rest {
			w := batch[i]
			if w.l.kv == nil {
				w.l.kv = e.pool.NewSeq()
				if e.prefix != nil {
					e.prefix.Track(w.l.kv, w.l.gen.CacheScope, w.l.gen.Spans)
				}
			}
			rows[k] = kvpool.Row{Seq: w.l.kv, Tokens: w.tokens, Sample: w.sample, Spans: w.l.spans, Embeds: w.l.gen.Embeds}
		}
		var err error
		if p.b, err = e.pool.Begin(p.f, rows); err != nil {
			e.dropAhead()
			return nil, err
		}
		logits := e.net.Forward(p.f, p.b)
		for _, i := range rest {
			if !batch[i].sample {
				continue
			}
			p.sampling = append(p.sampling, i)
			if !batch[i].l.deviceGreedy() {
				p.hostAt = append(p.hostAt, int32(len(p.sampling)-1))
			}
		}
		p.ids = p.f.Flat(p.f.Argmax(logits, 1, false), mlx.Int32)
		if len(p.hostAt) > 0 {
			p.host = p.f.Flat(p.f.Take(logits, p.f.Int32s(p.hostAt, len(p.hostAt)), 0), mlx.Float32)
		}
	}
	committed := false
	if e.lazyTokens() {
		committed = e.buildAhead(batch, passes)
	}
	t1 := e.opt.Clock.Now()
	var stepErr error
	vocab := e.net.Config().Vocab
	for _, p := range passes {
		ids := p.f.ToInt32s(p.ids)
		var host []float32
		if len(p.hostAt) > 0 {
			host = p.f.ToFloat32s(p.host)
		}
		if stepErr = p.f.Err(); stepErr != nil {
			break
		}
		h := 0
		for k, i := range p.sampling {
			if i < 0 {
				continue
			}
			l := batch[i].l
			if l.deviceGreedy() {
				picks[i] = pick{tok: ids[k]}
				continue
			}
			picks[i] = hostPick(l, host[h*vocab:(h+1)*vocab])
			h++
		}
	}
	t2 := e.opt.Clock.Now()
	if e.opt.Log != nil && t2.Sub(t0) >= time.Second {
		e.warnSlow(batch, len(passes), t0, t1, t2)
	}
	e.logPoolGrowth()
	e.mu.Lock()
	e.times.Steps++
	if len(passes) > 0 && passes[0].keep != nil {
		e.times.AheadSteps++
	}
	e.times.Build += t1.Sub(t0)
	e.times.Wait += t2.Sub(t1)
	e.mu.Unlock()
	if stepErr != nil {
		e.dropAhead()
		return nil, stepErr
	}
	if !committed {
		for _, p := range passes {
			p.b.CommitRows(p.keep)
		}
	}
	return picks, nil
}

// buildAhead commits the step's passes before they are read and queues the
// next step for the rows that can be predicted (see the top of this file).
// It reports whether it committed.
func (e *Engine) buildAhead(batch []work, passes []*pass) bool {
	var rows []*live
	var src []int32 // per row: its pick's index in the passes' ids, concatenated
	off := 0
	for _, p := range passes {
		if p.f.Err() != nil {
			return false
		}
		for k, i := range p.sampling {
			if i < 0 {
				continue
			}
			w := batch[i]
			l := w.l
			if l.emitted == 0 {
				// Its first token (see the top of this file).
				return false
			}
			if !l.deviceGreedy() || l.emitted+2 > l.gen.MaxTokens || (l.kv.Len()+len(w.tokens))%kvpool.BlockTokens == 0 {
				continue
			}
			rows = append(rows, l)
			src = append(src, int32(off+k))
		}
		off += len(p.b.LogitRows())
	}
	if len(rows) == 0 {
		return false
	}
	ids := make([]mlx.Array, len(passes))
	for i, p := range passes {
		if p.host.Valid() {
			p.f.AsyncEval(p.ids, p.host)
		} else {
			p.f.AsyncEval(p.ids)
		}
		ids[i] = p.ids
	}
	for _, p := range passes {
		p.b.CommitRows(p.keep)
	}
	a := &ahead{f: mlx.NewFrame(e.s), rows: rows}
	f := a.f
	all := ids[0]
	if len(ids) > 1 {
		all = f.Concatenate(0, ids...)
	}
	next := make([]kvpool.Row, len(rows))
	for r, l := range rows {
		next[r] = kvpool.Row{Seq: l.kv, Sample: true}
		a.seqs = append(a.seqs, l.kv)
		a.seqLen = append(a.seqLen, len(l.seq))
		a.kvLen = append(a.kvLen, l.kv.Len())
	}
	b, err := e.pool.BeginNext(f, next, f.Take(all, f.Int32s(src, len(src)), 0))
	if err == nil {
		a.b = b
		a.ids = f.Flat(f.Argmax(e.net.Forward(f, b), 1, false), mlx.Int32)
		f.AsyncEval(a.ids)
	}
	if err != nil || f.Err() != nil {
		// Nothing of the step was queued that a later one relies on.
		f.Free()
		return true
	}
	e.ahead = a
	return true
}

// logPoolGrowth logs a step that grew the KV pool, with MLX's active and
// cached memory after it. The pool grows by copying into an array twice
// its size, and on CUDA MLX allocates managed memory, which pages to the
// host instead of failing once the card is full: a growth near the
// device's memory is where a server that slows down for good would have
// started.
func (e *Engine) logPoolGrowth() {
	b := e.pool.Bytes()
	if b <= e.poolBytes {
		return
	}
	if e.opt.Log != nil {
		e.opt.Log.Info("kv pool grew", "bytes", b, "from_bytes", e.poolBytes, "mlx_active_bytes", mlx.ActiveMemory(),
			"mlx_cache_bytes", mlx.CacheMemory())
	}
	e.poolBytes = b
}

// warnSlow logs a step of a second or more that slowStep finds worth a
// warning, with its shape and its build and wait times.
func (e *Engine) warnSlow(batch []work, passes int, t0, t1, t2 time.Time) {
	decode, tokens := 0, 0
	for _, w := range batch {
		tokens += len(w.tokens)
		if w.decode {
			decode++
		}
	}
	if slowStep(t2.Sub(t0), tokens) {
		e.opt.Log.Warn("slow step", "rows", len(batch), "decode_rows", decode, "tokens", tokens, "passes", passes,
			"build_ms", t1.Sub(t0).Milliseconds(), "wait_ms", t2.Sub(t1).Milliseconds())
	}
}

// slowStep reports a step worth a warning: a second or more, and more than
// 50 ms a token (a long prefill chunk on a CPU takes seconds at a few
// milliseconds a token; a kernel compiled on first use or a stalled device
// stops a step of a few tokens).
func slowStep(d time.Duration, tokens int) bool {
	return d >= time.Second && d >= time.Duration(max(tokens, 1))*50*time.Millisecond
}

// hostPick samples a row whose token is not the device's argmax from its
// row of logits: a constrained row among the tokens its mask allows (its
// logprobs are the model's, before the mask).
func hostPick(l *live, row []float32) pick {
	raw := row
	if l.con != nil {
		mask, err := l.waitMask()
		if err != nil {
			return pick{err: fmt.Errorf("%w: %w", ErrConstraint, err)}
		}
		if l.gen.TopLogprobs >= 0 {
			row = slices.Clone(row)
		}
		if !applyMask(row, mask) {
			return pick{err: fmt.Errorf("%w: the grammar allows no token", ErrConstraint)}
		}
	}
	tok := l.sampler.Next(row)
	p := pick{tok: tok}
	if l.gen.TopLogprobs >= 0 {
		chosen, top := sample.Logprobs(raw, tok, l.gen.TopLogprobs)
		p.logprobs = []Logprob{{Token: tok, Logprob: chosen.Logprob, Top: top}}
	}
	return p
}
