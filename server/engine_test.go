package server

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/goprovider/provider/cache"
	"github.com/goprovider/provider/engine"
	"github.com/goprovider/provider/engine/enginetest"
	"github.com/goprovider/provider/family"
)

// realServer serves the real stories260K engine on loopback.
func realServer(t *testing.T, opt engine.Options) (*harness, *engine.Engine) {
	t.Helper()
	e, m := enginetest.Start(t, enginetest.Stories(), opt)
	h := newHarness(t, Options{Architectures: family.Supported()}, nil)
	err := h.Register(Model{Name: "stories", Architecture: m.Config.Arch, Tokenizer: m.Tokenizer,
		ChatTemplate: "{% for m in messages %}{{ m['content'] }}\n{% endfor %}",
		EOS:          m.Config.EOS, ContextLength: m.Config.ContextLength, Generator: e})
	if err != nil {
		t.Fatal(err)
	}
	return h, e
}

type streamResult struct {
	text   string
	finish string
	usage  map[string]any
	err    error
}

// readStream checks the framing of a completions SSE body: JSON chunks of
// one id, one finish_reason on the last choice chunk, a usage chunk, then
// [DONE] and nothing after it.
func readStream(body *bufio.Scanner) streamResult {
	var r streamResult
	var id string
	done := false
	for body.Scan() {
		line := body.Text()
		if line == "" {
			continue
		}
		if done {
			return streamResult{err: fmt.Errorf("data after [DONE]: %q", line)}
		}
		data, ok := strings.CutPrefix(line, "data: ")
		if !ok {
			return streamResult{err: fmt.Errorf("not an SSE data line: %q", line)}
		}
		if data == "[DONE]" {
			done = true
			continue
		}
		var c struct {
			ID      string `json:"id"`
			Choices []struct {
				Text         string  `json:"text"`
				FinishReason *string `json:"finish_reason"`
			} `json:"choices"`
			Usage map[string]any `json:"usage"`
		}
		if err := json.Unmarshal([]byte(data), &c); err != nil {
			return streamResult{err: fmt.Errorf("chunk %q: %w", data, err)}
		}
		if id == "" {
			id = c.ID
		} else if c.ID != id {
			return streamResult{err: fmt.Errorf("chunk id %q after %q", c.ID, id)}
		}
		if r.finish != "" && len(c.Choices) > 0 {
			return streamResult{err: fmt.Errorf("choice chunk after finish_reason")}
		}
		for _, ch := range c.Choices {
			r.text += ch.Text
			if ch.FinishReason != nil {
				r.finish = *ch.FinishReason
			}
		}
		if c.Usage != nil {
			r.usage = c.Usage
		}
	}
	switch {
	case body.Err() != nil:
		r.err = body.Err()
	case !done:
		r.err = fmt.Errorf("stream ended without [DONE]")
	case r.finish == "" || r.usage == nil:
		r.err = fmt.Errorf("finish %q usage %v", r.finish, r.usage)
	}
	return r
}

func streamCompletion(ctx context.Context, url, prompt string, maxTokens int) streamResult {
	body := fmt.Sprintf(`{"model":"stories","prompt":%q,"max_tokens":%d,"stream":true,"stream_options":{"include_usage":true}}`, prompt, maxTokens)
	req, err := http.NewRequestWithContext(ctx, "POST", url+"/v1/completions", strings.NewReader(body))
	if err != nil {
		return streamResult{err: err}
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return streamResult{err: err}
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		return streamResult{err: fmt.Errorf("status %d", resp.StatusCode)}
	}
	return readStream(bufio.NewScanner(resp.Body))
}

// Thirty-two concurrent streams on the real model all complete with correct
// framing, and each one's greedy text equals the text the same request
// gets when it runs alone.
func TestRealConcurrentStreamsEqualAlone(t *testing.T) {
	h, e := realServer(t, engine.Options{Sched: engine.Config{MaxConcurrent: 8}})
	prompts := []string{"Once upon a time", "The little dog", "Lily and Ben went", "One day, a big bird",
		"Tom had a red ball", "The sun was hot", "Sue and her mom", "A cat sat on"}
	const maxTokens = 40
	alone := map[string]string{}
	for _, p := range prompts {
		r := streamCompletion(context.Background(), h.http.URL, p, maxTokens)
		if r.err != nil {
			t.Fatalf("alone %q: %v", p, r.err)
		}
		alone[p] = r.text
	}
	results := make([]streamResult, 32)
	var wg sync.WaitGroup
	for i := range results {
		wg.Go(func() {
			results[i] = streamCompletion(context.Background(), h.http.URL, prompts[i%len(prompts)], maxTokens)
		})
	}
	wg.Wait()
	for i, r := range results {
		p := prompts[i%len(prompts)]
		if r.err != nil {
			t.Errorf("stream %d: %v", i, r.err)
			continue
		}
		if r.text != alone[p] {
			t.Errorf("stream %d (%q): batched %q\nalone %q", i, p, r.text, alone[p])
		}
	}
	waitIdle(t, e)
}

// waitIdle waits (bounded) until the engine holds no row and no KV bytes.
func waitIdle(t *testing.T, e *engine.Engine) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		st := e.Stats()
		if st.Running == 0 && st.Waiting == 0 && st.KVUsed == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("engine not idle: %+v", st)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// A client that disconnects mid-stream frees its row and its KV bytes.
