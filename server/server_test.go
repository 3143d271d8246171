package server

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/benbjohnson/clock"

	"github.com/goprovider/provider/engine"
	"github.com/goprovider/provider/graph"
	"github.com/goprovider/provider/stages"
	"github.com/goprovider/provider/stages/stagestest"
)

const chatOK = `{"model":"stories","messages":[{"role":"user","content":"Tell a story"}]}`

// fixedMessages are every message an error body may carry.
func fixedMessages() []string {
	var out []string
	for _, m := range invalidMessages {
		out = append(out, m)
	}
	for _, err := range []error{context.Canceled, errBadBody, errNotFound, errMethod, errTooLarge, graph.ErrBusy, engine.ErrNeverFits, engine.ErrDraining,
		engine.ErrDuplicateID, engine.ErrInvalidID, engine.ErrInvalidToken, engine.ErrInvalidSpan, engine.ErrStepFailed, errors.New("x")} {
		out = append(out, classify(err).message)
	}
	out = append(out, classify(stages.ErrUnknownModel).message)
	out = append(out, classify(&stages.CarveError{Reason: stages.CarveShortRun}).message)
	return out
}

// TestCarveErrorIsProviderSide: a placeholder mismatch is the server's
// fault: 503 with the closed reason as its param, logged as an error.
func TestCarveErrorIsProviderSide(t *testing.T) {
	o := classify(fmt.Errorf("stage spans: %w", &stages.CarveError{Reason: stages.CarveLeftover, At: 7}))
	if o.status != 503 || o.code != "media_span_mismatch" || o.param != "leftover_placeholders" || !o.provider() {
		t.Fatalf("outcome %+v", o)
	}
}

