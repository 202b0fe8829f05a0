package jinja

import (
	"strings"
	"unicode"
	"unicode/utf8"
)

// The lexer: jinja2.lexer.Lexer with the environment transformers
// builds (trim_blocks, lstrip_blocks, default delimiters, no line
// statements, keep_trailing_newline off), rule for rule:
//
//   - the source's newlines (\r\n, \r, \n) become \n, and one trailing
//     \n is dropped;
//   - data runs to the first "{{", "{%" or "{#"; "{%" opening raw is
//     checked first;
//   - a tag opened with "-" strips all (Python) whitespace before it;
//     otherwise a block or comment tag (not "{{", not "+") whose line
//     holds only spaces and tabs before it, from a line start, strips
//     them (lstrip_blocks);
//   - "-%}" "-}}" "-#}" strip all whitespace after them; "%}" and "#}"
//     eat one "\n" after them (trim_blocks); "+%}" eats nothing;
//   - inside a tag, the end is not matched while a bracket is open
//     (jinja2's balancing stack).

type tokKind uint8

const (
	tEOF tokKind = iota
	tData
	tVarBegin
	tVarEnd
	tBlockBegin
	tBlockEnd
	tName
	tString
	tInt
	tFloat
	tOp
)

type token struct {
	kind tokKind
	val  string // data text, name, decoded string, number text, operator
	line int
}

type lexer struct {
	src  string
	pos  int
	line int
	toks []token
}

func lex(src string) ([]token, error) {
	src = strings.ReplaceAll(src, "\r\n", "\n")
	src = strings.ReplaceAll(src, "\r", "\n")
	src = strings.TrimSuffix(src, "\n")
	l := &lexer{src: src, line: 1}
	if err := l.run(); err != nil {
		return nil, err
	}
	l.toks = append(l.toks, token{kind: tEOF, line: l.line})
	return l.toks, nil
}

func (l *lexer) errf(format string, args ...any) error {
	return syntaxErr(l.line, format, args...)
}

func (l *lexer) advance(n int) {
	l.line += strings.Count(l.src[l.pos:l.pos+n], "\n")
	l.pos += n
}

func (l *lexer) emitData(text string) {
	if text != "" {
		l.toks = append(l.toks, token{kind: tData, val: text, line: l.line})
	}
}

// stripText applies a tag's left whitespace control to the data before
// it: sign is the tag's "-", "+" or "".
func (l *lexer) stripText(text, sign string, isVar bool, start int) string {
	if sign == "-" {
		return strings.TrimRightFunc(text, isSpace)
	}
	if sign == "+" || isVar {
		return text
	}
	lpos := strings.LastIndexByte(text, '\n') + 1
	lineStarting := start == 0 || l.src[start-1] == '\n'
	if lpos > 0 || lineStarting {
		if strings.Trim(text[lpos:], " \t") == "" {
			return text[:lpos]
		}
	}
	return text
}

