package jinja

import (
	"fmt"
	"time"
)

// Message is one chat message: role, content and whatever else the
// template reads (tool_calls, reasoning_content, thinking, ...).
type Message = map[string]any

// ChatOptions are the variables transformers' apply_chat_template passes
// next to the messages.
type ChatOptions struct {
	// AddGenerationPrompt asks the template to open an assistant turn.
	AddGenerationPrompt bool
	// BOS and EOS are the tokenizer's special tokens, exposed as bos_token
	// and eos_token. An empty string leaves the variable undefined, as for
	// a tokenizer without that token.
	BOS, EOS string
	// Tools are the tool schemas; nil renders tools as None. Elements may be
	// *Dict or json.RawMessage to keep the schema's key order in tojson.
	Tools []any
	// Documents are retrieval documents; nil renders documents as None.
	Documents []any
	// Extra holds further template variables such as reasoning_effort,
	// enable_thinking or builtin_tools; they override the fields above.
	Extra map[string]any
	// Now is the clock strftime_now reads; nil means time.Now.
	Now func() time.Time
}

// Vars returns the template context for messages under o, exactly the
// variables apply_chat_template renders with.
func (o ChatOptions) Vars(messages []map[string]any) map[string]any {
	msgs := make([]any, len(messages))
	for i, m := range messages {
		msgs[i] = m
	}
	vars := map[string]any{
		"messages":              msgs,
		"add_generation_prompt": o.AddGenerationPrompt,
		"tools":                 nil,
		"documents":             nil,
	}
	if o.Tools != nil {
		vars["tools"] = o.Tools
	}
	if o.Documents != nil {
		vars["documents"] = o.Documents
	}
	if o.BOS != "" {
		vars["bos_token"] = o.BOS
	}
	if o.EOS != "" {
		vars["eos_token"] = o.EOS
	}
	for k, v := range o.Extra {
		vars[k] = v
	}
	return vars
}

// RenderChat renders messages with this chat template.
func (t *Template) RenderChat(messages []map[string]any, o ChatOptions) (string, error) {
	out, err := t.RenderWithClock(o.Vars(messages), o.Now)
	if err != nil {
		return "", fmt.Errorf("render chat template: %w", err)
	}
	return out, nil
}

// RenderChat parses src and renders messages with it; callers rendering
// many conversations should Parse once and use Template.RenderChat.
func RenderChat(src string, messages []map[string]any, o ChatOptions) (string, error) {
	t, err := Parse(src)
	if err != nil {
		return "", fmt.Errorf("parse chat template: %w", err)
	}
	return t.RenderChat(messages, o)
}
