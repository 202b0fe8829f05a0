package jsonscan

import (
	"encoding/binary"
	"math/bits"
	"unsafe"
)

// The fast paths of the integer arrays (I64s, U64s, U32s). Each parses
// the common shape, a compact or spaced array of integers without a
// leading zero, fraction or exponent, and reports ok false for anything
// else; the caller then re-reads the array on the generic path, which
// gives the exact value or error. So a fast path never changes a result
// or an error, only how fast the common shape is read.
//
// The wide readers (fastI64s, fastU32s) read a number from 8-byte words
// while wideRoom bytes are left (so that every word load is inside the
// input): the number's length is the position of the first non-digit
// byte of its words (nonDigits, one TrailingZeros), its value comes from
// whole words (wordValue, prefixValue), and the byte that ends it is
// taken from the same word. No loop over the digits and no branch that
// the data decides but what ends the number: a minus is read as a
// leading zero digit and folded into the value, and a hash's 16 to 19
// digits take one path.
// The last numbers of an array use narrowInt, a digit at a time after
// eight-digit steps, which is what every number used before.
//
// Measured against that reader (go test -c of both, alternately): per
// element under valgrind --tool=cachegrind --branch-sim=yes (exact
// counts), BenchmarkI64s (274 hashes) 249 instructions and 46 branches
// before, 182 and 7 now; BenchmarkU32s (4,400 token ids) 142 and 38,
// then 79 and 9. CPU time per array (user+sys of the test binary, less
// a one-op run, 12 alternating pairs on the shared 2-core machine):
// I64s 4.4 to 3.4 µs (median ratio 0.78), U32s 37.6 to 24.2 µs (0.65).
// Reading the words before the sign is known (instead of after it) cost
// 11 instructions a hash and saved 7% of the time. What did not help:
// parsing two arrays in one loop (two independent chains of offsets):
// the loop is bound by its instructions, not by that chain.

// wideRoom is what a wide reader may read from a number's start: three
// words (a sign, 19 digits and the byte after them fit).
const wideRoom = 3 * 8

const (
	zeros8 = 0x3030303030303030 // eight '0'
	highs8 = 0x8080808080808080
)

// pow10 are the powers of ten a word's value is scaled by (16 entries, so
// that an index masked with 15 needs no bounds check).
var pow10 = [16]uint64{1, 10, 100, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8}

// nonDigits returns w (eight input bytes, little-endian) with the high bit
// of every byte that is not an ASCII digit set and every other bit clear.
// No carry crosses a byte: (t &^ 0x80) + 0x76 is at most 0xF5.
func nonDigits(w uint64) uint64 {
	t := w ^ zeros8 // a digit becomes 0 to 9, any other byte something else
	return ((t &^ highs8) + 0x7676767676767676 | t) & highs8
}

// word returns the eight input bytes at base+j as a little-endian word.
// The caller guarantees j+8 <= len of the input base points to: it reads
// without a bounds check, so that a number's three loads cost three
// instructions, not three slicings of the input (a third of the reader's
// instructions; encoding/binary keeps it correct on big-endian machines).
func word(base unsafe.Pointer, j int) uint64 {
	return binary.LittleEndian.Uint64((*[8]byte)(unsafe.Add(base, j))[:])
}

// leadingDigits is the number of leading digit bytes of a word whose
// nonDigits is m: 8 when every byte is a digit.
func leadingDigits(m uint64) int { return bits.TrailingZeros64(m) >> 3 }

// wordValue is the value of eight ASCII digits, unchecked.
func wordValue(w uint64) uint64 { return digitsValue(w - zeros8) }

// digitsValue is the value of eight digit values (0 to 9, one a byte,
// the most significant first): Lemire's SWAR, pairs, then quads, then the
// whole.
func digitsValue(t uint64) uint64 {
	t = t*10 + t>>8
	return ((t&0x000000FF000000FF)*(100+1000000<<32) + ((t>>16)&0x000000FF000000FF)*(1+10000<<32)) >> 32
}

