package stages

import (
	"encoding/json"
	"errors"

	"github.com/goprovider/provider/engine"
)

// CodeInvalidSchema: response_format's JSON schema is one the grammar
// engine cannot compile (an unsupported keyword or format, or a schema
// no value satisfies).
const CodeInvalidSchema Code = "invalid_json_schema"

// MaxFormatName bounds json_schema.name, as OpenAI does.
const MaxFormatName = 64

// ResponseFormat is a chat request's response_format when it asks for
// JSON; "text" is no format at all (nil).
type ResponseFormat struct {
	// Type is "json_object" (any JSON object) or "json_schema".
	Type string
	// Name and Strict are json_schema's. The schema is enforced whatever
	// Strict says: constrained decoding never yields output it rejects.
	Name   string
	Strict bool
	// Schema is json_schema.schema as sent: a JSON object, whose
	// property order the output follows.
	Schema json.RawMessage
}

// Grammars compiles response formats into grammars over one model's
// vocabulary (package grammar's Compiler), caching them.
type Grammars interface {
	// ResponseFormat returns the grammar of a format of kind
	// "json_object" or "json_schema" (with its schema), or of a Lark
	// grammar (kind "lark": a forced tool call, ToolChoiceGrammar). An
	// error means the format cannot be compiled: the request's fault.
	ResponseFormat(kind string, schema []byte) (engine.Grammar, error)
}

// parseResponseFormat reads response_format: {"type": "text"},
// {"type": "json_object"} or {"type": "json_schema", "json_schema":
// {"name": ..., "description": ..., "schema": {...}, "strict": bool}}.
// name (1 to MaxFormatName letters, digits, '_' or '-') and schema are
// required.
func parseResponseFormat(raw json.RawMessage) (*ResponseFormat, error) {
	const param = "response_format"
	if isNull(raw) {
		return nil, nil
	}
	rf, err := object(raw, param)
	if err != nil {
		return nil, err
	}
	if err := onlyKeys(rf, keySet(nil, "type", "json_schema"), param); err != nil {
		return nil, err
	}
	var typ string
	if ok, err := get(rf, "type", &typ); err != nil {
		return nil, &Invalid{Code: CodeInvalidType, Param: param, Err: err}
	} else if !ok {
		return nil, invalid(CodeMissing, param)
	}
	js, hasSchema := rf["json_schema"]
	hasSchema = hasSchema && !isNull(js)
	switch typ {
	case "text":
		if hasSchema {
			return nil, invalid(CodeInvalidValue, param)
		}
		return nil, nil
	case "json_object":
		if hasSchema {
			return nil, invalid(CodeInvalidValue, param)
		}
		return &ResponseFormat{Type: typ}, nil
	case "json_schema":
	default:
		return nil, invalid(CodeInvalidValue, param)
	}
	if !hasSchema {
		return nil, invalid(CodeMissing, param)
	}
	f, err := object(js, param)
	if err != nil {
		return nil, err
	}
	if err := onlyKeys(f, keySet(nil, "name", "description", "schema", "strict"), param); err != nil {
		return nil, err
	}
	out := &ResponseFormat{Type: typ}
	var description string
	_, err1 := get(f, "name", &out.Name)
	_, err2 := get(f, "description", &description)
	_, err3 := get(f, "strict", &out.Strict)
	if err := errors.Join(err1, err2, err3); err != nil {
		return nil, &Invalid{Code: CodeInvalidType, Param: param, Err: err}
	}
	if !validFormatName(out.Name) {
		return nil, invalid(CodeInvalidValue, param)
	}
	schema, ok := f["schema"]
	switch {
	case !ok || isNull(schema):
		return nil, invalid(CodeMissing, param)
	case kind(schema) != '{':
		return nil, invalid(CodeInvalidType, param)
	}
	out.Schema = schema
	return out, nil
}

func validFormatName(s string) bool {
	if s == "" || len(s) > MaxFormatName {
		return false
	}
	for _, c := range []byte(s) {
		ok := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-'
		if !ok {
			return false
		}
	}
	return true
}

// formatGrammar compiles the request's response format, if it has one,
// through its model's Grammars. A model without Grammars, or whose output
// has a structure of its own (an OutputParser: gpt-oss's channels), has
// no structured outputs: 400 unsupported_parameter.
//
// A required or named tool_choice is enforced the same way, by the
// grammar of the model's call syntax around the tools' argument schemas
// (ToolChoiceGrammar), from the first generated token; gpt-oss's grammar
// spells its channel tokens, so its output parser is no obstacle. Both a
// forced tool choice and a JSON response format is a 400.
func formatGrammar(req *Request) (engine.Grammar, error) {
	f, m := req.Params.ResponseFormat, req.Model
	tools, err := ToolChoiceGrammar(req.Params, m.Tools)
	if err != nil {
		return nil, err
	}
	if tools != nil {
		if f != nil {
			return nil, invalid(CodeUnsupported, "response_format")
		}
		if m.Grammars == nil {
			return nil, invalid(CodeUnsupported, "tool_choice")
		}
		g, err := m.Grammars.ResponseFormat("lark", tools)
		if err != nil {
			return nil, &Invalid{Code: CodeInvalidSchema, Param: "tools", Err: err}
		}
		return g, nil
	}
	if f == nil {
		return nil, nil
	}
	if m.Grammars == nil || m.NewOutputParser != nil {
		return nil, invalid(CodeUnsupported, "response_format")
	}
	g, err := m.Grammars.ResponseFormat(f.Type, f.Schema)
	if err != nil {
		return nil, &Invalid{Code: CodeInvalidSchema, Param: "response_format", Err: err}
	}
	return g, nil
}
