package link

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"path"
	"strings"
	"sync/atomic"
)

// defaultEndpoint serves a request body that names no endpoint.
const defaultEndpoint = "/v1/chat/completions"

var errEndpoint = errors.New("link: invalid endpoint")

// exchange is one inference request from its acceptance to its terminal
// message. It belongs to the session it arrived on: its context ends
// with that session, and its chunks go to that session only.
type exchange struct {
	id     string
	sess   *session
	shared *[32]byte // box key with the request's sender; seals the chunks
	ctx    context.Context
	cancel context.CancelFunc
	// cancelled is set when the coordinator cancels the request.
	cancelled atomic.Bool
}

// request takes an inference_request off the reader: it opens the body
// and starts the exchange, or answers inference_error at once. It runs
// on the reader goroutine so that a cancel that follows finds the
// exchange registered.
func (l *link) request(s *session, data []byte) {
	var m requestMsg
	if err := json.Unmarshal(data, &m); err != nil || m.RequestID == "" {
		l.log.Warn("inference request without a request id ignored")
		return
	}
	fail := func(reason string) {
		l.log.Warn("inference request refused", "request_id", m.RequestID, "reason", reason)
		l.spawn(func() {
			_ = s.send(errorMsg{Type: typeError, RequestID: m.RequestID, Error: reason, StatusCode: http.StatusBadRequest})
		})
	}
	// Requests travel sealed to this provider's key: a plain body
	// cannot be answered sealed, and the reference provider refuses it
	// the same way.
	if m.EncryptedBody == nil {
		fail(reasonUnencrypted)
		return
	}
	plain, shared, err := l.keys.open(m.EncryptedBody)
	if err != nil {
		fail(reasonUndecryptable)
		return
	}
	ctx, cancel := context.WithCancel(s.ctx)
	ex := &exchange{id: m.RequestID, sess: s, shared: shared, ctx: ctx, cancel: cancel}
	l.mu.Lock()
	if _, dup := l.inflight[ex.id]; dup {
		l.mu.Unlock()
		cancel()
		l.log.Warn("inference request with a request id already running ignored", "request_id", ex.id)
		return
	}
	l.inflight[ex.id] = ex
	l.mu.Unlock()
	l.spawn(func() { l.serve(ex, plain) })
}

// serve runs one exchange through the handler and settles it.
func (l *link) serve(ex *exchange, plain []byte) {
	defer func() {
		l.mu.Lock()
		delete(l.inflight, ex.id)
		l.mu.Unlock()
		ex.cancel()
	}()
	target, body, err := route(plain)
	if err != nil {
		l.settle(ex, nil, &failure{status: http.StatusBadRequest, reason: reasonEndpoint})
		return
	}
	if err := ex.sess.send(acceptedMsg{Type: typeAccepted, RequestID: ex.id}); err != nil {
		l.settle(ex, nil, nil) // the connection failed
		return
	}
	r, err := http.NewRequestWithContext(ex.ctx, http.MethodPost, target, bytes.NewReader(body))
	if err != nil {
		l.settle(ex, nil, &failure{status: http.StatusBadRequest, reason: reasonEndpoint})
		return
	}
	r.RequestURI = target
	r.Header.Set("Content-Type", "application/json")
	w := newReplyWriter(func(ev []byte) error { return l.chunk(ex, ev) })
	if panicked := l.call(r, w); panicked {
		l.settle(ex, w, &failure{status: http.StatusInternalServerError, reason: reasonPanic})
		return
	}
	l.settle(ex, w, nil)
}

// call runs the handler; a panic is contained and reported, as net/http
// does for a connection.
func (l *link) call(r *http.Request, w *replyWriter) (panicked bool) {
	defer func() {
		if v := recover(); v != nil {
			if v != http.ErrAbortHandler {
				l.log.Error("handler panicked on a network request", "panic", v)
			}
			panicked = true
		}
	}()
	l.o.Handler.ServeHTTP(w, r)
	return false
}

