package jsonscan

import (
	"unicode/utf16"
	"unicode/utf8"
	"unsafe"
)

// Str reads a string value (null: set false). The string aliases the input
// when it has no escapes, else the unescape buffer: it is valid until the
// input is modified or s is reset. field is the value's path in messages.
func (s *Scanner) Str(field string) (v string, set bool, err error) {
	if isNull, err := s.Null(); isNull || err != nil {
		return "", false, err
	}
	if c := s.Peek(); c != '"' {
		return "", false, s.invalidType(c, field, "a string")
	}
	b, err := s.rawString()
	if err != nil {
		return "", false, err
	}
	return unsafe.String(unsafe.SliceData(b), len(b)), true, nil
}

// rawString reads a string and returns its decoded bytes: a subslice of the
// input when it has no escapes, else a part of strbuf.
func (s *Scanner) rawString() ([]byte, error) {
	s.i++ // opening quote
	start := s.i
	for s.i < len(s.b) {
		c := s.b[s.i]
		switch {
		case c == '"':
			out := s.b[start:s.i]
			s.i++
			if !utf8.Valid(out) {
				return nil, s.SyntaxErr("invalid unicode code point")
			}
			return out, nil
		case c == '\\':
			return s.escapedString(start)
		case c < 0x20:
			return nil, s.SyntaxErr("control character (\\u0000-\\u001F) found while parsing a string")
		}
		s.i++
	}
	return nil, s.SyntaxErr("EOF while parsing a string")
}

func (s *Scanner) escapedString(start int) ([]byte, error) {
	off := len(s.strbuf)
	s.strbuf = append(s.strbuf, s.b[start:s.i]...)
	for s.i < len(s.b) {
		c := s.b[s.i]
		switch {
		case c == '"':
			s.i++
			out := s.strbuf[off:len(s.strbuf):len(s.strbuf)]
			if !utf8.Valid(out) {
				return nil, s.SyntaxErr("invalid unicode code point")
			}
			return out, nil
		case c < 0x20:
			return nil, s.SyntaxErr("control character (\\u0000-\\u001F) found while parsing a string")
		case c != '\\':
			s.strbuf = append(s.strbuf, c)
			s.i++
			continue
		}
		s.i++
		if s.i >= len(s.b) {
			break
		}
		e := s.b[s.i]
		s.i++
		switch e {
		case '"', '\\', '/':
			s.strbuf = append(s.strbuf, e)
		case 'b':
			s.strbuf = append(s.strbuf, '\b')
		case 'f':
			s.strbuf = append(s.strbuf, '\f')
		case 'n':
			s.strbuf = append(s.strbuf, '\n')
		case 'r':
			s.strbuf = append(s.strbuf, '\r')
		case 't':
			s.strbuf = append(s.strbuf, '\t')
		case 'u':
			r, ok := s.hex4()
			if !ok {
				return nil, s.SyntaxErr("invalid escape")
			}
			if utf16.IsSurrogate(r) {
				if s.i+6 <= len(s.b) && s.b[s.i] == '\\' && s.b[s.i+1] == 'u' {
					s.i += 2
					r2, ok := s.hex4()
					if !ok {
						return nil, s.SyntaxErr("invalid escape")
					}
					if d := utf16.DecodeRune(r, r2); d != utf8.RuneError {
						r = d
					} else {
						return nil, s.SyntaxErr("lone leading surrogate in hex escape")
					}
				} else {
					return nil, s.SyntaxErr("lone leading surrogate in hex escape")
				}
			}
			s.strbuf = utf8.AppendRune(s.strbuf, r)
		default:
			return nil, s.SyntaxErr("invalid escape")
		}
	}
	return nil, s.SyntaxErr("EOF while parsing a string")
}

func (s *Scanner) hex4() (rune, bool) {
	if s.i+4 > len(s.b) {
		return 0, false
	}
	var r rune
	for _, c := range s.b[s.i : s.i+4] {
		r <<= 4
		switch {
		case c >= '0' && c <= '9':
			r |= rune(c - '0')
		case c >= 'a' && c <= 'f':
			r |= rune(c - 'a' + 10)
		case c >= 'A' && c <= 'F':
			r |= rune(c - 'A' + 10)
		default:
			return 0, false
		}
	}
	s.i += 4
	return r, true
}