// prefixValue is the value of the first k (0 to 7) bytes of w, which are
// digits. Subtracting '0' from every byte borrows only upward, from the
// first non-digit on, so the digits' bytes are exact; the shift (two, so
// that neither is 64 or more: k = 0 shifts out everything) puts them at the
// top of the word behind 8-k zero digits.
func prefixValue(w uint64, k int) uint64 {
	return digitsValue((w - zeros8) << (uint(56-8*k) & 63) << 8)
}

// arrayStart reads an array's opening bracket at b[i:] (whitespace
// before it and after it skipped): next is its first element, or, when
// the array is empty, the byte after its closing bracket.
func arrayStart(b []byte, i int) (next int, empty, ok bool) {
	i = skipWS(b, i)
	if i >= len(b) || b[i] != '[' {
		return 0, false, false
	}
	i = skipWS(b, i+1)
	if i < len(b) && b[i] == ']' {
		return i + 1, true, true
	}
	return i, false, true
}

// arrayNext reads what follows an array's element at b[i:]: a comma
// (next is the next element, whitespace skipped) or the closing bracket
// (done, next is the byte after it); anything else is not ok.
func arrayNext(b []byte, i int) (next int, done, ok bool) {
	i = skipWS(b, i)
	if i >= len(b) {
		return 0, false, false
	}
	switch b[i] {
	case ',':
		return skipWS(b, i+1), false, true
	case ']':
		return i + 1, true, true
	}
	return 0, false, false
}

// fastI64s reads b[i:] as an array of i64 (two's complement bits) and
// appends them to dst; ok is false when the input needs the generic path
// (dst's new elements are then garbage: the caller passes its original
// dst to the generic path).
func fastI64s(b []byte, i int, dst []uint64) (_ []uint64, end int, ok bool) {
	i, empty, ok := arrayStart(b, i)
	if !ok || empty {
		return dst, i, ok
	}
	base := unsafe.Pointer(unsafe.SliceData(b))
	for {
		if len(b)-i >= wideRoom {
			w0, w1 := word(base, i), word(base, i+8)
			c := byte(w0)
			if c <= ' ' { // whitespace before an element
				j := skipWS(b, i)
				if j == i {
					return dst, 0, false
				}
				i = j
				continue
			}
			// A minus becomes a leading '0' ('-' + 3), so that the
			// words are read from i whatever the sign: the next
			// number's offset does not wait for a load of this one's
			// first byte. n counts the sign; first is the first digit.
			var neg uint64
			if c == '-' {
				neg = 1
			}
			w0 += 3 * neg
			first := byte(w0 >> (8 * neg))
			m0, m1 := nonDigits(w0), nonDigits(w1)
			var v uint64
			var n int
			switch {
			case m0|m1 == 0: // 16 digits or more: a hash
				w2 := word(base, i+16)
				k := leadingDigits(nonDigits(w2))
				if k > 3+int(neg) || first == '0' { // 20 digits or more, a leading zero
					return dst, 0, false
				}
				n = 16 + k
				v = (wordValue(w0)*1e8+wordValue(w1))*pow10[k&15] + prefixValue(w2, k)
				c = byte(w2 >> (8 * k))
			case m0 != 0:
				n = leadingDigits(m0)
				if d := n - int(neg); d == 0 || (d > 1 && first == '0') {
					return dst, 0, false
				}
				v = prefixValue(w0, n)
				c = byte(w0 >> (8 * n))
			default:
				k := leadingDigits(m1)
				if first == '0' {
					return dst, 0, false
				}
				n = 8 + k
				v = wordValue(w0)*pow10[k&15] + prefixValue(w1, k)
				c = byte(w1 >> (8 * k))
			}
			// c is the byte after the digits. v-neg wraps for -0,
			// which the generic path reports.
			if v-neg > 1<<63-1 {
				return dst, 0, false
			}
			dst = append(dst, (v^-neg)+neg)
			i += n
			if c == ',' { // the compact shape
				i++
				continue
			}
			// Anything else but whitespace and ']' (a fraction, an
			// exponent) fails below.
		} else {
			i = skipWS(b, i) // after a comma the wide branch took
			v, n, ok := narrowInt(b, i, true, 1<<63-1)
			if !ok {
				return dst, 0, false
			}
			dst = append(dst, v)
			i += n
		}
		next, done, ok := arrayNext(b, i)
		if !ok || done {
			return dst, next, ok
		}
		i = next
	}
}

