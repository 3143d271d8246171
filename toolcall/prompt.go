package toolcall

import (
	"bytes"
	"encoding/json"
	"strconv"
	"strings"
)

// JSON is the tool as chat templates read it (the `tools` variable of
// Hugging Face templates): {"type": "function", "function": {"name",
// "description", "parameters"}}, the schema's members in the request's
// order. Description is always present (templates concatenate it) and
// absent parameters are an object schema without properties.
func (t Tool) JSON() json.RawMessage {
	params := t.Parameters
	if len(params) == 0 {
		params = json.RawMessage(`{"type":"object","properties":{}}`)
	}
	var b strings.Builder
	b.WriteString(`{"type":"function","function":{"name":`)
	writeJSONString(&b, t.Name)
	b.WriteString(`,"description":`)
	writeJSONString(&b, t.Description)
	b.WriteString(`,"parameters":`)
	var c bytes.Buffer
	if json.Compact(&c, params) != nil {
		c.Reset()
		c.WriteString("{}") // parse validated it; stay valid regardless
	}
	b.Write(c.Bytes())
	b.WriteString("}}")
	return json.RawMessage(b.String())
}

// Preamble is the system text that tells a model about tools when its chat
// template does not: the tools' schemas and how to call them in the
// model's syntax. serial asks for one call at a time
// (parallel_tool_calls: false).
func Preamble(s Syntax, tools []Tool, serial bool) string {
	var list strings.Builder
	for i, t := range tools {
		if i > 0 {
			list.WriteByte('\n')
		}
		list.Write(t.JSON())
	}
	var b strings.Builder
	switch s {
	case Llama3:
		b.WriteString("You can call the functions below, each described by a JSON schema. To call one, answer with only a JSON object " +
			`of the form {"name": function name, "parameters": object of argument names and values}` + ", and no other text.\n\n")
		b.WriteString(list.String())
		b.WriteByte('\n')
	case ToolCode:
		b.WriteString("# Tools\n\nYou can call functions to help with the user's request. Each is described by a JSON schema:\n\n")
		b.WriteString(list.String())
		b.WriteString("\n\nTo call a function, write a ```tool_code block holding a JSON object with its name and arguments, one block per call:\n" +
			"```tool_code\n{\"name\": \"<function name>\", \"arguments\": {<arguments>}}\n```\n" +
			"Results come back in a ```tool_output block.")
	case Gemma4:
		b.WriteString("# Tools\n\nYou can call functions to help with the user's request. Each is described by a JSON schema:\n\n")
		b.WriteString(list.String())
		b.WriteString("\n\nTo call a function, write " + gemma4Open + "call:<function name>{<argument>:<value>,...}" + gemma4Close +
			", with text values between " + gemma4Quote + " marks.")
	default:
		b.WriteString("# Tools\n\nYou can call functions to help with the user's request. Each is described by a JSON schema inside <tools></tools>:\n<tools>\n")
		b.WriteString(list.String())
		b.WriteString("\n</tools>\n\nTo call a function, write a JSON object with its name and arguments inside <tool_call></tool_call> tags, one block per call:\n" +
			"<tool_call>\n{\"name\": \"<function name>\", \"arguments\": {<arguments>}}\n</tool_call>\n" +
			"Results come back inside <tool_response></tool_response> tags.")
	}
	if serial {
		b.WriteString("\nCall at most one function at a time.")
	}
	return b.String()
}

// FormatCalls writes calls of an earlier turn the way the model writes
// them, for a template that does not render an assistant turn's
// tool_calls.
func FormatCalls(s Syntax, calls []Call) string {
	parts := make([]string, len(calls))
	for i, c := range calls {
		args := argumentsJSON(c.Arguments)
		var b strings.Builder
		switch s {
		case Llama3:
			b.WriteString(`{"name": `)
			writeJSONString(&b, c.Name)
			b.WriteString(`, "parameters": ` + args + "}")
		case Gemma4:
			b.WriteString(gemma4Open + "call:" + c.Name)
			writeGemma(&b, args)
			b.WriteString(gemma4Close)
		default:
			open, close := hermesOpen, hermesClose
			if s == ToolCode {
				open, close = toolCodeOpen, fence
			}
			b.WriteString(open + "\n" + `{"name": `)
			writeJSONString(&b, c.Name)
			b.WriteString(`, "arguments": ` + args + "}\n" + close)
		}
		parts[i] = b.String()
	}
	return strings.Join(parts, "\n")
}

// FormatResult writes the result of a call to the tool name, for a
// template that does not render tool turns.
func FormatResult(s Syntax, name, content string) string {
	switch s {
	case ToolCode:
		return "```tool_output\n" + content + "\n```"
	case Gemma4:
		return "<|tool_response>response:" + name + "{value:" + gemma4Quote + content + gemma4Quote + "}<tool_response|>"
	}
	return "<tool_response>\n" + content + "\n</tool_response>"
}

// argumentsJSON is arguments as JSON text: as they are when they are JSON,
// else as a JSON string (a client may send back what a model wrote).
func argumentsJSON(args string) string {
	if json.Valid([]byte(args)) {
		return strings.TrimSpace(args)
	}
	var b strings.Builder
	writeJSONString(&b, args)
	return b.String()
}

// writeGemma writes a JSON value in Gemma 4's notation: strings between
// <|"|> marks, object keys bare. A value it cannot read is written as no
// arguments.
func writeGemma(b *strings.Builder, text string) {
	dec := json.NewDecoder(strings.NewReader(text))
	dec.UseNumber()
	var g strings.Builder
	var write func() bool
	write = func() bool {
		tok, err := dec.Token()
		if err != nil {
			return false
		}
		switch v := tok.(type) {
		case json.Delim:
			g.WriteByte(byte(v))
			for n := 0; dec.More(); n++ {
				if n > 0 {
					g.WriteByte(',')
				}
				if v == '{' {
					k, err := dec.Token()
					if err != nil {
						return false
					}
					key, _ := k.(string)
					g.WriteString(key + ":")
				}
				if !write() {
					return false
				}
			}
			end, err := dec.Token()
			if err != nil {
				return false
			}
			g.WriteByte(byte(end.(json.Delim)))
		case string:
			g.WriteString(gemma4Quote + v + gemma4Quote)
		case json.Number:
			g.WriteString(v.String())
		case bool:
			g.WriteString(strconv.FormatBool(v))
		case nil:
			g.WriteString("null")
		}
		return true
	}
	if !write() {
		b.WriteString("{}")
		return
	}
	b.WriteString(g.String())
}
