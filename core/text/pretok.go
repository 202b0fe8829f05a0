package text

import (
	"unicode"
	"unicode/utf8"
)

// Pre-tokenizers: the Split patterns of the byte-level BPE families in use,
// matched by hand. The patterns need look-ahead (\s+(?!\S)) and ordered,
// backtracking alternation as Oniguruma (the Rust tokenizers' engine)
// runs them, which Go's regexp lacks; each matcher below follows one
// pattern's alternatives in order, with the backtracking a greedy
// quantifier does spelled out. A tokenizer.json whose pattern is not one
// of these is refused at load time (patterns), never approximated.
//
// Character classes are Oniguruma's Unicode ones: \s is White_Space
// (unicode.IsSpace: U+0009..U+000D, U+0020, U+0085, U+00A0 and the Z
// categories), \p{L} letters, \p{N} numbers, \p{M} marks, \p{P}
// punctuation, \p{S} symbols. (?i:'s|...) folds case as Unicode does: 's
// also matches ſ (U+017F), 't nothing but T.

// splitter finds the next match of a pattern in s at or after i; it
// returns the match's bounds, or ok false when none is left.
type splitter interface {
	next(s string, i int) (start, end int, ok bool)
}

// matcher is a splitter whose pattern matches at every position it is
// tried from (its alternatives cover every character): the leftmost match
// starts at i.
type matcher func(s string, i int) int

func (m matcher) next(s string, i int) (int, int, bool) {
	if i >= len(s) {
		return 0, 0, false
	}
	return i, m(s, i), true
}

func at(s string, i int) (rune, int) {
	if i >= len(s) {
		return -1, 0
	}
	c := s[i]
	if c < utf8.RuneSelf {
		return rune(c), 1
	}
	return utf8.DecodeRuneInString(s[i:])
}

func isL(r rune) bool {
	return r >= 0 && (r < utf8.RuneSelf && asciiLetter(r) || r >= utf8.RuneSelf && unicode.IsLetter(r))
}
func isN(r rune) bool {
	return r >= 0 && (r < utf8.RuneSelf && r >= '0' && r <= '9' || r >= utf8.RuneSelf && unicode.IsNumber(r))
}
func isS(r rune) bool {
	return r >= 0 && (r < utf8.RuneSelf && (r == ' ' || r >= '\t' && r <= '\r') || r >= utf8.RuneSelf && unicode.IsSpace(r))
}
func isM(r rune) bool             { return r >= utf8.RuneSelf && unicode.IsMark(r) }
func isP(r rune) bool             { return r >= 0 && unicode.IsPunct(r) }
func isSy(r rune) bool            { return r >= 0 && unicode.IsSymbol(r) }
func asciiLetterByte(c byte) bool { return c|0x20 >= 'a' && c|0x20 <= 'z' }
func asciiLetter(r rune) bool {
	return r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z'
}
func isNL(r rune) bool { return r == '\r' || r == '\n' }

// contraction matches (?i:'s|'t|'re|'ve|'m|'ll|'d) at i; it returns the
// end, or -1.
func contraction(s string, i int) int {
	if i >= len(s) || s[i] != '\'' {
		return -1
	}
	r, w := at(s, i+1)
	j := i + 1 + w
	switch r {
	case 's', 'S', 'ſ', 't', 'T', 'm', 'M', 'd', 'D':
		return j
	case 'r', 'R', 'v', 'V':
		if r2, w2 := at(s, j); r2 == 'e' || r2 == 'E' {
			return j + w2
		}
	case 'l', 'L':
		if r2, w2 := at(s, j); r2 == 'l' || r2 == 'L' {
			return j + w2
		}
	}
	return -1
}

// run returns the end of the longest run of runes from i that in accepts.
func run(s string, i int, in func(rune) bool) int {
	for i < len(s) {
		r, w := at(s, i)
		if !in(r) {
			break
		}
		i += w
	}
	return i
}

// runMax is run limited to max runes.
func runMax(s string, i int, in func(rune) bool, max int) int {
	for n := 0; n < max && i < len(s); n++ {
		r, w := at(s, i)
		if !in(r) {
			break
		}
		i += w
	}
	return i
}

// whitespace matches the pattern tail shared by every family,
// \s*[\r\n]+|\s+(?!\S)|\s+, at i, where s[i] is whitespace: the run up to
// and including its last line break; else the run less its last rune when
// non-whitespace follows and the run has more than one rune; else the
// run.
func whitespace(s string, i int) int {
	e := run(s, i, isS)
	for k := e; k > i; {
		r, w := utf8.DecodeLastRuneInString(s[:k])
		if isNL(r) {
			return k
		}
		k -= w
	}
	if e == len(s) {
		return e
	}
	_, w := utf8.DecodeLastRuneInString(s[:e])
	if e-w > i {
		return e - w
	}
	return e
}

