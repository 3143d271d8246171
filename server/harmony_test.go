package server

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/goprovider/provider/engine"
	"github.com/goprovider/provider/family"
	"github.com/goprovider/provider/harmony/harmonytest"
	"github.com/goprovider/provider/stages/stagestest"
)

// No gpt-oss weights run here yet, so these tests serve a gpt-oss model
// whose engine is a scripted fake: every generation streams
// harmonytest.Reply, encoded with the real o200k_harmony tokenizer, and
// stops on <|return|> the way the engine does (the EOS token is consumed,
// not streamed). Everything else (template, parser, framing) is real.
func harmonyHarness(t *testing.T) (*harness, *stagestest.Engine, []int32) {
	t.Helper()
	tok := harmonytest.Tokenizer(t)
	ids := harmonytest.Encode(tok, harmonytest.Reply)
	ids = ids[:len(ids)-1] // <|return|>
	fake := &stagestest.Engine{Script: func(g engine.Generation) stagestest.Play {
		return stagestest.Play{Events: stagestest.Tokens(g, ids, engine.FinishStop)}
	}}
	h := newHarness(t, Options{}, storyEngine())
	err := h.Register(Model{Name: "gpt-oss", Architecture: family.GPTOSS.Arch, Tokenizer: tok,
		EOS: tok.EOSSet(), ContextLength: 4096, Generator: fake})
	if err != nil {
		t.Fatal(err)
	}
	return h, fake, ids
}

type harmonyUsage struct {
	CompletionTokens        int `json:"completion_tokens"`
	CompletionTokensDetails struct {
		ReasoningTokens *int `json:"reasoning_tokens"`
	} `json:"completion_tokens_details"`
}

// A gpt-oss chat response carries the analysis channel as
// reasoning_content, the final channel as content, and counts the
// reasoning tokens; reasoning_effort reaches the prompt.
func TestHarmonyChat(t *testing.T) {
	h, fake, ids := harmonyHarness(t)
	reasoned := len(harmonytest.Encode(harmonytest.Tokenizer(t), harmonytest.ReplyReasoning))

	status, body := h.post(t, "/v1/chat/completions",
		`{"model":"gpt-oss","messages":[{"role":"user","content":"Capital of France?"}],"reasoning_effort":"high"}`)
	var r struct {
		Choices []struct {
			Message struct {
				Content          string  `json:"content"`
				ReasoningContent *string `json:"reasoning_content"`
			} `json:"message"`
			FinishReason string `json:"finish_reason"`
		} `json:"choices"`
		Usage harmonyUsage `json:"usage"`
	}
	if err := json.Unmarshal(body, &r); err != nil || status != 200 {
		t.Fatalf("%d %s", status, body)
	}
	msg, u := r.Choices[0].Message, r.Usage
	if msg.Content != harmonytest.ReplyContent || msg.ReasoningContent == nil || *msg.ReasoningContent != harmonytest.ReplyReasoning ||
		r.Choices[0].FinishReason != "stop" || u.CompletionTokens != len(ids) || deref(u.CompletionTokensDetails.ReasoningTokens) != reasoned {
		t.Fatalf("response %s", body)
	}
	prompt := harmonytest.Tokenizer(t).Decode(fake.Submitted()[0].Prompt)
	if !strings.Contains(prompt, "\nReasoning: high\n") {
		t.Fatalf("prompt %q does not ask for high reasoning", prompt)
	}

	status, body = h.post(t, "/v1/chat/completions",
		`{"model":"gpt-oss","messages":[{"role":"user","content":"x"}],"stream":true,"stream_options":{"include_usage":true}}`)
	events := sseEvents(t, body)
	if status != 200 || events[len(events)-1] != "[DONE]" {
		t.Fatalf("%d %s", status, body)
	}
	var content, reasoning strings.Builder
	var usage *harmonyUsage
	for _, ev := range events[:len(events)-1] {
		var c struct {
			Choices []struct {
				Delta struct {
					Content          *string `json:"content"`
					ReasoningContent *string `json:"reasoning_content"`
				} `json:"delta"`
			} `json:"choices"`
			Usage *harmonyUsage `json:"usage"`
		}
		if err := json.Unmarshal([]byte(ev), &c); err != nil {
			t.Fatalf("chunk %s: %v", ev, err)
		}
		for _, ch := range c.Choices {
			if ch.Delta.Content != nil {
				content.WriteString(*ch.Delta.Content)
			}
			if ch.Delta.ReasoningContent != nil {
				reasoning.WriteString(*ch.Delta.ReasoningContent)
			}
		}
		if c.Usage != nil {
			usage = c.Usage
		}
	}
	if content.String() != harmonytest.ReplyContent || reasoning.String() != harmonytest.ReplyReasoning ||
		usage == nil || deref(usage.CompletionTokensDetails.ReasoningTokens) != reasoned {
		t.Fatalf("streamed content %q reasoning %q usage %+v", content.String(), reasoning.String(), usage)
	}
	prompt = harmonytest.Tokenizer(t).Decode(fake.Submitted()[1].Prompt)
	if !strings.Contains(prompt, "\nReasoning: medium\n") {
		t.Fatalf("prompt %q does not default to medium reasoning", prompt)
	}
}

// reasoning_effort is validated for every model and changes nothing for
// a model that does not reason: no reasoning_content, 0 reasoning tokens.
func TestReasoningEffort(t *testing.T) {
	h, _, _ := harmonyHarness(t)
	for _, model := range []string{"gpt-oss", "stories"} {
		status, body := h.post(t, "/v1/chat/completions", `{"model":"`+model+`","messages":[{"role":"user","content":"x"}],"reasoning_effort":"extreme"}`)
		if e := decodeError(t, body); status != 400 || e.Error.Code != "invalid_value" || e.Error.Param == nil || *e.Error.Param != "reasoning_effort" {
			t.Fatalf("%s: %d %s", model, status, body)
		}
	}
	status, body := h.post(t, "/v1/chat/completions", `{"model":"stories","messages":[{"role":"user","content":"x"}],"reasoning_effort":"low"}`)
	if status != 200 || strings.Contains(string(body), "reasoning_content") || !strings.Contains(string(body), `"completion_tokens_details":{"reasoning_tokens":0}`) {
		t.Fatalf("%d %s", status, body)
	}
	// A response message sent back as history keeps its reasoning_content.
	status, body = h.post(t, "/v1/chat/completions", `{"model":"gpt-oss","messages":[{"role":"user","content":"x"},`+
		`{"role":"assistant","content":"y","reasoning_content":"z"},{"role":"user","content":"again"}]}`)
	if status != 200 {
		t.Fatalf("%d %s", status, body)
	}
}

// A gpt-oss model needs harmony's vocabulary.
func TestHarmonyNeedsItsVocabulary(t *testing.T) {
	h := newHarness(t, Options{}, nil)
	tok := stagestest.Tokenizer(t)
	err := h.Register(Model{Name: "gpt-oss", Architecture: family.GPTOSS.Arch, Tokenizer: tok, EOS: tok.EOSSet(), Generator: storyEngine()})
	if err == nil {
		t.Fatal("registered gpt-oss over the stories260K vocabulary")
	}
}

// deref reads an optional count: -1 when absent.
func deref(n *int) int {
	if n == nil {
		return -1
	}
	return *n
}
