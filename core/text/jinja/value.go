package jinja

import (
	"math"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"
)

// Values: the Python objects a template sees, in Go.
//
//	Python      Go
//	None        nil
//	bool        bool
//	int         int64 (an int outside int64 is an error, not a big int)
//	float       float64
//	str         string (UTF-8; len, indexing and slicing count code points)
//	list        *List (Tuple false)
//	tuple       *List (Tuple true)
//	dict        *Dict (insertion-ordered, as Python's)
//	Undefined   Undefined (jinja2.runtime.Undefined)
//	namespace   *Namespace
//	callables   *Func, *macro, bound methods
//
// Any other Go value given to Render is converted by ValueOf.
type Value = any

// List is a Python list, or a tuple when Tuple is set. The sandbox makes
// it immutable to templates: no method or filter changes Items.
type List struct {
	Items []Value
	Tuple bool
}

// Dict is a Python dict: keys in insertion order. Invariant: index[k] is
// the position in keys and vals of the key whose hashKey is k.
type Dict struct {
	keys  []Value
	vals  []Value
	index map[any]int
}

// NewDict returns an empty dict with room for n keys.
func NewDict(n int) *Dict {
	return &Dict{keys: make([]Value, 0, n), vals: make([]Value, 0, n), index: make(map[any]int, n)}
}

// hashKey is the Go map key of a Python dict key: equal Python values
// (1, 1.0, True) share one. ok is false for an unhashable value.
func hashKey(k Value) (any, bool) {
	switch v := k.(type) {
	case nil, string, int64:
		return v, true
	case bool:
		if v {
			return int64(1), true
		}
		return int64(0), true
	case float64:
		if v == math.Trunc(v) && math.Abs(v) < 1<<63 {
			return int64(v), true
		}
		return v, true
	case *List:
		if !v.Tuple {
			return nil, false
		}
		var b strings.Builder
		b.WriteString("\x00tuple")
		for _, it := range v.Items {
			h, ok := hashKey(it)
			if !ok {
				return nil, false
			}
			b.WriteString(reprValue(h))
			b.WriteByte(0)
		}
		return b.String(), true
	}
	return nil, false
}

// Set sets d[k] = v, appending k when it is new.
func (d *Dict) Set(k, v Value) {
	h, ok := hashKey(k)
	if !ok {
		return
	}
	if i, ok := d.index[h]; ok {
		d.vals[i] = v
		return
	}
	d.index[h] = len(d.keys)
	d.keys = append(d.keys, k)
	d.vals = append(d.vals, v)
}

// Get is d[k].
func (d *Dict) Get(k Value) (Value, bool) {
	h, ok := hashKey(k)
	if !ok {
		return nil, false
	}
	i, ok := d.index[h]
	if !ok {
		return nil, false
	}
	return d.vals[i], true
}

// Len is len(d).
func (d *Dict) Len() int { return len(d.keys) }

// Keys are d's keys in insertion order; the caller must not change them.
func (d *Dict) Keys() []Value { return d.keys }

// Values are d's values in insertion order; the caller must not change
// them.
func (d *Dict) Values() []Value { return d.vals }

// Undefined is jinja2's default Undefined: it prints as "", is false,
// iterates as empty and has length 0; any other use (an attribute, an
// item, arithmetic, a call) is an error naming it.
type Undefined struct {
	// hint is jinja2's message for the failed lookup: "'x' is
	// undefined" or "'dict object' has no attribute 'x'".
	hint string
	// kind is the exception its use raises: "" UndefinedError; the
	// sandbox's unsafe attribute: SecurityError.
	kind string
}

func undefinedName(name string) Undefined {
	return Undefined{hint: "'" + name + "' is undefined"}
}

func (u Undefined) err() error {
	h := u.hint
	if h == "" {
		h = "undefined value"
	}
	k := u.kind
	if k == "" {
		k = "UndefinedError"
	}
	return &RenderError{Kind: k, Msg: h}
}

// Namespace is jinja2's namespace(): the one object a template may
// assign attributes to ({% set ns.x = ... %}), so it outlives a loop
// scope.
type Namespace struct{ attrs *Dict }

