package bench

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net"
	"net/http"
	"net/http/httptrace"
	neturl "net/url"
	"strings"
	"sync/atomic"
	"time"
)

const (
	// maxLine bounds one SSE line; a longer one is malformed.
	maxLine = 4 << 20
	// drainGrace bounds reading past [DONE] to free the connection for
	// reuse; a server that keeps the response open longer loses it.
	drainGrace = time.Second
	// snippetLen bounds how much of a bad response a reason quotes.
	snippetLen = 200
)

// failure is an error that knows its kind; the record keeps its text.
type failure struct {
	kind FailureKind
	err  error
}

func (f *failure) Error() string { return f.err.Error() }
func (f *failure) Unwrap() error { return f.err }

func failf(kind FailureKind, format string, args ...any) error {
	return &failure{kind: kind, err: fmt.Errorf(format, args...)}
}

// requestBody is the JSON of one streamed request. Temperature is always
// sent (0, greedy) and seed never is: some peers serialise requests that
// carry one.
type requestBody struct {
	Model         string          `json:"model,omitempty"`
	Messages      []chatMessage   `json:"messages,omitempty"`
	Prompt        string          `json:"prompt,omitempty"`
	MaxTokens     int             `json:"max_tokens"`
	Temperature   float64         `json:"temperature"`
	Stream        bool            `json:"stream"`
	StreamOptions streamOptions   `json:"stream_options"`
	IgnoreEOS     bool            `json:"ignore_eos,omitempty"`
	Format        json.RawMessage `json:"response_format,omitempty"`
}

type chatMessage struct {
	Role    string `json:"role"`
	Content string `json:"content"`
}

type streamOptions struct {
	IncludeUsage bool `json:"include_usage"`
}

// body is the request for one prompt.
func (w *Workload) body(p Prompt) ([]byte, error) {
	b := requestBody{
		Model:         w.Model,
		MaxTokens:     w.MaxTokens,
		Stream:        true,
		StreamOptions: streamOptions{IncludeUsage: true},
		IgnoreEOS:     w.IgnoreEOS,
		Format:        w.ResponseFormat,
	}
	if w.Endpoint == EndpointCompletions {
		b.Prompt = p.Text
	} else {
		b.Messages = []chatMessage{{Role: "user", Content: p.Text}}
	}
	return json.Marshal(b)
}

// chunk is the part of a streamed chat or completion chunk that bench
// reads.
type chunk struct {
	Choices []struct {
		Delta struct {
			Content          string `json:"content"`
			ReasoningContent string `json:"reasoning_content"`
			Reasoning        string `json:"reasoning"`
		} `json:"delta"`
		Text string `json:"text"`
	} `json:"choices"`
	Usage *usage          `json:"usage"`
	Error json.RawMessage `json:"error"`
}

// usage is the token count a server reports, with include_usage on the
// final chunk.
type usage struct {
	PromptTokens     int `json:"prompt_tokens"`
	CompletionTokens int `json:"completion_tokens"`
}

// content is the chunk's streamed text; empty for role-only,
// finish-only and usage chunks.
func (c *chunk) content() string {
	var s string
	for _, ch := range c.Choices {
		s += ch.Delta.Content + ch.Delta.ReasoningContent + ch.Delta.Reasoning + ch.Text
	}
	return s
}

// maxRetries bounds how often a request is sent again after its
// connection broke before any byte of the response.
const maxRetries = 2

