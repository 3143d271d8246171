package bench

import (
	"context"
	"encoding/json"
	"maps"
	"net/http"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"
)

func testWorkload() Workload {
	return Workload{
		Model:     "tiny",
		Endpoint:  EndpointChat,
		Levels:    []Level{{Concurrency: 1}},
		Requests:  4,
		Prompts:   PromptSet{Shape: PromptsFixed, Tokens: 8},
		MaxTokens: 16,
		Timeout:   10 * time.Second,
	}
}

var prompt = Prompt{Text: "the of and to in is it that", Words: 8, Prefix: -1}

// TestSendAgainstBadServers runs one request against each scripted
// server on loopback and checks how it is recorded.
func TestSendAgainstBadServers(t *testing.T) {
	for _, tc := range []struct {
		name     string
		reply    reply
		endpoint Endpoint
		kind     FailureKind // "" for success
		reason   string      // a part of the failure reason
		chunks   int
		source   TokenSource
		tokens   int
	}{
		{name: "streams with usage", reply: reply{tokens: tokens(3, 0, 0)}, chunks: 3, source: TokensFromUsage, tokens: 3},
		{name: "streams without usage: chunks counted", reply: reply{tokens: tokens(5, 0, 0), noUsage: true}, chunks: 5, source: TokensFromChunks, tokens: 5},
		{name: "completions endpoint", endpoint: EndpointCompletions, reply: reply{tokens: tokens(2, 0, 0)}, chunks: 2, source: TokensFromUsage, tokens: 2},
		{name: "HTML error page", reply: reply{status: 500, contentType: "text/html", body: "<html><body><h1>Internal Server Error</h1></body></html>"},
			kind: FailHTTPStatus, reason: "500 Internal Server Error: <html><body><h1>Internal Server Error"},
		{name: "OpenAI error JSON", reply: reply{status: 404, contentType: "application/json", body: `{"error":{"message":"model not found"}}`},
			kind: FailHTTPStatus, reason: "model not found"},
		{name: "HTML with 200", reply: reply{status: 200, contentType: "text/html; charset=utf-8", body: "<!doctype html><title>hi</title>"},
			kind: FailNotStream, reason: `"text/html; charset=utf-8"`},
		{name: "JSON instead of a stream", reply: reply{status: 200, contentType: "application/json", body: `{"choices":[{"message":{"content":"hi"}}]}`},
			kind: FailNotStream, reason: "application/json"},
		{name: "non-SSE line", reply: reply{tokens: tokens(1, 0, 0), raw: []string{"<html>\n"}}, kind: FailMalformed, reason: `"<html>"`, chunks: 1},
		{name: "chunk not JSON", reply: reply{raw: []string{"data: {not json\n\n"}}, kind: FailMalformed, reason: "not a JSON object"},
		{name: "error object in the stream", reply: reply{tokens: tokens(2, 0, 0), raw: []string{`data: {"error":{"message":"engine died"}}` + "\n\n"}},
			kind: FailServerError, reason: "engine died", chunks: 2},
		{name: "error event", reply: reply{raw: []string{"event: error\ndata: overloaded\n\n"}}, kind: FailServerError, reason: "overloaded"},
		{name: "closes mid-stream", reply: reply{tokens: tokens(2, 0, 0), abort: true}, kind: FailTruncated, reason: "stream broke after 2 content chunks", chunks: 2},
		{name: "ends without [DONE]", reply: reply{tokens: tokens(2, 0, 0), noDone: true}, kind: FailTruncated, reason: "before [DONE]", chunks: 2},
		{name: "[DONE] without content", reply: reply{}, kind: FailNoContent, reason: "before any content"},
		{name: "comments and ids are SSE", reply: reply{raw: []string{": keep-alive\nid: 1\nretry: 10\n"}, tokens: tokens(1, 0, 0)}, chunks: 1, source: TokensFromUsage, tokens: 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, srv := loopback(t, tc.reply)
			w := testWorkload()
			if tc.endpoint != "" {
				w.Endpoint = tc.endpoint
			}
			url := Target{URL: srv.URL}.base() + w.Endpoint.path()
			rec := send(t.Context(), srv.Client(), url, &w, prompt, time.Now())
			if tc.kind == "" {
				if !rec.OK() {
					t.Fatalf("failed: %+v", rec.Failure)
				}
			} else {
				if rec.OK() {
					t.Fatalf("succeeded, want %s", tc.kind)
				}
				if rec.Failure.Kind != tc.kind || !strings.Contains(rec.Failure.Reason, tc.reason) {
					t.Fatalf("failure %s %q, want %s containing %q", rec.Failure.Kind, rec.Failure.Reason, tc.kind, tc.reason)
				}
			}
			if rec.Chunks != tc.chunks {
				t.Errorf("chunks = %d, want %d", rec.Chunks, tc.chunks)
			}
			if tc.kind == "" && (rec.Source != tc.source || rec.OutputTokens != tc.tokens) {
				t.Errorf("tokens %d from %s, want %d from %s", rec.OutputTokens, rec.Source, tc.tokens, tc.source)
			}
		})
	}
}

