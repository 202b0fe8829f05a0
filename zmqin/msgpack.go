package zmqin

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
)

// ErrMalformed marks a batch that is not a well-formed msgpack KV event
// batch: truncated, an invalid lead byte, a declared length larger than the
// bytes left, a wrong envelope shape, or trailing bytes. The whole batch is
// rejected; nothing of it may be applied.
var ErrMalformed = errors.New("zmqin: malformed batch")

// Structural errors of the msgpack reader. They are preallocated so that the
// decoder allocates nothing even on the error path.
var (
	errTruncated = fmt.Errorf("%w: truncated", ErrMalformed)
	errInvalid   = fmt.Errorf("%w: invalid msgpack lead byte 0xc1", ErrMalformed)
	errTooLong   = fmt.Errorf("%w: declared length exceeds the remaining bytes", ErrMalformed)
	errTrailing  = fmt.Errorf("%w: trailing bytes after the batch", ErrMalformed)
	errEnvelope  = fmt.Errorf("%w: batch is not [ts, events] or [ts, events, dp_rank]", ErrMalformed)
	errTimestamp = fmt.Errorf("%w: timestamp is not a number", ErrMalformed)
	errEvents    = fmt.Errorf("%w: events is not an array", ErrMalformed)
	errRank      = fmt.Errorf("%w: data_parallel_rank is not nil or a u32", ErrMalformed)
	// errBatchTooLarge: the batch would decode into more than
	// MaxDecodedBatchBytes.
	errBatchTooLarge = fmt.Errorf("%w: batch decodes into more than %d MiB", ErrMalformed, MaxDecodedBatchBytes>>20)
)

// errType is returned, without consuming anything, when a value is well
// formed but of another msgpack type than the reader method expects. It is
// not structural: the caller skips the value and drops only the event.
var errType = errors.New("zmqin: unexpected msgpack type")

// reader is a cursor over one msgpack document held in b; b[off:] is what is
// left. It never allocates and never reads past len(b).
//
// Invariant (bounded allocation): every length read from the wire is checked
// against the bytes left before it is returned: an array of n elements needs
// at least n bytes, a map of n pairs at least 2n, a str/bin/ext of n bytes
// exactly n. So no caller can size anything from a length larger than
// len(b), whatever the declared header says.
type reader struct {
	b   []byte
	off int
}

func (r *reader) left() int { return len(r.b) - r.off }

// need reports errTruncated unless n more bytes are available.
func (r *reader) need(n int) error {
	if n < 0 || r.left() < n {
		return errTruncated
	}
	return nil
}

func (r *reader) peek() (byte, error) {
	if r.off >= len(r.b) {
		return 0, errTruncated
	}
	return r.b[r.off], nil
}

// isNil consumes a nil and reports true, or consumes nothing.
func (r *reader) isNil() bool {
	if r.off < len(r.b) && r.b[r.off] == 0xc0 {
		r.off++
		return true
	}
	return false
}

