package toolcall

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
)

// ErrUnconstrainable: the syntax writes arguments in a notation that is
// not JSON (Gemma 4's), or has no calls at all, so no JSON schema can
// describe a call in it.
var ErrUnconstrainable = errors.New("toolcall: the syntax's calls cannot be described by a JSON schema")

// Forced is what a required or named tool_choice lets the model write: a
// call, one of Calls; when Parallel, one or more, Separator between them.
// A constrained sampler enforces it from the first generated token.
type Forced struct {
	Calls     []CallText
	Parallel  bool
	Separator string
}

// CallText is the text of a call of one tool: Prefix, then a JSON value
// valid against Schema (the tool's parameters), then Suffix. Prefix and
// Suffix are literal and may hold the text of control tokens (harmony's
// <|channel|>, <|constrain|>, <|message|>, <|call|>), which a constraint
// must match as those tokens.
type CallText struct {
	Tool   string
	Prefix string
	Schema json.RawMessage
	Suffix string
}

// Constrain returns what tool_choice c forces a model of syntax s to write
// when offered tools; nil for auto and none, which force nothing.
// parallel is the request's parallel_tool_calls; a syntax whose calls end
// the generation (harmony's <|call|>) or fill the answer alone (Llama 3's)
// makes one call whatever it says. A named tool that is not offered is an
// error (the request's parser refuses it first).
func Constrain(s Syntax, tools []Tool, c Choice, parallel bool) (*Forced, error) {
	if c.Mode != Required && c.Mode != Named {
		return nil, nil
	}
	if !s.Scans() && s != Harmony || s == Gemma4 {
		return nil, fmt.Errorf("%w: %s", ErrUnconstrainable, s)
	}
	f := &Forced{Parallel: parallel}
	switch s {
	case Hermes:
		f.Separator = "\n"
	case ToolCode:
		f.Separator = "\n"
	default:
		f.Parallel = false
	}
	for _, t := range tools {
		if c.Mode == Named && t.Name != c.Name {
			continue
		}
		f.Calls = append(f.Calls, callText(s, t))
	}
	if len(f.Calls) == 0 {
		return nil, fmt.Errorf("toolcall: tool_choice names no offered tool")
	}
	return f, nil
}

func callText(s Syntax, t Tool) CallText {
	schema := t.Parameters
	if len(schema) == 0 {
		schema = json.RawMessage(`{"type":"object","properties":{},"additionalProperties":false}`)
	}
	var name strings.Builder
	writeJSONString(&name, t.Name)
	ct := CallText{Tool: t.Name, Schema: schema}
	switch s {
	case Hermes:
		ct.Prefix, ct.Suffix = hermesOpen+"\n"+`{"name": `+name.String()+`, "arguments": `, "}\n"+hermesClose
	case ToolCode:
		ct.Prefix, ct.Suffix = toolCodeOpen+"\n"+`{"name": `+name.String()+`, "arguments": `, "}\n"+fence
	case Llama3:
		ct.Prefix, ct.Suffix = `{"name": `+name.String()+`, "parameters": `, "}"
	case Harmony:
		ct.Prefix, ct.Suffix = "<|channel|>commentary to=functions."+t.Name+" <|constrain|>json<|message|>", "<|call|>"
	}
	return ct
}

// Lark is f as a grammar in llguidance's Lark dialect (package grammar's
// Lark kind): each call's prefix and suffix as literals, harmony's control
// tokens as special tokens, and the arguments as an inline %json schema.
func (f *Forced) Lark() string {
	var b strings.Builder
	if f.Parallel {
		b.WriteString("start: call (" + larkText(f.Separator) + " call)*\n")
	} else {
		b.WriteString("start: call\n")
	}
	b.WriteString("call: ")
	for i := range f.Calls {
		if i > 0 {
			b.WriteString(" | ")
		}
		fmt.Fprintf(&b, "call_%d", i)
	}
	b.WriteByte('\n')
	for i, c := range f.Calls {
		fmt.Fprintf(&b, "call_%d: %s args_%d %s\n", i, larkText(c.Prefix), i, larkText(c.Suffix))
		var schema bytes.Buffer
		if json.Compact(&schema, c.Schema) != nil {
			schema.Reset()
			schema.WriteString(`{"type":"object"}`)
		}
		fmt.Fprintf(&b, "args_%d: %%json %s\n", i, schema.String())
	}
	return b.String()
}

// larkText writes literal text as Lark terms: quoted strings, and
// harmony's control tokens as special tokens.
func larkText(s string) string {
	var terms []string
	for s != "" {
		i := strings.Index(s, "<|")
		j := -1
		if i >= 0 {
			j = strings.Index(s[i:], "|>")
		}
		if i < 0 || j < 0 || !harmonyToken(s[i:i+j+2]) {
			terms = append(terms, larkString(s))
			break
		}
		if i > 0 {
			terms = append(terms, larkString(s[:i]))
		}
		terms = append(terms, s[i:i+j+2])
		s = s[i+j+2:]
	}
	if len(terms) == 0 {
		return `""`
	}
	return strings.Join(terms, " ")
}

func harmonyToken(t string) bool {
	switch t {
	case "<|start|>", "<|end|>", "<|message|>", "<|channel|>", "<|constrain|>", "<|return|>", "<|call|>":
		return true
	}
	return false
}

func larkString(s string) string {
	var b strings.Builder
	writeJSONString(&b, s)
	return b.String()
}
