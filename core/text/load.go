package text

import (
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"

	"golang.org/x/text/unicode/norm"
)

// Loading: tokenizer.json and tokenizer_config.json into a Tokenizer,
// every part checked against what the package implements.

// ErrUnsupported wraps a tokenizer.json part the package does not
// implement: Load refuses it rather than approximate it.
var ErrUnsupported = errors.New("text: unsupported tokenizer")

// file is the part of tokenizer.json the package reads.
type file struct {
	AddedTokens   []addedToken    `json:"added_tokens"`
	Normalizer    json.RawMessage `json:"normalizer"`
	PreTokenizer  json.RawMessage `json:"pre_tokenizer"`
	PostProcessor json.RawMessage `json:"post_processor"`
	Decoder       json.RawMessage `json:"decoder"`
	Model         struct {
		Type                    string            `json:"type"`
		UnkToken                *string           `json:"unk_token"`
		FuseUnk                 bool              `json:"fuse_unk"`
		Vocab                   map[string]uint32 `json:"vocab"`
		Merges                  json.RawMessage   `json:"merges"`
		IgnoreMerges            bool              `json:"ignore_merges"`
		ByteFallback            bool              `json:"byte_fallback"`
		ContinuingSubwordPrefix *string           `json:"continuing_subword_prefix"`
		EndOfWordSuffix         *string           `json:"end_of_word_suffix"`
		Dropout                 *float64          `json:"dropout"`
	} `json:"model"`
}

type typed struct {
	Type string `json:"type"`
}

// config is the part of tokenizer_config.json the package reads.
type config struct {
	TokenizerClass string          `json:"tokenizer_class"`
	AddBOS         *bool           `json:"add_bos_token"`
	AddEOS         *bool           `json:"add_eos_token"`
	BOSToken       json.RawMessage `json:"bos_token"`
	EOSToken       json.RawMessage `json:"eos_token"`
	ChatTemplate   json.RawMessage `json:"chat_template"`
	ModelMaxLength float64         `json:"model_max_length"`
	CleanUp        *bool           `json:"clean_up_tokenization_spaces"`
}

// Load builds a tokenizer from a model's tokenizer.json and
// tokenizer_config.json (nil: none). A part it does not implement is an
// error wrapping ErrUnsupported that names it.
func Load(tokenizerJSON, configJSON []byte) (*Tokenizer, error) {
	var f file
	if err := json.Unmarshal(tokenizerJSON, &f); err != nil {
		return nil, fmt.Errorf("text: tokenizer.json: %w", err)
	}
	t := &Tokenizer{BOS: -1, EOS: -1}
	var err error
	// No pre-tokenizer: a SentencePiece-style BPE over characters (Llama
	// 2, Mistral); else byte-level.
	sp := len(f.PreTokenizer) == 0 || string(f.PreTokenizer) == "null"
	var pre typed
	if !sp && json.Unmarshal(f.PreTokenizer, &pre) == nil && pre.Type == "Metaspace" {
		if t.metaspace, err = loadMetaspace(f.PreTokenizer); err != nil {
			return nil, err
		}
		sp = true
	} else if !sp {
		if t.split, err = loadPreTokenizer(f.PreTokenizer); err != nil {
			return nil, err
		}
	}
	t.model.sentencePiece = sp
	if err := t.loadModel(&f); err != nil {
		return nil, err
	}
	if t.normalize, err = loadNormalizer(f.Normalizer); err != nil {
		return nil, err
	}
	if err := t.added.load(f.AddedTokens); err != nil {
		return nil, err
	}
	if err := checkDecoder(f.Decoder, t.model.sentencePiece); err != nil {
		return nil, err
	}
	var cfg config
	if configJSON != nil {
		if err := json.Unmarshal(configJSON, &cfg); err != nil {
			return nil, fmt.Errorf("text: tokenizer_config.json: %w", err)
		}
	}
	if err := t.loadPostProcessor(f.PostProcessor, &cfg); err != nil {
		return nil, err
	}
	t.cleanUp = cfg.CleanUp != nil && *cfg.CleanUp
	t.ModelMaxLength = int64(cfg.ModelMaxLength)
	if cfg.ModelMaxLength > 1e15 { // transformers' VERY_LARGE_INTEGER: unknown
		t.ModelMaxLength = 0
	}
	if err := t.loadChat(configJSON); err != nil { // chat.go
		return nil, err
	}
	t.scratch.New = func() any { return new(scratch) }
	t.model.cache.limit, t.model.cache.maxKey = wordCacheBytes, wordCacheKey
	t.chunks.limit, t.chunks.maxKey = chunkCacheBytes, minChunk+maxChunk
	return t, nil
}

