package stages

import (
	"bytes"
	"encoding/json"

	"github.com/goprovider/provider/toolcall"
)

// MaxTools bounds the tools of one request (OpenAI's limit).
const MaxTools = 128

// parseTools reads tools, tool_choice and parallel_tool_calls of a chat
// request.
//
// A tool is {"type": "function", "function": {"name", "description",
// "parameters", "strict"}}: the name is 1 to 64 letters, digits, "_" or
// "-", unique in the request; parameters, when given, is a JSON schema
// object. strict is accepted, and honoured where generation is
// constrained (a required or named tool_choice). tool_choice is "auto"
// (the default), "none", "required" or {"type": "function", "function":
// {"name": NAME}} naming an offered tool; "required" and a name need
// tools.
func parseTools(f fields, p *Params) error {
	var raws []json.RawMessage
	if _, err := get(f, "tools", &raws); err != nil {
		return err
	}
	if len(raws) > MaxTools {
		return invalid(CodeInvalidValue, "tools")
	}
	seen := map[string]bool{}
	for _, raw := range raws {
		t, err := parseTool(raw)
		if err != nil {
			return err
		}
		if seen[t.Name] {
			return invalid(CodeInvalidValue, "tools")
		}
		seen[t.Name] = true
		p.Tools = append(p.Tools, t)
	}
	c, err := parseToolChoice(f["tool_choice"])
	if err != nil {
		return err
	}
	switch {
	case c.Mode == toolcall.Required && len(p.Tools) == 0:
		return invalid(CodeInvalidValue, "tool_choice")
	case c.Mode == toolcall.Named && !seen[c.Name]:
		return invalid(CodeInvalidValue, "tool_choice")
	}
	p.ToolChoice = c
	var parallel bool
	if ok, err := get(f, "parallel_tool_calls", &parallel); err != nil {
		return err
	} else if ok {
		p.SerialToolCalls = !parallel
	}
	return nil
}

func parseTool(raw json.RawMessage) (toolcall.Tool, error) {
	tf, err := object(raw, "tools")
	if err != nil {
		return toolcall.Tool{}, err
	}
	if err := onlyKeys(tf, keySet(nil, "type", "function"), "tools"); err != nil {
		return toolcall.Tool{}, err
	}
	var typ string
	if ok, err := get(tf, "type", &typ); err != nil {
		return toolcall.Tool{}, &Invalid{Code: CodeInvalidType, Param: "tools", Err: err}
	} else if !ok {
		return toolcall.Tool{}, invalid(CodeMissing, "tools")
	} else if typ != "function" {
		return toolcall.Tool{}, invalid(CodeUnsupported, "tools")
	}
	if isNull(tf["function"]) {
		return toolcall.Tool{}, invalid(CodeMissing, "tools")
	}
	fn, err := object(tf["function"], "tools")
	if err != nil {
		return toolcall.Tool{}, err
	}
	if err := onlyKeys(fn, keySet(nil, "name", "description", "parameters", "strict"), "tools"); err != nil {
		return toolcall.Tool{}, err
	}
	var t toolcall.Tool
	if ok, err := get(fn, "name", &t.Name); err != nil {
		return toolcall.Tool{}, &Invalid{Code: CodeInvalidType, Param: "tools", Err: err}
	} else if !ok {
		return toolcall.Tool{}, invalid(CodeMissing, "tools")
	} else if !toolcall.ValidName(t.Name) {
		return toolcall.Tool{}, invalid(CodeInvalidValue, "tools")
	}
	if _, err := get(fn, "description", &t.Description); err != nil {
		return toolcall.Tool{}, &Invalid{Code: CodeInvalidType, Param: "tools", Err: err}
	}
	if raw := fn["parameters"]; !isNull(raw) {
		if kind(raw) != '{' {
			return toolcall.Tool{}, invalid(CodeInvalidType, "tools")
		}
		t.Parameters = json.RawMessage(bytes.TrimSpace(raw))
	}
	var strict bool
	if _, err := get(fn, "strict", &strict); err != nil {
		return toolcall.Tool{}, &Invalid{Code: CodeInvalidType, Param: "tools", Err: err}
	}
	return t, nil
}

func parseToolChoice(raw json.RawMessage) (toolcall.Choice, error) {
	switch kind(raw) {
	case 0, 'n':
		if isNull(raw) {
			return toolcall.Choice{}, nil
		}
	case '"':
		var s string
		if err := json.Unmarshal(raw, &s); err != nil {
			return toolcall.Choice{}, &Invalid{Code: CodeInvalidType, Param: "tool_choice", Err: err}
		}
		switch s {
		case "auto":
			return toolcall.Choice{Mode: toolcall.Auto}, nil
		case "none":
			return toolcall.Choice{Mode: toolcall.NoCalls}, nil
		case "required":
			return toolcall.Choice{Mode: toolcall.Required}, nil
		}
		return toolcall.Choice{}, invalid(CodeInvalidValue, "tool_choice")
	case '{':
		cf, err := object(raw, "tool_choice")
		if err != nil {
			return toolcall.Choice{}, err
		}
		var typ string
		if _, err := get(cf, "type", &typ); err != nil {
			return toolcall.Choice{}, &Invalid{Code: CodeInvalidType, Param: "tool_choice", Err: err}
		}
		switch typ {
		case "function":
		case "":
			return toolcall.Choice{}, invalid(CodeMissing, "tool_choice")
		default:
			return toolcall.Choice{}, invalid(CodeUnsupported, "tool_choice")
		}
		if err := onlyKeys(cf, keySet(nil, "type", "function"), "tool_choice"); err != nil {
			return toolcall.Choice{}, err
		}
		fn, err := object(cf["function"], "tool_choice")
		if err != nil {
			return toolcall.Choice{}, err
		}
		if err := onlyKeys(fn, keySet(nil, "name"), "tool_choice"); err != nil {
			return toolcall.Choice{}, err
		}
		c := toolcall.Choice{Mode: toolcall.Named}
		if ok, err := get(fn, "name", &c.Name); err != nil {
			return toolcall.Choice{}, &Invalid{Code: CodeInvalidType, Param: "tool_choice", Err: err}
		} else if !ok {
			return toolcall.Choice{}, invalid(CodeMissing, "tool_choice")
		}
		return c, nil
	}
	return toolcall.Choice{}, invalid(CodeInvalidType, "tool_choice")
}

