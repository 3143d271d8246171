package server

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/goprovider/provider/engine"
	"github.com/goprovider/provider/engine/enginetest"
	"github.com/goprovider/provider/family"
	"github.com/goprovider/provider/harmony/harmonytest"
	"github.com/goprovider/provider/model"
	"github.com/goprovider/provider/stages/stagestest"
	"github.com/goprovider/provider/tokenizer"
)

const weatherTools = `[{"type":"function","function":{"name":"get_weather","description":"Current weather of a city.",` +
	`"parameters":{"type":"object","properties":{"city":{"type":"string"}},"required":["city"]}}}]`

// The scripted model's replies: a call when the prompt holds no result
// yet, then an answer from the result.
const (
	smolCall   = "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>"
	smolAnswer = "It is 21 degrees and clear in Paris."
)

// openSmolLM2 opens SmolLM2-135M-Instruct for its tokenizer, chat
// template and EOS; its weights are never uploaded.
func openSmolLM2(t *testing.T) *model.Model {
	t.Helper()
	m, err := model.Open(enginetest.SmolLM2())
	if err != nil {
		t.Fatalf("%v (run make setup)", err)
	}
	t.Cleanup(func() { m.Close() })
	return m
}

// smolHarness serves SmolLM2's real tokenizer and chat template (which
// knows nothing of tools) over a scripted engine: the parser path runs on
// the model's real tokens without the model having to choose to call.
// reply picks the text of each generation from its decoded prompt.
func smolHarness(t *testing.T, reply func(prompt string) string) (*harness, *stagestest.Engine, *tokenizer.Tokenizer) {
	t.Helper()
	m := openSmolLM2(t)
	tok := m.Tokenizer
	fake := &stagestest.Engine{Script: func(g engine.Generation) stagestest.Play {
		ids := tok.Encode(reply(promptText(tok, g.Prompt)), tokenizer.EncodeOptions{ParseSpecial: true})
		return stagestest.Play{Events: stagestest.Tokens(g, ids, engine.FinishStop)}
	}}
	h := newHarness(t, Options{}, nil)
	err := h.Register(Model{Name: "smol", Architecture: m.Config.Arch, Tokenizer: tok, ChatTemplate: m.ChatTemplate,
		EOS: m.Config.EOS, ContextLength: 2048, Generator: fake})
	if err != nil {
		t.Fatal(err)
	}
	return h, fake, tok
}

// promptText is a prompt as the template wrote it: control tokens as
// their text (Decode renders them as nothing).
func promptText(tok *tokenizer.Tokenizer, ids []int32) string {
	var b strings.Builder
	start := 0
	for i, id := range ids {
		if tok.IsControl(id) {
			b.WriteString(tok.Decode(ids[start:i]))
			b.WriteString(tok.Token(id))
			start = i + 1
		}
	}
	b.WriteString(tok.Decode(ids[start:]))
	return b.String()
}

func callThenAnswer(prompt string) string {
	if strings.Contains(prompt, "<tool_response>\n{") {
		return smolAnswer
	}
	return smolCall
}

type toolCallJSON struct {
	Index    *int   `json:"index"`
	ID       string `json:"id"`
	Type     string `json:"type"`
	Function struct {
		Name      string  `json:"name"`
		Arguments *string `json:"arguments"`
	} `json:"function"`
}

type chatResponse struct {
	Choices []struct {
		Message struct {
			Content   *string        `json:"content"`
			ToolCalls []toolCallJSON `json:"tool_calls"`
		} `json:"message"`
		FinishReason string `json:"finish_reason"`
	} `json:"choices"`
}

