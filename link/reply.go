package link

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"mime"
	"net/http"
	"strconv"
	"strings"
)

// Reasons of the inference_error messages the link makes itself; an
// error the handler answered carries the handler's own reason code.
const (
	reasonUnencrypted   = "request_not_encrypted"
	reasonUndecryptable = "request_undecryptable"
	reasonEndpoint      = "invalid_endpoint"
	reasonConnection    = "connection_lost"
	reasonEmpty         = "empty_response"
	reasonTooLarge      = "response_too_large"
	reasonPanic         = "handler_failed"
)

// errTooLarge: the handler's answer outgrew what the link buffers.
var errTooLarge = errors.New("link: response too large")

// failure is an answer that becomes inference_error.
type failure struct {
	status int
	reason string
}

// tally follows one answer for inference_complete: the usage, the text
// the response hash covers, and the error the answer carried, if any.
// It is fed SSE data payloads or a whole JSON body and never sees the
// clock or the network.
type tally struct {
	usage     tokenUsage
	haveUsage bool
	// chunks counts the streamed chunks that carried text: the estimate
	// of completion tokens when the stream has no usage.
	chunks  int
	content strings.Builder
	fail    *failure
}

// answerJSON is the part of a chunk, a response body or an error body
// the tally reads.
type answerJSON struct {
	Usage *struct {
		PromptTokens     int `json:"prompt_tokens"`
		CompletionTokens int `json:"completion_tokens"`
	} `json:"usage"`
	Choices []struct {
		Delta *struct {
			Content          *string `json:"content"`
			ReasoningContent *string `json:"reasoning_content"`
		} `json:"delta"`
		Text *string `json:"text"`
	} `json:"choices"`
	Error *struct {
		Type string `json:"type"`
		Code string `json:"code"`
	} `json:"error"`
}

// event folds one SSE data payload in and reports whether the event is
// forwarded as a chunk. [DONE] and an error event are not: the
// coordinator writes its own [DONE] after inference_complete, and its
// own error event after inference_error.
func (t *tally) event(payload []byte) (forward bool) {
	if string(payload) == "[DONE]" {
		return false
	}
	var a answerJSON
	if json.Unmarshal(payload, &a) != nil {
		return true
	}
	if a.Error != nil {
		t.fail = &failure{status: statusOfType(a.Error.Type), reason: reasonOf(a.Error.Code, a.Error.Type, 0)}
		return false
	}
	t.readUsage(&a)
	text := false
	for _, c := range a.Choices {
		// The response hash covers content then reasoning per choice,
		// as the reference provider accumulates them; completion text
		// stands in for content.
		if c.Delta != nil {
			text = t.add(c.Delta.Content) || text
			text = t.add(c.Delta.ReasoningContent) || text
		}
		text = t.add(c.Text) || text
	}
	if text {
		t.chunks++
	}
	return true
}

func (t *tally) add(s *string) bool {
	if s == nil || *s == "" {
		return false
	}
	t.content.WriteString(*s)
	return true
}

func (t *tally) readUsage(a *answerJSON) {
	if a.Usage != nil {
		t.usage = tokenUsage{PromptTokens: a.Usage.PromptTokens, CompletionTokens: a.Usage.CompletionTokens}
		t.haveUsage = true
	}
}

// body folds in a whole answer that was not streamed, with its status.
// The response hash of a JSON answer covers the body as sent.
func (t *tally) body(status int, b []byte) {
	var a answerJSON
	ok := json.Unmarshal(b, &a) == nil
	if status < 200 || status > 299 {
		code, typ := "", ""
		if ok && a.Error != nil {
			code, typ = a.Error.Code, a.Error.Type
		}
		t.fail = &failure{status: status, reason: reasonOf(code, typ, status)}
		return
	}
	if ok {
		t.readUsage(&a)
	}
	t.content.Reset()
	t.content.Write(b)
}

// final is the usage to report: the answer's own, else an estimate of
// one completion token per chunk that carried text and no prompt count.
func (t *tally) final() tokenUsage {
	if t.haveUsage {
		return t.usage
	}
	return tokenUsage{CompletionTokens: t.chunks}
}

