package msgpack

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
)

// ErrMalformed marks a document that is not well-formed msgpack: truncated,
// an invalid lead byte, or a declared length larger than the bytes left.
// Package zmqin exports it as zmqin.ErrMalformed (the error of a malformed
// KV event batch, which wraps it for its own shape errors too), so its text
// names a batch.
var ErrMalformed = errors.New("zmqin: malformed batch")

// Structural errors of the reader. They are preallocated so that a decoder
// allocates nothing even on the error path.
var (
	// ErrTruncated: the document ends inside a value.
	ErrTruncated = fmt.Errorf("%w: truncated", ErrMalformed)
	errInvalid   = fmt.Errorf("%w: invalid msgpack lead byte 0xc1", ErrMalformed)
	errTooLong   = fmt.Errorf("%w: declared length exceeds the remaining bytes", ErrMalformed)
)

// ErrType is returned, without consuming anything, when a value is well
// formed but of another msgpack type than the reader method expects. It is
// not structural: the caller may skip the value (the KV event decoder then
// drops only the event).
var ErrType = errors.New("zmqin: unexpected msgpack type")

// ErrNotStruct is Struct's error for a value that is neither a map nor an
// array.
var ErrNotStruct = fmt.Errorf("%w: neither a map nor an array", ErrType)

// Reader is a cursor over one msgpack document held in B; B[Off:] is what
// is left. It never allocates and never reads past len(B). B and Off are
// exported for a caller's own fast path over the bytes (the KV event
// decoder's token loop); such a caller must leave Off at a value boundary.
//
// Invariant (bounded allocation): every length read from the wire is checked
// against the bytes left before it is returned: an array of n elements needs
// at least n bytes, a map of n pairs at least 2n, a str/bin/ext of n bytes
// exactly n. So no caller can size anything from a length larger than
// len(B), whatever the declared header says.
type Reader struct {
	B   []byte
	Off int
}

func (r *Reader) Left() int { return len(r.B) - r.Off }

// need reports ErrTruncated unless n more bytes are available.
func (r *Reader) need(n int) error {
	if n < 0 || r.Left() < n {
		return ErrTruncated
	}
	return nil
}

func (r *Reader) Peek() (byte, error) {
	if r.Off >= len(r.B) {
		return 0, ErrTruncated
	}
	return r.B[r.Off], nil
}

// IsNil consumes a nil and reports true, or consumes nothing.
func (r *Reader) IsNil() bool {
	if r.Off < len(r.B) && r.B[r.Off] == 0xc0 {
		r.Off++
		return true
	}
	return false
}

// be reads an n-byte big-endian unsigned integer at off (n in 1, 2, 4, 8).
func (r *Reader) be(n int) (uint64, error) {
	if err := r.need(n); err != nil {
		return 0, err
	}
	p := r.B[r.Off : r.Off+n]
	r.Off += n
	switch n {
	case 1:
		return uint64(p[0]), nil
	case 2:
		return uint64(binary.BigEndian.Uint16(p)), nil
	case 4:
		return uint64(binary.BigEndian.Uint32(p)), nil
	default:
		return binary.BigEndian.Uint64(p), nil
	}
}

// length reads the n-byte length that follows a lead byte and checks that
// at least min*length bytes remain.
func (r *Reader) length(n, min int) (int, error) {
	v, err := r.be(n)
	if err != nil {
		return 0, err
	}
	if v > uint64(r.Left()/min) {
		return 0, errTooLong
	}
	return int(v), nil
}

// ArrayLen consumes an array header and returns its element count, which is
// at most Left().
func (r *Reader) ArrayLen() (int, error) {
	c, err := r.Peek()
	if err != nil {
		return 0, err
	}
	switch {
	case c >= 0x90 && c <= 0x9f:
		r.Off++
		n := int(c & 0x0f)
		if n > r.Left() {
			return 0, errTooLong
		}
		return n, nil
	case c == 0xdc:
		r.Off++
		return r.length(2, 1)
	case c == 0xdd:
		r.Off++
		return r.length(4, 1)
	}
	return 0, ErrType
}

// MapLen consumes a map header and returns its pair count, which is at most
// Left()/2.
func (r *Reader) MapLen() (int, error) {
	c, err := r.Peek()
	if err != nil {
		return 0, err
	}
	switch {
	case c >= 0x80 && c <= 0x8f:
		r.Off++
		n := int(c & 0x0f)
		if n > r.Left()/2 {
			return 0, errTooLong
		}
		return n, nil
	case c == 0xde:
		r.Off++
		return r.length(2, 2)
	case c == 0xdf:
		r.Off++
		return r.length(4, 2)
	}
	return 0, ErrType
}

