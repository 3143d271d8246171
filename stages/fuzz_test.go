package stages

import (
	"context"
	"errors"
	"testing"
	"time"
)

// fuzzStages runs a body through Parse and Template (the stages that read
// what a client sends) against the test catalog. Nothing may panic, and a
// request either passes or fails with a client error (*Invalid or an
// unknown model): input never makes a provider error.
func fuzzStages(t *testing.T, cat catalog, ep Endpoint, body []byte) {
	env := &Envelope{Ctx: context.Background(), Req: Request{Input: Input{Endpoint: ep, Body: body}, Received: time.Unix(0, 0), MintedID: "fuzz"}}
	for _, s := range []Stage{Parse{Models: cat}, MediaDecode{}, Template{}} {
		env = Run(s, env, nil)
	}
	var inv *Invalid
	if env.Err != nil && !errors.As(env.Err, &inv) && !errors.Is(env.Err, ErrUnknownModel) {
		t.Fatalf("body %q: a provider error from client input: %v", body, env.Err)
	}
}

var fuzzChatSeeds = []string{
	`{"model":"stories","messages":[{"role":"user","content":"hi"}]}`,
	`{"model":"stories","messages":[{"role":"system","content":"Be brief."},{"role":"user","content":[{"type":"text","text":"hi"}]}],"max_tokens":5,"temperature":0.7,"top_p":0.9,"stop":["\n"]}`,
	`{"model":"strict","messages":[{"role":"assistant","content":"x"}]}`,
	`{"model":"stories","messages":[{"role":"user","content":"Weather?"}],"tools":[{"type":"function","function":{"name":"get_weather","parameters":{"type":"object"}}}],"tool_choice":"auto"}`,
	`{"model":"stories","messages":[{"role":"user","content":"hi"}],"response_format":{"type":"json_schema","json_schema":{"name":"x","schema":{"type":"object"}}}}`,
	`{"model":"stories","messages":[{"role":"user","content":"hi"}],"logit_bias":{"5":-100},"n":2,"seed":1,"stream":true,"stream_options":{"include_usage":true}}`,
	`{"model":"raw","messages":[]}`, `{}`, `[]`, `null`, `{"model":`,
}

var fuzzCompletionSeeds = []string{
	`{"model":"stories","prompt":"Once upon a time"}`,
	`{"model":"stories","prompt":["a","b"],"max_tokens":3,"logprobs":2,"echo":false}`,
	`{"model":"stories","prompt":[1,2,3],"n":3,"temperature":1,"seed":5}`,
	`{"model":"stories","prompt":[[1,2],[3]],"stop":"x","frequency_penalty":1,"presence_penalty":-1,"repetition_penalty":1.1,"min_p":0.1,"top_k":5}`,
	`{"model":"raw","prompt":"","max_tokens":0}`, `{"model":"stories","prompt":"` + "\u0000\uffff" + `"}`,
}

func FuzzChat(f *testing.F) {
	for _, s := range fuzzChatSeeds {
		f.Add([]byte(s))
	}
	cat := testCatalog(f)
	f.Fuzz(func(t *testing.T, body []byte) { fuzzStages(t, cat, Chat, body) })
}

func FuzzCompletion(f *testing.F) {
	for _, s := range fuzzCompletionSeeds {
		f.Add([]byte(s))
	}
	cat := testCatalog(f)
	f.Fuzz(func(t *testing.T, body []byte) { fuzzStages(t, cat, Completion, body) })
}
