package server

import (
	"bufio"
	"bytes"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/goprovider/provider/engine"
	"github.com/goprovider/provider/stages/stagestest"
)

// harness is a Server behind a real loopback HTTP server. Every request's
// handler signals served when it has returned, so a test can wait for the
// server's side of an exchange without sleeping.
type harness struct {
	*Server
	http   *httptest.Server
	served chan struct{}
}

func newHarness(t *testing.T, o Options, fake *stagestest.Engine) *harness {
	t.Helper()
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	s := New(o)
	h := &harness{Server: s, served: make(chan struct{}, 128)}
	h.http = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.ServeHTTP(w, r)
		h.served <- struct{}{}
	}))
	t.Cleanup(func() {
		h.http.Close()
		s.Close()
	})
	if fake != nil {
		if err := s.Register(storiesModel(t, fake)); err != nil {
			t.Fatal(err)
		}
	}
	return h
}

func storiesModel(t *testing.T, gen *stagestest.Engine) Model {
	tok := stagestest.Tokenizer(t)
	return Model{Name: "stories", Architecture: "llama", Tokenizer: tok, ChatTemplate: stagestest.ChatTemplate, EOS: tok.EOSSet(), ContextLength: 512, Generator: gen}
}

// storyEngine streams the story to every generation, with logprobs when
// asked.
func storyEngine() *stagestest.Engine {
	return &stagestest.Engine{Script: func(g engine.Generation) stagestest.Play {
		return stagestest.Play{Events: stagestest.Tokens(g, stagestest.Story, engine.FinishLength)}
	}}
}

// post sends a body and returns the status and the whole response body,
// after the handler has returned.
func (h *harness) post(t *testing.T, path, body string) (int, []byte) {
	t.Helper()
	resp, err := http.Post(h.http.URL+path, "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	<-h.served
	return resp.StatusCode, b
}

func (h *harness) get(t *testing.T, path string) (int, []byte) {
	t.Helper()
	resp, err := http.Get(h.http.URL + path)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	<-h.served
	return resp.StatusCode, b
}

type apiError struct {
	Error struct {
		Message string  `json:"message"`
		Type    string  `json:"type"`
		Param   *string `json:"param"`
		Code    string  `json:"code"`
	} `json:"error"`
}

func decodeError(t *testing.T, b []byte) apiError {
	t.Helper()
	var e apiError
	if err := json.Unmarshal(b, &e); err != nil || e.Error.Code == "" || e.Error.Message == "" {
		t.Fatalf("not an OpenAI error body: %s", b)
	}
	return e
}

// sseEvents splits an SSE body into its data payloads.
func sseEvents(t *testing.T, body []byte) []string {
	t.Helper()
	var out []string
	sc := bufio.NewScanner(bytes.NewReader(body))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if line == "" {
			continue
		}
		data, ok := strings.CutPrefix(line, "data: ")
		if !ok {
			t.Fatalf("not an SSE data line: %q", line)
		}
		out = append(out, data)
	}
	return out
}
