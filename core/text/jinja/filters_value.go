package jinja

import (
	"math"
	"strconv"
	"strings"
	"unicode"
)

// Filters on strings and numbers: trim, replace, round, int, indent, truncate, format and the like.

func fTrim(r *renderer, v Value, args []Value, kw *Dict) (Value, error) {
	a, _, err := argsOf("trim", args, kw, "chars")
	if err != nil {
		return nil, err
	}
	return stripChars(toStr(v), a[0], true, true)
}

func fReplace(r *renderer, v Value, args []Value, kw *Dict) (Value, error) {
	a, has, err := argsOf("replace", args, kw, "old", "new", "count")
	if err != nil {
		return nil, err
	}
	if !has[0] || !has[1] {
		return nil, typeErr("do_replace() missing required arguments")
	}
	return pyReplace(r, toStr(v), toStr(a[0]), toStr(a[1]), a[2], has[2])
}

func fAbs(r *renderer, v Value, _ []Value, _ *Dict) (Value, error) {
	switch x := v.(type) {
	case bool:
		return toInt(x), nil
	case int64:
		if x < 0 {
			return neg(x)
		}
		return x, nil
	case float64:
		return math.Abs(x), nil
	case Undefined:
		return nil, x.err()
	}
	return nil, typeErr("bad operand type for abs(): '%s'", typeName(v))
}

func fRound(r *renderer, v Value, args []Value, kw *Dict) (Value, error) {
	a, _, err := argsOf("round", args, kw, "precision", "method")
	if err != nil {
		return nil, err
	}
	prec := int64(0)
	if a[0] != nil {
		p, _, isInt, _ := num(a[0])
		if !isInt {
			return nil, typeErr("'%s' object cannot be interpreted as an integer", typeName(a[0]))
		}
		prec = p
	}
	method := "common"
	if a[1] != nil {
		method = toStr(a[1])
	}
	i, f, isInt, ok := num(v)
	if !ok {
		if u, isU := v.(Undefined); isU {
			return nil, u.err()
		}
		return nil, typeErr("type %s doesn't define __round__ method", typeName(v))
	}
	switch method {
	case "common":
		if isInt {
			if _, isBool := v.(bool); isBool {
				return i, nil
			}
			return i, nil // round(int, n >= 0) is the int
		}
		if math.IsInf(f, 0) || math.IsNaN(f) {
			return f, nil
		}
		if prec == 0 {
			return math.RoundToEven(f), nil
		}
		if prec > 0 && prec < 300 {
			// Correctly rounded decimal digits, as Python's round.
			s := strconv.FormatFloat(f, 'f', int(prec), 64)
			out, _ := strconv.ParseFloat(s, 64)
			return out, nil
		}
		return f, nil
	case "ceil", "floor":
		scale := math.Pow(10, float64(prec))
		x := f * scale
		if method == "ceil" {
			x = math.Ceil(x)
		} else {
			x = math.Floor(x)
		}
		return x / scale, nil
	}
	return nil, &RenderError{Kind: "FilterArgumentError", Msg: "method must be common, ceil or floor"}
}

func fInt(r *renderer, v Value, args []Value, kw *Dict) (Value, error) {
	a, has, err := argsOf("int", args, kw, "default", "base")
	if err != nil {
		return nil, err
	}
	dflt := Value(int64(0))
	if has[0] {
		dflt = a[0]
	}
	base := int64(10)
	if has[1] {
		base, _, _, _ = num(a[1])
	}
	switch x := v.(type) {
	case bool:
		return toInt(x), nil
	case int64:
		return x, nil
	case float64:
		if math.IsInf(x, 0) || math.IsNaN(x) || math.Abs(x) >= 1<<63 {
			return dflt, nil
		}
		return int64(x), nil
	case string:
		s := strings.ReplaceAll(strings.TrimFunc(x, isSpace), "_", "")
		if n, err := strconv.ParseInt(s, int(base), 64); err == nil {
			return n, nil
		}
		if f, err := strconv.ParseFloat(s, 64); err == nil && !math.IsInf(f, 0) && !math.IsNaN(f) && math.Abs(f) < 1<<63 {
			return int64(f), nil
		}
	}
	return dflt, nil
}

