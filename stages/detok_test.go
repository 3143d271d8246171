package stages

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"testing/synctest"

	"github.com/goprovider/provider/engine"
	"github.com/goprovider/provider/sample"
	"github.com/goprovider/provider/stages/stagestest"
)

var story, storyText = stagestest.Story, stagestest.StoryText

// oneByOne scripts an engine stream: each token in its own delta, then the
// given end.
func oneByOne(tokens []int32, end engine.Event) []engine.Event {
	var evs []engine.Event
	for _, id := range tokens {
		evs = append(evs, engine.Event{Kind: engine.EventDelta, Tokens: []int32{id}})
	}
	return append(evs, end)
}

func finished(reason engine.FinishReason, completion int) engine.Event {
	return engine.Event{Kind: engine.EventFinished, Reason: reason, Usage: engine.Usage{PromptTokens: 3, CompletionTokens: completion}}
}

// detokRequest is an admitted completion request with the given stops.
func detokRequest(t *testing.T, stops []string, logprobs bool) *Request {
	t.Helper()
	p := &Params{Model: "stories", Stop: stops, Logprobs: logprobs, TopLogprobs: 2, Sampling: sample.Params{TopP: 1}}
	return &Request{Input: Input{Endpoint: Completion}, Params: p, Model: testCatalog(t)["stories"], Tokens: []int32{1, 403, 407}}
}

func feedAll(req *Request, evs []engine.Event) []Delta {
	d := newDetok(req)
	var out []Delta
	for _, ev := range evs {
		if d.done {
			break
		}
		out = append(out, d.feed(ev)...)
	}
	return out
}

func TestDetokStopStrings(t *testing.T) {
	tests := []struct {
		name   string
		stops  []string
		events []engine.Event
		text   string
		finish string
		tokens int // completion tokens in the final usage
	}{
		{"no stop", nil, oneByOne(story, finished(engine.FinishLength, 15)), storyText, "length", 15},
		{"stop split over three tokens", []string{"girl"}, oneByOne(story, finished(engine.FinishLength, 15)), "Once upon a time, there was a little ", "stop", 12},
		{"stop across a word boundary", []string{"time, th"}, oneByOne(story, finished(engine.FinishLength, 15)), "Once upon a ", "stop", 6},
		{"earliest stop wins", []string{"Lily", "upon"}, oneByOne(story, finished(engine.FinishLength, 15)), "Once ", "stop", 2},
		{"stop is the last token", []string{"."}, oneByOne(story, finished(engine.FinishLength, 15)), "Once upon a time, there was a little girl named Lily", "stop", 15},
		{"held prefix released at the end", []string{"Lily. The"}, oneByOne(story, finished(engine.FinishLength, 15)), storyText, "length", 15},
		{"held prefix released when it diverges", []string{"Lily!"}, oneByOne(story, finished(engine.FinishStop, 15)), storyText, "stop", 15},
		{"all tokens in one event", []string{"girl"}, []engine.Event{{Kind: engine.EventDelta, Tokens: story}, finished(engine.FinishLength, 15)}, "Once upon a time, there was a little ", "stop", 12},
		{"EOS is never text", nil, oneByOne(append(slices.Clone(story[:4]), 2), finished(engine.FinishStop, 4)), "Once upon a time", "stop", 4},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			out := feedAll(detokRequest(t, tc.stops, false), tc.events)
			var text strings.Builder
			for i, d := range out {
				if d.Final() != (i == len(out)-1) {
					t.Fatalf("delta %d final=%v of %d", i, d.Final(), len(out))
				}
				for _, s := range tc.stops {
					if strings.Contains(d.Text, s) {
						t.Fatalf("delta %d %q contains stop %q", i, d.Text, s)
					}
				}
				text.WriteString(d.Text)
			}
			last := out[len(out)-1]
			if text.String() != tc.text || last.Finish != tc.finish || last.Usage.CompletionTokens != tc.tokens {
				t.Fatalf("got (%q, %s, %d), want (%q, %s, %d)", text.String(), last.Finish, last.Usage.CompletionTokens, tc.text, tc.finish, tc.tokens)
			}
		})
	}
}

