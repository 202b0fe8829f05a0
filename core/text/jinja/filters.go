package jinja

import (
	"math"
	"sort"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"
)

// Filters and tests: jinja2.filters and jinja2.tests (3.1), with
// transformers' tojson. A filter jinja2 implements as a generator (map,
// select, reject, selectattr, rejectattr, unique, batch, items) returns
// an *iterVal: true however empty, no len, consumed by one pass, as in
// Python.

// iterVal is a Python generator or iterator.
type iterVal struct {
	items []Value
	pos   int
}

func (it *iterVal) drain() []Value {
	rest := it.items[it.pos:]
	it.pos = len(it.items)
	return rest
}

type filterFunc func(r *renderer, v Value, args []Value, kw *Dict) (Value, error)

var filters map[string]filterFunc

func init() {
	filters = map[string]filterFunc{
		"abs":        fAbs,
		"attr":       fAttr,
		"batch":      fBatch,
		"capitalize": strFilter(pyCapitalize),
		"center":     fCenter,
		"count":      fLength,
		"d":          fDefault,
		"default":    fDefault,
		"dictsort":   fDictsort,
		"e":          fEscape,
		"escape":     fEscape,
		"first":      fFirst,
		"float":      fFloat,
		"format":     fFormat,
		"indent":     fIndent,
		"int":        fInt,
		"items":      fItems,
		"join":       fJoin,
		"last":       fLast,
		"length":     fLength,
		"list":       fList,
		"lower":      strFilter(pyLower),
		"map":        fMap,
		"max":        fMinMax(true),
		"min":        fMinMax(false),
		"reject":     fSelect(false, false),
		"rejectattr": fSelect(false, true),
		"replace":    fReplace,
		"reverse":    fReverse,
		"round":      fRound,
		"safe":       func(r *renderer, v Value, _ []Value, _ *Dict) (Value, error) { return toStr(v), nil },
		"select":     fSelect(true, false),
		"selectattr": fSelect(true, true),
		"sort":       fSort,
		"string":     func(r *renderer, v Value, _ []Value, _ *Dict) (Value, error) { return toStr(v), nil },
		"sum":        fSum,
		"title":      strFilter(jinjaTitle),
		"tojson":     fToJSON,
		"trim":       fTrim,
		"truncate":   fTruncate,
		"unique":     fUnique,
		"upper":      strFilter(pyUpper),
		"wordcount":  fWordcount,
	}
}

func (r *renderer) applyFilter(f *filterExpr, v Value, sc *scope) (Value, error) {
	fn, ok := filters[f.name]
	if !ok {
		return nil, &RenderError{Kind: "TemplateAssertionError", Msg: "No filter named '" + f.name + "'."}
	}
	args, kw, err := r.evalArgs(f.args, f.kwargs, sc)
	if err != nil {
		return nil, err
	}
	return fn(r, v, args, kw)
}

// seqItems is what a filter iterates: list(v).
func (r *renderer) seqItems(v Value) ([]Value, error) {
	if it, ok := v.(*iterVal); ok {
		return it.drain(), nil
	}
	items, err := r.iterate(v)
	if err == nil {
		err = r.step(len(items))
	}
	return items, err
}

// falsyEmpty is what map and select* iterate: jinja2 guards them with
// "if value:", so a false value (None, "", undefined) is empty.
func (r *renderer) falsyEmpty(v Value) ([]Value, error) {
	if !truthy(v) {
		return nil, nil
	}
	return r.seqItems(v)
}

func strFilter(f func(string) string) filterFunc {
	return func(r *renderer, v Value, _ []Value, _ *Dict) (Value, error) {
		return f(toStr(v)), nil
	}
}

// jinjaTitle is jinja2's do_title: words begin after [-\s({\[<]+.
func jinjaTitle(s string) string {
	var b strings.Builder
	start := true
	for _, r := range s {
		if r == '-' || r == '(' || r == '{' || r == '[' || r == '<' || isSpace(r) {
			b.WriteRune(r)
			start = true
			continue
		}
		if start {
			b.WriteRune(unicode.ToTitle(r))
		} else {
			b.WriteString(pyLower(string(r)))
		}
		start = false
	}
	return b.String()
}

