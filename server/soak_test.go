package server

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/goprovider/provider/engine"
	"github.com/goprovider/provider/engine/enginetest"
	"github.com/goprovider/provider/family"
	"github.com/goprovider/provider/mlx"
)

// soakRequests is the soak's size: PROVIDER_SOAK_REQUESTS overrides the
// CI's 10,000.
func soakRequests(t *testing.T) int {
	n := 10000
	if s := os.Getenv("PROVIDER_SOAK_REQUESTS"); s != "" {
		v, err := strconv.Atoi(s)
		if err != nil || v <= 0 {
			t.Fatalf("PROVIDER_SOAK_REQUESTS=%q", s)
		}
		n = v
	}
	return n
}

// rssBytes is the process's resident set.
func rssBytes(t *testing.T) int64 {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			return kb << 10
		}
	}
	t.Fatal("no VmRSS")
	return 0
}

// settle lets finished requests' goroutines end and returns the
// goroutine count and RSS after a full collection.
func settle(t *testing.T, base int) (int, int64) {
	deadline := time.Now().Add(10 * time.Second)
	n := runtime.NumGoroutine()
	for n > base && time.Now().Before(deadline) {
		runtime.Gosched()
		time.Sleep(10 * time.Millisecond) // waiting for exiting goroutines, not synchronizing with them
		n = runtime.NumGoroutine()
	}
	// What is held, not what the allocators keep for reuse: Go's heap is
	// collected and returned, MLX's buffer cache emptied, the C heap's free
	// memory returned.
	runtime.GC()
	debug.FreeOSMemory()
	mlx.ClearCache()
	mlx.TrimHostHeap()
	return n, rssBytes(t)
}

