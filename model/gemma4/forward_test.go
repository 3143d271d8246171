package gemma4

import (
	"path/filepath"
	"slices"
	"testing"

	"github.com/goprovider/provider/engine"
	"github.com/goprovider/provider/model"
	"github.com/goprovider/provider/sample"
)

// greedy runs rows together: one Forward per step over every row, prompts
// of different lengths in the first step, then batched single-token
// decode. It returns each row's tokens and the logits of its last step.
func greedy(tb testing.TB, l *loaded, prompts [][]int32, steps int) ([][]int32, [][]float32) {
	tb.Helper()
	caches := make([]*Cache, len(prompts))
	for i := range caches {
		caches[i] = l.newCache(tb)
	}
	out := make([][]int32, len(prompts))
	last := make([][]float32, len(prompts))
	next, vocab := prompts, l.cfg.Vocab
	for range steps {
		logits := l.step(tb, next, caches)
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
				c := l.newCache(t)
				at := 0
				var logits []float32
				for _, n := range schedule {
					logits = l.step(t, [][]int32{prompt[at : at+n]}, []*Cache{c})
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
					logits = l.step(t, [][]int32{{tok}}, []*Cache{c})
				}
				if worst > logitTol {
					t.Errorf("schedule %v: max |logit diff| vs mlx-lm %.3g", schedule, worst)
				}
				t.Logf("schedule %v: %d tokens as mlx-lm, max |logit diff| %.3g", schedule, decode, worst)
			}
		})
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
		var net *Model
		var err error
		l.th.Do(func() { net, err = New(cfg, l.w) })
		if err != nil {
			t.Fatal(err)
		}
		other := &loaded{m: l.m, th: l.th, s: l.s, w: l.w, net: net, cfg: cfg}
		got := other.step(t, [][]int32{p.PromptTokens}, []*Cache{other.newCache(t)})
		d, _ := maxAbsDiff(got, ref)
		if d < 100*logitTol {
			t.Errorf("window %d: max |logit diff| %.3g is within 100x the tolerance", fx.Window+delta, d)
		}
		t.Logf("window %d: max |logit diff| vs mlx-lm (window %d) %.3g", fx.Window+delta, fx.Window, d)
	}
}

// TestSlidingKVPlateau generates past the window token by token and checks
// after every step that the sliding layers' bytes stop growing at the
// window and equal the ledger's charge for them (engine.LayoutOf), that
// KV-sharing layers hold nothing, and that the global layers keep growing.
func TestSlidingKVPlateau(t *testing.T) {
	for _, name := range refModels {
		t.Run(name, func(t *testing.T) {
			l := load(t, name)
			fx := readFixture(t, name)
			ledger := engine.LayoutOf(l.cfg)
			c := l.newCache(t)
			next := fx.Prompts[0].PromptTokens
			plateau := int64(-1)
			for c.Len() < 3*fx.Window {
				next = []int32{sample.Argmax(l.step(t, [][]int32{next}, []*Cache{c}))}
				T := c.Len()
				var local, global int64
				for i, k := range l.cfg.Kinds {
					switch {
					case k.SharedFrom >= 0:
						if c.LayerBytes(i) != 0 {
							t.Fatalf("layer %d shares layer %d's KV but holds %d bytes", i, k.SharedFrom, c.LayerBytes(i))
						}
					case k.Window > 0:
						local += c.LayerBytes(i)
					default:
						global += c.LayerBytes(i)
					}
				}
				charge := ledger.SequenceBytes(T) - int64(T)*ledger.BytesPerToken()
				switch {
				case T >= fx.Window && local != charge:
					t.Fatalf("%d tokens: sliding layers hold %d bytes, the ledger charges %d", T, local, charge)
				case plateau >= 0 && local != plateau:
					t.Fatalf("%d tokens: sliding layers grew from %d to %d bytes", T, plateau, local)
				case global < int64(T)*ledger.BytesPerToken() || global >= int64(T+cacheStep)*ledger.BytesPerToken():
					t.Fatalf("%d tokens: global layers hold %d bytes for %d per token", T, global, ledger.BytesPerToken())
				}
				if T >= fx.Window {
					plateau = local
				}
				if c.Bytes() != local+global {
					t.Fatalf("Bytes %d, layers sum to %d", c.Bytes(), local+global)
				}
			}
			t.Logf("%d tokens: sliding layers %d bytes (window %d), ledger SequenceBytes %d, cache %d",
				c.Len(), plateau, fx.Window, ledger.SequenceBytes(c.Len()), c.Bytes())
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

var _ model.Cache = (*Cache)(nil)
