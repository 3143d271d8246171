package server

import (
	"encoding/json"
	"strings"
	"testing"
)

func TestTokenizerEndpoints(t *testing.T) {
	h := newHarness(t, Options{}, storyEngine())
	tests := []struct {
		name string
		path string
		body string
		want string // the JSON answer
	}{
		{"tokenize", "/tokenize", `{"model":"stories","content":"Once upon a time"}`, `{"tokens":[403,407,261,378]}`},
		{"tokenize with BOS", "/tokenize", `{"model":"stories","content":"Once upon a time","add_special":true}`, `{"tokens":[1,403,407,261,378]}`},
		{"special text is the token", "/tokenize", `{"model":"stories","content":"<s>"}`, `{"tokens":[1]}`},
		{"empty content", "/tokenize", `{"model":"stories","content":""}`, `{"tokens":[]}`},
		{"pieces", "/tokenize", `{"model":"stories","content":"Once upon","with_pieces":true}`, `{"tokens":[{"id":403,"piece":" Once"},{"id":407,"piece":" upon"}]}`},
		{"detokenize", "/detokenize", `{"model":"stories","tokens":[1,403,407,261,378]}`, `{"content":"Once upon a time"}`},
		{"detokenize nothing", "/detokenize", `{"model":"stories","tokens":[]}`, `{"content":""}`},
		{"apply-template", "/apply-template", `{"model":"stories","messages":[{"role":"system","content":"Be kind."},{"role":"user","content":"hi"}]}`,
			`{"prompt":"\u003cs\u003e\u003c|system|\u003eBe kind.\n\u003c|user|\u003ehi\n\u003c|assistant|\u003e"}`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			status, body := h.post(t, tc.path, tc.body)
			if status != 200 || string(body) != tc.want {
				t.Fatalf("status %d body %s, want %s", status, body, tc.want)
			}
		})
	}
	// Special-token text stays text without parse_special.
	_, body := h.post(t, "/tokenize", `{"model":"stories","content":"<s>","parse_special":false}`)
	var got struct{ Tokens []int32 }
	if err := json.Unmarshal(body, &got); err != nil || len(got.Tokens) < 2 {
		t.Fatalf("parse_special false: %s", body)
	}
	// What /apply-template renders is what the chat endpoint tokenizes.
	_, body = h.post(t, "/apply-template", `{"model":"stories","messages":[{"role":"user","content":"Once upon"}]}`)
	var tmpl struct{ Prompt string }
	if err := json.Unmarshal(body, &tmpl); err != nil {
		t.Fatal(err)
	}
	b, _ := json.Marshal(map[string]any{"model": "stories", "content": tmpl.Prompt})
	_, body = h.post(t, "/tokenize", string(b))
	if err := json.Unmarshal(body, &got); err != nil {
		t.Fatal(err)
	}
	b, _ = json.Marshal(map[string]any{"model": "stories", "tokens": got.Tokens})
	if _, body = h.post(t, "/detokenize", string(b)); !strings.Contains(string(body), "\\u003c|user|\\u003eOnce upon") {
		t.Fatalf("round trip: %s", body)
	}
}

func TestTokenizerEndpointErrors(t *testing.T) {
	h := newHarness(t, Options{}, storyEngine())
	tests := []struct {
		name   string
		path   string
		body   string
		status int
		code   string
		param  string
	}{
		{"invalid JSON", "/tokenize", `{"model":`, 400, "invalid_json", ""},
		{"not an object", "/tokenize", `[1]`, 400, "invalid_type", ""},
		{"missing model", "/tokenize", `{"content":"x"}`, 400, "missing_required_parameter", "model"},
		{"unknown model", "/tokenize", `{"model":"SECRET","content":"x"}`, 404, "model_not_found", ""},
		{"missing content", "/tokenize", `{"model":"stories"}`, 400, "missing_required_parameter", "content"},
		{"content wrong type", "/tokenize", `{"model":"stories","content":5}`, 400, "invalid_type", "content"},
		{"missing tokens", "/detokenize", `{"model":"stories"}`, 400, "missing_required_parameter", "tokens"},
		{"token outside the vocabulary", "/detokenize", `{"model":"stories","tokens":[1,512]}`, 400, "invalid_value", "tokens"},
		{"fractional token", "/detokenize", `{"model":"stories","tokens":[1.5]}`, 400, "invalid_type", "tokens"},
		{"template without messages", "/apply-template", `{"model":"stories"}`, 400, "missing_required_parameter", "messages"},
		{"template without model", "/apply-template", `{"messages":[{"role":"user","content":"x"}]}`, 400, "missing_required_parameter", "model"},
		{"template of an unknown model", "/apply-template", `{"model":"SECRET","messages":[{"role":"user","content":"x"}]}`, 404, "model_not_found", ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			status, body := h.post(t, tc.path, tc.body)
			if status != tc.status {
				t.Fatalf("status %d, want %d: %s", status, tc.status, body)
			}
			e := decodeError(t, body)
			if e.Error.Code != tc.code || (e.Error.Param == nil) != (tc.param == "") || (e.Error.Param != nil && *e.Error.Param != tc.param) {
				t.Fatalf("error %+v, want code %s param %q", e.Error, tc.code, tc.param)
			}
			if strings.Contains(string(body), "SECRET") {
				t.Fatalf("error echoes the request: %s", body)
			}
		})
	}
	_, metrics := h.get(t, "/metrics")
	for _, want := range []string{`provider_requests_total{endpoint="tokenize",status="400"} 5`, `provider_requests_total{endpoint="detokenize",status="400"} 3`} {
		if !strings.Contains(string(metrics), want) {
			t.Errorf("metrics lack %s", want)
		}
	}
}
