package jinja

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"reflect"
	"sort"
	"strconv"
	"strings"
	"unicode/utf8"
)

// JSON in and out, as Python's json module does it.

// FromJSON decodes JSON as Python's json.loads does: objects to *Dict
// in document order (a repeated key keeps its first position and last
// value), integers (no fraction, no exponent) to int64, other numbers to
// float64. An integer outside int64 is an error (Python's would be a big
// int).
func FromJSON(data []byte) (Value, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	v, err := decodeJSON(dec, 0)
	if err != nil {
		return nil, err
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, fmt.Errorf("jinja: JSON: data after the value")
	}
	return v, nil
}

// maxJSONDepth bounds FromJSON's nesting.
const maxJSONDepth = 1000

func decodeJSON(dec *json.Decoder, depth int) (Value, error) {
	if depth > maxJSONDepth {
		return nil, fmt.Errorf("jinja: JSON nested deeper than %d", maxJSONDepth)
	}
	t, err := dec.Token()
	if err != nil {
		return nil, fmt.Errorf("jinja: JSON: %w", err)
	}
	switch t := t.(type) {
	case json.Delim:
		switch t {
		case '[':
			l := &List{Items: []Value{}}
			for dec.More() {
				v, err := decodeJSON(dec, depth+1)
				if err != nil {
					return nil, err
				}
				l.Items = append(l.Items, v)
			}
			_, err := dec.Token()
			return l, err
		case '{':
			d := NewDict(4)
			for dec.More() {
				kt, err := dec.Token()
				if err != nil {
					return nil, fmt.Errorf("jinja: JSON: %w", err)
				}
				v, err := decodeJSON(dec, depth+1)
				if err != nil {
					return nil, err
				}
				d.Set(kt.(string), v)
			}
			_, err := dec.Token()
			return d, err
		}
	case json.Number:
		return numberValue(string(t))
	case string, bool, nil:
		return t, nil
	}
	return nil, fmt.Errorf("jinja: JSON: unexpected %v", t)
}

func numberValue(s string) (Value, error) {
	if !strings.ContainsAny(s, ".eE") {
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			return nil, fmt.Errorf("jinja: JSON integer %s outside int64", s)
		}
		return n, nil
	}
	f, err := strconv.ParseFloat(s, 64)
	if err != nil && !math.IsInf(f, 0) {
		return nil, fmt.Errorf("jinja: JSON number %s: %w", s, err)
	}
	return f, nil
}