// SmolLM2's template ignores tools: the server tells the model of them in
// a Hermes system preamble, writes earlier calls and results in Hermes
// form, and parses the model's <tool_call> blocks into tool_calls,
// streamed and not.
func TestToolsSmolLM2(t *testing.T) {
	h, fake, tok := smolHarness(t, callThenAnswer)
	user := `{"role":"user","content":"Weather in Paris?"}`
	status, body := h.post(t, "/v1/chat/completions", `{"model":"smol","messages":[`+user+`],"tools":`+weatherTools+`}`)
	var r chatResponse
	if err := json.Unmarshal(body, &r); err != nil || status != 200 {
		t.Fatalf("%d %s", status, body)
	}
	ch := r.Choices[0]
	if ch.FinishReason != "tool_calls" || ch.Message.Content != nil || len(ch.Message.ToolCalls) != 1 {
		t.Fatalf("response %s", body)
	}
	call := ch.Message.ToolCalls[0]
	if call.Type != "function" || call.Function.Name != "get_weather" || *call.Function.Arguments != `{"city":"Paris"}` ||
		!strings.HasPrefix(call.ID, "call_") || call.Index != nil {
		t.Fatalf("call %+v", call)
	}
	prompt := promptText(tok, fake.Submitted()[0].Prompt)
	if !strings.Contains(prompt, "<|im_start|>system\n# Tools") || !strings.Contains(prompt, `"name":"get_weather","description":"Current weather of a city."`) ||
		strings.Contains(prompt, "named SmolLM") {
		t.Fatalf("prompt %q", prompt)
	}

	// Streamed: one call, its id, type and name first, then its arguments.
	status, body = h.post(t, "/v1/chat/completions", `{"model":"smol","stream":true,"messages":[`+user+`],"tools":`+weatherTools+`}`)
	calls, content, finish := streamedCalls(t, body)
	if status != 200 || len(calls) != 1 || calls[0].ID == "" || calls[0].Function.Name != "get_weather" ||
		*calls[0].Function.Arguments != `{"city":"Paris"}` || content != "" || finish != "tool_calls" {
		t.Fatalf("%d %s", status, body)
	}

	// The result goes back: the call and its result reach the prompt, and
	// the answer is text.
	history := fmt.Sprintf(`%s,{"role":"assistant","content":null,"tool_calls":[{"id":%q,"type":"function","function":{"name":"get_weather","arguments":"{\"city\":\"Paris\"}"}}]},`+
		`{"role":"tool","tool_call_id":%q,"content":"{\"temp\": 21, \"sky\": \"clear\"}"}`, user, call.ID, call.ID)
	status, body = h.post(t, "/v1/chat/completions", `{"model":"smol","messages":[`+history+`],"tools":`+weatherTools+`}`)
	r = chatResponse{}
	if err := json.Unmarshal(body, &r); err != nil || status != 200 {
		t.Fatalf("%d %s", status, body)
	}
	if ch := r.Choices[0]; ch.FinishReason != "stop" || ch.Message.Content == nil || *ch.Message.Content != smolAnswer || len(ch.Message.ToolCalls) != 0 {
		t.Fatalf("response %s", body)
	}
	prompt = promptText(tok, fake.Submitted()[2].Prompt)
	want := "<|im_start|>assistant\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\":\"Paris\"}}\n</tool_call><|im_end|>\n" +
		"<|im_start|>user\n<tool_response>\n{\"temp\": 21, \"sky\": \"clear\"}\n</tool_response><|im_end|>\n<|im_start|>assistant\n"
	if !strings.HasSuffix(prompt, want) {
		t.Fatalf("prompt %q\ndoes not end with %q", prompt, want)
	}
}

// streamedCalls reads a chat SSE body: the calls put together from their
// deltas as OpenAI clients do, the content, and the finish reason.
func streamedCalls(t *testing.T, body []byte) ([]toolCallJSON, string, string) {
	t.Helper()
	var calls []toolCallJSON
	var content strings.Builder
	var finish string
	for _, ev := range sseEvents(t, body) {
		if ev == "[DONE]" {
			continue
		}
		var c struct {
			Choices []struct {
				Delta struct {
					Content   *string        `json:"content"`
					ToolCalls []toolCallJSON `json:"tool_calls"`
				} `json:"delta"`
				FinishReason *string `json:"finish_reason"`
			} `json:"choices"`
		}
		if err := json.Unmarshal([]byte(ev), &c); err != nil {
			t.Fatalf("chunk %s: %v", ev, err)
		}
		for _, ch := range c.Choices {
			if ch.Delta.Content != nil {
				content.WriteString(*ch.Delta.Content)
			}
			for _, d := range ch.Delta.ToolCalls {
				if d.Index == nil || d.Function.Arguments == nil {
					t.Fatalf("tool call delta without index or arguments: %s", ev)
				}
				if *d.Index == len(calls) {
					if d.ID == "" || d.Type != "function" || d.Function.Name == "" || *d.Function.Arguments != "" {
						t.Fatalf("first delta of a call: %s", ev)
					}
					calls = append(calls, d)
					continue
				}
				if *d.Index != len(calls)-1 || d.ID != "" || d.Function.Name != "" {
					t.Fatalf("arguments delta: %s", ev)
				}
				args := *calls[*d.Index].Function.Arguments + *d.Function.Arguments
				calls[*d.Index].Function.Arguments = &args
			}
			if ch.FinishReason != nil {
				finish = *ch.FinishReason
			}
		}
	}
	return calls, content.String(), finish
}