// notSLN is [^\s\p{L}\p{N}].
func notSLN(r rune) bool { return r >= 0 && !isS(r) && !isL(r) && !isN(r) }

// cl100k is the pattern of Llama 3 and Qwen 2.5/3 (tiktoken's cl100k_base
// shape), with \p{N}{1,digits}:
//
//	(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
func cl100k(digits int) matcher {
	return func(s string, i int) int {
		// The common case first, by bytes: an ASCII letter run, or one
		// ASCII prefix character (not a letter, digit, \r, \n or ')
		// before one, the second alternative. A run that stops at a
		// non-ASCII byte goes on through run, which decides by rune.
		if c := s[i]; c < utf8.RuneSelf && c != '\'' && c != '\r' && c != '\n' && (c < '0' || c > '9') {
			j := i
			if !asciiLetterByte(c) {
				j++
			}
			k := j
			for k < len(s) && asciiLetterByte(s[k]) {
				k++
			}
			if k > j {
				if k < len(s) && s[k] >= utf8.RuneSelf {
					return run(s, k, isL)
				}
				return k
			}
		}
		r, w := at(s, i)
		if r == '\'' {
			if e := contraction(s, i); e > 0 {
				return e
			}
		}
		if isL(r) {
			return run(s, i, isL)
		}
		if !isNL(r) && !isN(r) {
			if r2, _ := at(s, i+w); isL(r2) {
				return run(s, i+w, isL)
			}
		}
		if isN(r) {
			return runMax(s, i, isN, digits)
		}
		j := i
		if r == ' ' {
			j++
		}
		if k := run(s, j, notSLN); k > j {
			return run(s, k, isNL)
		}
		if isS(r) {
			return whitespace(s, i)
		}
		return i + w // unreachable: every rune is L, N, \s or [^\s\p{L}\p{N}]
	}
}

// o200k is GPT-OSS's pattern (tiktoken's o200k_base):
//
//	[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?
//	|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?
//	|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+
func o200k(s string, i int) int {
	r, w := at(s, i)
	prefix := !isNL(r) && !isL(r) && !isN(r) && r >= 0
	// The first two alternatives, with and without the optional prefix
	// (the prefix first: the quantifier is greedy).
	starts := [2]int{i + w, i}
	if !prefix {
		starts[0] = i
	}
	for _, j := range starts {
		if e := upperLower(s, j); e > j {
			return optContraction(s, e)
		}
	}
	for _, j := range starts {
		if e := run(s, j, isUpper); e > j {
			return optContraction(s, run(s, e, isLower))
		}
	}
	if isN(r) {
		return runMax(s, i, isN, 3)
	}
	j := i
	if r == ' ' {
		j++
	}
	if k := run(s, j, notSLN); k > j {
		return run(s, k, func(r rune) bool { return isNL(r) || r == '/' })
	}
	if isS(r) {
		return whitespace(s, i)
	}
	return i + w
}

// isUpper is [\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}], isLower
// [\p{Ll}\p{Lm}\p{Lo}\p{M}].
func isUpper(r rune) bool {
	if r < 0 {
		return false
	}
	if r < utf8.RuneSelf {
		return r >= 'A' && r <= 'Z'
	}
	return unicode.In(r, unicode.Lu, unicode.Lt, unicode.Lm, unicode.Lo, unicode.M)
}

func isLower(r rune) bool {
	if r < 0 {
		return false
	}
	if r < utf8.RuneSelf {
		return r >= 'a' && r <= 'z'
	}
	return unicode.In(r, unicode.Ll, unicode.Lm, unicode.Lo, unicode.M)
}

// upperLower matches [upper]*[lower]+ at j with the backtracking of the
// greedy star: the star takes the longest run of upper runes, then gives
// them back one by one until a lower rune starts the plus, which then
// takes the longest run of lower runes. It returns the end, or j.
func upperLower(s string, j int) int {
	a := run(s, j, isUpper)
	for m := a; ; {
		if r, _ := at(s, m); isLower(r) {
			return run(s, m, isLower)
		}
		if m == j {
			return j
		}
		_, w := utf8.DecodeLastRuneInString(s[:m])
		m -= w
	}
}

