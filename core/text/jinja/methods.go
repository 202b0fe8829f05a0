package jinja

import (
	"strings"
	"unicode"
	"unicode/utf8"
)

// Python methods a template may call on values (what chat templates
// call), and the mutating ones the immutable sandbox forbids
// (jinja2.sandbox: _mutable_spec; modifies_known_mutable).

func bound(name string, f func(r *renderer, args []Value, kw *Dict) (Value, error)) *Func {
	return &Func{Name: name, Call: f}
}

// unsafeMethod is the sandbox's unsafe_undefined for a mutating method
// of a list or dict: using it is a SecurityError.
func unsafeMethod(obj Value, name string) (Value, bool) {
	var names []string
	switch o := obj.(type) {
	case *List:
		if o.Tuple {
			return nil, false
		}
		names = []string{"append", "clear", "extend", "insert", "pop", "remove", "reverse", "sort"}
	case *Dict:
		names = []string{"clear", "pop", "popitem", "setdefault", "update"}
	default:
		return nil, false
	}
	if !containsStr(names, name) {
		return nil, false
	}
	return Undefined{hint: "access to attribute '" + name + "' of '" + typeName(obj) + "' object is unsafe.", kind: "SecurityError"}, true
}

// argsOf binds positional and keyword arguments to names; a value not
// given is nil with ok false in the result's has.
func argsOf(fname string, args []Value, kw *Dict, names ...string) ([]Value, []bool, error) {
	if len(args) > len(names) {
		return nil, nil, typeErr("%s() takes at most %d arguments (%d given)", fname, len(names), len(args))
	}
	vals := make([]Value, len(names))
	has := make([]bool, len(names))
	for i, a := range args {
		vals[i], has[i] = a, true
	}
	if kw != nil {
		for i, k := range kw.keys {
			ks, _ := k.(string)
			j := -1
			for n, name := range names {
				if name == ks {
					j = n
				}
			}
			if j < 0 {
				return nil, nil, typeErr("%s() got an unexpected keyword argument '%s'", fname, ks)
			}
			if has[j] {
				return nil, nil, typeErr("%s() got multiple values for argument '%s'", fname, ks)
			}
			vals[j], has[j] = kw.vals[i], true
		}
	}
	return vals, has, nil
}

func strArg(fname string, v Value) (string, error) {
	s, ok := v.(string)
	if !ok {
		if u, isU := v.(Undefined); isU {
			return "", u.err()
		}
		return "", typeErr("%s() argument must be str, not %s", fname, typeName(v))
	}
	return s, nil
}

func method(obj Value, name string) (Value, bool) {
	switch o := obj.(type) {
	case string:
		return strMethod(o, name)
	case *Dict:
		switch name {
		case "get":
			return bound("get", func(r *renderer, args []Value, kw *Dict) (Value, error) {
				if kw != nil || len(args) < 1 || len(args) > 2 {
					return nil, typeErr("get expected 1 or 2 arguments")
				}
				if _, ok := hashKey(args[0]); !ok {
					return nil, typeErr("unhashable type: '%s'", typeName(args[0]))
				}
				if v, ok := o.Get(args[0]); ok {
					return v, nil
				}
				if len(args) == 2 {
					return args[1], nil
				}
				return nil, nil
			}), true
		case "items":
			return bound("items", func(r *renderer, args []Value, kw *Dict) (Value, error) {
				return dictItems(r, o)
			}), true
		case "keys":
			return bound("keys", func(r *renderer, args []Value, kw *Dict) (Value, error) {
				return &List{Items: append([]Value(nil), o.keys...)}, r.step(len(o.keys))
			}), true
		case "values":
			return bound("values", func(r *renderer, args []Value, kw *Dict) (Value, error) {
				return &List{Items: append([]Value(nil), o.vals...)}, r.step(len(o.vals))
			}), true
		case "copy":
			return bound("copy", func(r *renderer, args []Value, kw *Dict) (Value, error) {
				d := NewDict(o.Len())
				for i, k := range o.keys {
					d.Set(k, o.vals[i])
				}
				return d, r.step(o.Len())
			}), true
		}
	case *List:
		switch name {
		case "index":
			return bound("index", func(r *renderer, args []Value, kw *Dict) (Value, error) {
				if len(args) != 1 {
					return nil, typeErr("index expected 1 argument")
				}
				for i, it := range o.Items {
					if pyEqual(it, args[0]) {
						return int64(i), nil
					}
				}
				return nil, valueErr("%s is not in list", reprValue(args[0]))
			}), true
		case "count":
			return bound("count", func(r *renderer, args []Value, kw *Dict) (Value, error) {
				if len(args) != 1 {
					return nil, typeErr("count expected 1 argument")
				}
				n := int64(0)
				for _, it := range o.Items {
					if pyEqual(it, args[0]) {
						n++
					}
				}
				return n, r.step(len(o.Items))
			}), true
		case "copy":
			if !o.Tuple {
				return bound("copy", func(r *renderer, args []Value, kw *Dict) (Value, error) {
					return &List{Items: append([]Value(nil), o.Items...)}, nil
				}), true
			}
		}
	}
	return nil, false
}