// Output that does not parse as a call is returned as text; with
// tool_choice "none" no tool is offered and nothing is parsed.
func TestToolsMalformedAndNone(t *testing.T) {
	bad := "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": Paris}}\n</tool_call>"
	h, fake, tok := smolHarness(t, func(string) string { return bad })
	for _, choice := range []string{`"auto"`, `"none"`} {
		status, body := h.post(t, "/v1/chat/completions", `{"model":"smol","messages":[{"role":"user","content":"Weather?"}],"tools":`+weatherTools+`,"tool_choice":`+choice+`}`)
		var r chatResponse
		if err := json.Unmarshal(body, &r); err != nil || status != 200 {
			t.Fatalf("%d %s", status, body)
		}
		if ch := r.Choices[0]; ch.Message.Content == nil || *ch.Message.Content != bad || len(ch.Message.ToolCalls) != 0 || ch.FinishReason != "stop" {
			t.Fatalf("%s: %s", choice, body)
		}
	}
	if prompt := promptText(tok, fake.Submitted()[1].Prompt); strings.Contains(prompt, "get_weather") {
		t.Fatalf("tool_choice none offered the tools: %q", prompt)
	}
}

// realSmol serves the real SmolLM2 engine as "smol".
func realSmol(t *testing.T) *harness {
	t.Helper()
	e, m := enginetest.Start(t, enginetest.SmolLM2(), engine.Options{})
	h := newHarness(t, Options{Architectures: family.Supported()}, nil)
	err := h.Register(Model{Name: "smol", Architecture: m.Config.Arch, Tokenizer: m.Tokenizer, ChatTemplate: m.ChatTemplate,
		EOS: m.Config.EOS, ContextLength: m.Config.ContextLength, Generator: e})
	if err != nil {
		t.Fatal(err)
	}
	return h
}

// A required or named tool_choice is enforced by constrained decoding:
// the real SmolLM2, which does not call tools on its own (see
// TestRealSmolLM2Tools), answers with exactly one well-formed call of the
// tool, streamed and not (parallel_tool_calls false: with parallel calls
// allowed the small model repeats its call until max_tokens); asked for a
// tool and a JSON response format at once, the request is a 400.
func TestRealSmolLM2ForcedToolChoice(t *testing.T) {
	h := realSmol(t)
	user := `{"role":"user","content":"What is the weather in Paris?"}`
	for _, choice := range []string{`"required"`, `{"type":"function","function":{"name":"get_weather"}}`} {
		for _, stream := range []bool{false, true} {
			body := fmt.Sprintf(`{"model":"smol","max_tokens":96,"stream":%v,"messages":[%s],"tools":%s,"tool_choice":%s,"parallel_tool_calls":false}`, stream, user, weatherTools, choice)
			status, raw := h.post(t, "/v1/chat/completions", body)
			var calls []toolCallJSON
			var finish string
			if stream {
				calls, _, finish = streamedCalls(t, raw)
			} else {
				var r chatResponse
				if err := json.Unmarshal(raw, &r); err != nil || len(r.Choices) != 1 {
					t.Fatalf("%d %s", status, raw)
				}
				calls, finish = r.Choices[0].Message.ToolCalls, r.Choices[0].FinishReason
			}
			if status != 200 || finish != "tool_calls" || len(calls) != 1 || calls[0].Function.Name != "get_weather" {
				t.Fatalf("%s stream=%v: %d %s", choice, stream, status, raw)
			}
			var args struct {
				City *string `json:"city"`
			}
			if err := json.Unmarshal([]byte(*calls[0].Function.Arguments), &args); err != nil || args.City == nil {
				t.Fatalf("%s stream=%v: arguments %q do not fit the schema: %v", choice, stream, *calls[0].Function.Arguments, err)
			}
		}
	}
	status, raw := h.post(t, "/v1/chat/completions", `{"model":"smol","messages":[`+user+`],"tools":`+weatherTools+`,"tool_choice":"required","response_format":{"type":"json_object"}}`)
	if e := decodeError(t, raw); status != 400 || e.Error.Param == nil || *e.Error.Param != "response_format" {
		t.Fatalf("tool_choice and response_format: %d %s", status, raw)
	}
}

