package jinja

import (
	"strconv"
	"strings"
	"time"
)

// globals are the environment's globals: jinja2's range (the sandbox's
// safe_range), namespace, dict, joiner, and transformers'
// raise_exception. strftime_now reads a clock, so the caller supplies it
// (Strftime) among the render's vars.
var globals map[string]Value

func init() {
	globals = map[string]Value{
		"range": &Func{Name: "range", Call: func(r *renderer, args []Value, kw *Dict) (Value, error) {
			if kw != nil {
				return nil, typeErr("range() takes no keyword arguments")
			}
			var ns [3]int64
			for i, a := range args {
				if i >= 3 {
					return nil, typeErr("range expected at most 3 arguments, got %d", len(args))
				}
				n, _, isInt, _ := num(a)
				if !isInt {
					return nil, typeErr("'%s' object cannot be interpreted as an integer", typeName(a))
				}
				ns[i] = n
			}
			start, stop, step := int64(0), int64(0), int64(1)
			switch len(args) {
			case 0:
				return nil, typeErr("range expected at least 1 argument, got 0")
			case 1:
				stop = ns[0]
			case 2:
				start, stop = ns[0], ns[1]
			case 3:
				start, stop, step = ns[0], ns[1], ns[2]
			}
			if step == 0 {
				return nil, valueErr("range() arg 3 must not be zero")
			}
			var n int64
			if step > 0 && stop > start {
				n = (stop - start + step - 1) / step
			} else if step < 0 && stop < start {
				n = (start - stop - step - 1) / -step
			}
			if n > maxRange {
				return nil, &RenderError{Kind: "OverflowError", Msg: "Range too big. The sandbox blocks ranges larger than MAX_RANGE (100000)."}
			}
			if err := r.step(int(n)); err != nil {
				return nil, err
			}
			out := make([]Value, n)
			for i := range out {
				out[i] = start + int64(i)*step
			}
			return &List{Items: out}, nil
		}},
		"namespace": &Func{Name: "namespace", Call: func(r *renderer, args []Value, kw *Dict) (Value, error) {
			d, err := dictFrom(args, kw)
			if err != nil {
				return nil, err
			}
			return &Namespace{attrs: d}, nil
		}},
		"dict": &Func{Name: "dict", Call: func(r *renderer, args []Value, kw *Dict) (Value, error) {
			return dictFrom(args, kw)
		}},
		"raise_exception": &Func{Name: "raise_exception", Call: func(r *renderer, args []Value, kw *Dict) (Value, error) {
			if len(args) != 1 || kw != nil {
				return nil, typeErr("raise_exception() takes 1 positional argument")
			}
			return nil, &Raised{Message: toStr(args[0])}
		}},
		"joiner": &Func{Name: "joiner", Call: func(r *renderer, args []Value, kw *Dict) (Value, error) {
			a, has, err := argsOf("joiner", args, kw, "sep")
			if err != nil {
				return nil, err
			}
			sep := ", "
			if has[0] {
				sep = toStr(a[0])
			}
			used := false
			return &Func{Name: "joiner", Call: func(r *renderer, args []Value, kw *Dict) (Value, error) {
				if !used {
					used = true
					return "", nil
				}
				return sep, nil
			}}, nil
		}},
	}
}

// dictFrom is dict(mapping_or_pairs, **kw).
func dictFrom(args []Value, kw *Dict) (*Dict, error) {
	d := NewDict(0)
	if len(args) > 1 {
		return nil, typeErr("dict expected at most 1 argument, got %d", len(args))
	}
	if len(args) == 1 {
		switch a := args[0].(type) {
		case *Dict:
			for i, k := range a.keys {
				d.Set(k, a.vals[i])
			}
		case *List:
			for _, it := range a.Items {
				p, ok := it.(*List)
				if !ok || len(p.Items) != 2 {
					return nil, valueErr("dictionary update sequence element has wrong length")
				}
				if _, ok := hashKey(p.Items[0]); !ok {
					return nil, typeErr("unhashable type: '%s'", typeName(p.Items[0]))
				}
				d.Set(p.Items[0], p.Items[1])
			}
		default:
			return nil, typeErr("'%s' object is not iterable", typeName(args[0]))
		}
	}
	if kw != nil {
		for i, k := range kw.keys {
			d.Set(k, kw.vals[i])
		}
	}
	return d, nil
}

// Strftime is transformers' strftime_now for a clock read once by the
// caller: strftime_now(format) formats now with Python's (C's) strftime
// directives %a %A %b %B %d %H %I %j %m %M %p %S %y %Y %Z %z %e %%.
func Strftime(now time.Time) *Func {
	return &Func{Name: "strftime_now", Call: func(r *renderer, args []Value, kw *Dict) (Value, error) {
		if len(args) != 1 || kw != nil {
			return nil, typeErr("strftime_now() takes 1 positional argument")
		}
		f, ok := args[0].(string)
		if !ok {
			return nil, typeErr("strftime() argument 1 must be str, not %s", typeName(args[0]))
		}
		return strftime(now, f), nil
	}}
}

func strftime(t time.Time, f string) string {
	var b strings.Builder
	pad := func(n, w int) string {
		s := strconv.Itoa(n)
		for len(s) < w {
			s = "0" + s
		}
		return s
	}
	for i := 0; i < len(f); i++ {
		if f[i] != '%' || i+1 >= len(f) {
			b.WriteByte(f[i])
			continue
		}
		i++
		switch f[i] {
		case 'a':
			b.WriteString(t.Weekday().String()[:3])
		case 'A':
			b.WriteString(t.Weekday().String())
		case 'b', 'h':
			b.WriteString(t.Month().String()[:3])
		case 'B':
			b.WriteString(t.Month().String())
		case 'd':
			b.WriteString(pad(t.Day(), 2))
		case 'e':
			s := strconv.Itoa(t.Day())
			if len(s) < 2 {
				s = " " + s
			}
			b.WriteString(s)
		case 'H':
			b.WriteString(pad(t.Hour(), 2))
		case 'I':
			h := t.Hour() % 12
			if h == 0 {
				h = 12
			}
			b.WriteString(pad(h, 2))
		case 'j':
			b.WriteString(pad(t.YearDay(), 3))
		case 'm':
			b.WriteString(pad(int(t.Month()), 2))
		case 'M':
			b.WriteString(pad(t.Minute(), 2))
		case 'p':
			if t.Hour() < 12 {
				b.WriteString("AM")
			} else {
				b.WriteString("PM")
			}
		case 'S':
			b.WriteString(pad(t.Second(), 2))
		case 'y':
			b.WriteString(pad(t.Year()%100, 2))
		case 'Y':
			b.WriteString(strconv.Itoa(t.Year()))
		case 'Z':
			z, _ := t.Zone()
			b.WriteString(z)
		case 'z':
			b.WriteString(t.Format("-0700"))
		case '%':
			b.WriteByte('%')
		default:
			b.WriteByte('%')
			b.WriteByte(f[i])
		}
	}
	return b.String()
}
