package httpapi

import (
	"strconv"
)

// scanner is a hand-written JSON reader for the selection bodies, whose
// cost is dominated by two arrays of up to thousands of i64 hashes.
//
// Why not go-json for these bodies: go-json v0.12.0 copies the input into
// its own buffer and makes every decoded string a copy, and a custom
// UnmarshalJSON (needed to tell an absent array from an empty one while
// reusing a pooled slice) costs one more copy and allocation per field.
// Measured on the 128+128-hash body (5.3 KB) with
// BenchmarkDecodeSelectPaired, which alternates both decoders in one loop
// on this shared 2-core machine: go-json 16.6-20.8 µs and 3 allocs, the
// scanner 11.8-15.3 µs and 0 allocs (1.25-1.7x). The generic path alone
// (one digit at a time through s.int64) was 2.3x slower than go-json: the
// array fast path below is what makes the difference.
//
// Strings without escapes alias the input (the fasthttp request body):
// they are valid until the handler returns, and core copies what it keeps.
// Strings with escapes are decoded into strbuf, owned by the pooled request.
//
// Grammar: RFC 8259. Syntax errors are 400, type errors 422, as axum's Json
// extractor answers.
type scanner struct {
	b      []byte
	i      int
	strbuf []byte
}

// decodeError is a body that cannot be decoded: status 400 (syntax) or 422
// (data: wrong type, missing field).
type decodeError struct {
	status int
	msg    string
}

func (e *decodeError) Error() string { return e.msg }

const (
	syntaxPrefix = "Failed to parse the request body as JSON: "
	dataPrefix   = "Failed to deserialize the JSON body into the target type: "
)

func (s *scanner) syntaxErr(what string) error {
	line, col := s.pos()
	return &decodeError{400, syntaxPrefix + what + " at line " + strconv.Itoa(line) + " column " + strconv.Itoa(col)}
}

func (s *scanner) typeErr(field, what string) error {
	line, col := s.pos()
	msg := dataPrefix
	if field != "" {
		msg += field + ": "
	}
	return &decodeError{422, msg + what + " at line " + strconv.Itoa(line) + " column " + strconv.Itoa(col)}
}

// missingField is serde's "missing field `x`" at the end of the input.
func missingField(b []byte, field string) error {
	s := scanner{b: b, i: len(b)}
	line, col := s.pos()
	return &decodeError{422, dataPrefix + "missing field `" + field + "` at line " + strconv.Itoa(line) + " column " + strconv.Itoa(col)}
}

// pos returns the 1-based line and column of s.i.
func (s *scanner) pos() (line, col int) {
	line, col = 1, 0
	for _, c := range s.b[:min(s.i, len(s.b))] {
		if c == '\n' {
			line, col = line+1, 0
		} else {
			col++
		}
	}
	return line, col
}

func (s *scanner) ws() {
	for s.i < len(s.b) {
		switch s.b[s.i] {
		case ' ', '\t', '\n', '\r':
			s.i++
		default:
			return
		}
	}
}

func (s *scanner) peek() byte {
	s.ws()
	if s.i < len(s.b) {
		return s.b[s.i]
	}
	return 0
}

// end checks that only whitespace follows the top-level value.
func (s *scanner) end() error {
	s.ws()
	if s.i != len(s.b) {
		return s.syntaxErr("trailing characters")
	}
	return nil
}

// object reads an object, calling field for every key with s positioned at
// the value; field must consume the value. A non-object is a type error
// (typeName names the target).
func (s *scanner) object(typeName string, field func(key []byte) error) error {
	switch c := s.peek(); c {
	case '{':
	case 0:
		return s.syntaxErr("EOF while parsing a value")
	default:
		if err := s.skip(); err != nil {
			return err
		}
		return s.typeErr("", "invalid type: "+kindName(c)+", expected "+typeName)
	}
	s.i++
	if s.peek() == '}' {
		s.i++
		return nil
	}
	for {
		if s.peek() != '"' {
			if s.i >= len(s.b) {
				return s.syntaxErr("EOF while parsing an object")
			}
			return s.syntaxErr("key must be a string")
		}
		key, err := s.rawString()
		if err != nil {
			return err
		}
		if s.peek() != ':' {
			return s.syntaxErr("expected `:`")
		}
		s.i++
		s.ws()
		if err := field(key); err != nil {
			return err
		}
		switch s.peek() {
		case ',':
			s.i++
		case '}':
			s.i++
			return nil
		case 0:
			return s.syntaxErr("EOF while parsing an object")
		default:
			return s.syntaxErr("expected `,` or `}`")
		}
	}
}

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

// null consumes a null and reports whether the value was one.
func (s *scanner) null() (bool, error) {
	if s.peek() != 'n' {
		return false, nil
	}
	if len(s.b)-s.i < 4 || string(s.b[s.i:s.i+4]) != "null" {
		return false, s.syntaxErr("expected value")
	}
	s.i += 4
	return true, nil
}

// array reads an array, calling elem for each element with s positioned at
// it. null is reported as set false.
func (s *scanner) array(field, want string, elem func() error) (set bool, err error) {
	if isNull, err := s.null(); isNull || err != nil {
		return false, err
	}
	c := s.peek()
	if c != '[' {
		if c == 0 {
			return false, s.syntaxErr("EOF while parsing a value")
		}
		if err := s.skip(); err != nil {
			return false, err
		}
		return false, s.typeErr(field, "invalid type: "+kindName(c)+", expected "+want)
	}
	s.i++
	if s.peek() == ']' {
		s.i++
		return true, nil
	}
	for {
		if err := elem(); err != nil {
			return false, err
		}
		switch s.peek() {
		case ',':
			s.i++
		case ']':
			s.i++
			return true, nil
		case 0:
			return false, s.syntaxErr("EOF while parsing a list")
		default:
			return false, s.syntaxErr("expected `,` or `]`")
		}
	}
}

// raw skips one value and returns its bytes (for sub-objects decoded with
// go-json).
func (s *scanner) raw() ([]byte, error) {
	s.ws()
	start := s.i
	if err := s.skip(); err != nil {
		return nil, err
	}
	return s.b[start:s.i], nil
}

// skip consumes one value, validating its syntax.
func (s *scanner) skip() error {
	return s.skipDepth(0)
}

func (s *scanner) skipDepth(depth int) error {
	if depth > 128 {
		return s.syntaxErr("recursion limit exceeded")
	}
	switch c := s.peek(); {
	case c == '{':
		return s.object("", func([]byte) error { return s.skipDepth(depth + 1) })
	case c == '[':
		_, err := s.array("", "", func() error { return s.skipDepth(depth + 1) })
		return err
	case c == '"':
		mark := len(s.strbuf)
		_, err := s.rawString()
		s.strbuf = s.strbuf[:mark]
		return err
	case c == 't' || c == 'f':
		_, err := s.boolean("")
		return err
	case c == 'n':
		_, err := s.null()
		return err
	case c == '-' || (c >= '0' && c <= '9'):
		_, _, err := s.number()
		return err
	case c == 0 && s.i >= len(s.b):
		return s.syntaxErr("EOF while parsing a value")
	}
	return s.syntaxErr("expected value")
}
