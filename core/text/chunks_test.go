package text

import (
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
)

// longTexts are long inputs that exercise the chunk cut rule: corpus
// strings (every script, whitespace runs, contractions, digits, special
// token look-alikes) joined by spaces, by nothing and by newlines, and
// prose in which cut points are frequent.
func longTexts(n int) []string {
	c := corpus()
	r := rand.New(rand.NewPCG(11, 11))
	seps := []string{" ", "", "\n", "  ", " a ", "'s "}
	var out []string
	for len(out) < n {
		var b strings.Builder
		size := 1100 + r.IntN(20000)
		for b.Len() < size {
			b.WriteString(c[r.IntN(len(c)-2)])
			b.WriteString(seps[r.IntN(len(seps))])
		}
		out = append(out, b.String())
	}
	words := strings.Fields("the quick brown fox jumps over a lazy dog it's don't we'll CAPS MiXeD 123 4567 naïve café 中文 ok")
	var b strings.Builder
	for i := 0; b.Len() < 30000; i++ {
		b.WriteString(words[r.IntN(len(words))])
		b.WriteByte(" \n"[min(1, r.IntN(20))])
	}
	return append(out, b.String())
}

// TestExactChunkedEqualsWhole: on every byte-level family, encoding long texts
// in cached chunks gives the ids of encoding them whole, the first time
// (chunks encoded and cached) and the second (chunks from the cache).
func TestExactChunkedEqualsWhole(t *testing.T) {
	requireReferences(t)
	texts := sampled(longTexts(150))
	for _, fam := range families {
		tok := load(t, fam)
		if len(tok.split) == 0 {
			continue // SentencePiece: never chunked
		}
		t.Run(fam, func(t *testing.T) {
			tok.resetCaches()
			sc := new(scratch)
			for pass := range 2 {
				for i, s := range texts {
					seg := s
					if tok.normalize != nil {
						seg = tok.normalize(s)
					}
					want := tok.encodeWhole(seg, nil, sc)
					got := tok.encodeSegment(seg, nil, sc)
					if !slices.Equal(got, want) {
						k := 0
						for k < len(got) && k < len(want) && got[k] == want[k] {
							k++
						}
						t.Fatalf("pass %d text %d (%d bytes): chunked ids differ at %d: %v, want %v", pass, i, len(s), k, clipIDs(got[k:]), clipIDs(want[k:]))
					}
				}
			}
			if st := tok.ChunkCacheStats(); st.Hits == 0 || st.Bytes == 0 {
				t.Fatalf("chunk cache unused: %+v", st)
			}
		})
	}
}

// TestExactChunked: the long texts' ids, chunked, are
// tokenizers.js's.
func TestExactChunked(t *testing.T) {
	requireReferences(t)
	texts := sampled(longTexts(40))
	for _, fam := range []string{"llama3", "qwen3", "deepseek_v3", "gptoss"} {
		tok := load(t, fam)
		refs := references(t, fam, texts, false)
		for i, s := range texts {
			if got := tok.Encode(nil, s, false); !slices.Equal(got, refs[i]) {
				t.Fatalf("%s text %d: %v, want %v", fam, i, clipIDs(got), clipIDs(refs[i]))
			}
		}
	}
}

// TestChunkCacheBounded: distinct chunks past the limit (1 MiB here, the
// default's 32 MiB in Load) keep the cache within it, and the chunks of a
// text seen again are hits.
func TestChunkCacheBounded(t *testing.T) {
	requireReferences(t)
	if l := load(t, "llama3").ChunkCacheStats().Limit; l != chunkCacheBytes {
		t.Fatalf("loaded with a chunk cache limit of %d, want %d", l, chunkCacheBytes)
	}
	tok := loadFresh(t, "llama3")
	tok.chunks.limit = 1 << 20
	r := rand.New(rand.NewPCG(3, 3))
	word := func() string {
		b := make([]byte, 3+r.IntN(8))
		for i := range b {
			b[i] = byte('a' + r.IntN(26))
		}
		return string(b)
	}
	var b strings.Builder
	for b.Len() < 64<<10 {
		b.WriteString(word())
		b.WriteByte(' ')
	}
	text := b.String()
	tok.Encode(nil, text, false)
	before := tok.ChunkCacheStats()
	tok.Encode(nil, text, false)
	after := tok.ChunkCacheStats()
	if after.Hits-before.Hits < 100 || after.Misses != before.Misses {
		t.Fatalf("the same text again: %+v then %+v, want only hits", before, after)
	}
	for range 40 { // 40 texts of 64 KiB: 2.5 MiB of distinct chunks
		b.Reset()
		for b.Len() < 64<<10 {
			b.WriteString(word())
			b.WriteByte(' ')
		}
		tok.Encode(nil, b.String(), false)
		if st := tok.ChunkCacheStats(); st.Bytes > st.Limit {
			t.Fatalf("chunk cache %d bytes over its limit %d", st.Bytes, st.Limit)
		}
	}
	if st := tok.ChunkCacheStats(); st.Bytes < st.Limit/8 {
		t.Fatalf("chunk cache %+v: want it used up to its limit", st)
	}
}

// loadFresh loads family's files into a tokenizer of the test's own.
func loadFresh(t testing.TB, family string) *Tokenizer {
	t.Helper()
	tok, err := loadDir(t, modelDir(family))
	if err != nil {
		t.Fatal(err)
	}
	return tok
}
