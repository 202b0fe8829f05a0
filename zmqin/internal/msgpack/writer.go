package msgpack

import (
	"encoding/binary"
	"math"
)

// The append helpers below make msgspec's width choices
// (jcrist/msgspec:src/msgspec/_core.c, mpack_encode_long and its
// siblings): the smallest encoding, non-negative integers always in the
// unsigned family, floats always float64. rmp_serde, which writes the
// replica envelopes, makes the same choices for the types they carry.

// AppendUint appends v in its smallest unsigned encoding.
func AppendUint(dst []byte, v uint64) []byte {
	switch {
	case v <= 0x7f:
		return append(dst, byte(v))
	case v <= math.MaxUint8:
		return append(dst, 0xcc, byte(v))
	case v <= math.MaxUint16:
		return binary.BigEndian.AppendUint16(append(dst, 0xcd), uint16(v))
	case v <= math.MaxUint32:
		return binary.BigEndian.AppendUint32(append(dst, 0xce), uint32(v))
	}
	return binary.BigEndian.AppendUint64(append(dst, 0xcf), v)
}

// AppendInt appends v: unsigned when non-negative, else its smallest
// signed encoding.
func AppendInt(dst []byte, v int64) []byte {
	switch {
	case v >= 0:
		return AppendUint(dst, uint64(v))
	case v >= -32:
		return append(dst, byte(v))
	case v >= math.MinInt8:
		return append(dst, 0xd0, byte(v))
	case v >= math.MinInt16:
		return binary.BigEndian.AppendUint16(append(dst, 0xd1), uint16(v))
	case v >= math.MinInt32:
		return binary.BigEndian.AppendUint32(append(dst, 0xd2), uint32(v))
	}
	return binary.BigEndian.AppendUint64(append(dst, 0xd3), uint64(v))
}

// AppendFloat64 appends f as a float64.
func AppendFloat64(dst []byte, f float64) []byte {
	return binary.BigEndian.AppendUint64(append(dst, 0xcb), math.Float64bits(f))
}

// AppendStr appends s as a str.
func AppendStr(dst []byte, s string) []byte {
	n := len(s)
	switch {
	case n < 32:
		dst = append(dst, 0xa0|byte(n))
	case n <= math.MaxUint8:
		dst = append(dst, 0xd9, byte(n))
	case n <= math.MaxUint16:
		dst = binary.BigEndian.AppendUint16(append(dst, 0xda), uint16(n))
	default:
		dst = binary.BigEndian.AppendUint32(append(dst, 0xdb), uint32(n))
	}
	return append(dst, s...)
}

// AppendOptStr appends s as a str, or nil when s is empty.
func AppendOptStr(dst []byte, s string) []byte {
	if s == "" {
		return append(dst, 0xc0)
	}
	return AppendStr(dst, s)
}

// AppendArrayHeader appends the header of an array of n elements.
func AppendArrayHeader(dst []byte, n int) []byte {
	switch {
	case n < 16:
		return append(dst, 0x90|byte(n))
	case n <= math.MaxUint16:
		return binary.BigEndian.AppendUint16(append(dst, 0xdc), uint16(n))
	}
	return binary.BigEndian.AppendUint32(append(dst, 0xdd), uint32(n))
}

// AppendMapHeader appends the header of a map of n pairs.
func AppendMapHeader(dst []byte, n int) []byte {
	switch {
	case n < 16:
		return append(dst, 0x80|byte(n))
	case n <= math.MaxUint16:
		return append(dst, 0xde, byte(n>>8), byte(n))
	}
	return append(dst, 0xdf, byte(n>>24), byte(n>>16), byte(n>>8), byte(n))
}

// AppendBool appends b.
func AppendBool(dst []byte, b bool) []byte {
	if b {
		return append(dst, 0xc3)
	}
	return append(dst, 0xc2)
}

// AppendBin appends b as a bin (rmp_serde's serialize_bytes): bin8, bin16
// or bin32 by length.
func AppendBin(dst, b []byte) []byte {
	n := len(b)
	switch {
	case n <= math.MaxUint8:
		dst = append(dst, 0xc4, byte(n))
	case n <= math.MaxUint16:
		dst = binary.BigEndian.AppendUint16(append(dst, 0xc5), uint16(n))
	default:
		dst = binary.BigEndian.AppendUint32(append(dst, 0xc6), uint32(n))
	}
	return append(dst, b...)
}
