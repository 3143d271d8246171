package jinja

import (
	"errors"
	"fmt"
)

// Error kinds, one per class of Python exception jinja2 raises for the same
// template; test with errors.Is.
var (
	// ErrSyntax: TemplateSyntaxError (the template does not parse).
	ErrSyntax = errors.New("template syntax error")
	// ErrUndefined: UndefinedError (an undefined value was used, not just printed).
	ErrUndefined = errors.New("undefined value")
	// ErrRaised: the template called raise_exception.
	ErrRaised = errors.New("template raised an exception")
	// ErrType: Python TypeError (wrong operand or argument types).
	ErrType = errors.New("type error")
	// ErrValue: Python ValueError, ArithmeticError or LookupError.
	ErrValue = errors.New("value error")
	// ErrSecurity: the sandbox refused an unsafe attribute or mutation.
	ErrSecurity = errors.New("sandbox security error")
	// ErrRuntime: TemplateRuntimeError (bad filter arguments and the like).
	ErrRuntime = errors.New("template runtime error")
	// ErrLimit: a Limits bound was exceeded; jinja2 has no counterpart.
	ErrLimit = errors.New("template resource limit exceeded")
	// ErrUnsupported: a construct this package does not implement.
	ErrUnsupported = errors.New("unsupported template construct")
)

// Error is a failure to parse or render a template.
type Error struct {
	Kind error  // one of the Err* sentinels
	Msg  string // jinja2-style message, e.g. "'x' is undefined"
	Line int    // 1-based template line, 0 when unknown
	Col  int    // 1-based column in runes, 0 when unknown
}

func (e *Error) Error() string {
	if e.Line > 0 {
		return fmt.Sprintf("jinja: %v at line %d, column %d: %s", e.Kind, e.Line, e.Col, e.Msg)
	}
	return fmt.Sprintf("jinja: %v: %s", e.Kind, e.Msg)
}

// Unwrap exposes the kind so callers can use errors.Is(err, ErrUndefined).
func (e *Error) Unwrap() error { return e.Kind }

// pyErr is an error raised while evaluating; the position is attached by the
// statement or expression that was being evaluated when it surfaced.
func newErr(kind error, format string, args ...any) *Error {
	return &Error{Kind: kind, Msg: fmt.Sprintf(format, args...)}
}

func typeErr(format string, args ...any) *Error  { return newErr(ErrType, format, args...) }
func valueErr(format string, args ...any) *Error { return newErr(ErrValue, format, args...) }

// at fills in the position of err if it has none yet, so the innermost
// failing node reports its own location.
func at(err error, p pos) error {
	var e *Error
	if errors.As(err, &e) {
		if e.Line == 0 {
			e.Line, e.Col = p.line, p.col
		}
		return err
	}
	return &Error{Kind: ErrRuntime, Msg: err.Error(), Line: p.line, Col: p.col}
}

// pos is a location in the template source.
type pos struct{ line, col int }
