package jinja

import (
	"math"
	"strings"
)

// Python's operators over Values, with the sandbox's attribute rules.

// objRepr is jinja2's object_type_repr, in undefined hints.
func objRepr(v Value) string {
	if v == nil {
		return "None"
	}
	return typeName(v) + " object"
}

func noAttr(obj Value, name string) Undefined {
	return Undefined{hint: "'" + objRepr(obj) + "' has no attribute '" + name + "'"}
}

func noItem(obj Value, key Value) Undefined {
	if s, ok := key.(string); ok {
		return noAttr(obj, s)
	}
	return Undefined{hint: "'" + objRepr(obj) + "' has no element " + reprValue(key)}
}

func toInt(v Value) int64 {
	switch v := v.(type) {
	case bool:
		if v {
			return 1
		}
		return 0
	case int64:
		return v
	}
	return 0
}

// num is v as a number: isInt for bool and int, ok false for other
// types.
func num(v Value) (i int64, f float64, isInt, ok bool) {
	switch v := v.(type) {
	case bool:
		return toInt(v), float64(toInt(v)), true, true
	case int64:
		return v, float64(v), true, true
	case float64:
		return 0, v, false, true
	}
	return 0, 0, false, false
}

func neg(v Value) (Value, error) {
	switch v := v.(type) {
	case bool:
		return -toInt(v), nil
	case int64:
		if v == math.MinInt64 {
			return nil, overflow()
		}
		return -v, nil
	case float64:
		return -v, nil
	case Undefined:
		return nil, v.err()
	}
	return nil, typeErr("bad operand type for unary -: '%s'", typeName(v))
}

func overflow() error {
	return &RenderError{Kind: "OverflowError", Msg: "integer outside the 64-bit range"}
}

func unsupported(op string, l, r Value) error {
	return typeErr("unsupported operand type(s) for %s: '%s' and '%s'", op, typeName(l), typeName(r))
}

func (r *renderer) binop(op string, l, rv Value) (Value, error) {
	if op == "~" {
		s := toStr(l) + toStr(rv)
		return s, r.charge(len(s))
	}
	if u, ok := l.(Undefined); ok {
		return nil, u.err()
	}
	if u, ok := rv.(Undefined); ok {
		return nil, u.err()
	}
	li, lf, lInt, lNum := num(l)
	ri, rf, rInt, rNum := num(rv)
	if lNum && rNum {
		return arith(op, li, lf, lInt, ri, rf, rInt)
	}
	switch op {
	case "+":
		switch a := l.(type) {
		case string:
			if b, ok := rv.(string); ok {
				s := a + b
				return s, r.charge(len(s))
			}
			return nil, typeErr("can only concatenate str (not \"%s\") to str", typeName(rv))
		case *List:
			if b, ok := rv.(*List); ok && a.Tuple == b.Tuple {
				if err := r.charge(8 * (len(a.Items) + len(b.Items))); err != nil {
					return nil, err
				}
				out := make([]Value, 0, len(a.Items)+len(b.Items))
				out = append(append(out, a.Items...), b.Items...)
				return &List{Items: out, Tuple: a.Tuple}, nil
			}
			if a.Tuple {
				return nil, typeErr("can only concatenate tuple (not \"%s\") to tuple", typeName(rv))
			}
			return nil, typeErr("can only concatenate list (not \"%s\") to list", typeName(rv))
		}
	case "*":
		seq, n := l, rv
		if lInt {
			seq, n = rv, l
		}
		k, _, kInt, _ := num(n)
		if !kInt {
			break
		}
		if k < 0 {
			k = 0
		}
		switch s := seq.(type) {
		case string:
			if k > 0 && int64(len(s)) > int64(MaxOutput)/k {
				return nil, &limitError{what: "a string over MaxOutput bytes"}
			}
			out := strings.Repeat(s, int(k))
			return out, r.charge(len(out))
		case *List:
			if k > 0 && int64(len(s.Items)) > int64(MaxOutput)/k/8 {
				return nil, &limitError{what: "a list over MaxOutput"}
			}
			out := make([]Value, 0, len(s.Items)*int(k))
			for j := int64(0); j < k; j++ {
				out = append(out, s.Items...)
			}
			return &List{Items: out, Tuple: s.Tuple}, r.charge(8 * len(out))
		}
	case "%":
		if s, ok := l.(string); ok {
			out, err := printf(s, rv)
			if err != nil {
				return nil, err
			}
			return out, r.charge(len(out))
		}
	}
	return nil, unsupported(pyOp(op), l, rv)
}