func TestRealDisconnectFreesRowAndKV(t *testing.T) {
	h, e := realServer(t, engine.Options{})
	ctx, cancel := context.WithCancel(context.Background())
	body := `{"model":"stories","prompt":"Once upon a time","max_tokens":1500,"stream":true}`
	req, _ := http.NewRequestWithContext(ctx, "POST", h.http.URL+"/v1/completions", strings.NewReader(body))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	sc := bufio.NewScanner(resp.Body)
	if !sc.Scan() || !strings.HasPrefix(sc.Text(), "data: ") {
		t.Fatalf("no first chunk: %q", sc.Text())
	}
	if st := e.Stats(); st.Running != 1 || st.KVUsed == 0 {
		t.Fatalf("mid-stream the engine holds %+v", st)
	}
	cancel()
	resp.Body.Close()
	waitIdle(t, e)
	// The handler records the 499 when it returns, after the engine let go.
	deadline := time.Now().Add(10 * time.Second)
	for {
		resp, err := http.Get(h.http.URL + "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		var text strings.Builder
		sc := bufio.NewScanner(resp.Body)
		for sc.Scan() {
			text.WriteString(sc.Text() + "\n")
		}
		resp.Body.Close()
		if strings.Contains(text.String(), `class="cancelled"`) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("metrics do not count the disconnect:\n%s", text.String())
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// The official OpenAI Python client streams and non-streams unchanged.
func TestOpenAIPythonClient(t *testing.T) {
	deps, err := filepath.Abs("../.deps/py-openai")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(deps, "openai")); err != nil {
		t.Fatalf("the openai package is missing from %s: run `make setup`", deps)
	}
	h, _ := realServer(t, engine.Options{})
	cmd := exec.Command("python3", "testdata/openai_client.py", h.http.URL+"/v1")
	cmd.Env = append(os.Environ(), "PYTHONPATH="+deps)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("openai client: %v\n%s", err, out)
	}
	t.Logf("%s", out)
}

// TestRealPrefixCacheUsage sends one long token prompt through the real
// engine with a prefix cache: the first answer reports no cached tokens,
// the repeat (streamed) its one whole block, another user's repeat none,
// and /metrics counts the hit and the misses.
func TestRealPrefixCacheUsage(t *testing.T) {
	disk, err := cache.OpenDisk(cache.DiskOptions{Dir: filepath.Join(t.TempDir(), "stories")})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { disk.Close() })
	h, _ := realServer(t, engine.Options{Prefix: engine.PrefixOptions{Budget: 16 << 20, Disk: disk}})
	ids := make([]string, 300)
	for i := range ids {
		ids[i] = fmt.Sprint(3 + i%400)
	}
	prompt := "[" + strings.Join(ids, ",") + "]"
	cached := func(body []byte) float64 {
		t.Helper()
		var r struct {
			Usage struct {
				Details struct {
					Cached float64 `json:"cached_tokens"`
				} `json:"prompt_tokens_details"`
			} `json:"usage"`
		}
		if err := json.Unmarshal(body, &r); err != nil {
			t.Fatalf("%v: %s", err, body)
		}
		return r.Usage.Details.Cached
	}
	status, body := h.post(t, "/v1/completions", `{"model":"stories","prompt":`+prompt+`,"max_tokens":4,"user":"u1"}`)
	if status != 200 || cached(body) != 0 {
		t.Fatalf("cold: status %d, body %s", status, body)
	}
	status, body = h.post(t, "/v1/completions", `{"model":"stories","prompt":`+prompt+`,"max_tokens":4,"user":"u1","stream":true,"stream_options":{"include_usage":true}}`)
	if status != 200 {
		t.Fatalf("warm: status %d, body %s", status, body)
	}
	var usageChunk []byte
	for line := range strings.Lines(string(body)) {
		if data, ok := strings.CutPrefix(strings.TrimSpace(line), "data: "); ok && strings.Contains(data, `"usage":{`) {
			usageChunk = []byte(data)
		}
	}
	if got := cached(usageChunk); got != 256 {
		t.Fatalf("warm streamed usage: cached_tokens %v, want 256: %s", got, usageChunk)
	}
	status, body = h.post(t, "/v1/completions", `{"model":"stories","prompt":`+prompt+`,"max_tokens":4,"prompt_cache_key":"other"}`)
	if status != 200 || cached(body) != 0 {
		t.Fatalf("other scope: status %d, body %s", status, body)
	}
	_, metrics := h.get(t, "/metrics")
	for _, want := range []string{`provider_prefix_cache_hits_total{model="stories"} 1`, `provider_prefix_cache_misses_total{model="stories"} 2`,
		`provider_prefix_cache_tokens_saved_total{model="stories"} 256`,
		// The first request and the other scope's looked on disk for their
		// block and found none; the repeat found it in RAM.
		`provider_prefix_cache_disk_misses_total{model="stories",reason="absent"} 2`,
		`# TYPE provider_prefix_cache_disk_writes_total counter`} {
		if !strings.Contains(string(metrics), want) {
			t.Errorf("metrics lack %q", want)
		}
	}
}
