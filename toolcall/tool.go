package toolcall

import (
	"encoding/json"
	"strings"
)

// Tool is a function a request offers the model.
type Tool struct {
	Name        string
	Description string
	// Parameters is the JSON schema of the arguments object, as the
	// request wrote it; nil when the request gave none (no arguments).
	Parameters json.RawMessage
}

// Mode is what a request's tool_choice asks of the model.
type Mode uint8

// Tool choice modes. The zero value is auto, OpenAI's default when tools
// are offered.
const (
	// Auto lets the model answer or call tools.
	Auto Mode = iota
	// NoCalls offers no tools: the model answers in text ("none").
	NoCalls
	// Required makes the model call one or more tools.
	Required
	// Named makes the model call one tool, Choice.Name.
	Named
)

// Choice is a request's tool_choice.
type Choice struct {
	Mode Mode
	// Name is the tool a Named choice calls.
	Name string
}

// Call is one tool call: a call the model made, or one of an earlier turn
// sent back as history.
type Call struct {
	// ID pairs a call with its result; the scanner leaves it empty (ids
	// are minted where the request's identity is known).
	ID   string
	Name string
	// Arguments is a JSON object as text.
	Arguments string
}

// Syntax is how a model writes tool calls.
type Syntax uint8

// Syntaxes (see the package comment). The zero value is none: the model
// has no known way to call tools.
const (
	NoSyntax Syntax = iota
	Hermes
	Llama3
	ToolCode
	Gemma4
	Harmony
)

func (s Syntax) String() string {
	switch s {
	case Hermes:
		return "hermes"
	case Llama3:
		return "llama3"
	case ToolCode:
		return "tool_code"
	case Gemma4:
		return "gemma4"
	case Harmony:
		return "harmony"
	}
	return "none"
}

// Detect picks the call syntax of a model from its family's syntax
// (package family's ToolSyntax; NoSyntax for a model outside the
// registry) and its chat template's source. Harmony's calls are structure
// tokens, so no template changes them; otherwise a template that writes a
// syntax's markers is trained on it, else the family decides, and Hermes,
// the most widely trained convention, is the rest's.
func Detect(family Syntax, template string) Syntax {
	switch {
	case family == Harmony:
		return Harmony
	case strings.Contains(template, "<|tool_call>"):
		return Gemma4
	case strings.Contains(template, "<tool_call>"):
		return Hermes
	case strings.Contains(template, "<|python_tag|>"),
		strings.Contains(template, "<|start_header_id|>ipython<|end_header_id|>"):
		return Llama3
	case family != NoSyntax:
		return family
	}
	return Hermes
}

// Markers are the texts of a syntax that a vocabulary may hold as control
// tokens, which a tokenizer renders as nothing: whoever feeds a Scanner
// must feed their text when the model generates them.
func (s Syntax) Markers() []string {
	switch s {
	case Hermes:
		return []string{hermesOpen, hermesClose}
	case Llama3:
		return []string{pythonTag}
	case Gemma4:
		return []string{gemma4Open, gemma4Close, gemma4Quote}
	}
	return nil
}

// Scans reports whether calls of the syntax are found in text by a
// Scanner (every syntax but harmony's, whose calls are structure tokens).
func (s Syntax) Scans() bool { return s != NoSyntax && s != Harmony }

// The markers of the text syntaxes.
const (
	hermesOpen   = "<tool_call>"
	hermesClose  = "</tool_call>"
	pythonTag    = "<|python_tag|>"
	gemma4Open   = "<|tool_call>"
	gemma4Close  = "<tool_call|>"
	gemma4Quote  = `<|"|>`
	toolCodeOpen = "```tool_code"
	fence        = "```"
)