func pyOp(op string) string {
	if op == "**" {
		return "** or pow()"
	}
	return op
}

func arith(op string, li int64, lf float64, lInt bool, ri int64, rf float64, rInt bool) (Value, error) {
	both := lInt && rInt
	switch op {
	case "+":
		if both {
			s := li + ri
			if (s > li) != (ri > 0) {
				return nil, overflow()
			}
			return s, nil
		}
		return lf + rf, nil
	case "-":
		if both {
			s := li - ri
			if (s < li) != (ri > 0) {
				return nil, overflow()
			}
			return s, nil
		}
		return lf - rf, nil
	case "*":
		if both {
			if li == 0 || ri == 0 {
				return int64(0), nil
			}
			p := li * ri
			if p/ri != li || (li == -1 && ri == math.MinInt64) || (ri == -1 && li == math.MinInt64) {
				return nil, overflow()
			}
			return p, nil
		}
		return lf * rf, nil
	case "/":
		if rf == 0 {
			return nil, &RenderError{Kind: "ZeroDivisionError", Msg: "division by zero"}
		}
		return lf / rf, nil
	case "//":
		if both {
			if ri == 0 {
				return nil, &RenderError{Kind: "ZeroDivisionError", Msg: "integer division or modulo by zero"}
			}
			if li == math.MinInt64 && ri == -1 {
				return nil, overflow()
			}
			q := li / ri
			if (li%ri != 0) && ((li < 0) != (ri < 0)) {
				q--
			}
			return q, nil
		}
		if rf == 0 {
			return nil, &RenderError{Kind: "ZeroDivisionError", Msg: "float floor division by zero"}
		}
		return math.Floor(lf / rf), nil
	case "%":
		if both {
			if ri == 0 {
				return nil, &RenderError{Kind: "ZeroDivisionError", Msg: "integer division or modulo by zero"}
			}
			if ri == -1 {
				return int64(0), nil
			}
			m := li % ri
			if m != 0 && ((m < 0) != (ri < 0)) {
				m += ri
			}
			return m, nil
		}
		if rf == 0 {
			return nil, &RenderError{Kind: "ZeroDivisionError", Msg: "float modulo"}
		}
		m := math.Mod(lf, rf)
		if m != 0 && ((m < 0) != (rf < 0)) {
			m += rf
		}
		return m, nil
	case "**":
		if both && ri >= 0 {
			res := int64(1)
			b := li
			e := ri
			for e > 0 {
				if e&1 == 1 {
					n := res * b
					if b != 0 && n/b != res {
						return nil, overflow()
					}
					res = n
				}
				e >>= 1
				if e > 0 {
					nb := b * b
					if b != 0 && nb/b != b {
						return nil, overflow()
					}
					b = nb
				}
			}
			return res, nil
		}
		if lf == 0 && rf < 0 {
			return nil, &RenderError{Kind: "ZeroDivisionError", Msg: "0.0 cannot be raised to a negative power"}
		}
		return math.Pow(lf, rf), nil
	}
	return nil, typeErr("bad operator %s", op)
}

// pyEqual is Python's ==.
func pyEqual(a, b Value) bool {
	ai, af, aInt, aNum := num(a)
	bi, bf, bInt, bNum := num(b)
	if aNum && bNum {
		if aInt && bInt {
			return ai == bi
		}
		return af == bf
	}
	switch x := a.(type) {
	case nil:
		return b == nil
	case string:
		y, ok := b.(string)
		return ok && x == y
	case *List:
		y, ok := b.(*List)
		if !ok || x.Tuple != y.Tuple || len(x.Items) != len(y.Items) {
			return false
		}
		for i := range x.Items {
			if !pyEqual(x.Items[i], y.Items[i]) {
				return false
			}
		}
		return true
	case *Dict:
		y, ok := b.(*Dict)
		if !ok || x.Len() != y.Len() {
			return false
		}
		for i, k := range x.keys {
			v, ok := y.Get(k)
			if !ok || !pyEqual(x.vals[i], v) {
				return false
			}
		}
		return true
	case Undefined:
		_, ok := b.(Undefined)
		return ok
	}
	return a == b
}

