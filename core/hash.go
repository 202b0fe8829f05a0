package core

import "github.com/kvselect/kvselect/radix"

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
		dst = append(dst, radix.BlockHashMM(w, mm[b], seed, buf))
	}
	return dst
}
