package gemma4

import (
	"path/filepath"
	"slices"
	"testing"

	"github.com/goprovider/provider/engine"
	"github.com/goprovider/provider/kvpool"
	"github.com/goprovider/provider/model"
	"github.com/goprovider/provider/sample"
)

// greedy runs rows together: one Forward per step over every row, prompts
// of different lengths in the first step, then batched single-token
// decode. It returns each row's tokens and the logits of its last step.
func greedy(tb testing.TB, l *loaded, prompts [][]int32, steps int) ([][]int32, [][]float32) {
	tb.Helper()
	seqs := make([]*kvpool.Seq, len(prompts))
	for i := range seqs {
		seqs[i] = l.newSeq(tb)
	}
	out := make([][]int32, len(prompts))
	last := make([][]float32, len(prompts))
	next, vocab := prompts, l.cfg.Vocab
	for range steps {
		logits := l.step(tb, next, seqs)
		next = make([][]int32, len(prompts))
		for i := range prompts {
			last[i] = logits[i*vocab : (i+1)*vocab]
			tok := sample.Argmax(last[i])
			out[i] = append(out[i], tok)
			next[i] = []int32{tok}
		}
	}
	return out, last
}

// TestBatchedDecodeEqualsAlone decodes the reference prompts together (one
// shorter than the window that crosses it while decoding, one longer) and
// checks that each row's tokens equal those it gets alone, and its logits
// up to float summation order. The expert block then routes tokens of
// several rows through one expert call.
func TestBatchedDecodeEqualsAlone(t *testing.T) {
	for _, name := range refModels {
		t.Run(name, func(t *testing.T) {
			l := load(t, name)
			fx := readFixture(t, name)
			var prompts [][]int32
			for _, p := range fx.Prompts {
				prompts = append(prompts, p.PromptTokens)
			}
			const steps = 12
			together, lastTogether := greedy(t, l, prompts, steps)
			for i, p := range prompts {
				alone, lastAlone := greedy(t, l, [][]int32{p}, steps)
				if !slices.Equal(alone[0], together[i]) {
					t.Errorf("row %d (%d prompt tokens): batched %v, alone %v", i, len(p), together[i], alone[0])
				}
				d, at := maxAbsDiff(lastTogether[i], lastAlone[0])
				if d > 1e-4 {
					t.Errorf("row %d: last logits differ by %.3g at %d", i, d, at)
				}
				t.Logf("row %d (%d prompt tokens): %d tokens identical, last logits max |diff| %.3g", i, len(p), steps, d)
			}
		})
	}
}

// TestChunkedPrefillMatchesOneChunk prefills the longest reference prompt
// in one chunk and in several (chunks shorter than, equal to and straddling
// the window, single tokens in between), then decodes: every schedule gives
// mlx-lm's tokens and logits within float summation order.
func TestChunkedPrefillMatchesOneChunk(t *testing.T) {
	for _, name := range refModels {
		t.Run(name, func(t *testing.T) {
			l := load(t, name)
			fx := readFixture(t, name)
			p := fx.Prompts[1]
			prompt, w := p.PromptTokens, fx.Window
			P := len(prompt)
			if P <= 2*w {
				t.Fatalf("prompt of %d tokens does not cover two windows of %d", P, w)
			}
			ref := readF32(t, filepath.Join(refDir, name, p.Logits))
			const decode = 4
			for _, schedule := range [][]int{
				{w, P - w},
				{3, 5, 1, P - 9},
				{w - 1, 1, 1, P - w - 1},
				{2*w + 1, P - 2*w - 1},
			} {
				seq := l.newSeq(t)
				at := 0
				var logits []float32
				for _, n := range schedule {
					logits = l.step(t, [][]int32{prompt[at : at+n]}, []*kvpool.Seq{seq})
					at += n
				}
				worst := 0.0
				for s := range decode {
					d, _ := maxAbsDiff(logits, ref[s*fx.Vocab:(s+1)*fx.Vocab])
					worst = max(worst, d)
					tok := sample.Argmax(logits)
					if tok != p.Generated[s] {
						t.Fatalf("schedule %v step %d: token %d, mlx-lm %d", schedule, s, tok, p.Generated[s])
					}
					logits = l.step(t, [][]int32{{tok}}, []*kvpool.Seq{seq})
				}
				if worst > logitTol {
					t.Errorf("schedule %v: max |logit diff| vs mlx-lm %.3g", schedule, worst)
				}
				t.Logf("schedule %v: %d tokens as mlx-lm, max |logit diff| %.3g", schedule, decode, worst)
			}
		})
	}
}