// send runs one request for prompt p against url and records it, its
// send time as an offset from origin. It returns when the stream ends,
// fails or times out; it never panics on what the server sends.
//
// A request whose connection fails before any byte of the response
// arrives (EOF, a reset, the server closing an idle keep-alive
// connection just as it was reused: llama.cpp's server closes the
// connection after each streamed answer) is sent again on a fresh
// connection, at most maxRetries times. Such an attempt is not a
// failure: the record is the last attempt's, timed from its own send,
// and counts the retries.
func send(ctx context.Context, client *http.Client, url string, w *Workload, p Prompt, origin time.Time) Record {
	var fresh *http.Client
	defer func() {
		if fresh != nil {
			fresh.CloseIdleConnections()
		}
	}()
	for retries := 0; ; retries++ {
		rec, retry := attempt(ctx, client, url, w, p, origin)
		rec.Retries = retries
		if !retry || retries == maxRetries {
			return rec
		}
		if fresh == nil {
			fresh = freshClient(client)
		}
		client = fresh
	}
}

// attempt sends the request once. retry is true when the client failed
// with a transport error before any byte of the response (not a refused
// dial: nothing listens there), with the run and the request's own
// timeout still live.
func attempt(ctx context.Context, client *http.Client, url string, w *Workload, p Prompt, origin time.Time) (rec Record, retry bool) {
	rctx, cancel := context.WithTimeout(ctx, w.timeout())
	defer cancel()
	var responded atomic.Bool
	rctx = httptrace.WithClientTrace(rctx, &httptrace.ClientTrace{
		GotFirstResponseByte: func() { responded.Store(true) },
	})
	start := time.Now()
	rec = Record{Sent: start.Sub(origin)}
	err := exchange(rctx, cancel, client, url, w, p, start, &rec)
	if rec.E2E == 0 {
		rec.E2E = time.Since(start)
	}
	if err != nil {
		rec.Failure = classify(ctx, rctx, err)
		if rec.Failure.Kind == FailTimeout {
			rec.Failure.Reason = fmt.Sprintf("no end of stream within %s (%d content chunks): %v", w.timeout(), rec.Chunks, err)
		}
		var uerr *neturl.Error
		retry = rec.Failure.Kind == FailTransport && errors.As(err, &uerr) && !responded.Load()
	}
	return rec, retry
}

// freshClient is client without keep-alive, so that each of its
// requests dials a connection of its own; with a transport other than
// *http.Transport, client itself.
func freshClient(client *http.Client) *http.Client {
	t, ok := client.Transport.(*http.Transport)
	if client.Transport == nil {
		t, ok = http.DefaultTransport.(*http.Transport)
	}
	if !ok {
		return client
	}
	t = t.Clone()
	t.DisableKeepAlives = true
	c := *client
	c.Transport = t
	return &c
}

// exchange sends the request and reads its stream into rec; it sets
// rec.E2E when the stream ends cleanly.
func exchange(ctx context.Context, cancel context.CancelFunc, client *http.Client, url string, w *Workload, p Prompt, start time.Time, rec *Record) error {
	body, err := w.body(p)
	if err != nil {
		return fmt.Errorf("encode request: %w", err)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return fmt.Errorf("build request: %w", err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "text/event-stream")
	resp, err := client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return failf(FailHTTPStatus, "HTTP %s: %s", resp.Status, snippet(resp.Body))
	}
	if ct := resp.Header.Get("Content-Type"); ct != "" {
		if mt, _, _ := mime.ParseMediaType(ct); mt != "text/event-stream" {
			return failf(FailNotStream, "content type %q: %s", ct, snippet(resp.Body))
		}
	}
	s := stream{start: start, rec: rec}
	err = s.read(resp.Body)
	s.settle(p)
	if err != nil {
		return err
	}
	rec.E2E = s.end.Sub(start)
	stop := time.AfterFunc(drainGrace, cancel)
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	stop.Stop()
	return nil
}

// stream reads one SSE response, timing its content chunks.
type stream struct {
	start time.Time
	last  time.Time
	end   time.Time
	rec   *Record
	usage *usage
}

