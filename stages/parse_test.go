package stages

import (
	"context"
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/goprovider/provider/sample"
	"github.com/goprovider/provider/toolcall"
)

func TestParseRejects(t *testing.T) {
	cat := testCatalog(t)
	tests := []struct {
		name     string
		endpoint Endpoint
		body     string
		code     Code // "" with unknown set: ErrUnknownModel
		param    string
		unknown  bool
	}{
		{"empty body", Chat, ``, CodeInvalidJSON, "", false},
		{"truncated JSON", Chat, `{"model":"stories","messages":[`, CodeInvalidJSON, "", false},
		{"garbage", Chat, `hello`, CodeInvalidJSON, "", false},
		{"not an object", Chat, `[1,2]`, CodeInvalidType, "", false},
		{"null body", Chat, `null`, CodeInvalidType, "", false},
		{"missing model", Chat, `{"messages":[{"role":"user","content":"hi"}]}`, CodeMissing, "model", false},
		{"model wrong type", Chat, `{"model":7,"messages":[]}`, CodeInvalidType, "model", false},
		{"unknown model", Chat, `{"model":"gpt-secret-name","messages":[{"role":"user","content":"hi"}]}`, "", "", true},
		{"prompt_cache_key wrong type", Chat, `{"model":"stories","messages":[{"role":"user","content":"hi"}],"prompt_cache_key":5}`, CodeInvalidType, "prompt_cache_key", false},
		{"missing messages", Chat, `{"model":"stories"}`, CodeMissing, "messages", false},
		{"empty messages", Chat, `{"model":"stories","messages":[]}`, CodeInvalidValue, "messages", false},
		{"messages wrong type", Chat, `{"model":"stories","messages":"hi"}`, CodeInvalidType, "messages", false},
		{"message not an object", Chat, `{"model":"stories","messages":["hi"]}`, CodeInvalidType, "messages", false},
		{"bad role", Chat, `{"model":"stories","messages":[{"role":"wizard","content":"hi"}]}`, CodeInvalidValue, "messages", false},
		{"tool result of no call", Chat, `{"model":"stories","messages":[{"role":"tool","content":"hi","tool_call_id":"x"}]}`, CodeInvalidValue, "messages", false},
		{"user without content", Chat, `{"model":"stories","messages":[{"role":"user"}]}`, CodeMissing, "messages", false},
		{"content wrong type", Chat, `{"model":"stories","messages":[{"role":"user","content":5}]}`, CodeInvalidType, "messages", false},
		{"unknown message field", Chat, `{"model":"stories","messages":[{"role":"user","content":"hi","mood":"x"}]}`, CodeUnknownParameter, "messages", false},
		{"unknown content part field", Chat, `{"model":"stories","messages":[{"role":"user","content":[{"type":"text","text":"a","secret":1}]}]}`, CodeUnknownParameter, "messages", false},
		{"audio part", Chat, `{"model":"stories","messages":[{"role":"user","content":[{"type":"input_audio","input_audio":{}}]}]}`, CodeUnsupportedMedia, "messages", false},
		{"image on system turn", Chat, `{"model":"stories","messages":[{"role":"system","content":[{"type":"image_url","image_url":{"url":"data:,"}}]}]}`, CodeInvalidValue, "messages", false},
		{"negative max_tokens", Chat, `{"model":"stories","messages":[{"role":"user","content":"hi"}],"max_tokens":-1}`, CodeInvalidValue, "max_tokens", false},
		{"huge max_tokens", Chat, `{"model":"stories","messages":[{"role":"user","content":"hi"}],"max_tokens":1000000000}`, CodeInvalidValue, "max_tokens", false},
		{"overflowing max_tokens", Chat, `{"model":"stories","messages":[{"role":"user","content":"hi"}],"max_tokens":1e30}`, CodeInvalidType, "max_tokens", false},
		{"fractional max_tokens", Chat, `{"model":"stories","messages":[{"role":"user","content":"hi"}],"max_tokens":1.5}`, CodeInvalidType, "max_tokens", false},
		{"max_tokens as string", Chat, `{"model":"stories","messages":[{"role":"user","content":"hi"}],"max_tokens":"5"}`, CodeInvalidType, "max_tokens", false},
		{"conflicting bounds", Chat, `{"model":"stories","messages":[{"role":"user","content":"hi"}],"max_tokens":5,"max_completion_tokens":6}`, CodeInvalidValue, "max_completion_tokens", false},
		{"negative temperature", Chat, `{"model":"stories","messages":[{"role":"user","content":"hi"}],"temperature":-0.5}`, CodeInvalidValue, "temperature", false},
		{"top_p above 1", Chat, `{"model":"stories","messages":[{"role":"user","content":"hi"}],"top_p":1.5}`, CodeInvalidValue, "top_p", false},
		{"top_k below -1", Chat, `{"model":"stories","messages":[{"role":"user","content":"hi"}],"top_k":-2}`, CodeInvalidValue, "top_k", false},
		{"seed as string", Chat, `{"model":"stories","messages":[{"role":"user","content":"hi"}],"seed":"7"}`, CodeInvalidType, "seed", false},
		{"fractional seed", Chat, `{"model":"stories","messages":[{"role":"user","content":"hi"}],"seed":1.5}`, CodeInvalidValue, "seed", false},
		{"five stops", Chat, `{"model":"stories","messages":[{"role":"user","content":"hi"}],"stop":["a","b","c","d","e"]}`, CodeInvalidValue, "stop", false},
		{"empty stop", Chat, `{"model":"stories","messages":[{"role":"user","content":"hi"}],"stop":""}`, CodeInvalidValue, "stop", false},
		{"stop wrong type", Chat, `{"model":"stories","messages":[{"role":"user","content":"hi"}],"stop":[1]}`, CodeInvalidType, "stop", false},
		{"n=0", Chat, `{"model":"stories","messages":[{"role":"user","content":"hi"}],"n":0}`, CodeInvalidValue, "n", false},
		{"n=17", Chat, `{"model":"stories","messages":[{"role":"user","content":"hi"}],"n":17}`, CodeInvalidValue, "n", false},
		{"n as string", Chat, `{"model":"stories","messages":[{"role":"user","content":"hi"}],"n":"2"}`, CodeInvalidType, "n", false},
		{"top_logprobs without logprobs", Chat, `{"model":"stories","messages":[{"role":"user","content":"hi"}],"top_logprobs":2}`, CodeInvalidValue, "top_logprobs", false},
		{"top_logprobs 21", Chat, `{"model":"stories","messages":[{"role":"user","content":"hi"}],"logprobs":true,"top_logprobs":21}`, CodeInvalidValue, "top_logprobs", false},
		{"tool_choice required without tools", Chat, `{"model":"stories","messages":[{"role":"user","content":"hi"}],"tool_choice":"required"}`, CodeInvalidValue, "tool_choice", false},
		{"response_format of an unknown type", Chat, `{"model":"stories","messages":[{"role":"user","content":"hi"}],"response_format":{"type":"xml"}}`, CodeInvalidValue, "response_format", false},
		{"presence_penalty above 2", Chat, `{"model":"stories","messages":[{"role":"user","content":"hi"}],"presence_penalty":2.5}`, CodeInvalidValue, "presence_penalty", false},
		{"frequency_penalty below -2", Chat, `{"model":"stories","messages":[{"role":"user","content":"hi"}],"frequency_penalty":-3}`, CodeInvalidValue, "frequency_penalty", false},
		{"frequency_penalty as string", Chat, `{"model":"stories","messages":[{"role":"user","content":"hi"}],"frequency_penalty":"1"}`, CodeInvalidType, "frequency_penalty", false},
		{"repetition_penalty 0", Completion, `{"model":"stories","prompt":"hi","repetition_penalty":0}`, CodeInvalidValue, "repetition_penalty", false},
		{"repetition_penalty 11", Completion, `{"model":"stories","prompt":"hi","repetition_penalty":11}`, CodeInvalidValue, "repetition_penalty", false},
		{"min_p above 1", Chat, `{"model":"stories","messages":[{"role":"user","content":"hi"}],"min_p":1.5}`, CodeInvalidValue, "min_p", false},
		{"logit_bias above 100", Chat, `{"model":"stories","messages":[{"role":"user","content":"hi"}],"logit_bias":{"5":101}}`, CodeInvalidValue, "logit_bias", false},
		{"logit_bias outside vocabulary", Chat, `{"model":"stories","messages":[{"role":"user","content":"hi"}],"logit_bias":{"5000":1}}`, CodeInvalidValue, "logit_bias", false},
		{"logit_bias key not a token id", Chat, `{"model":"stories","messages":[{"role":"user","content":"hi"}],"logit_bias":{"hello":1}}`, CodeInvalidValue, "logit_bias", false},
		{"logit_bias names a token twice", Chat, `{"model":"stories","messages":[{"role":"user","content":"hi"}],"logit_bias":{"7":1,"07":2}}`, CodeInvalidValue, "logit_bias", false},
		{"logit_bias value as string", Chat, `{"model":"stories","messages":[{"role":"user","content":"hi"}],"logit_bias":{"7":"1"}}`, CodeInvalidType, "logit_bias", false},
		{"unknown reasoning_effort", Chat, `{"model":"stories","messages":[{"role":"user","content":"hi"}],"reasoning_effort":"max"}`, CodeInvalidValue, "reasoning_effort", false},
		{"reasoning_effort wrong type", Chat, `{"model":"stories","messages":[{"role":"user","content":"hi"}],"reasoning_effort":1}`, CodeInvalidType, "reasoning_effort", false},
		{"reasoning_content on a user turn", Chat, `{"model":"stories","messages":[{"role":"user","content":"hi","reasoning_content":"x"}]}`, CodeInvalidValue, "messages", false},
		{"stream wrong type", Chat, `{"model":"stories","messages":[{"role":"user","content":"hi"}],"stream":"yes"}`, CodeInvalidType, "stream", false},
		{"unknown stream option", Chat, `{"model":"stories","messages":[{"role":"user","content":"hi"}],"stream":true,"stream_options":{"x":1}}`, CodeUnknownParameter, "stream_options", false},
		{"missing prompt", Completion, `{"model":"stories"}`, CodeMissing, "prompt", false},
		{"prompt wrong type", Completion, `{"model":"stories","prompt":{"text":"hi"}}`, CodeInvalidType, "prompt", false},
		{"prompts of two kinds", Completion, `{"model":"stories","prompt":["a",[1,2]]}`, CodeInvalidType, "prompt", false},
		{"a token list then a string", Completion, `{"model":"stories","prompt":[[1,2],"a"]}`, CodeInvalidType, "prompt", false},
		{"seventeen prompts", Completion, `{"model":"stories","prompt":["a","a","a","a","a","a","a","a","a","a","a","a","a","a","a","a","a"]}`, CodeInvalidValue, "prompt", false},
		{"empty second token prompt", Completion, `{"model":"stories","prompt":[[1],[]]}`, CodeInvalidValue, "prompt", false},
		{"second prompt outside vocabulary", Completion, `{"model":"stories","prompt":[[1],[9999]]}`, CodeInvalidValue, "prompt", false},
		{"token outside vocabulary", Completion, `{"model":"stories","prompt":[1,5000]}`, CodeInvalidValue, "prompt", false},
		{"empty token prompt", Completion, `{"model":"stories","prompt":[]}`, CodeInvalidValue, "prompt", false},
		{"echo", Completion, `{"model":"stories","prompt":"hi","echo":true}`, CodeUnsupported, "echo", false},
		{"best_of", Completion, `{"model":"stories","prompt":"hi","best_of":3}`, CodeUnsupported, "best_of", false},
		{"best_of above n", Completion, `{"model":"stories","prompt":"hi","n":2,"best_of":3}`, CodeUnsupported, "best_of", false},
		{"completion logprobs bool", Completion, `{"model":"stories","prompt":"hi","logprobs":true}`, CodeInvalidType, "logprobs", false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			req := &Request{Input: Input{Endpoint: tc.endpoint, Body: []byte(tc.body)}}
			err := Parse{Models: cat}.Apply(context.Background(), req)
			if tc.unknown {
				if !errors.Is(err, ErrUnknownModel) {
					t.Fatalf("err = %v, want ErrUnknownModel", err)
				}
				return
			}
			var inv *Invalid
			if !errors.As(err, &inv) || !errors.Is(err, ErrInvalid) {
				t.Fatalf("err = %v, want *Invalid", err)
			}
			if inv.Code != tc.code || inv.Param != tc.param {
				t.Fatalf("got (%s, %q), want (%s, %q)", inv.Code, inv.Param, tc.code, tc.param)
			}
			if strings.Contains(err.Error(), "secret") || strings.Contains(err.Error(), "wizard") {
				t.Fatalf("error text echoes the request: %v", err)
			}
		})
	}
}

