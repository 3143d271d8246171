package toolcall

import (
	"fmt"
	"strings"
	"testing"

	"github.com/goprovider/provider/stages/stagestest"
)

// scanCases are generated answers in each syntax: calls alone, calls
// among text, several calls, and output that only looks like calls.
var scanCases = []struct {
	name string
	syn  Syntax
	text string
}{
	{"hermes/text", Hermes, "The weather in Paris is mild today."},
	{"hermes/one", Hermes, "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\", \"days\": 3}}\n</tool_call>"},
	{"hermes/text_then_call", Hermes, "Let me check.\n\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>\n"},
	{"hermes/two", Hermes, "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>\n" +
		"<tool_call>\n{\"name\": \"get_time\", \"arguments\": {\"zone\": \"Europe/Paris\"}}\n</tool_call>"},
	{"hermes/call_then_text", Hermes, "<tool_call>{\"name\":\"get_time\",\"arguments\":{}}</tool_call>\nDone, <b>see</b> above."},
	{"hermes/list", Hermes, "<tool_call>[{\"name\":\"a\",\"arguments\":{}},{\"name\":\"b\",\"arguments\":{\"x\":[1,2]}}]</tool_call>"},
	{"hermes/arguments_string", Hermes, "<tool_call>{\"name\":\"f\",\"arguments\":\"{\\\"a\\\": 1}\"}</tool_call>"},
	{"hermes/no_arguments", Hermes, "<tool_call>{\"type\":\"function\",\"name\":\"now\"}</tool_call>"},
	{"hermes/html_text", Hermes, "<tool_call>{\"name\":\"search\",\"arguments\":{\"q\":\"<a> & é\"}}</tool_call>"},
	{"hermes/unclosed_complete", Hermes, "<tool_call>\n{\"name\": \"get_time\", \"arguments\": {}}\n"},
	{"hermes/malformed_json", Hermes, "Sure.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": }\n</tool_call>\nok"},
	{"hermes/extra_member", Hermes, "<tool_call>{\"name\":\"f\",\"arguments\":{},\"why\":\"x\"}</tool_call>"},
	{"hermes/no_name", Hermes, "<tool_call>{\"arguments\":{}}</tool_call>"},
	{"hermes/unclosed_cut", Hermes, "<tool_call>\n{\"name\": \"get_weather\", \"argu"},
	{"hermes/near_marker", Hermes, "a <tool without a call, and <tool_cal"},
	{"hermes/good_then_bad", Hermes, "<tool_call>{\"name\":\"a\",\"arguments\":{}}</tool_call>\n<tool_call>not json</tool_call>"},

	{"llama3/one", Llama3, "{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Paris\"}}"},
	{"llama3/python_tag", Llama3, "<|python_tag|>{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Paris\"}}"},
	{"llama3/two", Llama3, " {\"name\":\"a\",\"parameters\":{}}; {\"name\":\"b\",\"parameters\":{\"x\":{\"y\":\"}\"}}}\n"},
	{"llama3/text", Llama3, "Paris is sunny, {\"name\": \"x\", \"parameters\": {}}"},
	{"llama3/json_answer", Llama3, "{\"city\": \"Paris\", \"temperature\": 21}"},
	{"llama3/cut", Llama3, "{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Par"},
	{"llama3/call_then_text", Llama3, "{\"name\":\"a\",\"parameters\":{}} and then some"},

	{"tool_code/json", ToolCode, "```tool_code\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n```"},
	{"tool_code/python", ToolCode, "I'll look it up.\n```tool_code\nget_weather(city=\"Paris\", days=3, metric=True)\n```\n"},
	{"tool_code/print", ToolCode, "```tool_code\nprint(get_weather(city='Paris, \\'FR\\''))\n```"},
	{"tool_code/python_list", ToolCode, "```tool_code\n[get_weather(city=\"Paris\"), convert(values=[1, 2.5], opts={'round': None},)]\n```"},
	{"tool_code/python_lines", ToolCode, "```tool_code\nget_weather(city=\"Paris\")\nget_time(zone=\"CET\")\n```"},
	{"tool_code/two_blocks", ToolCode, "```tool_code\n{\"name\":\"a\",\"arguments\":{}}\n```\n```tool_code\nb(x=1)\n```"},
	{"tool_code/positional", ToolCode, "```tool_code\nget_weather(\"Paris\")\n```"},
	{"tool_code/other_fence", ToolCode, "Here:\n```python\nprint('hi')\n```\n"},
	{"tool_code/word_on_fence_line", ToolCode, "```tool_codex\nf(a=1)\n```"},

	{"gemma4/one", Gemma4, "<|tool_call>call:get_weather{city:<|\"|>Paris<|\"|>,days:3}<tool_call|>"},
	{"gemma4/nested", Gemma4, "<|tool_call>call:f{a:{b:[1,<|\"|>x, \"y\"<|\"|>,true]},c:null,d:-2.5e3}<tool_call|>"},
	{"gemma4/two", Gemma4, "Checking.<|tool_call>call:a{}<tool_call|><|tool_call>call:b{x:<|\"|><|\"|>}<tool_call|>"},
	{"gemma4/bare_word", Gemma4, "<|tool_call>call:get_weather{city:Paris}<tool_call|>"},
	{"gemma4/no_call_word", Gemma4, "<|tool_call>get_weather{}<tool_call|>"},
}