// parseMessageTools reads the tool fields of a chat turn: an assistant
// turn's tool_calls, a tool turn's tool_call_id. A call's arguments are
// the JSON text the model wrote (a string, as OpenAI sends it back; an
// object is accepted too).
func parseMessageTools(f fields, m *Message) error {
	if !isNull(f["function_call"]) {
		return invalid(CodeUnsupported, "messages")
	}
	var raws []json.RawMessage
	if _, err := get(f, "tool_calls", &raws); err != nil {
		return &Invalid{Code: CodeInvalidType, Param: "messages", Err: err}
	}
	if len(raws) > 0 && m.Role != "assistant" {
		return invalid(CodeInvalidValue, "messages")
	}
	for _, raw := range raws {
		c, err := parseHistoryCall(raw)
		if err != nil {
			return err
		}
		m.ToolCalls = append(m.ToolCalls, c)
	}
	if ok, err := get(f, "tool_call_id", &m.ToolCallID); err != nil {
		return &Invalid{Code: CodeInvalidType, Param: "messages", Err: err}
	} else if ok != (m.Role == "tool") || ok && m.ToolCallID == "" {
		if m.Role == "tool" {
			return invalid(CodeMissing, "messages")
		}
		return invalid(CodeInvalidValue, "messages")
	}
	return nil
}

func parseHistoryCall(raw json.RawMessage) (toolcall.Call, error) {
	cf, err := object(raw, "messages")
	if err != nil {
		return toolcall.Call{}, err
	}
	if err := onlyKeys(cf, keySet(nil, "id", "type", "function"), "messages"); err != nil {
		return toolcall.Call{}, err
	}
	var c toolcall.Call
	if ok, err := get(cf, "id", &c.ID); err != nil {
		return toolcall.Call{}, &Invalid{Code: CodeInvalidType, Param: "messages", Err: err}
	} else if !ok || c.ID == "" {
		return toolcall.Call{}, invalid(CodeMissing, "messages")
	}
	var typ string
	if _, err := get(cf, "type", &typ); err != nil {
		return toolcall.Call{}, &Invalid{Code: CodeInvalidType, Param: "messages", Err: err}
	} else if typ != "" && typ != "function" {
		return toolcall.Call{}, invalid(CodeUnsupported, "messages")
	}
	if isNull(cf["function"]) {
		return toolcall.Call{}, invalid(CodeMissing, "messages")
	}
	fn, err := object(cf["function"], "messages")
	if err != nil {
		return toolcall.Call{}, err
	}
	if err := onlyKeys(fn, keySet(nil, "name", "arguments"), "messages"); err != nil {
		return toolcall.Call{}, err
	}
	if ok, err := get(fn, "name", &c.Name); err != nil {
		return toolcall.Call{}, &Invalid{Code: CodeInvalidType, Param: "messages", Err: err}
	} else if !ok || c.Name == "" {
		return toolcall.Call{}, invalid(CodeMissing, "messages")
	}
	switch args := fn["arguments"]; kind(args) {
	case '"':
		if err := json.Unmarshal(args, &c.Arguments); err != nil {
			return toolcall.Call{}, &Invalid{Code: CodeInvalidType, Param: "messages", Err: err}
		}
	case '{':
		var b bytes.Buffer
		if err := json.Compact(&b, args); err != nil {
			return toolcall.Call{}, &Invalid{Code: CodeInvalidType, Param: "messages", Err: err}
		}
		c.Arguments = b.String()
	case 0:
		return toolcall.Call{}, invalid(CodeMissing, "messages")
	default:
		if isNull(args) {
			return toolcall.Call{}, invalid(CodeMissing, "messages")
		}
		return toolcall.Call{}, invalid(CodeInvalidType, "messages")
	}
	return c, nil
}

// linkToolResults checks that every tool turn answers a call made by an
// earlier assistant turn, as OpenAI requires, and names the called
// function on a tool turn that names none (templates write it).
func linkToolResults(msgs []Message) error {
	calls := map[string]string{}
	for i := range msgs {
		m := &msgs[i]
		for _, c := range m.ToolCalls {
			calls[c.ID] = c.Name
		}
		if m.Role != "tool" {
			continue
		}
		name, ok := calls[m.ToolCallID]
		if !ok {
			return invalid(CodeInvalidValue, "messages")
		}
		if m.Name == "" {
			m.Name = name
		}
	}
	return nil
}