func dictItems(r *renderer, d *Dict) (Value, error) {
	if err := r.step(d.Len()); err != nil {
		return nil, err
	}
	out := make([]Value, d.Len())
	for i, k := range d.keys {
		out[i] = &List{Items: []Value{k, d.vals[i]}, Tuple: true}
	}
	return &List{Items: out}, nil
}

// stripChars is str.strip(chars): chars nil strips Python whitespace.
func stripChars(s string, chars Value, left, right bool) (string, error) {
	var f func(rune) bool
	switch c := chars.(type) {
	case nil:
		f = isSpace
	case string:
		f = func(r rune) bool { return strings.ContainsRune(c, r) }
	default:
		return "", typeErr("strip arg must be None or str")
	}
	if left {
		s = strings.TrimLeftFunc(s, f)
	}
	if right {
		s = strings.TrimRightFunc(s, f)
	}
	return s, nil
}

// pySplit is str.split / str.rsplit: sep nil splits on runs of
// whitespace, dropping empty strings.
func pySplit(s string, sep Value, maxsplit int64, right bool) ([]Value, error) {
	var parts []string
	switch sp := sep.(type) {
	case nil:
		fields := strings.FieldsFunc(s, isSpace)
		if maxsplit < 0 || int64(len(fields)) <= maxsplit {
			parts = fields
			break
		}
		// The remainder keeps its inner whitespace (rstrip'd on the
		// split side only).
		if !right {
			rest := s
			for i := int64(0); i < maxsplit; i++ {
				rest = strings.TrimLeftFunc(rest, isSpace)
				j := strings.IndexFunc(rest, isSpace)
				parts = append(parts, rest[:j])
				rest = rest[j:]
			}
			rest = strings.TrimLeftFunc(rest, isSpace)
			if rest != "" {
				parts = append(parts, rest)
			}
		} else {
			rest := s
			var tail []string
			for i := int64(0); i < maxsplit; i++ {
				rest = strings.TrimRightFunc(rest, isSpace)
				j := strings.LastIndexFunc(rest, isSpace)
				_, w := utf8.DecodeRuneInString(rest[j:])
				tail = append(tail, rest[j+w:])
				rest = rest[:j]
			}
			rest = strings.TrimRightFunc(rest, isSpace)
			if rest != "" {
				parts = append(parts, rest)
			}
			for i := len(tail) - 1; i >= 0; i-- {
				parts = append(parts, tail[i])
			}
		}
	case string:
		if sp == "" {
			return nil, valueErr("empty separator")
		}
		if maxsplit < 0 {
			parts = strings.Split(s, sp)
		} else if !right {
			parts = strings.SplitN(s, sp, int(min(maxsplit, int64(len(s))))+1)
		} else {
			rest := s
			var tail []string
			for i := int64(0); i < maxsplit; i++ {
				j := strings.LastIndex(rest, sp)
				if j < 0 {
					break
				}
				tail = append(tail, rest[j+len(sp):])
				rest = rest[:j]
			}
			parts = append(parts, rest)
			for i := len(tail) - 1; i >= 0; i-- {
				parts = append(parts, tail[i])
			}
		}
	default:
		return nil, typeErr("must be str or None, not %s", typeName(sep))
	}
	out := make([]Value, len(parts))
	for i, p := range parts {
		out[i] = p
	}
	return out, nil
}

// pyTitle is str.title: a cased letter after an uncased character
// starts a word.
func pyTitle(s string) string {
	var b strings.Builder
	prevCased := false
	for _, r := range s {
		if prevCased {
			b.WriteRune(unicode.ToLower(r))
		} else {
			b.WriteRune(unicode.ToTitle(r))
		}
		prevCased = unicode.IsUpper(r) || unicode.IsLower(r) || unicode.IsTitle(r)
	}
	return b.String()
}

// pyCapitalize is str.capitalize: the first character title-cased, the
// rest lower.
func pyCapitalize(s string) string {
	r, w := utf8.DecodeRuneInString(s)
	if w == 0 {
		return s
	}
	return string(unicode.ToTitle(r)) + pyLower(s[w:])
}

// pyLower and pyUpper are str.lower and str.upper for the common case;
// the full Unicode special casings (ß → SS) as Python's.
func pyLower(s string) string {
	return strings.Map(unicode.ToLower, strings.ReplaceAll(s, "\u0130", "i\u0307"))
}

func pyUpper(s string) string {
	if strings.ContainsRune(s, 'ß') {
		s = strings.ReplaceAll(s, "ß", "SS")
	}
	return strings.ToUpper(s)
}

// runeIndex converts a byte offset in s to a code point offset.
func runeIndex(s string, byteOff int) int64 {
	if byteOff < 0 {
		return -1
	}
	return int64(utf8.RuneCountInString(s[:byteOff]))
}
