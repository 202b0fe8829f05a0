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

// BlockHashMM returns the local hash of a block holding multimodal
// content: XXH3-64 with seed over the tokens as u32 little-endian followed
// by the block's mm hashes as u64 little-endian, ascending (Dynamo's
// compute_block_hash_for_seq with block_mm_infos,
// ai-dynamo/dynamo:lib/kv-router/src/protocols.rs). With no mm hash it is
// BlockHash. buf is scratch, grown as needed and reused.
func BlockHashMM(tokens []uint32, mm []uint64, seed uint64, buf *[]byte) uint64 {
	if len(mm) == 0 {
		return BlockHash(tokens, seed)
	}
	p := (*buf)[:0]
	for _, t := range tokens {
		p = binary.LittleEndian.AppendUint32(p, t)
	}
	start := len(p)
	for _, h := range mm {
		p = binary.LittleEndian.AppendUint64(p, h)
	}
	// Insertion sort of the mm hashes in place: a block has a handful.
	for i := start + 8; i < len(p); i += 8 {
		v := binary.LittleEndian.Uint64(p[i:])
		j := i
		for ; j > start && binary.LittleEndian.Uint64(p[j-8:]) > v; j -= 8 {
			copy(p[j:j+8], p[j-8:j])
		}
		binary.LittleEndian.PutUint64(p[j:], v)
	}
	*buf = p
	return xxh3.HashSeed(p, seed)
}
