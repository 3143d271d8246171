package server

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/benbjohnson/clock"
	"github.com/coder/websocket"

	"github.com/goprovider/provider/engine"
	"github.com/goprovider/provider/engine/enginetest"
	"github.com/goprovider/provider/family"
	"github.com/goprovider/provider/graph"
	"github.com/goprovider/provider/internal/syncbuf"
	"github.com/goprovider/provider/slots"
	"github.com/goprovider/provider/stages/stagestest"
)

var dashboardScreenshot = flag.String("dashboard.screenshot", "", "TestDashboardInBrowser: serve a few more requests, then write a PNG of the page to this file (../docs/dashboard.png)")

func getStatus(t *testing.T, h *harness) (statusJSON, map[string]any, []byte) {
	t.Helper()
	code, body := h.get(t, "/v1/status")
	if code != http.StatusOK {
		t.Fatalf("status %d: %s", code, body)
	}
	var st statusJSON
	var raw map[string]any
	if err := json.Unmarshal(body, &st); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(body, &raw); err != nil {
		t.Fatal(err)
	}
	return st, raw, body
}

func ptr(v float64) *float64 { return &v }

// TestDashboardStatus: without slots, /v1/status reports the registered
// model from its engine's gauges, its finished request in the live figures
// and the last series bucket, and the refused requests newest first, by
// code only.
func TestDashboardStatus(t *testing.T) {
	clk := clock.NewMock()
	t0 := time.Date(2025, 1, 2, 3, 4, 0, 0, time.UTC) // on a bucket boundary
	clk.Set(t0)
	fake := &stagestest.Engine{Script: func(g engine.Generation) stagestest.Play {
		if g.ID == "full" {
			return stagestest.Play{Refuse: engine.ErrQueueFull}
		}
		return stagestest.Play{Events: stagestest.Tokens(g, stagestest.Story, engine.FinishLength)}
	}}
	fake.Stat = engine.Stats{Running: 1, Waiting: 2, MaxConcurrent: 4, KVUsed: 1 << 20, KVCapacity: 64 << 20, KVBytesPerToken: 4096, Preemptions: 3, Steps: 99}
	// A clock that moves only when told makes every latency 0.
	h := newHarness(t, Options{Graph: graph.Options{Clock: clk}}, fake)

	if code, body := h.post(t, "/v1/chat/completions", `{"model":"stories","messages":[{"role":"user","content":"SECRET prompt"}],"stream":true}`); code != 200 {
		t.Fatalf("status %d: %s", code, body)
	}
	for _, body := range []string{
		`{"model":"SECRET-model","messages":[{"role":"user","content":"x"}]}`,
		`{"model":"stories","messages":[{"role":"user","content":"SECRET"}],"max_tokens":-5}`,
	} {
		h.post(t, "/v1/chat/completions", body)
	}
	req, _ := http.NewRequest("POST", h.http.URL+"/v1/completions", strings.NewReader(`{"model":"stories","prompt":"SECRET"}`))
	req.Header.Set("X-Request-ID", "full")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	<-h.served
	if resp.StatusCode != 429 {
		t.Fatalf("queue_full request: status %d", resp.StatusCode)
	}
	clk.Add(3 * time.Second)

	st, raw, body := getStatus(t, h)
	if bytes.Contains(body, []byte("SECRET")) {
		t.Fatalf("request content in the status: %s", body)
	}
	if st.Object != "status" || st.Time != t0.Add(3*time.Second).UnixMilli() || st.UptimeSeconds != 3 || st.Loading {
		t.Fatalf("head %+v", st)
	}
	if st.Series != (seriesGeometryJSON{BucketSeconds: 2, Buckets: 150, End: t0.Add(2 * time.Second).UnixMilli()}) {
		t.Fatalf("series geometry %+v", st.Series)
	}
	if len(st.Models) != 1 {
		t.Fatalf("models %+v", st.Models)
	}
	m := st.Models[0]
	want := modelStatusJSON{
		Name: "stories", State: "running", Running: 1, Waiting: 2, MaxConcurrent: 4,
		KVGrantBytes: 64 << 20, KVUsedBytes: 1 << 20, KVBytesPerToken: 4096, Preemptions: 3, Steps: 99,
		Requests: 1, PromptTokens: m.PromptTokens, CompletionTokens: uint64(len(stagestest.Story)),
	}
	got := m
	got.Live, got.Series = liveJSON{}, seriesJSON{}
	if !jsonEqual(got, want) {
		t.Fatalf("model\n got %+v\nwant %+v", got, want)
	}
	if m.PromptTokens == 0 {
		t.Fatal("no prompt tokens counted")
	}
	rawModel := raw["models"].([]any)[0].(map[string]any)
	for _, key := range []string{"decode_tokens_per_second", "prefill_tokens_per_second"} {
		if _, ok := rawModel[key]; ok {
			t.Errorf("%s reported without slots", key)
		}
	}
	if rawModel["prefix_cache"] != nil {
		t.Errorf("prefix_cache %v for an engine without one", rawModel["prefix_cache"])
	}
	wantLive := liveJSON{WindowSeconds: 3, Requests: 1, TTFT: &quantilesJSON{}, TPOT: &quantilesJSON{}, TokensPerSecond: float64(len(stagestest.Story)) / 3}
	if !jsonEqual(m.Live, wantLive) {
		t.Fatalf("live\n got %+v\nwant %+v", m.Live, wantLive)
	}
	s := m.Series
	if len(s.TTFT) != 150 || len(s.TPOT) != 150 || len(s.TokensPerSecond) != 150 {
		t.Fatalf("series lengths %d %d %d", len(s.TTFT), len(s.TPOT), len(s.TokensPerSecond))
	}
	last := 149
	if s.TTFT[last] == nil || *s.TTFT[last] != 0 || s.TPOT[last] == nil || *s.TPOT[last] != 0 || s.TokensPerSecond[last] != float64(len(stagestest.Story))/2 {
		t.Fatalf("last bucket ttft %v tpot %v tok/s %v", s.TTFT[last], s.TPOT[last], s.TokensPerSecond[last])
	}
	for i := range last {
		if s.TTFT[i] != nil || s.TPOT[i] != nil || s.TokensPerSecond[i] != 0 {
			t.Fatalf("bucket %d holds data: %v %v %v", i, s.TTFT[i], s.TPOT[i], s.TokensPerSecond[i])
		}
	}

	wantRefusals := []refusalJSON{
		{Time: t0.UnixMilli(), Endpoint: "completion", Status: 429, Code: "queue_full"},
		{Time: t0.UnixMilli(), Endpoint: "chat", Status: 400, Code: "invalid_value"},
		{Time: t0.UnixMilli(), Endpoint: "chat", Status: 404, Code: "model_not_found"},
	}
	if !slices.Equal(st.Refusals, wantRefusals) {
		t.Fatalf("refusals\n got %+v\nwant %+v", st.Refusals, wantRefusals)
	}
	if want := map[string]int{"queue_full": 1, "invalid_value": 1, "model_not_found": 1}; !jsonEqual(st.RefusalCodes, want) {
		t.Fatalf("refusal codes %v", st.RefusalCodes)
	}
}

