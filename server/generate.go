package server

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"time"

	"github.com/goprovider/provider/engine"
	"github.com/goprovider/provider/graph"
	"github.com/goprovider/provider/stages"
)

// generate serves one of the generation endpoints.
func (s *Server) generate(ep stages.Endpoint) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		x := &exchange{s: s, w: w, r: r, endpoint: ep}
		x.serve()
	}
}

// exchange is one generation request being served.
type exchange struct {
	s        *Server
	w        http.ResponseWriter
	r        *http.Request
	endpoint stages.Endpoint

	req       *stages.Request
	t         timing
	last      time.Time
	finish    string
	cached    int
	reasoning int
	gone      bool // the client went away or stopped accepting writes
}

func (x *exchange) serve() {
	s := x.s
	if s.draining.Load() {
		x.fail(engine.ErrDraining)
		return
	}
	// Before the body is read: its share of the body budget, then a place
	// in the intake (graph/doc.go). In that order, a large body waits for
	// the budget without holding a place, so small requests keep passing.
	giveBack, err := s.bodies.take(x.r.Context(), s.bodySize(x.r))
	if err != nil {
		x.fail(err)
		return
	}
	defer giveBack()
	release, err := s.takeIntake(x.r.Context())
	if err != nil {
		x.fail(err)
		return
	}
	defer release()
	body, err := s.readBody(x.w, x.r)
	if err != nil {
		var tooLarge *http.MaxBytesError
		switch {
		case errors.Is(err, graph.ErrBusy):
			// No share of the body budget within the wait: 429.
		case errors.As(err, &tooLarge):
			err = errTooLarge
		case x.r.Context().Err() != nil:
			err = x.r.Context().Err()
		default:
			err = fmt.Errorf("%w: %w", errBadBody, err)
		}
		x.fail(err)
		return
	}
	ctx, cancel := context.WithCancel(x.r.Context())
	defer cancel()
	if s.slots != nil {
		// Load the model on demand and hold it while the response runs. A
		// body without a model name is left to the pipeline to refuse.
		if name := modelName(body); name != "" {
			release, err := s.slots.Acquire(ctx, name)
			if err != nil {
				x.fail(err)
				return
			}
			defer release()
		}
	}
	// A large body runs through the stages in the large lane, so that
	// small requests always find a stage worker (bodyBudget).
	leave, err := s.bodies.enter(ctx, len(body))
	if err != nil {
		x.fail(err)
		return
	}
	st, err := s.graph.Submit(ctx, stages.Input{Endpoint: x.endpoint, Body: body, CallerID: x.r.Header.Get("X-Request-ID")})
	leave()
	// Admitted or refused, the request has left the intake.
	body = nil
	release()
	giveBack()
	if err != nil {
		x.fail(err)
		return
	}
	x.req = st.Request
	s.metrics.ignore(x.req.Params.Ignored)
	x.t.model = x.req.Model.Name
	x.last = x.req.Received
	x.w.Header().Set("X-Request-ID", x.req.ID())
	if x.req.Params.Stream {
		x.stream(st.Deltas, cancel)
	} else {
		x.collect(st.Deltas)
	}
}

// FinishAbort is the finish_reason of a stream the server cut before its
// generation finished (shutdown at the drain deadline).
const FinishAbort = "abort"

// stream writes an SSE response. Headers wait for the first Delta, so an
// error before any output still gets its status.
func (x *exchange) stream(deltas <-chan stages.Delta, cancel context.CancelFunc) {
	f := stages.NewFramer(x.req)
	rc := http.NewResponseController(x.w)
	started := false
	var final *stages.Delta
	for d := range deltas {
		x.observe(d)
		if x.gone {
			continue
		}
		if d.Err != nil && !started {
			final = &d
			continue
		}
		if !started {
			h := x.w.Header()
			h.Set("Content-Type", "text/event-stream")
			h.Set("Cache-Control", "no-cache")
			h.Set("X-Accel-Buffering", "no")
			x.w.WriteHeader(http.StatusOK)
			started = true
		}
		frames := f.Frames(d)
		switch {
		case d.Err != nil && (errors.Is(d.Err, engine.ErrShutdown) || errors.Is(d.Err, engine.ErrDraining)):
			// Cut at the drain deadline: a proper end, finish_reason
			// "abort" (the generation did not finish; retry elsewhere).
			frames = f.Cut(d, FinishAbort)
		case d.Err != nil:
			// A failure: the error, and no [DONE] a client could take for
			// a finished answer.
			frames = append(frames, stages.SSE(classify(d.Err).body()))
		}
		if err := x.write(rc, frames); err != nil {
			// The client stopped reading: cancel the row, keep draining.
			x.gone = true
			cancel()
		}
		if d.Final() {
			final = &d
		}
	}
	x.end(final, started)
}

// writeProgress bounds how long one write of a stream may block: a client
// that stops reading loses its stream (and its row) after it.
const writeProgress = 30 * time.Second

func (x *exchange) write(rc *http.ResponseController, frames [][]byte) error {
	// Not every ResponseWriter has deadlines (test recorders); the
	// server's connections do.
	_ = rc.SetWriteDeadline(time.Now().Add(writeProgress))
	for _, b := range frames {
		if _, err := x.w.Write(b); err != nil {
			return err
		}
	}
	return rc.Flush()
}

