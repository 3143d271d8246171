package stages

import (
	"encoding/json"
	"strings"

	"github.com/goprovider/provider/jinja"
	"github.com/goprovider/provider/toolcall"
)

// ToolDialect is how a model is told about tools and writes its calls:
// the syntax of its calls, and what its chat template renders itself.
// What the template does not render, RenderChat writes in the syntax, so
// tools, calls and results always reach the model.
type ToolDialect struct {
	Syntax  toolcall.Syntax
	Renders TemplateTools
}

// TemplateTools says what a chat template renders of tool calling, as
// Hugging Face templates take it: the `tools` variable, an assistant
// turn's tool_calls (function.arguments a mapping), tool turns (role
// "tool", tool_call_id, name).
type TemplateTools struct {
	// Tools: the offered tools reach the prompt.
	Tools bool
	// Calls: an assistant turn's calls reach the prompt; ManyCalls: all of
	// them when there are several (some templates read only the first,
	// or refuse more).
	Calls, ManyCalls bool
	// Results: a tool turn's content reaches the prompt.
	Results bool
	// AttachedResults: results are read as the tool_responses ({name,
	// response}) of the assistant turn that made the calls (Gemma 4's
	// template); they are passed so when it does.
	AttachedResults bool
}

// Names and values of the probe conversations: text no real prompt holds.
const (
	probeTool   = "probe_tool_zq"
	probeTool2  = "probe_tool_zr"
	probeValue  = "probe_value_zq"
	probeValue2 = "probe_value_zr"
	probeResult = "probe_result_zq"
	probeAttach = "probe_result_zr"
)

// DetectTools finds the tool dialect of a model: its syntax from its
// family's syntax and its chat template's source (toolcall.Detect), and what
// the template renders by rendering probe conversations and looking for
// their text in the output. A template that fails on a probe does not
// render what it probes. Nil t (no template) renders nothing.
func DetectTools(family toolcall.Syntax, source string, t *jinja.Template) ToolDialect {
	d := ToolDialect{Syntax: toolcall.Detect(family, source)}
	if t == nil {
		return d
	}
	tools := toolValues([]toolcall.Tool{
		{Name: probeTool, Description: "Probe.", Parameters: json.RawMessage(`{"type":"object","properties":{"arg":{"type":"string"}}}`)},
		{Name: probeTool2, Description: "Probe.", Parameters: json.RawMessage(`{"type":"object","properties":{"arg":{"type":"string"}}}`)},
	})
	render := func(msgs ...map[string]any) string {
		out, err := t.RenderChat(msgs, jinja.ChatOptions{AddGenerationPrompt: true, Tools: tools})
		if err != nil {
			return ""
		}
		return out
	}
	user := map[string]any{"role": "user", "content": "Probe question."}
	call := func(names ...string) map[string]any {
		calls := make([]toolcall.Call, len(names))
		for i, n := range names {
			value := probeValue
			if i > 0 {
				value = probeValue2
			}
			calls[i] = toolcall.Call{ID: "call_" + n, Name: n, Arguments: `{"arg":"` + value + `"}`}
		}
		return map[string]any{"role": "assistant", "content": "", "tool_calls": callValues(calls)}
	}
	d.Renders.Tools = strings.Contains(render(user), probeTool)
	out := render(user, call(probeTool))
	d.Renders.Calls = strings.Contains(out, probeTool) && strings.Contains(out, probeValue)
	if !d.Renders.Calls {
		return d
	}
	out = render(user, call(probeTool, probeTool2))
	d.Renders.ManyCalls = strings.Contains(out, probeTool2) && strings.Contains(out, probeValue2)
	result := map[string]any{"role": "tool", "tool_call_id": "call_" + probeTool, "name": probeTool, "content": probeResult}
	d.Renders.Results = strings.Contains(render(user, call(probeTool), result), probeResult)
	attached := call(probeTool)
	attached["tool_responses"] = []any{map[string]any{"name": probeTool, "response": probeAttach}}
	d.Renders.AttachedResults = strings.Contains(render(user, attached), probeAttach)
	return d
}