func jsonEqual(a, b any) bool {
	x, _ := json.Marshal(a)
	y, _ := json.Marshal(b)
	return bytes.Equal(x, y)
}

// scriptedSlots is a Slots whose snapshots and catalog are fixed.
type scriptedSlots struct {
	snaps     []slots.Snapshot
	available []string
}

func (s scriptedSlots) Acquire(context.Context, string) (func(), error) { return func() {}, nil }
func (s scriptedSlots) Available() []string                             { return s.available }
func (s scriptedSlots) Snapshots() []slots.Snapshot                     { return s.snaps }

// TestDashboardStatusWithSlots: a slot's state, grant and rates come from
// its snapshot, a served model's rows and KV use from its engine, a slot
// still loading from its snapshot alone, and a catalog model not loaded is
// "unloaded".
func TestDashboardStatusWithSlots(t *testing.T) {
	fake := storyEngine()
	fake.Stat = engine.Stats{Running: 1, MaxConcurrent: 4, KVUsed: 8192, KVCapacity: 1 << 30, KVBytesPerToken: 64, Steps: 5}
	sl := scriptedSlots{
		snaps: []slots.Snapshot{
			{Model: "stories", State: slots.StateRunning, Running: 1, TokensUsed: 128, TokensMax: 1 << 24, KVBytesPerToken: 64, KVGrant: 1 << 30, MaxConcurrent: 4, DecodeTPS: 42.5, PrefillTPS: 900, Steps: 5, WedgeSuspected: true},
			{Model: "big", State: slots.StateLoading, KVBytesPerToken: 1024, KVGrant: 2 << 30, MaxConcurrent: 8},
		},
		available: []string{"big", "later", "stories"},
	}
	h := newHarness(t, Options{Slots: sl}, fake)
	st, _, _ := getStatus(t, h)
	var names []string
	for _, m := range st.Models {
		names = append(names, m.Name)
	}
	if !slices.Equal(names, []string{"big", "later", "stories"}) {
		t.Fatalf("models %v", names)
	}
	strip := func(m modelStatusJSON) modelStatusJSON {
		m.Live, m.Series = liveJSON{}, seriesJSON{}
		return m
	}
	want := []modelStatusJSON{
		{Name: "big", State: "loading", MaxConcurrent: 8, KVGrantBytes: 2 << 30, KVBytesPerToken: 1024, DecodeTPS: ptr(0), PrefillTPS: ptr(0)},
		{Name: "later", State: "unloaded"},
		{Name: "stories", State: "running", Running: 1, MaxConcurrent: 4, KVGrantBytes: 1 << 30, KVUsedBytes: 8192, KVBytesPerToken: 64, Steps: 5,
			DecodeTPS: ptr(42.5), PrefillTPS: ptr(900), WedgeSuspected: true},
	}
	for i, m := range st.Models {
		if !jsonEqual(strip(m), want[i]) {
			t.Errorf("model %d\n got %+v\nwant %+v", i, strip(m), want[i])
		}
	}
}