func TestDetokHoldsBackOnlyWhatCouldMatch(t *testing.T) {
	out := feedAll(detokRequest(t, []string{"girl"}, false), oneByOne(story, finished(engine.FinishLength, 15)))
	var got []string
	for _, d := range out {
		got = append(got, d.Text)
	}
	// " g" releases its space at once and holds "g"; "ir" says nothing;
	// "l" completes the stop.
	want := []string{"Once", " upon", " a", " time", ",", " there", " was", " a", " little", " ", ""}
	if !slices.Equal(got, want) {
		t.Fatalf("deltas %q, want %q", got, want)
	}
}

func TestDetokSplitCharacter(t *testing.T) {
	// "日" is three byte tokens; no delta may carry a broken character.
	evs := oneByOne([]int32{403, 233, 154, 168}, finished(engine.FinishLength, 4))
	out := feedAll(detokRequest(t, []string{"本"}, false), evs)
	var got []string
	for _, d := range out {
		got = append(got, d.Text)
	}
	if want := []string{"Once", "日", ""}; !slices.Equal(got, want) {
		t.Fatalf("deltas %q, want %q", got, want)
	}
}

func TestDetokLogprobs(t *testing.T) {
	var evs []engine.Event
	for _, id := range story {
		lp := engine.Logprob{Token: id, Logprob: -0.5, Top: []sample.TokenLogprob{{Token: id, Logprob: -0.5}, {Token: 233, Logprob: -3}}}
		evs = append(evs, engine.Event{Kind: engine.EventDelta, Tokens: []int32{id}, Logprobs: []engine.Logprob{lp}})
	}
	evs = append(evs, finished(engine.FinishLength, 15))
	out := feedAll(detokRequest(t, []string{"girl"}, true), evs)
	var lps []Logprob
	for _, d := range out {
		lps = append(lps, d.Logprobs...)
	}
	// Entries come with their text; " g", "ir" and "l" produced the stop
	// string and are dropped with it.
	if len(lps) != 9 {
		t.Fatalf("%d entries, want 9", len(lps))
	}
	first, last := lps[0], lps[8]
	if first.Token != " Once" || string(first.Bytes) != " Once" || first.Offset != 0 || last.Token != " little" || last.Offset != len("Once upon a time, there was a") {
		t.Fatalf("entries %+v ... %+v", first, last)
	}
	if alt := first.Top[1]; alt.Token != `bytes:\xe6` || !slices.Equal(alt.Bytes, []byte{0xe6}) {
		t.Fatalf("byte-token alternative %+v", alt)
	}
}

func TestDetokEnds(t *testing.T) {
	stepFailed := engine.Event{Kind: engine.EventError, Reason: engine.FinishError, Err: engine.ErrStepFailed}
	out := feedAll(detokRequest(t, nil, false), oneByOne(story[:2], stepFailed))
	last := out[len(out)-1]
	if len(out) != 3 || !errors.Is(last.Err, engine.ErrStepFailed) {
		t.Fatalf("deltas %+v", out)
	}
}

