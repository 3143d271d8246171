package engine_test

import (
	"context"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"

	"github.com/goprovider/provider/cache"
	"github.com/goprovider/provider/engine"
	"github.com/goprovider/provider/engine/enginetest"
	"github.com/goprovider/provider/kvpool"
)

// prefixModels are the checkpoints the prefix cache must be exact on: full
// attention only (SmolLM2), sliding window 512 with full layers (Gemma 3
// 270M, prompts longer than its window), alternating window and full
// layers with sinks (tiny gpt-oss) and sliding, full and KV-shared layers
// (tiny Gemma 4).
var prefixModels = []struct {
	name, path string
	// prompt is the length of the shared prompts; long enough to span
	// several blocks and, for Gemma 3, to adopt more than its 512-token
	// window.
	prompt int
}{
	{"smollm2", enginetest.SmolLM2(), 600},
	{"gemma3", enginetest.Gemma3(), 800},
	{"gptoss-tiny", enginetest.GPTOSSTiny(), 700},
	{"gemma4-tiny", enginetest.Gemma4Tiny(), 700},
}

// randomPrompt is n token ids drawn with seed below vocab, avoiding the
// first ids (special tokens).
func randomPrompt(seed uint64, n, vocab int) []int32 {
	r := rand.New(rand.NewPCG(seed, 7))
	out := make([]int32, n)
	for i := range out {
		out[i] = int32(10 + r.IntN(vocab-10))
	}
	return out
}

// gen runs one greedy generation of 12 tokens and returns its tokens and
// usage.
func gen(t *testing.T, e *engine.Engine, id string, prompt []int32, scope cache.Scope) ([]int32, engine.Usage) {
	t.Helper()
	ch, err := e.Submit(context.Background(), engine.Generation{ID: engine.RequestID(id), Prompt: prompt, MaxTokens: 12,
		TopLogprobs: -1, IgnoreEOS: true, CacheScope: scope})
	if err != nil {
		t.Fatal(err)
	}
	toks, last := enginetest.Collect(ch)
	if last.Kind != engine.EventFinished {
		t.Fatalf("%s: ended with %+v", id, last)
	}
	return toks, last.Usage
}

// TestPrefixCacheIsExact runs prompts that share blocks through an engine
// with the prefix cache and checks every greedy output against the same
// prompt on an engine without it: byte-identical tokens, on a repeat, on a
// prompt that shares only its first blocks, and on a hit row batched with
// cold rows; cached_tokens is exactly the adopted blocks' tokens.
func TestPrefixCacheIsExact(t *testing.T) {
	for _, tc := range prefixModels {
		t.Run(tc.name, func(t *testing.T) {
			cold, m := enginetest.Start(t, tc.path, engine.Options{KVCapacity: 512 << 20, Sched: engine.Config{MaxConcurrent: 4}})
			warm, _ := enginetest.Start(t, tc.path, engine.Options{KVCapacity: 512 << 20, Sched: engine.Config{MaxConcurrent: 4},
				Prefix: engine.PrefixOptions{Budget: 256 << 20}})
			vocab := m.Config.Vocab
			a := randomPrompt(1, tc.prompt, vocab)
			// b shares a's first two blocks and one token more, then differs.
			b := append(slices.Clone(a[:2*kvpool.BlockTokens+1]), randomPrompt(2, tc.prompt/2, vocab)...)
			want := map[string][]int32{}
			for name, p := range map[string][]int32{"a": a, "b": b} {
				want[name], _ = gen(t, cold, "cold-"+name, p, cache.NoScope)
			}
			full := (tc.prompt - 1) / kvpool.BlockTokens * kvpool.BlockTokens
			for _, step := range []struct {
				id, prompt string
				cached     int
			}{
				{"first", "a", 0},
				{"repeat", "a", full},
				{"branch", "b", 2 * kvpool.BlockTokens},
			} {
				p := a
				if step.prompt == "b" {
					p = b
				}
				got, usage := gen(t, warm, step.id, p, cache.NoScope)
				if !slices.Equal(got, want[step.prompt]) {
					t.Errorf("%s: tokens %v, cold run gave %v", step.id, got, want[step.prompt])
				}
				if usage.CachedTokens != step.cached {
					t.Errorf("%s: cached_tokens %d, want %d", step.id, usage.CachedTokens, step.cached)
				}
			}
			// A hit row batched with two cold rows.
			c1, c2 := randomPrompt(3, 100, vocab), randomPrompt(4, 300, vocab)
			wantC1, _ := gen(t, cold, "cold-c1", c1, cache.NoScope)
			wantC2, _ := gen(t, cold, "cold-c2", c2, cache.NoScope)
			var wg sync.WaitGroup
			results := make([][]int32, 3)
			usages := make([]engine.Usage, 3)
			for i, p := range [][]int32{a, c1, c2} {
				wg.Go(func() { results[i], usages[i] = gen(t, warm, fmt.Sprint("mixed", i), p, cache.NoScope) })
			}
			wg.Wait()
			for i, w := range [][]int32{want["a"], wantC1, wantC2} {
				if !slices.Equal(results[i], w) {
					t.Errorf("mixed row %d: tokens %v, cold run gave %v", i, results[i], w)
				}
			}
			if usages[0].CachedTokens != full || usages[1].CachedTokens != 0 || usages[2].CachedTokens != 0 {
				t.Errorf("mixed rows cached_tokens %d %d %d, want %d 0 0", usages[0].CachedTokens, usages[1].CachedTokens, usages[2].CachedTokens, full)
			}
			st, on := warm.CacheStats()
			if !on || st.Hits < 3 || st.Entries == 0 || st.Bytes > st.Budget {
				t.Errorf("cache stats %+v (on %v)", st, on)
			}
		})
	}
}

