package graph

import (
	"bytes"
	"reflect"
	"testing"
	"time"

	"github.com/goprovider/provider/engine"
	"github.com/goprovider/provider/stages"
)

// traceInputs is a multi-request run: streamed chat with usage and a
// stop string, a completion with logprobs, a request the engine refuses,
// one that fails mid-stream, a bad request and an unknown model.
var traceInputs = []Exchange{
	{Input: stages.Input{Endpoint: stages.Chat, CallerID: "chat-stop", Body: []byte(`{"model":"stories","messages":[{"role":"user","content":"Tell a story"}],"stream":true,"stream_options":{"include_usage":true},"stop":["girl"]}`)}},
	{Input: stages.Input{Endpoint: stages.Completion, Body: []byte(`{"model":"stories","prompt":"Once upon","max_tokens":4,"logprobs":1}`)}, MintedID: "minted-2"},
	{Input: stages.Input{Endpoint: stages.Chat, CallerID: "refused", Body: []byte(`{"model":"stories","messages":[{"role":"user","content":"hi"}]}`)}},
	{Input: stages.Input{Endpoint: stages.Completion, CallerID: "broken", Body: []byte(`{"model":"stories","prompt":"Lily","stream":true}`)}},
	{Input: stages.Input{Endpoint: stages.Chat, Body: []byte(`{"model":"stories","messages":[{"role":"user","content":"hi"}],"n":17}`)}, MintedID: "minted-5"},
	{Input: stages.Input{Endpoint: stages.Chat, Body: []byte(`{"model":"other","messages":[{"role":"user","content":"hi"}]}`)}, MintedID: "minted-6"},
}

// traceScript is what the fake engine does for each request of the trace.
func traceScript(g engine.Generation) play {
	switch g.ID {
	case "chat-stop":
		return play{Events: tokens(g, story, 0), Hold: true}
	case "minted-2":
		return play{Events: tokens(g, story[:4], engine.FinishLength)}
	case "refused":
		return play{Refuse: engine.ErrQueueFull}
	case "broken":
		return append3(tokens(g, story[:3], 0), engine.Event{Kind: engine.EventError, Reason: engine.FinishError, Err: engine.ErrStepFailed})
	}
	return play{Refuse: engine.ErrStepFailed}
}

func append3(evs []engine.Event, end engine.Event) play { return play{Events: append(evs, end)} }

// record runs the trace inputs against the scripted fake engine.
func record(t *testing.T) Trace {
	t.Helper()
	h := NewHarness(Options{})
	defer h.Close()
	if err := h.Register(Model{Model: storiesModel(t), Generator: scripted(traceScript)}); err != nil {
		t.Fatal(err)
	}
	var tr Trace
	start := time.Date(2025, 6, 1, 12, 0, 0, 0, time.UTC)
	for i, ex := range traceInputs {
		ex.Received = start.Add(time.Duration(i) * 1500 * time.Millisecond)
		tr.Exchanges = append(tr.Exchanges, h.Run(ex))
	}
	tr.Steps = h.Steps()
	return tr
}

func TestReplayTrace(t *testing.T) {
	recorded := record(t)
	wantErr := []string{"", "", "submit: engine: waiting queue full", "engine: generation step failed", "parse: invalid request: invalid_value (n)", "parse: unknown model"}
	for i, ex := range recorded.Exchanges {
		if ex.Err != wantErr[i] {
			t.Fatalf("exchange %d: err %q, want %q", i, ex.Err, wantErr[i])
		}
	}
	if out := recorded.Exchanges[0].Output; string(out[len(out)-1]) != "data: [DONE]\n\n" || len(out) != 14 {
		t.Fatalf("streamed chat: %d events %q", len(out), out)
	}

	var buf bytes.Buffer
	if err := EncodeTrace(&buf, recorded); err != nil {
		t.Fatal(err)
	}
	encoded := bytes.Clone(buf.Bytes())
	trace, err := DecodeTrace(&buf)
	if err != nil {
		t.Fatal(err)
	}
	models := []stages.Model{storiesModel(t)}
	for run := range 3 {
		replayed, err := Replay(trace, models, Options{})
		if err != nil {
			t.Fatal(err)
		}
		var again bytes.Buffer
		if err := EncodeTrace(&again, replayed); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(again.Bytes(), encoded) {
			for i := range replayed.Exchanges {
				if !reflect.DeepEqual(replayed.Exchanges[i], trace.Exchanges[i]) {
					t.Errorf("run %d: exchange %d differs:\n got %+v\nwant %+v", run, i, replayed.Exchanges[i], trace.Exchanges[i])
				}
			}
			t.Fatalf("run %d: replayed trace differs (%d vs %d steps)", run, len(replayed.Steps), len(trace.Steps))
		}
	}

	// Every recorded step also replays alone through its own stage.
	cat := catalogOf(models)
	byName := map[string]stages.Stage{}
	for _, s := range Pipeline(cat) {
		byName[s.Name()] = s
	}
	for i, r := range trace.Steps {
		var again stages.Record
		if r.Stage == stages.TokenStage {
			again, err = stages.ReplayTokens(r, cat)
		} else {
			again, err = stages.Replay(byName[r.Stage], r, cat)
		}
		if err != nil {
			t.Fatal(err)
		}
		if !again.Equal(r) {
			t.Fatalf("step %d (%s) replays differently", i, r.Stage)
		}
	}
}

type catalogOf []stages.Model

func (c catalogOf) Lookup(name string) (*stages.Model, bool) {
	for i := range c {
		if c[i].Name == name {
			return &c[i], true
		}
	}
	return nil, false
}