func pyLen(v Value) (int, error) {
	switch v := v.(type) {
	case string:
		return runeLen(v), nil
	case *List:
		return len(v.Items), nil
	case *Dict:
		return v.Len(), nil
	case Undefined:
		return 0, nil
	case *Namespace:
		return 0, typeErr("object of type 'Namespace' has no len()")
	}
	return 0, typeErr("object of type '%s' has no len()", typeName(v))
}

func fLength(r *renderer, v Value, _ []Value, _ *Dict) (Value, error) {
	if _, ok := v.(*iterVal); ok {
		return nil, typeErr("object of type 'generator' has no len()")
	}
	n, err := pyLen(v)
	return int64(n), err
}

func fDefault(r *renderer, v Value, args []Value, kw *Dict) (Value, error) {
	a, _, err := argsOf("default", args, kw, "default_value", "boolean")
	if err != nil {
		return nil, err
	}
	if a[0] == nil && len(args) == 0 && (kw == nil || !kwHas(kw, "default_value")) {
		a[0] = ""
	}
	if _, ok := v.(Undefined); ok || (truthy(a[1]) && !truthy(v)) {
		return a[0], nil
	}
	return v, nil
}

func kwHas(kw *Dict, name string) bool {
	_, ok := kwGet(kw, name)
	return ok
}

func fFirst(r *renderer, v Value, _ []Value, _ *Dict) (Value, error) {
	if it, ok := v.(*iterVal); ok {
		if it.pos < len(it.items) {
			it.pos++
			return it.items[it.pos-1], nil
		}
		return Undefined{hint: "No first item, sequence was empty."}, nil
	}
	items, err := r.iterate(v)
	if err != nil {
		return nil, err
	}
	if len(items) == 0 {
		return Undefined{hint: "No first item, sequence was empty."}, nil
	}
	return items[0], nil
}

func fLast(r *renderer, v Value, _ []Value, _ *Dict) (Value, error) {
	switch v.(type) {
	case *iterVal:
		return nil, typeErr("'generator' object is not reversible")
	case Undefined:
		return nil, typeErr("'Undefined' object is not reversible")
	}
	items, err := r.iterate(v)
	if err != nil {
		return nil, err
	}
	if len(items) == 0 {
		return Undefined{hint: "No last item, sequence was empty."}, nil
	}
	return items[len(items)-1], nil
}

func fList(r *renderer, v Value, _ []Value, _ *Dict) (Value, error) {
	items, err := r.seqItems(v)
	if err != nil {
		return nil, err
	}
	return &List{Items: append([]Value(nil), items...)}, nil
}

func fReverse(r *renderer, v Value, _ []Value, _ *Dict) (Value, error) {
	if s, ok := v.(string); ok {
		rs := []rune(s)
		for i, j := 0, len(rs)-1; i < j; i, j = i+1, j-1 {
			rs[i], rs[j] = rs[j], rs[i]
		}
		return string(rs), nil
	}
	items, err := r.seqItems(v)
	if err != nil {
		return nil, err
	}
	out := make([]Value, len(items))
	for i, it := range items {
		out[len(items)-1-i] = it
	}
	return &iterVal{items: out}, nil
}

func fJoin(r *renderer, v Value, args []Value, kw *Dict) (Value, error) {
	a, has, err := argsOf("join", args, kw, "d", "attribute")
	if err != nil {
		return nil, err
	}
	sep := ""
	if has[0] {
		sep = toStr(a[0])
	}
	items, err := r.seqItems(v)
	if err != nil {
		return nil, err
	}
	var get func(Value) (Value, error)
	if has[1] && a[1] != nil {
		get = attrGetter(a[1], nil, false)
	}
	var b strings.Builder
	for i, it := range items {
		if get != nil {
			if it, err = get(it); err != nil {
				return nil, err
			}
		}
		if i > 0 {
			b.WriteString(sep)
		}
		b.WriteString(toStr(it))
		if b.Len() > MaxOutput {
			return nil, &limitError{what: "a string over MaxOutput bytes"}
		}
	}
	out := b.String()
	return out, r.charge(len(out))
}