// bytesOf consumes n bytes and returns them as a subslice of the input (no
// copy: valid as long as the payload is).
func (r *Reader) bytesOf(n int) []byte {
	p := r.B[r.Off : r.Off+n : r.Off+n]
	r.Off += n
	return p
}

// Str consumes a str and returns its bytes (a subslice of the input).
func (r *Reader) Str() ([]byte, error) {
	c, err := r.Peek()
	if err != nil {
		return nil, err
	}
	var n int
	switch {
	case c >= 0xa0 && c <= 0xbf:
		r.Off++
		n = int(c & 0x1f)
		if n > r.Left() {
			return nil, ErrTruncated
		}
	case c == 0xd9:
		r.Off++
		n, err = r.length(1, 1)
	case c == 0xda:
		r.Off++
		n, err = r.length(2, 1)
	case c == 0xdb:
		r.Off++
		n, err = r.length(4, 1)
	default:
		return nil, ErrType
	}
	if err != nil {
		return nil, err
	}
	return r.bytesOf(n), nil
}

// Bin consumes a bin and returns its bytes (a subslice of the input).
func (r *Reader) Bin() ([]byte, error) {
	c, err := r.Peek()
	if err != nil {
		return nil, err
	}
	var n int
	switch c {
	case 0xc4:
		r.Off++
		n, err = r.length(1, 1)
	case 0xc5:
		r.Off++
		n, err = r.length(2, 1)
	case 0xc6:
		r.Off++
		n, err = r.length(4, 1)
	default:
		return nil, ErrType
	}
	if err != nil {
		return nil, err
	}
	return r.bytesOf(n), nil
}

// Integer consumes any msgpack integer and returns its two's-complement
// 64-bit pattern and whether it is negative (signed family with a negative
// value). A uint64 above MaxInt64 is returned with neg false.
func (r *Reader) Integer() (bits uint64, neg bool, err error) {
	c, err := r.Peek()
	if err != nil {
		return 0, false, err
	}
	switch {
	case c <= 0x7f:
		r.Off++
		return uint64(c), false, nil
	case c >= 0xe0:
		r.Off++
		return uint64(int64(int8(c))), true, nil
	}
	switch c {
	case 0xcc, 0xcd, 0xce, 0xcf:
		r.Off++
		v, err := r.be(1 << (c - 0xcc))
		return v, false, err
	case 0xd0:
		r.Off++
		v, err := r.be(1)
		x := int64(int8(v))
		return uint64(x), x < 0, err
	case 0xd1:
		r.Off++
		v, err := r.be(2)
		x := int64(int16(v))
		return uint64(x), x < 0, err
	case 0xd2:
		r.Off++
		v, err := r.be(4)
		x := int64(int32(v))
		return uint64(x), x < 0, err
	case 0xd3:
		r.Off++
		v, err := r.be(8)
		return v, int64(v) < 0, err
	}
	return 0, false, ErrType
}

// U32 consumes an integer in [0, MaxUint32]. A non-integer or an integer out
// of range is reported as ErrType and nothing is consumed.
func (r *Reader) U32() (uint32, error) {
	// Fast path: positive fixint, the commonest token id encoding after
	// cd/ce, handled without the general switch.
	if r.Off < len(r.B) && r.B[r.Off] <= 0x7f {
		v := r.B[r.Off]
		r.Off++
		return uint32(v), nil
	}
	off := r.Off
	v, neg, err := r.Integer()
	if err != nil {
		return 0, err
	}
	if neg || v > math.MaxUint32 {
		r.Off = off
		return 0, ErrType
	}
	return uint32(v), nil
}

// Uints consumes len(dst) non-negative integers into dst, as many calls
// of Integer would; a negative one is ErrType. Hashes (sequence hashes of
// the replica envelope) are uint64s written as 0xcf and 8 big-endian bytes,
// read here without Integer's switch: reading them one Integer at a time
// was half of the envelope's decode in CPU profiles of three replicas at
// C1024 (2026-12-02), and the decode as long as applying the bookings
// over the ZMQ mesh.
func (r *Reader) Uints(dst []uint64) error {
	for k := range dst {
		if o := r.Off; o+9 <= len(r.B) && r.B[o] == 0xcf {
			dst[k] = binary.BigEndian.Uint64(r.B[o+1 : o+9])
			r.Off = o + 9
			continue
		}
		v, neg, err := r.Integer()
		if err == nil && neg {
			err = ErrType
		}
		if err != nil {
			return err
		}
		dst[k] = v
	}
	return nil
}