// gpt-oss: tools are rendered by its template in the developer message's
// functions namespace, the harmony call comes back as tool_calls, and a
// call and its result sent back are rendered as harmony messages.
func TestToolsGPTOSS(t *testing.T) {
	tok := harmonytest.Tokenizer(t)
	reply := func(prompt string) string {
		if strings.Contains(prompt, "<|start|>functions.get_weather to=assistant") {
			return harmonytest.Reply
		}
		return "<|channel|>analysis<|message|>Need the weather.<|end|><|start|>assistant to=functions.get_weather<|channel|>commentary <|constrain|>json<|message|>{\"city\": \"Paris\"}<|call|>"
	}
	fake := &stagestest.Engine{Script: func(g engine.Generation) stagestest.Play {
		ids := harmonytest.Encode(tok, reply(promptText(tok, g.Prompt)))
		return stagestest.Play{Events: stagestest.Tokens(g, ids[:len(ids)-1], engine.FinishStop)} // the engine consumes the end token
	}}
	h := newHarness(t, Options{}, nil)
	if err := h.Register(Model{Name: "gpt-oss", Architecture: family.GPTOSS.Arch, Tokenizer: tok, EOS: tok.EOSSet(), ContextLength: 4096, Generator: fake}); err != nil {
		t.Fatal(err)
	}
	user := `{"role":"user","content":"Weather in Paris?"}`
	status, body := h.post(t, "/v1/chat/completions", `{"model":"gpt-oss","stream":true,"messages":[`+user+`],"tools":`+weatherTools+`}`)
	calls, content, finish := streamedCalls(t, body)
	if status != 200 || len(calls) != 1 || calls[0].Function.Name != "get_weather" || *calls[0].Function.Arguments != `{"city":"Paris"}` ||
		content != "" || finish != "tool_calls" {
		t.Fatalf("%d %s", status, body)
	}
	prompt := promptText(tok, fake.Submitted()[0].Prompt)
	if !strings.Contains(prompt, "<|start|>developer<|message|># Tools\n\n## functions\n\nnamespace functions {\n\n// Current weather of a city.\ntype get_weather = (_: {\ncity: string,\n}) => any;") {
		t.Fatalf("prompt %q", prompt)
	}
	history := fmt.Sprintf(`%s,{"role":"assistant","content":null,"tool_calls":[{"id":%q,"type":"function","function":{"name":"get_weather","arguments":"{\"city\":\"Paris\"}"}}]},`+
		`{"role":"tool","tool_call_id":%q,"content":"sunny"}`, user, calls[0].ID, calls[0].ID)
	status, body = h.post(t, "/v1/chat/completions", `{"model":"gpt-oss","messages":[`+history+`],"tools":`+weatherTools+`}`)
	var r chatResponse
	if err := json.Unmarshal(body, &r); err != nil || status != 200 || r.Choices[0].FinishReason != "stop" || *r.Choices[0].Message.Content != harmonytest.ReplyContent {
		t.Fatalf("%d %s", status, body)
	}
	prompt = promptText(tok, fake.Submitted()[1].Prompt)
	want := `<|start|>assistant to=functions.get_weather<|channel|>commentary json<|message|>{"city": "Paris"}<|call|>` +
		`<|start|>functions.get_weather to=assistant<|channel|>commentary<|message|>"sunny"<|end|><|start|>assistant`
	if !strings.HasSuffix(prompt, want) {
		t.Fatalf("prompt %q\ndoes not end with %q", prompt, want)
	}
}

// The real SmolLM2 answers a request with tools and a result turn: the
// tools and the turn reach its prompt (it is longer than without them),
// and whatever the model writes comes back as a well-formed answer.
func TestRealSmolLM2Tools(t *testing.T) {
	h := realSmol(t)
	history := `{"role":"user","content":"What is the weather in Paris?"},` +
		`{"role":"assistant","tool_calls":[{"id":"call_1","type":"function","function":{"name":"get_weather","arguments":"{\"city\":\"Paris\"}"}}]},` +
		`{"role":"tool","tool_call_id":"call_1","content":"{\"temp\": 21}"}`
	ask := func(body string) (int, string) {
		status, raw := h.post(t, "/v1/chat/completions", body)
		var r struct {
			chatResponse
			Usage struct {
				PromptTokens int `json:"prompt_tokens"`
			} `json:"usage"`
		}
		if err := json.Unmarshal(raw, &r); err != nil || status != 200 {
			t.Fatalf("%d %s", status, raw)
		}
		switch f := r.Choices[0].FinishReason; f {
		case "stop", "length", "tool_calls":
		default:
			t.Fatalf("finish %q: %s", f, raw)
		}
		return r.Usage.PromptTokens, string(raw)
	}
	with, answer := ask(`{"model":"smol","max_tokens":12,"messages":[` + history + `],"tools":` + weatherTools + `}`)
	without, _ := ask(`{"model":"smol","max_tokens":12,"messages":[{"role":"user","content":"What is the weather in Paris?"}]}`)
	if with <= without+40 {
		t.Fatalf("prompt of %d tokens with tools and a result, %d without", with, without)
	}
	t.Logf("%d prompt tokens with tools; answer %s", with, answer)
}

// The official OpenAI Python client offers tools, gets the call (streamed
// and not), sends the result back and gets the answer.
func TestOpenAIPythonClientTools(t *testing.T) {
	deps, err := filepath.Abs("../.deps/py-openai")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(deps, "openai")); err != nil {
		t.Fatalf("the openai package is missing from %s: run `make setup`", deps)
	}
	h, _, _ := smolHarness(t, callThenAnswer)
	cmd := exec.Command("python3", "testdata/openai_tools.py", h.http.URL+"/v1", "smol", smolAnswer)
	cmd.Env = append(os.Environ(), "PYTHONPATH="+deps)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("openai client: %v\n%s", err, out)
	}
	t.Logf("%s", out)
}