func TestBadInput(t *testing.T) {
	// The engine's refusals are scripted by request id.
	fake := &stagestest.Engine{Script: func(g engine.Generation) stagestest.Play {
		switch g.ID {
		case "full":
			return stagestest.Play{Refuse: engine.ErrQueueFull}
		case "draining":
			return stagestest.Play{Refuse: engine.ErrDraining}
		case "huge":
			return stagestest.Play{Refuse: fmt.Errorf("engine: %w", engine.ErrNeverFits)}
		case "dup":
			return stagestest.Play{Refuse: fmt.Errorf("engine: %w", engine.ErrDuplicateID)}
		case "fails":
			return stagestest.Play{Events: []engine.Event{{Kind: engine.EventError, Reason: engine.FinishError, Err: engine.ErrStepFailed}}}
		}
		return stagestest.Play{Events: stagestest.Tokens(g, stagestest.Story[:2], engine.FinishLength)}
	}}
	h := newHarness(t, Options{}, fake)
	big := `{"model":"stories","messages":[{"role":"user","content":"` + strings.Repeat("a", 33<<20) + `"}]}`
	tests := []struct {
		name   string
		method string
		path   string
		id     string
		body   string
		status int
		code   string
		param  string
	}{
		{"invalid JSON", "POST", "/v1/chat/completions", "", `{"model":"stories",`, 400, "invalid_json", ""},
		{"wrong type", "POST", "/v1/chat/completions", "", `{"model":"stories","messages":[{"role":"user","content":"x"}],"max_tokens":"SECRET"}`, 400, "invalid_type", "max_tokens"},
		{"empty messages", "POST", "/v1/chat/completions", "", `{"model":"stories","messages":[]}`, 400, "invalid_value", "messages"},
		{"negative max_tokens", "POST", "/v1/chat/completions", "", `{"model":"stories","messages":[{"role":"user","content":"x"}],"max_tokens":-5}`, 400, "invalid_value", "max_tokens"},
		{"huge max_tokens", "POST", "/v1/chat/completions", "", `{"model":"stories","messages":[{"role":"user","content":"x"}],"max_tokens":100000000}`, 400, "invalid_value", "max_tokens"},
		{"max_tokens past the context", "POST", "/v1/completions", "", `{"model":"stories","prompt":"x","max_tokens":600}`, 400, "context_length_exceeded", "max_tokens"},
		{"unknown model", "POST", "/v1/chat/completions", "", `{"model":"SECRET-model","messages":[{"role":"user","content":"x"}]}`, 404, "model_not_found", ""},
		{"33 MiB body", "POST", "/v1/chat/completions", "", big, 413, "request_too_large", ""},
		{"unknown field in a message", "POST", "/v1/chat/completions", "", `{"model":"stories","messages":[{"role":"user","content":"x","SECRET_field":1}]}`, 400, "unknown_parameter", "messages"},
		{"tool without its function", "POST", "/v1/chat/completions", "", `{"model":"stories","messages":[{"role":"user","content":"x"}],"tools":[{"type":"function"}]}`, 400, "missing_required_parameter", "tools"},
		{"n=17", "POST", "/v1/chat/completions", "", `{"model":"stories","messages":[{"role":"user","content":"x"}],"n":17}`, 400, "invalid_value", "n"},
		{"presence_penalty 3", "POST", "/v1/chat/completions", "", `{"model":"stories","messages":[{"role":"user","content":"x"}],"presence_penalty":3}`, 400, "invalid_value", "presence_penalty"},
		{"logit_bias outside the vocabulary", "POST", "/v1/completions", "", `{"model":"stories","prompt":"x","logit_bias":{"99999":1}}`, 400, "invalid_value", "logit_bias"},
		{"conflicting max_completion_tokens", "POST", "/v1/chat/completions", "", `{"model":"stories","messages":[{"role":"user","content":"x"}],"max_tokens":3,"max_completion_tokens":4}`, 400, "invalid_value", "max_completion_tokens"},
		{"image on a text model", "POST", "/v1/chat/completions", "", `{"model":"stories","messages":[{"role":"user","content":[{"type":"image_url","image_url":{"url":"data:,SECRET"}}]}]}`, 400, "unsupported_media", "messages"},
		{"engine queue full", "POST", "/v1/chat/completions", "full", chatOK, 429, "queue_full", ""},
		{"engine draining", "POST", "/v1/chat/completions", "draining", chatOK, 503, "draining", ""},
		{"never fits", "POST", "/v1/completions", "huge", `{"model":"stories","prompt":"SECRET"}`, 503, "kv_capacity", ""},
		{"fails before any output", "POST", "/v1/chat/completions", "fails", `{"model":"stories","messages":[{"role":"user","content":"x"}],"stream":true}`, 500, "generation_failed", ""},
		{"duplicate live id", "POST", "/v1/chat/completions", "dup", chatOK, 400, "duplicate_request_id", ""},
		{"wrong method", "GET", "/v1/chat/completions", "", "", 405, "method_not_allowed", ""},
		{"no such route", "POST", "/v1/SECRET", "", "{}", 404, "not_found", ""},
	}
	fixed := fixedMessages()
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			req, _ := http.NewRequest(tc.method, h.http.URL+tc.path, strings.NewReader(tc.body))
			if tc.id != "" {
				req.Header.Set("X-Request-ID", tc.id)
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			<-h.served
			if resp.StatusCode != tc.status {
				t.Fatalf("status %d, want %d: %s", resp.StatusCode, tc.status, body)
			}
			e := decodeError(t, body)
			if e.Error.Code != tc.code || (e.Error.Param == nil) != (tc.param == "") || (e.Error.Param != nil && *e.Error.Param != tc.param) {
				t.Fatalf("error %+v, want code %s param %q", e.Error, tc.code, tc.param)
			}
			if !slices.Contains(fixed, e.Error.Message) || bytes.Contains(body, []byte("SECRET")) {
				t.Fatalf("message is not a fixed one or echoes the request: %s", body)
			}
			// The server keeps serving.
			if status, b := h.post(t, "/v1/chat/completions", chatOK); status != 200 {
				t.Fatalf("follow-up request: %d %s", status, b)
			}
		})
	}
}

