package stages

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/goprovider/provider/engine"
	"github.com/goprovider/provider/sample"
	"github.com/goprovider/provider/stages/stagestest"
)

// parsed runs Parse on body, failing the test on error.
func parsed(t *testing.T, cat Catalog, ep Endpoint, body string) *Request {
	t.Helper()
	req := &Request{Input: Input{Endpoint: ep, Body: []byte(body)}, Received: time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC), MintedID: "minted"}
	if err := (Parse{Models: cat}).Apply(context.Background(), req); err != nil {
		t.Fatal(err)
	}
	return req
}

func TestTemplate(t *testing.T) {
	cat := testCatalog(t)
	bos := stagestest.Tokenizer(t).BOS()
	tests := []struct {
		name     string
		endpoint Endpoint
		body     string
		prompt   string  // rendered prompt
		first    []int32 // expected leading tokens
		code     Code
	}{
		{
			name: "template writes BOS: not doubled", endpoint: Chat,
			body:   `{"model":"stories","messages":[{"role":"user","content":"Once upon a time"}]}`,
			prompt: "<s><|user|>Once upon a time\n<|assistant|>", first: []int32{bos},
		},
		{
			name: "template without BOS: vocabulary adds it", endpoint: Chat,
			body:   `{"model":"strict","messages":[{"role":"user","content":"Lily"}]}`,
			prompt: "user: Lily\n", first: []int32{bos},
		},
		{
			name: "template raises", endpoint: Chat,
			body: `{"model":"strict","messages":[{"role":"assistant","content":"hi"}]}`,
			code: CodeTemplateRejected,
		},
		{
			name: "no template", endpoint: Chat,
			body: `{"model":"raw","messages":[{"role":"user","content":"hi"}]}`,
			code: CodeNoChatTemplate,
		},
		{
			name: "completion text gets BOS", endpoint: Completion,
			body:   `{"model":"stories","prompt":"Once upon a time"}`,
			prompt: "Once upon a time", first: []int32{bos, 403},
		},
		{
			name: "completion tokens as given", endpoint: Completion,
			body:  `{"model":"stories","prompt":[403,407]}`,
			first: []int32{403, 407},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			req := parsed(t, cat, tc.endpoint, tc.body)
			err := Template{}.Apply(context.Background(), req)
			if tc.code != "" {
				var inv *Invalid
				if !errors.As(err, &inv) || inv.Code != tc.code {
					t.Fatalf("err = %v, want code %s", err, tc.code)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if req.Prompt != tc.prompt {
				t.Fatalf("prompt %q, want %q", req.Prompt, tc.prompt)
			}
			if !slices.Equal(req.Tokens[:len(tc.first)], tc.first) {
				t.Fatalf("tokens %v, want prefix %v", req.Tokens, tc.first)
			}
			if len(req.Tokens) > 1 && req.Tokens[0] == bos && req.Tokens[1] == bos {
				t.Fatalf("double BOS: %v", req.Tokens)
			}
		})
	}
}

func TestMediaIsRefused(t *testing.T) {
	req := parsed(t, testCatalog(t), Chat, `{"model":"stories","messages":[{"role":"user","content":[{"type":"image_url","image_url":{"url":"data:,"}}]}]}`)
	var inv *Invalid
	if err := (MediaDecode{}).Apply(context.Background(), req); !errors.As(err, &inv) || inv.Code != CodeUnsupportedMedia {
		t.Fatalf("err = %v, want unsupported_media", err)
	}
}

func TestAdmit(t *testing.T) {
	cat := testCatalog(t)
	long := strings.Repeat("x", MaxIDLength+1)
	tests := []struct {
		name     string
		callerID string
		body     string
		want     engine.Generation // Prompt is not compared
		code     Code
		param    string
	}{
		{
			name:     "caller id, default bound clamped to the context",
			callerID: "req-1", body: `{"model":"stories","prompt":[1,2,3,4]}`,
			want: engine.Generation{ID: "req-1", MaxTokens: 512 - 4, Sampling: sample.Params{TopP: 1}, TopLogprobs: -1},
		},
		{
			name: "control character: minted id", callerID: "a\nb",
			body: `{"model":"stories","prompt":[1],"max_tokens":7}`,
			want: engine.Generation{ID: "minted", MaxTokens: 7, Sampling: sample.Params{TopP: 1}, TopLogprobs: -1},
		},
		{
			name: "overlong id: minted id", callerID: long,
			body: `{"model":"stories","prompt":[1],"max_tokens":0,"logprobs":0}`,
			want: engine.Generation{ID: "minted", MaxTokens: 0, Sampling: sample.Params{TopP: 1}, TopLogprobs: 0},
		},
		{
			name: "unknown context: default 8192",
			body: `{"model":"raw","prompt":[1]}`,
			want: engine.Generation{ID: "minted", MaxTokens: DefaultMaxTokens, Sampling: sample.Params{TopP: 1}, TopLogprobs: -1},
		},
		{
			name: "explicit bound past the context",
			body: `{"model":"stories","prompt":[1,2],"max_tokens":511}`,
			code: CodeContextLength, param: "max_tokens",
		},
		{
			name: "prompt fills the context",
			body: `{"model":"stories","prompt":[` + strings.TrimSuffix(strings.Repeat("5,", 512), ",") + `]}`,
			code: CodeContextLength, param: "prompt",
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			req := parsed(t, cat, Completion, tc.body)
			req.Input.CallerID = tc.callerID
			if err := (Template{}).Apply(context.Background(), req); err != nil {
				t.Fatal(err)
			}
			err := Admit{}.Apply(context.Background(), req)
			if tc.code != "" {
				var inv *Invalid
				if !errors.As(err, &inv) || inv.Code != tc.code || inv.Param != tc.param {
					t.Fatalf("err = %v, want (%s, %s)", err, tc.code, tc.param)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			g := *req.Generation
			if !slices.Equal(g.Prompt, req.Tokens) {
				t.Fatal("prompt is not the tokens")
			}
			g.Prompt = nil
			if g.ID != tc.want.ID || g.MaxTokens != tc.want.MaxTokens || g.TopLogprobs != tc.want.TopLogprobs || g.Sampling.TopP != tc.want.Sampling.TopP {
				t.Fatalf("got %+v, want %+v", g, tc.want)
			}
		})
	}
}

func TestValidID(t *testing.T) {
	for id, want := range map[string]bool{
		"":                       false,
		"abc-123":                true,
		"tab\there":              false,
		"\x7f":                   false,
		"\xff":                   false,
		"日本":                     true,
		strings.Repeat("日", 256): true,
		strings.Repeat("a", 257): false,
	} {
		if got := ValidID(id); got != want {
			t.Errorf("ValidID(%q) = %v", id, got)
		}
	}
}
