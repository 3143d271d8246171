package stages

import (
	"testing"

	"github.com/goprovider/provider/jinja"
	"github.com/goprovider/provider/stages/stagestest"
)

// testTemplate writes BOS itself, like most chat templates.
const testTemplate = stagestest.ChatTemplate

// strictTemplate refuses conversations that do not start with a user turn.
const strictTemplate = `{% if messages[0]['role'] != 'user' %}{{ raise_exception('first turn must be the user') }}{% endif %}` +
	`{% for m in messages %}{{ m['role'] }}: {{ m['content'] }}
{% endfor %}`

type catalog map[string]*Model

func (c catalog) Lookup(name string) (*Model, bool) {
	m, ok := c[name]
	return m, ok
}

func testModel(t testing.TB, name, template string, ctxLen int) *Model {
	t.Helper()
	tok := stagestest.Tokenizer(t)
	m := &Model{Name: name, Architecture: "llama", Tokenizer: tok, EOS: tok.EOSSet(), ContextLength: ctxLen}
	if template != "" {
		var err error
		m.ChatTemplate, err = jinja.Parse(template)
		if err != nil {
			t.Fatal(err)
		}
	}
	return m
}

// testCatalog serves "stories" (chat template writing BOS, context 512),
// "strict" (a template that raises) and "raw" (no template).
func testCatalog(t testing.TB) catalog {
	return catalog{
		"stories": testModel(t, "stories", testTemplate, 512),
		"strict":  testModel(t, "strict", strictTemplate, 512),
		"raw":     testModel(t, "raw", "", 0),
	}
}