func TestChatStream(t *testing.T) {
	h := newHarness(t, Options{}, storyEngine())
	resp, err := http.Post(h.http.URL+"/v1/chat/completions", "application/json", strings.NewReader(
		`{"model":"stories","messages":[{"role":"user","content":"Tell a story"}],"stream":true,"stream_options":{"include_usage":true},"stop":["girl"],"logprobs":true}`))
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	<-h.served
	if ct := resp.Header.Get("Content-Type"); ct != "text/event-stream" || resp.Header.Get("X-Request-ID") == "" {
		t.Fatalf("headers %v", resp.Header)
	}
	events := sseEvents(t, body)
	if events[len(events)-1] != "[DONE]" {
		t.Fatalf("last event %q", events[len(events)-1])
	}
	type chunk struct {
		Object  string `json:"object"`
		Choices []struct {
			Delta struct {
				Role    string  `json:"role"`
				Content *string `json:"content"`
			} `json:"delta"`
			Logprobs *struct {
				Content []struct {
					Token string `json:"token"`
					Bytes []int  `json:"bytes"`
				} `json:"content"`
			} `json:"logprobs"`
			FinishReason *string `json:"finish_reason"`
		} `json:"choices"`
		Usage *struct {
			PromptTokens        int `json:"prompt_tokens"`
			CompletionTokens    int `json:"completion_tokens"`
			TotalTokens         int `json:"total_tokens"`
			PromptTokensDetails struct {
				CachedTokens *int `json:"cached_tokens"`
			} `json:"prompt_tokens_details"`
		} `json:"usage"`
	}
	var text strings.Builder
	var entries int
	var finish string
	for i, ev := range events[:len(events)-1] {
		var c chunk
		if err := json.Unmarshal([]byte(ev), &c); err != nil {
			t.Fatalf("event %d: %v", i, err)
		}
		if c.Object != "chat.completion.chunk" {
			t.Fatalf("object %q", c.Object)
		}
		if i == 0 && (len(c.Choices) != 1 || c.Choices[0].Delta.Role != "assistant") {
			t.Fatalf("first chunk %s", ev)
		}
		if i == len(events)-2 {
			if len(c.Choices) != 0 || c.Usage == nil || c.Usage.CompletionTokens != 12 || c.Usage.PromptTokensDetails.CachedTokens == nil {
				t.Fatalf("usage chunk %s", ev)
			}
			continue
		}
		ch := c.Choices[0]
		if ch.Delta.Content != nil {
			text.WriteString(*ch.Delta.Content)
		}
		if ch.Logprobs != nil {
			entries += len(ch.Logprobs.Content)
		}
		if ch.FinishReason != nil {
			finish = *ch.FinishReason
		}
	}
	if text.String() != "Once upon a time, there was a little " || finish != "stop" || entries != 9 {
		t.Fatalf("text %q, finish %q, %d logprob entries", text.String(), finish, entries)
	}
}

func TestNonStreamed(t *testing.T) {
	h := newHarness(t, Options{}, storyEngine())
	status, body := h.post(t, "/v1/completions", `{"model":"stories","prompt":"Once","max_tokens":15}`)
	var r struct {
		Object  string `json:"object"`
		Choices []struct {
			Text         string `json:"text"`
			FinishReason string `json:"finish_reason"`
		} `json:"choices"`
		Usage struct {
			CompletionTokens int `json:"completion_tokens"`
		} `json:"usage"`
	}
	if err := json.Unmarshal(body, &r); err != nil || status != 200 {
		t.Fatalf("%d %s", status, body)
	}
	if r.Object != "text_completion" || r.Choices[0].Text != stagestest.StoryText || r.Choices[0].FinishReason != "length" || r.Usage.CompletionTokens != 15 {
		t.Fatalf("response %s", body)
	}
}

func TestErrorMidStream(t *testing.T) {
	fake := &stagestest.Engine{Script: func(g engine.Generation) stagestest.Play {
		evs := stagestest.Tokens(g, stagestest.Story[:3], 0)
		return stagestest.Play{Events: append(evs, engine.Event{Kind: engine.EventError, Reason: engine.FinishError, Err: engine.ErrStepFailed})}
	}}
	h := newHarness(t, Options{}, fake)
	status, body := h.post(t, "/v1/chat/completions", `{"model":"stories","messages":[{"role":"user","content":"x"}],"stream":true}`)
	events := sseEvents(t, body)
	last := events[len(events)-1]
	if status != 200 || !strings.HasPrefix(last, `{"error":`) || slices.Contains(events, "[DONE]") {
		t.Fatalf("%d %q", status, events)
	}
	if e := decodeError(t, []byte(last)); e.Error.Code != "generation_failed" {
		t.Fatalf("error event %s", last)
	}
}

