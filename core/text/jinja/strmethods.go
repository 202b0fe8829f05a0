package jinja

import (
	"strings"
	"unicode"
	"unicode/utf8"
)

// The methods of str that chat templates call.

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
