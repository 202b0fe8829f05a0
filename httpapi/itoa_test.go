package httpapi

import (
	"math"
	"math/rand/v2"
	"strconv"
	"testing"
)

// TestAppendHashMatchesStrconv: the hash formatters write strconv's bytes
// for every length, the powers of ten and their neighbours, the limits,
// and random values of every magnitude.
func TestAppendHashMatchesStrconv(t *testing.T) {
	var us []uint64
	for p := uint64(1); ; p *= 10 {
		us = append(us, p-1, p, p+1)
		if p > math.MaxUint64/10 {
			break
		}
	}
	us = append(us, 0, math.MaxUint64, math.MaxUint64-1, 1<<63, 1<<63-1, 12345678, 87654321, 99999999_99999999)
	rng := rand.New(rand.NewPCG(4, 4))
	for range 200000 {
		us = append(us, rng.Uint64()>>rng.IntN(64))
	}
	for _, u := range us {
		if got, want := string(appendHashU64([]byte("x"), u)), "x"+strconv.FormatUint(u, 10); got != want {
			t.Fatalf("appendHashU64(%d) = %s, want %s", u, got, want)
		}
		for _, v := range []int64{int64(u), -int64(u), math.MinInt64, math.MaxInt64} {
			if got, want := string(appendHashI64(nil, v)), strconv.FormatInt(v, 10); got != want {
				t.Fatalf("appendHashI64(%d) = %s, want %s", v, got, want)
			}
		}
	}
	for x := uint64(0); x < 1e8; x += 1 + x/97 { // every digit position takes every value
		if got, want := appendHashU64(nil, 1e8+x)[1:], strconv.FormatUint(1e8+x, 10)[1:]; string(got) != want {
			t.Fatalf("eight digits of %d: %s, want %s", x, got, want)
		}
	}
}

// BenchmarkAppendHashes formats the 274 sequence hashes of a 275-block
// prompt as a booking answer with token ids does: strconv, then
// appendHashI64.
func BenchmarkAppendHashes(b *testing.B) {
	rng := rand.New(rand.NewPCG(5, 5))
	hs := make([]int64, 274)
	for i := range hs {
		hs[i] = int64(rng.Uint64())
	}
	buf := make([]byte, 0, 8192)
	b.Run("strconv", func(b *testing.B) {
		for b.Loop() {
			buf = buf[:0]
			for _, h := range hs {
				buf = strconv.AppendInt(buf, h, 10)
			}
		}
	})
	b.Run("swar", func(b *testing.B) {
		for b.Loop() {
			buf = buf[:0]
			for _, h := range hs {
				buf = appendHashI64(buf, h)
			}
		}
	})
}
