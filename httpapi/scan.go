package httpapi

import (
	"strconv"
	"unicode/utf8"
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
// extractor answers. Keys match field names exactly (serde_json is
// case-sensitive), a known field given twice is serde's 422 "duplicate
// field", unknown fields are skipped, and every string, keys and skipped
// values included, must be valid UTF-8.
type scanner struct {
	b      []byte
	i      int
	strbuf []byte
	// keyEnd is the offset just past the last object key and the
	// whitespace after it, where serde_json reports a duplicate field.
	keyEnd int
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

// missingField is serde's "missing field `x`" of the top-level object that
// ends just before b[end], where serde_json reports it.
func missingField(b []byte, end int, field string) error {
	s := scanner{b: b, i: end}
	return s.typeErr("", "missing field `"+field+"`")
}

// maxEcho bounds how many bytes of the request an error message quotes (a
// number literal, an enum value, a path segment): serde quotes them whole,
// but a 4 MiB digit string must not come back in the error body.
const maxEcho = 256

// echo returns b for quoting in an error message: b itself up to maxEcho
// bytes, else its first maxEcho bytes, cut back to a rune boundary, and an
// ellipsis.
func echo(b []byte) string {
	if len(b) <= maxEcho {
		return string(b)
	}
	n := maxEcho
	for n > maxEcho-utf8.UTFMax && !utf8.RuneStart(b[n]) {
		n--
	}
	return string(b[:n]) + "…"
}

// fieldSet is the fields of one request struct: exact key to bit, for the
// dispatch of known keys and serde's duplicate-field check.
type fieldSet struct {
	bits map[string]uint64
}

// newFieldSet returns the set of names (at most 64).
func newFieldSet(names ...string) *fieldSet {
	if len(names) > 64 {
		panic("BUG: a fieldSet holds at most 64 fields")
	}
	fs := &fieldSet{bits: make(map[string]uint64, len(names))}
	for i, n := range names {
		fs.bits[n] = 1 << i
	}
	return fs
}

// field marks key as read in seen and reports whether it names a field of
// fs (an unknown key is to be skipped). A field read twice is serde's
// duplicate-field error, a 422 positioned after the key; path prefixes the
// message for a nested struct, as serde_path_to_error does.
func (s *scanner) field(fs *fieldSet, seen *uint64, path string, key []byte) (known bool, err error) {
	bit := fs.bits[string(key)]
	if bit == 0 {
		return false, nil
	}
	if *seen&bit != 0 {
		i := s.i
		s.i = s.keyEnd
		err = s.typeErr(path, "duplicate field `"+string(key)+"`")
		s.i = i
		return true, err
	}
	*seen |= bit
	return true, nil
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
		s.keyEnd = s.i
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