// Float consumes a float32, float64 or integer and returns it as float64.
func (r *Reader) Float() (float64, error) {
	c, err := r.Peek()
	if err != nil {
		return 0, err
	}
	switch c {
	case 0xca:
		r.Off++
		v, err := r.be(4)
		return float64(math.Float32frombits(uint32(v))), err
	case 0xcb:
		r.Off++
		v, err := r.be(8)
		return math.Float64frombits(v), err
	}
	v, neg, err := r.Integer()
	if err != nil {
		return 0, err
	}
	if neg {
		return float64(int64(v)), nil
	}
	return float64(v), nil
}

// Skip consumes one complete value of any type. It is iterative: pending
// counts the values still to consume, so nesting depth costs no stack, and
// since every value takes at least one byte, pending > Left() is reported as
// errTooLong at once.
func (r *Reader) Skip() error {
	pending := 1
	for pending > 0 {
		if pending > r.Left() {
			return errTooLong
		}
		pending--
		c := r.B[r.Off]
		r.Off++
		var n int // bytes of payload to jump over
		var err error
		switch {
		case c <= 0x7f || c >= 0xe0 || c == 0xc0 || c == 0xc2 || c == 0xc3:
			// fixint, nil, bool: the lead byte is the whole value.
		case c >= 0x80 && c <= 0x8f:
			pending += 2 * int(c&0x0f)
		case c >= 0x90 && c <= 0x9f:
			pending += int(c & 0x0f)
		case c >= 0xa0 && c <= 0xbf:
			n = int(c & 0x1f)
		case c == 0xc1:
			return errInvalid
		case c == 0xc4 || c == 0xd9:
			n, err = r.length(1, 1)
		case c == 0xc5 || c == 0xda:
			n, err = r.length(2, 1)
		case c == 0xc6 || c == 0xdb:
			n, err = r.length(4, 1)
		case c == 0xc7: // ext8: len, type, data
			n, err = r.length(1, 1)
			n++
		case c == 0xc8:
			n, err = r.length(2, 1)
			n++
		case c == 0xc9:
			n, err = r.length(4, 1)
			n++
		case c == 0xca:
			n = 4
		case c == 0xcb:
			n = 8
		case c == 0xcc || c == 0xd0:
			n = 1
		case c == 0xcd || c == 0xd1:
			n = 2
		case c == 0xce || c == 0xd2:
			n = 4
		case c == 0xcf || c == 0xd3:
			n = 8
		case c >= 0xd4 && c <= 0xd8: // fixext 1, 2, 4, 8, 16 (+1 type byte)
			n = 1<<(c-0xd4) + 1
		case c == 0xdc:
			n, err = r.length(2, 1)
			pending += n
			n = 0
		case c == 0xdd:
			n, err = r.length(4, 1)
			pending += n
			n = 0
		case c == 0xde:
			n, err = r.length(2, 2)
			pending += 2 * n
			n = 0
		case c == 0xdf:
			n, err = r.length(4, 2)
			pending += 2 * n
			n = 0
		}
		if err != nil {
			return err
		}
		if err := r.need(n); err != nil {
			return err
		}
		r.Off += n
	}
	return nil
}

// SkipN consumes n complete values.
func (r *Reader) SkipN(n int) error {
	for ; n > 0; n-- {
		if err := r.Skip(); err != nil {
			return err
		}
	}
	return nil
}

// Struct reads a struct as rmp_serde writes one: a map (keys in any
// order, unknown keys skipped) or a positional array (elements past fields
// skipped), calling field(i) with the cursor on the value of fields[i];
// field must consume it. A key given twice is an error, as serde makes it.
// At most 32 fields. A value neither a map nor an array is ErrNotStruct.
func (r *Reader) Struct(fields []string, field func(i int) error) error {
	if n, err := r.MapLen(); err == nil {
		var seen uint32
		for range n {
			k, err := r.Str()
			if err != nil {
				return err
			}
			i := fieldIndex(fields, k)
			if i < 0 {
				if err := r.Skip(); err != nil {
					return err
				}
				continue
			}
			if seen&(1<<i) != 0 {
				return fmt.Errorf("duplicate field %s", fields[i])
			}
			seen |= 1 << i
			if err := field(i); err != nil {
				return fmt.Errorf("%s: %w", fields[i], err)
			}
		}
		return nil
	} else if err != ErrType {
		return err
	}
	n, err := r.ArrayLen()
	if err == ErrType {
		return ErrNotStruct
	} else if err != nil {
		return err
	}
	for i := range n {
		if i >= len(fields) {
			if err := r.Skip(); err != nil {
				return err
			}
			continue
		}
		if err := field(i); err != nil {
			return fmt.Errorf("%s: %w", fields[i], err)
		}
	}
	return nil
}

func fieldIndex(fields []string, k []byte) int {
	for i, f := range fields {
		if f == string(k) {
			return i
		}
	}
	return -1
}
