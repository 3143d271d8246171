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

func TestFraming(t *testing.T) {
	tests := []struct {
		name     string
		endpoint Endpoint
		stream   bool
		usage    bool
		logprobs bool
	}{
		{"chat_stream_usage_logprobs", Chat, true, true, true},
		{"chat_stream", Chat, true, false, false},
		{"completion_stream_logprobs", Completion, true, false, true},
		{"chat_body_logprobs", Chat, false, false, true},
		{"completion_body_logprobs", Completion, false, false, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			req := frameRequest(tc.endpoint, tc.stream, tc.usage, tc.logprobs)
			var got []byte
			if tc.stream {
				f := NewFramer(req)
				for _, d := range frameDeltas {
					for _, b := range f.Frames(d) {
						got = append(got, b...)
					}
				}
			} else {
				c := NewCollector(req)
				for _, d := range frameDeltas {
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
