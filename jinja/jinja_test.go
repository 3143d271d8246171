package jinja

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// The Python-derived expectations live in testdata/cases.json (see
// fixtures_test.go); the tests here cover what only the Go API has:
// positions, value conversion, limits and concurrency.

func TestErrorPositions(t *testing.T) {
	cases := []struct {
		name      string
		src       string
		vars      map[string]any
		kind      error
		line, col int
	}{
		{"syntax on second line", "ok\n{{ 1 + }}", nil, ErrSyntax, 2, 8},
		{"unknown tag", "{% if x %}\n  {% frob %}\n{% endif %}", nil, ErrSyntax, 2, 6},
		{"unclosed block", "{% for x in y %}\nbody", nil, ErrSyntax, 2, 5},
		// Runtime errors point at the failing operator: the dot of an
		// attribute, the parenthesis of a call, the keyword of a statement.
		{"undefined attribute", "a\n\n  {{ missing.attr }}", nil, ErrUndefined, 3, 13},
		{"type error in loop", "x\n{% for m in none %}{% endfor %}", nil, ErrType, 2, 4},
		{"raise_exception", "{{ raise_exception('boom') }}", nil, ErrRaised, 1, 19},
		{"security", "{{ l.append(1) }}", map[string]any{"l": []any{}}, ErrSecurity, 1, 12},
		{"unicode column", "é€{{ 1 // 0 }}", nil, ErrValue, 1, 8},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			tmpl, err := Parse(c.src)
			if err == nil {
				_, err = tmpl.Render(c.vars)
			}
			var e *Error
			if !errors.As(err, &e) {
				t.Fatalf("want *Error, got %v", err)
			}
			if !errors.Is(err, c.kind) {
				t.Fatalf("want kind %v, got %v", c.kind, err)
			}
			if e.Line != c.line || e.Col != c.col {
				t.Fatalf("want line %d column %d, got %d:%d (%v)", c.line, c.col, e.Line, e.Col, err)
			}
			if !strings.Contains(err.Error(), "line") {
				t.Fatalf("message lacks the position: %v", err)
			}
		})
	}
}

func TestValueConversion(t *testing.T) {
	ordered, err := DecodeJSON([]byte(`{"b": 1, "a": {"d": 1.0, "c": [1, 2.5, null, true]}}`))
	if err != nil {
		t.Fatal(err)
	}
	type custom struct{ X int }
	cases := []struct {
		name string
		src  string
		val  any
		want string
		err  error
	}{
		{"json keeps key order and 1.0", "{{ v|tojson }}", ordered, `{"b": 1, "a": {"d": 1.0, "c": [1, 2.5, null, true]}}`, nil},
		{"raw message", "{{ v.z }}{{ v|tojson }}", json.RawMessage(`{"z": "é", "y": []}`), `é{"z": "é", "y": []}`, nil},
		{"go map sorted", "{{ v|tojson }}", map[string]any{"z": 1, "a": 2, "m": 3}, `{"a": 2, "m": 3, "z": 1}`, nil},
		{"typed map", "{{ v }}", map[string]string{"k": "v"}, `{'k': 'v'}`, nil},
		{"typed slice", "{{ v }}", []string{"a", "b"}, `['a', 'b']`, nil},
		{"slice of maps", "{{ v[0].k }}", []map[string]any{{"k": "x"}}, `x`, nil},
		{"ints", "{{ v }}", []any{int8(1), uint16(2), 3, int64(4)}, `[1, 2, 3, 4]`, nil},
		{"float32 prints as Python float", "{{ v }}", float32(0.5), `0.5`, nil},
		{"nil slice is None", "{{ v }}", []string(nil), `None`, nil},
		{"tuple", "{{ v }}", Tuple{"a"}, `('a',)`, nil},
		{"dict builder", "{{ v.Keys is defined }}{{ v.one }}", func() any { d := NewDict(); d.Set("one", 1); return d }(), `False1`, nil},
		{"struct rejected", "{{ v }}", custom{1}, ``, ErrType},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			tmpl, err := Parse(c.src)
			if err != nil {
				t.Fatal(err)
			}
			got, err := tmpl.Render(map[string]any{"v": c.val})
			if c.err != nil {
				if !errors.Is(err, c.err) {
					t.Fatalf("want %v, got %q, %v", c.err, got, err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got != c.want {
				t.Fatalf("got %q, want %q", got, c.want)
			}
		})
	}
}

func TestLimits(t *testing.T) {
	small := Limits{MaxSteps: 10000, MaxDepth: 16, MaxOutput: 1000}
	cases := []struct {
		name string
		src  string
		err  error
	}{
		{"steps", "{% for a in range(1000) %}{% for b in range(1000) %}{% endfor %}{% endfor %}", ErrLimit},
		{"recursion", "{% macro m() %}{{ m() }}{% endmacro %}{{ m() }}", ErrLimit},
		{"recursive loop", "{% for x in [1] recursive %}{{ loop([1]) }}{% endfor %}", ErrLimit},
		{"string growth", "{{ 'abc' * 400 }}", ErrLimit},
		{"output growth", "{% for i in range(200) %}0123456789{% endfor %}", ErrLimit},
		{"empty repeat is cheap", "{{ [] * 1000000000000 }}{{ '' * 1000000000000 }}", nil},
		{"within limits", "{% for i in range(10) %}{{ i }}{% endfor %}", nil},
		{"format width", "{{ '%99999999d'|format(1) }}", ErrValue},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			tmpl, err := Parse(c.src)
			if err != nil {
				t.Fatal(err)
			}
			_, err = tmpl.WithLimits(small).Render(nil)
			if c.err == nil && err != nil {
				t.Fatalf("unexpected error: %v", err)
			}
			if c.err != nil && !errors.Is(err, c.err) {
				t.Fatalf("want %v, got %v", c.err, err)
			}
		})
	}
	// The defaults admit what the small limits reject.
	tmpl, _ := Parse("{% for i in range(200) %}0123456789{% endfor %}")
	if out, err := tmpl.Render(nil); err != nil || len(out) != 2000 {
		t.Fatalf("default limits: %d bytes, %v", len(out), err)
	}
}