// toolValues are tools as templates read them (toolcall.Tool.JSON, key
// order kept).
func toolValues(tools []toolcall.Tool) []any {
	out := make([]any, len(tools))
	for i, t := range tools {
		out[i] = t.JSON()
	}
	return out
}

// callValues are calls as templates read an assistant turn's tool_calls:
// {"id", "type": "function", "function": {"name", "arguments"}}, the
// arguments a mapping when they are a JSON object (templates write them
// with tojson or walk their items) and the text otherwise.
func callValues(calls []toolcall.Call) []any {
	out := make([]any, len(calls))
	for i, c := range calls {
		var args any = c.Arguments
		if kind(json.RawMessage(c.Arguments)) == '{' {
			if v, err := jinja.DecodeJSON([]byte(c.Arguments)); err == nil {
				args = v
			}
		}
		out[i] = map[string]any{"id": c.ID, "type": "function", "function": map[string]any{"name": c.Name, "arguments": args}}
	}
	return out
}

// resultValue is a tool result as Gemma 4's tool_responses take it: a
// JSON object as a mapping, anything else as text.
func resultValue(content string) any {
	if kind(json.RawMessage(content)) == '{' {
		if v, err := jinja.DecodeJSON([]byte(content)); err == nil {
			return v
		}
	}
	return content
}

// withTools rewrites a conversation for a template so that what it does
// not render of tools is written in the model's syntax (see ToolDialect):
//
//   - offered tools it does not render: a system preamble
//     (toolcall.Preamble), after the request's own system text;
//   - calls it does not render: the assistant turn's content, written as
//     the model writes calls; their results then become user turns
//     (toolcall.FormatResult), joined with the user turn that follows;
//   - results it does not render: the same user turns;
//   - several calls in a turn when it renders one: one turn per call, each
//     followed by its result.
func (d ToolDialect) withTools(msgs []Message, tools []toolcall.Tool, serial bool) []Message {
	r := d.Renders
	if r.Calls && !r.ManyCalls {
		msgs = oneCallPerTurn(msgs)
	}
	if !r.Calls || !r.Results && !r.AttachedResults {
		msgs = d.resultsAsText(msgs, !r.Calls)
	}
	if len(tools) > 0 && !r.Tools {
		preamble := toolcall.Preamble(d.Syntax, tools, serial)
		if len(msgs) > 0 && msgs[0].Role == "system" {
			sys := msgs[0]
			sys.Content, sys.Parts = sys.Content+"\n\n"+preamble, nil
			msgs = append([]Message{sys}, msgs[1:]...)
		} else {
			msgs = append([]Message{{Role: "system", Content: preamble}}, msgs...)
		}
	}
	return msgs
}

// oneCallPerTurn splits each assistant turn of several calls into one
// turn per call, each followed by the tool turn answering it, so that a
// template that renders one call per turn renders them all in order.
func oneCallPerTurn(msgs []Message) []Message {
	var out []Message
	for i := 0; i < len(msgs); i++ {
		m := msgs[i]
		if len(m.ToolCalls) < 2 {
			out = append(out, m)
			continue
		}
		j := i + 1
		results := map[string]Message{}
		var unmatched []Message
		for ; j < len(msgs) && msgs[j].Role == "tool"; j++ {
			if _, dup := results[msgs[j].ToolCallID]; dup {
				unmatched = append(unmatched, msgs[j])
			} else {
				results[msgs[j].ToolCallID] = msgs[j]
			}
		}
		for k, c := range m.ToolCalls {
			turn := Message{Role: "assistant", ToolCalls: []toolcall.Call{c}}
			if k == 0 {
				turn.Content, turn.Parts, turn.Name = m.Content, m.Parts, m.Name
			}
			out = append(out, turn)
			if r, ok := results[c.ID]; ok {
				out = append(out, r)
				delete(results, c.ID)
			}
		}
		out = append(out, unmatched...)
		i = j - 1
	}
	return out
}