// attrGetter is jinja2's make_attrgetter: "a.b.0" looks up a, then b,
// then item 0, each with the sandbox's getitem. A missing value is
// dflt when one is given (map's default=).
func attrGetter(attr Value, dflt Value, hasDefault bool) func(Value) (Value, error) {
	var parts []Value
	if s, ok := attr.(string); ok {
		for _, p := range strings.Split(s, ".") {
			if n, err := strconv.ParseInt(p, 10, 64); err == nil {
				parts = append(parts, n)
			} else {
				parts = append(parts, p)
			}
		}
	} else {
		parts = []Value{attr}
	}
	return func(v Value) (Value, error) {
		for _, p := range parts {
			var err error
			if v, err = getitem(v, p); err != nil {
				return nil, err
			}
		}
		if _, ok := v.(Undefined); ok && hasDefault {
			return dflt, nil
		}
		return v, nil
	}
}

func fMap(r *renderer, v Value, args []Value, kw *Dict) (Value, error) {
	items, err := r.falsyEmpty(v)
	if err != nil {
		return nil, err
	}
	var f func(Value) (Value, error)
	if len(args) == 0 && kw != nil && kwHas(kw, "attribute") {
		at, _ := kw.Get("attribute")
		dv, hasD := kw.Get("default")
		f = attrGetter(at, dv, hasD)
	} else {
		if len(args) == 0 {
			return nil, &RenderError{Kind: "FilterArgumentError", Msg: "map requires a filter argument"}
		}
		name, ok := args[0].(string)
		fn, known := filters[name]
		if !ok || !known {
			return nil, &RenderError{Kind: "TemplateRuntimeError", Msg: "No filter named " + reprValue(args[0]) + "."}
		}
		rest := args[1:]
		f = func(x Value) (Value, error) { return fn(r, x, rest, kw) }
	}
	out := make([]Value, len(items))
	for i, it := range items {
		if out[i], err = f(it); err != nil {
			return nil, err
		}
	}
	return &iterVal{items: out}, nil
}

func fSelect(keep, byAttr bool) filterFunc {
	return func(r *renderer, v Value, args []Value, kw *Dict) (Value, error) {
		items, err := r.falsyEmpty(v)
		if err != nil {
			return nil, err
		}
		get := func(x Value) (Value, error) { return x, nil }
		if byAttr {
			if len(args) == 0 {
				return nil, &RenderError{Kind: "FilterArgumentError", Msg: "Missing parameter for attribute name"}
			}
			get = attrGetter(args[0], nil, false)
			args = args[1:]
		}
		var test testFunc
		var targs []Value
		if len(args) == 0 {
			test = func(r *renderer, x Value, _ []Value, _ *Dict) (bool, error) { return truthy(x), nil }
		} else {
			name, _ := args[0].(string)
			t, ok := tests[name]
			if !ok {
				return nil, &RenderError{Kind: "TemplateRuntimeError", Msg: "No test named " + reprValue(args[0]) + "."}
			}
			test, targs = t, args[1:]
		}
		var out []Value
		for _, it := range items {
			x, err := get(it)
			if err != nil {
				return nil, err
			}
			ok, err := test(r, x, targs, kw)
			if err != nil {
				return nil, err
			}
			if ok == keep {
				out = append(out, it)
			}
		}
		return &iterVal{items: out}, nil
	}
}

// sortKey lowers strings when not case-sensitive (jinja2's ignore_case).
func sortKey(v Value, caseSensitive bool) Value {
	if s, ok := v.(string); ok && !caseSensitive {
		return pyLower(s)
	}
	return v
}

func fSort(r *renderer, v Value, args []Value, kw *Dict) (Value, error) {
	a, _, err := argsOf("sort", args, kw, "reverse", "case_sensitive", "attribute")
	if err != nil {
		return nil, err
	}
	items, err := r.seqItems(v)
	if err != nil {
		return nil, err
	}
	keys := make([]Value, len(items))
	var get func(Value) (Value, error)
	if a[2] != nil {
		get = attrGetter(a[2], nil, false)
	}
	for i, it := range items {
		k := it
		if get != nil {
			if k, err = get(it); err != nil {
				return nil, err
			}
		}
		keys[i] = sortKey(k, truthy(a[1]))
	}
	out, err := stableSort(items, keys, truthy(a[0]))
	if err != nil {
		return nil, err
	}
	return &List{Items: out}, nil
}

