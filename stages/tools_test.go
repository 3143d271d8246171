package stages

import (
	"context"
	"encoding/json"
	"os"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/goprovider/provider/engine"
	"github.com/goprovider/provider/jinja"
	"github.com/goprovider/provider/sample"
	"github.com/goprovider/provider/stages/stagestest"
	"github.com/goprovider/provider/tokenizer"
	"github.com/goprovider/provider/toolcall"
)

const weatherTool = `{"type":"function","function":{"name":"get_weather","description":"Current weather of a city.",` +
	`"parameters":{"type":"object","properties":{"city":{"type":"string"},"unit":{"type":"string","enum":["C","F"]}},"required":["city"]}}}`

func chatBody(extra string) string {
	return `{"model":"stories","messages":[{"role":"user","content":"hi"}]` + extra + `}`
}

func TestParseToolsRejects(t *testing.T) {
	history := func(msgs string) string {
		return `{"model":"stories","messages":[{"role":"user","content":"hi"},` + msgs + `]}`
	}
	call := `{"role":"assistant","content":null,"tool_calls":[{"id":"c1","type":"function","function":{"name":"get_weather","arguments":"{}"}}]}`
	for _, tc := range []struct {
		name, body string
		code       Code
		param      string
	}{
		{"tools not a list", chatBody(`,"tools":{}`), CodeInvalidType, "tools"},
		{"tool not an object", chatBody(`,"tools":["f"]`), CodeInvalidType, "tools"},
		{"tool without type", chatBody(`,"tools":[{"function":{"name":"f"}}]`), CodeMissing, "tools"},
		{"custom tool", chatBody(`,"tools":[{"type":"custom","function":{"name":"f"}}]`), CodeUnsupported, "tools"},
		{"tool without function", chatBody(`,"tools":[{"type":"function"}]`), CodeMissing, "tools"},
		{"function without name", chatBody(`,"tools":[{"type":"function","function":{"description":"x"}}]`), CodeMissing, "tools"},
		{"bad function name", chatBody(`,"tools":[{"type":"function","function":{"name":"get weather"}}]`), CodeInvalidValue, "tools"},
		{"long function name", chatBody(`,"tools":[{"type":"function","function":{"name":"` + strings.Repeat("f", 65) + `"}}]`), CodeInvalidValue, "tools"},
		{"unknown function field", chatBody(`,"tools":[{"type":"function","function":{"name":"f","mood":1}}]`), CodeUnknownParameter, "tools"},
		{"parameters not an object", chatBody(`,"tools":[{"type":"function","function":{"name":"f","parameters":"{}"}}]`), CodeInvalidType, "tools"},
		{"description not a string", chatBody(`,"tools":[{"type":"function","function":{"name":"f","description":1}}]`), CodeInvalidType, "tools"},
		{"duplicate names", chatBody(`,"tools":[` + weatherTool + `,` + weatherTool + `]`), CodeInvalidValue, "tools"},
		{"unknown tool_choice", chatBody(`,"tools":[` + weatherTool + `],"tool_choice":"always"`), CodeInvalidValue, "tool_choice"},
		{"tool_choice of no offered tool", chatBody(`,"tools":[` + weatherTool + `],"tool_choice":{"type":"function","function":{"name":"get_time"}}`), CodeInvalidValue, "tool_choice"},
		{"tool_choice without a name", chatBody(`,"tools":[` + weatherTool + `],"tool_choice":{"type":"function","function":{}}`), CodeMissing, "tool_choice"},
		{"tool_choice allowed_tools", chatBody(`,"tools":[` + weatherTool + `],"tool_choice":{"type":"allowed_tools"}`), CodeUnsupported, "tool_choice"},
		{"tool_choice a number", chatBody(`,"tools":[` + weatherTool + `],"tool_choice":1`), CodeInvalidType, "tool_choice"},
		{"parallel_tool_calls a string", chatBody(`,"parallel_tool_calls":"no"`), CodeInvalidType, "parallel_tool_calls"},
		{"legacy functions", chatBody(`,"functions":[{"name":"f"}]`), CodeUnsupported, "functions"},
		{"function role", history(`{"role":"function","name":"f","content":"x"}`), CodeUnsupported, "messages"},
		{"tool_calls on a user turn", history(`{"role":"user","content":"x","tool_calls":[{"id":"c1","type":"function","function":{"name":"f","arguments":"{}"}}]}`), CodeInvalidValue, "messages"},
		{"call without id", history(`{"role":"assistant","tool_calls":[{"type":"function","function":{"name":"f","arguments":"{}"}}]}`), CodeMissing, "messages"},
		{"call without name", history(`{"role":"assistant","tool_calls":[{"id":"c1","type":"function","function":{"arguments":"{}"}}]}`), CodeMissing, "messages"},
		{"call without arguments", history(`{"role":"assistant","tool_calls":[{"id":"c1","type":"function","function":{"name":"f"}}]}`), CodeMissing, "messages"},
		{"call arguments a number", history(`{"role":"assistant","tool_calls":[{"id":"c1","type":"function","function":{"name":"f","arguments":1}}]}`), CodeInvalidType, "messages"},
		{"call of another type", history(`{"role":"assistant","tool_calls":[{"id":"c1","type":"custom","function":{"name":"f","arguments":"{}"}}]}`), CodeUnsupported, "messages"},
		{"tool turn without id", history(call + `,{"role":"tool","content":"sunny"}`), CodeMissing, "messages"},
		{"tool turn of an unknown call", history(call + `,{"role":"tool","content":"sunny","tool_call_id":"c2"}`), CodeInvalidValue, "messages"},
		{"tool turn without content", history(call + `,{"role":"tool","tool_call_id":"c1"}`), CodeMissing, "messages"},
		{"tool_call_id on a user turn", history(`{"role":"user","content":"x","tool_call_id":"c1"}`), CodeInvalidValue, "messages"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req := &Request{Input: Input{Endpoint: Chat, Body: []byte(tc.body)}}
			err := Parse{Models: testCatalog(t)}.Apply(context.Background(), req)
			inv, ok := err.(*Invalid)
			if !ok || inv.Code != tc.code || inv.Param != tc.param {
				t.Fatalf("err = %v, want %s (%s)", err, tc.code, tc.param)
			}
		})
	}
}