// TestMixedStepsMatchMLXLM runs the reference prompts as one engine would:
// rows joining at different steps, prefilling in chunks while other rows
// decode in the same step (one flattened batch of prefill chunks and
// decode tokens), on both of the pool's attention paths. Every row's
// logits after its prompt and after each decode token are mlx-lm's within
// logitTol, and its greedy tokens are mlx-lm's.
func TestMixedStepsMatchMLXLM(t *testing.T) {
	for _, name := range refModels {
		for _, path := range poolPaths {
			t.Run(name+"/"+path.name, func(t *testing.T) {
				base := load(t, name)
				l := base.withPool(t, base.cfg, path.opt)
				fx := readFixture(t, name)
				// Per prompt: the step it joins at and its prefill chunks.
				plans := []struct {
					join   int
					chunks []int
				}{
					{0, []int{len(fx.Prompts[0].PromptTokens)}},
					{1, []int{3, fx.Window, len(fx.Prompts[1].PromptTokens) - 3 - fx.Window}},
					{2, []int{1, len(fx.Prompts[2].PromptTokens) - 1}},
				}
				type row struct {
					seq   *kvpool.Seq
					ref   []float32
					at    int // prompt tokens sent
					chunk int // next chunk
					out   []int32
					next  int32 // the token to decode next
					done  bool
					worst float64
				}
				const decode = 10
				rows := make([]*row, len(plans))
				for i, p := range fx.Prompts {
					rows[i] = &row{seq: l.newSeq(t), ref: readF32(t, filepath.Join(refDir, name, p.Logits))}
				}
				mixed := 0
				for step := 0; ; step++ {
					var tokens [][]int32
					var seqs []*kvpool.Seq
					var in []int
					prefills, decodes := 0, 0
					for i, r := range rows {
						if r.done || plans[i].join > step {
							continue
						}
						prompt := fx.Prompts[i].PromptTokens
						if r.at < len(prompt) {
							n := plans[i].chunks[r.chunk]
							tokens = append(tokens, prompt[r.at:r.at+n])
							r.at += n
							r.chunk++
							prefills++
						} else {
							tokens = append(tokens, []int32{r.next})
							decodes++
						}
						seqs = append(seqs, r.seq)
						in = append(in, i)
					}
					if len(in) == 0 {
						break
					}
					if prefills > 0 && decodes > 0 {
						mixed++
					}
					logits := l.step(t, tokens, seqs)
					for j, i := range in {
						r := rows[i]
						if r.at < len(fx.Prompts[i].PromptTokens) {
							continue // mid-prompt: no reference logits
						}
						s := len(r.out)
						got := logits[j*fx.Vocab : (j+1)*fx.Vocab]
						d, at := maxAbsDiff(got, r.ref[s*fx.Vocab:(s+1)*fx.Vocab])
						if d > logitTol {
							t.Errorf("step %d, prompt %d, its step %d: max |logit diff| %.3g at token %d", step, i, s, d, at)
						}
						r.worst = max(r.worst, d)
						tok := sample.Argmax(got)
						r.out = append(r.out, tok)
						if tok != fx.Prompts[i].Generated[s] {
							t.Fatalf("step %d, prompt %d, its step %d: token %d, mlx-lm %d", step, i, s, tok, fx.Prompts[i].Generated[s])
						}
						r.next = tok
						r.done = len(r.out) == decode
					}
				}
				if mixed < 2 {
					t.Fatalf("only %d steps mixed prefill chunks and decode tokens", mixed)
				}
				for i, r := range rows {
					t.Logf("prompt %d (joins at step %d, chunks %v): %d tokens as mlx-lm, max |logit diff| %.3g", i, plans[i].join, plans[i].chunks, len(r.out), r.worst)
				}
			})
		}
	}
}