// stableSort is Python's sorted(items, key, reverse): stable, and equal
// items keep their order under reverse too.
func stableSort(items, keys []Value, reverse bool) ([]Value, error) {
	idx := make([]int, len(items))
	for i := range idx {
		idx[i] = i
	}
	var err error
	sort.SliceStable(idx, func(i, j int) bool {
		a, b := keys[idx[i]], keys[idx[j]]
		if reverse {
			a, b = b, a
		}
		lt, e := pyLess(a, b, "<")
		if e != nil && err == nil {
			err = e
		}
		return lt
	})
	if err != nil {
		return nil, err
	}
	out := make([]Value, len(items))
	for i, j := range idx {
		out[i] = items[j]
	}
	return out, nil
}

func fUnique(r *renderer, v Value, args []Value, kw *Dict) (Value, error) {
	a, _, err := argsOf("unique", args, kw, "case_sensitive", "attribute")
	if err != nil {
		return nil, err
	}
	items, err := r.seqItems(v)
	if err != nil {
		return nil, err
	}
	var get func(Value) (Value, error)
	if a[1] != nil {
		get = attrGetter(a[1], nil, false)
	}
	seen := map[any]bool{}
	var out []Value
	for _, it := range items {
		k := it
		if get != nil {
			if k, err = get(it); err != nil {
				return nil, err
			}
		}
		h, ok := hashKey(sortKey(k, truthy(a[0])))
		if !ok {
			return nil, typeErr("unhashable type: '%s'", typeName(k))
		}
		if !seen[h] {
			seen[h] = true
			out = append(out, it)
		}
	}
	return &iterVal{items: out}, nil
}

func fItems(r *renderer, v Value, _ []Value, _ *Dict) (Value, error) {
	switch d := v.(type) {
	case Undefined:
		return &iterVal{}, nil
	case *Dict:
		l, err := dictItems(r, d)
		if err != nil {
			return nil, err
		}
		return &iterVal{items: l.(*List).Items}, nil
	}
	return nil, typeErr("Can only get item pairs from a mapping.")
}

func fDictsort(r *renderer, v Value, args []Value, kw *Dict) (Value, error) {
	a, _, err := argsOf("dictsort", args, kw, "case_sensitive", "by", "reverse")
	if err != nil {
		return nil, err
	}
	d, ok := v.(*Dict)
	if !ok {
		return nil, typeErr("'%s' object has no attribute 'items'", typeName(v))
	}
	pos := 0
	if a[1] != nil {
		switch a[1] {
		case "key":
		case "value":
			pos = 1
		default:
			return nil, &RenderError{Kind: "FilterArgumentError", Msg: "You can only sort by either \"key\" or \"value\""}
		}
	}
	l, err := dictItems(r, d)
	if err != nil {
		return nil, err
	}
	items := l.(*List).Items
	keys := make([]Value, len(items))
	for i, it := range items {
		keys[i] = sortKey(it.(*List).Items[pos], truthy(a[0]))
	}
	out, err := stableSort(items, keys, truthy(a[2]))
	if err != nil {
		return nil, err
	}
	return &List{Items: out}, nil
}

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

type testFunc func(r *renderer, v Value, args []Value, kw *Dict) (bool, error)

var tests map[string]testFunc

