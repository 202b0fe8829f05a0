package text

import "strings"

// Chunks: a long segment of a byte-level model is encoded in chunks, each
// looked up in the chunk cache first, so that the shared head of prompts
// (a system prompt, a conversation's earlier turns, a document asked
// about again) costs a lookup, not a tokenization. The result is the same
// ids: a chunk ends only where every implemented pre-tokenizer ends a
// pre-token whatever surrounds the cut, and a byte-level model encodes
// pre-tokens one by one.
//
// The cut rule: s[p-1] is an ASCII letter, s[p] a space, s[p+1] an ASCII
// letter. In every pattern of pretok.go the pre-token holding the letter
// at p-1 is a letter run (or a contraction, or DeepSeek's punctuation and
// letters) that a space ends, none of them looks behind its start, and a
// space before a letter starts a new pre-token (the optional prefix
// character of a letter run); the digit and CJK splits match neither
// letters nor spaces. So the pre-tokens of s[:p] and s[p:] encoded apart
// are those of s. (TestExactChunkedEqualsWhole checks it on every family.)
const (
	// minChunk is a chunk's least length in bytes: it is cut at the first
	// cut point at least this far from its start. A segment shorter than
	// twice it is encoded whole, and so is a segment's last piece (shorter
	// than twice it: the text after the last cut, new in every prompt),
	// which is most of a warm encode's time. 256 rather than 512:
	// BenchmarkEncodePrompt4096/warm 24.9 -> 17.7 us (two runs each, one
	// session); 128 gained nothing more, and every chunk costs a lookup
	// and 64 bytes of the cache's accounting.
	minChunk = 256
	// maxChunk bounds the search for a cut point: a segment with none in
	// the maxChunk bytes after a chunk's least length (CJK text, code
	// without spaced words) is encoded whole from there, uncached.
	maxChunk = 8 << 10
)

// nextCut returns the first cut point of s at or after from, or -1 when
// there is none before from+maxChunk.
func nextCut(s string, from int) int {
	limit := min(len(s)-1, from+maxChunk)
	for p := max(from, 1); p < limit; {
		j := strings.IndexByte(s[p:limit], ' ')
		if j < 0 {
			return -1
		}
		p += j
		if asciiLetterByte(s[p-1]) && asciiLetterByte(s[p+1]) {
			return p
		}
		p++
	}
	return -1
}

// encodeChunked is encodeSegment over chunks of seg, each from the chunk
// cache when it is there.
func (t *Tokenizer) encodeChunked(seg string, dst []uint32, sc *scratch) []uint32 {
	a := 0
	for len(seg)-a >= 2*minChunk {
		b := nextCut(seg, a+minChunk)
		if b < 0 {
			break
		}
		chunk := seg[a:b]
		if ids, ok := t.chunks.get(chunk); ok {
			dst = append(dst, ids...)
		} else {
			start := len(dst)
			dst = t.encodeWhole(chunk, dst, sc)
			t.chunks.put(chunk, dst[start:])
		}
		a = b
	}
	return t.encodeWhole(seg[a:], dst, sc)
}