// pyLess is Python's a < b; an error for types that do not order.
func pyLess(a, b Value, op string) (bool, error) {
	if u, ok := a.(Undefined); ok {
		return false, u.err()
	}
	if u, ok := b.(Undefined); ok {
		return false, u.err()
	}
	ai, af, aInt, aNum := num(a)
	bi, bf, bInt, bNum := num(b)
	if aNum && bNum {
		if aInt && bInt {
			return ai < bi, nil
		}
		return af < bf, nil
	}
	switch x := a.(type) {
	case string:
		if y, ok := b.(string); ok {
			return x < y, nil
		}
	case *List:
		if y, ok := b.(*List); ok && x.Tuple == y.Tuple {
			for i := 0; i < len(x.Items) && i < len(y.Items); i++ {
				if pyEqual(x.Items[i], y.Items[i]) {
					continue
				}
				return pyLess(x.Items[i], y.Items[i], op)
			}
			return len(x.Items) < len(y.Items), nil
		}
	}
	return false, typeErr("'%s' not supported between instances of '%s' and '%s'", op, typeName(a), typeName(b))
}

func (r *renderer) compare(op string, l, rv Value) (bool, error) {
	switch op {
	case "==":
		return pyEqual(l, rv), nil
	case "!=":
		return !pyEqual(l, rv), nil
	case "<":
		return pyLess(l, rv, op)
	case ">":
		return pyLess(rv, l, op)
	case "<=":
		lt, err := pyLess(l, rv, op)
		return lt || (err == nil && pyEqual(l, rv)), err
	case ">=":
		lt, err := pyLess(rv, l, op)
		return lt || (err == nil && pyEqual(l, rv)), err
	case "in", "notin":
		in, err := r.contains(rv, l)
		if op == "notin" {
			return !in, err
		}
		return in, err
	}
	return false, typeErr("bad comparison %s", op)
}

// contains is Python's x in container.
func (r *renderer) contains(container, x Value) (bool, error) {
	switch c := container.(type) {
	case string:
		s, ok := x.(string)
		if !ok {
			if u, isU := x.(Undefined); isU {
				return false, u.err()
			}
			return false, typeErr("'in <string>' requires string as left operand, not %s", typeName(x))
		}
		return strings.Contains(c, s), nil
	case *List:
		if err := r.step(len(c.Items)); err != nil {
			return false, err
		}
		for _, it := range c.Items {
			if pyEqual(it, x) {
				return true, nil
			}
		}
		return false, nil
	case *Dict:
		if _, ok := hashKey(x); !ok {
			return false, typeErr("unhashable type: '%s'", typeName(x))
		}
		_, ok := c.Get(x)
		return ok, nil
	case Undefined:
		return false, nil
	}
	return false, typeErr("argument of type '%s' is not iterable", typeName(container))
}

// printf is Python's str % args for the conversions templates use: %s
// %r %d %i %f %%, with an optional width and precision.
func printf(format string, args Value) (string, error) {
	var list []Value
	if l, ok := args.(*List); ok && l.Tuple {
		list = l.Items
	} else {
		list = []Value{args}
	}
	var b strings.Builder
	ai := 0
	for i := 0; i < len(format); i++ {
		c := format[i]
		if c != '%' {
			b.WriteByte(c)
			continue
		}
		i++
		if i >= len(format) {
			return "", valueErr("incomplete format")
		}
		if format[i] == '%' {
			b.WriteByte('%')
			continue
		}
		j := i
		for j < len(format) && strings.IndexByte("-+ 0#", format[j]) >= 0 {
			j++
		}
		for j < len(format) && (format[j] >= '0' && format[j] <= '9' || format[j] == '.') {
			j++
		}
		if j >= len(format) {
			return "", valueErr("incomplete format")
		}
		if j > i {
			return "", valueErr("format flags, width and precision are not supported")
		}
		if ai >= len(list) {
			return "", typeErr("not enough arguments for format string")
		}
		a := list[ai]
		ai++
		switch format[j] {
		case 's':
			b.WriteString(toStr(a))
		case 'r':
			b.WriteString(reprValue(a))
		case 'd', 'i':
			ii, ff, isInt, ok := num(a)
			if !ok {
				return "", typeErr("%%d format: a real number is required, not %s", typeName(a))
			}
			if !isInt {
				ii = int64(ff)
			}
			b.WriteString(toStr(ii))
		default:
			return "", valueErr("unsupported format character '%c'", format[j])
		}
		i = j
	}
	if ai < len(list) {
		return "", typeErr("not all arguments converted during string formatting")
	}
	return b.String(), nil
}