// TestDashboardSeries: the series and live figures of scripted timings,
// in buckets of one second.
func TestDashboardSeries(t *testing.T) {
	end := time.Date(2025, 1, 2, 3, 4, 10, 0, time.UTC)
	at := func(s float64) time.Time { return end.Add(time.Duration(s * float64(time.Second))) }
	ms := func(v float64) time.Duration { return time.Duration(v * float64(time.Millisecond)) }
	fs := []finished{
		// Decodes 10 tokens over [-3.5 s, -1.5 s): 2.5, 5 and 2.5 tokens
		// in the buckets it spans.
		{first: at(-3.5), end: at(-1.5), ttft: ms(100), tpot: ms(200), decoded: true, tokens: 10},
		// One token: no TPOT, its token at its end.
		{first: at(-0.5), end: at(-0.5), ttft: ms(40), tokens: 1},
		// No output at all.
		{end: at(-0.2)},
		// Ended before the series: only its tail counts.
		{first: at(-5), end: at(-3), ttft: ms(300), tpot: ms(100), decoded: true, tokens: 20},
		// Ends after the series' end (in the bucket still filling).
		{first: at(0.1), end: at(0.5), ttft: ms(50), tpot: ms(20), decoded: true, tokens: 4},
	}
	got := seriesOf(fs, end, time.Second, 4)
	want := seriesJSON{
		TTFT:            []*float64{ptr(100), nil, nil, ptr(40)},
		TPOT:            []*float64{nil, ptr(100), ptr(200), nil},
		TokensPerSecond: []float64{2.5 + 10, 5, 2.5, 1},
	}
	if !jsonEqual(got, want) {
		t.Fatalf("series\n got %s\nwant %s", mustJSON(got), mustJSON(want))
	}

	// The window [-3 s, +1 s] holds every end (the fourth's on its
	// start), and of the tokens 7.5 of the first's, the second's and the
	// fifth's.
	live := liveOf(fs, at(1), 4*time.Second)
	wantLive := liveJSON{WindowSeconds: 4, Requests: 5, TTFT: &quantilesJSON{P50: 50, P95: 300}, TPOT: &quantilesJSON{P50: 100, P95: 200},
		TokensPerSecond: (7.5 + 1 + 4) / 4}
	if !jsonEqual(live, wantLive) {
		t.Fatalf("live\n got %s\nwant %s", mustJSON(live), mustJSON(wantLive))
	}
	if q := quantiles(nil); q != nil {
		t.Fatalf("quantiles of nothing: %+v", q)
	}
}

func mustJSON(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}