func (t *Tokenizer) loadModel(f *file) error {
	m := &f.Model
	switch {
	case m.Type != "BPE":
		return fmt.Errorf("%w: model type %q (only BPE)", ErrUnsupported, m.Type)
	case m.ByteFallback && !t.model.sentencePiece:
		return fmt.Errorf("%w: byte-level BPE with byte_fallback", ErrUnsupported)
	case m.ContinuingSubwordPrefix != nil && *m.ContinuingSubwordPrefix != "", m.EndOfWordSuffix != nil && *m.EndOfWordSuffix != "":
		return fmt.Errorf("%w: BPE with a subword prefix or word suffix", ErrUnsupported)
	case m.Dropout != nil && *m.Dropout != 0:
		return fmt.Errorf("%w: BPE dropout", ErrUnsupported)
	}
	b := &t.model
	b.ignoreMerges = m.IgnoreMerges
	maxID := uint32(0)
	for _, id := range m.Vocab {
		maxID = max(maxID, id)
	}
	for _, a := range f.AddedTokens {
		maxID = max(maxID, a.ID)
	}
	// The tokens' text in one string: one allocation, not one a token
	// (the decoded map's keys, garbage once Load returns).
	b.tokens = make([]string, maxID+1)
	var sb strings.Builder
	offs := make([][2]uint32, maxID+1)
	for s, id := range m.Vocab {
		offs[id] = [2]uint32{uint32(sb.Len()), uint32(len(s))}
		sb.WriteString(s)
	}
	all := sb.String()
	for _, id := range m.Vocab {
		o := offs[id]
		b.tokens[id] = all[o[0] : o[0]+o[1]]
	}
	b.buildIndex()
	b.unk = -1
	if m.UnkToken != nil {
		if id, ok := m.Vocab[*m.UnkToken]; ok {
			b.unk = int64(id)
		}
	}
	b.byteFallback, b.fuseUnk = m.ByteFallback, m.FuseUnk
	for c := 0; c < 256; c++ {
		name := byteChar[c]
		if b.sentencePiece {
			if !b.byteFallback {
				break
			}
			name = fmt.Sprintf("<0x%02X>", c)
		}
		id, ok := m.Vocab[name]
		if !ok {
			return fmt.Errorf("%w: BPE without the token %q of byte %#x", ErrUnsupported, name, c)
		}
		b.byteID[c] = id
	}
	// Merges are "a b" strings (older files) or [a, b] pairs.
	var pairs [][2]string
	var strs []string
	if err := json.Unmarshal(m.Merges, &strs); err == nil {
		pairs = make([][2]string, len(strs))
		for i, s := range strs {
			a, c, ok := strings.Cut(s, " ")
			if !ok {
				return fmt.Errorf("text: merge %d %q is not \"a b\"", i, s)
			}
			pairs[i] = [2]string{a, c}
		}
	} else if err := json.Unmarshal(m.Merges, &pairs); err != nil {
		return fmt.Errorf("text: model.merges: %w", err)
	}
	b.merges = make(map[uint64]mergeTo, len(pairs))
	for rank, p := range pairs {
		l, ok1 := m.Vocab[p[0]]
		r, ok2 := m.Vocab[p[1]]
		id, ok3 := m.Vocab[p[0]+p[1]]
		if !ok1 || !ok2 || !ok3 {
			return fmt.Errorf("text: merge %d %q: a token outside the vocabulary", rank, p)
		}
		k := pairKey(l, r)
		if _, dup := b.merges[k]; !dup { // the first (lowest) rank wins
			b.merges[k] = mergeTo{rank: uint32(rank), id: id}
		}
	}
	return nil
}

