package link

import (
	"bytes"
	"errors"
	"net/http"
	"testing"
)

func TestRoute(t *testing.T) {
	for _, tc := range []struct {
		name, body, path, sent string
		err                    bool
	}{
		{name: "no endpoint", body: `{"model":"m"}`, path: "/v1/chat/completions", sent: `{"model":"m"}`},
		{name: "completions", body: `{"model":"m","endpoint":"/v1/completions"}`, path: "/v1/completions", sent: `{"model":"m"}`},
		{name: "empty endpoint", body: `{"endpoint":"","model":"m"}`, path: "/v1/chat/completions", sent: `{"model":"m"}`},
		{name: "not JSON", body: `{"model":`, path: "/v1/chat/completions", sent: `{"model":`},
		{name: "outside /v1", body: `{"endpoint":"/metrics"}`, err: true},
		{name: "dot-dot", body: `{"endpoint":"/v1/../metrics"}`, err: true},
		{name: "query", body: `{"endpoint":"/v1/completions?x=1"}`, err: true},
		{name: "not a string", body: `{"endpoint":7}`, err: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path, body, err := route([]byte(tc.body))
			if tc.err {
				if !errors.Is(err, errEndpoint) {
					t.Errorf("err %v, want errEndpoint", err)
				}
				return
			}
			if err != nil || path != tc.path || string(body) != tc.sent {
				t.Errorf("route = %q %s %v, want %q %s", path, body, err, tc.path, tc.sent)
			}
		})
	}
}

func TestTallyEvents(t *testing.T) {
	var tl tally
	for _, tc := range []struct {
		payload string
		forward bool
	}{
		{`{"choices":[{"delta":{"role":"assistant","content":""}}]}`, true},
		{`{"choices":[{"delta":{"content":"a"}}]}`, true},
		{`{"choices":[{"delta":{"content":"b","reasoning_content":"r"}}]}`, true},
		{`{"choices":[{"text":"c"}]}`, true},
		{`not json`, true},
		{`[DONE]`, false},
	} {
		if got := tl.event([]byte(tc.payload)); got != tc.forward {
			t.Errorf("event(%s) forwarded %v, want %v", tc.payload, got, tc.forward)
		}
	}
	// Without usage, completion tokens are estimated as the chunks that
	// carried text; the prompt is not counted.
	if u := tl.final(); u != (tokenUsage{CompletionTokens: 3}) {
		t.Errorf("estimated usage %+v", u)
	}
	if got := tl.content.String(); got != "abrc" {
		t.Errorf("hashed text %q", got)
	}
	if tl.event([]byte(`{"error":{"type":"rate_limit_error","code":"queue_full"}}`)) {
		t.Error("error event forwarded")
	}
	if *tl.fail != (failure{status: 429, reason: "queue_full"}) {
		t.Errorf("failure %+v", *tl.fail)
	}
}

func TestReplyWriterWholeAnswers(t *testing.T) {
	for _, tc := range []struct {
		name   string
		status int
		body   string
		want   failure
	}{
		{"server error body", 503, `{"error":{"message":"m","type":"service_unavailable_error","code":"draining"}}`, failure{503, "draining"}},
		{"type only", 400, `{"error":{"message":"m","type":"invalid_request_error"}}`, failure{400, "invalid_request_error"}},
		{"not JSON", 502, `bad gateway`, failure{502, "bad_gateway"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := newReplyWriter(func([]byte) error { t.Fatal("an error answer sent a chunk"); return nil })
			w.WriteHeader(tc.status)
			_, _ = w.Write([]byte(tc.body))
			if err := w.close(); err != nil {
				t.Fatal(err)
			}
			if w.t.fail == nil || *w.t.fail != tc.want {
				t.Errorf("failure %+v, want %+v", w.t.fail, tc.want)
			}
		})
	}
}

func TestReplyWriterStreamSendFailure(t *testing.T) {
	gone := errors.New("gone")
	var sent [][]byte
	w := newReplyWriter(func(ev []byte) error {
		if len(sent) == 1 {
			return gone
		}
		sent = append(sent, bytes.Clone(ev))
		return nil
	})
	w.Header().Set("Content-Type", "text/event-stream; charset=utf-8")
	if _, err := w.Write([]byte("data: 1\n\ndata: 2")); err != nil {
		t.Fatal(err)
	}
	if _, err := w.Write([]byte("\n\n")); !errors.Is(err, gone) {
		t.Errorf("write after a failed send: %v", err)
	}
	if err := http.NewResponseController(w).Flush(); !errors.Is(err, gone) {
		t.Errorf("flush after a failed send: %v", err)
	}
	if len(sent) != 1 || string(sent[0]) != "data: 1" {
		t.Errorf("sent %q", sent)
	}
}

func TestReplyWriterLimit(t *testing.T) {
	w := newReplyWriter(func([]byte) error { return nil })
	if _, err := w.Write(make([]byte, maxFrame)); err != nil {
		t.Fatal(err)
	}
	if _, err := w.Write([]byte("x")); !errors.Is(err, errTooLarge) {
		t.Errorf("write past the limit: %v", err)
	}
}
