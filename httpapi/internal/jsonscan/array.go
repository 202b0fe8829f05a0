package jsonscan

import (
	"encoding/binary"
	"strconv"
)

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
// The fast path parses the common shape (optional minus, at most 19
// digits without a leading zero, no fraction or exponent) in one tight
// loop over the bytes; anything else re-reads the array on the generic path,
// which reports the exact error. The generic path alone ran at 23 µs for
// the 128+128-hash body against go-json's 10 µs (httpapi's
// BenchmarkDecodeSelect).
func (s *Scanner) I64s(field string, dst []uint64) ([]uint64, bool, error) {
	if out, i, ok := fastInts(s.b, s.i, dst, true, 1<<63-1); ok {
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

// fastInts parses b[i:] as a JSON array of integers in the common shape
// and appends them to dst. signed allows a minus sign (two's complement
// bits); values above max (or, negative, below -max-1) fail. ok is false
// when the input needs the generic path; dst's new elements are then
// garbage, and the caller passes the original dst to the generic path
// (its length is unchanged in the caller's variable).
func fastInts(b []byte, i int, dst []uint64, signed bool, max uint64) (_ []uint64, end int, ok bool) {
	i = skipWS(b, i)
	if i >= len(b) || b[i] != '[' {
		return dst, 0, false
	}
	i = skipWS(b, i+1)
	if i < len(b) && b[i] == ']' {
		return dst, i + 1, true
	}
	for {
		neg := false
		if i < len(b) && b[i] == '-' {
			if !signed {
				return dst, 0, false
			}
			neg = true
			i++
		}
		start := i
		var v uint64
		// Eight digits per step while they last (a 19-digit hash is two
		// steps and three single digits): the per-digit loop is a chain of
		// dependent multiply-adds, and it was 19% of a /select's CPU.
		for len(b)-i >= 8 && i-start < 16 {
			d, ok := eightDigits(b[i : i+8])
			if !ok {
				break
			}
			v = v*100_000_000 + d
			i += 8
		}
		for i < len(b) {
			c := b[i] - '0'
			if c > 9 {
				break
			}
			v = v*10 + uint64(c)
			i++
		}
		n := i - start
		if n == 0 || n > 19 || (n > 1 && b[start] == '0') {
			return dst, 0, false
		}
		if i < len(b) && (b[i] == '.' || b[i] == 'e' || b[i] == 'E') {
			return dst, 0, false
		}
		if neg {
			if v > max+1 || v == 0 { // -0: the generic path reports it
				return dst, 0, false
			}
			v = -v
		} else if v > max {
			return dst, 0, false
		}
		dst = append(dst, v)
		if i < len(b) && b[i] == ',' { // the compact shape: no whitespace
			i = skipWS(b, i+1)
			continue
		}
		i = skipWS(b, i)
		if i >= len(b) {
			return dst, 0, false
		}
		switch b[i] {
		case ',':
			i = skipWS(b, i+1)
		case ']':
			return dst, i + 1, true
		default:
			return dst, 0, false
		}
	}
}

// fastU32s is fastInts for u32 token ids.
func fastU32s(b []byte, i int, dst []uint32) (_ []uint32, end int, ok bool) {
	i = skipWS(b, i)
	if i >= len(b) || b[i] != '[' {
		return dst, 0, false
	}
	i = skipWS(b, i+1)
	if i < len(b) && b[i] == ']' {
		return dst, i + 1, true
	}
	for {
		start := i
		var v uint64
		for i < len(b) {
			c := b[i] - '0'
			if c > 9 {
				break
			}
			v = v*10 + uint64(c)
			i++
		}
		n := i - start
		if n == 0 || n > 10 || (n > 1 && b[start] == '0') || v > 1<<32-1 {
			return dst, 0, false
		}
		if i < len(b) && (b[i] == '.' || b[i] == 'e' || b[i] == 'E') {
			return dst, 0, false
		}
		dst = append(dst, uint32(v))
		i = skipWS(b, i)
		if i >= len(b) {
			return dst, 0, false
		}
		switch b[i] {
		case ',':
			i = skipWS(b, i+1)
		case ']':
			return dst, i + 1, true
		default:
			return dst, 0, false
		}
	}
}

// eightDigits parses b[:8] as eight ASCII digits (SWAR, Lemire's
// method); ok is false when any byte is not a digit.
func eightDigits(b []byte) (uint64, bool) {
	v := binary.LittleEndian.Uint64(b)
	if (v&0xF0F0F0F0F0F0F0F0)|(((v+0x0606060606060606)&0xF0F0F0F0F0F0F0F0)>>4) != 0x3333333333333333 {
		return 0, false
	}
	v -= 0x3030303030303030
	v = v*10 + v>>8
	v = ((v&0x000000FF000000FF)*(100+1000000<<32) + ((v>>16)&0x000000FF000000FF)*(1+10000<<32)) >> 32
	return v, true
}

func skipWS(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\n' || b[i] == '\t' || b[i] == '\r') {
		i++
	}
	return i
}