func loadNormalizer(raw json.RawMessage) (func(string) string, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return nil, nil
	}
	var n struct {
		Type        string            `json:"type"`
		Normalizers []json.RawMessage `json:"normalizers"`
		Prepend     string            `json:"prepend"`
		Pattern     struct {
			String *string `json:"String"`
		} `json:"pattern"`
		Content string `json:"content"`
	}
	if err := json.Unmarshal(raw, &n); err != nil {
		return nil, fmt.Errorf("text: normalizer: %w", err)
	}
	switch n.Type {
	case "NFC":
		return norm.NFC.String, nil
	case "NFKC":
		return norm.NFKC.String, nil
	case "Prepend":
		// tokenizers' Prepend: only a non-empty string gets the prefix.
		pre := n.Prepend
		return func(s string) string {
			if s == "" {
				return s
			}
			return pre + s
		}, nil
	case "Replace":
		if n.Pattern.String == nil {
			return nil, fmt.Errorf("%w: Replace normalizer with a regex pattern", ErrUnsupported)
		}
		from, to := *n.Pattern.String, n.Content
		return func(s string) string { return strings.ReplaceAll(s, from, to) }, nil
	case "Sequence":
		var fs []func(string) string
		for _, r := range n.Normalizers {
			f, err := loadNormalizer(r)
			if err != nil {
				return nil, err
			}
			if f != nil {
				fs = append(fs, f)
			}
		}
		switch len(fs) {
		case 0:
			return nil, nil
		case 1:
			return fs[0], nil
		}
		return func(s string) string {
			for _, f := range fs {
				s = f(s)
			}
			return s
		}, nil
	}
	return nil, fmt.Errorf("%w: normalizer %q", ErrUnsupported, n.Type)
}

// loadPreTokenizer accepts a Sequence of Isolated Split pre-tokenizers of a
// known pattern followed by a ByteLevel without its own regex or prefix
// space: the shape of every byte-level family implemented here.
func loadPreTokenizer(raw json.RawMessage) ([]splitter, error) {
	var seq struct {
		Type          string `json:"type"`
		PreTokenizers []struct {
			Type    string `json:"type"`
			Pattern struct {
				Regex *string `json:"Regex"`
			} `json:"pattern"`
			Behavior       string `json:"behavior"`
			Invert         bool   `json:"invert"`
			AddPrefixSpace bool   `json:"add_prefix_space"`
			UseRegex       bool   `json:"use_regex"`
		} `json:"pretokenizers"`
	}
	if err := json.Unmarshal(raw, &seq); err != nil {
		return nil, fmt.Errorf("text: pre_tokenizer: %w", err)
	}
	if seq.Type != "Sequence" || len(seq.PreTokenizers) == 0 {
		return nil, fmt.Errorf("%w: pre_tokenizer %q (only a Sequence of Split and ByteLevel)", ErrUnsupported, seq.Type)
	}
	var out []splitter
	last := len(seq.PreTokenizers) - 1
	for i, p := range seq.PreTokenizers {
		switch {
		case p.Type == "ByteLevel" && i == last:
			if p.AddPrefixSpace || p.UseRegex {
				return nil, fmt.Errorf("%w: ByteLevel pre-tokenizer with add_prefix_space or use_regex", ErrUnsupported)
			}
		case p.Type == "Split" && i < last:
			if p.Pattern.Regex == nil || p.Behavior != "Isolated" || p.Invert {
				return nil, fmt.Errorf("%w: Split pre-tokenizer %d: only an Isolated regex split", ErrUnsupported, i)
			}
			sp, ok := patterns[*p.Pattern.Regex]
			if !ok {
				return nil, fmt.Errorf("%w: Split pattern %q", ErrUnsupported, *p.Pattern.Regex)
			}
			out = append(out, sp)
		default:
			return nil, fmt.Errorf("%w: pre-tokenizer %d of type %q", ErrUnsupported, i, p.Type)
		}
	}
	if seq.PreTokenizers[last].Type != "ByteLevel" {
		return nil, fmt.Errorf("%w: a pre-tokenizer Sequence that does not end with ByteLevel", ErrUnsupported)
	}
	return out, nil
}