// TestDashboardRoutes: the page at exactly / and its assets under
// /dashboard/ are reachable without the token; the status is not; any
// other path stays a JSON 404.
func TestDashboardRoutes(t *testing.T) {
	s := New(Options{Logger: slog.New(slog.DiscardHandler)})
	t.Cleanup(s.Close)
	const token = "dashboard-test-token"
	srv := httptest.NewServer(RequireToken(token, s))
	t.Cleanup(srv.Close)
	tests := []struct {
		name, method, path string
		auth               bool
		status             int
		typ                string
	}{
		{"page", "GET", "/", false, 200, "text/html; charset=utf-8"},
		{"page head", "HEAD", "/", false, 200, "text/html; charset=utf-8"},
		{"script", "GET", "/dashboard/dashboard.js", false, 200, "text/javascript; charset=utf-8"},
		{"style", "GET", "/dashboard/dashboard.css", false, 200, "text/css; charset=utf-8"},
		{"no such asset", "GET", "/dashboard/nope.js", false, 404, "application/json"},
		{"asset folder", "GET", "/dashboard/", false, 401, "application/json"},
		{"asset folder with token", "GET", "/dashboard/", true, 404, "application/json"},
		{"page post", "POST", "/", false, 401, "application/json"},
		{"status without token", "GET", "/v1/status", false, 401, "application/json"},
		{"status through the asset prefix", "GET", "/dashboard/../v1/status", false, 401, "application/json"},
		{"status", "GET", "/v1/status", true, 200, "application/json"},
		{"status post", "POST", "/v1/status", true, 405, "application/json"},
		{"unknown path", "GET", "/index.html", true, 404, "application/json"},
		{"unknown path without token", "GET", "/index.html", false, 401, "application/json"},
	}
	// A path the mux would clean and redirect is no asset: through the
	// redirect it would reach the status without the token.
	rec := httptest.NewRecorder()
	RequireToken(token, s).ServeHTTP(rec, httptest.NewRequest("GET", "/dashboard/../v1/status", nil))
	if rec.Code != http.StatusUnauthorized {
		t.Fatalf("/dashboard/../v1/status without the token: %d", rec.Code)
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			req, err := http.NewRequest(tc.method, srv.URL+tc.path, nil)
			if err != nil {
				t.Fatal(err)
			}
			if tc.auth {
				req.Header.Set("Authorization", "Bearer "+token)
			}
			// No redirects: a path the server would clean must not reach
			// the status through one.
			resp, err := (&http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}).Do(req)
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != tc.status || resp.Header.Get("Content-Type") != tc.typ {
				t.Fatalf("%d %q, want %d %q: %s", resp.StatusCode, resp.Header.Get("Content-Type"), tc.status, tc.typ, body)
			}
			if tc.status == 200 && tc.path != "/v1/status" {
				if csp := resp.Header.Get("Content-Security-Policy"); !strings.Contains(csp, "default-src 'none'") {
					t.Fatalf("Content-Security-Policy %q", csp)
				}
			}
		})
	}
}

// TestDashboardAssetsAreLocal: the page loads nothing from another origin
// (no CDN, no web fonts) and runs no inline script.
func TestDashboardAssetsAreLocal(t *testing.T) {
	for name, a := range dashboardAssets() {
		// The SVG namespace is a name, not an address the page loads.
		text := strings.ReplaceAll(string(a.body), `"http://www.w3.org/2000/svg"`, "")
		for _, bad := range []string{"http:", "https:", "//cdn", "@import", "@font-face", "url("} {
			if strings.Contains(text, bad) {
				t.Errorf("%s contains %q", name, bad)
			}
		}
		if strings.HasSuffix(name, ".html") && strings.Contains(strings.ReplaceAll(text, `<script src=`, ""), "<script") {
			t.Errorf("%s has an inline script", name)
		}
	}
}

// The browser test: a real headless chromium, driven over the DevTools
// protocol, loads the page from a server with a token and the real tiny
// model, enters the token, streams a chat answer, and watches the page
// update while the stream is held in flight.

// stepGate holds the engine's loop once a running row has had `after`
// steps since arm, until release: the stream stays in flight, with output
// already sent, while the test looks at the page.
type stepGate struct {
	mu      sync.Mutex
	e       *engine.Engine
	armed   bool
	from    uint64
	after   uint64
	held    chan struct{}
	release chan struct{}
}

func (g *stepGate) beforeStep() {
	g.mu.Lock()
	if !g.armed || g.e == nil {
		g.mu.Unlock()
		return
	}
	st := g.e.Stats()
	if st.Running == 0 || st.Steps < g.from+g.after {
		g.mu.Unlock()
		return
	}
	g.armed = false
	held, release := g.held, g.release
	g.mu.Unlock()
	close(held)
	<-release
}

func (g *stepGate) arm(after uint64) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.armed, g.from, g.after = true, g.e.Stats().Steps, after
	g.held, g.release = make(chan struct{}), make(chan struct{})
}

func (g *stepGate) open() {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.armed = false
	if g.release != nil {
		select {
		case <-g.release:
		default:
			close(g.release)
		}
	}
}

