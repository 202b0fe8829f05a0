package jsonscan

// FieldSet is the fields of one struct: exact key to bit, for the dispatch
// of known keys and serde's duplicate-field check.
type FieldSet struct {
	bits map[string]uint64
}

// NewFieldSet returns the set of names (at most 64).
func NewFieldSet(names ...string) *FieldSet {
	if len(names) > 64 {
		panic("BUG: a FieldSet holds at most 64 fields")
	}
	fs := &FieldSet{bits: make(map[string]uint64, len(names))}
	for i, n := range names {
		fs.bits[n] = 1 << i
	}
	return fs
}

// Object reads an object, calling field for every key with s positioned at
// the value; field must consume the value. A non-object is a data error
// (typeName names the target: "struct X", "a map"). The key aliases the
// input or the unescape buffer. field is not retained.
func (s *Scanner) Object(typeName string, field func(key []byte) error) error {
	switch c := s.Peek(); c {
	case '{':
	case 0:
		return s.SyntaxErr("EOF while parsing a value")
	default:
		return s.invalidType(c, "", typeName)
	}
	s.i++
	if s.Peek() == '}' {
		s.i++
		return nil
	}
	for {
		if s.Peek() != '"' {
			if s.i >= len(s.b) {
				return s.SyntaxErr("EOF while parsing an object")
			}
			return s.SyntaxErr("key must be a string")
		}
		key, err := s.rawString()
		if err != nil {
			return err
		}
		if s.Peek() != ':' {
			return s.SyntaxErr("expected `:`")
		}
		s.keyEnd = s.i
		s.i++
		s.SkipSpace()
		if err := field(key); err != nil {
			return err
		}
		switch s.Peek() {
		case ',':
			s.i++
		case '}':
			s.i++
			return nil
		case 0:
			return s.SyntaxErr("EOF while parsing an object")
		default:
			return s.SyntaxErr("expected `,` or `}`")
		}
	}
}

// Field marks key, the key Object just read, as read in seen and reports
// whether it names a field of fs (an unknown key is to be skipped). A
// field read twice is serde's duplicate-field error, a data error
// positioned after the key; path prefixes the message for a nested
// struct, as serde_path_to_error does.
func (s *Scanner) Field(fs *FieldSet, seen *uint64, path string, key []byte) (known bool, err error) {
	bit := fs.bits[string(key)]
	if bit == 0 {
		return false, nil
	}
	if *seen&bit != 0 {
		i := s.i
		s.i = s.keyEnd
		err = s.TypeErr(path, "duplicate field `"+string(key)+"`")
		s.i = i
		return true, err
	}
	*seen |= bit
	return true, nil
}

// SkipUnknown is the head of an Object callback that takes Field's results
// as they are: done is true when the callback has nothing more to do,
// because of an error or because the key is unknown (its value is then
// skipped, and err is the skip's).
func (s *Scanner) SkipUnknown(known bool, err error) (done bool, _ error) {
	if err != nil {
		return true, err
	}
	if !known {
		return true, s.Skip()
	}
	return false, nil
}

// Skip consumes one value, validating its syntax (and its strings' UTF-8).
func (s *Scanner) Skip() error {
	return s.skipDepth(0)
}

func (s *Scanner) skipDepth(depth int) error {
	if depth > 128 {
		return s.SyntaxErr("recursion limit exceeded")
	}
	switch c := s.Peek(); {
	case c == '{':
		return s.Object("", func([]byte) error { return s.skipDepth(depth + 1) })
	case c == '[':
		_, err := s.Array("", "", func() error { return s.skipDepth(depth + 1) })
		return err
	case c == '"':
		mark := len(s.strbuf)
		_, err := s.rawString()
		s.strbuf = s.strbuf[:mark]
		return err
	case c == 't' || c == 'f':
		_, err := s.Boolean("")
		return err
	case c == 'n':
		_, err := s.Null()
		return err
	case c == '-' || (c >= '0' && c <= '9'):
		_, _, err := s.Number()
		return err
	case c == 0 && s.i >= len(s.b):
		return s.SyntaxErr("EOF while parsing a value")
	}
	return s.SyntaxErr("expected value")
}