func TestDisconnectCancelsTheRow(t *testing.T) {
	for _, stream := range []bool{true, false} {
		t.Run(fmt.Sprint("stream=", stream), func(t *testing.T) {
			started := make(chan struct{})
			fake := &stagestest.Engine{
				Cancels: make(chan engine.RequestID, 1),
				Script: func(g engine.Generation) stagestest.Play {
					close(started)
					return stagestest.Play{Events: stagestest.Tokens(g, stagestest.Story[:2], 0), Hold: true}
				},
			}
			h := newHarness(t, Options{}, fake)
			ctx, hangUp := context.WithCancel(context.Background())
			req, _ := http.NewRequestWithContext(ctx, "POST", h.http.URL+"/v1/chat/completions",
				strings.NewReader(fmt.Sprintf(`{"model":"stories","messages":[{"role":"user","content":"x"}],"stream":%v}`, stream)))
			req.Header.Set("X-Request-ID", "leaver")
			done := make(chan struct{})
			go func() {
				defer close(done)
				if resp, err := http.DefaultClient.Do(req); err == nil {
					_, _ = io.ReadAll(resp.Body)
					resp.Body.Close()
				}
			}()
			<-started // the row runs: leave
			hangUp()
			if id := <-fake.Cancels; id != "leaver" {
				t.Fatalf("cancelled %q", id)
			}
			<-done
			<-h.served
			_, metrics := h.get(t, "/metrics")
			for _, want := range []string{
				`provider_requests_total{endpoint="chat",status="499"} 1`,
				`provider_request_errors_total{class="cancelled",fault="client"} 1`,
			} {
				if !bytes.Contains(metrics, []byte(want)) {
					t.Fatalf("metrics lack %q:\n%s", want, metrics)
				}
			}
		})
	}
}

func TestBackpressure(t *testing.T) {
	gate := make(chan struct{})
	fake := storyEngine()
	fake.Gate = gate
	h := newHarness(t, Options{Graph: graph.Options{Intake: 1, IntakeWait: 5 * time.Millisecond}}, fake)
	const offered = 40
	statuses := make(chan int, offered)
	var wg sync.WaitGroup
	for range offered {
		wg.Go(func() {
			resp, err := http.Post(h.http.URL+"/v1/chat/completions", "application/json", strings.NewReader(chatOK))
			if err != nil {
				t.Error(err)
				return
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode == 429 && decodeError(t, body).Error.Code != "queue_full" {
				t.Errorf("429 body %s", body)
			}
			statuses <- resp.StatusCode
		})
	}
	// The engine is stuck, so the first refusal proves the intake filled.
	first := <-statuses
	close(gate)
	wg.Wait()
	close(statuses)
	count := map[int]int{first: 1}
	for s := range statuses {
		count[s]++
	}
	if first != 429 || count[200]+count[429] != offered || count[200] == 0 {
		t.Fatalf("first %d, statuses %v", first, count)
	}
	for range offered {
		<-h.served
	}
}

func TestModelsAndHealth(t *testing.T) {
	h := newHarness(t, Options{Architectures: []string{"llama"}}, nil)
	if status, _ := h.get(t, "/health"); status != 503 {
		t.Fatalf("health before any model: %d", status)
	}
	fake := &liveEngine{Engine: storyEngine()}
	m := storiesModel(t, fake.Engine)
	m.Generator = fake
	m.Architecture = "gemma9"
	if err := h.Register(m); !errors.Is(err, ErrUnsupportedArchitecture) {
		t.Fatalf("register unsupported: %v", err)
	}
	m.Architecture = "llama"
	if err := h.Register(m); err != nil {
		t.Fatal(err)
	}
	if status, body := h.get(t, "/v1/models"); status != 200 || !bytes.Contains(body, []byte(`"data":[{"id":"stories","object":"model"`)) {
		t.Fatalf("models: %d %s", status, body)
	}
	if status, _ := h.get(t, "/v1/models/stories"); status != 200 {
		t.Fatalf("model: %d", status)
	}
	if status, body := h.get(t, "/v1/models/SECRET"); status != 404 || bytes.Contains(body, []byte("SECRET")) {
		t.Fatalf("unknown model: %d %s", status, body)
	}
	if status, _ := h.get(t, "/health"); status != 200 {
		t.Fatalf("health: %d", status)
	}
	h.SetLoading(true)
	if status, _ := h.get(t, "/health"); status != 503 {
		t.Fatalf("health while loading: %d", status)
	}
	h.SetLoading(false)
	fake.setErr(errors.New("engine loop died"))
	if status, body := h.get(t, "/health"); status != 503 || !bytes.Contains(body, []byte("unavailable")) {
		t.Fatalf("health with a dead engine: %d %s", status, body)
	}
	if !h.Unregister("stories") {
		t.Fatal("unregister")
	}
	if status, body := h.get(t, "/v1/models"); status != 200 || !bytes.Contains(body, []byte(`"data":[]`)) {
		t.Fatalf("models after unregister: %s", body)
	}
}

// liveEngine is a fake engine that can die.
type liveEngine struct {
	*stagestest.Engine
	mu  sync.Mutex
	err error
}

func (l *liveEngine) Err() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.err
}

