package jinja

import (
	"math"
	"strings"
	"unicode/utf8"
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

// getattr is the sandbox's getattr (obj.attr): a Python attribute (a
// method: methods.go) first, then obj[attr]; else undefined. A method
// that mutates is unsafe: an undefined whose use is a SecurityError.
func getattr(obj Value, attr string) (Value, error) {
	switch o := obj.(type) {
	case Undefined:
		return nil, o.err()
	case *Namespace:
		if v, ok := o.attrs.Get(attr); ok {
			return v, nil
		}
		return noAttr(obj, attr), nil
	case *loopObj:
		return o.attr(attr), nil
	}
	if m, ok := method(obj, attr); ok {
		return m, nil
	}
	if u, ok := unsafeMethod(obj, attr); ok {
		return u, nil
	}
	if v, ok := item(obj, attr); ok {
		return v, nil
	}
	return noAttr(obj, attr), nil
}

// getitem is the sandbox's getitem (obj[key]): obj[key] first, then for
// a string key the attribute; else undefined.
func getitem(obj Value, key Value) (Value, error) {
	if u, ok := obj.(Undefined); ok {
		return nil, u.err()
	}
	if v, ok := item(obj, key); ok {
		return v, nil
	}
	if s, ok := key.(string); ok {
		switch o := obj.(type) {
		case *Namespace, *loopObj:
			return getattr(o, s)
		}
		if m, ok := method(obj, s); ok {
			return m, nil
		}
		if u, ok := unsafeMethod(obj, s); ok {
			return u, nil
		}
	}
	return noItem(obj, key), nil
}

// item is Python's obj[key] where it succeeds.
func item(obj Value, key Value) (Value, bool) {
	switch o := obj.(type) {
	case *Dict:
		return o.Get(key)
	case *List:
		i, ok := indexOf(key)
		if !ok {
			return nil, false
		}
		if i < 0 {
			i += int64(len(o.Items))
		}
		if i < 0 || i >= int64(len(o.Items)) {
			return nil, false
		}
		return o.Items[i], true
	case string:
		i, ok := indexOf(key)
		if !ok {
			return nil, false
		}
		if isASCII(o) {
			n := int64(len(o))
			if i < 0 {
				i += n
			}
			if i < 0 || i >= n {
				return nil, false
			}
			return o[i : i+1], true
		}
		rs := []rune(o)
		n := int64(len(rs))
		if i < 0 {
			i += n
		}
		if i < 0 || i >= n {
			return nil, false
		}
		return string(rs[i]), true
	}
	return nil, false
}

func indexOf(k Value) (int64, bool) {
	switch k := k.(type) {
	case int64:
		return k, true
	case bool:
		if k {
			return 1, true
		}
		return 0, true
	}
	return 0, false
}

// slice is Python's obj[start:stop:step] for lists, tuples and strings.
func slice(obj Value, start, stop, step Value) (Value, error) {
	if u, ok := obj.(Undefined); ok {
		return nil, u.err()
	}
	var n int
	var rs []rune
	switch o := obj.(type) {
	case *List:
		n = len(o.Items)
	case string:
		if isASCII(o) {
			n = len(o)
		} else {
			rs = []rune(o)
			n = len(rs)
		}
	default:
		return noItem(obj, nil), nil
	}
	idx := func(v Value) (int64, bool, error) {
		if v == nil {
			return 0, false, nil
		}
		i, ok := indexOf(v)
		if !ok {
			return 0, false, typeErr("slice indices must be integers or None or have an __index__ method")
		}
		return i, true, nil
	}
	st := int64(1)
	if s, ok, err := idx(step); err != nil {
		return nil, err
	} else if ok {
		if s == 0 {
			return nil, valueErr("slice step cannot be zero")
		}
		st = s
	}
	lo, hasLo, err := idx(start)
	if err != nil {
		return nil, err
	}
	hi, hasHi, err := idx(stop)
	if err != nil {
		return nil, err
	}
	ln := int64(n)
	// Python's PySlice_AdjustIndices.
	adjust := func(i int64, has bool, def int64) int64 {
		if !has {
			return def
		}
		if i < 0 {
			i += ln
			if i < 0 {
				if st < 0 {
					return -1
				}
				return 0
			}
		} else if i >= ln {
			if st < 0 {
				return ln - 1
			}
			return ln
		}
		return i
	}
	var a, b int64
	if st > 0 {
		a, b = adjust(lo, hasLo, 0), adjust(hi, hasHi, ln)
	} else {
		a, b = adjust(lo, hasLo, ln-1), adjust(hi, hasHi, -1)
	}
	var picks []int
	if st > 0 {
		for i := a; i < b; i += st {
			picks = append(picks, int(i))
		}
	} else {
		for i := a; i > b; i += st {
			picks = append(picks, int(i))
		}
	}
	switch o := obj.(type) {
	case *List:
		out := make([]Value, len(picks))
		for j, i := range picks {
			out[j] = o.Items[i]
		}
		return &List{Items: out, Tuple: o.Tuple}, nil
	case string:
		if st == 1 {
			if rs == nil {
				if a >= b {
					return "", nil
				}
				return o[a:b], nil
			}
			if a >= b {
				return "", nil
			}
			return string(rs[a:b]), nil
		}
		var sb strings.Builder
		for _, i := range picks {
			if rs == nil {
				sb.WriteByte(o[i])
			} else {
				sb.WriteRune(rs[i])
			}
		}
		return sb.String(), nil
	}
	return nil, nil
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

var _ = utf8.RuneLen
