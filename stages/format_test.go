package stages

import (
	"context"
	"encoding/json"
	"errors"
	"reflect"
	"testing"
	"time"

	"github.com/goprovider/provider/engine"
)

func TestParseResponseFormat(t *testing.T) {
	cat := testCatalog(t)
	const head = `{"model":"stories","messages":[{"role":"user","content":"hi"}],"response_format":`
	tests := []struct {
		name  string
		rf    string
		want  *ResponseFormat
		code  Code
		param string
	}{
		{name: "text", rf: `{"type":"text"}`},
		{name: "null", rf: `null`},
		{name: "json object", rf: `{"type":"json_object"}`, want: &ResponseFormat{Type: "json_object"}},
		{name: "json schema", rf: `{"type":"json_schema","json_schema":{"name":"person_1","description":"who","strict":true,"schema":{"type":"object","properties":{"b":{},"a":{}}}}}`,
			want: &ResponseFormat{Type: "json_schema", Name: "person_1", Strict: true, Schema: json.RawMessage(`{"type":"object","properties":{"b":{},"a":{}}}`)}},
		{name: "not an object", rf: `"json_object"`, code: CodeInvalidType, param: "response_format"},
		{name: "no type", rf: `{}`, code: CodeMissing, param: "response_format"},
		{name: "type not a string", rf: `{"type":1}`, code: CodeInvalidType, param: "response_format"},
		{name: "unknown type", rf: `{"type":"yaml"}`, code: CodeInvalidValue, param: "response_format"},
		{name: "unknown key", rf: `{"type":"json_object","grammar":"x"}`, code: CodeUnknownParameter, param: "response_format"},
		{name: "schema with json_object", rf: `{"type":"json_object","json_schema":{"name":"a","schema":{}}}`, code: CodeInvalidValue, param: "response_format"},
		{name: "json_schema missing", rf: `{"type":"json_schema"}`, code: CodeMissing, param: "response_format"},
		{name: "name missing", rf: `{"type":"json_schema","json_schema":{"schema":{}}}`, code: CodeInvalidValue, param: "response_format"},
		{name: "name with a space", rf: `{"type":"json_schema","json_schema":{"name":"a b","schema":{}}}`, code: CodeInvalidValue, param: "response_format"},
		{name: "schema missing", rf: `{"type":"json_schema","json_schema":{"name":"a"}}`, code: CodeMissing, param: "response_format"},
		{name: "schema not an object", rf: `{"type":"json_schema","json_schema":{"name":"a","schema":true}}`, code: CodeInvalidType, param: "response_format"},
		{name: "strict not a bool", rf: `{"type":"json_schema","json_schema":{"name":"a","schema":{},"strict":"yes"}}`, code: CodeInvalidType, param: "response_format"},
		{name: "unknown json_schema key", rf: `{"type":"json_schema","json_schema":{"name":"a","schema":{},"x":1}}`, code: CodeUnknownParameter, param: "response_format"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			req := &Request{Input: Input{Endpoint: Chat, Body: []byte(head + tc.rf + `}`)}}
			err := (Parse{Models: cat}).Apply(context.Background(), req)
			if tc.code != "" {
				var inv *Invalid
				if !errors.As(err, &inv) || inv.Code != tc.code || inv.Param != tc.param {
					t.Fatalf("err = %v, want (%s, %s)", err, tc.code, tc.param)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got := req.Params.ResponseFormat; !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("format %+v, want %+v", got, tc.want)
			}
		})
	}
}

// formats is a scripted Grammars: it refuses the schemas in bad and
// records what it compiled.
type formats struct {
	bad      string
	compiled []string
}

type fakeGrammar struct{ engine.Grammar }

func (f *formats) ResponseFormat(kind string, schema []byte) (engine.Grammar, error) {
	if string(schema) == f.bad {
		return nil, errors.New("cannot compile")
	}
	f.compiled = append(f.compiled, kind+" "+string(schema))
	return fakeGrammar{}, nil
}

// TestAdmitResponseFormat: Admit compiles a JSON format through the
// model's Grammars into the generation; a schema it refuses is 400
// invalid_json_schema, a model without Grammars or with an output format
// of its own refuses JSON formats.
func TestAdmitResponseFormat(t *testing.T) {
	const body = `{"model":"stories","messages":[{"role":"user","content":"hi"}],"response_format":`
	schema := `{"type":"json_schema","json_schema":{"name":"n","schema":{"type":"integer"}}}`
	tests := []struct {
		name     string
		rf       string
		grammars bool
		parser   bool
		compiled []string
		code     Code
	}{
		{name: "text is unconstrained", rf: `{"type":"text"}`, grammars: true},
		{name: "json object", rf: `{"type":"json_object"}`, grammars: true, compiled: []string{"json_object "}},
		{name: "json schema", rf: schema, grammars: true, compiled: []string{`json_schema {"type":"integer"}`}},
		{name: "schema refused", rf: `{"type":"json_schema","json_schema":{"name":"n","schema":{"bad":1}}}`, grammars: true, code: CodeInvalidSchema},
		{name: "no grammars", rf: schema, code: CodeUnsupported},
		{name: "output parser", rf: schema, grammars: true, parser: true, code: CodeUnsupported},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			m := testModel(t, "stories", testTemplate, 512)
			f := &formats{bad: `{"bad":1}`}
			if tc.grammars {
				m.Grammars = f
			}
			if tc.parser {
				m.NewOutputParser = func() OutputParser { return nil }
			}
			req := &Request{Input: Input{Endpoint: Chat, Body: []byte(body + tc.rf + `}`)}, Received: time.Unix(0, 0), MintedID: "m"}
			if err := (Parse{Models: catalog{"stories": m}}).Apply(context.Background(), req); err != nil {
				t.Fatal(err)
			}
			if err := (Template{}).Apply(context.Background(), req); err != nil {
				t.Fatal(err)
			}
			err := Admit{}.Apply(context.Background(), req)
			if tc.code != "" {
				var inv *Invalid
				if !errors.As(err, &inv) || inv.Code != tc.code || inv.Param != "response_format" {
					t.Fatalf("err = %v, want (%s, response_format)", err, tc.code)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if (req.Generation.Grammar != nil) != (len(tc.compiled) > 0) || !reflect.DeepEqual(f.compiled, tc.compiled) {
				t.Fatalf("grammar %v, compiled %q; want %q", req.Generation.Grammar, f.compiled, tc.compiled)
			}
		})
	}
}
