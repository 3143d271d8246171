package jinja

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// The golden cases come from scripts/gen_jinja_fixtures.py, which renders
// the same templates and variables with Python jinja2 configured as
// transformers configures it.

var errorKinds = map[string]error{
	"syntax":    ErrSyntax,
	"undefined": ErrUndefined,
	"raised":    ErrRaised,
	"type":      ErrType,
	"value":     ErrValue,
	"security":  ErrSecurity,
	"runtime":   ErrRuntime,
}

// divergences are golden cases this package deliberately does not match,
// with the error it reports instead. Keep this list short and documented.
var divergences = map[string]error{
	// '\N{BULLET}' needs the Unicode character-name table.
	"edge/string_escape_named": ErrUnsupported,
}

type goldenCase struct {
	name, template, source string
	vars                   *Dict
	expected               string
	errKind                string
	errMsg                 string
}

type goldenFile struct {
	now       time.Time
	cases     []goldenCase
	snippets  []goldenCase
	templates map[string]string
}

func loadGolden(t *testing.T) *goldenFile {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("testdata", "cases.json"))
	if err != nil {
		t.Fatalf("read golden cases: %v", err)
	}
	v, err := DecodeJSON(data)
	if err != nil {
		t.Fatalf("decode golden cases: %v", err)
	}
	root := v.(*Dict)
	nowStr, _ := root.Get("now")
	now, err := time.Parse("2006-01-02T15:04:05.999999", nowStr.(string))
	if err != nil {
		t.Fatalf("parse golden clock: %v", err)
	}
	g := &goldenFile{now: now, templates: map[string]string{}}
	conv := func(key string) []goldenCase {
		raw, _ := root.Get(key)
		var out []goldenCase
		for _, item := range raw.([]any) {
			d := item.(*Dict)
			c := goldenCase{}
			get := func(k string) string {
				v, _ := d.Get(k)
				s, _ := v.(string)
				return s
			}
			c.name, c.template, c.source = get("name"), get("template"), get("source")
			c.expected, c.errKind, c.errMsg = get("expected"), get("error"), get("message")
			vars, _ := d.Get("vars")
			c.vars = vars.(*Dict)
			out = append(out, c)
		}
		return out
	}
	g.cases, g.snippets = conv("cases"), conv("snippets")
	for _, c := range g.cases {
		if _, ok := g.templates[c.template]; ok {
			continue
		}
		src, err := os.ReadFile(filepath.Join("testdata", "templates", c.template+".jinja"))
		if err != nil {
			t.Fatalf("read template %s: %v", c.template, err)
		}
		g.templates[c.template] = string(src)
	}
	return g
}

func varsMap(d *Dict) map[string]any {
	m := map[string]any{}
	for i, k := range d.keys {
		m[k.(string)] = d.vals[i]
	}
	return m
}

func checkOutcome(t *testing.T, c goldenCase, got string, err error) {
	t.Helper()
	if kind, ok := divergences[c.name]; ok {
		if !errors.Is(err, kind) {
			t.Fatalf("known divergence: want %v, got output %q, error %v", kind, got, err)
		}
		return
	}
	if c.errKind != "" {
		kind, ok := errorKinds[c.errKind]
		if !ok {
			t.Fatalf("golden error class %q has no Go kind", c.errKind)
		}
		if err == nil {
			t.Fatalf("want %s error (%s), got output %q", c.errKind, c.errMsg, got)
		}
		if !errors.Is(err, kind) {
			t.Fatalf("want %s error (%s), got %v", c.errKind, c.errMsg, err)
		}
		return
	}
	if err != nil {
		t.Fatalf("unexpected error: %v", err)
	}
	if got != c.expected {
		t.Fatalf("output mismatch\n got: %q\nwant: %q", got, c.expected)
	}
}

// TestGoldenSnippets checks the semantics table (whitespace control,
// undefined, loops, filters, tests, methods) against jinja2's output.
func TestGoldenSnippets(t *testing.T) {
	g := loadGolden(t)
	for _, c := range g.snippets {
		t.Run(c.name, func(t *testing.T) {
			tmpl, err := Parse(c.source)
			if err != nil {
				checkOutcome(t, c, "", err)
				return
			}
			got, err := tmpl.RenderWithClock(varsMap(c.vars), func() time.Time { return g.now })
			checkOutcome(t, c, got, err)
		})
	}
}

// TestGoldenChatTemplates renders the real chat templates through
// RenderChat, the entry point the provider uses.
func TestGoldenChatTemplates(t *testing.T) {
	g := loadGolden(t)
	parsed := map[string]*Template{}
	for name, src := range g.templates {
		tmpl, err := Parse(src)
		if err != nil {
			t.Fatalf("parse %s: %v", name, err)
		}
		parsed[name] = tmpl
	}
	for _, c := range g.cases {
		t.Run(c.name, func(t *testing.T) {
			o := ChatOptions{Now: func() time.Time { return g.now }, Extra: map[string]any{}}
			var messages []map[string]any
			for i, k := range c.vars.keys {
				v := c.vars.vals[i]
				switch k {
				case "messages":
					for _, m := range v.([]any) {
						messages = append(messages, varsMap(m.(*Dict)))
					}
				case "add_generation_prompt":
					o.AddGenerationPrompt = v.(bool)
				case "bos_token":
					o.BOS = v.(string)
				case "eos_token":
					o.EOS = v.(string)
				case "tools":
					if v != nil {
						o.Tools = v.([]any)
					}
				case "documents":
					if v != nil {
						o.Documents = v.([]any)
					}
				default:
					o.Extra[k.(string)] = v
				}
			}
			got, err := parsed[c.template].RenderChat(messages, o)
			checkOutcome(t, c, got, err)
		})
	}
}
