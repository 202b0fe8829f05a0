package text

import (
	"hash/maphash"
	"unicode/utf8"
)

// bpe is a byte-level BPE model (tokenizers' models/bpe): a vocabulary of
// byte-level spelled tokens and ranked merges. A pre-token's bytes start
// as one symbol each (byteID); the adjacent pair of lowest rank merges
// first (leftmost among equals), until no pair merges. With ignoreMerges a
// pre-token that is itself in the vocabulary is that one token.
type bpe struct {
	// tokens are the vocabulary by id ("" for an id it lacks), index
	// finds an id by its text: an open-addressing table of id+1 (0 free),
	// a quarter of the heap a map of the vocabulary would take.
	tokens       []string
	index        []uint32
	seed         maphash.Seed
	merges       map[uint64]mergeTo
	byteID       [256]uint32
	ignoreMerges bool
	cache        idCache // pre-tokens' ids (wordCacheBytes, wordCacheKey)
	// sentencePiece: the vocabulary is spelled in characters, not bytes
	// (Llama 2, Mistral): a word starts as one symbol per character; a
	// character outside the vocabulary becomes its UTF-8 bytes' <0xXX>
	// tokens (byte fallback, byteID) or, without them, unk (consecutive
	// unks fused into one with fuseUnk).
	sentencePiece, byteFallback, fuseUnk bool
	unk                                  int64 // -1: none
}

// mergeTo is a merge's rank and the id of the token it makes.
type mergeTo struct{ rank, id uint32 }

func pairKey(a, b uint32) uint64 { return uint64(a)<<32 | uint64(b) }

// scratch is one encode's working memory, pooled.
type scratch struct {
	spans, tmp []span
	syms       []sym
	heap       []cand
	buf        []byte
	meta       []byte // metaspace.apply's output
}

// sym is one symbol of a word being merged: its token id and its
// neighbours (-1 none); dead symbols were merged into their left one.
type sym struct {
	id         uint32
	prev, next int32
	dead       bool
}

// cand is a candidate merge of the symbol at pos with its right
// neighbour, valid while both still hold left and right.
type cand struct {
	rank, id    uint32
	pos         int32
	left, right uint32
}

func less(a, b cand) bool { return a.rank < b.rank || a.rank == b.rank && a.pos < b.pos }

func (sc *scratch) push(c cand) {
	h := append(sc.heap, c)
	i := len(h) - 1
	for i > 0 {
		p := (i - 1) / 2
		if !less(h[i], h[p]) {
			break
		}
		h[i], h[p] = h[p], h[i]
		i = p
	}
	sc.heap = h
}

func (sc *scratch) pop() cand {
	h := sc.heap
	top := h[0]
	n := len(h) - 1
	h[0] = h[n]
	h = h[:n]
	for i := 0; ; {
		l, r, m := 2*i+1, 2*i+2, i
		if l < n && less(h[l], h[m]) {
			m = l
		}
		if r < n && less(h[r], h[m]) {
			m = r
		}
		if m == i {
			break
		}
		h[i], h[m] = h[m], h[i]
		i = m
	}
	sc.heap = h
	return top
}

// encode appends the ids of one pre-token (its raw bytes) to dst.
func (m *bpe) encode(piece string, dst []uint32, sc *scratch) []uint32 {
	if m.ignoreMerges {
		sc.buf = appendByteLevel(sc.buf[:0], piece)
		if id, ok := m.lookup(string(sc.buf)); ok {
			return append(dst, id)
		}
	}
	if len(piece) == 1 && !m.sentencePiece {
		return append(dst, m.byteID[piece[0]])
	}
	if ids, ok := m.cache.get(piece); ok {
		return append(dst, ids...)
	}
	start := len(dst)
	dst = m.merge(piece, dst, sc)
	m.cache.put(piece, dst[start:])
	return dst
}

