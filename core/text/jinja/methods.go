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

func strMethod(s string, name string) (Value, bool) {
	switch name {
	case "strip", "lstrip", "rstrip":
		return bound(name, func(r *renderer, args []Value, kw *Dict) (Value, error) {
			a, _, err := argsOf(name, args, kw, "chars")
			if err != nil {
				return nil, err
			}
			return stripChars(s, a[0], name != "rstrip", name != "lstrip")
		}), true
	case "split", "rsplit":
		return bound(name, func(r *renderer, args []Value, kw *Dict) (Value, error) {
			a, has, err := argsOf(name, args, kw, "sep", "maxsplit")
			if err != nil {
				return nil, err
			}
			maxsplit := int64(-1)
			if has[1] {
				m, _, isInt, _ := num(a[1])
				if !isInt {
					return nil, typeErr("maxsplit must be an integer")
				}
				maxsplit = m
			}
			if err := r.step(len(s) / 16); err != nil {
				return nil, err
			}
			parts, err := pySplit(s, a[0], maxsplit, name == "rsplit")
			if err != nil {
				return nil, err
			}
			return &List{Items: parts}, nil
		}), true
	case "splitlines":
		return bound(name, func(r *renderer, args []Value, kw *Dict) (Value, error) {
			var out []Value
			rest := s
			for rest != "" {
				j := strings.IndexAny(rest, "\n\r\v\f\x1c\x1d\x1e\x85\u2028\u2029")
				if j < 0 {
					out = append(out, rest)
					break
				}
				out = append(out, rest[:j])
				_, w := utf8.DecodeRuneInString(rest[j:])
				if rest[j] == '\r' && j+1 < len(rest) && rest[j+1] == '\n' {
					w = 2
				}
				rest = rest[j+w:]
			}
			return &List{Items: out}, nil
		}), true
	case "startswith", "endswith":
		return bound(name, func(r *renderer, args []Value, kw *Dict) (Value, error) {
			if len(args) != 1 || kw != nil {
				return nil, typeErr("%s() takes one argument here", name)
			}
			var prefixes []Value
			switch p := args[0].(type) {
			case string:
				prefixes = []Value{p}
			case *List:
				if !p.Tuple {
					return nil, typeErr("%s first arg must be str or a tuple of str, not list", name)
				}
				prefixes = p.Items
			default:
				return nil, typeErr("%s first arg must be str or a tuple of str, not %s", name, typeName(args[0]))
			}
			for _, p := range prefixes {
				ps, ok := p.(string)
				if !ok {
					return nil, typeErr("tuple for %s must only contain str, not %s", name, typeName(p))
				}
				if name == "startswith" && strings.HasPrefix(s, ps) || name == "endswith" && strings.HasSuffix(s, ps) {
					return true, nil
				}
			}
			return false, nil
		}), true
	case "upper", "lower", "title", "capitalize", "swapcase":
		return bound(name, func(r *renderer, args []Value, kw *Dict) (Value, error) {
			switch name {
			case "upper":
				return pyUpper(s), nil
			case "lower":
				return pyLower(s), nil
			case "title":
				return pyTitle(s), nil
			case "capitalize":
				return pyCapitalize(s), nil
			}
			return strings.Map(func(c rune) rune {
				if unicode.IsUpper(c) {
					return unicode.ToLower(c)
				}
				return unicode.ToUpper(c)
			}, s), nil
		}), true
	case "isdigit", "isalpha", "isalnum", "isspace", "isupper", "islower", "isnumeric", "isdecimal":
		return bound(name, func(r *renderer, args []Value, kw *Dict) (Value, error) {
			return strIs(name, s), nil
		}), true
	case "replace":
		return bound(name, func(r *renderer, args []Value, kw *Dict) (Value, error) {
			a, has, err := argsOf(name, args, kw, "old", "new", "count")
			if err != nil {
				return nil, err
			}
			if !has[0] || !has[1] {
				return nil, typeErr("replace expected at least 2 arguments")
			}
			return pyReplace(r, s, a[0], a[1], a[2], has[2])
		}), true
	case "find", "rfind", "index", "rindex", "count":
		return bound(name, func(r *renderer, args []Value, kw *Dict) (Value, error) {
			if len(args) != 1 || kw != nil {
				return nil, typeErr("%s() with start or end is not supported", name)
			}
			sub, err := strArg(name, args[0])
			if err != nil {
				return nil, err
			}
			switch name {
			case "count":
				if sub == "" {
					return int64(runeLen(s) + 1), nil
				}
				return int64(strings.Count(s, sub)), nil
			case "find", "index":
				i := runeIndex(s, strings.Index(s, sub))
				if i < 0 && name == "index" {
					return nil, valueErr("substring not found")
				}
				return i, nil
			}
			i := runeIndex(s, strings.LastIndex(s, sub))
			if i < 0 && name == "rindex" {
				return nil, valueErr("substring not found")
			}
			return i, nil
		}), true
	case "join":
		return bound(name, func(r *renderer, args []Value, kw *Dict) (Value, error) {
			if len(args) != 1 {
				return nil, typeErr("join() takes exactly one argument")
			}
			items, err := r.iterate(args[0])
			if err != nil {
				return nil, err
			}
			parts := make([]string, len(items))
			for i, it := range items {
				p, ok := it.(string)
				if !ok {
					return nil, typeErr("sequence item %d: expected str instance, %s found", i, typeName(it))
				}
				parts[i] = p
			}
			out := strings.Join(parts, s)
			return out, r.charge(len(out))
		}), true
	case "format":
		return bound(name, func(r *renderer, args []Value, kw *Dict) (Value, error) {
			return strFormat(r, s, args, kw)
		}), true
	}
	return nil, false
}