func (l *liveEngine) setErr(err error) {
	l.mu.Lock()
	l.err = err
	l.mu.Unlock()
}

func TestMetricsText(t *testing.T) {
	fake := storyEngine()
	fake.Stat = engine.Stats{Running: 2, Waiting: 1, MaxConcurrent: 4, KVUsed: 4096, KVCapacity: 1 << 20, KVBytesPerToken: 64, Preemptions: 3, Steps: 99}
	// A clock that never moves makes every latency 0.
	h := newHarness(t, Options{Graph: graph.Options{Clock: clock.NewMock()}}, fake)
	h.post(t, "/v1/chat/completions", `{"model":"stories","messages":[{"role":"user","content":"x"}],"stream":true}`)
	h.post(t, "/v1/completions", `{"model":"stories","prompt":"Once","max_tokens":15,"typical_p":0.9,"SECRET_knob":1,"x y":2}`)
	h.post(t, "/v1/chat/completions", `{"model":"nope","messages":[]}`)
	h.post(t, "/v1/chat/completions", `{`)
	status, body := h.get(t, "/metrics")
	if status != 200 {
		t.Fatal(status)
	}
	stagestest.Golden(t, "metrics", body)
}

func TestLogsCarryOnlyTelemetry(t *testing.T) {
	var buf bytes.Buffer
	logger := slog.New(slog.NewJSONHandler(&buf, nil))
	h := newHarness(t, Options{Logger: logger}, storyEngine())
	h.post(t, "/v1/chat/completions", `{"model":"stories","messages":[{"role":"user","content":"SECRET prompt"}],"user":"SECRET user"}`)
	h.post(t, "/v1/chat/completions", `{"model":"SECRET-model","messages":[{"role":"user","content":"x"}]}`)
	h.log.Info("request", "prompt", "SECRET", "request_id", "r", slog.Group("model", "tokens", []int{1, 2}))
	if bytes.Contains(buf.Bytes(), []byte("SECRET")) || bytes.Contains(buf.Bytes(), []byte("Lily")) {
		t.Fatalf("logs leak request or response content:\n%s", buf.String())
	}
	lines := bytes.Split(bytes.TrimSpace(buf.Bytes()), []byte("\n"))
	if len(lines) < 3 {
		t.Fatalf("log:\n%s", buf.String())
	}
	for _, line := range lines {
		var rec map[string]any
		if err := json.Unmarshal(line, &rec); err != nil {
			t.Fatal(err)
		}
		for k := range rec {
			if k != "time" && k != "level" && k != "msg" && !telemetryFields[k] {
				t.Fatalf("field %q passed the allowlist: %s", k, line)
			}
		}
	}
}

// A request holds its place in the intake from before its body is read: a
// client trickling its body keeps the one place, and the next request is
// refused with 429 without its body being waited for; once the trickler
// goes, requests are served again.
func TestIntakeBeforeBody(t *testing.T) {
	h := newHarness(t, Options{Graph: graph.Options{Intake: 1, IntakeWait: 5 * time.Millisecond}}, storyEngine())
	conn, err := net.Dial("tcp", strings.TrimPrefix(h.http.URL, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	fmt.Fprintf(conn, "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n{\"model\":")
	status := 0
	for status != 429 {
		resp, err := http.Post(h.http.URL+"/v1/chat/completions", "application/json", strings.NewReader(chatOK))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		status = resp.StatusCode // 200 until the trickler's place is taken
	}
	conn.Close()
	for status != 200 {
		resp, err := http.Post(h.http.URL+"/v1/chat/completions", "application/json", strings.NewReader(chatOK))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		status = resp.StatusCode
	}
}

func TestModelName(t *testing.T) {
	for _, c := range []struct{ body, want string }{
		{`{"model":"a","prompt":"x"}`, "a"},
		{`{"prompt":"x","stream":true,"model":"b"}`, "b"},
		{`{"messages":[{"model":"inner"}],"model":"c"}`, "c"},
		{`{"model":12}`, ""}, {`{"prompt":"x"}`, ""}, {`[]`, ""}, {`{"model":`, ""}, {``, ""},
		{`{"model":"d"` + strings.Repeat(" ", 1<<20) + `}`, "d"},
	} {
		if got := modelName([]byte(c.body)); got != c.want {
			t.Errorf("modelName(%.40q) = %q, want %q", c.body, got, c.want)
		}
	}
}
