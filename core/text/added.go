package text

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
	"unicode"
)

// addedToken is one entry of tokenizer.json's added_tokens.
type addedToken struct {
	ID         uint32 `json:"id"`
	Content    string `json:"content"`
	SingleWord bool   `json:"single_word"`
	LStrip     bool   `json:"lstrip"`
	RStrip     bool   `json:"rstrip"`
	Normalized bool   `json:"normalized"`
	Special    bool   `json:"special"`
}

// addedVocab matches the added tokens before the model sees the text, as
// tokenizers' AddedVocabulary does (tokenizer/added_vocabulary.rs): first
// the tokens with normalized false in the raw text, then, in what is left
// after normalization, the tokens with normalized true; leftmost match
// first, the longest of those starting there. lstrip and rstrip take the
// whitespace beside a match into it; single_word matches only between
// non-word characters.
type addedVocab struct {
	ids  map[string]uint32
	byID map[uint32]*addedToken
	// raw and norm index the two passes' tokens by first byte, longest
	// first.
	raw, norm firstByteIndex
}

// firstByteIndex holds added tokens by their first byte. n counts them;
// single is the one first byte they all share (-1: none, or several),
// which pass finds with strings.IndexByte instead of testing every byte.
type firstByteIndex struct {
	by     [256][]*addedToken
	n      int
	single int
}

func (x *firstByteIndex) add(a *addedToken) {
	c := a.Content[0]
	switch {
	case x.n == 0:
		x.single = int(c)
	case x.single != int(c):
		x.single = -1
	}
	x.by[c] = append(x.by[c], a)
	x.n++
}

func (v *addedVocab) load(toks []addedToken) error {
	v.ids, v.byID = map[string]uint32{}, map[uint32]*addedToken{}
	v.raw, v.norm = firstByteIndex{}, firstByteIndex{}
	for i := range toks {
		a := &toks[i]
		if a.Content == "" {
			return fmt.Errorf("text: added token %d has no content", a.ID)
		}
		v.ids[a.Content], v.byID[a.ID] = a.ID, a
		if a.Normalized {
			v.norm.add(a)
		} else {
			v.raw.add(a)
		}
	}
	for _, idx := range []*firstByteIndex{&v.raw, &v.norm} {
		for _, l := range idx.by {
			slices.SortStableFunc(l, func(a, b *addedToken) int { return cmp.Compare(len(b.Content), len(a.Content)) })
		}
	}
	return nil
}

// split encodes s: added tokens by their ids, the text around them
// (normalized when normalize is set) by encode. encode's first is true
// for the one segment that starts s itself, tokenizers' "offsets_original
// start at 0" (Metaspace's prepend_scheme "first" reads it): the first
// segment of the first segment, when no added token starts s.
func (v *addedVocab) split(s string, normalize func(string) string, dst []uint32, encode func(seg string, first bool, dst []uint32) []uint32) []uint32 {
	return v.pass(s, &v.raw, dst, func(seg string, first bool, dst []uint32) []uint32 {
		if normalize != nil {
			seg = normalize(seg)
		}
		return v.pass(seg, &v.norm, dst, func(seg string, inner bool, dst []uint32) []uint32 {
			return encode(seg, first && inner, dst)
		})
	})
}

// pass finds idx's tokens in s, appending their ids and encoding the text
// between them with rest (first: the text starts s).
func (v *addedVocab) pass(s string, idx *firstByteIndex, dst []uint32, rest func(seg string, first bool, dst []uint32) []uint32) []uint32 {
	if idx.n == 0 {
		return rest(s, true, dst)
	}
	from := 0 // start of the text not yet emitted
	for i := 0; i < len(s); i++ {
		if idx.single >= 0 {
			j := strings.IndexByte(s[i:], byte(idx.single))
			if j < 0 {
				break
			}
			i += j
		}
		cands := idx.by[s[i]]
		if len(cands) == 0 {
			continue
		}
		for _, a := range cands {
			if !strings.HasPrefix(s[i:], a.Content) {
				continue
			}
			start, end := i, i+len(a.Content)
			if a.SingleWord && (wordBefore(s, start) || wordAfter(s, end)) {
				continue
			}
			if a.LStrip {
				for start > from && isSpaceByte(s[start-1]) {
					start--
				}
			}
			if a.RStrip {
				for end < len(s) && isSpaceByte(s[end]) {
					end++
				}
			}
			if start > from {
				dst = rest(s[from:start], from == 0, dst)
			}
			dst = append(dst, a.ID)
			from = end
			i = end - 1
			break
		}
	}
	if from < len(s) {
		dst = rest(s[from:], from == 0, dst)
	}
	return dst
}

func isSpaceByte(c byte) bool { return c == ' ' || c >= '\t' && c <= '\r' }

func isWord(r rune) bool { return r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r) }

func wordBefore(s string, i int) bool {
	if i == 0 {
		return false
	}
	r := []rune(s[:i])
	return isWord(r[len(r)-1])
}

func wordAfter(s string, i int) bool {
	for _, r := range s[i:] {
		return isWord(r)
	}
	return false
}