func TestDetokenizerRun(t *testing.T) {
	tests := []struct {
		name      string
		stops     []string
		events    []engine.Event
		hold      bool // the script waits for cancellation after its events
		cancelled bool
		final     func(Delta) bool
	}{
		{"stop string cancels the row", []string{"girl"}, oneByOne(story, finished(engine.FinishLength, 15))[:14], true, true,
			func(d Delta) bool { return d.Finish == "stop" }},
		{"natural end", nil, oneByOne(story, finished(engine.FinishLength, 15)), false, false,
			func(d Delta) bool { return d.Finish == "length" }},
		{"stream closed without an end", nil, oneByOne(story[:3], engine.Event{Kind: engine.EventDelta})[:3], false, false,
			func(d Delta) bool { return errors.Is(d.Err, ErrStreamEnded) }},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				req := detokRequest(t, tc.stops, false)
				fake := &stagestest.Engine{Script: func(engine.Generation) stagestest.Play {
					return stagestest.Play{Events: tc.events, Hold: tc.hold}
				}}
				rowCtx, stop := context.WithCancel(context.Background())
				events, _ := fake.Submit(rowCtx, engine.Generation{ID: "r"})
				adm := &Admitted{Events: events, Stop: stop}
				var log Log
				var got []Delta
				for d := range (Detokenizer{Buffer: 1, Recorder: &log}).Run(context.Background(), req, adm) {
					got = append(got, d)
				}
				if c := fake.Cancelled("r"); c != tc.cancelled {
					t.Fatalf("engine saw cancellation %v, want %v", c, tc.cancelled)
				}
				if last := got[len(got)-1]; !tc.final(last) {
					t.Fatalf("final delta %+v", last)
				}
				recs := log.Records()
				if len(recs) != 1 {
					t.Fatalf("%d records", len(recs))
				}
				again, err := ReplayTokens(recs[0], testCatalog(t))
				if err != nil {
					t.Fatal(err)
				}
				if !again.Equal(recs[0]) {
					t.Fatal("replayed token path differs from the record")
				}
			})
		})
	}
}

func TestDetokenizerGivesUpOnAGoneReader(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		req := detokRequest(t, nil, false)
		fake := &stagestest.Engine{Script: func(engine.Generation) stagestest.Play {
			return stagestest.Play{Events: oneByOne(story, finished(engine.FinishLength, 15)), Hold: true}
		}}
		ctx, hangUp := context.WithCancel(context.Background())
		rowCtx, stop := context.WithCancel(ctx)
		events, _ := fake.Submit(rowCtx, engine.Generation{ID: "r"})
		deltas := (Detokenizer{Buffer: 1}).Run(ctx, req, &Admitted{Events: events, Stop: stop})
		<-deltas
		hangUp() // the reader leaves without draining
		synctest.Wait()
		if !fake.Cancelled("r") {
			t.Fatal("the engine did not see the cancellation")
		}
		n := 0
		for range deltas {
			n++
		}
		if n > 1 {
			t.Fatalf("%d deltas delivered after the reader left", n)
		}
	})
}

// reasoningParser is a scripted OutputParser: every token's text is
// reasoning.
type reasoningParser struct{ plain OutputParser }

func (p reasoningParser) Add(id int32) Output {
	o := p.plain.Add(id)
	return Output{Kind: ReasoningToken, Reasoning: o.Content}
}

func (p reasoningParser) Flush() Output { return Output{Reasoning: p.plain.Flush().Content} }

// A model's output parser serves chat requests; completions stay raw.
func TestDetokOutputParser(t *testing.T) {
	for _, ep := range []Endpoint{Chat, Completion} {
		req := detokRequest(t, nil, false)
		m := *req.Model
		m.NewOutputParser = func() OutputParser { return reasoningParser{plainOutput{dec: m.Tokenizer.NewStreamDecoder()}} }
		req.Model, req.Input.Endpoint = &m, ep
		var text, reasoning string
		out := feedAll(req, oneByOne(story[:4], finished(engine.FinishStop, 4)))
		for _, d := range out {
			text += d.Text
			reasoning += d.Reasoning
		}
		last := out[len(out)-1]
		switch {
		case ep == Chat && (text != "" || reasoning != "Once upon a time" || last.ReasoningTokens != 4):
			t.Fatalf("chat: text %q reasoning %q, %d reasoning tokens", text, reasoning, last.ReasoningTokens)
		case ep == Completion && (text != "Once upon a time" || reasoning != "" || last.ReasoningTokens != 0):
			t.Fatalf("completion: text %q reasoning %q, %d reasoning tokens", text, reasoning, last.ReasoningTokens)
		}
	}
}
