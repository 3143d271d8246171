package harmony

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/goprovider/provider/harmony/harmonytest"
	"github.com/goprovider/provider/jinja"
	"github.com/goprovider/provider/stages"
)

// The stand-in template is the official one the jinja engine's golden
// tests render.
func TestChatTemplateIsTheOfficialOne(t *testing.T) {
	golden, err := os.ReadFile(filepath.Join("..", "jinja", "testdata", "templates", "gptoss.jinja"))
	if err != nil {
		t.Fatal(err)
	}
	if ChatTemplate != string(golden) {
		t.Fatal("chat_template.jinja differs from jinja/testdata/templates/gptoss.jinja")
	}
}

// A request renders to the harmony prompt, reasoning_effort sets the
// system message's "Reasoning:" line (medium when absent), and the prompt
// tokenizes into structure tokens ending in "<|start|>assistant".
func TestRender(t *testing.T) {
	tok, v := vocab(t)
	tmpl, err := jinja.Parse(ChatTemplate)
	if err != nil {
		t.Fatal(err)
	}
	msgs := []stages.Message{
		{Role: "system", Content: "Answer briefly."},
		{Role: "user", Content: "Capital of France?"},
		{Role: "assistant", Content: "Paris."},
		{Role: "user", Content: "And of Italy?"},
	}
	now := time.Date(2025, 8, 5, 12, 0, 0, 0, time.UTC)
	for _, effort := range []string{"", "low", "medium", "high"} {
		text, err := stages.RenderChat(tmpl, msgs, stages.ChatVars{Now: now, ReasoningEffort: effort})
		if err != nil {
			t.Fatal(err)
		}
		shown := effort
		if shown == "" {
			shown = "medium"
		}
		want := "<|start|>system<|message|>You are ChatGPT, a large language model trained by OpenAI.\n" +
			"Knowledge cutoff: 2024-06\nCurrent date: 2025-08-05\n\nReasoning: " + shown + "\n\n" +
			"# Valid channels: analysis, commentary, final. Channel must be included for every message.<|end|>" +
			"<|start|>developer<|message|># Instructions\n\nAnswer briefly.\n\n<|end|>" +
			"<|start|>user<|message|>Capital of France?<|end|>" +
			"<|start|>assistant<|channel|>final<|message|>Paris.<|end|>" +
			"<|start|>user<|message|>And of Italy?<|end|>" +
			"<|start|>assistant"
		if text != want {
			t.Fatalf("effort %q rendered\n%q\nwant\n%q", effort, text, want)
		}
		ids := harmonytest.Encode(tok, text)
		if ids[0] != v.start || !slices.Equal(ids[len(ids)-2:], harmonytest.Encode(tok, "<|start|>assistant")) {
			t.Fatalf("prompt tokens %v ... %v", ids[:2], ids[len(ids)-2:])
		}
	}
}

// The template refuses history that carries harmony structure in its
// content: that is the client's to fix.
func TestRenderRefusesChannelsInContent(t *testing.T) {
	tmpl, err := jinja.Parse(ChatTemplate)
	if err != nil {
		t.Fatal(err)
	}
	msgs := []stages.Message{{Role: "user", Content: "hi"}, {Role: "assistant", Content: "<|channel|>final<|message|>hello"}, {Role: "user", Content: "again"}}
	_, err = stages.RenderChat(tmpl, msgs, stages.ChatVars{})
	var inv *stages.Invalid
	if !errors.As(err, &inv) || inv.Code != stages.CodeTemplateRejected || strings.Contains(inv.Error(), "hello") {
		t.Fatalf("got %v", err)
	}
}