func TestDashboardInBrowser(t *testing.T) {
	bin := findChromium(t)
	gate := &stepGate{}
	e, m := enginetest.Start(t, enginetest.Stories(), engine.Options{BeforeStep: gate.beforeStep, Prefix: engine.PrefixOptions{Budget: 8 << 20}})
	gate.mu.Lock()
	gate.e = e
	gate.mu.Unlock()
	t.Cleanup(gate.open) // runs before the engine's shutdown

	s := New(Options{Architectures: family.Supported(), Logger: slog.New(slog.DiscardHandler)})
	t.Cleanup(s.Close)
	err := s.Register(Model{Name: "stories", Architecture: m.Config.Arch, Tokenizer: m.Tokenizer,
		ChatTemplate: "{% for m in messages %}{{ m['content'] }}\n{% endfor %}",
		EOS:          m.Config.EOS, ContextLength: m.Config.ContextLength, Generator: e})
	if err != nil {
		t.Fatal(err)
	}
	const token = "browser-test-token"
	srv := httptest.NewServer(RequireToken(token, s))
	t.Cleanup(srv.Close)

	b := launchBrowser(t, bin)
	b.navigate(t, srv.URL+"/")

	// Without a token the page asks for one.
	b.waitFor(t, "the token form", `!document.querySelector("#auth").hidden`)
	b.eval(t, fmt.Sprintf(`document.querySelector("#auth-token").value = %q; document.querySelector("#auth").requestSubmit(); true`, token))
	card := `document.querySelector('[data-model="stories"]')`
	field := func(name string) string {
		return fmt.Sprintf(`(%s?.querySelector('[data-field="%s"]')?.textContent ?? "")`, card, name)
	}
	b.waitFor(t, "the model card, running", field("state")+` === "running" && document.querySelector("#conn").dataset.state === "ok"`)
	if got := b.evalString(t, `sessionStorage.getItem("provider.token")`); got != token {
		t.Fatalf("sessionStorage holds %q", got)
	}
	if b.evalString(t, `document.querySelector("#chat-model").value`) != "stories" {
		t.Fatal("the chat box does not offer the model")
	}

	// A chat answer streams; the engine holds after a few steps, so the
	// row is running and part of the answer is on the page.
	gate.arm(4)
	b.eval(t, `document.querySelector("#chat-input").value = "Once upon a time"; document.querySelector("#chat").requestSubmit(); true`)
	select {
	case <-gate.held:
	case <-time.After(60 * time.Second):
		t.Fatalf("the engine never reached 4 steps of the chat's row (it ended early, or never ran); page: %s", b.evalString(t, `document.querySelector("main").innerText`))
	}
	b.waitFor(t, "the running row and the streamed tokens", field("running")+` === "1" && Number(document.querySelector("#chat-tokens").textContent) > 0 && document.querySelector("#chat-status").textContent === "streaming" && document.querySelector(".msg.assistant .text").textContent.length > 0`)
	streamed := b.evalString(t, `document.querySelector("#chat-tokens").textContent`)

	// Released, the stream ends and the page catches up: no row running,
	// the request counted, its TTFT shown and in the sparkline.
	gate.open()
	b.waitFor(t, "the finished stream", `document.querySelector("#chat-status").textContent === "done"`)
	b.waitFor(t, "the finished request in the status", field("running")+` === "0" && `+field("requests")+` === "1" && `+field("ttft")+` !== "–" && `+card+`.querySelector('svg[data-spark="ttft"]').dataset.points === "1"`)
	final := b.evalString(t, `document.querySelector("#chat-tokens").textContent`)
	if n, _ := strconv.Atoi(final); n <= 0 || final == streamed && n < 5 {
		t.Fatalf("token counter %s while streaming, %s at the end", streamed, final)
	}

	if *dashboardScreenshot != "" {
		shoot(t, b, gate, srv.URL, token, card, *dashboardScreenshot)
	}
	b.checkConsole(t)
}