// ValueOf converts a Go value to a template value: Values as they are;
// json.Number as FromJSON reads it; other ints and floats, []any, and
// map[string]any (keys sorted, Go maps having no order: use FromJSON to
// keep a document's); anything else through reflection on slices and
// string-keyed maps, or its fmt %v string.
func ValueOf(v any) Value {
	switch x := v.(type) {
	case nil, bool, int64, float64, string, *List, *Dict, Undefined, *Namespace, *Func, *macro, *iterVal:
		return x
	case int:
		return int64(x)
	case int32:
		return int64(x)
	case uint32:
		return int64(x)
	case float32:
		return float64(x)
	case json.Number:
		n, err := numberValue(string(x))
		if err != nil {
			return string(x)
		}
		return n
	case []any:
		l := &List{Items: make([]Value, len(x))}
		for i, it := range x {
			l.Items[i] = ValueOf(it)
		}
		return l
	case []string:
		l := &List{Items: make([]Value, len(x))}
		for i, it := range x {
			l.Items[i] = it
		}
		return l
	case map[string]any:
		keys := make([]string, 0, len(x))
		for k := range x {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		d := NewDict(len(x))
		for _, k := range keys {
			d.Set(k, ValueOf(x[k]))
		}
		return d
	}
	rv := reflect.ValueOf(v)
	switch rv.Kind() {
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return rv.Int()
	case reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uint:
		return int64(rv.Uint())
	case reflect.Float32, reflect.Float64:
		return rv.Float()
	case reflect.String:
		return rv.String()
	case reflect.Bool:
		return rv.Bool()
	case reflect.Slice, reflect.Array:
		l := &List{Items: make([]Value, rv.Len())}
		for i := range l.Items {
			l.Items[i] = ValueOf(rv.Index(i).Interface())
		}
		return l
	case reflect.Map:
		if rv.Type().Key().Kind() == reflect.String {
			m := make(map[string]any, rv.Len())
			for it := rv.MapRange(); it.Next(); {
				m[it.Key().String()] = it.Value().Interface()
			}
			return ValueOf(m)
		}
	case reflect.Pointer:
		if rv.IsNil() {
			return nil
		}
		return ValueOf(rv.Elem().Interface())
	}
	return fmt.Sprintf("%v", v)
}

// fToJSON is transformers' tojson filter: json.dumps(x,
// ensure_ascii=False, indent=indent, separators=separators,
// sort_keys=sort_keys) (huggingface/transformers:
// src/transformers/utils/chat_template_utils.py, _compile_jinja_template).
func fToJSON(r *renderer, v Value, args []Value, kw *Dict) (Value, error) {
	a, _, err := argsOf("tojson", args, kw, "ensure_ascii", "indent", "separators", "sort_keys")
	if err != nil {
		return nil, err
	}
	e := &jsonEnc{r: r, ascii: truthy(a[0]), sortKeys: truthy(a[3]), item: ", ", key: ": "}
	switch ind := a[1].(type) {
	case nil:
	case string:
		e.indent, e.indented = ind, true
	case bool, int64:
		n := toInt(ind)
		e.indent, e.indented = strings.Repeat(" ", int(max(min(n, 1<<10), 0))), true
	default:
		return nil, typeErr("indent must be an int or a str")
	}
	if e.indented {
		e.item = ","
	}
	if a[2] != nil {
		sep, ok := a[2].(*List)
		if !ok || len(sep.Items) != 2 {
			return nil, valueErr("separators must be an (item_separator, key_separator) pair")
		}
		e.item, e.key = toStr(sep.Items[0]), toStr(sep.Items[1])
	}
	if err := e.encode(v, 0); err != nil {
		return nil, err
	}
	out := e.b.String()
	return out, r.charge(len(out))
}

type jsonEnc struct {
	r         *renderer
	b         strings.Builder
	ascii     bool
	sortKeys  bool
	indent    string
	indented  bool
	item, key string
}

func (e *jsonEnc) newline(depth int) {
	if e.indented {
		e.b.WriteByte('\n')
		for i := 0; i < depth; i++ {
			e.b.WriteString(e.indent)
		}
	}
}

func (e *jsonEnc) encode(v Value, depth int) error {
	if depth > maxReprDepth {
		return valueErr("Circular reference detected")
	}
	if e.b.Len() > MaxOutput {
		return &limitError{what: "a string over MaxOutput bytes"}
	}
	if err := e.r.step(1); err != nil {
		return err
	}
	switch x := v.(type) {
	case nil:
		e.b.WriteString("null")
	case bool:
		if x {
			e.b.WriteString("true")
		} else {
			e.b.WriteString("false")
		}
	case int64:
		e.b.WriteString(strconv.FormatInt(x, 10))
	case float64:
		e.b.WriteString(jsonFloat(x))
	case string:
		e.str(x)
	case *List:
		if len(x.Items) == 0 {
			e.b.WriteString("[]")
			return nil
		}
		e.b.WriteByte('[')
		for i, it := range x.Items {
			if i > 0 {
				e.b.WriteString(e.item)
			}
			e.newline(depth + 1)
			if err := e.encode(it, depth+1); err != nil {
				return err
			}
		}
		e.newline(depth)
		e.b.WriteByte(']')
	case *Dict:
		if x.Len() == 0 {
			e.b.WriteString("{}")
			return nil
		}
		order := make([]int, x.Len())
		for i := range order {
			order[i] = i
		}
		if e.sortKeys {
			var err error
			sort.SliceStable(order, func(i, j int) bool {
				lt, er := pyLess(x.keys[order[i]], x.keys[order[j]], "<")
				if er != nil && err == nil {
					err = er
				}
				return lt
			})
			if err != nil {
				return err
			}
		}
		e.b.WriteByte('{')
		for n, i := range order {
			if n > 0 {
				e.b.WriteString(e.item)
			}
			e.newline(depth + 1)
			switch k := x.keys[i].(type) {
			case string:
				e.str(k)
			case nil:
				e.str("null")
			case bool:
				if k {
					e.str("true")
				} else {
					e.str("false")
				}
			case int64:
				e.str(strconv.FormatInt(k, 10))
			case float64:
				e.str(jsonFloat(k))
			default:
				return typeErr("keys must be str, int, float, bool or None, not %s", typeName(k))
			}
			e.b.WriteString(e.key)
			if err := e.encode(x.vals[i], depth+1); err != nil {
				return err
			}
		}
		e.newline(depth)
		e.b.WriteByte('}')
	default:
		cls := typeName(v)
		if _, ok := v.(*iterVal); ok {
			cls = "generator"
		}
		return typeErr("Object of type %s is not JSON serializable", cls)
	}
	return nil
}

// jsonFloat is json.dumps of a float: float.__repr__, and Infinity,
// -Infinity, NaN (allow_nan).
func jsonFloat(f float64) string {
	switch {
	case math.IsInf(f, 1):
		return "Infinity"
	case math.IsInf(f, -1):
		return "-Infinity"
	case math.IsNaN(f):
		return "NaN"
	}
	return formatFloat(f)
}

// str is json's string encoder: \" \\ \n \r \t \b \f, other controls
// as \u00XX; with ensure_ascii every non-ASCII code point as \uXXXX
// (astral ones as a surrogate pair).
func (e *jsonEnc) str(s string) {
	b := &e.b
	b.WriteByte('"')
	for _, r := range s {
		switch r {
		case '"':
			b.WriteString(`\"`)
		case '\\':
			b.WriteString(`\\`)
		case '\n':
			b.WriteString(`\n`)
		case '\r':
			b.WriteString(`\r`)
		case '\t':
			b.WriteString(`\t`)
		case '\b':
			b.WriteString(`\b`)
		case '\f':
			b.WriteString(`\f`)
		default:
			switch {
			case r < 0x20:
				fmt.Fprintf(b, `\u%04x`, r)
			case r < utf8.RuneSelf || !e.ascii:
				b.WriteRune(r)
			case r > 0xffff:
				r -= 0x10000
				fmt.Fprintf(b, `\u%04x\u%04x`, 0xd800+(r>>10), 0xdc00+(r&0x3ff))
			default:
				fmt.Fprintf(b, `\u%04x`, r)
			}
		}
	}
	b.WriteByte('"')
}