func TestSendRefused(t *testing.T) {
	w := testWorkload()
	rec := send(t.Context(), &http.Client{}, closedPort(t)+w.Endpoint.path(), &w, prompt, time.Now())
	if rec.OK() || rec.Failure.Kind != FailConnect || !strings.Contains(rec.Failure.Reason, "refused") {
		t.Fatalf("record %+v, want a refused connection", rec.Failure)
	}
}

func TestSendCanceledRun(t *testing.T) {
	_, srv := loopback(t, reply{tokens: tokens(1, 0, 0)})
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	w := testWorkload()
	rec := send(ctx, srv.Client(), srv.URL+w.Endpoint.path(), &w, prompt, time.Now())
	if rec.OK() || rec.Failure.Kind != FailCanceled {
		t.Fatalf("record %+v, want canceled", rec.Failure)
	}
}

// TestRequestBody checks what every request asks for: a stream with
// usage, greedy, no seed, and ignore_eos only when asked.
func TestRequestBody(t *testing.T) {
	for _, tc := range []struct {
		name      string
		endpoint  Endpoint
		ignoreEOS bool
		model     string
		format    string
	}{
		{"chat", EndpointChat, false, "tiny", ""},
		{"completions", EndpointCompletions, false, "tiny", ""},
		{"ignore eos", EndpointChat, true, "tiny", ""},
		{"no model", EndpointChat, false, "", ""},
		{"response format", EndpointChat, false, "tiny", `{"type":"json_object"}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f, srv := loopback(t, reply{tokens: tokens(1, 0, 0)})
			w := testWorkload()
			w.Endpoint, w.IgnoreEOS, w.Model = tc.endpoint, tc.ignoreEOS, tc.model
			w.ResponseFormat = json.RawMessage(tc.format)
			if rec := send(t.Context(), srv.Client(), srv.URL+w.Endpoint.path(), &w, prompt, time.Now()); !rec.OK() {
				t.Fatalf("failed: %+v", rec.Failure)
			}
			got := f.requests()[0]
			if f.paths[0] != tc.endpoint.path() {
				t.Errorf("path %s, want %s", f.paths[0], tc.endpoint.path())
			}
			want := map[string]any{
				"max_tokens":     float64(16),
				"temperature":    float64(0),
				"stream":         true,
				"stream_options": map[string]any{"include_usage": true},
			}
			if tc.endpoint == EndpointChat {
				want["messages"] = []any{map[string]any{"role": "user", "content": prompt.Text}}
			} else {
				want["prompt"] = prompt.Text
			}
			if tc.model != "" {
				want["model"] = tc.model
			}
			if tc.ignoreEOS {
				want["ignore_eos"] = true
			}
			if tc.format != "" {
				want["response_format"] = map[string]any{"type": "json_object"}
			}
			if len(got) != len(want) {
				t.Errorf("body has fields %v, want %v", keys(got), keys(want))
			}
			for k, v := range want {
				if !equalJSON(got[k], v) {
					t.Errorf("%s = %v, want %v", k, got[k], v)
				}
			}
			if _, ok := got["seed"]; ok {
				t.Error("request carries a seed")
			}
		})
	}
}

func keys(m map[string]any) []string {
	return slices.Sorted(maps.Keys(m))
}

func equalJSON(a, b any) bool { return reflect.DeepEqual(a, b) }
