package bench

import (
	"encoding/json"
	"time"
)

// FailureKind classifies why a request did not complete.
type FailureKind string

const (
	FailConnect     FailureKind = "connect"          // the connection could not be made (refused, unreachable)
	FailTimeout     FailureKind = "timeout"          // the request outlived its timeout (a stalled server)
	FailHTTPStatus  FailureKind = "http_status"      // a status other than 200
	FailNotStream   FailureKind = "not_event_stream" // 200, but not text/event-stream (HTML, plain JSON)
	FailMalformed   FailureKind = "malformed"        // a line or chunk that is not OpenAI SSE
	FailServerError FailureKind = "server_error"     // the stream carried an error object
	FailTruncated   FailureKind = "truncated"        // the stream broke or ended before [DONE]
	FailNoContent   FailureKind = "no_content"       // [DONE] without any content chunk
	FailTransport   FailureKind = "transport"        // any other transport error
	FailCanceled    FailureKind = "canceled"         // the run itself was canceled
)

// Failure says why a request failed.
type Failure struct {
	Kind   FailureKind `json:"kind"`
	Reason string      `json:"reason"`
}

// TokenSource says where a record's token counts come from.
type TokenSource string

const (
	TokensFromUsage  TokenSource = "usage"  // the stream's final usage
	TokensFromChunks TokenSource = "chunks" // content chunks counted; prompt words estimated
)

// Record is one request as the client saw it. Offsets and durations are
// measured from the moment the request was sent.
type Record struct {
	// Index is the request's place in the level's prompt list.
	Index int
	// Sent is the send time, as an offset from the level's start.
	Sent time.Duration
	// TTFT is the delay to the first content chunk; zero if none came.
	TTFT time.Duration
	// E2E is the delay to the end of the stream, or to the failure.
	E2E time.Duration
	// ITL holds the gaps between consecutive content chunks.
	ITL []time.Duration
	// Chunks counts content chunks.
	Chunks int
	// OutputTokens and PromptTokens come from Source.
	OutputTokens int
	PromptTokens int
	Source       TokenSource
	// Failure is nil for a successful request.
	Failure *Failure
	// Retries counts the earlier attempts whose connection broke before
	// any byte of the response; the record times the last attempt.
	Retries int
}

// OK reports whether the request succeeded.
func (r Record) OK() bool { return r.Failure == nil }

// TPOT is (E2E - TTFT) / (output tokens - 1); ok is false for requests
// with at most one output token, for which it is undefined.
func (r Record) TPOT() (tpot time.Duration, ok bool) {
	if r.OutputTokens <= 1 {
		return 0, false
	}
	return (r.E2E - r.TTFT) / time.Duration(r.OutputTokens-1), true
}

// MarshalJSON writes durations in milliseconds.
func (r Record) MarshalJSON() ([]byte, error) {
	itl := make([]float64, len(r.ITL))
	for i, d := range r.ITL {
		itl[i] = ms(d)
	}
	var tpot *float64
	if d, ok := r.TPOT(); ok && r.OK() {
		v := ms(d)
		tpot = &v
	}
	return json.Marshal(struct {
		Index        int         `json:"index"`
		OK           bool        `json:"ok"`
		Sent         float64     `json:"sent_ms"`
		TTFT         float64     `json:"ttft_ms"`
		TPOT         *float64    `json:"tpot_ms"`
		E2E          float64     `json:"e2e_ms"`
		ITL          []float64   `json:"itl_ms"`
		Chunks       int         `json:"chunks"`
		OutputTokens int         `json:"output_tokens"`
		PromptTokens int         `json:"prompt_tokens"`
		Source       TokenSource `json:"token_source,omitempty"`
		Failure      *Failure    `json:"failure,omitempty"`
		Retries      int         `json:"retries,omitempty"`
	}{r.Index, r.OK(), ms(r.Sent), ms(r.TTFT), tpot, ms(r.E2E), itl, r.Chunks,
		r.OutputTokens, r.PromptTokens, r.Source, r.Failure, r.Retries})
}