// shoot serves requests over about half a minute, so the sparklines have
// a shape, with a refusal or two and a second chat turn, then holds three
// streams in flight and writes a PNG of the page to path.
func shoot(t *testing.T, b *browser, gate *stepGate, url, token, card, path string) {
	t.Helper()
	// A shared prefix longer than a KV block, so the prefix cache hits.
	prefix := strings.Repeat("Once upon a time there was a little dog named Spot. ", 20)
	post := func(body string) int {
		req, _ := http.NewRequest("POST", url+"/v1/completions", strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+token)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return 0
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode
	}
	batch := func(n, maxTokens int) {
		var wg sync.WaitGroup
		for j := range n {
			wg.Go(func() {
				body := fmt.Sprintf(`{"model":"stories","prompt":%q,"max_tokens":%d}`, prefix+"Spot", maxTokens+8*j)
				if code := post(body); code != http.StatusOK {
					t.Errorf("a completion: status %d", code)
				}
			})
		}
		wg.Wait()
	}
	for i := range 16 {
		batch(1+i%3, 32+16*(i%4))
		switch i {
		case 5:
			post(`{"model":"stories","prompt":"x","max_tokens":-1}`)
		case 11:
			post(`{"model":"no-such-model","prompt":"x"}`)
		}
		time.Sleep(1500 * time.Millisecond)
	}
	b.eval(t, `document.querySelector("#chat-input").value = "Tell me about the little dog."; document.querySelector("#chat").requestSubmit(); true`)
	b.waitFor(t, "the second chat turn", `document.querySelector("#chat-status").textContent === "done"`)
	b.waitFor(t, "the sparklines", `Number(`+card+`.querySelector('svg[data-spark="ttft"]').dataset.points) > 5`)

	gate.arm(6)
	done := make(chan struct{})
	go func() {
		defer close(done)
		batch(3, 96)
	}()
	select {
	case <-gate.held:
	case <-time.After(60 * time.Second):
		t.Fatal("the engine never held the batch in flight")
	}
	b.waitFor(t, "rows in flight", card+`.querySelector('[data-field="running"]').textContent !== "0"`)
	png := b.screenshot(t)
	gate.open()
	<-done
	if err := os.WriteFile(path, png, 0o644); err != nil {
		t.Fatal(err)
	}
}

// findChromium is the browser's path; without one the test fails with the
// way to install it.
func findChromium(t *testing.T) string {
	t.Helper()
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome-stable", "google-chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	t.Fatal("no chromium on PATH: the dashboard's browser test needs it. Install it with `make setup` " +
		"(scripts/setup_chromium.sh runs `apt-get install -y --no-install-recommends chromium`).")
	return ""
}

// browser is a headless chromium with one page, driven over the DevTools
// protocol's WebSocket (flattened sessions).
type browser struct {
	conn    *websocket.Conn
	ctx     context.Context
	session string

	mu       sync.Mutex
	next     int64
	pending  map[int64]chan cdpMessage
	problems []string // console errors, uncaught exceptions, error log entries
}

type cdpMessage struct {
	ID        int64           `json:"id,omitempty"`
	Method    string          `json:"method,omitempty"`
	Params    json.RawMessage `json:"params,omitempty"`
	SessionID string          `json:"sessionId,omitempty"`
	Result    json.RawMessage `json:"result,omitempty"`
	Error     *struct {
		Code    int    `json:"code"`
		Message string `json:"message"`
	} `json:"error,omitempty"`
}

