package harmony

import (
	"context"
	"reflect"
	"testing"

	"github.com/goprovider/provider/engine"
	"github.com/goprovider/provider/harmony/harmonytest"
	"github.com/goprovider/provider/stages"
	"github.com/goprovider/provider/stages/stagestest"
	"github.com/goprovider/provider/toolcall"
)

// toolCases are generations of a request that offers tools, and the calls
// the client must get of them.
var toolCases = []struct {
	name      string
	generated string
	content   string
	reasoning string
	calls     []toolcall.Call
	finish    string
}{
	{name: "analysis then call",
		generated: "<|channel|>analysis<|message|>Need the weather.<|end|><|start|>assistant to=functions.get_weather<|channel|>commentary <|constrain|>json<|message|>{\"city\": \"Paris\"}<|call|>",
		reasoning: "Need the weather.", calls: []toolcall.Call{{Name: "get_weather", Arguments: `{"city":"Paris"}`}}, finish: "tool_calls"},
	{name: "recipient in the channel",
		generated: "<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>{\"city\":\"Rome\",\"days\":[1,2]}<|call|>",
		calls:     []toolcall.Call{{Name: "get_weather", Arguments: `{"city":"Rome","days":[1,2]}`}}, finish: "tool_calls"},
	{name: "recipient in the prompt's header", generated: " to=functions.lookup<|channel|>commentary json<|message|>{\"q\":1}<|call|>",
		calls: []toolcall.Call{{Name: "lookup", Arguments: `{"q":1}`}}, finish: "tool_calls"},
	{name: "preamble then call",
		generated: "<|channel|>commentary<|message|>Let me check.<|end|><|start|>assistant to=functions.now<|channel|>commentary json<|message|>{}<|call|>",
		content:   "Let me check.", calls: []toolcall.Call{{Name: "now", Arguments: `{}`}}, finish: "tool_calls"},
	{name: "no arguments", generated: " to=functions.now<|channel|>commentary json<|message|><|call|>",
		calls: []toolcall.Call{{Name: "now", Arguments: `{}`}}, finish: "tool_calls"},
	{name: "arguments that are not JSON are content",
		generated: " to=functions.get_weather<|channel|>commentary json<|message|>city = Paris<|call|>", content: "city = Paris", finish: "stop"},
	{name: "builtin tool is not a call", generated: "<|channel|>analysis to=python code<|message|>print(1)<|call|>", finish: "stop"},
	{name: "answer without a call", generated: harmonytest.Reply, content: harmonytest.ReplyContent, reasoning: harmonytest.ReplyReasoning, finish: "stop"},
	{name: "call cut short is content",
		generated: "<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>{\"city\": \"Pa", content: `{"city": "Pa`, finish: "length"},
}

// Through the token path of a request that offers tools, every chunking
// of a generation gives the same calls, content and reasoning; an answer
// that calls finishes with "tool_calls".
func TestToolCalls(t *testing.T) {
	tok, v := vocab(t)
	m := &stages.Model{Name: "gpt-oss", Architecture: "gpt_oss", Tokenizer: tok, NewOutputParser: v.NewParser, NewToolParser: v.NewToolParser}
	for _, tc := range toolCases {
		t.Run(tc.name, func(t *testing.T) {
			ids := harmonytest.Encode(tok, tc.generated)
			for seed := range uint64(6) {
				fake := &stagestest.Engine{Script: func(engine.Generation) stagestest.Play {
					return stagestest.Play{Events: chunked(ids, seed), Hold: true}
				}}
				req := &stages.Request{Input: stages.Input{Endpoint: stages.Chat}, Model: m, Tokens: []int32{1},
					Params: &stages.Params{Model: m.Name, Tools: []toolcall.Tool{{Name: "get_weather"}}}}
				rowCtx, stop := context.WithCancel(context.Background())
				events, _ := fake.Submit(rowCtx, engine.Generation{ID: "r"})
				var content, reasoning, finish string
				var calls []toolcall.Call
				for d := range (stages.Detokenizer{}).Run(context.Background(), req, &stages.Admitted{Events: events, Stop: stop}) {
					checkText(t, "content", d.Text)
					content += d.Text
					reasoning += d.Reasoning
					for i, c := range d.ToolCalls {
						if c.Index != len(calls) {
							t.Fatalf("call %d has index %d", len(calls)+i, c.Index)
						}
						calls = append(calls, c.Call)
					}
					if d.Final() {
						finish = d.Finish
					}
				}
				if content != tc.content || reasoning != tc.reasoning || !reflect.DeepEqual(calls, tc.calls) || finish != tc.finish {
					t.Fatalf("chunking %d: content %q reasoning %q calls %v finish %q", seed, content, reasoning, calls, finish)
				}
			}
		})
	}
}

// Without tools offered, a call is not shown (the request's parser is
// NewParser's).
func TestNoToolsNoCalls(t *testing.T) {
	tok, v := vocab(t)
	p := v.NewParser()
	for _, id := range harmonytest.Encode(tok, toolCases[0].generated) {
		if o := p.Add(id); len(o.Calls) > 0 || o.Content != "" {
			t.Fatalf("output %+v", o)
		}
	}
}
