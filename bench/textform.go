package bench

import (
	"fmt"
	"strconv"
)

// PromptText sends a prompt as text (`{"prompt": "..."}`): the selector
// tokenizes it with the model's tokenizer (serve --model-path) before it
// hashes, the path an OpenAI-facing gateway takes.
const PromptText = "text"

// Tokenizer is what the text form needs of a model's tokenizer: the one
// the selector runs (core/text's Tokenizer satisfies it).
type Tokenizer interface {
	Encode(dst []uint32, s string, addSpecial bool) []uint32
	Decode(ids []uint32, skipSpecial bool) string
	VocabSize() int
}

// textWords are the tokenizer's one-token words: a space and 2 to 12 ASCII
// lowercase letters that, after a word, encode as one token, so that a
// prompt's tokens spelled as words keep about its length. Byte-level
// vocabularies spell them "Ġword", SentencePiece ones "▁word" (decoded
// without the space when first). Nil when the vocabulary has fewer than
// 256 (the text form then fails).
func textWords(tok Tokenizer) []string {
	var words []string
	var one [1]uint32
	var ids []uint32
	for id := range tok.VocabSize() {
		one[0] = uint32(id)
		w := tok.Decode(one[:], true)
		if len(w) > 0 && w[0] != ' ' {
			w = " " + w
		}
		if len(w) < 3 || len(w) > 13 {
			continue
		}
		ok := true
		for i := 1; i < len(w) && ok; i++ {
			ok = w[i] >= 'a' && w[i] <= 'z'
		}
		if !ok {
			continue
		}
		if ids = tok.Encode(ids[:0], "a"+w, false); len(ids) != 2 || ids[1] != uint32(id) {
			continue
		}
		words = append(words, w)
	}
	if len(words) < 256 {
		return nil
	}
	return words
}

// textualize turns every prompt into text and back into the selector's
// tokens: each token t of the prompt (AppendAllTokens) is spelled as
// words[t mod len(words)], the text is what the body carries, and the
// prompt's tokens, length and hashes become those of tok.Encode(text,
// true), the ids the selector computes (special tokens added, as it adds
// them for a prompt). Prompts sharing a token prefix share a text prefix,
// so their tokens share a prefix too (the pre-tokenizer splits at the
// words' spaces): the workload's reuse survives. The simulated engines are
// served the new tokens (AppendTokens), so the index and the bodies agree.
func textualize(ps []Prompt, tok Tokenizer, bs int) error {
	words := textWords(tok)
	if words == nil {
		return fmt.Errorf("%w: the text form needs a tokenizer with at least 256 one-token lowercase words", ErrConfig)
	}
	var toks []uint32
	var text []byte
	for i := range ps {
		p := &ps[i]
		toks = p.AppendAllTokens(toks[:0])
		text = text[:0]
		for _, t := range toks {
			text = append(text, words[int(t)%len(words)]...)
		}
		ids := tok.Encode(nil, string(text), true)
		p.Tokens, p.TraceIDs, p.ISL = ids, nil, len(ids)
		p.Local, p.Seq = extendHashes(nil, nil, ids, bs)
		p.Body = appendPromptTextJSON(nil, string(text), p.OutputTokens)
	}
	return nil
}

// appendPromptTextJSON appends the text form's body: `{"prompt":"..."
// [,"expected_output_tokens":M]}`.
func appendPromptTextJSON(dst []byte, text string, output int) []byte {
	dst = append(dst, `{"prompt":`...)
	dst = strconv.AppendQuote(dst, text) // ASCII letters and spaces: Go's quoting is JSON's
	if output > 0 {
		dst = append(dst, `,"expected_output_tokens":`...)
		dst = strconv.AppendInt(dst, int64(output), 10)
	}
	return append(dst, '}')
}