func fFloat(r *renderer, v Value, args []Value, kw *Dict) (Value, error) {
	a, has, err := argsOf("float", args, kw, "default")
	if err != nil {
		return nil, err
	}
	dflt := Value(0.0)
	if has[0] {
		dflt = a[0]
	}
	if _, f, _, ok := num(v); ok {
		return f, nil
	}
	if s, ok := v.(string); ok {
		s = strings.TrimFunc(s, isSpace)
		if f, err := strconv.ParseFloat(strings.ReplaceAll(s, "_", ""), 64); err == nil || strings.EqualFold(s, "inf") || strings.EqualFold(s, "nan") {
			return f, nil
		}
	}
	return dflt, nil
}

func fEscape(r *renderer, v Value, _ []Value, _ *Dict) (Value, error) {
	return strings.NewReplacer("&", "&amp;", "<", "&lt;", ">", "&gt;", `"`, "&#34;", "'", "&#39;").Replace(toStr(v)), nil
}

func fCenter(r *renderer, v Value, args []Value, kw *Dict) (Value, error) {
	a, has, err := argsOf("center", args, kw, "width")
	if err != nil {
		return nil, err
	}
	w := int64(80)
	if has[0] {
		w, _, _, _ = num(a[0])
	}
	s := toStr(v)
	n := int64(runeLen(s))
	if w <= n {
		return s, nil
	}
	if w > MaxOutput {
		return nil, &limitError{what: "a string over MaxOutput bytes"}
	}
	marg := w - n
	left := marg/2 + (marg & w & 1)
	out := strings.Repeat(" ", int(left)) + s + strings.Repeat(" ", int(marg-left))
	return out, r.charge(len(out))
}

func fIndent(r *renderer, v Value, args []Value, kw *Dict) (Value, error) {
	a, has, err := argsOf("indent", args, kw, "width", "first", "blank")
	if err != nil {
		return nil, err
	}
	ind := "    "
	if has[0] {
		if s, ok := a[0].(string); ok {
			ind = s
		} else {
			w, _, isInt, _ := num(a[0])
			if !isInt {
				return nil, typeErr("can't multiply sequence by non-int of type '%s'", typeName(a[0]))
			}
			if w > MaxOutput {
				return nil, &limitError{what: "a string over MaxOutput bytes"}
			}
			ind = strings.Repeat(" ", int(max(w, 0)))
		}
	}
	s, ok := v.(string)
	if !ok {
		return nil, typeErr("unsupported operand type(s) for +=: '%s' and 'str'", typeName(v))
	}
	lv, _ := strMethod(s+"\n", "splitlines")
	lines0, err := lv.(*Func).Call(r, nil, nil)
	if err != nil {
		return nil, err
	}
	lines := lines0.(*List).Items
	var b strings.Builder
	if truthy(a[2]) {
		for i, l := range lines {
			if i > 0 {
				b.WriteString("\n" + ind)
			}
			b.WriteString(l.(string))
		}
	} else if len(lines) > 0 {
		b.WriteString(lines[0].(string))
		for _, l := range lines[1:] {
			b.WriteByte('\n')
			if l.(string) != "" {
				b.WriteString(ind)
			}
			b.WriteString(l.(string))
			if b.Len() > MaxOutput {
				return nil, &limitError{what: "a string over MaxOutput bytes"}
			}
		}
	}
	out := b.String()
	if truthy(a[1]) {
		out = ind + out
	}
	return out, r.charge(len(out))
}

func fWordcount(r *renderer, v Value, _ []Value, _ *Dict) (Value, error) {
	n := 0
	in := false
	for _, c := range toStr(v) {
		w := unicode.IsLetter(c) || unicode.IsDigit(c) || c == '_' || unicode.In(c, unicode.Mn, unicode.Mc, unicode.Nd, unicode.Pc)
		if w && !in {
			n++
		}
		in = w
	}
	return int64(n), nil
}

