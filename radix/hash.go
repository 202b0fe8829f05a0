package radix

import (
	"encoding/binary"
	"unsafe"

	"github.com/zeebo/xxh3"
)

// Seed is Dynamo's XXH3 seed for local block hashes and the sequence chain.
const Seed uint64 = 1337

// HashSeed returns the local-hash seed for a LoRA adapter name and a cache
// salt (Dynamo's cache namespace): Seed, plus xxh3(lora, seed 0) when lora is
// non-empty, plus xxh3(salt, seed 1) when salt is non-empty, wrapping. Empty
// strings count as absent.
func HashSeed(lora, salt string) uint64 {
	s := Seed
	if lora != "" {
		s += xxh3.HashStringSeed(lora, 0)
	}
	if salt != "" {
		s += xxh3.HashStringSeed(salt, 1)
	}
	return s
}

// littleEndian is true on the machines Go runs on except big-endian ones; the
// fast path hashes a []uint32 in place because its memory already is the
// u32-little-endian byte string Dynamo hashes.
var littleEndian = func() bool {
	x := uint16(1)
	return *(*byte)(unsafe.Pointer(&x)) == 1
}()

// BlockHash returns the local hash of one block of tokens: XXH3-64 with seed
// over the tokens as u32 little-endian.
func BlockHash(tokens []uint32, seed uint64) uint64 {
	if len(tokens) == 0 {
		return xxh3.HashSeed(nil, seed)
	}
	if littleEndian {
		b := unsafe.Slice((*byte)(unsafe.Pointer(&tokens[0])), 4*len(tokens))
		return xxh3.HashSeed(b, seed)
	}
	buf := make([]byte, 4*len(tokens))
	for i, t := range tokens {
		binary.LittleEndian.PutUint32(buf[4*i:], t)
	}
	return xxh3.HashSeed(buf, seed)
}

// LocalHashes appends to dst the local hash of every full block of tokens
// (the partial tail block is dropped) and returns the extended slice. It
// allocates nothing when dst has room for len(tokens)/blockSize hashes.
// blockSize must be positive.
func LocalHashes(dst []uint64, tokens []uint32, blockSize int, seed uint64) []uint64 {
	if blockSize <= 0 {
		panic("radix: LocalHashes with non-positive block size")
	}
	for i := 0; i+blockSize <= len(tokens); i += blockSize {
		dst = append(dst, BlockHash(tokens[i:i+blockSize], seed))
	}
	return dst
}

// SeqHash is one step of the sequence (tracking) hash chain:
// xxh3(le64(prev) ++ le64(local), seed 1337).
func SeqHash(prev, local uint64) uint64 {
	var b [16]byte
	binary.LittleEndian.PutUint64(b[0:], prev)
	binary.LittleEndian.PutUint64(b[8:], local)
	return xxh3.HashSeed(b[:], Seed)
}

// SequenceHashes appends to dst the sequence hash chain of local:
// seq[0] = local[0], seq[i] = SeqHash(seq[i-1], local[i]).
func SequenceHashes(dst []uint64, local []uint64) []uint64 {
	var prev uint64
	for i, l := range local {
		if i == 0 {
			prev = l
		} else {
			prev = SeqHash(prev, l)
		}
		dst = append(dst, prev)
	}
	return dst
}