// responseHash is the reference's response hash: hex SHA-256 of
// "<request id>:<completion tokens>:<response text>".
func responseHash(id string, completion int, text string) string {
	h := sha256.New()
	h.Write([]byte(id + ":" + strconv.Itoa(completion) + ":"))
	h.Write([]byte(text))
	return hex.EncodeToString(h.Sum(nil))
}

// statusOfType maps an OpenAI error type, the one thing an error event
// in a started stream says about its class, to a status.
func statusOfType(typ string) int {
	switch typ {
	case "invalid_request_error":
		return http.StatusBadRequest
	case "rate_limit_error":
		return http.StatusTooManyRequests
	case "service_unavailable_error":
		return http.StatusServiceUnavailable
	}
	return http.StatusInternalServerError
}

// reasonOf is the reason an inference_error carries: the error's code,
// else its type, else the status text.
func reasonOf(code, typ string, status int) string {
	switch {
	case code != "":
		return code
	case typ != "":
		return typ
	case status != 0:
		return strings.ToLower(strings.ReplaceAll(http.StatusText(status), " ", "_"))
	}
	return "error"
}

// replyWriter is the http.ResponseWriter a network request is answered
// through. A 2xx text/event-stream answer is cut into SSE events as the
// handler writes, and each complete event goes out as one chunk at once;
// any other answer is kept whole for the exchange to settle. A chunk
// that cannot be sent fails every later Write and Flush, which tells the
// handler its client is gone.
type replyWriter struct {
	header http.Header
	status int
	stream bool
	buf    []byte
	err    error
	t      tally
	// send forwards one event, without its blank-line terminator.
	send func(event []byte) error
}

func newReplyWriter(send func([]byte) error) *replyWriter {
	return &replyWriter{header: http.Header{}, send: send}
}

// Header implements http.ResponseWriter.
func (w *replyWriter) Header() http.Header { return w.header }

// WriteHeader implements http.ResponseWriter; only the first call
// counts.
func (w *replyWriter) WriteHeader(status int) {
	if w.status != 0 || status < 200 {
		return
	}
	w.status = status
	mt, _, _ := mime.ParseMediaType(w.header.Get("Content-Type"))
	w.stream = status <= 299 && mt == "text/event-stream"
}

// Write implements http.ResponseWriter.
func (w *replyWriter) Write(p []byte) (int, error) {
	if w.status == 0 {
		w.WriteHeader(http.StatusOK)
	}
	if w.err != nil {
		return 0, w.err
	}
	if len(w.buf)+len(p) > maxFrame {
		w.err = errTooLarge
		return 0, w.err
	}
	w.buf = append(w.buf, p...)
	if !w.stream {
		return len(p), nil
	}
	for {
		i := bytes.Index(w.buf, []byte("\n\n"))
		if i < 0 {
			break
		}
		ev := w.buf[:i]
		if err := w.event(ev); err != nil {
			w.err = err
			return 0, err
		}
		w.buf = w.buf[i+2:]
	}
	return len(p), nil
}

// Flush implements http.Flusher. Events go out as they complete, so
// there is nothing to push.
func (w *replyWriter) Flush() {}

// FlushError is what http.ResponseController.Flush calls: the error of
// the chunk that could not be sent, if any.
func (w *replyWriter) FlushError() error { return w.err }

func (w *replyWriter) event(ev []byte) error {
	payload, ok := bytes.CutPrefix(ev, []byte("data:"))
	if ok {
		payload = bytes.TrimPrefix(payload, []byte(" "))
		if !w.t.event(payload) {
			return nil
		}
	}
	return w.send(ev)
}

// close ends the answer once the handler has returned: a partial event
// left in a stream is sent as it is; a whole answer is tallied.
func (w *replyWriter) close() error {
	if w.err != nil {
		return w.err
	}
	if w.stream {
		if len(w.buf) > 0 {
			ev := w.buf
			w.buf = nil
			if err := w.event(ev); err != nil {
				w.err = err
			}
		}
		return w.err
	}
	if w.status != 0 {
		w.t.body(w.status, w.buf)
	}
	return nil
}