// Func is a global function or a bound method.
type Func struct {
	Name string
	Call func(r *renderer, args []Value, kw *Dict) (Value, error)
}

// typeName is Python's type(v).__name__.
func typeName(v Value) string {
	switch v := v.(type) {
	case nil:
		return "NoneType"
	case bool:
		return "bool"
	case int64:
		return "int"
	case float64:
		return "float"
	case string:
		return "str"
	case *List:
		if v.Tuple {
			return "tuple"
		}
		return "list"
	case *Dict:
		return "dict"
	case Undefined:
		return "Undefined"
	case *Namespace:
		return "Namespace"
	case *Func:
		return "function"
	case *macro:
		return "Macro"
	case *loopObj:
		return "LoopContext"
	case *iterVal:
		return "generator"
	}
	return "object"
}

// truthy is Python's bool(v).
func truthy(v Value) bool {
	switch v := v.(type) {
	case nil:
		return false
	case bool:
		return v
	case int64:
		return v != 0
	case float64:
		return v != 0
	case string:
		return v != ""
	case *List:
		return len(v.Items) > 0
	case *Dict:
		return v.Len() > 0
	case Undefined:
		return false
	}
	return true
}

// toStr is Python's str(v), as {{ v }} prints it.
func toStr(v Value) string {
	switch v := v.(type) {
	case string:
		return v
	case Undefined:
		return ""
	case nil:
		return "None"
	case bool:
		if v {
			return "True"
		}
		return "False"
	case int64:
		return strconv.FormatInt(v, 10)
	case float64:
		return formatFloat(v)
	}
	return reprValue(v)
}

// formatFloat is Python's repr(float): the shortest digits that round
// trip, positional for exponents in [-4, 16), else d.ddde±XX.
func formatFloat(f float64) string {
	switch {
	case math.IsInf(f, 1):
		return "inf"
	case math.IsInf(f, -1):
		return "-inf"
	case math.IsNaN(f):
		return "nan"
	}
	e := strconv.FormatFloat(f, 'e', -1, 64) // -d.ddde±XX
	neg := strings.HasPrefix(e, "-")
	if neg {
		e = e[1:]
	}
	mant, exps, _ := strings.Cut(e, "e")
	exp, _ := strconv.Atoi(exps)
	digits := strings.Replace(mant, ".", "", 1)
	var b strings.Builder
	if neg {
		b.WriteByte('-')
	}
	if exp >= -4 && exp < 16 {
		if exp < 0 {
			b.WriteString("0.")
			b.WriteString(strings.Repeat("0", -exp-1))
			b.WriteString(digits)
		} else if len(digits) <= exp+1 {
			b.WriteString(digits)
			b.WriteString(strings.Repeat("0", exp+1-len(digits)))
			b.WriteString(".0")
		} else {
			b.WriteString(digits[:exp+1])
			b.WriteByte('.')
			b.WriteString(digits[exp+1:])
		}
		return b.String()
	}
	b.WriteString(digits[:1])
	if len(digits) > 1 {
		b.WriteByte('.')
		b.WriteString(digits[1:])
	}
	b.WriteByte('e')
	if exp < 0 {
		b.WriteByte('-')
		exp = -exp
	} else {
		b.WriteByte('+')
	}
	if exp < 10 {
		b.WriteByte('0')
	}
	b.WriteString(strconv.Itoa(exp))
	return b.String()
}

// reprValue is Python's repr(v).
func reprValue(v Value) string {
	var b strings.Builder
	writeRepr(&b, v, 0)
	return b.String()
}