func TestParserDepthLimit(t *testing.T) {
	src := "{{ " + strings.Repeat("(", 5000) + "1" + strings.Repeat(")", 5000) + " }}"
	if _, err := Parse(src); !errors.Is(err, ErrSyntax) {
		t.Fatalf("want a syntax error for absurd nesting, got %v", err)
	}
}

func TestChatOptions(t *testing.T) {
	const src = "{{ bos_token is defined }}|{{ eos_token }}|{{ tools }}|{{ documents }}|{{ add_generation_prompt }}|" +
		"{{ messages|length }}|{{ extra }}|{{ strftime_now('%Y-%m-%d') }}|{{ tools[0].name if tools else '' }}"
	now := func() time.Time { return time.Date(2024, 2, 29, 10, 0, 0, 0, time.UTC) }
	cases := []struct {
		name string
		o    ChatOptions
		want string
	}{
		{"defaults", ChatOptions{Now: now}, "False||None|None|False|1||2024-02-29|"},
		{"tokens and tools", ChatOptions{BOS: "<s>", EOS: "</s>", AddGenerationPrompt: true, Tools: []any{map[string]any{"name": "t"}}, Now: now},
			"True|</s>|[{'name': 't'}]|None|True|1||2024-02-29|t"},
		{"extra overrides", ChatOptions{Extra: map[string]any{"extra": "x", "eos_token": "E"}, EOS: "</s>", Now: now}, "False|E|None|None|False|1|x|2024-02-29|"},
	}
	msgs := []map[string]any{{"role": "user", "content": "hi"}}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, err := RenderChat(src, msgs, c.o)
			if err != nil {
				t.Fatal(err)
			}
			if got != c.want {
				t.Fatalf("got  %q\nwant %q", got, c.want)
			}
		})
	}
	if _, err := RenderChat("{{ raise_exception('no') }}", msgs, ChatOptions{}); !errors.Is(err, ErrRaised) {
		t.Fatalf("RenderChat must wrap the template error, got %v", err)
	}
}

func TestConcurrentRender(t *testing.T) {
	tmpl, err := Parse("{% set ns = namespace(n=0) %}{% for m in messages %}{% set ns.n = ns.n + m.content|length %}{% endfor %}{{ ns.n }}")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	errs := make(chan error, 16)
	for i := 0; i < 16; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			msgs := []map[string]any{{"content": strings.Repeat("x", i)}}
			got, err := tmpl.RenderChat(msgs, ChatOptions{})
			if err == nil && got != itoaTest(i) {
				err = errors.New("render " + itoaTest(i) + " got " + got)
			}
			if err != nil {
				errs <- err
			}
		}(i)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

func itoaTest(i int) string {
	b, _ := json.Marshal(i)
	return string(b)
}

// BenchmarkRenderGPTOSS measures the heaviest template in the corpus with
// tools, so regressions in the evaluator's per-node cost show up.
func BenchmarkRenderGPTOSS(b *testing.B) {
	src, err := os.ReadFile(filepath.Join("testdata", "templates", "gptoss.jinja"))
	if err != nil {
		b.Fatal(err)
	}
	tmpl, err := Parse(string(src))
	if err != nil {
		b.Fatal(err)
	}
	tools, err := DecodeJSON([]byte(`[{"type": "function", "function": {"name": "get_weather", "description": "Weather.", "parameters": {"type": "object", "properties": {"city": {"type": "string"}, "days": {"type": "integer", "default": 1}}, "required": ["city"]}}}]`))
	if err != nil {
		b.Fatal(err)
	}
	msgs := []map[string]any{{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Weather in Paris?"}}
	o := ChatOptions{AddGenerationPrompt: true, Tools: tools.([]any), Extra: map[string]any{"reasoning_effort": "high"}}
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		if _, err := tmpl.RenderChat(msgs, o); err != nil {
			b.Fatal(err)
		}
	}
}
