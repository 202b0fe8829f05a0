package text

import (
	"strconv"
	"strings"
	"sync"
	"unicode/utf8"
)

// Tokenizer turns text into the token ids a Hugging Face tokenizer (the
// Rust tokenizers behind transformers, as vLLM and SGLang run it) computes
// for the same files, and ids back into text. Safe for concurrent use.
type Tokenizer struct {
	model     bpe
	normalize func(string) string // nil: none
	split     []splitter          // the Split pre-tokenizers, in order
	// metaspace is a SentencePiece file's Metaspace pre-tokenizer (nil:
	// none, the Replace/Prepend normalizer form or byte-level).
	metaspace *metaspace
	added     addedVocab
	// bos and eos are prepended and appended by Encode with special
	// tokens (the post-processor, or the tokenizer class's
	// add_bos_token / add_eos_token); nil: none.
	bos, eos []uint32
	// BOS and EOS are the config's bos_token and eos_token ids, -1 none.
	BOS, EOS int64
	// ChatTemplate is tokenizer_config.json's chat_template ("" none;
	// of a list of named ones, "default").
	ChatTemplate string
	chat         *chatTemplates // parsed at Load: chat.go
	// ModelMaxLength is tokenizer_config.json's model_max_length (0
	// unknown).
	ModelMaxLength int64
	// cleanUp is clean_up_tokenization_spaces: Decode drops the space
	// transformers drops before punctuation and contractions.
	cleanUp bool
	scratch sync.Pool
	// chunks caches long segments' chunks (chunks.go); byte-level only.
	chunks idCache
}

// Encode appends the token ids of s to dst. addSpecial adds what the
// post-processor adds (a BOS, for example), as add_special_tokens does.
func (t *Tokenizer) Encode(dst []uint32, s string, addSpecial bool) []uint32 {
	sc := t.scratch.Get().(*scratch)
	defer t.scratch.Put(sc)
	if addSpecial {
		dst = append(dst, t.bos...)
	}
	dst = t.added.split(s, t.normalize, dst, func(seg string, first bool, dst []uint32) []uint32 {
		if t.metaspace != nil {
			seg = t.metaspace.apply(seg, first, sc)
		}
		return t.encodeSegment(seg, dst, sc)
	})
	if addSpecial {
		dst = append(dst, t.eos...)
	}
	return dst
}

// encodeSegment encodes normalized text between added tokens: a long
// segment of a byte-level model in chunks (chunks.go), else whole.
func (t *Tokenizer) encodeSegment(seg string, dst []uint32, sc *scratch) []uint32 {
	if len(t.split) > 0 && len(seg) >= 2*minChunk {
		return t.encodeChunked(seg, dst, sc)
	}
	return t.encodeWhole(seg, dst, sc)
}

// encodeWhole pre-tokenizes seg and encodes its pre-tokens.
func (t *Tokenizer) encodeWhole(seg string, dst []uint32, sc *scratch) []uint32 {
	spans := append(sc.spans[:0], span{0, len(seg)})
	for _, sp := range t.split {
		sc.tmp = splitIsolated(seg, spans, sp, sc.tmp[:0])
		spans, sc.tmp = sc.tmp, spans
	}
	for _, p := range spans {
		if p.end > p.start {
			dst = t.model.encode(seg[p.start:p.end], dst, sc)
		}
	}
	sc.spans = spans
	return dst
}

// Decode is the text of ids as transformers' decode makes it: the
// decoder's text (byte-level: tokens' spelling back to bytes, then UTF-8
// with each invalid sequence replaced by U+FFFD as Rust's
// String::from_utf8_lossy does; SentencePiece: decodeSentencePiece), then,
// with clean_up_tokenization_spaces, transformers' clean-up. skipSpecial
// leaves the special added tokens out. An id outside the vocabulary is
// skipped.
func (t *Tokenizer) Decode(ids []uint32, skipSpecial bool) string {
	var s string
	if t.model.sentencePiece {
		s = t.decodeSentencePiece(ids, skipSpecial)
	} else {
		s = t.decodeByteLevel(ids, skipSpecial)
	}
	if t.cleanUp {
		s = cleanUp.Replace(s)
	}
	return s
}

// cleanUp is transformers' clean_up_tokenization: the spaces a word
// tokenizer leaves before punctuation and English contractions.
var cleanUp = strings.NewReplacer(" .", ".", " ?", "?", " !", "!", " ,", ",", " ' ", "'", " n't", "n't", " 'm", "'m", " 's", "'s", " 've", "'ve", " 're", "'re")

