package stages

import (
	"bytes"
	"context"
	"testing"
	"time"
)

func TestStagesReplay(t *testing.T) {
	cat := testCatalog(t)
	pipeline := []Stage{Parse{Models: cat}, MediaDecode{}, Template{}, VisionTower{}, SpanCarve{}, Admit{}}
	bodies := []struct {
		endpoint Endpoint
		body     string
	}{
		{Chat, `{"model":"stories","messages":[{"role":"user","content":"Once upon a time"}],"stream":true,"stop":["girl"],"seed":3}`},
		{Completion, `{"model":"stories","prompt":"Lily","max_tokens":4,"logprobs":2}`},
		{Chat, `{"model":"strict","messages":[{"role":"assistant","content":"no"}]}`},
		{Chat, `{"model":"stories","n":17,"messages":[{"role":"user","content":"x"}]}`},
		{Completion, `{"model":"stories","n":2,"prompt":["Lily","Tom"],"seed":5,"max_tokens":3}`},
	}
	var buf bytes.Buffer
	trace := NewTrace(&buf)
	var log Log
	for i, b := range bodies {
		env := &Envelope{Ctx: context.Background(), Req: Request{
			Input:    Input{Endpoint: b.endpoint, Body: []byte(b.body), CallerID: "id"},
			Received: time.Unix(int64(1700000000+i), 0),
			MintedID: "m",
		}}
		for _, s := range pipeline {
			Run(s, env, &log)
		}
	}
	for _, r := range log.Records() {
		trace.Record(r)
	}
	if trace.Err() != nil {
		t.Fatal(trace.Err())
	}
	recs, err := ReadTrace(&buf)
	if err != nil {
		t.Fatal(err)
	}
	// Request 1, 2 and 5 pass all six stages, 3 fails in template (the
	// third), 4 in parse.
	if len(recs) != 6+6+3+1+6 {
		t.Fatalf("%d records", len(recs))
	}
	byName := map[string]Stage{}
	for _, s := range pipeline {
		byName[s.Name()] = s
	}
	for i, r := range recs {
		for range 2 {
			again, err := Replay(byName[r.Stage], r, cat)
			if err != nil {
				t.Fatal(err)
			}
			if !again.Equal(r) {
				t.Fatalf("record %d (%s) replays differently: err %q vs %q", i, r.Stage, again.Err, r.Err)
			}
		}
	}
}

func TestRunSkips(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	var log Log
	env := Run(Template{}, &Envelope{Ctx: ctx}, &log)
	if env.Err != context.Canceled || len(log.Records()) != 0 {
		t.Fatalf("ran on a cancelled envelope: %v", env.Err)
	}
}
