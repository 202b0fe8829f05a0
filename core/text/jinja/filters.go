package jinja

import (
	"sort"
	"strconv"
	"strings"
	"unicode"
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