func (t *Tokenizer) decodeByteLevel(ids []uint32, skipSpecial bool) string {
	var b []byte
	for _, id := range ids {
		if a, ok := t.added.byID[id]; ok {
			if skipSpecial && a.Special {
				continue
			}
			b = append(b, a.Content...)
			continue
		}
		if int(id) >= len(t.model.tokens) {
			continue
		}
		for _, r := range t.model.tokens[id] {
			if c, ok := runeByte[r]; ok {
				b = append(b, byte(c))
			} else {
				b = utf8.AppendRune(b, r)
			}
		}
	}
	return lossy(b)
}

// lossy converts b to a string, replacing each maximal invalid subpart
// of a UTF-8 sequence by one U+FFFD (Rust's from_utf8_lossy, WHATWG's
// decoder): a truncated sequence is one replacement, a stray
// continuation byte one each.
func lossy(b []byte) string {
	if utf8.Valid(b) {
		return string(b)
	}
	var out strings.Builder
	for i := 0; i < len(b); {
		r, w := utf8.DecodeRune(b[i:])
		if r != utf8.RuneError || w > 1 {
			out.Write(b[i : i+w])
			i += w
			continue
		}
		out.WriteRune(utf8.RuneError)
		i += validPrefix(b[i:])
	}
	return out.String()
}

// validPrefix is the length of the longest prefix of b that starts a
// valid UTF-8 sequence (at least 1), b[0] not starting a complete one.
func validPrefix(b []byte) int {
	c := b[0]
	var n int
	lo, hi := byte(0x80), byte(0xBF)
	switch {
	case c >= 0xC2 && c <= 0xDF:
		n = 2
	case c == 0xE0:
		n, lo = 3, 0xA0
	case c >= 0xE1 && c <= 0xEC, c == 0xEE, c == 0xEF:
		n = 3
	case c == 0xED:
		n, hi = 3, 0x9F
	case c == 0xF0:
		n, lo = 4, 0x90
	case c >= 0xF1 && c <= 0xF3:
		n = 4
	case c == 0xF4:
		n, hi = 4, 0x8F
	default:
		return 1
	}
	i := 1
	for ; i < n && i < len(b); i++ {
		if b[i] < lo || b[i] > hi {
			break
		}
		lo, hi = 0x80, 0xBF
	}
	return i
}

// CacheStats reports the word cache's hits, misses and bytes.
func (t *Tokenizer) CacheStats() CacheStats { return t.model.cache.stats() }

// ChunkCacheStats reports the chunk cache's (chunks.go).
func (t *Tokenizer) ChunkCacheStats() CacheStats { return t.chunks.stats() }

// VocabSize is the number of ids (the vocabulary and the added tokens).
func (t *Tokenizer) VocabSize() int { return len(t.model.tokens) }

// decodeSentencePiece is the Llama 2 / Mistral decoder: ▁ back to spaces,
// runs of <0xXX> tokens back to their bytes (each byte a U+FFFD when the
// run is not valid UTF-8, as tokenizers' ByteFallback does), the pieces
// fused, one leading space stripped.
func (t *Tokenizer) decodeSentencePiece(ids []uint32, skipSpecial bool) string {
	var out strings.Builder
	var run []byte // pending byte-fallback bytes
	flush := func() {
		if utf8.Valid(run) {
			out.Write(run)
		} else {
			for range run {
				out.WriteRune(utf8.RuneError)
			}
		}
		run = run[:0]
	}
	for _, id := range ids {
		if a, ok := t.added.byID[id]; ok {
			if skipSpecial && a.Special {
				continue
			}
			flush()
			out.WriteString(strings.ReplaceAll(a.Content, "▁", " "))
			continue
		}
		if int(id) >= len(t.model.tokens) {
			continue
		}
		tok := t.model.tokens[id]
		if len(tok) == 6 && strings.HasPrefix(tok, "<0x") && tok[5] == '>' {
			if v, err := strconv.ParseUint(tok[3:5], 16, 8); err == nil {
				run = append(run, byte(v))
				continue
			}
		}
		flush()
		out.WriteString(strings.ReplaceAll(tok, "▁", " "))
	}
	flush()
	return strings.TrimPrefix(out.String(), " ")
}
