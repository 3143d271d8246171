package grammar_test

import (
	"errors"
	"slices"
	"testing"

	"github.com/goprovider/provider/grammar"
	"github.com/goprovider/provider/tokenizer"
)

// handVocab is a SentencePiece vocabulary small enough to check masks by
// hand: every token's text is listed, "</s>" (2) is the end of sequence.
var handVocab = []string{
	"<unk>", "<s>", "</s>", "{", "}", "\"", "a", "b", ":", ",",
	"true", "false", "1", "0", "▁", "{\"", "\":", "<0x0A>", "null", "ab",
	"x",
}

func handTokenizer(t *testing.T) *tokenizer.Tokenizer {
	t.Helper()
	types := make([]int32, len(handVocab))
	for i := range types {
		types[i] = tokenizer.TypeNormal
	}
	types[0], types[1], types[2], types[17] = tokenizer.TypeUnknown, tokenizer.TypeControl, tokenizer.TypeControl, tokenizer.TypeByte
	tok, err := tokenizer.New(tokenizer.Vocab{Model: "llama", Tokens: handVocab, Types: types, BOS: 1, EOS: 2, UNK: 0, PAD: -1, EOT: -1})
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

// allowed lists the texts of the tokens a mask allows.
func allowed(mask []uint32) []string {
	var out []string
	for i, text := range handVocab {
		if i/32 < len(mask) && mask[i/32]>>(i%32)&1 != 0 {
			out = append(out, text)
		}
	}
	return out
}

// TestMaskByHand walks grammars token by token over handVocab and checks
// each mask against the set worked out by hand. No whitespace may open or
// close a value; "▁" (a space) and "<0x0A>" (a newline) are JSON
// whitespace inside one.
func TestMaskByHand(t *testing.T) {
	type step struct {
		want []string // the tokens allowed before take
		take string
		done bool // Accept(take) reports the grammar complete
	}
	cases := []struct {
		name   string
		kind   grammar.Kind
		source string
		steps  []step
		final  []string // allowed after the last step
	}{
		{"boolean", grammar.JSONSchema, `{"type":"boolean"}`,
			[]step{{want: []string{"true", "false"}, take: "false", done: true}},
			[]string{"</s>"}},
		{"enum of strings", grammar.JSONSchema, `{"enum":["a","ab"]}`,
			[]step{
				{want: []string{"\""}, take: "\""},
				{want: []string{"a", "ab"}, take: "a"},
				{want: []string{"\"", "b"}, take: "\"", done: true},
			},
			[]string{"</s>"}},
		{"integer may go on or end", grammar.JSONSchema, `{"type":"integer"}`,
			[]step{{want: []string{"1", "0"}, take: "1"}},
			[]string{"</s>", "1", "0"}},
		{"object with one required key", grammar.JSONSchema,
			`{"type":"object","properties":{"a":{"type":"integer"}},"required":["a"],"additionalProperties":false}`,
			[]step{
				{want: []string{"{", "{\""}, take: "{"},
				{want: []string{"\"", "▁", "<0x0A>"}, take: "▁"},
				// One gap's whitespace is one lexeme: spaces may go on.
				{want: []string{"\"", "▁"}, take: "\""},
				{want: []string{"a"}, take: "a"},
				{want: []string{"\"", "\":"}, take: "\":"},
				{want: []string{"1", "0", "▁", "<0x0A>"}, take: "1"},
				{want: []string{"}", "1", "0", "▁", "<0x0A>"}, take: "}", done: true},
			},
			[]string{"</s>"}},
		{"json object", grammar.JSONObject, ``,
			[]step{
				{want: []string{"{", "{\""}, take: "{"},
				// `{":` opens a key that starts with a colon.
				{want: []string{"}", "\"", "\":", "▁", "<0x0A>"}, take: "}", done: true},
			},
			[]string{"</s>"}},
		{"at most 8 spaces", grammar.JSONSchema, `{"type":"object","additionalProperties":false}`,
			append([]step{{want: []string{"{"}, take: "{"}, {want: []string{"}", "▁", "<0x0A>"}, take: "▁"}},
				slices.Repeat([]step{{want: []string{"}", "▁"}, take: "▁"}}, 7)...),
			[]string{"}"}},
		{"one line break and an indentation of at most 32", grammar.JSONSchema, `{"type":"object","additionalProperties":false}`,
			append([]step{{want: []string{"{"}, take: "{"}, {want: []string{"}", "▁", "<0x0A>"}, take: "<0x0A>"}},
				slices.Repeat([]step{{want: []string{"}", "▁"}, take: "▁"}}, 32)...),
			[]string{"}"}},
		{"regex", grammar.Regex, `a+b`,
			[]step{
				{want: []string{"a", "ab"}, take: "a"},
				{want: []string{"a", "b", "ab"}, take: "ab", done: true},
			},
			[]string{"</s>"}},
	}
	tok := handTokenizer(t)
	c, err := grammar.NewCompiler(tok, []int32{2})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			g, err := c.Compile(tc.kind, []byte(tc.source))
			if err != nil {
				t.Fatal(err)
			}
			con := g.NewConstraint()
			defer con.Close()
			for i, st := range tc.steps {
				mask, err := con.Mask()
				if err != nil {
					t.Fatal(err)
				}
				if got := allowed(mask); !sameSet(got, st.want) {
					t.Fatalf("step %d: allowed %q, want %q", i, got, st.want)
				}
				id, ok := tok.TokenID(st.take)
				if !ok {
					t.Fatalf("no token %q", st.take)
				}
				done, err := con.Accept(id)
				if err != nil || done != st.done {
					t.Fatalf("step %d: Accept(%q) = %v, %v; want done %v", i, st.take, done, err, st.done)
				}
			}
			mask, err := con.Mask()
			if err != nil {
				t.Fatal(err)
			}
			if got := allowed(mask); !sameSet(got, tc.final) {
				t.Fatalf("at the end: allowed %q, want %q", got, tc.final)
			}
		})
	}
}