// scanAll feeds pieces and flushes.
func scanAll(syn Syntax, pieces []string) (string, []Call) {
	s := NewScanner(syn)
	var content strings.Builder
	var calls []Call
	for _, p := range pieces {
		c, cs := s.Feed(p)
		content.WriteString(c)
		calls = append(calls, cs...)
	}
	c, cs := s.Flush()
	content.WriteString(c)
	return content.String(), append(calls, cs...)
}

func render(content string, calls []Call) string {
	var b strings.Builder
	fmt.Fprintf(&b, "content %q\n", content)
	for _, c := range calls {
		fmt.Fprintf(&b, "call %s %s\n", c.Name, c.Arguments)
	}
	return b.String()
}

// TestScanGolden: each answer scanned whole matches the golden output,
// and so does every split of it in two and in three, and byte by byte.
func TestScanGolden(t *testing.T) {
	var golden strings.Builder
	for _, tc := range scanCases {
		want := render(scanAll(tc.syn, []string{tc.text}))
		fmt.Fprintf(&golden, "== %s\n%s", tc.name, want)
		for i := 0; i <= len(tc.text); i++ {
			if got := render(scanAll(tc.syn, []string{tc.text[:i], tc.text[i:]})); got != want {
				t.Fatalf("%s split at %d:\n%s\nwhole:\n%s", tc.name, i, got, want)
			}
			for j := i; j <= len(tc.text); j += 7 {
				if got := render(scanAll(tc.syn, []string{tc.text[:i], tc.text[i:j], tc.text[j:]})); got != want {
					t.Fatalf("%s split at %d and %d:\n%s\nwhole:\n%s", tc.name, i, j, got, want)
				}
			}
		}
		bytes := make([]string, len(tc.text))
		for i := 0; i < len(tc.text); i++ {
			bytes[i] = tc.text[i : i+1]
		}
		if got := render(scanAll(tc.syn, bytes)); got != want {
			t.Fatalf("%s byte by byte:\n%s\nwhole:\n%s", tc.name, got, want)
		}
	}
	stagestest.Golden(t, "scan", []byte(golden.String()))
}

// A call written by FormatCalls scans back to itself, in every syntax
// that is scanned.
func TestFormatCallsScansBack(t *testing.T) {
	calls := []Call{
		{Name: "get_weather", Arguments: `{"city":"Paris","when":{"days":[1,2]},"metric":true,"note":null,"t":-1.5}`},
		{Name: "now", Arguments: `{}`},
	}
	for _, syn := range []Syntax{Hermes, ToolCode, Llama3, Gemma4} {
		text := FormatCalls(syn, calls)
		content, got := scanAll(syn, []string{text})
		if content != "" || render("", got) != render("", calls) {
			t.Errorf("%s: %q scans to %q %v", syn, text, content, got)
		}
	}
}

// TestDetect covers the template's part; package family's test covers
// each architecture's.
func TestDetect(t *testing.T) {
	for _, tc := range []struct {
		family   Syntax
		template string
		want     Syntax
	}{
		{Harmony, "", Harmony},
		{Harmony, "{{ '<tool_call>' }}", Harmony},
		{Hermes, "{{ '<|im_start|>' }}", Hermes},
		{Hermes, "{{ '<tool_call>' }}", Hermes},
		{Hermes, "<|start_header_id|>ipython<|end_header_id|>", Llama3},
		{ToolCode, "<start_of_turn>", ToolCode},
		{ToolCode, "{{ '<|tool_call>call:' }}", Gemma4},
		{ToolCode, "", ToolCode},
		{NoSyntax, "", Hermes},
		{NoSyntax, "{{ '<|python_tag|>' }}", Llama3},
	} {
		if got := Detect(tc.family, tc.template); got != tc.want {
			t.Errorf("Detect(%s, %q) = %s, want %s", tc.family, tc.template, got, tc.want)
		}
	}
}