func strIs(name, s string) bool {
	if s == "" {
		return false
	}
	cased := false
	for _, r := range s {
		switch name {
		case "isdigit", "isdecimal", "isnumeric":
			if !unicode.IsDigit(r) && !(name == "isnumeric" && unicode.IsNumber(r)) {
				return false
			}
		case "isalpha":
			if !unicode.IsLetter(r) {
				return false
			}
		case "isalnum":
			if !unicode.IsLetter(r) && !unicode.IsNumber(r) {
				return false
			}
		case "isspace":
			if !isSpace(r) {
				return false
			}
		case "isupper":
			if unicode.IsLower(r) {
				return false
			}
			cased = cased || unicode.IsUpper(r)
		case "islower":
			if unicode.IsUpper(r) {
				return false
			}
			cased = cased || unicode.IsLower(r)
		}
	}
	if name == "isupper" || name == "islower" {
		return cased
	}
	return true
}

// pyReplace is str.replace(old, new[, count]); an empty old inserts new
// between code points, as Python's.
func pyReplace(r *renderer, s string, oldv, newv, countv Value, hasCount bool) (Value, error) {
	old, err := strArg("replace", oldv)
	if err != nil {
		return nil, err
	}
	nw, err := strArg("replace", newv)
	if err != nil {
		return nil, err
	}
	n := -1
	if hasCount && countv != nil {
		c, _, isInt, _ := num(countv)
		if !isInt {
			return nil, typeErr("'%s' object cannot be interpreted as an integer", typeName(countv))
		}
		if c >= 0 {
			n = int(min(c, int64(len(s)+1)))
		}
	}
	matches := strings.Count(s, old)
	if n >= 0 {
		matches = min(matches, n)
	}
	if size := len(s) + matches*(len(nw)-len(old)); size > MaxOutput {
		return nil, &limitError{what: "a string over MaxOutput bytes"}
	}
	out := strings.Replace(s, old, nw, n)
	return out, r.charge(len(out))
}

// strFormat is str.format with {} and {n} and {name} fields (no format
// specs).
func strFormat(r *renderer, s string, args []Value, kw *Dict) (Value, error) {
	var b strings.Builder
	auto := 0
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '{' && i+1 < len(s) && s[i+1] == '{':
			b.WriteByte('{')
			i++
		case c == '}' && i+1 < len(s) && s[i+1] == '}':
			b.WriteByte('}')
			i++
		case c == '{':
			j := strings.IndexByte(s[i:], '}')
			if j < 0 {
				return nil, valueErr("Single '{' encountered in format string")
			}
			field := s[i+1 : i+j]
			i += j
			if strings.ContainsAny(field, ":!.[") {
				return nil, valueErr("format specs are not supported")
			}
			var v Value
			switch {
			case field == "":
				if auto >= len(args) {
					return nil, &RenderError{Kind: "IndexError", Msg: "Replacement index out of range"}
				}
				v = args[auto]
				auto++
			case field[0] >= '0' && field[0] <= '9':
				k := 0
				for _, d := range field {
					k = k*10 + int(d-'0')
				}
				if k >= len(args) {
					return nil, &RenderError{Kind: "IndexError", Msg: "Replacement index out of range"}
				}
				v = args[k]
			default:
				kv, ok := kwGet(kw, field)
				if !ok {
					return nil, &RenderError{Kind: "KeyError", Msg: "'" + field + "'"}
				}
				v = kv
			}
			b.WriteString(toStr(v))
		case c == '}':
			return nil, valueErr("Single '}' encountered in format string")
		default:
			b.WriteByte(c)
		}
	}
	out := b.String()
	return out, r.charge(len(out))
}

// attr is a LoopContext attribute.
func (l *loopObj) attr(name string) Value {
	n := len(l.items)
	switch name {
	case "index":
		return int64(l.index0 + 1)
	case "index0":
		return int64(l.index0)
	case "revindex":
		return int64(n - l.index0)
	case "revindex0":
		return int64(n - l.index0 - 1)
	case "first":
		return l.index0 == 0
	case "last":
		return l.index0 == n-1
	case "length":
		return int64(n)
	case "depth":
		return int64(1)
	case "depth0":
		return int64(0)
	case "previtem":
		if l.index0 == 0 {
			return Undefined{hint: "there is no previous item"}
		}
		return l.items[l.index0-1]
	case "nextitem":
		if l.index0 >= n-1 {
			return Undefined{hint: "there is no next item"}
		}
		return l.items[l.index0+1]
	case "cycle":
		return bound("cycle", func(r *renderer, args []Value, kw *Dict) (Value, error) {
			if len(args) == 0 {
				return nil, typeErr("no items for cycling given")
			}
			return args[l.index0%len(args)], nil
		})
	}
	return noAttr(l, name)
}
