package text

import (
	"encoding/json"
	"fmt"
	"strings"
	"unsafe"
)

// metaspace is tokenizers' Metaspace pre-tokenizer with split false
// (huggingface/tokenizers:tokenizers/src/pre_tokenizers/metaspace.rs), the
// form transformers' LlamaConverter writes for non-legacy SentencePiece
// files: every space becomes ▁, and a ▁ is put first unless the text
// already starts with one, always ("always") or only for the segment that
// starts the input ("first"; a segment after an added token gets none).
type metaspace struct {
	always, first bool // the prepend scheme; neither: "never"
}

// metaspaceMark is the replacement every SentencePiece file here uses, the
// one the SentencePiece decoder turns back into spaces.
const metaspaceMark = "▁"

// loadMetaspace reads a Metaspace pre-tokenizer. A replacement other than
// ▁ or split true (a pre-token per word, which changes which merges can
// apply) is refused, never approximated.
func loadMetaspace(raw json.RawMessage) (*metaspace, error) {
	var m struct {
		Replacement    *string `json:"replacement"`
		PrependScheme  *string `json:"prepend_scheme"`
		AddPrefixSpace *bool   `json:"add_prefix_space"`
		Split          *bool   `json:"split"`
	}
	if err := json.Unmarshal(raw, &m); err != nil {
		return nil, fmt.Errorf("text: pre_tokenizer: %w", err)
	}
	if m.Replacement != nil && *m.Replacement != metaspaceMark {
		return nil, fmt.Errorf("%w: Metaspace replacement %q (only %q)", ErrUnsupported, *m.Replacement, metaspaceMark)
	}
	// tokenizers' serde default for split is true (older files omit it
	// and split on every ▁).
	if m.Split == nil || *m.Split {
		return nil, fmt.Errorf("%w: Metaspace with split true (only split false)", ErrUnsupported)
	}
	ms := &metaspace{}
	// Older files name add_prefix_space instead: true is "always", false
	// "never" (metaspace.rs's deserializer).
	scheme := "always"
	switch {
	case m.PrependScheme != nil:
		scheme = *m.PrependScheme
	case m.AddPrefixSpace != nil && !*m.AddPrefixSpace:
		scheme = "never"
	}
	switch scheme {
	case "always":
		ms.always = true
	case "first":
		ms.first = true
	case "never":
	default:
		return nil, fmt.Errorf("%w: Metaspace prepend_scheme %q", ErrUnsupported, scheme)
	}
	return ms, nil
}

// apply is the pre-tokenizer over one segment; first: the segment starts
// the input. The result lives in sc.meta until the next apply.
func (m *metaspace) apply(seg string, first bool, sc *scratch) string {
	b := sc.meta[:0]
	if (m.always || m.first && first) && !strings.HasPrefix(seg, metaspaceMark) && !strings.HasPrefix(seg, " ") {
		b = append(b, metaspaceMark...)
	}
	for i := 0; i < len(seg); i++ {
		if seg[i] == ' ' {
			b = append(b, metaspaceMark...)
		} else {
			b = append(b, seg[i])
		}
	}
	sc.meta = b
	return unsafe.String(unsafe.SliceData(b), len(b)) // read-only; the word cache clones what it keeps
}