func TestConstrain(t *testing.T) {
	tools := []Tool{
		{Name: "get_weather", Parameters: []byte(`{"type":"object","properties":{"city":{"type":"string"}},"required":["city"]}`)},
		{Name: "now"},
	}
	for _, c := range []Choice{{Mode: Auto}, {Mode: NoCalls}} {
		if f, err := Constrain(Hermes, tools, c, true); f != nil || err != nil {
			t.Fatalf("%v forces %v %v", c, f, err)
		}
	}
	f, err := Constrain(Hermes, tools, Choice{Mode: Named, Name: "get_weather"}, true)
	if err != nil || len(f.Calls) != 1 || !f.Parallel {
		t.Fatalf("%+v %v", f, err)
	}
	// The forced text with any arguments valid against the schema is a
	// call of that tool.
	ct := f.Calls[0]
	text := ct.Prefix + `{"city": "Paris"}` + ct.Suffix
	if _, calls := scanAll(Hermes, []string{text}); len(calls) != 1 || calls[0].Name != "get_weather" || string(ct.Schema) != string(tools[0].Parameters) {
		t.Fatalf("%q scans to %v", text, calls)
	}
	for _, syn := range []Syntax{ToolCode, Llama3} {
		f, err := Constrain(syn, tools, Choice{Mode: Required}, true)
		if err != nil || len(f.Calls) != 2 || f.Parallel != (syn == ToolCode) {
			t.Fatalf("%s: %+v %v", syn, f, err)
		}
		var parts []string
		for _, ct := range f.Calls {
			parts = append(parts, ct.Prefix+`{}`+ct.Suffix)
		}
		sep := f.Separator
		if !f.Parallel {
			parts = parts[:1]
		}
		if _, calls := scanAll(syn, []string{strings.Join(parts, sep)}); len(calls) != len(parts) {
			t.Fatalf("%s: forced text scans to %v", syn, calls)
		}
	}
	f, err = Constrain(Harmony, tools, Choice{Mode: Named, Name: "now"}, true)
	if err != nil || f.Parallel || f.Calls[0].Prefix != "<|channel|>commentary to=functions.now <|constrain|>json<|message|>" || f.Calls[0].Suffix != "<|call|>" {
		t.Fatalf("harmony: %+v %v", f, err)
	}
	want := "start: call\ncall: call_0\n" +
		`call_0: <|channel|> "commentary to=functions.now " <|constrain|> "json" <|message|> args_0 <|call|>` + "\n" +
		`args_0: %json {"type":"object","properties":{},"additionalProperties":false}` + "\n"
	if got := f.Lark(); got != want {
		t.Fatalf("harmony grammar:\n%s\nwant:\n%s", got, want)
	}
	f, _ = Constrain(Hermes, tools, Choice{Mode: Required}, true)
	want = "start: call (\"\\n\" call)*\ncall: call_0 | call_1\n" +
		`call_0: "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": " args_0 "}\n</tool_call>"` + "\n" +
		`args_0: %json {"type":"object","properties":{"city":{"type":"string"}},"required":["city"]}` + "\n" +
		`call_1: "<tool_call>\n{\"name\": \"now\", \"arguments\": " args_1 "}\n</tool_call>"` + "\n" +
		`args_1: %json {"type":"object","properties":{},"additionalProperties":false}` + "\n"
	if got := f.Lark(); got != want {
		t.Fatalf("hermes grammar:\n%s\nwant:\n%s", got, want)
	}
	if _, err := Constrain(Gemma4, tools, Choice{Mode: Required}, true); err == nil {
		t.Fatal("Gemma 4's notation described by a JSON schema")
	}
	if _, err := Constrain(Hermes, tools, Choice{Mode: Named, Name: "nope"}, true); err == nil {
		t.Fatal("a tool that is not offered forced")
	}
}

// The preamble lists every tool's schema and shows the syntax's call.
func TestPreamble(t *testing.T) {
	tools := []Tool{{Name: "get_weather", Description: "Weather of a city.", Parameters: []byte(`{"type": "object", "properties": {"city": {"type": "string"}}}`)}}
	for _, syn := range []Syntax{Hermes, ToolCode, Llama3, Gemma4} {
		p := Preamble(syn, tools, true)
		if !strings.Contains(p, `{"type":"function","function":{"name":"get_weather","description":"Weather of a city.","parameters":{"type":"object","properties":{"city":{"type":"string"}}}}}`) ||
			!strings.Contains(p, "at most one function") {
			t.Errorf("%s preamble:\n%s", syn, p)
		}
	}
}