func TestParseAccepts(t *testing.T) {
	cat := testCatalog(t)
	seven := uint64(7)
	minusOne := ^uint64(0)
	tests := []struct {
		name     string
		endpoint Endpoint
		body     string
		want     Params
	}{
		{
			"minimal chat is greedy", Chat,
			`{"model":"stories","messages":[{"role":"user","content":"hi"}]}`,
			Params{Model: "stories", Messages: []Message{{Role: "user", Content: "hi"}}, Sampling: sample.Params{TopP: 1}},
		},
		{
			"everything we honour", Chat,
			`{"model":"stories","messages":[{"role":"developer","content":"be brief"},{"role":"user","content":[{"type":"text","text":"a"},{"type":"text","text":"b"}],"name":"ann"},{"role":"assistant","content":null,"refusal":null}],
			  "max_completion_tokens":9,"temperature":0.7,"top_p":0.9,"top_k":-1,"seed":7,"stop":"END","logprobs":true,"top_logprobs":3,
			  "stream":true,"stream_options":{"include_usage":true},"n":1,"user":"u1","frequency_penalty":0,"logit_bias":{},
			  "response_format":{"type":"text"},"tools":[],"tool_choice":"none","parallel_tool_calls":true,"store":false,"metadata":{"k":"v"},"service_tier":"auto","modalities":["text"],
			  "reasoning_effort":"high"}`,
			Params{
				Model:     "stories",
				Messages:  []Message{{Role: "system", Content: "be brief"}, {Role: "user", Content: "ab", Name: "ann", Parts: []Part{{Kind: "text", Text: "a"}, {Kind: "text", Text: "b"}}}, {Role: "assistant"}},
				MaxTokens: 9, MaxTokensSet: true,
				Sampling: sample.Params{Temperature: 0.7, TopP: 0.9, Seed: &seven},
				Stop:     []string{"END"}, Logprobs: true, TopLogprobs: 3, Stream: true, IncludeUsage: true, User: "u1",
				ReasoningEffort: "high",
				ToolChoice:      toolcall.Choice{Mode: toolcall.NoCalls},
			},
		},
		{
			"reasoning sent back as history is dropped", Chat,
			`{"model":"stories","messages":[{"role":"user","content":"hi"},{"role":"assistant","content":"yes","reasoning_content":"think"},{"role":"user","content":"ok"}],"reasoning_effort":null}`,
			Params{Model: "stories", Messages: []Message{{Role: "user", Content: "hi"}, {Role: "assistant", Content: "yes"}, {Role: "user", Content: "ok"}}, Sampling: sample.Params{TopP: 1}},
		},
		{
			"image part is set aside", Chat,
			`{"model":"stories","messages":[{"role":"user","content":[{"type":"text","text":"see"},{"type":"image_url","image_url":{"url":"data:image/png;base64,AA=="}}]}]}`,
			Params{Model: "stories", Messages: []Message{{Role: "user", Content: "see", Parts: []Part{{Kind: "text", Text: "see"}, {Kind: "image"}}}}, Media: []Media{{Kind: "image", URL: "data:image/png;base64,AA=="}}, Sampling: sample.Params{TopP: 1}},
		},
		{
			"text completion", Completion,
			`{"model":"stories","prompt":["Once"],"max_tokens":0,"seed":-1,"stop":["a","b"],"logprobs":2,"echo":false,"best_of":1,"suffix":null}`,
			Params{Model: "stories", Prompt: "Once", MaxTokensSet: true, Sampling: sample.Params{TopP: 1, Seed: &minusOne}, Stop: []string{"a", "b"}, Logprobs: true, TopLogprobs: 2},
		},
		{
			"ignore_eos", Completion,
			`{"model":"stories","prompt":"Once","ignore_eos":true}`,
			Params{Model: "stories", Prompt: "Once", Sampling: sample.Params{TopP: 1}, IgnoreEOS: true},
		},
		{
			"prompt_cache_key", Chat,
			`{"model":"stories","messages":[{"role":"user","content":"hi"}],"prompt_cache_key":"tenant-7","user":"u2"}`,
			Params{Model: "stories", Messages: []Message{{Role: "user", Content: "hi"}}, Sampling: sample.Params{TopP: 1}, PromptCacheKey: "tenant-7", User: "u2"},
		},
		{
			"token completion", Completion,
			`{"model":"stories","prompt":[[1,403,407]]}`,
			Params{Model: "stories", PromptTokens: []int32{1, 403, 407}, PromptIsTokens: true, Sampling: sample.Params{TopP: 1}},
		},
		{
			"unknown fields are ignored and named", Chat,
			`{"model":"stories","messages":[{"role":"user","content":"hi"}],"secret_sauce":1,"chat_template_kwargs":{"x":true},"prompt":"x"}`,
			Params{Model: "stories", Messages: []Message{{Role: "user", Content: "hi"}}, Sampling: sample.Params{TopP: 1},
				Ignored: []string{"chat_template_kwargs", "prompt", "secret_sauce"}},
		},
		{
			"chat-only fields on completions are ignored", Completion,
			`{"model":"stories","prompt":"hi","reasoning_effort":"low","messages":[]}`,
			Params{Model: "stories", Prompt: "hi", Sampling: sample.Params{TopP: 1}, Ignored: []string{"messages", "reasoning_effort"}},
		},
		{
			"sampling knobs", Completion,
			`{"model":"stories","prompt":"hi","temperature":0.9,"top_k":40,"min_p":0.05,"frequency_penalty":-2,"presence_penalty":1.5,
			  "repetition_penalty":1.1,"logit_bias":{"403":-100,"7":2.5,"+9":100},"n":4,"best_of":4}`,
			Params{Model: "stories", Prompt: "hi", N: 4, Sampling: sample.Params{Temperature: 0.9, TopP: 1, TopK: 40, MinP: 0.05,
				FrequencyPenalty: -2, PresencePenalty: 1.5, RepetitionPenalty: 1.1,
				LogitBias: []sample.Bias{{Token: 7, Value: 2.5}, {Token: 9, Value: 100}, {Token: 403, Value: -100}}}},
		},
		{
			"max_completion_tokens alone", Chat,
			`{"model":"stories","messages":[{"role":"user","content":"hi"}],"max_completion_tokens":5}`,
			Params{Model: "stories", Messages: []Message{{Role: "user", Content: "hi"}}, MaxTokens: 5, MaxTokensSet: true, Sampling: sample.Params{TopP: 1}},
		},
		{
			"max_completion_tokens equal to max_tokens", Chat,
			`{"model":"stories","messages":[{"role":"user","content":"hi"}],"max_tokens":5,"max_completion_tokens":5}`,
			Params{Model: "stories", Messages: []Message{{Role: "user", Content: "hi"}}, MaxTokens: 5, MaxTokensSet: true, Sampling: sample.Params{TopP: 1}},
		},
		{
			"text prompts", Completion,
			`{"model":"stories","prompt":["Once","Lily","Tom"],"n":2}`,
			Params{Model: "stories", Prompt: "Once", MorePrompts: []string{"Lily", "Tom"}, N: 2, Sampling: sample.Params{TopP: 1}},
		},
		{
			"token prompts", Completion,
			`{"model":"stories","prompt":[[1,403],[5]]}`,
			Params{Model: "stories", PromptTokens: []int32{1, 403}, MorePromptTokens: [][]int32{{5}}, PromptIsTokens: true, Sampling: sample.Params{TopP: 1}},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			req := &Request{Input: Input{Endpoint: tc.endpoint, Body: []byte(tc.body)}}
			if err := (Parse{Models: cat}).Apply(context.Background(), req); err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(*req.Params, tc.want) {
				t.Fatalf("params\n got %+v\nwant %+v", *req.Params, tc.want)
			}
			if req.Model != cat["stories"] || req.Input.Body != nil {
				t.Fatal("model not resolved or body kept")
			}
		})
	}
}
