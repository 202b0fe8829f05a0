package jinja

import ()

// The Jinja2 tests (`x is defined`, `is string`, ...) the chat templates use.

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
