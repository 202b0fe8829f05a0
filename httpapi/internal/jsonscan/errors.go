package jsonscan

import (
	"strconv"
	"unicode/utf8"
)

// Class is the kind of a decoding error, as serde_json classifies it.
type Class uint8

const (
	// Syntax: the input is not JSON (serde_json's Category::Syntax and
	// Category::Eof), number out of range included.
	Syntax Class = iota + 1
	// Data: the input is JSON of the wrong shape for the target (serde's
	// Category::Data): a wrong type, a value out of range, a missing or
	// duplicate field, an unknown variant.
	Data
)

// Error is a document that cannot be decoded. Msg is serde_json's text
// (path prefix, message, position), without any prefix of the caller's.
type Error struct {
	Class Class
	Msg   string
}

func (e *Error) Error() string { return e.Msg }

// at is the position suffix of serde_json's messages.
func (s *Scanner) at() string {
	line, col := s.pos()
	return " at line " + strconv.Itoa(line) + " column " + strconv.Itoa(col)
}

// SyntaxErr returns the syntax error what at the current offset.
func (s *Scanner) SyntaxErr(what string) error {
	return &Error{Syntax, what + s.at()}
}

// TypeErr returns the data error what at the current offset; field, when
// not empty, is the path of the value ("a.b") and prefixes the message as
// serde_path_to_error does.
func (s *Scanner) TypeErr(field, what string) error {
	msg := what
	if field != "" {
		msg = field + ": " + what
	}
	return &Error{Data, msg + s.at()}
}

// MissingField is serde's "missing field `x`" of the top-level object that
// ends just before b[end], where serde_json reports it.
func MissingField(b []byte, end int, field string) error {
	s := Scanner{b: b, i: end}
	return s.TypeErr("", "missing field `"+field+"`")
}

// MaxEcho bounds how many bytes of the input an error message quotes (a
// number literal, an enum value): serde quotes them whole, but a 4 MiB
// digit string must not come back in an error.
const MaxEcho = 256

// Echo returns b for quoting in an error message: b itself up to MaxEcho
// bytes, else its first MaxEcho bytes, cut back to a rune boundary, and an
// ellipsis.
func Echo(b []byte) string {
	if len(b) <= MaxEcho {
		return string(b)
	}
	n := MaxEcho
	for n > MaxEcho-utf8.UTFMax && !utf8.RuneStart(b[n]) {
		n--
	}
	return string(b[:n]) + "…"
}

// kindName is serde's name of the kind of value that starts with c, for
// "invalid type: X, expected Y".
func kindName(c byte) string {
	switch {
	case c == '"':
		return "string"
	case c == '[':
		return "sequence"
	case c == '{':
		return "map"
	case c == 't' || c == 'f':
		return "boolean"
	case c == 'n':
		return "null"
	case c == '-' || (c >= '0' && c <= '9'):
		return "number"
	}
	return "value"
}

// invalidType is serde's "invalid type" data error for the value that
// starts with c where want was expected, after the value is skipped (a
// syntax error in it comes first, as serde_json reads it whole).
func (s *Scanner) invalidType(c byte, field, want string) error {
	if err := s.Skip(); err != nil {
		return err
	}
	return s.TypeErr(field, "invalid type: "+kindName(c)+", expected "+want)
}
