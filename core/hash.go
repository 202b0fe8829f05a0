package core

import (
	"encoding/binary"
	"slices"

	"github.com/kvselect/kvselect/radix"
	"github.com/zeebo/xxh3"
)

// localHashes appends the local block hashes of toks (the reference's
// compute_block_hash_for_seq, ai-dynamo/dynamo:lib/kv-router/src/protocols.rs):
// radix.LocalHashes' scheme, plus two variants radix does not cover.
//   - Eagle: block i hashes the window [i*bs, i*bs+bs+1), stride bs, so
//     there are (n-1)/bs blocks.
//   - Multimodal: a block with mm hashes (mm[i], any order) hashes its token
//     bytes followed by the mm hashes as u64 little-endian, ascending.
//
// buf is scratch for the multimodal bytes.
func localHashes(dst []uint64, toks []uint32, bs int, seed uint64, eagle bool, mm [][]uint64, buf *[]byte) []uint64 {
	if !eagle && len(mm) == 0 {
		return radix.LocalHashes(dst, toks, bs, seed)
	}
	if bs <= 0 {
		panic("BUG: localHashes with a non-positive block size")
	}
	win := bs
	if eagle {
		win = bs + 1
	}
	for b, i := 0, 0; i+win <= len(toks); b, i = b+1, i+bs {
		w := toks[i : i+win]
		if b >= len(mm) || len(mm[b]) == 0 {
			dst = append(dst, radix.BlockHash(w, seed))
			continue
		}
		p := (*buf)[:0]
		for _, t := range w {
			p = binary.LittleEndian.AppendUint32(p, t)
		}
		start := len(p)
		for _, h := range mm[b] {
			p = binary.LittleEndian.AppendUint64(p, h)
		}
		sortU64LE(p[start:])
		*buf = p
		dst = append(dst, xxh3.HashSeed(p, seed))
	}
	return dst
}

// sortU64LE sorts the little-endian u64s of b ascending, in place.
func sortU64LE(b []byte) {
	n := len(b) / 8
	if n < 2 {
		return
	}
	vs := make([]uint64, n)
	for i := range vs {
		vs[i] = binary.LittleEndian.Uint64(b[8*i:])
	}
	slices.Sort(vs)
	for i, v := range vs {
		binary.LittleEndian.PutUint64(b[8*i:], v)
	}
}