// read consumes events until [DONE]. Fields other than data, event, id
// and retry, and comments, are not SSE as OpenAI servers send it.
func (s *stream) read(r io.Reader) error {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64<<10), maxLine)
	var data []string
	event := ""
	for sc.Scan() {
		line := sc.Text()
		if line == "" {
			if len(data) > 0 {
				if done, err := s.dispatch(event, strings.Join(data, "\n")); done || err != nil {
					return err
				}
			}
			data, event = data[:0], ""
			continue
		}
		if line[0] == ':' {
			continue
		}
		field, value, _ := strings.Cut(line, ":")
		value = strings.TrimPrefix(value, " ")
		switch field {
		case "data":
			data = append(data, value)
		case "event":
			event = value
		case "id", "retry":
		default:
			return failf(FailMalformed, "not an SSE line: %q", clip(line))
		}
	}
	if err := sc.Err(); err != nil {
		if errors.Is(err, bufio.ErrTooLong) {
			return failf(FailMalformed, "SSE line over %d bytes", maxLine)
		}
		return failf(FailTruncated, "stream broke after %d content chunks: %w", s.rec.Chunks, err)
	}
	// A last event without its blank line still counts.
	if len(data) > 0 {
		if done, err := s.dispatch(event, strings.Join(data, "\n")); done || err != nil {
			return err
		}
	}
	return failf(FailTruncated, "stream ended before [DONE] after %d content chunks", s.rec.Chunks)
}

// dispatch handles one event's data; done is true at [DONE].
func (s *stream) dispatch(event, data string) (done bool, err error) {
	now := time.Now()
	if event == "error" {
		return false, failf(FailServerError, "error event: %s", clip(data))
	}
	if strings.TrimSpace(data) == "[DONE]" {
		s.end = now
		if s.rec.Chunks == 0 {
			return true, failf(FailNoContent, "[DONE] before any content")
		}
		return true, nil
	}
	var c chunk
	if err := json.Unmarshal([]byte(data), &c); err != nil {
		return false, failf(FailMalformed, "chunk is not a JSON object: %q: %w", clip(data), err)
	}
	if len(c.Error) > 0 && string(c.Error) != "null" {
		return false, failf(FailServerError, "error in stream: %s", clip(string(c.Error)))
	}
	if c.Usage != nil {
		s.usage = c.Usage
	}
	if c.content() == "" {
		return false, nil
	}
	if s.rec.Chunks == 0 {
		s.rec.TTFT = now.Sub(s.start)
	} else {
		s.rec.ITL = append(s.rec.ITL, now.Sub(s.last))
	}
	s.last = now
	s.rec.Chunks++
	return false, nil
}

// settle sets the token counts: the server's usage when it sent one,
// else the content chunks and the prompt's word count.
func (s *stream) settle(p Prompt) {
	if s.usage != nil {
		s.rec.OutputTokens, s.rec.PromptTokens, s.rec.Source = s.usage.CompletionTokens, s.usage.PromptTokens, TokensFromUsage
		return
	}
	s.rec.OutputTokens, s.rec.PromptTokens, s.rec.Source = s.rec.Chunks, p.Words, TokensFromChunks
}

// classify turns a request's error into its failure. The contexts
// decide first: a run canceled or a request timed out explains whatever
// read or dial error followed.
func classify(run, req context.Context, err error) *Failure {
	kind := FailTransport
	var f *failure
	var op *net.OpError
	switch {
	case run.Err() != nil:
		kind = FailCanceled
	case errors.Is(req.Err(), context.DeadlineExceeded):
		kind = FailTimeout
	case errors.As(err, &f):
		kind = f.kind
	case errors.As(err, &op) && op.Op == "dial":
		kind = FailConnect
	}
	return &Failure{Kind: kind, Reason: err.Error()}
}

// snippet is the start of a body, whitespace collapsed, for a reason.
func snippet(r io.Reader) string {
	b, _ := io.ReadAll(io.LimitReader(r, 4*snippetLen))
	return clip(strings.Join(strings.Fields(string(b)), " "))
}

func clip(s string) string {
	if len(s) <= snippetLen {
		return s
	}
	return s[:snippetLen] + "..."
}