// resultsAsText turns tool turns into user turns holding their results
// in the model's syntax, one user turn per run of results, joined with
// the user turn that follows (templates that know no tool role expect
// turns to alternate); with callsToo, assistant turns' calls become their
// content.
func (d ToolDialect) resultsAsText(msgs []Message, callsToo bool) []Message {
	var out []Message
	var pending []string
	flush := func(next *Message) {
		if len(pending) == 0 {
			return
		}
		text := strings.Join(pending, "\n")
		pending = nil
		if next != nil && next.Role == "user" && next.Parts == nil {
			next.Content = text + "\n\n" + next.Content
			return
		}
		out = append(out, Message{Role: "user", Content: text})
	}
	for _, m := range msgs {
		if m.Role == "tool" {
			pending = append(pending, toolcall.FormatResult(d.Syntax, m.Name, m.Content))
			continue
		}
		flush(&m)
		if callsToo && len(m.ToolCalls) > 0 {
			text := toolcall.FormatCalls(d.Syntax, m.ToolCalls)
			if m.Content != "" {
				text = m.Content + "\n" + text
			}
			m.Content, m.Parts, m.ToolCalls = text, nil, nil
		}
		out = append(out, m)
	}
	flush(nil)
	return out
}

// attachResults moves each tool turn into the tool_responses of the
// assistant turn whose calls it answers, for templates that read results
// there.
func attachResults(list []map[string]any, msgs []Message) []map[string]any {
	out := list[:0:0]
	owner := -1
	for i, m := range msgs {
		switch {
		case len(m.ToolCalls) > 0:
			owner = len(out)
		case m.Role == "tool" && owner >= 0:
			rs, _ := out[owner]["tool_responses"].([]any)
			out[owner]["tool_responses"] = append(rs, map[string]any{"name": m.Name, "response": resultValue(m.Content)})
			continue
		case m.Role != "tool":
			owner = -1
		}
		out = append(out, list[i])
	}
	return out
}

// hasToolTurns reports whether a conversation holds calls or results.
func hasToolTurns(msgs []Message) bool {
	for _, m := range msgs {
		if len(m.ToolCalls) > 0 || m.Role == "tool" {
			return true
		}
	}
	return false
}

// toolVars sets the tool variables of a chat request's rendering. A model
// whose tool dialect is unknown (no syntax) refuses tools and calls sent
// back; a required or named tool_choice is checked here and enforced by
// its grammar (ToolChoiceGrammar, compiled with the response format).
func toolVars(v *ChatVars, p *Params, m *Model) error {
	v.Dialect = m.Tools
	if m.Tools.Syntax == toolcall.NoSyntax {
		if p.OffersTools() {
			return invalid(CodeUnsupported, "tools")
		}
		if hasToolTurns(p.Messages) {
			return invalid(CodeUnsupported, "messages")
		}
		return nil
	}
	if p.OffersTools() {
		v.Tools, v.SerialToolCalls = p.Tools, p.SerialToolCalls
	}
	if _, err := ToolChoiceGrammar(p, m.Tools); err != nil {
		return err
	}
	return nil
}

// ToolChoiceGrammar is the grammar that enforces a required or named
// tool_choice for a model of dialect d: the model's call syntax around
// each offered tool's arguments schema (toolcall.Constrain), in
// llguidance's Lark dialect (package grammar's Lark kind). It is nil for
// auto and none. A dialect whose calls no JSON schema describes (Gemma
// 4's notation) cannot be forced: 400 unsupported_parameter. Generation
// is constrained by it from the first token (formatGrammar compiles it
// into engine.Generation.Grammar).
func ToolChoiceGrammar(p *Params, d ToolDialect) ([]byte, error) {
	f, err := toolcall.Constrain(d.Syntax, p.Tools, p.ToolChoice, !p.SerialToolCalls)
	if err != nil {
		return nil, &Invalid{Code: CodeUnsupported, Param: "tool_choice", Err: err}
	}
	if f == nil {
		return nil, nil
	}
	return []byte(f.Lark()), nil
}
