package grammar_test

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/santhosh-tekuri/jsonschema/v6"

	"github.com/goprovider/provider/engine"
	"github.com/goprovider/provider/engine/enginetest"
	"github.com/goprovider/provider/grammar"
	"github.com/goprovider/provider/model"
	"github.com/goprovider/provider/sample"
	"github.com/goprovider/provider/tokenizer"
)

// corpusMaxTokens bounds each generation of the corpus: every schema of
// testdata/schemas has outputs far shorter.
const corpusMaxTokens = 1024

// schema is one corpus entry: its source and an independent validator.
type schema struct {
	name   string
	source []byte
	check  *jsonschema.Schema
}

// loadCorpus reads testdata/schemas and compiles each schema with
// santhosh-tekuri/jsonschema (formats asserted), which knows nothing of
// llguidance.
func loadCorpus(t testing.TB) []schema {
	t.Helper()
	paths, err := filepath.Glob(filepath.Join("testdata", "schemas", "*.json"))
	if err != nil || len(paths) < 50 {
		t.Fatalf("the corpus has %d schemas (%v), want at least 50", len(paths), err)
	}
	var out []schema
	for _, p := range paths {
		src, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(src))
		if err != nil {
			t.Fatal(err)
		}
		c := jsonschema.NewCompiler()
		c.AssertFormat()
		url := "file:///" + filepath.Base(p)
		if err := c.AddResource(url, doc); err != nil {
			t.Fatal(err)
		}
		check, err := c.Compile(url)
		if err != nil {
			t.Fatalf("%s: %v", p, err)
		}
		out = append(out, schema{name: strings.TrimSuffix(filepath.Base(p), ".json"), source: src, check: check})
	}
	return out
}

// outcome is one constrained generation of the corpus.
type outcome struct {
	schema string
	temp   float64
	text   string
	reason engine.FinishReason
	err    error
}

// generateCorpus generates one output per schema at temperature temp on
// the model, all rows in one continuous batch.
func generateCorpus(t *testing.T, e *engine.Engine, m *model.Model, c *grammar.Compiler, corpus []schema, temp float64) []outcome {
	t.Helper()
	prompt := m.Tokenizer.Encode("Once upon a time, a little robot wrote down what it knew as JSON:", tokenizer.EncodeOptions{AddSpecial: true})
	outs := make([]outcome, len(corpus))
	var wg sync.WaitGroup
	for i, s := range corpus {
		start := time.Now()
		g, err := c.Compile(grammar.JSONSchema, s.source)
		if err != nil {
			t.Fatalf("%s: %v", s.name, err)
		}
		if d := time.Since(start); d > 100*time.Millisecond {
			t.Logf("%s: compiled in %v", s.name, d)
		}
		seed := uint64(1000 + i)
		gen := engine.Generation{
			ID:          engine.RequestID(fmt.Sprintf("%s@%v", s.name, temp)),
			Prompt:      prompt,
			MaxTokens:   corpusMaxTokens,
			Sampling:    sample.Params{Temperature: temp, Seed: &seed},
			TopLogprobs: -1,
			Grammar:     g,
		}
		ch, err := e.Submit(context.Background(), gen)
		if err != nil {
			t.Fatal(err)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			tokens, last := enginetest.Collect(ch)
			outs[i] = outcome{schema: s.name, temp: temp, text: m.Tokenizer.Decode(tokens), reason: last.Reason, err: last.Err}
		}()
	}
	wg.Wait()
	return outs
}

// TestCorpus generates with stories260K under every schema of the corpus
// at temperature 0 and 1 (seeded) and validates every output with an
// independent validator: each must end because its grammar completed
// ("stop") and validate.
func TestCorpus(t *testing.T) {
	corpus := loadCorpus(t)
	e, m := enginetest.Start(t, enginetest.Stories(), engine.Options{Sched: engine.Config{MaxConcurrent: 32}, KVCapacity: 256 << 20})
	c, err := grammar.NewCompiler(m.Tokenizer, m.Config.EOS)
	if err != nil {
		t.Fatal(err)
	}
	temps := []float64{0, 1}
	var outs []outcome
	for _, temp := range temps {
		outs = append(outs, generateCorpus(t, e, m, c, corpus, temp)...)
	}
	byName := map[string]schema{}
	for _, s := range corpus {
		byName[s.name] = s
	}
	passed := map[float64]int{}
	for _, o := range outs {
		switch {
		case o.err != nil:
			t.Errorf("%s at T=%v: %v", o.schema, o.temp, o.err)
			continue
		case o.reason != engine.FinishStop:
			t.Errorf("%s at T=%v: finished %v before its grammar completed: %q", o.schema, o.temp, o.reason, o.text)
			continue
		}
		v, err := jsonschema.UnmarshalJSON(strings.NewReader(o.text))
		if err == nil {
			err = byName[o.schema].check.Validate(v)
		}
		if err != nil {
			t.Errorf("%s at T=%v: %q does not validate: %v", o.schema, o.temp, o.text, err)
			continue
		}
		passed[o.temp]++
		if testing.Verbose() {
			t.Logf("%s at T=%v: %s", o.schema, o.temp, o.text)
		}
	}
	for _, temp := range temps {
		t.Logf("T=%v: %d of %d outputs valid", temp, passed[temp], len(corpus))
	}
}