func launchBrowser(t *testing.T, bin string) *browser {
	t.Helper()
	dir := t.TempDir()
	stderr := &syncbuf.Buffer{}
	cmd := exec.Command(bin,
		"--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
		"--no-first-run", "--no-default-browser-check", "--disable-extensions",
		"--disable-background-networking", "--disable-sync", "--disable-component-update",
		"--mute-audio", "--hide-scrollbars", "--force-color-profile=srgb",
		"--remote-debugging-address=127.0.0.1", "--remote-debugging-port=0",
		"--user-data-dir="+dir, "--window-size=1360,1000", "about:blank")
	cmd.Stdout, cmd.Stderr = stderr, stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatalf("starting %s: %v", bin, err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	stop := func() {
		// The whole process group: the browser and its helpers.
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		<-exited
	}

	// The browser writes its port and WebSocket path once it listens.
	var wsURL string
	deadline := time.Now().Add(30 * time.Second)
	for wsURL == "" {
		data, err := os.ReadFile(filepath.Join(dir, "DevToolsActivePort"))
		if lines := strings.Split(string(data), "\n"); err == nil && len(lines) >= 2 && lines[1] != "" {
			wsURL = "ws://127.0.0.1:" + strings.TrimSpace(lines[0]) + strings.TrimSpace(lines[1])
			break
		}
		select {
		case err := <-exited:
			t.Fatalf("%s exited before it listened (%v):\n%s", bin, err, stderr)
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			stop()
			t.Fatalf("%s did not open its DevTools port in 30 s:\n%s", bin, stderr)
		}
	}

	ctx, cancel := context.WithCancel(context.Background())
	conn, _, err := websocket.Dial(ctx, wsURL, nil)
	if err != nil {
		cancel()
		stop()
		t.Fatalf("DevTools connection: %v\n%s", err, stderr)
	}
	conn.SetReadLimit(64 << 20)
	b := &browser{conn: conn, ctx: ctx, pending: map[int64]chan cdpMessage{}}
	go b.read()
	t.Cleanup(func() {
		closeCtx, done := context.WithTimeout(context.Background(), 5*time.Second)
		_ = b.send(closeCtx, "", "Browser.close", nil, nil)
		done()
		select {
		case <-exited:
		case <-time.After(5 * time.Second):
			stop()
		}
		cancel()
		_ = conn.CloseNow()
		if t.Failed() {
			t.Logf("chromium's output:\n%s", tail(stderr.String(), 4000))
		}
	})

	var target struct {
		TargetID string `json:"targetId"`
	}
	b.call(t, "", "Target.createTarget", map[string]any{"url": "about:blank"}, &target)
	var attached struct {
		SessionID string `json:"sessionId"`
	}
	b.call(t, "", "Target.attachToTarget", map[string]any{"targetId": target.TargetID, "flatten": true}, &attached)
	b.session = attached.SessionID
	for _, domain := range []string{"Runtime.enable", "Log.enable", "Page.enable"} {
		b.call(t, b.session, domain, nil, nil)
	}
	b.call(t, b.session, "Emulation.setDeviceMetricsOverride", map[string]any{"width": 1360, "height": 1000, "deviceScaleFactor": 1, "mobile": false}, nil)
	return b
}

func tail(s string, n int) string {
	if len(s) > n {
		return "..." + s[len(s)-n:]
	}
	return s
}

// read dispatches replies to their callers and records the page's
// problems.
func (b *browser) read() {
	for {
		_, data, err := b.conn.Read(b.ctx)
		if err != nil {
			b.mu.Lock()
			for id, ch := range b.pending {
				close(ch)
				delete(b.pending, id)
			}
			b.mu.Unlock()
			return
		}
		var msg cdpMessage
		if json.Unmarshal(data, &msg) != nil {
			continue
		}
		if msg.ID != 0 {
			b.mu.Lock()
			ch := b.pending[msg.ID]
			delete(b.pending, msg.ID)
			b.mu.Unlock()
			if ch != nil {
				ch <- msg
			}
			continue
		}
		if p := problem(msg); p != "" {
			b.mu.Lock()
			b.problems = append(b.problems, p)
			b.mu.Unlock()
		}
	}
}

// problem describes an event that reports an error on the page; "" for
// any other event.
func problem(msg cdpMessage) string {
	switch msg.Method {
	case "Runtime.consoleAPICalled":
		var p struct {
			Type string `json:"type"`
			Args []struct {
				Value       any    `json:"value"`
				Description string `json:"description"`
			} `json:"args"`
		}
		_ = json.Unmarshal(msg.Params, &p)
		if p.Type != "error" && p.Type != "assert" {
			return ""
		}
		var parts []string
		for _, a := range p.Args {
			if a.Description != "" {
				parts = append(parts, a.Description)
			} else {
				parts = append(parts, fmt.Sprint(a.Value))
			}
		}
		return "console." + p.Type + ": " + strings.Join(parts, " ")
	case "Runtime.exceptionThrown":
		var p struct {
			Details struct {
				Text      string `json:"text"`
				URL       string `json:"url"`
				Line      int    `json:"lineNumber"`
				Exception struct {
					Description string `json:"description"`
				} `json:"exception"`
			} `json:"exceptionDetails"`
		}
		_ = json.Unmarshal(msg.Params, &p)
		return fmt.Sprintf("exception: %s %s (%s:%d)", p.Details.Text, p.Details.Exception.Description, p.Details.URL, p.Details.Line+1)
	case "Log.entryAdded":
		var p struct {
			Entry struct {
				Level  string `json:"level"`
				Source string `json:"source"`
				Text   string `json:"text"`
				URL    string `json:"url"`
			} `json:"entry"`
		}
		_ = json.Unmarshal(msg.Params, &p)
		if p.Entry.Level != "error" {
			return ""
		}
		return fmt.Sprintf("log %s: %s (%s)", p.Entry.Source, p.Entry.Text, p.Entry.URL)
	}
	return ""
}

func (b *browser) send(ctx context.Context, session, method string, params, result any) error {
	b.mu.Lock()
	b.next++
	id := b.next
	ch := make(chan cdpMessage, 1)
	b.pending[id] = ch
	b.mu.Unlock()
	var raw json.RawMessage
	if params != nil {
		raw, _ = json.Marshal(params)
	}
	data, _ := json.Marshal(cdpMessage{ID: id, Method: method, Params: raw, SessionID: session})
	if err := b.conn.Write(ctx, websocket.MessageText, data); err != nil {
		return fmt.Errorf("%s: %w", method, err)
	}
	select {
	case msg, ok := <-ch:
		if !ok {
			return fmt.Errorf("%s: the DevTools connection closed", method)
		}
		if msg.Error != nil {
			return fmt.Errorf("%s: %s (%d)", method, msg.Error.Message, msg.Error.Code)
		}
		if result != nil {
			return json.Unmarshal(msg.Result, result)
		}
		return nil
	case <-ctx.Done():
		return fmt.Errorf("%s: %w", method, ctx.Err())
	}
}

func (b *browser) call(t *testing.T, session, method string, params, result any) {
	t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, 30*time.Second)
	defer cancel()
	if err := b.send(ctx, session, method, params, result); err != nil {
		t.Fatal(err)
	}
}