// be reads an n-byte big-endian unsigned integer at off (n in 1, 2, 4, 8).
func (r *reader) be(n int) (uint64, error) {
	if err := r.need(n); err != nil {
		return 0, err
	}
	p := r.b[r.off : r.off+n]
	r.off += n
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
func (r *reader) length(n, min int) (int, error) {
	v, err := r.be(n)
	if err != nil {
		return 0, err
	}
	if v > uint64(r.left()/min) {
		return 0, errTooLong
	}
	return int(v), nil
}

// arrayLen consumes an array header and returns its element count, which is
// at most left().
func (r *reader) arrayLen() (int, error) {
	c, err := r.peek()
	if err != nil {
		return 0, err
	}
	switch {
	case c >= 0x90 && c <= 0x9f:
		r.off++
		n := int(c & 0x0f)
		if n > r.left() {
			return 0, errTooLong
		}
		return n, nil
	case c == 0xdc:
		r.off++
		return r.length(2, 1)
	case c == 0xdd:
		r.off++
		return r.length(4, 1)
	}
	return 0, errType
}

// mapLen consumes a map header and returns its pair count, which is at most
// left()/2.
func (r *reader) mapLen() (int, error) {
	c, err := r.peek()
	if err != nil {
		return 0, err
	}
	switch {
	case c >= 0x80 && c <= 0x8f:
		r.off++
		n := int(c & 0x0f)
		if n > r.left()/2 {
			return 0, errTooLong
		}
		return n, nil
	case c == 0xde:
		r.off++
		return r.length(2, 2)
	case c == 0xdf:
		r.off++
		return r.length(4, 2)
	}
	return 0, errType
}

// bytesOf consumes n bytes and returns them as a subslice of the input (no
// copy: valid as long as the payload is).
func (r *reader) bytesOf(n int) []byte {
	p := r.b[r.off : r.off+n : r.off+n]
	r.off += n
	return p
}

// str consumes a str and returns its bytes (a subslice of the input).
func (r *reader) str() ([]byte, error) {
	c, err := r.peek()
	if err != nil {
		return nil, err
	}
	var n int
	switch {
	case c >= 0xa0 && c <= 0xbf:
		r.off++
		n = int(c & 0x1f)
		if n > r.left() {
			return nil, errTruncated
		}
	case c == 0xd9:
		r.off++
		n, err = r.length(1, 1)
	case c == 0xda:
		r.off++
		n, err = r.length(2, 1)
	case c == 0xdb:
		r.off++
		n, err = r.length(4, 1)
	default:
		return nil, errType
	}
	if err != nil {
		return nil, err
	}
	return r.bytesOf(n), nil
}

// bin consumes a bin and returns its bytes (a subslice of the input).
func (r *reader) bin() ([]byte, error) {
	c, err := r.peek()
	if err != nil {
		return nil, err
	}
	var n int
	switch c {
	case 0xc4:
		r.off++
		n, err = r.length(1, 1)
	case 0xc5:
		r.off++
		n, err = r.length(2, 1)
	case 0xc6:
		r.off++
		n, err = r.length(4, 1)
	default:
		return nil, errType
	}
	if err != nil {
		return nil, err
	}
	return r.bytesOf(n), nil
}

// integer consumes any msgpack integer and returns its two's-complement
// 64-bit pattern and whether it is negative (signed family with a negative
// value). A uint64 above MaxInt64 is returned with neg false.
func (r *reader) integer() (bits uint64, neg bool, err error) {
	c, err := r.peek()
	if err != nil {
		return 0, false, err
	}
	switch {
	case c <= 0x7f:
		r.off++
		return uint64(c), false, nil
	case c >= 0xe0:
		r.off++
		return uint64(int64(int8(c))), true, nil
	}
	switch c {
	case 0xcc, 0xcd, 0xce, 0xcf:
		r.off++
		v, err := r.be(1 << (c - 0xcc))
		return v, false, err
	case 0xd0:
		r.off++
		v, err := r.be(1)
		x := int64(int8(v))
		return uint64(x), x < 0, err
	case 0xd1:
		r.off++
		v, err := r.be(2)
		x := int64(int16(v))
		return uint64(x), x < 0, err
	case 0xd2:
		r.off++
		v, err := r.be(4)
		x := int64(int32(v))
		return uint64(x), x < 0, err
	case 0xd3:
		r.off++
		v, err := r.be(8)
		return v, int64(v) < 0, err
	}
	return 0, false, errType
}

// u32 consumes an integer in [0, MaxUint32]. A non-integer or an integer out
// of range is reported as errType and nothing is consumed.
func (r *reader) u32() (uint32, error) {
	// Fast path: positive fixint, the commonest token id encoding after
	// cd/ce, handled without the general switch.
	if r.off < len(r.b) && r.b[r.off] <= 0x7f {
		v := r.b[r.off]
		r.off++
		return uint32(v), nil
	}
	off := r.off
	v, neg, err := r.integer()
	if err != nil {
		return 0, err
	}
	if neg || v > math.MaxUint32 {
		r.off = off
		return 0, errType
	}
	return uint32(v), nil
}

// float consumes a float32, float64 or integer and returns it as float64.
func (r *reader) float() (float64, error) {
	c, err := r.peek()
	if err != nil {
		return 0, err
	}
	switch c {
	case 0xca:
		r.off++
		v, err := r.be(4)
		return float64(math.Float32frombits(uint32(v))), err
	case 0xcb:
		r.off++
		v, err := r.be(8)
		return math.Float64frombits(v), err
	}
	v, neg, err := r.integer()
	if err != nil {
		return 0, err
	}
	if neg {
		return float64(int64(v)), nil
	}
	return float64(v), nil
}

// hash consumes a block hash and normalises it to a u64 key: an integer
// of either family by its two's-complement bits (SGLang and vLLM before
// v0.10.2 send signed hashes); a bin as its last 8 bytes big-endian (a
// shorter bin is read as a big-endian integer of its length), which is
// the key vLLM sends in its default int mode for the same digest
// (maybe_convert_block_hash, vllm-project/vllm:vllm/v1/core/kv_cache_utils.py).
func (r *reader) hash() (uint64, error) {
	c, err := r.peek()
	if err != nil {
		return 0, err
	}
	if c == 0xcf { // the common case from vLLM: u64 >= 2^32
		if r.left() < 9 {
			return 0, errTruncated
		}
		v := binary.BigEndian.Uint64(r.b[r.off+1:])
		r.off += 9
		return v, nil
	}
	if c == 0xc4 || c == 0xc5 || c == 0xc6 {
		p, err := r.bin()
		if err != nil {
			return 0, err
		}
		if len(p) > 8 {
			p = p[len(p)-8:]
		}
		var v uint64
		for _, x := range p {
			v = v<<8 | uint64(x)
		}
		return v, nil
	}
	v, _, err := r.integer()
	return v, err
}

// skip consumes one complete value of any type. It is iterative: pending
// counts the values still to consume, so nesting depth costs no stack, and
// since every value takes at least one byte, pending > left() is reported as
// errTooLong at once.
func (r *reader) skip() error {
	pending := 1
	for pending > 0 {
		if pending > r.left() {
			return errTooLong
		}
		pending--
		c := r.b[r.off]
		r.off++
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
		r.off += n
	}
	return nil
}

// skipN consumes n complete values.
func (r *reader) skipN(n int) error {
	for ; n > 0; n-- {
		if err := r.skip(); err != nil {
			return err
		}
	}
	return nil
}