func TestParseToolsAccepts(t *testing.T) {
	weather := toolcall.Tool{Name: "get_weather", Description: "Current weather of a city.",
		Parameters: json.RawMessage(`{"type":"object","properties":{"city":{"type":"string"},"unit":{"type":"string","enum":["C","F"]}},"required":["city"]}`)}
	for _, tc := range []struct {
		name, body string
		want       func(p *Params)
	}{
		{"tools with auto", chatBody(`,"tools":[` + weatherTool + `,{"type":"function","function":{"name":"now","strict":true}}]`), func(p *Params) {
			p.Tools = []toolcall.Tool{weather, {Name: "now"}}
		}},
		{"named and serial", chatBody(`,"tools":[` + weatherTool + `],"tool_choice":{"type":"function","function":{"name":"get_weather"}},"parallel_tool_calls":false`), func(p *Params) {
			p.Tools, p.ToolChoice, p.SerialToolCalls = []toolcall.Tool{weather}, toolcall.Choice{Mode: toolcall.Named, Name: "get_weather"}, true
		}},
		{"required", chatBody(`,"tools":[` + weatherTool + `],"tool_choice":"required"`), func(p *Params) {
			p.Tools, p.ToolChoice = []toolcall.Tool{weather}, toolcall.Choice{Mode: toolcall.Required}
		}},
		{"none without tools", chatBody(`,"tool_choice":"none","tools":null`), func(p *Params) {
			p.ToolChoice = toolcall.Choice{Mode: toolcall.NoCalls}
		}},
		{"history of calls and results", `{"model":"stories","messages":[{"role":"user","content":"hi"},` +
			`{"role":"assistant","tool_calls":[{"id":"c1","type":"function","function":{"name":"get_weather","arguments":"{\"city\": \"Paris\"}"}},` +
			`{"id":"c2","function":{"name":"now","arguments":{"zone": "CET"}}}]},` +
			`{"role":"tool","content":"sunny","tool_call_id":"c1"},{"role":"tool","content":[{"type":"text","text":"14:00"}],"tool_call_id":"c2","name":"clock"}]}`,
			func(p *Params) {
				p.Messages = append(p.Messages,
					Message{Role: "assistant", ToolCalls: []toolcall.Call{{ID: "c1", Name: "get_weather", Arguments: `{"city": "Paris"}`}, {ID: "c2", Name: "now", Arguments: `{"zone":"CET"}`}}},
					Message{Role: "tool", Content: "sunny", ToolCallID: "c1", Name: "get_weather"},
					Message{Role: "tool", Content: "14:00", Parts: []Part{{Kind: "text", Text: "14:00"}}, ToolCallID: "c2", Name: "clock"})
			}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req := &Request{Input: Input{Endpoint: Chat, Body: []byte(tc.body)}}
			if err := (Parse{Models: testCatalog(t)}).Apply(context.Background(), req); err != nil {
				t.Fatal(err)
			}
			want := &Params{Model: "stories", Messages: []Message{{Role: "user", Content: "hi"}}, Sampling: sample.Params{TopP: 1}}
			tc.want(want)
			if !reflect.DeepEqual(req.Params, want) {
				t.Fatalf("params\n got %+v\nwant %+v", *req.Params, *want)
			}
		})
	}
}