// merge runs the merges over piece's symbols: its bytes, or its
// characters (sentencePiece).
func (m *bpe) merge(piece string, dst []uint32, sc *scratch) []uint32 {
	syms := sc.syms[:0]
	if m.sentencePiece {
		syms = m.charSymbols(piece, syms)
		if len(syms) == 0 {
			sc.syms = syms
			return dst
		}
	} else {
		for i := 0; i < len(piece); i++ {
			syms = append(syms, sym{id: m.byteID[piece[i]]})
		}
	}
	n := len(syms)
	for i := range syms {
		syms[i].prev, syms[i].next = int32(i-1), int32(i+1)
	}
	syms[n-1].next = -1
	sc.heap = sc.heap[:0]
	for i := 0; i+1 < n; i++ {
		if mt, ok := m.merges[pairKey(syms[i].id, syms[i+1].id)]; ok {
			sc.push(cand{rank: mt.rank, id: mt.id, pos: int32(i), left: syms[i].id, right: syms[i+1].id})
		}
	}
	for len(sc.heap) > 0 {
		c := sc.pop()
		s := &syms[c.pos]
		if s.dead || s.id != c.left || s.next < 0 || syms[s.next].id != c.right {
			continue
		}
		r := &syms[s.next]
		s.id = c.id
		r.dead = true
		s.next = r.next
		if r.next >= 0 {
			syms[r.next].prev = c.pos
		}
		if s.prev >= 0 {
			p := &syms[s.prev]
			if mt, ok := m.merges[pairKey(p.id, s.id)]; ok {
				sc.push(cand{rank: mt.rank, id: mt.id, pos: s.prev, left: p.id, right: s.id})
			}
		}
		if s.next >= 0 {
			if mt, ok := m.merges[pairKey(s.id, syms[s.next].id)]; ok {
				sc.push(cand{rank: mt.rank, id: mt.id, pos: c.pos, left: s.id, right: syms[s.next].id})
			}
		}
	}
	for i := int32(0); i >= 0; i = syms[i].next {
		dst = append(dst, syms[i].id)
	}
	sc.syms = syms
	return dst
}

// appendByteLevel appends s spelled in the byte-level alphabet.
func appendByteLevel(dst []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		dst = append(dst, byteChar[s[i]]...)
	}
	return dst
}

// buildIndex indexes tokens by text (at most half the slots in use).
func (m *bpe) buildIndex() {
	m.seed = maphash.MakeSeed()
	n := 1
	for n < 2*len(m.tokens) {
		n <<= 1
	}
	m.index = make([]uint32, n)
	mask := uint64(n - 1)
	for id, s := range m.tokens {
		if s == "" {
			continue
		}
		for i := maphash.String(m.seed, s) & mask; ; i = (i + 1) & mask {
			if m.index[i] == 0 {
				m.index[i] = uint32(id) + 1
				break
			}
		}
	}
}

// lookup is the id of the vocabulary token s.
func (m *bpe) lookup(s string) (uint32, bool) {
	mask := uint64(len(m.index) - 1)
	for i := maphash.String(m.seed, s) & mask; ; i = (i + 1) & mask {
		v := m.index[i]
		if v == 0 {
			return 0, false
		}
		if m.tokens[v-1] == s {
			return v - 1, true
		}
	}
}

// charSymbols appends the initial symbols of a sentencePiece word: one per
// character in the vocabulary, else its bytes' fallback tokens, else unk.
func (m *bpe) charSymbols(piece string, syms []sym) []sym {
	lastUnk := false
	for i, r := range piece {
		w := utf8.RuneLen(r)
		if r == utf8.RuneError {
			_, w = utf8.DecodeRuneInString(piece[i:])
		}
		if id, ok := m.lookup(piece[i : i+w]); ok {
			syms = append(syms, sym{id: id})
			lastUnk = false
			continue
		}
		if m.byteFallback {
			for j := i; j < i+w; j++ {
				syms = append(syms, sym{id: m.byteID[piece[j]]})
			}
			lastUnk = false
			continue
		}
		if m.unk < 0 {
			continue // no unk token: the character is dropped, as tokenizers drops it
		}
		if m.fuseUnk && lastUnk {
			continue
		}
		syms = append(syms, sym{id: uint32(m.unk)})
		lastUnk = true
	}
	return syms
}
