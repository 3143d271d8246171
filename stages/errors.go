package stages

import (
	"errors"
	"fmt"
)

// Error classes of the request stages; the server maps them to HTTP.
var (
	// ErrInvalid: the request is malformed or asks for something we cannot
	// honour. Every *Invalid matches it.
	ErrInvalid = errors.New("invalid request")
	// ErrUnknownModel: no registered model has the requested name.
	ErrUnknownModel = errors.New("unknown model")
	// ErrTemplate: the model's chat template failed for a reason that is
	// not the conversation's fault.
	ErrTemplate = errors.New("chat template failed")
	// ErrStreamEnded: the engine closed a stream without a final event.
	ErrStreamEnded = errors.New("generation stream ended without a final event")
)

// Code names why a request is invalid. Codes are fixed strings, part of
// the API: clients see them in the error body.
type Code string

// Invalid request codes.
const (
	CodeInvalidJSON      Code = "invalid_json"
	CodeInvalidType      Code = "invalid_type"
	CodeInvalidValue     Code = "invalid_value"
	CodeMissing          Code = "missing_required_parameter"
	CodeUnknownParameter Code = "unknown_parameter"
	CodeUnsupported      Code = "unsupported_parameter"
	CodeUnsupportedMedia Code = "unsupported_media"
	CodeContextLength    Code = "context_length_exceeded"
	CodeEmptyPrompt      Code = "empty_prompt"
	CodeNoChatTemplate   Code = "no_chat_template"
	CodeTemplateRejected Code = "template_rejected"
)

// Invalid is a request the client must change. Param is the JSON name of
// the offending parameter, always one of this package's constants and
// never text taken from the request; it is empty when no single parameter
// is at fault (or when naming it would echo the request, as for an
// unknown field).
type Invalid struct {
	Code  Code
	Param string
	// Err is the underlying cause, for errors.Is/As only: it may quote the
	// request and must never reach a client or a log.
	Err error
}

func (e *Invalid) Error() string {
	if e.Param == "" {
		return fmt.Sprintf("invalid request: %s", e.Code)
	}
	return fmt.Sprintf("invalid request: %s (%s)", e.Code, e.Param)
}

// Is makes every *Invalid match ErrInvalid.
func (e *Invalid) Is(target error) bool { return target == ErrInvalid }

// Unwrap exposes the cause.
func (e *Invalid) Unwrap() error { return e.Err }

func invalid(code Code, param string) *Invalid { return &Invalid{Code: code, Param: param} }