// settle sends the exchange's terminal message: nothing for a request
// the coordinator cancelled; connection_lost, on whatever connection
// comes next, for one whose connection ended (w and fail both nil say
// so too); else inference_error or inference_complete on its own
// connection.
func (l *link) settle(ex *exchange, w *replyWriter, fail *failure) {
	if ex.cancelled.Load() {
		l.log.Info("network request cancelled", "request_id", ex.id)
		return
	}
	if ex.sess.ctx.Err() != nil || w == nil && fail == nil {
		l.lost(ex.id)
		return
	}
	if w != nil && fail == nil {
		var err error
		if fail, err = l.finish(ex, w); err != nil {
			l.lost(ex.id)
			return
		}
	}
	if fail != nil {
		l.log.Info("network request failed", "request_id", ex.id, "status", fail.status, "reason", fail.reason)
		if ex.sess.send(errorMsg{Type: typeError, RequestID: ex.id, Error: fail.reason, StatusCode: fail.status}) != nil {
			l.lost(ex.id)
		}
		return
	}
	u := w.t.final()
	done := completeMsg{Type: typeComplete, RequestID: ex.id, Usage: u, ResponseHash: responseHash(ex.id, u.CompletionTokens, w.t.content.String())}
	// Counted before it is sent, so that any heartbeat after
	// inference_complete counts the request.
	l.served.Add(1)
	l.tokens.Add(int64(u.CompletionTokens))
	if ex.sess.send(done) != nil {
		l.served.Add(-1)
		l.tokens.Add(-int64(u.CompletionTokens))
		l.lost(ex.id)
		return
	}
	l.log.Info("network request complete", "request_id", ex.id, "prompt_tokens", u.PromptTokens, "completion_tokens", u.CompletionTokens)
}

// finish ends the handler's answer once the handler has returned: it
// sends what is left to send and says whether the answer failed. An
// error is a chunk that could not be sent.
func (l *link) finish(ex *exchange, w *replyWriter) (*failure, error) {
	err := w.close()
	switch {
	case errors.Is(err, errTooLarge):
		return &failure{status: http.StatusBadGateway, reason: reasonTooLarge}, nil
	case err != nil:
		return nil, err
	case w.t.fail != nil:
		return w.t.fail, nil
	case w.status == 0:
		return &failure{status: http.StatusBadGateway, reason: reasonEmpty}, nil
	case !w.stream:
		// A whole answer is one chunk: the body as the handler wrote it.
		return nil, l.chunk(ex, w.buf)
	}
	return nil, nil
}

// lost reports a request whose connection ended before its terminal
// message went out: it was cancelled, and the coordinator hears so on
// the next connection.
func (l *link) lost(id string) {
	l.log.Warn("network request cancelled: coordinator connection lost", "request_id", id)
	l.deliver(errorMsg{Type: typeError, RequestID: id, Error: reasonConnection, StatusCode: http.StatusBadGateway})
}

// chunk seals one event to the request's sender and sends it on the
// request's connection.
func (l *link) chunk(ex *exchange, ev []byte) error {
	ct, err := seal(ex.shared, ev)
	if err != nil {
		return err
	}
	return ex.sess.send(chunkMsg{Type: typeChunk, RequestID: ex.id, EncryptedData: &sealed{EphemeralPublicKey: l.keys.EncryptionPublicKey(), Ciphertext: ct}})
}

// route returns the handler path and body of a decrypted request: the
// body's "endpoint" names the path (default /v1/chat/completions) and is
// removed from the body, which the handler would refuse with an unknown
// parameter. A body that is not a JSON object goes to the default path
// as it is, for the handler to refuse.
func route(plain []byte) (string, []byte, error) {
	var obj map[string]json.RawMessage
	if json.Unmarshal(plain, &obj) != nil {
		return defaultEndpoint, plain, nil
	}
	raw, ok := obj["endpoint"]
	if !ok {
		return defaultEndpoint, plain, nil
	}
	var ep string
	if err := json.Unmarshal(raw, &ep); err != nil {
		return "", nil, errEndpoint
	}
	if ep == "" {
		ep = defaultEndpoint
	}
	if !strings.HasPrefix(ep, "/v1/") || path.Clean(ep) != ep || strings.ContainsAny(ep, "?#%") {
		return "", nil, errEndpoint
	}
	delete(obj, "endpoint")
	body, err := json.Marshal(obj)
	if err != nil {
		return "", nil, errEndpoint
	}
	return ep, body, nil
}