func optContraction(s string, e int) int {
	if c := contraction(s, e); c > 0 {
		return c
	}
	return e
}

// digits13 is \p{N}{1,3} (DeepSeek V3's first split).
type digits13 struct{}

func (digits13) next(s string, i int) (int, int, bool) {
	for i < len(s) {
		r, w := at(s, i)
		if isN(r) {
			return i, runMax(s, i, isN, 3), true
		}
		i += w
	}
	return 0, 0, false
}

// cjk is [\x{4e00}-\x{9fa5}\x{3040}-\x{309f}\x{30a0}-\x{30ff}]+ (DeepSeek
// V3's second split: CJK ideographs, hiragana, katakana).
type cjk struct{}

func isCJK(r rune) bool {
	return r >= 0x4e00 && r <= 0x9fa5 || r >= 0x3040 && r <= 0x309f || r >= 0x30a0 && r <= 0x30ff
}

func (cjk) next(s string, i int) (int, int, bool) {
	for i < len(s) {
		r, w := at(s, i)
		if isCJK(r) {
			return i, run(s, i, isCJK), true
		}
		i += w
	}
	return 0, 0, false
}

// deepseekMain is DeepSeek V3's third split:
//
//	[!"#$%&'()*+,\-./:;<=>?@\[\\\]^_`{|}~][A-Za-z]+|[^\r\n\p{L}\p{P}\p{S}]?[\p{L}\p{M}]+| ?[\p{P}\p{S}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
//
// Unlike the others it can fail to match (a digit, a lone mark-less
// number): the text between matches is a piece of its own (Isolated).
type deepseekMain struct{}

func asciiPunct(r rune) bool {
	return r >= '!' && r <= '/' || r >= ':' && r <= '@' || r >= '[' && r <= '`' || r >= '{' && r <= '~'
}

func isLM(r rune) bool { return isL(r) || isM(r) }
func isPS(r rune) bool { return isP(r) || isSy(r) }

func (deepseekMain) next(s string, i int) (int, int, bool) {
	for i < len(s) {
		if e := deepseekAt(s, i); e > i {
			return i, e, true
		}
		_, w := at(s, i)
		i += w
	}
	return 0, 0, false
}

func deepseekAt(s string, i int) int {
	r, w := at(s, i)
	if asciiPunct(r) {
		if e := run(s, i+w, func(r rune) bool { return asciiLetter(r) }); e > i+w {
			return e
		}
	}
	if !isNL(r) && !isL(r) && !isP(r) && !isSy(r) {
		if r2, _ := at(s, i+w); isLM(r2) {
			return run(s, i+w, isLM)
		}
	}
	if isLM(r) {
		return run(s, i, isLM)
	}
	j := i
	if r == ' ' {
		j++
	}
	if k := run(s, j, isPS); k > j {
		return run(s, k, isNL)
	}
	if isS(r) {
		return whitespace(s, i)
	}
	return i
}

// patterns are the Split patterns the package implements, by their
// tokenizer.json text.
var patterns = map[string]splitter{
	`(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`:                                                                                                                                                                cl100k(3),
	`(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`:                                                                                                                                                                     cl100k(1),
	`[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+`: matcher(o200k),
	`\p{N}{1,3}`: digits13{},
	"[\u4e00-\u9fa5\u3040-\u309f\u30a0-\u30ff]+": cjk{},
	"[!\"#$%&'()*+,\\-./:;<=>?@\\[\\\\\\]^_`{|}~][A-Za-z]+|[^\r\n\\p{L}\\p{P}\\p{S}]?[\\p{L}\\p{M}]+| ?[\\p{P}\\p{S}]+[\r\n]*|\\s*[\r\n]+|\\s+(?!\\S)|\\s+": deepseekMain{},
}

// span is a piece of the text: [start, end).
type span struct{ start, end int }

// splitIsolated splits each piece of in by sp, every match and every gap
// between matches a piece of its own (the Split pre-tokenizer's Isolated
// behaviour), appending to out.
func splitIsolated(s string, in []span, sp splitter, out []span) []span {
	for _, p := range in {
		i := p.start
		seg := s[:p.end]
		for i < p.end {
			st, e, ok := sp.next(seg, i)
			if !ok {
				break
			}
			if st > i {
				out = append(out, span{i, st})
			}
			if e == st { // an empty match moves on by one rune
				_, w := at(seg, st)
				e = st + w
			}
			out = append(out, span{st, e})
			i = e
		}
		if i < p.end {
			out = append(out, span{i, p.end})
		}
	}
	return out
}