// TestWindowSizeIsObservable rebuilds the network over the same weights
// with the sliding window one token shorter and one longer: the logits of
// the prompt longer than the window must then leave the tolerance by far,
// so the reference comparison pins the window.
func TestWindowSizeIsObservable(t *testing.T) {
	l := load(t, "moe")
	fx := readFixture(t, "moe")
	p := fx.Prompts[1]
	ref := readF32(t, filepath.Join(refDir, "moe", p.Logits))[:fx.Vocab]
	for _, delta := range []int{-1, 1} {
		cfg := l.cfg
		cfg.Kinds = slices.Clone(cfg.Kinds)
		for i := range cfg.Kinds {
			if cfg.Kinds[i].Window > 0 {
				cfg.Kinds[i].Window += delta
			}
		}
		other := l.withPool(t, cfg, kvpool.Options{})
		got := other.step(t, [][]int32{p.PromptTokens}, []*kvpool.Seq{other.newSeq(t)})
		d, _ := maxAbsDiff(got, ref)
		if d < 100*logitTol {
			t.Errorf("window %d: max |logit diff| %.3g is within 100x the tolerance", fx.Window+delta, d)
		}
		t.Logf("window %d: max |logit diff| vs mlx-lm (window %d) %.3g", fx.Window+delta, fx.Window, d)
	}
}

// poolGroups is the pool's block groups for cfg, as kvpool forms them: one
// per distinct window of the storage-owning layers, in layer order, with
// the bytes one block of the group holds over its layers (keys and
// values). KV-sharing layers belong to no group of their own and add no
// bytes.
func poolGroups(cfg model.Config) (windows []int, blockBytes []int64) {
	for _, k := range cfg.Kinds {
		if k.SharedFrom >= 0 {
			continue
		}
		g := slices.Index(windows, k.Window)
		if g < 0 {
			g = len(windows)
			windows, blockBytes = append(windows, k.Window), append(blockBytes, 0)
		}
		blockBytes[g] += int64(kvpool.BlockTokens) * 2 * int64(k.KVHeads) * int64(k.HeadDim) * int64(cfg.ActDType.Size())
	}
	return windows, blockBytes
}

// heldBlocks is how many blocks a layer of the given window (0: full
// attention) holds for a sequence of n tokens between steps: every block up
// to position n-1 for a full layer, at most kvpool.RingBlocks(window) of
// the newest for a sliding one.
func heldBlocks(window, n int) int {
	b := (n + kvpool.BlockTokens - 1) / kvpool.BlockTokens
	if window > 0 {
		b = min(b, kvpool.RingBlocks(window))
	}
	return b
}

