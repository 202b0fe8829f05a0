package jsonscan

import (
	"math/rand/v2"
	"strconv"
	"testing"
)

// hashArray is a compact JSON array of n signed 64-bit hashes spread over
// the whole range (18 to 20 bytes each, half of them negative), the shape
// of block_hashes and sequence_hashes.
func hashArray(n int, seed uint64) []byte {
	rng := rand.New(rand.NewPCG(seed, seed))
	b := []byte{'['}
	for i := range n {
		if i > 0 {
			b = append(b, ',')
		}
		b = strconv.AppendInt(b, int64(rng.Uint64()), 10)
	}
	return append(b, ']')
}

// tokenArray is a compact JSON array of n token ids below 128,000 (a
// Llama 3 vocabulary: 1 to 6 digits, mostly 5), the shape of token_ids.
func tokenArray(n int, seed uint64) []byte {
	rng := rand.New(rand.NewPCG(seed, seed))
	b := []byte{'['}
	for i := range n {
		if i > 0 {
			b = append(b, ',')
		}
		b = strconv.AppendUint(b, uint64(rng.Uint32N(128000)), 10)
	}
	return append(b, ']')
}

// BenchmarkI64s reads one array of 274 hashes (a 275-block prompt's
// sequence_hashes, 5.3 KB), BenchmarkU32s one of 4,400 token ids (the
// same prompt's token_ids, 25 KB), each into a slice with room.
func BenchmarkI64s(b *testing.B) {
	body := hashArray(274, 1)
	dst := make([]uint64, 0, 274)
	var s Scanner
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	for b.Loop() {
		s.Reset(body)
		out, _, err := s.I64s("a", dst[:0])
		if err != nil || len(out) != 274 {
			b.Fatal(err, len(out))
		}
	}
}

func BenchmarkU32s(b *testing.B) {
	body := tokenArray(4400, 2)
	dst := make([]uint32, 0, 4400)
	var s Scanner
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	for b.Loop() {
		s.Reset(body)
		out, _, err := s.U32s("a", dst[:0])
		if err != nil || len(out) != 4400 {
			b.Fatal(err, len(out))
		}
	}
}