func writeRepr(b *strings.Builder, v Value, depth int) {
	if depth > maxReprDepth {
		b.WriteString("...")
		return
	}
	switch v := v.(type) {
	case string:
		writeStrRepr(b, v)
	case *List:
		open, close := "[", "]"
		if v.Tuple {
			open, close = "(", ")"
		}
		b.WriteString(open)
		for i, it := range v.Items {
			if i > 0 {
				b.WriteString(", ")
			}
			writeRepr(b, it, depth+1)
		}
		if v.Tuple && len(v.Items) == 1 {
			b.WriteByte(',')
		}
		b.WriteString(close)
	case *Dict:
		b.WriteByte('{')
		for i, k := range v.keys {
			if i > 0 {
				b.WriteString(", ")
			}
			writeRepr(b, k, depth+1)
			b.WriteString(": ")
			writeRepr(b, v.vals[i], depth+1)
		}
		b.WriteByte('}')
	case Undefined:
		b.WriteString("Undefined")
	case *Namespace:
		b.WriteString("<Namespace ")
		writeRepr(b, v.attrs, depth+1)
		b.WriteString(">")
	case *Func:
		b.WriteString("<function " + v.Name + ">")
	case *macro:
		b.WriteString("<Macro '" + v.name + "'>")
	case *iterVal:
		b.WriteString("<generator object>")
	case *loopObj:
		b.WriteString("<LoopContext " + strconv.Itoa(v.index0+1) + "/" + strconv.Itoa(len(v.items)) + ">")
	default:
		b.WriteString(toStr(v))
	}
}

// maxReprDepth bounds repr's recursion (Python's recursive repr of a
// self-containing list cannot occur here: values are immutable).
const maxReprDepth = 100

// writeStrRepr is Python's repr(str): single quotes unless the string
// holds ' and no ", backslash escapes for \\, the quote, \t \n \r,
// other non-printable code points as \xhh, \uhhhh or \Uhhhhhhhh.
func writeStrRepr(b *strings.Builder, s string) {
	q := byte('\'')
	if strings.IndexByte(s, '\'') >= 0 && strings.IndexByte(s, '"') < 0 {
		q = '"'
	}
	b.WriteByte(q)
	for _, r := range s {
		switch {
		case r == '\\':
			b.WriteString(`\\`)
		case r == rune(q):
			b.WriteByte('\\')
			b.WriteByte(q)
		case r == '\t':
			b.WriteString(`\t`)
		case r == '\n':
			b.WriteString(`\n`)
		case r == '\r':
			b.WriteString(`\r`)
		case r < 0x20 || r == 0x7f:
			b.WriteString(`\x`)
			b.WriteString(hex2(int(r)))
		case r < 0x7f:
			b.WriteRune(r)
		case !pyPrintable(r):
			switch {
			case r <= 0xff:
				b.WriteString(`\x` + hex2(int(r)))
			case r <= 0xffff:
				b.WriteString(`\u` + hex2(int(r>>8)) + hex2(int(r&0xff)))
			default:
				b.WriteString(`\U` + hex2(int(r>>24)) + hex2(int(r>>16&0xff)) + hex2(int(r>>8&0xff)) + hex2(int(r&0xff)))
			}
		default:
			b.WriteRune(r)
		}
	}
	b.WriteByte(q)
}

func hex2(c int) string {
	const h = "0123456789abcdef"
	return string([]byte{h[c>>4&15], h[c&15]})
}

// pyPrintable is Python's str.isprintable for one code point: not in
// the categories Cc, Cf, Cs, Co, Cn, Zl, Zp, Zs except the space.
// Unicode versions differ between Go and Python in unassigned code
// points only.
func pyPrintable(r rune) bool {
	if r == ' ' {
		return true
	}
	if r == utf8.RuneError {
		return true
	}
	if unicode.In(r, unicode.Cc, unicode.Cf, unicode.Cs, unicode.Co, unicode.Zl, unicode.Zp, unicode.Zs) {
		return false
	}
	return unicode.In(r, unicode.L, unicode.M, unicode.N, unicode.P, unicode.S)
}

// isSpace is Python's str.isspace for one code point (what str.strip,
// str.split and the lexer's \s take as whitespace): Go's unicode.IsSpace
// plus the separators U+001C..U+001F.
func isSpace(r rune) bool {
	return unicode.IsSpace(r) || (r >= 0x1c && r <= 0x1f)
}

// runeLen is len(s) in Python: code points.
func runeLen(s string) int { return utf8.RuneCountInString(s) }

// isASCII reports whether s is all ASCII (byte and code point indices
// agree).
func isASCII(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] >= 0x80 {
			return false
		}
	}
	return true
}
