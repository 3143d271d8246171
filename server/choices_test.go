package server

import (
	"bytes"
	"encoding/json"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"testing"

	"github.com/goprovider/provider/engine"
	"github.com/goprovider/provider/stages/stagestest"
)

// choiceTexts reads a response's choices, streamed or not: each index's
// text (chat content or completion text) and finish reason, and the usage.
func choiceTexts(t *testing.T, body []byte, stream bool) ([]string, []string, map[string]any) {
	t.Helper()
	type choice struct {
		Index        int                       `json:"index"`
		Text         string                    `json:"text"`
		Message      *struct{ Content string } `json:"message"`
		Delta        *struct{ Content string } `json:"delta"`
		FinishReason *string                   `json:"finish_reason"`
	}
	type response struct {
		Choices []choice       `json:"choices"`
		Usage   map[string]any `json:"usage"`
	}
	var texts, finishes []string
	var usage map[string]any
	add := func(r response) {
		for _, c := range r.Choices {
			for len(texts) <= c.Index {
				texts, finishes = append(texts, ""), append(finishes, "")
			}
			texts[c.Index] += c.Text
			if c.Message != nil {
				texts[c.Index] += c.Message.Content
			}
			if c.Delta != nil {
				texts[c.Index] += c.Delta.Content
			}
			if c.FinishReason != nil && *c.FinishReason != "" {
				if finishes[c.Index] != "" {
					t.Fatalf("choice %d finished twice: %s", c.Index, body)
				}
				finishes[c.Index] = *c.FinishReason
			}
		}
		if r.Usage != nil {
			usage = r.Usage
		}
	}
	if !stream {
		var r response
		if err := json.Unmarshal(body, &r); err != nil {
			t.Fatalf("%v: %s", err, body)
		}
		add(r)
		return texts, finishes, usage
	}
	events := sseEvents(t, body)
	if len(events) == 0 || events[len(events)-1] != "[DONE]" {
		t.Fatalf("stream does not end with [DONE]: %s", body)
	}
	for _, e := range events[:len(events)-1] {
		var r response
		if err := json.Unmarshal([]byte(e), &r); err != nil {
			t.Fatalf("%v: %s", err, e)
		}
		add(r)
	}
	return texts, finishes, usage
}

// n choices and lists of prompts through the server, streamed and not,
// against the scripted engine: every choice has its index, its text and
// finish, and the usage counts the prompt once and every completion.
func TestChoicesThroughTheServer(t *testing.T) {
	fake := &stagestest.Engine{Script: func(g engine.Generation) stagestest.Play {
		// Each choice says as many story tokens as its id's suffix + 2.
		n := 2
		if _, k, ok := strings.Cut(string(g.ID), "#"); ok {
			fmt.Sscan(k, &n)
			n += 2
		}
		return stagestest.Play{Events: stagestest.Tokens(g, stagestest.Story[:n], engine.FinishLength)}
	}}
	h := newHarness(t, Options{}, fake)
	words := []string{"Once upon", "Once upon a", "Once upon a time", "Once upon a time,", "Once upon a time, there", "Once upon a time, there was"}
	tests := []struct {
		name   string
		path   string
		body   string
		texts  []string
		prompt float64
	}{
		{"chat n=3", "/v1/chat/completions", `{"model":"stories","messages":[{"role":"user","content":"x"}],"n":3}`, words[:3], 22},
		{"completion n=2", "/v1/completions", `{"model":"stories","prompt":[1,5,6],"n":2}`, words[:2], 3},
		{"two prompts", "/v1/completions", `{"model":"stories","prompt":[[1,5,6],[1,7]]}`, words[:2], 5},
		{"three prompts, n=2", "/v1/completions", `{"model":"stories","prompt":[[1,5],[1,6,7],[1]],"n":2}`, words[:6], 2 + 3 + 1},
	}
	for _, tc := range tests {
		for _, stream := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s stream=%v", tc.name, stream), func(t *testing.T) {
				body := tc.body
				if stream {
					body = strings.TrimSuffix(body, "}") + `,"stream":true,"stream_options":{"include_usage":true}}`
				}
				status, b := h.post(t, tc.path, body)
				if status != 200 {
					t.Fatalf("status %d: %s", status, b)
				}
				texts, finishes, usage := choiceTexts(t, b, stream)
				if !slices.Equal(texts, tc.texts) {
					t.Fatalf("texts %q, want %q", texts, tc.texts)
				}
				for i, f := range finishes {
					if f != "length" {
						t.Fatalf("choice %d finish %q", i, f)
					}
				}
				completion := 0
				for i := range tc.texts {
					completion += i + 2
				}
				if usage["prompt_tokens"] != tc.prompt || usage["completion_tokens"] != float64(completion) {
					t.Fatalf("usage %v, want prompt %v completion %d", usage, tc.prompt, completion)
				}
			})
		}
	}
}