// TestSlidingKVPlateau runs one sequence through the pool well past the
// window and across several block boundaries (decode steps from a short
// prompt, then prefill chunks, some spanning a boundary, each followed by
// decode steps across the next) and checks after every step what it holds:
// KV-sharing layers nothing, the sliding layers whole blocks up to
// kvpool.RingBlocks(window) and no more (their bytes stop growing), the
// global layers every block of the sequence, all of it exactly the
// ledger's charge (engine.LayoutOf) and the pool's held bytes.
func TestSlidingKVPlateau(t *testing.T) {
	for _, name := range refModels {
		t.Run(name, func(t *testing.T) {
			base := load(t, name)
			fx := readFixture(t, name)
			// A pool of its own, so that it holds this sequence's blocks only.
			l := base.withPool(t, base.cfg, kvpool.Options{})
			ledger := engine.LayoutOf(l.cfg)
			windows, blockBytes := poolGroups(l.cfg)
			var sharing int
			var ring int64 // the sliding layers' bytes once they hold their ring
			for g, w := range windows {
				if w > 0 {
					ring += int64(kvpool.RingBlocks(w)) * blockBytes[g]
				}
			}
			for _, k := range l.cfg.Kinds {
				if k.SharedFrom >= 0 {
					sharing++
				}
			}
			if ring == 0 || len(windows) < 2 {
				t.Fatalf("pool groups %v: want sliding and global layers", windows)
			}
			if name == "ple" && sharing == 0 {
				t.Fatalf("%s has no KV-sharing layer", name)
			}
			// The plateau: from here on a sliding layer holds its whole ring.
			plateauAt := (kvpool.RingBlocks(fx.Window)-1)*kvpool.BlockTokens + 1
			seq := l.newSeq(t)
			prompt := fx.Prompts[1].PromptTokens
			chunk := func(n int) []int32 {
				out := make([]int32, n)
				for i := range out {
					out[i] = prompt[i%len(prompt)]
				}
				return out
			}
			B := kvpool.BlockTokens
			// Each entry is a prefill chunk of that many tokens (0: the
			// first prompt) followed by decode steps up to a length.
			schedule := []struct{ chunk, decodeTo int }{
				{0, 3 * fx.Window},
				{B - 3*fx.Window - 5, B + 3},
				{B - 10, 2*B + 2},
				{B + 20, 3*B + 30},
			}
			next := fx.Prompts[0].PromptTokens
			plateau := int64(-1)
			steps := 0
			for _, sc := range schedule {
				if sc.chunk > 0 {
					next = chunk(sc.chunk)
				}
				for {
					next = []int32{sample.Argmax(l.step(t, [][]int32{next}, []*kvpool.Seq{seq}))}
					steps++
					var T int
					var blocks []int
					var held, poolHeld int64
					l.th.Do(func() { T, blocks, held, poolHeld = seq.Len(), seq.Blocks(), seq.Bytes(), l.st.Pool.HeldBytes() })
					if len(blocks) != len(windows) {
						t.Fatalf("%d tokens: blocks in %d groups, want %d (windows %v)", T, len(blocks), len(windows), windows)
					}
					var local, global int64
					for g, w := range windows {
						if want := heldBlocks(w, T); blocks[g] != want {
							t.Fatalf("%d tokens: group of window %d holds %d blocks, want %d", T, w, blocks[g], want)
						}
						if w > 0 {
							local += int64(blocks[g]) * blockBytes[g]
						} else {
							global += int64(blocks[g]) * blockBytes[g]
						}
					}
					full := int64((T+B-1)/B*B) * ledger.BytesPerToken()
					charge := ledger.SequenceBytes(T) - full
					switch {
					case held != local+global:
						t.Fatalf("%d tokens: sequence holds %d bytes, its storage-owning layers' blocks %d (sharing layers must hold nothing)", T, held, local+global)
					case held != ledger.SequenceBytes(T):
						t.Fatalf("%d tokens: sequence holds %d bytes, the ledger charges %d", T, held, ledger.SequenceBytes(T))
					case poolHeld != held:
						t.Fatalf("%d tokens: pool holds %d bytes, its one sequence %d", T, poolHeld, held)
					case local != charge:
						t.Fatalf("%d tokens: sliding layers hold %d bytes, the ledger charges %d", T, local, charge)
					case local > ring:
						t.Fatalf("%d tokens: sliding layers hold %d bytes, past their ring's %d", T, local, ring)
					case T >= plateauAt && local != ring:
						t.Fatalf("%d tokens: sliding layers hold %d bytes, not their ring's %d", T, local, ring)
					case plateau >= 0 && local != plateau:
						t.Fatalf("%d tokens: sliding layers grew from %d to %d bytes", T, plateau, local)
					case global < int64(T)*ledger.BytesPerToken() || global >= int64(T+B)*ledger.BytesPerToken():
						t.Fatalf("%d tokens: global layers hold %d bytes for %d per token", T, global, ledger.BytesPerToken())
					}
					if T >= plateauAt {
						plateau = local
					}
					if T >= sc.decodeTo {
						break
					}
				}
			}
			var T int
			var held int64
			l.th.Do(func() { T, held = seq.Len(), seq.Bytes() })
			t.Logf("%d tokens in %d steps: sliding layers %d bytes (window %d, ring of %d blocks), ledger SequenceBytes %d, sequence %d",
				T, steps, plateau, fx.Window, kvpool.RingBlocks(fx.Window), ledger.SequenceBytes(T), held)
			l.th.Do(seq.Free)
			l.th.Do(func() { held = l.st.Pool.HeldBytes() })
			if held != 0 {
				t.Fatalf("after Free the pool holds %d bytes", held)
			}
		})
	}
}

// TestManifestMatchesCheckpoint: the checkpoints hold exactly the tensors
// the manifest names (the loader drops nothing the forward pass reads and
// keeps nothing it does not).
func TestManifestMatchesCheckpoint(t *testing.T) {
	for _, name := range refModels {
		l := load(t, name)
		specs := TensorManifest(l.cfg)
		var want, got []string
		for _, s := range specs {
			want = append(want, s.Name)
			if tt := l.m.Tensors[s.Name]; tt == nil || !slices.Equal(tt.Shape, s.Shape) {
				t.Errorf("%s: %s wants %v", name, s.Name, s.Shape)
			}
		}
		for n := range l.m.Tensors {
			got = append(got, n)
		}
		slices.Sort(want)
		slices.Sort(got)
		if !slices.Equal(want, got) {
			t.Errorf("%s: manifest %v, checkpoint %v", name, want, got)
		}
	}
}
