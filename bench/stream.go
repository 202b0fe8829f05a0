package bench

import "github.com/kvselect/kvselect/radix"

// A request's token stream is its prompt followed by its output: an engine
// keeps the KV of both, and with prefix caching the full blocks of the
// output are cached (and published) too, so that a conversation's next
// turn, whose prompt repeats the answer, finds them. The stream's tokens
// at position i are:
//
//   - i < p.ISL: the prompt's own (Prompt.AppendAllTokens);
//   - else, when next continues p (the same conversation's next turn, whose
//     prompt starts with p's prompt and answer): next's token i, so the
//     answer's blocks hash as next's prompt blocks do;
//   - else a pseudo-random token of p's own: an answer nothing repeats.

// StreamTokens returns the stream's length that an engine computes: the
// prompt and all but the last output token (whose KV is never computed).
func StreamTokens(p *Prompt, outputTokens int) int { return p.ISL + max(outputTokens, 1) - 1 }

// StreamHashes returns the local and engine (sequence) hashes of the full
// blocks of p's stream (StreamTokens(p, outputTokens) tokens at block size
// bs, the size p was built with), next as in the package comment (nil:
// none). The prompt's part is p.Local and p.Seq.
func StreamHashes(p, next *Prompt, outputTokens, bs int) (local, seq []uint64) {
	n := StreamTokens(p, outputTokens) / bs
	local = append(make([]uint64, 0, n), p.Local...)
	seq = append(make([]uint64, 0, n), p.Seq...)
	var tok []uint32
	for k := len(local); k < n; k++ {
		tok = AppendStreamTokens(tok[:0], p, next, k*bs, (k+1)*bs)
		h := radix.BlockHash(tok, radix.Seed)
		local = append(local, h)
		if k == 0 {
			seq = append(seq, h)
		} else {
			seq = append(seq, radix.SeqHash(seq[k-1], h))
		}
	}
	return local, seq
}

// AppendStreamTokens appends the stream's tokens [from, to) to dst.
func AppendStreamTokens(dst []uint32, p, next *Prompt, from, to int) []uint32 {
	if from < p.ISL {
		end := min(to, p.ISL)
		dst = p.appendTokenRange(dst, from, end)
		from = end
	}
	if from < to && next != nil && from < next.ISL {
		end := min(to, next.ISL)
		dst = next.appendTokenRange(dst, from, end)
		from = end
	}
	for i := from; i < to; i++ {
		dst = append(dst, uint32(splitmix64(uint64(p.Index)<<32^uint64(i)^0x6f7574707574)%traceVocab))
	}
	return dst
}

// LocalHash is the selector's local hash of one block of tokens (no LoRA,
// no salt), the hash a selection body's block_hashes carry.
func LocalHash(tokens []uint32) uint64 {
	return radix.BlockHash(tokens, radix.HashSeed("", ""))
}