func fTruncate(r *renderer, v Value, args []Value, kw *Dict) (Value, error) {
	a, has, err := argsOf("truncate", args, kw, "length", "killwords", "end", "leeway")
	if err != nil {
		return nil, err
	}
	s := toStr(v)
	length := int64(255)
	if has[0] {
		length, _, _, _ = num(a[0])
	}
	end := "..."
	if has[2] {
		end = toStr(a[2])
	}
	leeway := int64(5)
	if has[3] && a[3] != nil {
		leeway, _, _, _ = num(a[3])
	}
	rs := []rune(s)
	if length < int64(runeLen(end)) || leeway < 0 {
		return nil, &RenderError{Kind: "AssertionError", Msg: "expected length >= len(end) and leeway >= 0"}
	}
	if int64(len(rs)) <= length+leeway {
		return s, nil
	}
	cut := string(rs[:length-int64(runeLen(end))])
	if truthy(a[1]) {
		return cut + end, nil
	}
	if i := strings.LastIndexByte(cut, ' '); i >= 0 {
		cut = cut[:i]
	}
	return cut + end, nil
}

func fBatch(r *renderer, v Value, args []Value, kw *Dict) (Value, error) {
	a, has, err := argsOf("batch", args, kw, "linecount", "fill_with")
	if err != nil {
		return nil, err
	}
	n, _, isInt, _ := num(a[0])
	if !isInt || n <= 0 {
		return nil, valueErr("batch needs a positive line count")
	}
	items, err := r.seqItems(v)
	if err != nil {
		return nil, err
	}
	var out []Value
	for i := 0; i < len(items); i += int(n) {
		j := min(i+int(n), len(items))
		row := append([]Value(nil), items[i:j]...)
		if has[1] && a[1] != nil {
			for len(row) < int(n) {
				row = append(row, a[1])
			}
		}
		out = append(out, &List{Items: row})
	}
	return &iterVal{items: out}, nil
}

func fSum(r *renderer, v Value, args []Value, kw *Dict) (Value, error) {
	a, has, err := argsOf("sum", args, kw, "attribute", "start")
	if err != nil {
		return nil, err
	}
	items, err := r.seqItems(v)
	if err != nil {
		return nil, err
	}
	var total Value = int64(0)
	if has[1] {
		total = a[1]
	}
	var get func(Value) (Value, error)
	if a[0] != nil {
		get = attrGetter(a[0], nil, false)
	}
	for _, it := range items {
		if get != nil {
			if it, err = get(it); err != nil {
				return nil, err
			}
		}
		if total, err = r.binop("+", total, it); err != nil {
			return nil, err
		}
	}
	return total, nil
}

func fMinMax(isMax bool) filterFunc {
	return func(r *renderer, v Value, args []Value, kw *Dict) (Value, error) {
		a, _, err := argsOf("min", args, kw, "case_sensitive", "attribute")
		if err != nil {
			return nil, err
		}
		items, err := r.seqItems(v)
		if err != nil {
			return nil, err
		}
		if len(items) == 0 {
			return Undefined{hint: "No aggregated item, sequence was empty."}, nil
		}
		var get func(Value) (Value, error)
		if a[1] != nil {
			get = attrGetter(a[1], nil, false)
		}
		key := func(x Value) (Value, error) {
			if get != nil {
				var err error
				if x, err = get(x); err != nil {
					return nil, err
				}
			}
			return sortKey(x, truthy(a[0])), nil
		}
		best := items[0]
		bk, err := key(best)
		if err != nil {
			return nil, err
		}
		for _, it := range items[1:] {
			k, err := key(it)
			if err != nil {
				return nil, err
			}
			x, y := k, bk
			if isMax {
				x, y = bk, k
			}
			lt, err := pyLess(x, y, "<")
			if err != nil {
				return nil, err
			}
			if lt {
				best, bk = it, k
			}
		}
		return best, nil
	}
}

func fAttr(r *renderer, v Value, args []Value, _ *Dict) (Value, error) {
	if len(args) != 1 {
		return nil, typeErr("attr() takes exactly one argument")
	}
	name, ok := args[0].(string)
	if !ok {
		return noItem(v, args[0]), nil
	}
	return getattr(v, name)
}

func fFormat(r *renderer, v Value, args []Value, kw *Dict) (Value, error) {
	if kw != nil && len(args) > 0 {
		return nil, &RenderError{Kind: "FilterArgumentError", Msg: "can't handle positional and keyword arguments at the same time"}
	}
	if kw != nil {
		return nil, valueErr("format with keyword arguments is not supported")
	}
	out, err := printf(toStr(v), &List{Items: args, Tuple: true})
	if err != nil {
		return nil, err
	}
	return out, r.charge(len(out))
}

// Tests.
