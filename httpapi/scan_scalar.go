package httpapi

import (
	"math"
	"strconv"
	"unsafe"
)

// number returns the bytes of a JSON number and whether it is an integer.
func (s *scanner) number() (lit []byte, integer bool, err error) {
	start := s.i
	if s.i < len(s.b) && s.b[s.i] == '-' {
		s.i++
	}
	if s.i >= len(s.b) {
		return nil, false, s.syntaxErr("EOF while parsing a value")
	}
	switch c := s.b[s.i]; {
	case c == '0':
		s.i++
		if s.i < len(s.b) && s.b[s.i] >= '0' && s.b[s.i] <= '9' {
			return nil, false, s.syntaxErr("invalid number") // a leading zero, as serde
		}
	case c >= '1' && c <= '9':
		for s.i < len(s.b) && s.b[s.i] >= '0' && s.b[s.i] <= '9' {
			s.i++
		}
	default:
		return nil, false, s.syntaxErr("invalid number")
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
			return nil, false, s.syntaxErr("invalid number")
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
			return nil, false, s.syntaxErr("invalid number")
		}
	}
	return s.b[start:s.i], integer, nil
}

// negZero is serde_json's error for the literal -0 in an integer field: it
// reads -0 as the float -0.0 (de.rs parse_number: "Convert into a float if
// we underflow, or on `-0`"), so the reference answers 422 where
// encoding/json would take 0.
const negZero = "invalid type: floating point `-0.0`, expected "

// numberLit reads the literal of a number where a number of type want is
// expected; any other value is skipped and reported as serde does.
func (s *scanner) numberLit(field, want string) (lit []byte, integer bool, err error) {
	c := s.peek()
	if c != '-' && (c < '0' || c > '9') {
		if c == 0 {
			return nil, false, s.syntaxErr("EOF while parsing a value")
		}
		if err := s.skip(); err != nil {
			return nil, false, err
		}
		return nil, false, s.typeErr(field, "invalid type: "+kindName(c)+", expected "+want)
	}
	return s.number()
}

// integer reads an integer literal as its sign and magnitude. A fraction or
// exponent, -0, and a magnitude beyond u64 are errors worded as serde's.
func (s *scanner) integer(field, want string) (lit []byte, neg bool, v uint64, err error) {
	lit, integer, err := s.numberLit(field, want)
	if err != nil {
		return nil, false, 0, err
	}
	if !integer {
		if outOfRange(lit) {
			return nil, false, 0, s.syntaxErr("number out of range")
		}
		return nil, false, 0, s.typeErr(field, "invalid type: floating point `"+echo(lit)+"`, expected "+want)
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
		return nil, false, 0, s.typeErr(field, negZero+want)
	}
	return lit, neg, v, nil
}

func (s *scanner) rangeErr(field string, lit []byte, want string) error {
	return s.typeErr(field, "invalid value: integer `"+echo(lit)+"`, expected "+want)
}

// uint reads a non-negative integer <= max.
func (s *scanner) uint(field string, max uint64, want string) (uint64, error) {
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
func (s *scanner) int64(field string) (int64, error) {
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

// float reads a number as f64.
func (s *scanner) float(field string) (float64, error) { return s.floatAs(field, "f64") }

// floatAs reads a number where serde expects the float type want (f64 or
// f32; an f32 is read as f64 and narrowed by the caller, as serde_json
// does, so it has no range error of its own).
func (s *scanner) floatAs(field, want string) (float64, error) {
	lit, _, err := s.numberLit(field, want)
	if err != nil {
		return 0, err
	}
	f, err := strconv.ParseFloat(unsafe.String(unsafe.SliceData(lit), len(lit)), 64)
	if err != nil {
		if math.IsInf(f, 0) {
			return 0, s.syntaxErr("number out of range")
		}
		return 0, s.typeErr(field, "invalid value: number `"+echo(lit)+"`, expected "+want)
	}
	return f, nil
}

// outOfRange reports whether a non-integer literal overflows f64. serde_json
// fails such a number with NumberOutOfRange, a syntax error (400), before any
// type check; underflow reads as 0.
func outOfRange(lit []byte) bool {
	f, err := strconv.ParseFloat(unsafe.String(unsafe.SliceData(lit), len(lit)), 64)
	return err != nil && math.IsInf(f, 0)
}

// boolean reads true or false.
func (s *scanner) boolean(field string) (bool, error) {
	switch c := s.peek(); c {
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
			return false, s.syntaxErr("EOF while parsing a value")
		}
		if err := s.skip(); err != nil {
			return false, err
		}
		return false, s.typeErr(field, "invalid type: "+kindName(c)+", expected a boolean")
	}
	return false, s.syntaxErr("expected value")
}