// sentencePieceDecoder is the decoder of Llama 2 / Mistral files, the one
// Decode implements for a SentencePiece-style model.
const sentencePieceDecoder = `{"type":"Sequence","decoders":[{"type":"Replace","pattern":{"String":"▁"},"content":" "},{"type":"ByteFallback"},{"type":"Fuse"},{"type":"Strip","content":" ","start":1,"stop":0}]}`

func checkDecoder(raw json.RawMessage, sentencePiece bool) error {
	if sentencePiece {
		var got, want any
		if json.Unmarshal(raw, &got) != nil || json.Unmarshal([]byte(sentencePieceDecoder), &want) != nil || !reflect.DeepEqual(got, want) {
			return fmt.Errorf("%w: decoder %s (only %s)", ErrUnsupported, raw, sentencePieceDecoder)
		}
		return nil
	}
	var d typed
	if err := json.Unmarshal(raw, &d); err != nil {
		return fmt.Errorf("text: decoder: %w", err)
	}
	if d.Type != "ByteLevel" {
		return fmt.Errorf("%w: decoder %q", ErrUnsupported, d.Type)
	}
	return nil
}

// loadPostProcessor finds what Encode adds with special tokens: a
// TemplateProcessing's single template (special tokens around $A), a
// ByteLevel's nothing; then the tokenizer class's own rule, as
// transformers applies it: LlamaTokenizer(Fast) adds its bos_token when
// add_bos_token (default true) and eos_token when add_eos_token.
func (t *Tokenizer) loadPostProcessor(raw json.RawMessage, cfg *config) error {
	t.BOS, t.EOS = t.tokenID(cfg.BOSToken), t.tokenID(cfg.EOSToken)
	var p struct {
		Type   string `json:"type"`
		Single []struct {
			SpecialToken *struct {
				ID string `json:"id"`
			} `json:"SpecialToken"`
			Sequence *struct {
				ID string `json:"id"`
			} `json:"Sequence"`
		} `json:"single"`
	}
	if len(raw) > 0 && string(raw) != "null" {
		if err := json.Unmarshal(raw, &p); err != nil {
			return fmt.Errorf("text: post_processor: %w", err)
		}
	}
	switch p.Type {
	case "", "ByteLevel":
	case "TemplateProcessing":
		seen := false
		for _, it := range p.Single {
			switch {
			case it.Sequence != nil:
				seen = true
			case it.SpecialToken != nil:
				id, ok := t.idOf(it.SpecialToken.ID)
				if !ok {
					return fmt.Errorf("text: post_processor: special token %q not in the vocabulary", it.SpecialToken.ID)
				}
				if seen {
					t.eos = append(t.eos, id)
				} else {
					t.bos = append(t.bos, id)
				}
			}
		}
	default:
		return fmt.Errorf("%w: post_processor %q", ErrUnsupported, p.Type)
	}
	switch cfg.TokenizerClass {
	case "LlamaTokenizer", "LlamaTokenizerFast":
		if (cfg.AddBOS == nil || *cfg.AddBOS) && t.BOS >= 0 && !slices.Contains(t.bos, uint32(t.BOS)) {
			t.bos = append([]uint32{uint32(t.BOS)}, t.bos...)
		}
		if cfg.AddEOS != nil && *cfg.AddEOS && t.EOS >= 0 && !slices.Contains(t.eos, uint32(t.EOS)) {
			t.eos = append(t.eos, uint32(t.EOS))
		}
	}
	return nil
}

// tokenID is the id of a config token (a string or an AddedToken object
// with "content"), -1 for none.
func (t *Tokenizer) tokenID(raw json.RawMessage) int64 {
	var s string
	if json.Unmarshal(raw, &s) != nil {
		var o struct {
			Content string `json:"content"`
		}
		if json.Unmarshal(raw, &o) != nil {
			return -1
		}
		s = o.Content
	}
	if id, ok := t.idOf(s); ok && s != "" {
		return int64(id)
	}
	return -1
}

// idOf is the id of a token's text, added tokens included.
func (t *Tokenizer) idOf(s string) (uint32, bool) {
	if id, ok := t.added.ids[s]; ok {
		return id, true
	}
	return t.model.lookup(s)
}
