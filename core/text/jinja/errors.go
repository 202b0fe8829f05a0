package jinja

import (
	"errors"
	"fmt"
)

// Error classes, one sentinel each; every error Parse and Render return
// wraps exactly one of them.
var (
	// ErrSyntax: the template does not parse (jinja2's
	// TemplateSyntaxError), or uses what the subset lacks.
	ErrSyntax = errors.New("jinja: syntax error")
	// ErrRender: rendering failed as jinja2's would (UndefinedError,
	// TypeError, SecurityError, ...).
	ErrRender = errors.New("jinja: render error")
	// ErrRaised: the template called raise_exception (transformers'
	// TemplateError); errors.As to *Raised gives its message.
	ErrRaised = errors.New("jinja: raise_exception")
	// ErrLimit: a render exceeded one of the limits (limits.go), where
	// jinja2 would have run on without bound or far longer.
	ErrLimit = errors.New("jinja: limit exceeded")
)

// Raised is the error of raise_exception(message).
type Raised struct{ Message string }

func (e *Raised) Error() string { return "jinja: raise_exception: " + e.Message }
func (e *Raised) Unwrap() error { return ErrRaised }

// RenderError is a runtime error: Kind is the Python exception jinja2
// would raise ("UndefinedError", "TypeError", ...), Msg its message.
type RenderError struct {
	Kind string
	Msg  string
	Line int
}

func (e *RenderError) Error() string {
	if e.Line > 0 {
		return fmt.Sprintf("jinja: line %d: %s: %s", e.Line, e.Kind, e.Msg)
	}
	return fmt.Sprintf("jinja: %s: %s", e.Kind, e.Msg)
}
func (e *RenderError) Unwrap() error { return ErrRender }

func typeErr(format string, args ...any) error {
	return &RenderError{Kind: "TypeError", Msg: fmt.Sprintf(format, args...)}
}

func valueErr(format string, args ...any) error {
	return &RenderError{Kind: "ValueError", Msg: fmt.Sprintf(format, args...)}
}

type syntaxError struct {
	line int
	msg  string
}

func (e *syntaxError) Error() string {
	return fmt.Sprintf("jinja: syntax error: line %d: %s", e.line, e.msg)
}
func (e *syntaxError) Unwrap() error { return ErrSyntax }

func syntaxErr(line int, format string, args ...any) error {
	return &syntaxError{line: line, msg: fmt.Sprintf(format, args...)}
}

type limitError struct{ what string }

func (e *limitError) Error() string { return "jinja: limit exceeded: " + e.what }
func (e *limitError) Unwrap() error { return ErrLimit }