// Unknown fields are served, named (never valued) in the request's log
// line and counted.
func TestIgnoredFieldsAreLoggedByName(t *testing.T) {
	var buf bytes.Buffer
	h := newHarness(t, Options{Logger: slog.New(slog.NewJSONHandler(&buf, nil))}, storyEngine())
	status, body := h.post(t, "/v1/completions", `{"model":"stories","prompt":"x","max_tokens":2,"typical_p":"SECRET","odd name":1,"guided_json":{"SECRET":1}}`)
	if status != 200 {
		t.Fatalf("status %d: %s", status, body)
	}
	var rec struct {
		Msg     string   `json:"msg"`
		Ignored []string `json:"ignored_fields"`
	}
	for line := range bytes.Lines(buf.Bytes()) {
		if err := json.Unmarshal(line, &rec); err != nil {
			t.Fatalf("%v: %s", err, line)
		}
		if rec.Msg == "request" {
			break
		}
	}
	if !slices.Equal(rec.Ignored, []string{"guided_json", "other", "typical_p"}) || bytes.Contains(buf.Bytes(), []byte("SECRET")) {
		t.Fatalf("log line: %s", buf.String())
	}
	_, metrics := h.get(t, "/metrics")
	for _, want := range []string{`provider_ignored_fields_total{field="guided_json"} 1`, `provider_ignored_fields_total{field="other"} 1`, `provider_ignored_fields_total{field="typical_p"} 1`} {
		if !strings.Contains(string(metrics), want) {
			t.Errorf("metrics lack %s", want)
		}
	}
}

// realTexts posts a completion to the real model and returns its choices'
// texts.
func realTexts(t *testing.T, h *harness, body string) []string {
	t.Helper()
	status, b := h.post(t, "/v1/completions", body)
	if status != 200 {
		t.Fatalf("status %d: %s", status, b)
	}
	texts, _, _ := choiceTexts(t, b, strings.Contains(body, `"stream":true`))
	return texts
}

// n=4 on the real model: at temperature 0 the four choices are the greedy
// text; at temperature 1 with a seed, choice i is what a lone request with
// seed + i gets, the four are not all alike, and a repeat (streamed) gives
// the same four.
func TestRealChoices(t *testing.T) {
	h, e := realServer(t, engine.Options{Sched: engine.Config{MaxConcurrent: 8}})
	const head = `{"model":"stories","prompt":"Once upon a time","max_tokens":24`
	greedy := realTexts(t, h, head+`}`)[0]
	if got := realTexts(t, h, head+`,"n":4,"temperature":0}`); !slices.Equal(got, []string{greedy, greedy, greedy, greedy}) {
		t.Fatalf("temperature 0, n=4: %q, want 4 x %q", got, greedy)
	}
	seeded := realTexts(t, h, head+`,"n":4,"temperature":1,"seed":42}`)
	if len(seeded) != 4 {
		t.Fatalf("%d choices", len(seeded))
	}
	for i, text := range seeded {
		if alone := realTexts(t, h, head+fmt.Sprintf(`,"temperature":1,"seed":%d}`, 42+i))[0]; text != alone {
			t.Errorf("choice %d: %q, alone with seed %d: %q", i, text, 42+i, alone)
		}
	}
	if slices.Equal(seeded, []string{seeded[0], seeded[0], seeded[0], seeded[0]}) {
		t.Fatalf("four seeds gave one text: %q", seeded[0])
	}
	if again := realTexts(t, h, head+`,"n":4,"temperature":1,"seed":42,"stream":true}`); !slices.Equal(again, seeded) {
		t.Fatalf("repeat: %q, first %q", again, seeded)
	}
	waitIdle(t, e)
}

// The choices of one prompt share its full blocks through the prefix
// cache: the first prefills them, the other three adopt them (three hits
// of one 256-token block each), and all four greedy texts agree.
func TestRealChoicesShareThePromptBlocks(t *testing.T) {
	h, e := realServer(t, engine.Options{Prefix: engine.PrefixOptions{Budget: 16 << 20}, Sched: engine.Config{MaxConcurrent: 8}})
	ids := make([]string, 300)
	for i := range ids {
		ids[i] = fmt.Sprint(3 + i*7%400)
	}
	texts := realTexts(t, h, `{"model":"stories","prompt":[`+strings.Join(ids, ",")+`],"max_tokens":4,"n":4}`)
	if len(texts) != 4 || !slices.Equal(texts, []string{texts[0], texts[0], texts[0], texts[0]}) {
		t.Fatalf("texts %q", texts)
	}
	_, metrics := h.get(t, "/metrics")
	for _, want := range []string{`provider_prefix_cache_hits_total{model="stories"} 3`, `provider_prefix_cache_misses_total{model="stories"} 1`,
		`provider_prefix_cache_tokens_saved_total{model="stories"} 768`} {
		if !strings.Contains(string(metrics), want) {
			t.Errorf("metrics lack %q", want)
		}
	}
	waitIdle(t, e)
}

// The sampling knobs reach the real model's sampler: a +100 bias makes a
// token the greedy choice every time, and a frequency penalty changes the
// greedy text of a model that repeats itself.
func TestRealSamplingKnobs(t *testing.T) {
	h, _ := realServer(t, engine.Options{})
	const head = `{"model":"stories","prompt":"Once upon a time","temperature":0`
	// 426 is ".".
	if got := realTexts(t, h, head+`,"max_tokens":5,"logit_bias":{"426":100}}`)[0]; got != "....." {
		t.Fatalf("biased text %q", got)
	}
	plain := realTexts(t, h, head+`,"max_tokens":40}`)[0]
	for _, knob := range []string{`"frequency_penalty":2`, `"presence_penalty":2`, `"repetition_penalty":1.5`} {
		if got := realTexts(t, h, head+`,"max_tokens":40,`+knob+`}`)[0]; got == plain {
			t.Errorf("%s left the greedy text as it was: %q", knob, got)
		}
	}
}