// TestSoak: 10,000 requests at concurrency 64 on the real stories260K,
// 20 % of the clients disconnecting at a random point of their stream and
// 5 % sending malformed or hostile bodies. Every well-formed request that
// is answered has its solo greedy text (or is refused with 429/503);
// afterwards no row runs, the ledger holds 0 bytes, and goroutines and RSS
// are back within 5 % of their level before.
func TestSoak(t *testing.T) {
	// PROVIDER_SOAK_MODEL=smollm2 soaks SmolLM2 instead (make soak).
	path := enginetest.Stories()
	if os.Getenv("PROVIDER_SOAK_MODEL") == "smollm2" {
		path = enginetest.SmolLM2()
	}
	e, m := enginetest.Start(t, path, engine.Options{Sched: engine.Config{MaxConcurrent: 64}})
	h := newHarness(t, Options{Architectures: family.Supported()}, nil)
	if err := h.Register(Model{Name: "stories", Architecture: m.Config.Arch, Tokenizer: m.Tokenizer,
		EOS: m.Config.EOS, ContextLength: m.Config.ContextLength, Generator: e}); err != nil {
		t.Fatal(err)
	}
	// The harness signals every request it served; nobody waits for them here.
	stop := make(chan struct{})
	defer close(stop)
	go func() {
		for {
			select {
			case <-h.served:
			case <-stop:
				return
			}
		}
	}()
	total := soakRequests(t)
	prompts := []string{"Once upon a time", "The little dog", "Lily and Ben", "One day, a big bird", "Tom had a red ball", "The sun was hot"}
	body := func(p string, stream bool) string {
		return fmt.Sprintf(`{"model":"stories","prompt":%q,"max_tokens":12,"stream":%v}`, p, stream)
	}
	client := &http.Client{Timeout: time.Minute, Transport: &http.Transport{MaxIdleConnsPerHost: 64}}
	complete := func(p string) (int, string) {
		resp, err := client.Post(h.http.URL+"/v1/completions", "application/json", strings.NewReader(body(p, false)))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var r struct {
			Choices []struct {
				Text string `json:"text"`
			} `json:"choices"`
		}
		b, _ := io.ReadAll(resp.Body)
		if resp.StatusCode == 200 && json.Unmarshal(b, &r) == nil && len(r.Choices) == 1 {
			return 200, r.Choices[0].Text
		}
		return resp.StatusCode, string(b)
	}
	solo := map[string]string{}
	for _, p := range prompts {
		code, text := complete(p)
		if code != 200 {
			t.Fatalf("solo %q: %d %s", p, code, text)
		}
		solo[p] = text
	}
	// Malformed or hostile bodies: 400 (404 for the unknown model), except
	// the valid prompt of NUL characters, which is answered.
	hostile := []string{`{"model":`, `{"model":"stories","prompt":12}`, `{"model":"stories","prompt":"x","max_tokens":-5}`,
		`{"model":"stories","prompt":"x","temperature":"hot"}`, `[]`, `{"model":"stories","prompt":"x","logit_bias":{"abc":1}}`,
		`{"model":"stories","prompt":"` + strings.Repeat("\\u0000", 2000) + `"}`, `{"model":"nope","prompt":"x"}`}
	const nulBody = 6
	var served, refused, failed, disconnected, rejected atomic.Int64
	// round runs n requests of the soak's mix on 64 clients.
	round := func(n int) {
		var wg sync.WaitGroup
		next := atomic.Int64{}
		for w := range 64 {
			wg.Go(func() {
				rng := rand.New(rand.NewPCG(uint64(w), uint64(n)))
				for next.Add(1) <= int64(n) {
					p := prompts[rng.IntN(len(prompts))]
					switch r := rng.IntN(100); {
					case r < 5:
						i := rng.IntN(len(hostile))
						resp, err := client.Post(h.http.URL+"/v1/completions", "application/json", strings.NewReader(hostile[i]))
						if err != nil {
							t.Error(err)
							return
						}
						_, _ = io.Copy(io.Discard, resp.Body)
						resp.Body.Close()
						want := resp.StatusCode == 400 || resp.StatusCode == 404 || resp.StatusCode == 429
						if i == nulBody {
							want = resp.StatusCode == 200 || resp.StatusCode == 429
						}
						if !want {
							failed.Add(1)
							t.Errorf("hostile body got %d", resp.StatusCode)
						}
						rejected.Add(1)
					case r < 25:
						// A client that goes away after a random number of events.
						ctx, cancel := context.WithCancel(context.Background())
						req, _ := http.NewRequestWithContext(ctx, "POST", h.http.URL+"/v1/completions", strings.NewReader(body(p, true)))
						req.Header.Set("Content-Type", "application/json")
						resp, err := client.Do(req)
						if err == nil {
							sc := bufio.NewScanner(resp.Body)
							for i, stop := 0, rng.IntN(8); i < stop && sc.Scan(); i++ {
							}
							cancel()
							resp.Body.Close()
						}
						cancel()
						disconnected.Add(1)
					default:
						code, text := complete(p)
						switch {
						case code == 200 && text == solo[p]:
							served.Add(1)
						case code == 429 || code == 503:
							refused.Add(1)
						default:
							failed.Add(1)
							t.Errorf("%q: %d %q, want %q", p, code, text, solo[p])
						}
					}
				}
			})
		}
		wg.Wait()
	}
	// Warm-up: a first round of the same mix brings MLX's buffer cache, the
	// pools and the connections to their working size before the baseline.
	round(1000)
	served.Store(0)
	refused.Store(0)
	disconnected.Store(0)
	rejected.Store(0)
	baseG, baseRSS := settle(t, 0)
	baseMLX := mlx.ActiveMemory()
	round(total)
	client.CloseIdleConnections()
	// Rows of disconnected clients end within a step.
	deadline := time.Now().Add(30 * time.Second)
	for st := e.Stats(); st.Running+st.Waiting > 0 || st.KVUsed > 0; st = e.Stats() {
		if time.Now().After(deadline) {
			t.Fatalf("after the soak: %+v", st)
		}
		time.Sleep(10 * time.Millisecond) // waiting for the engine to notice cancellations
	}
	g, rss := settle(t, baseG)
	active := mlx.ActiveMemory()
	t.Logf("soak of %d: served %d, refused %d, failed %d, disconnected %d, hostile %d; goroutines %d -> %d; RSS %.1f -> %.1f MiB; MLX active %.1f -> %.1f MiB; ledger %d bytes",
		total, served.Load(), refused.Load(), failed.Load(), disconnected.Load(), rejected.Load(), baseG, g, float64(baseRSS)/(1<<20), float64(rss)/(1<<20),
		float64(baseMLX)/(1<<20), float64(active)/(1<<20), e.Stats().KVUsed)
	if float64(active) > float64(baseMLX)*1.05 {
		t.Errorf("MLX holds %d bytes after the soak, %d before", active, baseMLX)
	}
	if failed.Load() != 0 || served.Load() == 0 {
		t.Fatalf("failed %d, served %d", failed.Load(), served.Load())
	}
	if float64(g) > float64(baseG)*1.05+1 {
		t.Errorf("goroutines %d after the soak, %d before", g, baseG)
	}
	if float64(rss) > float64(baseRSS)*1.05 {
		t.Errorf("RSS %d after the soak, %d before (more than 5 %% up)", rss, baseRSS)
	}
}
