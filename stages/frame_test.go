package stages

import (
	"math"
	"testing"
	"time"

	"github.com/goprovider/provider/engine"
	"github.com/goprovider/provider/stages/stagestest"
)

func frameRequest(ep Endpoint, stream, usage, logprobs bool) *Request {
	return &Request{
		Input:      Input{Endpoint: ep},
		Received:   time.Unix(1700000000, 0),
		Params:     &Params{Model: "stories", Stream: stream, IncludeUsage: usage, Logprobs: logprobs, TopLogprobs: 1},
		Generation: &engine.Generation{ID: "req-7"},
	}
}

// frameDeltas: two content deltas (the second holds a byte token that is
// not a character alone, and an alternative with no probability) and a
// stop.
var frameDeltas = []Delta{
	{Text: "Once", Logprobs: []Logprob{{TokenLogprob: TokenLogprob{Token: " Once", Bytes: []byte(" Once"), Logprob: -0.25}, Top: []TokenLogprob{{Token: " Once", Bytes: []byte(" Once"), Logprob: -0.25}}}}},
	{Text: " 日", Logprobs: []Logprob{
		{TokenLogprob: TokenLogprob{Token: " ", Bytes: []byte(" "), Logprob: -1}, Offset: 4, Top: []TokenLogprob{{Token: " ", Bytes: []byte(" "), Logprob: -1}}},
		{TokenLogprob: TokenLogprob{Token: `bytes:\xe6`, Bytes: []byte{0xe6}, Logprob: -0.5}, Offset: 5, Top: []TokenLogprob{{Token: "x", Bytes: []byte("x"), Logprob: math.Inf(-1)}}},
	}},
	{Finish: "stop", Usage: engine.Usage{PromptTokens: 3, CompletionTokens: 3}},
}

// reasoningDeltas: reasoning, reasoning and content in one delta,
// content, and a stop that counts the reasoning tokens.
var reasoningDeltas = []Delta{
	{Reasoning: "Think."},
	{Reasoning: " Done.", Text: "Once"},
	{Text: " upon"},
	{Finish: "stop", Usage: engine.Usage{PromptTokens: 3, CompletionTokens: 9}, ReasoningTokens: 4},
}

func TestFraming(t *testing.T) {
	tests := []struct {
		name     string
		endpoint Endpoint
		stream   bool
		usage    bool
		logprobs bool
		deltas   []Delta // nil: frameDeltas
	}{
		{"chat_stream_usage_logprobs", Chat, true, true, true, nil},
		{"chat_stream", Chat, true, false, false, nil},
		{"completion_stream_logprobs", Completion, true, false, true, nil},
		{"chat_body_logprobs", Chat, false, false, true, nil},
		{"completion_body_logprobs", Completion, false, false, true, nil},
		{"chat_stream_reasoning", Chat, true, true, false, reasoningDeltas},
		{"chat_body_reasoning", Chat, false, false, false, reasoningDeltas},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			req := frameRequest(tc.endpoint, tc.stream, tc.usage, tc.logprobs)
			deltas := tc.deltas
			if deltas == nil {
				deltas = frameDeltas
			}
			var got []byte
			if tc.stream {
				f := NewFramer(req)
				for _, d := range deltas {
					for _, b := range f.Frames(d) {
						got = append(got, b...)
					}
				}
			} else {
				c := NewCollector(req)
				for _, d := range deltas {
					c.Add(d)
				}
				got = append(c.JSON(), '\n')
			}
			stagestest.Golden(t, tc.name, got)
		})
	}
}

func TestFramingLeavesErrorsToTheCaller(t *testing.T) {
	f := NewFramer(frameRequest(Chat, true, true, false))
	if frames := f.Frames(Delta{Err: engine.ErrStepFailed}); len(frames) != 0 {
		t.Fatalf("frames for an error: %q", frames)
	}
}