// toolConversation offers two tools and sends back a turn of two calls
// and their results.
func toolConversation() ([]Message, []toolcall.Tool) {
	tools := []toolcall.Tool{
		{Name: "get_weather", Description: "Current weather of a city.", Parameters: json.RawMessage(`{"type":"object","properties":{"city":{"type":"string","description":"City name."}},"required":["city"]}`)},
		{Name: "get_time", Description: "Current time in a zone."},
	}
	msgs := []Message{
		{Role: "system", Content: "Be brief."},
		{Role: "user", Content: "Weather in Paris, and the time?"},
		{Role: "assistant", ToolCalls: []toolcall.Call{
			{ID: "call_1", Name: "get_weather", Arguments: `{"city":"Paris"}`},
			{ID: "call_2", Name: "get_time", Arguments: `{"zone":"CET"}`},
		}},
		{Role: "tool", ToolCallID: "call_2", Name: "get_time", Content: "14:00"},
		{Role: "tool", ToolCallID: "call_1", Name: "get_weather", Content: `{"temp": 21, "sky": "clear"}`},
	}
	return msgs, tools
}

// The tool dialect of each template in the repository, and the prompt it
// renders for toolConversation (golden): what a template does not render
// of tools, calls or results is written in the model's syntax.
func TestRenderTools(t *testing.T) {
	read := func(path string) string {
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	all := TemplateTools{Tools: true, Calls: true, ManyCalls: true, Results: true}
	for _, tc := range []struct {
		name   string
		family toolcall.Syntax
		path   string
		want   ToolDialect
	}{
		{"smollm2", toolcall.Hermes, "../jinja/testdata/templates/smollm2.jinja", ToolDialect{Syntax: toolcall.Hermes}},
		{"qwen3", toolcall.NoSyntax, "../jinja/testdata/templates/qwen3.jinja", ToolDialect{Syntax: toolcall.Hermes, Renders: all}},
		{"llama33", toolcall.Hermes, "../jinja/testdata/templates/llama33.jinja", ToolDialect{Syntax: toolcall.Llama3, Renders: TemplateTools{Tools: true, Calls: true, Results: true}}},
		{"gemma3", toolcall.ToolCode, "../jinja/testdata/templates/gemma3.jinja", ToolDialect{Syntax: toolcall.ToolCode}},
		{"gemma4", toolcall.ToolCode, "../scripts/gemma4_chat_template.jinja", ToolDialect{Syntax: toolcall.Gemma4,
			Renders: TemplateTools{Tools: true, Calls: true, ManyCalls: true, Results: true, AttachedResults: true}}},
		{"gptoss", toolcall.Harmony, "../harmony/chat_template.jinja", ToolDialect{Syntax: toolcall.Harmony, Renders: TemplateTools{Tools: true, Calls: true, Results: true}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			src := read(tc.path)
			tmpl, err := jinja.Parse(src)
			if err != nil {
				t.Fatal(err)
			}
			d := DetectTools(tc.family, src, tmpl)
			if d != tc.want {
				t.Fatalf("dialect %+v, want %+v", d, tc.want)
			}
			msgs, tools := toolConversation()
			out, err := RenderChat(tmpl, msgs, ChatVars{BOS: "<s>", Now: time.Date(2025, 8, 1, 0, 0, 0, 0, time.UTC), Tools: tools, Dialect: d})
			if err != nil {
				t.Fatal(err)
			}
			for _, s := range []string{"get_weather", "get_time", "Paris", "CET", "14:00", "21"} {
				if !strings.Contains(out, s) {
					t.Errorf("the prompt lacks %q", s)
				}
			}
			stagestest.Golden(t, "tools_"+tc.name, []byte(out))
		})
	}
}

// tool_choice "none" offers no tools: neither the template nor a preamble
// tells the model of them, and its output is not scanned for calls.
func TestToolChoiceNoneOffersNothing(t *testing.T) {
	msgs, tools := toolConversation()
	p := &Params{Messages: msgs[:2], Tools: tools, ToolChoice: toolcall.Choice{Mode: toolcall.NoCalls}}
	m := testModel(t, "smollm2", string(mustRead(t, "../jinja/testdata/templates/smollm2.jinja")), 0)
	m.Tools = ToolDialect{Syntax: toolcall.Hermes}
	var v ChatVars
	if err := toolVars(&v, p, m); err != nil || v.Tools != nil {
		t.Fatalf("vars %+v %v", v, err)
	}
	out, err := RenderChat(m.ChatTemplate, p.Messages, v)
	if err != nil || strings.Contains(out, "get_weather") || strings.Contains(out, "<tools>") {
		t.Fatalf("%q %v", out, err)
	}
	req := &Request{Input: Input{Endpoint: Chat}, Params: p, Model: m}
	if _, ok := outputParser(req).(plainOutput); !ok {
		t.Fatal("a request offering no tools has its output scanned")
	}
	// A model of no known dialect refuses tools.
	m.Tools = ToolDialect{}
	p.ToolChoice = toolcall.Choice{}
	if err := toolVars(&v, p, m); err == nil {
		t.Fatal("tools offered to a model of no tool dialect")
	}
}

func mustRead(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// toolRequest is an admitted chat request offering a tool to the
// stories260K model as a model whose calls are Hermes blocks.
func toolRequest(t *testing.T, serial bool) *Request {
	t.Helper()
	m := testModel(t, "stories", testTemplate, 512)
	m.Tools = ToolDialect{Syntax: toolcall.Hermes}
	p := &Params{Model: "stories", Sampling: sample.Params{TopP: 1}, Tools: []toolcall.Tool{{Name: "get_weather"}}, SerialToolCalls: serial}
	return &Request{Input: Input{Endpoint: Chat}, Params: p, Model: m, Tokens: []int32{1, 403, 407}, Generation: &engine.Generation{ID: "req-7"}}
}

// encode tokenizes generated text as the model writes it.
func encode(t *testing.T, text string) []int32 {
	return stagestest.Tokenizer(t).Encode(text, tokenizer.EncodeOptions{})
}

type answer struct {
	content string
	calls   []ToolCall
	finish  string
}

func collect(out []Delta) answer {
	var a answer
	for _, d := range out {
		a.content += d.Text
		a.calls = append(a.calls, d.ToolCalls...)
		if d.Finish != "" {
			a.finish = d.Finish
		}
	}
	return a
}

// The token path of a request offering tools: calls written over many
// tokens come out whole after the text before them, the answer finishes
// with "tool_calls", and a block that does not parse is text.
func TestDetokToolCalls(t *testing.T) {
	call := func(i int, name, args string) ToolCall {
		return ToolCall{Index: i, Call: toolcall.Call{Name: name, Arguments: args}}
	}
	for _, tc := range []struct {
		name   string
		text   string
		serial bool
		want   answer
	}{
		{"text", "It is sunny.", false, answer{content: "It is sunny.", finish: "stop"}},
		{"text then two calls", "Checking.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>\n" +
			"<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Rome\"}}\n</tool_call>", false,
			answer{content: "Checking.", calls: []ToolCall{call(0, "get_weather", `{"city":"Paris"}`), call(1, "get_weather", `{"city":"Rome"}`)}, finish: "tool_calls"}},
		{"serial ends on the first call", "<tool_call>{\"name\":\"a\",\"arguments\":{}}</tool_call><tool_call>{\"name\":\"b\",\"arguments\":{}}</tool_call>", true,
			answer{calls: []ToolCall{call(0, "a", `{}`)}, finish: "tool_calls"}},
		{"malformed call is text", "<tool_call>{\"name\": get_weather}</tool_call>", false,
			answer{content: "<tool_call>{\"name\": get_weather}</tool_call>", finish: "stop"}},
		{"unclosed call at the end", "<tool_call>{\"name\":\"a\",\"arguments\":{\"x\":1}}", false,
			answer{calls: []ToolCall{call(0, "a", `{"x":1}`)}, finish: "tool_calls"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ids := encode(t, tc.text)
			for _, events := range [][]engine.Event{
				oneByOne(ids, finished(engine.FinishStop, len(ids))),
				{{Kind: engine.EventDelta, Tokens: ids}, finished(engine.FinishStop, len(ids))},
			} {
				got := collect(feedAll(toolRequest(t, tc.serial), events))
				if !reflect.DeepEqual(got, tc.want) {
					t.Fatalf("got %+v\nwant %+v", got, tc.want)
				}
			}
		})
	}
}

// A stop string ends the answer before a call that follows it.
func TestDetokStopBeforeCall(t *testing.T) {
	req := toolRequest(t, false)
	req.Params.Stop = []string{"STOP"}
	ids := encode(t, "Hi STOP<tool_call>{\"name\":\"a\",\"arguments\":{}}</tool_call>")
	got := collect(feedAll(req, oneByOne(ids, finished(engine.FinishStop, len(ids)))))
	if got.content != "Hi " || len(got.calls) != 0 || got.finish != "stop" {
		t.Fatalf("%+v", got)
	}
}

// toolDeltas: text, two calls, and the finish.
var toolDeltas = []Delta{
	{Text: "Checking."},
	{ToolCalls: []ToolCall{{Index: 0, Call: toolcall.Call{Name: "get_weather", Arguments: `{"city":"Paris"}`}}, {Index: 1, Call: toolcall.Call{Name: "get_time", Arguments: `{}`}}}},
	{Finish: "tool_calls", Usage: engine.Usage{PromptTokens: 3, CompletionTokens: 30}},
}

// Calls stream as OpenAI streams them (a delta with the id, type, name
// and empty arguments, then the arguments) and a response lists them
// with their ids, its content null when the answer is only calls.
func TestFramingToolCalls(t *testing.T) {
	for _, tc := range []struct {
		name   string
		stream bool
		deltas []Delta
	}{
		{"chat_stream_tools", true, toolDeltas},
		{"chat_body_tools", false, toolDeltas},
		{"chat_body_tools_only", false, toolDeltas[1:]},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req := frameRequest(Chat, tc.stream, false, false)
			var got []byte
			if tc.stream {
				f := NewFramer(req)
				for _, d := range tc.deltas {
					for _, b := range f.Frames(d) {
						got = append(got, b...)
					}
				}
			} else {
				c := NewCollector(req)
				for _, d := range tc.deltas {
					c.Add(d)
				}
				got = append(c.JSON(), '\n')
			}
			stagestest.Golden(t, tc.name, got)
		})
	}
}