func (b *browser) navigate(t *testing.T, url string) {
	t.Helper()
	var nav struct {
		ErrorText string `json:"errorText"`
	}
	b.call(t, b.session, "Page.navigate", map[string]any{"url": url}, &nav)
	if nav.ErrorText != "" {
		t.Fatalf("navigating to %s: %s", url, nav.ErrorText)
	}
}

var errEval = errors.New("evaluation threw")

// evalValue evaluates a JavaScript expression in the page and returns its
// JSON value.
func (b *browser) evalValue(ctx context.Context, expr string) (json.RawMessage, error) {
	var r struct {
		Result struct {
			Value json.RawMessage `json:"value"`
		} `json:"result"`
		ExceptionDetails *struct {
			Text      string `json:"text"`
			Exception struct {
				Description string `json:"description"`
			} `json:"exception"`
		} `json:"exceptionDetails"`
	}
	err := b.send(ctx, b.session, "Runtime.evaluate", map[string]any{"expression": expr, "returnByValue": true, "awaitPromise": true}, &r)
	if err != nil {
		return nil, err
	}
	if r.ExceptionDetails != nil {
		return nil, fmt.Errorf("%w: %s %s", errEval, r.ExceptionDetails.Text, r.ExceptionDetails.Exception.Description)
	}
	return r.Result.Value, nil
}

func (b *browser) eval(t *testing.T, expr string) json.RawMessage {
	t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, 30*time.Second)
	defer cancel()
	v, err := b.evalValue(ctx, expr)
	if err != nil {
		t.Fatalf("%s: %v", expr, err)
	}
	return v
}

func (b *browser) evalString(t *testing.T, expr string) string {
	t.Helper()
	var s string
	if err := json.Unmarshal(b.eval(t, expr), &s); err != nil {
		t.Fatalf("%s: not a string: %v", expr, err)
	}
	return s
}

// waitFor polls a JavaScript condition until it holds (30 s at most).
func (b *browser) waitFor(t *testing.T, what, cond string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(b.ctx, 10*time.Second)
		v, err := b.evalValue(ctx, "Boolean("+cond+")")
		cancel()
		if err == nil && string(v) == "true" {
			return
		}
		if time.Now().After(deadline) {
			page, _ := b.evalValue(b.ctx, `document.body.innerText`)
			b.mu.Lock()
			problems := slices.Clone(b.problems)
			b.mu.Unlock()
			t.Fatalf("waiting for %s (%s): last result %s %v\npage text: %s\nproblems: %q", what, cond, v, err, page, problems)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// screenshot is a PNG of the whole page.
func (b *browser) screenshot(t *testing.T) []byte {
	t.Helper()
	var metrics struct {
		Content struct {
			Width  float64 `json:"width"`
			Height float64 `json:"height"`
		} `json:"cssContentSize"`
	}
	b.call(t, b.session, "Page.getLayoutMetrics", nil, &metrics)
	var shot struct {
		Data string `json:"data"`
	}
	b.call(t, b.session, "Page.captureScreenshot", map[string]any{
		"format": "png", "captureBeyondViewport": true,
		"clip": map[string]any{"x": 0, "y": 0, "width": metrics.Content.Width, "height": metrics.Content.Height, "scale": 1},
	}, &shot)
	png, err := base64.StdEncoding.DecodeString(shot.Data)
	if err != nil {
		t.Fatal(err)
	}
	return png
}

// checkConsole fails the test on any error the page reported, but for the
// browser's own network log of the one 401 that made the page ask for
// the token.
func (b *browser) checkConsole(t *testing.T) {
	t.Helper()
	b.mu.Lock()
	defer b.mu.Unlock()
	allowed := 1
	for _, p := range b.problems {
		if allowed > 0 && strings.HasPrefix(p, "log network: ") && strings.Contains(p, "401") && strings.Contains(p, "/v1/status") {
			allowed--
			continue
		}
		t.Errorf("the page reported: %s", p)
	}
}
