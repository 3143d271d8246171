package jinja

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// fuzzLimits keep each fuzz iteration fast; the point is that hostile
// templates end with an error instead of running away.
var fuzzLimits = Limits{MaxSteps: 20000, MaxDepth: 32, MaxOutput: 1 << 16}

func fuzzVars() map[string]any {
	return map[string]any{
		"messages": []any{
			map[string]any{"role": "system", "content": "sys"},
			map[string]any{"role": "user", "content": "hi {{ x }}"},
			map[string]any{"role": "assistant", "content": "", "tool_calls": []any{map[string]any{"function": map[string]any{"name": "f", "arguments": map[string]any{"a": 1}}}}},
		},
		"tools":                 []any{map[string]any{"type": "function", "function": map[string]any{"name": "f"}}},
		"add_generation_prompt": true,
		"bos_token":             "<s>",
		"n":                     int64(3),
		"f":                     1.5,
	}
}

// FuzzParse feeds arbitrary sources through the parser and, when they
// parse, the evaluator: neither may panic or exceed its limits silently.
func FuzzParse(f *testing.F) {
	files, _ := filepath.Glob(filepath.Join("testdata", "templates", "*.jinja"))
	for _, p := range files {
		if src, err := os.ReadFile(p); err == nil {
			f.Add(string(src))
		}
	}
	for _, s := range []string{
		"{% for i in range(10) %}{{ i }}{% endfor %}",
		"{% macro m(n) %}{{ m(n) }}{% endmacro %}{{ m(1) }}",
		"{{ 'a' * 1000000 }}",
		"{% for a in range(1000) %}{% for b in range(1000) %}{% endfor %}{% endfor %}",
		"{{ ((((((((((1)))))))))) }}",
		"{% set ns = namespace(x=[]) %}{{ ns.x|tojson(indent=2) }}",
		"{%- if messages[0].role == 'system' -%}{{ messages[0].content|trim }}{%- endif -%}",
		"{{ x[::-1]|join(',') }}{{ '%s' % n }}{{ '{}'.format(f) }}",
		"{% raw %}{{{% endraw %}{# c #}{{- 1 -}}",
	} {
		f.Add(s)
	}
	vars := fuzzVars()
	f.Fuzz(func(t *testing.T, src string) {
		// Parse and render off the test goroutine so a runaway input is
		// reported with its source instead of stalling the fuzzer.
		done := make(chan error, 1)
		go func() { done <- parseAndRender(src, vars) }()
		select {
		case err := <-done:
			if err != nil {
				t.Fatal(err)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("template did not finish within 5s: %q", src)
		}
	})
}

// parseAndRender returns a non-nil error only for a broken invariant.
func parseAndRender(src string, vars map[string]any) error {
	tmpl, err := Parse(src)
	if err != nil {
		var e *Error
		if !errors.As(err, &e) {
			return fmt.Errorf("parse error is not *Error: %v", err)
		}
		return nil
	}
	out, err := tmpl.WithLimits(fuzzLimits).Render(vars)
	if err != nil {
		var e *Error
		if !errors.As(err, &e) {
			return fmt.Errorf("render error is not *Error: %v", err)
		}
	}
	if len(out) > fuzzLimits.MaxOutput {
		return fmt.Errorf("output of %d bytes exceeds the limit", len(out))
	}
	return nil
}