func init() {
	cmp := func(op string) testFunc {
		return func(r *renderer, v Value, args []Value, _ *Dict) (bool, error) {
			if len(args) != 1 {
				return false, typeErr("test takes exactly one argument")
			}
			return r.compare(op, v, args[0])
		}
	}
	is := func(f func(Value) bool) testFunc {
		return func(r *renderer, v Value, _ []Value, _ *Dict) (bool, error) { return f(v), nil }
	}
	tests = map[string]testFunc{
		"defined":   is(func(v Value) bool { _, u := v.(Undefined); return !u }),
		"undefined": is(func(v Value) bool { _, u := v.(Undefined); return u }),
		"none":      is(func(v Value) bool { return v == nil }),
		"boolean":   is(func(v Value) bool { _, ok := v.(bool); return ok }),
		"true":      is(func(v Value) bool { b, ok := v.(bool); return ok && b }),
		"false":     is(func(v Value) bool { b, ok := v.(bool); return ok && !b }),
		"integer":   is(func(v Value) bool { _, ok := v.(int64); return ok }),
		"float":     is(func(v Value) bool { _, ok := v.(float64); return ok }),
		"number":    is(func(v Value) bool { _, _, _, ok := num(v); return ok }),
		"string":    is(func(v Value) bool { _, ok := v.(string); return ok }),
		"mapping":   is(func(v Value) bool { _, ok := v.(*Dict); return ok }),
		"sequence": is(func(v Value) bool {
			switch v.(type) {
			case string, *List, *Dict:
				return true
			}
			return false
		}),
		"iterable": is(func(v Value) bool {
			switch v.(type) {
			case string, *List, *Dict, *iterVal, Undefined:
				return true
			}
			return false
		}),
		"callable": is(func(v Value) bool {
			switch v.(type) {
			case *Func, *macro:
				return true
			}
			return false
		}),
		"lower":   is(func(v Value) bool { return strIs("islower", toStr(v)) }),
		"upper":   is(func(v Value) bool { return strIs("isupper", toStr(v)) }),
		"escaped": is(func(v Value) bool { return false }),
		"odd": func(r *renderer, v Value, _ []Value, _ *Dict) (bool, error) {
			m, err := r.binop("%", v, int64(2))
			return err == nil && pyEqual(m, int64(1)), err
		},
		"even": func(r *renderer, v Value, _ []Value, _ *Dict) (bool, error) {
			m, err := r.binop("%", v, int64(2))
			return err == nil && pyEqual(m, int64(0)), err
		},
		"divisibleby": func(r *renderer, v Value, args []Value, _ *Dict) (bool, error) {
			if len(args) != 1 {
				return false, typeErr("divisibleby takes one argument")
			}
			m, err := r.binop("%", v, args[0])
			return err == nil && pyEqual(m, int64(0)), err
		},
		"sameas": func(r *renderer, v Value, args []Value, _ *Dict) (bool, error) {
			if len(args) != 1 {
				return false, typeErr("sameas takes one argument")
			}
			switch x := v.(type) {
			case nil, bool, int64, string:
				return v == args[0], nil
			case *List, *Dict:
				return x == args[0], nil
			}
			return false, nil
		},
		"in": func(r *renderer, v Value, args []Value, _ *Dict) (bool, error) {
			if len(args) != 1 {
				return false, typeErr("in takes one argument")
			}
			return r.contains(args[0], v)
		},
		"filter": func(r *renderer, v Value, _ []Value, _ *Dict) (bool, error) {
			s, ok := v.(string)
			_, known := filters[s]
			return ok && known, nil
		},
		"test": func(r *renderer, v Value, _ []Value, _ *Dict) (bool, error) {
			s, ok := v.(string)
			_, known := tests[s]
			return ok && known, nil
		},
	}
	for _, n := range [][]string{{"==", "eq", "equalto"}, {"!=", "ne"}, {"<", "lt", "lessthan"}, {"<=", "le"}, {">", "gt", "greaterthan"}, {">=", "ge"}} {
		for _, name := range n {
			tests[name] = cmp(n[0])
		}
	}
}

func (r *renderer) applyTest(t *testExpr, sc *scope) (Value, error) {
	fn, ok := tests[t.name]
	if !ok {
		return nil, &RenderError{Kind: "TemplateAssertionError", Msg: "No test named '" + t.name + "'."}
	}
	v, err := r.eval(t.node, sc)
	if err != nil {
		return nil, err
	}
	args, kw, err := r.evalArgs(t.args, t.kwargs, sc)
	if err != nil {
		return nil, err
	}
	res, err := fn(r, v, args, kw)
	return res, err
}

var _ = utf8.RuneLen
