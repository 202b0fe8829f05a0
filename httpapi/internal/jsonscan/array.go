package jsonscan

import "strconv"

// Array reads an array, calling elem for each element with s positioned
// at it; elem must consume the element. null is reported as set false; a
// value of another type is a data error (field is its path, want serde's
// name of the target: "a sequence"). elem is not retained.
func (s *Scanner) Array(field, want string, elem func() error) (set bool, err error) {
	if isNull, err := s.Null(); isNull || err != nil {
		return false, err
	}
	c := s.Peek()
	if c != '[' {
		if c == 0 {
			return false, s.SyntaxErr("EOF while parsing a value")
		}
		return false, s.invalidType(c, field, want)
	}
	s.i++
	if s.Peek() == ']' {
		s.i++
		return true, nil
	}
	for {
		if err := elem(); err != nil {
			return false, err
		}
		switch s.Peek() {
		case ',':
			s.i++
		case ']':
			s.i++
			return true, nil
		case 0:
			return false, s.SyntaxErr("EOF while parsing a list")
		default:
			return false, s.SyntaxErr("expected `,` or `]`")
		}
	}
}

// Tuple reads a tuple of size elements (an array, null included in the
// values that are not one), calling elem for each. Fewer elements are
// serde's invalid length (a data error); more are serde_json's trailing
// characters (a syntax error), as its end of a tuple sequence reports
// them. elem is not retained.
func (s *Scanner) Tuple(field string, size int, elem func() error) error {
	if c := s.Peek(); c != '[' {
		if c == 0 {
			return s.SyntaxErr("EOF while parsing a value")
		}
		return s.invalidType(c, field, tupleOf(size))
	}
	s.i++
	for n := 0; ; n++ {
		if s.Peek() == ']' {
			if n < size {
				s.i++
				return s.TypeErr(field, "invalid length "+strconv.Itoa(n)+", expected "+tupleOf(size))
			}
			s.i++
			return nil
		}
		if n == size {
			return s.SyntaxErr("trailing characters")
		}
		if n > 0 {
			if s.Peek() != ',' {
				if s.i >= len(s.b) {
					return s.SyntaxErr("EOF while parsing a list")
				}
				return s.SyntaxErr("expected `,` or `]`")
			}
			s.i++
		}
		if err := elem(); err != nil {
			return err
		}
	}
}

// tupleOf is serde's name of a tuple of size elements.
func tupleOf(size int) string { return "a tuple of size " + strconv.Itoa(size) }

// I64s appends an array of i64 (bits reinterpreted as u64) to dst; set is
// false for null. field is the array's path in messages.
//
// The fast path (fastI64s, fastints.go) parses the common shape
// (optional minus, at most 19 digits without a leading zero, no fraction
// or exponent); anything else re-reads the array on the generic path,
// which reports the exact error. The generic path alone ran at 23 µs for
// the 128+128-hash body against go-json's 10 µs (httpapi's
// BenchmarkDecodeSelect).
func (s *Scanner) I64s(field string, dst []uint64) ([]uint64, bool, error) {
	if out, i, ok := fastI64s(s.b, s.i, dst); ok {
		s.i = i
		return out, true, nil
	}
	set, err := s.Array(field, "a sequence", func() error {
		v, err := s.int64(field)
		dst = append(dst, uint64(v))
		return err
	})
	return dst, set, err
}

// U64s appends an array of u64 to dst; set is false for null.
func (s *Scanner) U64s(field string, dst []uint64) ([]uint64, bool, error) {
	if out, i, ok := fastInts(s.b, s.i, dst, false, 1<<64-1); ok {
		s.i = i
		return out, true, nil
	}
	set, err := s.Array(field, "a sequence", func() error {
		v, err := s.Uint(field, 1<<64-1, "u64")
		dst = append(dst, v)
		return err
	})
	return dst, set, err
}

// U32s appends an array of u32 to dst; set is false for null.
func (s *Scanner) U32s(field string, dst []uint32) ([]uint32, bool, error) {
	start := len(dst)
	if out, i, ok := fastU32s(s.b, s.i, dst); ok {
		s.i = i
		return out, true, nil
	}
	dst = dst[:start]
	set, err := s.Array(field, "a sequence", func() error {
		v, err := s.Uint(field, 1<<32-1, "u32")
		dst = append(dst, uint32(v))
		return err
	})
	return dst, set, err
}