// TestPrefixCacheScopes checks that scopes never share: a salted prompt is
// not found under another salt nor without one, and an unsalted prompt is
// not found under a salt.
func TestPrefixCacheScopes(t *testing.T) {
	e, m := enginetest.Start(t, enginetest.SmolLM2(), engine.Options{KVCapacity: 256 << 20, Prefix: engine.PrefixOptions{Budget: 128 << 20}})
	p := randomPrompt(9, 600, m.Config.Vocab)
	alice, bob := cache.SaltScope("alice", ""), cache.SaltScope("", "alice")
	for _, step := range []struct {
		id     string
		scope  cache.Scope
		cached int
	}{
		{"alice-cold", alice, 0},
		{"bob", bob, 0},
		{"nobody", cache.NoScope, 0},
		{"alice-warm", alice, 512},
		{"nobody-warm", cache.NoScope, 512},
		{"bob-warm", bob, 512},
	} {
		if _, usage := gen(t, e, step.id, p, step.scope); usage.CachedTokens != step.cached {
			t.Errorf("%s: cached_tokens %d, want %d", step.id, usage.CachedTokens, step.cached)
		}
	}
}

// TestPrefixCacheSSDTier writes a prompt's blocks through the SSD tier,
// restarts (a new engine and a reopened tier): the first request adopts
// them from disk with output identical to the cold run; then every block
// file is damaged, and a third start computes the prompt again (a miss per
// file, never wrong output).
func TestPrefixCacheSSDTier(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "model")
	ns := cache.Namespace{WeightHash: [32]byte{7}, LayoutEpoch: 1}
	start := func() (*engine.Engine, *cache.Disk, int) {
		d, err := cache.OpenDisk(cache.DiskOptions{Dir: dir})
		if err != nil {
			t.Fatal(err)
		}
		e, m := enginetest.Start(t, enginetest.SmolLM2(), engine.Options{KVCapacity: 256 << 20,
			Prefix: engine.PrefixOptions{Budget: 128 << 20, Namespace: ns, Disk: d}})
		return e, d, m.Config.Vocab
	}
	stop := func(e *engine.Engine, d *cache.Disk) {
		e.Shutdown(context.Background())
		d.Flush()
		if err := d.Close(); err != nil {
			t.Fatal(err)
		}
	}
	e, d, vocab := start()
	p := randomPrompt(11, 600, vocab)
	want, usage := gen(t, e, "cold", p, cache.NoScope)
	if usage.CachedTokens != 0 {
		t.Fatalf("cold run: cached_tokens %d", usage.CachedTokens)
	}
	stop(e, d)

	e, d, _ = start()
	got, usage := gen(t, e, "restarted", p, cache.NoScope)
	if !slices.Equal(got, want) || usage.CachedTokens != 2*kvpool.BlockTokens {
		t.Errorf("after a restart: tokens %v (cold %v), cached_tokens %d, want %d", got, want, usage.CachedTokens, 2*kvpool.BlockTokens)
	}
	if st := d.Stats(); st.Hits != 2 {
		t.Errorf("disk tier hits %d, want 2 (%+v)", st.Hits, st)
	}
	stop(e, d)

	var files []string
	err := filepath.WalkDir(dir, func(path string, de fs.DirEntry, err error) error {
		if err == nil && de.Type().IsRegular() {
			files = append(files, path)
		}
		return err
	})
	if err != nil || len(files) < 2 {
		t.Fatalf("block files %v (%v)", files, err)
	}
	for _, path := range files {
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		b[len(b)/2] ^= 0x10
		if err := os.WriteFile(path, b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	e, d, _ = start()
	got, usage = gen(t, e, "damaged", p, cache.NoScope)
	if !slices.Equal(got, want) || usage.CachedTokens != 0 {
		t.Errorf("damaged files: tokens %v (cold %v), cached_tokens %d, want 0", got, want, usage.CachedTokens)
	}
	if st := d.Stats(); st.Hits != 0 || st.MissAuth == 0 {
		t.Errorf("damaged files: disk stats %+v", st)
	}
	stop(e, d)
}

// TestPrefixCacheMediaKeys runs a prompt holding a bidirectional media span
// (placeholder tokens of an image, here plain tokens): the same image hits
// every block, another image only the block before the span, and hits
// give the cold output; a span cut by the adopted prefix still runs whole.
func TestPrefixCacheMediaKeys(t *testing.T) {
	cold, m := enginetest.Start(t, enginetest.SmolLM2(), engine.Options{KVCapacity: 256 << 20})
	warm, _ := enginetest.Start(t, enginetest.SmolLM2(), engine.Options{KVCapacity: 256 << 20, Prefix: engine.PrefixOptions{Budget: 128 << 20}})
	p := randomPrompt(21, 800, m.Config.Vocab)
	// The span crosses the boundary of blocks 1 and 2.
	red := []cache.Span{{Start: 400, End: 600, Hash: [32]byte{'r'}}}
	blue := []cache.Span{{Start: 400, End: 600, Hash: [32]byte{'b'}}}
	// p2 shares p's first 700 tokens: a hit adopts blocks 0 and 1 and ends
	// inside the span.
	p2 := append(slices.Clone(p[:700]), randomPrompt(22, 100, m.Config.Vocab)...)
	run := func(e *engine.Engine, id string, p []int32, spans []cache.Span) ([]int32, int) {
		ch, err := e.Submit(context.Background(), engine.Generation{ID: engine.RequestID(id), Prompt: p, MaxTokens: 8,
			TopLogprobs: -1, IgnoreEOS: true, Spans: spans})
		if err != nil {
			t.Fatal(err)
		}
		toks, last := enginetest.Collect(ch)
		if last.Kind != engine.EventFinished {
			t.Fatalf("%s: %+v", id, last)
		}
		return toks, last.Usage.CachedTokens
	}
	want, _ := run(cold, "cold", p, red)
	want2, _ := run(cold, "cold2", p2, red)
	text, _ := run(cold, "cold-text", p, nil)
	if slices.Equal(want, text) {
		t.Log("the span's bidirectional attention did not change the greedy tokens of this prompt")
	}
	for _, c := range []struct {
		id     string
		prompt []int32
		spans  []cache.Span
		cached int
		want   []int32
	}{
		{"first", p, red, 0, want},
		{"same image", p, red, 3 * kvpool.BlockTokens, want},
		{"other image", p, blue, kvpool.BlockTokens, nil},
		{"prefix ends inside the span", p2, red, 2 * kvpool.BlockTokens, want2},
	} {
		got, cached := run(warm, c.id, c.prompt, c.spans)
		if cached != c.cached {
			t.Errorf("%s: cached_tokens %d, want %d", c.id, cached, c.cached)
		}
		if c.want != nil && !slices.Equal(got, c.want) {
			t.Errorf("%s: tokens %v, cold %v", c.id, got, c.want)
		}
	}
}

// TestPrefixCacheSharesInFlightPrefill submits rows with one prompt
// prefix together: the later ones wait for the first to store the shared
// blocks and adopt them, instead of computing them again, with the cold
// output.
func TestPrefixCacheSharesInFlightPrefill(t *testing.T) {
	cold, m := enginetest.Start(t, enginetest.SmolLM2(), engine.Options{KVCapacity: 256 << 20})
	warm, _ := enginetest.Start(t, enginetest.SmolLM2(), engine.Options{KVCapacity: 256 << 20, Sched: engine.Config{MaxConcurrent: 4},
		Prefix: engine.PrefixOptions{Budget: 128 << 20}})
	base := randomPrompt(31, 600, m.Config.Vocab)
	prompts := [][]int32{base, append(slices.Clone(base[:550]), randomPrompt(32, 50, m.Config.Vocab)...), base}
	want := make([][]int32, len(prompts))
	for i, p := range prompts {
		want[i], _ = gen(t, cold, fmt.Sprint("cold", i), p, cache.NoScope)
	}
	chans := make([]<-chan engine.Event, len(prompts))
	for i, p := range prompts {
		ch, err := warm.Submit(context.Background(), engine.Generation{ID: engine.RequestID(fmt.Sprint("warm", i)), Prompt: p, MaxTokens: 12,
			TopLogprobs: -1, IgnoreEOS: true})
		if err != nil {
			t.Fatal(err)
		}
		chans[i] = ch
	}
	saved := 0
	for i, ch := range chans {
		toks, last := enginetest.Collect(ch)
		if last.Kind != engine.EventFinished || !slices.Equal(toks, want[i]) {
			t.Errorf("row %d: tokens %v (last %+v), cold %v", i, toks, last, want[i])
		}
		saved += last.Usage.CachedTokens
	}
	// The first computes both blocks; the others adopt them.
	if saved != 2*2*kvpool.BlockTokens {
		t.Errorf("cached_tokens sum to %d, want %d", saved, 4*kvpool.BlockTokens)
	}
}
