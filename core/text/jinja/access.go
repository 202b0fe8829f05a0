package jinja

import (
	"strings"
)

// Attribute, item and slice access, as Python and Jinja2's sandbox resolve them.

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
