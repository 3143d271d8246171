package graph

import (
	"testing"

	"github.com/goprovider/provider/engine"
	"github.com/goprovider/provider/jinja"
	"github.com/goprovider/provider/stages"
	"github.com/goprovider/provider/stages/stagestest"
)

// storiesModel is the stories260K tokenizer with a small chat template.
func storiesModel(t testing.TB) stages.Model {
	t.Helper()
	tok := stagestest.Tokenizer(t)
	tmpl, err := jinja.Parse(stagestest.ChatTemplate)
	if err != nil {
		t.Fatal(err)
	}
	return stages.Model{Name: "stories", Architecture: "llama", Tokenizer: tok, ChatTemplate: tmpl, EOS: tok.EOSSet(), ContextLength: 512}
}

var (
	story  = stagestest.Story
	tokens = stagestest.Tokens
)

type play = stagestest.Play

// scripted is a fake engine playing script.
func scripted(script func(engine.Generation) play) *stagestest.Engine {
	return &stagestest.Engine{Script: script}
}