// collect writes a whole response once the generation ended.
func (x *exchange) collect(deltas <-chan stages.Delta) {
	c := stages.NewCollector(x.req)
	var final *stages.Delta
	for d := range deltas {
		x.observe(d)
		c.Add(d)
		if d.Final() {
			final = &d
		}
	}
	if final != nil && final.Err == nil {
		writeJSON(x.w, http.StatusOK, c.JSON())
	}
	x.end(final, false)
}

// observe times a Delta for the metrics. Reasoning is output: a model
// that reasons first streams its first tokens as reasoning.
func (x *exchange) observe(d stages.Delta) {
	now := x.s.clk.Now()
	if d.Text != "" || d.Reasoning != "" || len(d.Logprobs) > 0 {
		if !x.t.first {
			x.t.first, x.t.ttft = true, now.Sub(x.req.Received)
		} else {
			x.t.gaps = append(x.t.gaps, now.Sub(x.last))
		}
		x.last = now
	}
	if d.Final() {
		x.t.ended, x.t.e2e = true, now.Sub(x.req.Received)
		x.finish = d.Finish
		x.t.prompt, x.t.output = d.Usage.PromptTokens, d.Usage.CompletionTokens
		x.cached, x.reasoning = d.Usage.CachedTokens, d.ReasoningTokens
	}
}

// end settles the outcome of an admitted request: a normal finish, an
// error (written here unless the stream already started), or a client
// that went away.
func (x *exchange) end(final *stages.Delta, started bool) {
	var err error
	switch {
	case x.gone:
		err = context.Canceled
	case final == nil:
		// The token path only ends without a final Delta for a request
		// whose context ended.
		if err = x.r.Context().Err(); err == nil {
			err = stages.ErrStreamEnded
		}
	case final.Err != nil:
		err = final.Err
	}
	if err == nil {
		x.log(http.StatusOK, outcome{})
		return
	}
	o := classify(err)
	if o.class == classCancelled {
		x.t.ended = false
	} else if !started {
		writeError(x.w, o)
	}
	x.log(o.status, o)
}

// fail answers a request that never reached the engine.
func (x *exchange) fail(err error) {
	o := classify(err)
	if o.class != classCancelled {
		writeError(x.w, o)
	}
	x.log(o.status, o)
}

// log records the request in the metrics and the log, through the
// allowlist.
func (x *exchange) log(status int, o outcome) {
	s := x.s
	s.metrics.finish(x.endpoint.String(), status, o.class, x.t)
	s.metrics.record(s.clk.Now(), x.endpoint.String(), status, o, x.t)
	attrs := []slog.Attr{
		slog.String("endpoint", x.endpoint.String()),
		slog.Int("status", status),
	}
	if x.req != nil {
		attrs = append(attrs,
			slog.String("request_id", x.req.ID()),
			slog.String("model", x.req.Model.Name),
			slog.Bool("stream", x.req.Params.Stream),
			slog.Int("prompt_tokens", x.t.prompt),
			slog.Int("completion_tokens", x.t.output),
			slog.Int("cached_tokens", x.cached),
			slog.Int("reasoning_tokens", x.reasoning),
		)
		if x.t.first {
			attrs = append(attrs, slog.Int64("ttft_ms", x.t.ttft.Milliseconds()))
		}
		if x.t.ended {
			attrs = append(attrs, slog.Int64("e2e_ms", x.t.e2e.Milliseconds()))
		}
		if x.finish != "" {
			attrs = append(attrs, slog.String("finish_reason", x.finish))
		}
		if len(x.req.Params.Ignored) > 0 {
			attrs = append(attrs, slog.Any("ignored_fields", loggableIgnored(x.req.Params.Ignored)))
		}
	}
	level := slog.LevelInfo
	if o.class != "" {
		attrs = append(attrs, slog.String("class", o.class), slog.String("code", o.code))
		if o.param != "" {
			attrs = append(attrs, slog.String("param", o.param))
		}
		if o.class == classCancelled {
			attrs = append(attrs, slog.Bool("disconnected", true))
		}
		if o.provider() {
			level = slog.LevelError
		} else if o.class != classCancelled {
			level = slog.LevelWarn
		}
	}
	s.log.LogAttrs(x.r.Context(), level, "request", attrs...)
}

// modelName is the top-level "model" string of a JSON object body, read
// token by token so that a large body whose model comes first is not
// parsed twice; "" when there is none (the pipeline then refuses the body
// with its own error).
func modelName(body []byte) string {
	dec := json.NewDecoder(bytes.NewReader(body))
	if t, err := dec.Token(); err != nil || t != json.Delim('{') {
		return ""
	}
	for dec.More() {
		key, err := dec.Token()
		if err != nil {
			return ""
		}
		if key == "model" {
			var name string
			if dec.Decode(&name) != nil {
				return ""
			}
			return name
		}
		var skip json.RawMessage
		if dec.Decode(&skip) != nil {
			return ""
		}
	}
	return ""
}
