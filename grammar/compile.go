package grammar

import (
	"bytes"
	"container/list"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"sync"

	"github.com/goprovider/provider/engine"
	"github.com/goprovider/provider/tokenizer"
)

// Kind names the language of a grammar's source.
type Kind string

// Grammar kinds.
const (
	// JSONSchema is a JSON Schema object (draft 2020-12, the subset
	// llguidance compiles): the output is one JSON value it validates.
	JSONSchema Kind = "json_schema"
	// JSONObject is any JSON object; its source is ignored.
	JSONObject Kind = "json_object"
	// Regex is a regular expression in Rust regex syntax that the whole
	// output matches.
	Regex Kind = "regex"
	// Lark is a context-free grammar in llguidance's Lark dialect.
	Lark Kind = "lark"
)

// Errors of Compile.
var (
	// ErrCompile: the grammar engine cannot compile the source (a schema
	// with an unsupported keyword or format, an unsatisfiable schema, a
	// malformed regex). The request is at fault.
	ErrCompile = errors.New("grammar: cannot compile")
	// ErrKind: the kind is not one of this package's.
	ErrKind = errors.New("grammar: unknown grammar kind")
)

// Whitespace is the JSON whitespace allowed at each place JSON allows
// any: up to 8 spaces or tabs, or one line break and an indentation of
// up to 32. Pretty printing fits; a model stuck on blank lines cannot run
// away with its budget.
const Whitespace = `[\x20\x09]{1,8}|\x0D?\x0A[\x20\x09]{0,32}`

// CacheSize is how many compiled grammars a Compiler keeps.
const CacheSize = 32

// Compiler compiles grammars over one model's vocabulary. It keeps the
// CacheSize most recently used grammars by a hash of their kind and
// source, so requests with one schema compile it once. It is safe for
// concurrent use.
type Compiler struct {
	vocab *llgVocab

	mu    sync.Mutex
	lru   *list.List // of *entry, most recent first
	byKey map[[32]byte]*list.Element
	hits  uint64
}

type entry struct {
	key [32]byte
	g   *Grammar
}

// NewCompiler builds llguidance's view of tok's vocabulary (its token
// trie) with eos as the end-of-sequence tokens; it fails only for a
// vocabulary llguidance refuses.
func NewCompiler(tok *tokenizer.Tokenizer, eos []int32) (*Compiler, error) {
	if len(eos) == 0 {
		if id := tok.EOS(); id >= 0 {
			eos = []int32{id}
		}
	}
	v, err := newLLGVocab(tokenBytes(tok, eos), eos)
	if err != nil {
		return nil, err
	}
	return &Compiler{vocab: v, lru: list.New(), byKey: map[[32]byte]*list.Element{}}, nil
}

// VocabSize is the number of token ids a mask covers.
func (c *Compiler) VocabSize() int { return c.vocab.size }

// Compile returns the compiled grammar of source, from the cache when the
// same kind and source were compiled before. An error wraps ErrCompile
// (the source's fault) or ErrKind.
func (c *Compiler) Compile(kind Kind, source []byte) (*Grammar, error) {
	h := sha256.New()
	h.Write([]byte(kind))
	h.Write([]byte{0})
	h.Write(source)
	var key [32]byte
	h.Sum(key[:0])
	c.mu.Lock()
	if el, ok := c.byKey[key]; ok {
		c.lru.MoveToFront(el)
		c.hits++
		c.mu.Unlock()
		return el.Value.(*entry).g, nil
	}
	c.mu.Unlock()
	// Two requests with one new schema may both compile it: the cache
	// keeps one, the other is collected.
	g, err := c.compile(kind, source)
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if el, ok := c.byKey[key]; ok {
		return el.Value.(*entry).g, nil
	}
	c.byKey[key] = c.lru.PushFront(&entry{key: key, g: g})
	for c.lru.Len() > CacheSize {
		el := c.lru.Back()
		c.lru.Remove(el)
		delete(c.byKey, el.Value.(*entry).key)
	}
	return g, nil
}

// Hits counts Compile calls answered from the cache.
func (c *Compiler) Hits() uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.hits
}

func (c *Compiler) compile(kind Kind, source []byte) (*Grammar, error) {
	var typ, data string
	switch kind {
	case JSONSchema:
		s, err := withWhitespace(source)
		if err != nil {
			return nil, err
		}
		typ, data = "json_schema", s
	case JSONObject:
		typ, data = "json_schema", `{"x-guidance":{"whitespace_pattern":`+quote(Whitespace)+`},"type":"object"}`
	case Regex, Lark:
		typ, data = string(kind), string(source)
	default:
		return nil, fmt.Errorf("%w: %q", ErrKind, kind)
	}
	m, err := newLLGMatcher(c.vocab, typ, data)
	if err != nil {
		return nil, err
	}
	return newGrammar(m), nil
}

// withWhitespace puts the Whitespace policy into a schema object that
// sets no llguidance options of its own ("x-guidance", which llguidance
// reads only at the top level). The schema's text is otherwise kept as
// it is: llguidance orders properties as the text does.
func withWhitespace(schema []byte) (string, error) {
	var top map[string]json.RawMessage
	if err := json.Unmarshal(schema, &top); err != nil || top == nil {
		return "", fmt.Errorf("%w: the schema is not a JSON object", ErrCompile)
	}
	if _, ok := top["x-guidance"]; ok {
		return string(schema), nil
	}
	body := bytes.TrimSpace(schema)[1:]
	opts := `{"x-guidance":{"whitespace_pattern":` + quote(Whitespace) + `}`
	if len(top) == 0 {
		return opts + "}", nil
	}
	return opts + "," + string(body), nil
}

func quote(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}

// Grammar is a compiled grammar: a matcher in its start state that each
// generation clones. It is safe for concurrent use and immutable.
type Grammar struct {
	mu    sync.Mutex // llguidance gives no guarantee for concurrent clones
	start *llgMatcher
}

func newGrammar(m *llgMatcher) *Grammar {
	g := &Grammar{start: m}
	freeWith(g, m)
	return g
}

// NewConstraint starts a generation under the grammar: a *Constraint.
func (g *Grammar) NewConstraint() engine.Constraint {
	g.mu.Lock()
	m := g.start.clone()
	g.mu.Unlock()
	return newConstraint(m)
}

// ResponseFormat is Compile for the request pipeline (stages.Grammars):
// kind is "json_object", "json_schema" or "lark" (a forced tool call).
// Every error is the format's fault.
func (c *Compiler) ResponseFormat(kind string, schema []byte) (engine.Grammar, error) {
	switch Kind(kind) {
	case JSONObject, JSONSchema, Lark:
	default:
		return nil, fmt.Errorf("%w: %q", ErrKind, kind)
	}
	g, err := c.Compile(Kind(kind), schema)
	if err != nil {
		return nil, err
	}
	return g, nil
}
