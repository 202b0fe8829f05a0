package jsonscan

import (
	"math"
	"strconv"
	"unsafe"
)

// Null consumes a null and reports whether the value was one (serde's None
// for an Option).
func (s *Scanner) Null() (bool, error) {
	if s.Peek() != 'n' {
		return false, nil
	}
	if len(s.b)-s.i < 4 || string(s.b[s.i:s.i+4]) != "null" {
		return false, s.SyntaxErr("expected value")
	}
	s.i += 4
	return true, nil
}

// Boolean reads true or false; field is the value's path in messages.
func (s *Scanner) Boolean(field string) (bool, error) {
	switch c := s.Peek(); c {
	case 't':
		if len(s.b)-s.i >= 4 && string(s.b[s.i:s.i+4]) == "true" {
			s.i += 4
			return true, nil
		}
	case 'f':
		if len(s.b)-s.i >= 5 && string(s.b[s.i:s.i+5]) == "false" {
			s.i += 5
			return false, nil
		}
	default:
		if c == 0 {
			return false, s.SyntaxErr("EOF while parsing a value")
		}
		return false, s.invalidType(c, field, "a boolean")
	}
	return false, s.SyntaxErr("expected value")
}

// Number reads a number at the current offset (no whitespace first) and
// returns its literal, which aliases the input, and whether it is an
// integer (no fraction, no exponent).
func (s *Scanner) Number() (lit []byte, integer bool, err error) {
	start := s.i
	if s.i < len(s.b) && s.b[s.i] == '-' {
		s.i++
	}
	if s.i >= len(s.b) {
		return nil, false, s.SyntaxErr("EOF while parsing a value")
	}
	switch c := s.b[s.i]; {
	case c == '0':
		s.i++
		if s.i < len(s.b) && s.b[s.i] >= '0' && s.b[s.i] <= '9' {
			return nil, false, s.SyntaxErr("invalid number") // a leading zero, as serde
		}
	case c >= '1' && c <= '9':
		for s.i < len(s.b) && s.b[s.i] >= '0' && s.b[s.i] <= '9' {
			s.i++
		}
	default:
		return nil, false, s.SyntaxErr("invalid number")
	}
	integer = true
	if s.i < len(s.b) && s.b[s.i] == '.' {
		integer = false
		s.i++
		d := s.i
		for s.i < len(s.b) && s.b[s.i] >= '0' && s.b[s.i] <= '9' {
			s.i++
		}
		if s.i == d {
			return nil, false, s.SyntaxErr("invalid number")
		}
	}
	if s.i < len(s.b) && (s.b[s.i] == 'e' || s.b[s.i] == 'E') {
		integer = false
		s.i++
		if s.i < len(s.b) && (s.b[s.i] == '+' || s.b[s.i] == '-') {
			s.i++
		}
		d := s.i
		for s.i < len(s.b) && s.b[s.i] >= '0' && s.b[s.i] <= '9' {
			s.i++
		}
		if s.i == d {
			return nil, false, s.SyntaxErr("invalid number")
		}
	}
	return s.b[start:s.i], integer, nil
}

// negZero is serde_json's error for the literal -0 in an integer field: it
// reads -0 as the float -0.0 (de.rs parse_number: "Convert into a float if
// we underflow, or on `-0`"), so the reference answers a data error where
// encoding/json would take 0.
const negZero = "invalid type: floating point `-0.0`, expected "

// numberLit reads the literal of a number where a number of type want is
// expected; any other value is skipped and reported as serde does.
func (s *Scanner) numberLit(field, want string) (lit []byte, integer bool, err error) {
	c := s.Peek()
	if c != '-' && (c < '0' || c > '9') {
		if c == 0 {
			return nil, false, s.SyntaxErr("EOF while parsing a value")
		}
		return nil, false, s.invalidType(c, field, want)
	}
	return s.Number()
}

// integer reads an integer literal as its sign and magnitude. A fraction or
// exponent, -0, and a magnitude beyond u64 are errors worded as serde's.
func (s *Scanner) integer(field, want string) (lit []byte, neg bool, v uint64, err error) {
	lit, integer, err := s.numberLit(field, want)
	if err != nil {
		return nil, false, 0, err
	}
	if !integer {
		if outOfRange(lit) {
			return nil, false, 0, s.SyntaxErr("number out of range")
		}
		return nil, false, 0, s.TypeErr(field, "invalid type: floating point `"+Echo(lit)+"`, expected "+want)
	}
	neg = lit[0] == '-'
	digits := lit
	if neg {
		digits = lit[1:]
	}
	for _, d := range digits {
		n := v*10 + uint64(d-'0')
		if v > (1<<64-1)/10 || n < v*10 {
			return nil, false, 0, s.rangeErr(field, lit, want)
		}
		v = n
	}
	if neg && v == 0 {
		return nil, false, 0, s.TypeErr(field, negZero+want)
	}
	return lit, neg, v, nil
}

func (s *Scanner) rangeErr(field string, lit []byte, want string) error {
	return s.TypeErr(field, "invalid value: integer `"+Echo(lit)+"`, expected "+want)
}

// Uint reads a non-negative integer <= max where serde expects the
// unsigned type want ("u32", "u64", "usize"); field is the value's path
// in messages.
func (s *Scanner) Uint(field string, max uint64, want string) (uint64, error) {
	lit, neg, v, err := s.integer(field, want)
	if err != nil {
		return 0, err
	}
	if neg || v > max {
		return 0, s.rangeErr(field, lit, want)
	}
	return v, nil
}

// int64 reads a signed 64-bit integer.
func (s *Scanner) int64(field string) (int64, error) {
	lit, neg, v, err := s.integer(field, "i64")
	if err != nil {
		return 0, err
	}
	if neg {
		if v > 1<<63 {
			return 0, s.rangeErr(field, lit, "i64")
		}
		return -int64(v), nil
	}
	if v > 1<<63-1 {
		return 0, s.rangeErr(field, lit, "i64")
	}
	return int64(v), nil
}

// Float reads a number as f64.
func (s *Scanner) Float(field string) (float64, error) { return s.FloatAs(field, "f64") }

// FloatAs reads a number where serde expects the float type want (f64 or
// f32; an f32 is read as f64 and narrowed by the caller, as serde_json
// does, so it has no range error of its own).
func (s *Scanner) FloatAs(field, want string) (float64, error) {
	lit, _, err := s.numberLit(field, want)
	if err != nil {
		return 0, err
	}
	f, err := strconv.ParseFloat(unsafe.String(unsafe.SliceData(lit), len(lit)), 64)
	if err != nil {
		if math.IsInf(f, 0) {
			return 0, s.SyntaxErr("number out of range")
		}
		return 0, s.TypeErr(field, "invalid value: number `"+Echo(lit)+"`, expected "+want)
	}
	return f, nil
}

// outOfRange reports whether a non-integer literal overflows f64. serde_json
// fails such a number with NumberOutOfRange, a syntax error, before any
// type check; underflow reads as 0.
func outOfRange(lit []byte) bool {
	f, err := strconv.ParseFloat(unsafe.String(unsafe.SliceData(lit), len(lit)), 64)
	return err != nil && math.IsInf(f, 0)
}