func (l *lexer) run() error {
	src := l.src
	for l.pos < len(src) {
		start := l.pos
		i := nextTag(src, start)
		if i < 0 {
			l.emitData(src[start:])
			l.advance(len(src) - start)
			return nil
		}
		text := src[start:i]
		kind := src[i+1]
		sign := ""
		if i+2 < len(src) && (src[i+2] == '-' || src[i+2] == '+') {
			sign = src[i+2 : i+3]
		}
		if kind == '%' {
			if n, rawSign, ok := rawBegin(src[i:]); ok {
				l.emitData(l.stripText(text, rawSign, false, start))
				l.advance(i - start + n)
				if err := l.raw(); err != nil {
					return err
				}
				continue
			}
		}
		l.emitData(l.stripText(text, sign, kind == '{', start))
		l.advance(i - start + 2 + len(sign))
		var err error
		switch kind {
		case '#':
			err = l.comment()
		case '{':
			l.toks = append(l.toks, token{kind: tVarBegin, line: l.line})
			err = l.tag(true)
		case '%':
			l.toks = append(l.toks, token{kind: tBlockBegin, line: l.line})
			err = l.tag(false)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// nextTag is the index of the first "{{", "{%" or "{#" at or after
// from, -1 none.
func nextTag(s string, from int) int {
	for {
		j := strings.IndexByte(s[from:], '{')
		if j < 0 || from+j+1 >= len(s) {
			return -1
		}
		i := from + j
		if c := s[i+1]; c == '{' || c == '%' || c == '#' {
			return i
		}
		from = i + 1
	}
}

// rawBegin matches {%(-|+|)\s*raw\s*(-%}\s*|%}) at the start of s: the
// length matched and the sign.
func rawBegin(s string) (int, string, bool) {
	p := 2
	sign := ""
	if p < len(s) && (s[p] == '-' || s[p] == '+') {
		sign = s[p : p+1]
		p++
	}
	p += spaceLen(s[p:])
	if !strings.HasPrefix(s[p:], "raw") {
		return 0, "", false
	}
	p += 3
	p += spaceLen(s[p:])
	switch {
	case strings.HasPrefix(s[p:], "-%}"):
		p += 3
		p += spaceLen(s[p:])
	case strings.HasPrefix(s[p:], "%}"):
		p += 2
	default:
		return 0, "", false
	}
	return p, sign, true
}

// spaceLen is the length of the run of Python whitespace s starts with.
func spaceLen(s string) int {
	for i, r := range s {
		if !isSpace(r) {
			return i
		}
	}
	return len(s)
}

// blockEnd matches a block or comment end at the start of s (close is
// "%}" or "#}"): +close, -close\s*, or close\n?.
func blockEnd(s, close string) (int, bool) {
	switch {
	case strings.HasPrefix(s, "+"+close):
		return 3, true
	case strings.HasPrefix(s, "-"+close):
		return 3 + spaceLen(s[3:]), true
	case strings.HasPrefix(s, close):
		if strings.HasPrefix(s[2:], "\n") {
			return 3, true
		}
		return 2, true
	}
	return 0, false
}

// raw lexes a raw block's body up to {% endraw %}.
func (l *lexer) raw() error {
	s := l.src[l.pos:]
	for from := 0; ; {
		j := strings.Index(s[from:], "{%")
		if j < 0 {
			return l.errf("missing end of raw directive")
		}
		i := from + j
		p := i + 2
		sign := ""
		if p < len(s) && (s[p] == '-' || s[p] == '+') {
			sign = s[p : p+1]
			p++
		}
		p += spaceLen(s[p:])
		if strings.HasPrefix(s[p:], "endraw") {
			p += 6
			p += spaceLen(s[p:])
			if n, ok := blockEnd(s[p:], "%}"); ok {
				l.emitData(l.stripText(s[:i], sign, false, l.pos))
				l.advance(p + n)
				return nil
			}
		}
		from = i + 2
	}
}

// comment skips a comment's body up to its end.
func (l *lexer) comment() error {
	s := l.src[l.pos:]
	for i := 0; i < len(s); i++ {
		if s[i] != '#' && s[i] != '-' && s[i] != '+' {
			continue
		}
		if n, ok := blockEnd(s[i:], "#}"); ok {
			l.advance(i + n)
			return nil
		}
	}
	return l.errf("missing end of comment tag")
}

// ops are the operators, longest first.
var ops = []string{"//", "**", "==", "!=", ">=", "<=", "+", "-", "/", "*", "%", "~", "[", "]", "(", ")", "{", "}", ">", "<", "=", ".", ":", "|", ",", ";"}

// tag lexes a variable or block tag's tokens and its end.
func (l *lexer) tag(isVar bool) error {
	depth := 0
	for {
		s := l.src[l.pos:]
		if s == "" {
			if isVar {
				return l.errf("unexpected end of template, expected end of print statement")
			}
			return l.errf("unexpected end of template, expected end of statement block")
		}
		if depth == 0 {
			if isVar {
				if strings.HasPrefix(s, "-}}") {
					l.toks = append(l.toks, token{kind: tVarEnd, line: l.line})
					l.advance(3 + spaceLen(s[3:]))
					return nil
				}
				if strings.HasPrefix(s, "}}") {
					l.toks = append(l.toks, token{kind: tVarEnd, line: l.line})
					l.advance(2)
					return nil
				}
			} else if n, ok := blockEnd(s, "%}"); ok {
				l.toks = append(l.toks, token{kind: tBlockEnd, line: l.line})
				l.advance(n)
				return nil
			}
		}
		if n := spaceLen(s); n > 0 {
			l.advance(n)
			continue
		}
		c := s[0]
		switch {
		case c >= '0' && c <= '9':
			n, isFloat := numberLen(s)
			k := tInt
			if isFloat {
				k = tFloat
			}
			l.toks = append(l.toks, token{kind: k, val: strings.ReplaceAll(s[:n], "_", ""), line: l.line})
			l.advance(n)
		case c == '\'' || c == '"':
			v, n, err := lexString(s)
			if err != nil {
				return l.errf("%s", err.Error())
			}
			l.toks = append(l.toks, token{kind: tString, val: v, line: l.line})
			l.advance(n)
		case c == '_' || c < utf8.RuneSelf && unicode.IsLetter(rune(c)) || c >= utf8.RuneSelf:
			n := 0
			for n < len(s) {
				r, w := utf8.DecodeRuneInString(s[n:])
				if r == '_' || unicode.IsLetter(r) || (n > 0 && (unicode.IsDigit(r) || unicode.In(r, unicode.Mn, unicode.Mc, unicode.Pc))) {
					n += w
					continue
				}
				break
			}
			if n == 0 {
				r, _ := utf8.DecodeRuneInString(s)
				return l.errf("unexpected char %q", r)
			}
			l.toks = append(l.toks, token{kind: tName, val: s[:n], line: l.line})
			l.advance(n)
		default:
			op := ""
			for _, o := range ops {
				if strings.HasPrefix(s, o) {
					op = o
					break
				}
			}
			if op == "" {
				return l.errf("unexpected char %q", rune(c))
			}
			switch op {
			case "(", "[", "{":
				depth++
			case ")", "]", "}":
				if depth == 0 {
					return l.errf("unexpected '%s'", op)
				}
				depth--
			}
			l.toks = append(l.toks, token{kind: tOp, val: op, line: l.line})
			l.advance(len(op))
		}
	}
}

// numberLen is the length of the number s starts with (jinja2's
// integer_re and float_re: digits with _ separators, a fraction, an
// exponent; 0b 0o 0x prefixes).
func numberLen(s string) (int, bool) {
	digits := func(i int, ok func(byte) bool) int {
		j := i
		for j < len(s) && (ok(s[j]) || (s[j] == '_' && j > i && j+1 < len(s) && ok(s[j+1]))) {
			j++
		}
		return j
	}
	dec := func(c byte) bool { return c >= '0' && c <= '9' }
	if len(s) > 2 && s[0] == '0' {
		var ok func(byte) bool
		switch s[1] | 0x20 {
		case 'b':
			ok = func(c byte) bool { return c == '0' || c == '1' }
		case 'o':
			ok = func(c byte) bool { return c >= '0' && c <= '7' }
		case 'x':
			ok = func(c byte) bool { return dec(c) || (c|0x20 >= 'a' && c|0x20 <= 'f') }
		}
		if ok != nil && ok(s[2]) {
			return digits(2, ok), false
		}
	}
	i := digits(0, dec)
	isFloat := false
	if i+1 < len(s) && s[i] == '.' && dec(s[i+1]) {
		i = digits(i+1, dec)
		isFloat = true
	}
	if i+1 < len(s) && s[i]|0x20 == 'e' {
		j := i + 1
		if j < len(s) && (s[j] == '+' || s[j] == '-') {
			j++
		}
		if j < len(s) && dec(s[j]) {
			i = digits(j, dec)
			isFloat = true
		}
	}
	return i, isFloat
}

// lexString decodes the string literal s starts with as jinja2 does:
// Python's unicode-escape over the literal's text (an unknown escape
// stays as written).
func lexString(s string) (string, int, error) {
	q := s[0]
	var b strings.Builder
	i := 1
	for i < len(s) {
		c := s[i]
		switch {
		case c == q:
			return b.String(), i + 1, nil
		case c == '\\' && i+1 < len(s):
			i++
			e := s[i]
			switch e {
			case '\n':
				i++
			case '\\', '\'', '"':
				b.WriteByte(e)
				i++
			case 'a':
				b.WriteByte(7)
				i++
			case 'b':
				b.WriteByte(8)
				i++
			case 'f':
				b.WriteByte(12)
				i++
			case 'n':
				b.WriteByte('\n')
				i++
			case 'r':
				b.WriteByte('\r')
				i++
			case 't':
				b.WriteByte('\t')
				i++
			case 'v':
				b.WriteByte(11)
				i++
			case 'x', 'u', 'U':
				n := map[byte]int{'x': 2, 'u': 4, 'U': 8}[e]
				if i+1+n > len(s) {
					return "", 0, errString("truncated \\" + string(e) + " escape")
				}
				var r rune
				for _, h := range []byte(s[i+1 : i+1+n]) {
					d, ok := hexDigit(h)
					if !ok {
						return "", 0, errString("truncated \\" + string(e) + " escape")
					}
					r = r<<4 | rune(d)
				}
				if r > unicode.MaxRune {
					return "", 0, errString("illegal Unicode character")
				}
				b.WriteRune(r)
				i += 1 + n
			case '0', '1', '2', '3', '4', '5', '6', '7':
				var r rune
				n := 0
				for n < 3 && i < len(s) && s[i] >= '0' && s[i] <= '7' {
					r = r<<3 | rune(s[i]-'0')
					i++
					n++
				}
				b.WriteRune(r)
			default:
				b.WriteByte('\\')
			}
		default:
			b.WriteByte(c)
			i++
		}
	}
	return "", 0, errString("unexpected end of string")
}

type errString string

func (e errString) Error() string { return string(e) }

func hexDigit(c byte) (byte, bool) {
	switch {
	case c >= '0' && c <= '9':
		return c - '0', true
	case c|0x20 >= 'a' && c|0x20 <= 'f':
		return c | 0x20 - 'a' + 10, true
	}
	return 0, false
}