// fastU32s is fastI64s for u32 token ids (1 to 10 digits, no sign).
func fastU32s(b []byte, i int, dst []uint32) (_ []uint32, end int, ok bool) {
	i, empty, ok := arrayStart(b, i)
	if !ok || empty {
		return dst, i, ok
	}
	base := unsafe.Pointer(unsafe.SliceData(b))
	for {
		if len(b)-i >= wideRoom {
			if b[i] <= ' ' {
				j := skipWS(b, i)
				if j == i {
					return dst, 0, false
				}
				i = j
				continue
			}
			w0 := word(base, i) // i+16 <= len(b): wideRoom
			var v uint64
			var n int
			var c byte
			if m0 := nonDigits(w0); m0 != 0 {
				n = leadingDigits(m0)
				if n == 0 {
					return dst, 0, false
				}
				v = prefixValue(w0, n)
				c = byte(w0 >> (8 * n))
			} else {
				w1 := word(base, i+8)
				k := leadingDigits(nonDigits(w1))
				if k > 2 { // 11 digits or more
					return dst, 0, false
				}
				n = 8 + k
				v = wordValue(w0)*pow10[k&15] + prefixValue(w1, k)
				c = byte(w1 >> (8 * k))
			}
			if (n > 1 && byte(w0) == '0') || v > 1<<32-1 {
				return dst, 0, false
			}
			dst = append(dst, uint32(v))
			i += n
			if c == ',' {
				i++
				continue
			}
		} else {
			i = skipWS(b, i) // after a comma the wide branch took
			v, n, ok := narrowInt(b, i, false, 1<<32-1)
			if !ok {
				return dst, 0, false
			}
			dst = append(dst, uint32(v))
			i += n
		}
		next, done, ok := arrayNext(b, i)
		if !ok || done {
			return dst, next, ok
		}
		i = next
	}
}

// fastInts is the fast path of U64s (worker id lists, short): narrowInt
// for every number. signed allows a minus sign (two's complement bits);
// values above max (or, negative, below -max-1) fail.
func fastInts(b []byte, i int, dst []uint64, signed bool, max uint64) (_ []uint64, end int, ok bool) {
	i, empty, ok := arrayStart(b, i)
	if !ok || empty {
		return dst, i, ok
	}
	for {
		v, n, ok := narrowInt(b, i, signed, max)
		if !ok {
			return dst, 0, false
		}
		dst = append(dst, v)
		next, done, ok := arrayNext(b, i+n)
		if !ok || done {
			return dst, next, ok
		}
		i = next
	}
}

// narrowInt reads the number at b[i:] with the fast paths' shape: an
// optional minus (signed only), at most 19 digits without a leading zero,
// not followed by a fraction or an exponent, at most max (negative: at
// least -max-1, and not -0, which the generic path reports). n is the
// number of bytes read. Eight digits a step while they last (a 19-digit
// hash is two steps and three single digits), then one at a time.
func narrowInt(b []byte, i int, signed bool, max uint64) (v uint64, n int, ok bool) {
	from := i
	neg := false
	if i < len(b) && b[i] == '-' {
		if !signed {
			return 0, 0, false
		}
		neg = true
		i++
	}
	start := i
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
	if d := i - start; d == 0 || d > 19 || (d > 1 && b[start] == '0') {
		return 0, 0, false
	}
	if i < len(b) && (b[i] == '.' || b[i] == 'e' || b[i] == 'E') {
		return 0, 0, false
	}
	if neg {
		if v > max+1 || v == 0 {
			return 0, 0, false
		}
		v = -v
	} else if v > max {
		return 0, 0, false
	}
	return v, i - from, true
}

// eightDigits parses b[:8] as eight ASCII digits (SWAR); ok is false when
// any byte is not a digit.
func eightDigits(b []byte) (uint64, bool) {
	w := binary.LittleEndian.Uint64(b)
	if nonDigits(w) != 0 {
		return 0, false
	}
	return wordValue(w), true
}

func skipWS(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\n' || b[i] == '\t' || b[i] == '\r') {
		i++
	}
	return i
}