func sameSet(a, b []string) bool {
	a, b = slices.Clone(a), slices.Clone(b)
	slices.Sort(a)
	slices.Sort(b)
	return slices.Equal(a, b)
}

// TestAcceptRefusesWhatTheMaskForbids: a token outside the mask is an
// error, never silently accepted.
func TestAcceptRefusesWhatTheMaskForbids(t *testing.T) {
	tok := handTokenizer(t)
	c, err := grammar.NewCompiler(tok, []int32{2})
	if err != nil {
		t.Fatal(err)
	}
	g, err := c.Compile(grammar.JSONSchema, []byte(`{"type":"boolean"}`))
	if err != nil {
		t.Fatal(err)
	}
	con := g.NewConstraint()
	defer con.Close()
	if _, err := con.Accept(3); err == nil { // "{"
		t.Fatal("Accept of a forbidden token succeeded")
	}
}

// TestCompileErrors: what llguidance cannot compile is ErrCompile, and the
// cache answers a repeated schema.
func TestCompileErrors(t *testing.T) {
	tok := handTokenizer(t)
	c, err := grammar.NewCompiler(tok, []int32{2})
	if err != nil {
		t.Fatal(err)
	}
	for _, bad := range []string{
		`{"type":"string","format":"no-such-format"}`,
		`{"type":"integer","minimum":5,"maximum":1}`,
		`{"$ref":"#/$defs/missing"}`,
		`{"type":"object","properties":{"a":{"type":"string","pattern":"(?=a)"}}}`,
		`[1, 2]`,
		`{"type":`,
	} {
		if _, err := c.Compile(grammar.JSONSchema, []byte(bad)); !errors.Is(err, grammar.ErrCompile) {
			t.Errorf("%s: err %v, want ErrCompile", bad, err)
		}
	}
	if _, err := c.Compile("yaml", nil); !errors.Is(err, grammar.ErrKind) {
		t.Errorf("unknown kind: err %v, want ErrKind", err)
	}
	src := []byte(`{"type":"boolean"}`)
	g1, _ := c.Compile(grammar.JSONSchema, src)
	g2, _ := c.Compile(grammar.JSONSchema, src)
	if g1 != g2 || c.Hits() != 1 {
		t.Errorf("a repeated schema was compiled again (hits %d)", c.Hits())
	}
}
