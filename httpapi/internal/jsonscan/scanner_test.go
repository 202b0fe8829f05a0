package jsonscan

import (
	"errors"
	"math/rand/v2"
	"strconv"
	"strings"
	"testing"
)

// record is a tiny request read field by field, the way a caller of the
// package drives the scanner.
type record struct {
	name   string
	id     uint64
	rank   uint32
	weight float64
	on     bool
	hashes []uint64
	tokens []uint32
	pin    struct{ worker uint64 }
}

var (
	recordFields = NewFieldSet("name", "id", "rank", "weight", "on", "hashes", "tokens", "pin")
	pinFields    = NewFieldSet("worker_id")
)

func decodeRecord(s *Scanner, r *record) error {
	var seen uint64
	err := s.Object("struct Record", func(key []byte) error {
		if done, err := s.SkipUnknown(s.Field(recordFields, &seen, "", key)); done {
			return err
		}
		var err error
		switch string(key) {
		case "name":
			r.name, _, err = s.Str("name")
		case "id":
			r.id, err = s.Uint("id", 1<<64-1, "u64")
		case "rank":
			var v uint64
			v, err = s.Uint("rank", 1<<32-1, "u32")
			r.rank = uint32(v)
		case "weight":
			r.weight, err = s.Float("weight")
		case "on":
			r.on, err = s.Boolean("on")
		case "hashes":
			r.hashes, _, err = s.I64s("hashes", r.hashes[:0])
		case "tokens":
			r.tokens, _, err = s.U32s("tokens", r.tokens[:0])
		case "pin":
			var seen2 uint64
			err = s.Object("struct Pin", func(key []byte) error {
				if done, err := s.SkipUnknown(s.Field(pinFields, &seen2, "pin", key)); done {
					return err
				}
				var err error
				r.pin.worker, err = s.Uint("pin.worker_id", 1<<64-1, "u64")
				return err
			})
		}
		return err
	})
	if err != nil {
		return err
	}
	return s.End()
}

// scanErr decodes body as a record and returns its error, which must be an
// *Error when not nil.
func scanErr(t *testing.T, body string) *Error {
	t.Helper()
	var r record
	err := decodeRecord(New([]byte(body)), &r)
	if err == nil {
		return nil
	}
	var e *Error
	if !errors.As(err, &e) {
		t.Fatalf("%s: untyped error %v", body, err)
	}
	return e
}

func TestDecodeRecord(t *testing.T) {
	var r record
	body := `{ "name" : "a\"b\u00e9\ud83d\ude00", "id": 18446744073709551615, "rank": 7, "weight": -1.5e2, "on": true,
		"hashes": [-9223372036854775808, 0, 9223372036854775807], "tokens": [ 1 , 4294967295 ],
		"pin": {"worker_id": 3, "other": [1, {"x": null}]}, "unknown": {"a": [true, false, null, "s", 1.0e-3]}}`
	if err := decodeRecord(New([]byte(body)), &r); err != nil {
		t.Fatal(err)
	}
	if r.name != "a\"bé😀" || r.id != 1<<64-1 || r.rank != 7 || r.weight != -150 || !r.on || r.pin.worker != 3 {
		t.Fatalf("%+v", r)
	}
	if len(r.hashes) != 3 || int64(r.hashes[0]) != -1<<63 || r.hashes[1] != 0 || r.hashes[2] != 1<<63-1 {
		t.Fatalf("hashes %v", r.hashes)
	}
	if len(r.tokens) != 2 || r.tokens[0] != 1 || r.tokens[1] != 1<<32-1 {
		t.Fatalf("tokens %v", r.tokens)
	}
}

// TestErrorTexts: serde_json's messages and positions, and their class.
func TestErrorTexts(t *testing.T) {
	for _, c := range []struct {
		body  string
		class Class
		msg   string
	}{
		{``, Syntax, "EOF while parsing a value at line 1 column 0"},
		{`{"id":1,`, Syntax, "EOF while parsing an object at line 1 column 8"},
		{`{"id":1 x`, Syntax, "expected `,` or `}` at line 1 column 8"},
		{`{"id" 1}`, Syntax, "expected `:` at line 1 column 6"},
		{`{1:1}`, Syntax, "key must be a string at line 1 column 1"},
		{`{"id":1} x`, Syntax, "trailing characters at line 1 column 9"},
		{"{\n\"id\":nul}", Syntax, "expected value at line 2 column 5"},
		{`{"hashes":[1,2`, Syntax, "EOF while parsing a list at line 1 column 14"},
		{`{"hashes":[1 2]}`, Syntax, "expected `,` or `]` at line 1 column 13"},
		{`{"name":"a`, Syntax, "EOF while parsing a string at line 1 column 10"},
		{`{"name":"\x"}`, Syntax, "invalid escape at line 1 column 11"},
		{"{\"name\":\"\x01\"}", Syntax, "control character (\\u0000-\\u001F) found while parsing a string at line 1 column 9"},
		{`{"name":"\ud800"}`, Syntax, "lone leading surrogate in hex escape at line 1 column 15"},
		{`{"id":01}`, Syntax, "invalid number at line 1 column 7"},
		{`{"id":1.}`, Syntax, "invalid number at line 1 column 8"},
		{`{"id":1e400}`, Syntax, "number out of range at line 1 column 11"},
		{`{"x":` + strings.Repeat("[", 200) + `}`, Syntax, "recursion limit exceeded at line 1 column 134"},
		{`[]`, Data, "invalid type: sequence, expected struct Record at line 1 column 2"},
		{`{"id":"1"}`, Data, "id: invalid type: string, expected u64 at line 1 column 9"},
		{`{"id":-1}`, Data, "id: invalid value: integer `-1`, expected u64 at line 1 column 8"},
		{`{"id":18446744073709551616}`, Data, "id: invalid value: integer `18446744073709551616`, expected u64 at line 1 column 26"},
		{`{"id":1.5}`, Data, "id: invalid type: floating point `1.5`, expected u64 at line 1 column 9"},
		{`{"rank":4294967296}`, Data, "rank: invalid value: integer `4294967296`, expected u32 at line 1 column 18"},
		{`{"on":1}`, Data, "on: invalid type: number, expected a boolean at line 1 column 7"},
		{`{"name":1}`, Data, "name: invalid type: number, expected a string at line 1 column 9"},
		{`{"hashes":{}}`, Data, "hashes: invalid type: map, expected a sequence at line 1 column 12"},
		{`{"hashes":[9223372036854775808]}`, Data, "hashes: invalid value: integer `9223372036854775808`, expected i64 at line 1 column 30"},
		{`{"tokens":[1,"2"]}`, Data, "tokens: invalid type: string, expected u32 at line 1 column 16"},
		{`{"pin":{"worker_id":true}}`, Data, "pin.worker_id: invalid type: boolean, expected u64 at line 1 column 24"},
		{`{"weight":"x"}`, Data, "weight: invalid type: string, expected f64 at line 1 column 13"},
	} {
		e := scanErr(t, c.body)
		if e == nil || e.Class != c.class || e.Msg != c.msg || e.Error() != c.msg {
			t.Errorf("%s: got %#v, want class %d %q", c.body, e, c.class, c.msg)
		}
	}
}

// TestDuplicateField: a known field given twice is a data error positioned
// after the repeated key (and the whitespace after it), path included; an
// unknown field may repeat.
func TestDuplicateField(t *testing.T) {
	for body, want := range map[string]string{
		`{"id":1,"id":2}`:                         "duplicate field `id` at line 1 column 12",
		`{"id":1,"name":"a","name" :"b"}`:         "duplicate field `name` at line 1 column 26",
		`{"pin":{"worker_id":1,"worker_id":1}}`:   "pin: duplicate field `worker_id` at line 1 column 33",
		`{"hashes":[],"tokens":[],"hashes":null}`: "duplicate field `hashes` at line 1 column 33",
	} {
		if e := scanErr(t, body); e == nil || e.Class != Data || e.Msg != want {
			t.Errorf("%s: got %v, want %q", body, e, want)
		}
	}
	if e := scanErr(t, `{"x":1,"x":[2],"y":{},"y":{}}`); e != nil {
		t.Errorf("repeated unknown fields: %v", e)
	}
}

// TestExactKeys: keys match byte for byte, case included; an escaped key
// matches its unescaped name.
func TestExactKeys(t *testing.T) {
	var r record
	if err := decodeRecord(New([]byte(`{"ID":"x","Name":1,"id ":[],"\u0069d":5}`)), &r); err != nil || r.id != 5 {
		t.Fatalf("%v %+v", err, r)
	}
}

// TestUTF8: every string must be UTF-8, values, keys and skipped values
// alike, escaped or not.
func TestUTF8(t *testing.T) {
	for body, col := range map[string]string{
		"{\"name\":\"\xff\"}":              "11",
		"{\"x\xff\":1}":                    "5",
		"{\"x\":[{\"y\":\"\xc3\"}]}":       "14",
		"{\"name\":\"\\n\xed\xa0\x80\"}":   "15",
		"{\"unknown\":\"a\\t\xc0\xaf\"}":   "18",
		"{\"name\":\"ok\",\"x\":\"\xf8\"}": "20",
	} {
		want := "invalid unicode code point at line 1 column " + col
		if e := scanErr(t, body); e == nil || e.Class != Syntax || e.Msg != want {
			t.Errorf("%q: got %v, want %q", body, e, want)
		}
	}
}

// TestNegativeZeroIsAFloat: serde_json reads the literal -0 as the float
// -0.0 (de.rs parse_number: "Convert into a float if we underflow, or on
// `-0`"), so -0 is a data error in every integer field, on both array
// paths (fast and generic) and in scalars; a float takes it. A leading
// zero is a syntax error, with or without the sign.
func TestNegativeZeroIsAFloat(t *testing.T) {
	const float = "invalid type: floating point `-0.0`, expected "
	for body, want := range map[string]string{
		`{"hashes":[-0]}`:                      "hashes: " + float + "i64",
		`{"hashes":[1, -0 ,2]}`:                "hashes: " + float + "i64",
		`{"hashes":[-0,99999999999999999999]}`: "hashes: " + float + "i64",
		`{"tokens":[1,-0]}`:                    "tokens: " + float + "u32",
		`{"id":-0}`:                            "id: " + float + "u64",
		`{"pin":{"worker_id":-0}}`:             "pin.worker_id: " + float + "u64",
	} {
		if e := scanErr(t, body); e == nil || e.Class != Data || !strings.HasPrefix(e.Msg, want+" at ") {
			t.Errorf("%s: got %v, want a data error %q", body, e, want)
		}
	}
	var dst []uint64
	_, _, err := New([]byte(`[-0]`)).U64s("ids", dst)
	if e := (*Error)(nil); !errors.As(err, &e) || e.Class != Data || !strings.HasPrefix(e.Msg, "ids: "+float+"u64") {
		t.Errorf("U64s -0: %v", err)
	}
	for _, body := range []string{`{"hashes":[-01]}`, `{"id":-01}`, `{"tokens":[01]}`, `{"weight":-00.5}`} {
		if e := scanErr(t, body); e == nil || e.Class != Syntax || !strings.HasPrefix(e.Msg, "invalid number") {
			t.Errorf("%s: got %v, want a syntax error invalid number", body, e)
		}
	}
	var r record
	if err := decodeRecord(New([]byte(`{"weight":-0}`)), &r); err != nil {
		t.Errorf("weight -0: %v", err)
	}
}

// TestNumberOutOfRange: a number beyond f64's range is a syntax error
// whatever the target type; one that only underflows reads as 0. A skipped
// number is checked for its syntax only, as serde_json ignores a value.
func TestNumberOutOfRange(t *testing.T) {
	for _, body := range []string{`{"weight":1e400}`, `{"weight":-1.5e309}`, `{"id":1e400}`, `{"hashes":[1,1e999]}`, `{"tokens":[1e400]}`} {
		if e := scanErr(t, body); e == nil || e.Class != Syntax || !strings.HasPrefix(e.Msg, "number out of range") {
			t.Errorf("%s: got %v, want a syntax error number out of range", body, e)
		}
	}
	var r record
	if err := decodeRecord(New([]byte(`{"weight":1e-400}`)), &r); err != nil || r.weight != 0 {
		t.Errorf("underflow: %v, %v", err, r.weight)
	}
	if e := scanErr(t, `{"x":{"y":1e400}}`); e != nil {
		t.Errorf("a skipped 1e400: %v", e)
	}
	if e := scanErr(t, `{"id":1.5}`); e == nil || e.Class != Data {
		t.Errorf("id 1.5: got %v, want a data error", e)
	}
}

func TestTuple(t *testing.T) {
	pair := func(body string) error {
		s := New([]byte(body))
		return s.Tuple("offsets", 2, func() error {
			_, err := s.Uint("offsets", 1<<64-1, "usize")
			return err
		})
	}
	for body, want := range map[string]string{
		`[1,2]`:       "",
		` [ 1 , 2 ] `: "",
		`[1]`:         "offsets: invalid length 1, expected a tuple of size 2 at line 1 column 3",
		`[]`:          "offsets: invalid length 0, expected a tuple of size 2 at line 1 column 2",
		`[1,2,3]`:     "trailing characters at line 1 column 4",
		`[1 2]`:       "expected `,` or `]` at line 1 column 3",
		`[1,`:         "EOF while parsing a value at line 1 column 3",
		`[1`:          "EOF while parsing a list at line 1 column 2",
		`null`:        "offsets: invalid type: null, expected a tuple of size 2 at line 1 column 4",
		`{"a":1}`:     "offsets: invalid type: map, expected a tuple of size 2 at line 1 column 7",
		``:            "EOF while parsing a value at line 1 column 0",
	} {
		err := pair(body)
		if got := ""; err != nil {
			got = err.Error()
			if got != want {
				t.Errorf("%q: got %q, want %q", body, got, want)
			}
		} else if want != "" {
			t.Errorf("%q: accepted, want %q", body, want)
		}
	}
}

func TestMissingField(t *testing.T) {
	body := []byte("{\n\"a\":1}")
	err := MissingField(body, len(body), "b")
	if e := (*Error)(nil); !errors.As(err, &e) || e.Class != Data || e.Msg != "missing field `b` at line 2 column 6" {
		t.Fatalf("%v", err)
	}
}

func TestEcho(t *testing.T) {
	if got := Echo([]byte("abc")); got != "abc" {
		t.Errorf("short: %q", got)
	}
	long := strings.Repeat("9", 1000)
	if got := Echo([]byte(long)); got != long[:MaxEcho]+"…" {
		t.Errorf("long: %q", got)
	}
	// A multi-byte rune across the cut is dropped whole.
	b := strings.Repeat("a", MaxEcho-1) + "é" + "z"
	if got := Echo([]byte(b)); got != strings.Repeat("a", MaxEcho-1)+"…" {
		t.Errorf("rune boundary: %q", got)
	}
	e := scanErr(t, `{"id":`+long+`}`)
	if e == nil || e.Msg != "id: invalid value: integer `"+long[:MaxEcho]+"…`, expected u64 at line 1 column 1006" {
		t.Errorf("echoed literal: %v", e)
	}
}

// TestResetKeepsBuffer: Reset reuses the unescape buffer's storage and
// Reset(nil) drops the document.
func TestResetKeepsBuffer(t *testing.T) {
	var s Scanner
	s.Reset([]byte(`"` + strings.Repeat(`\n`, 100) + `"`))
	if v, _, err := s.Str("x"); err != nil || v != strings.Repeat("\n", 100) {
		t.Fatalf("%q %v", v, err)
	}
	if s.Retained() < 100 {
		t.Fatalf("retained %d", s.Retained())
	}
	s.Reset(nil)
	if s.Input() != nil || s.Offset() != 0 || s.Retained() < 100 {
		t.Fatalf("after Reset(nil): %v %d %d", s.Input(), s.Offset(), s.Retained())
	}
}

func TestEightDigits(t *testing.T) {
	for _, s := range []string{"00000000", "12345678", "99999999", "10000001", "87654321"} {
		v, ok := eightDigits([]byte(s))
		want, _ := strconv.ParseUint(s, 10, 64)
		if !ok || v != want {
			t.Errorf("%s: %d %v", s, v, ok)
		}
	}
	for _, s := range []string{"1234567a", "/2345678", ":2345678", "1234 678", "-1234567"} {
		if _, ok := eightDigits([]byte(s)); ok {
			t.Errorf("%s accepted", s)
		}
	}
	// Every 19-digit boundary value round-trips through the array path.
	for _, v := range []int64{0, 1, -1, 12345678, 123456789, 1234567812345678, 9223372036854775807, -9223372036854775808, 1000000000000000000} {
		out, set, err := New([]byte(`[`+strconv.FormatInt(v, 10)+`]`)).I64s("hashes", nil)
		if err != nil || !set || len(out) != 1 || int64(out[0]) != v {
			t.Errorf("%d: %v %v", v, out, err)
		}
	}
}

// TestFastPathAgrees: the fast array paths and the generic reader agree on
// every shape, whitespace and the values at the limits included.
func TestFastPathAgrees(t *testing.T) {
	for _, body := range []string{`[]`, ` [ ] `, `[1,2,3]`, "[ 1 ,\n2\t,3 ]", `[0]`, `[9223372036854775807,-9223372036854775808]`,
		`[4294967295]`, `[18446744073709551615]`, `[12345678901234567890]`, `[1e3]`, `[1.0]`, `[1,]`, `[-]`, `[01]`, `[1`, `null`} {
		for _, kind := range []string{"i64", "u64", "u32"} {
			fast, fastErr := readInts(body, kind, true)
			slow, slowErr := readInts(body, kind, false)
			if fast != slow || errText(fastErr) != errText(slowErr) {
				t.Errorf("%s as %s: fast %s %v, generic %s %v", body, kind, fast, fastErr, slow, slowErr)
			}
		}
	}
}

// TestFastPathAgreesLong is TestFastPathAgrees on long arrays, where the
// wide readers (fastints.go) read every element but the last few: random
// arrays of valid and invalid elements at every offset, with compact and
// spaced separators, for each kind.
func TestFastPathAgreesLong(t *testing.T) {
	elems := []string{"0", "7", "-7", "-0", "01", "-01", "00", "-", "+1", "1.5", "1e3", "1E3", "1e", "12345678", "123456789",
		"1234567812345678", "12345678123456789", "-1234567812345678", "9223372036854775807", "-9223372036854775808",
		"9223372036854775808", "-9223372036854775809", "18446744073709551615", "18446744073709551616", "99999999999999999999",
		"4294967295", "4294967296", "9999999999", "99999999999", "1000000000000000000", "-1000000000000000000",
		"01234567812345678", "-01234567812345678", "0123456789", "-012345678",
		"12345.5", "123456789.5", "-123456789e5", "1234567812345678.5", "1234567812345678901E2", "-123456781234567890.5",
		"true", `"1"`, "null", "[1]", "1-2", "\x01", "1\x00", "1\x01"}
	seps := []string{",", ",", ",", ", ", " ,", ",\n\t", " , "}
	rng := rand.New(rand.NewPCG(7, 7))
	// valid returns n values valid for kind, of every length.
	valid := func(kind string, n int) []string {
		out := make([]string, n)
		for i := range out {
			v := rng.Uint64() >> rng.IntN(64)
			switch kind {
			case "i64":
				out[i] = strconv.FormatInt(int64(v)>>rng.IntN(2), 10)
			case "u64":
				out[i] = strconv.FormatUint(v, 10)
			default:
				out[i] = strconv.FormatUint(uint64(uint32(v)), 10)
			}
		}
		return out
	}
	for k := range 30000 {
		kind := []string{"i64", "u64", "u32"}[k%3]
		parts := valid(kind, rng.IntN(12))
		if rng.IntN(2) == 0 {
			parts = append(parts, elems[rng.IntN(len(elems))])
		}
		parts = append(parts, valid(kind, rng.IntN(12))...)
		var b strings.Builder
		b.WriteByte('[')
		if rng.IntN(8) == 0 {
			b.WriteByte(' ')
		}
		for i, p := range parts {
			if i > 0 {
				b.WriteString(seps[rng.IntN(len(seps))])
			}
			b.WriteString(p)
		}
		switch rng.IntN(10) {
		case 0:
		case 1:
			b.WriteString(" ]")
		default:
			b.WriteByte(']')
		}
		body := b.String()
		fast, fastErr := readInts(body, kind, true)
		slow, slowErr := readInts(body, kind, false)
		if fast != slow || errText(fastErr) != errText(slowErr) {
			t.Fatalf("%q as %s: fast %s %v, generic %s %v", body, kind, fast, fastErr, slow, slowErr)
		}
	}
}

// TestFastPathTakesCommonShapes: the arrays the fast paths are for (hashes
// of every sign and length, token ids) never fall back to the generic
// path, compact or spaced.
func TestFastPathTakesCommonShapes(t *testing.T) {
	for seed := range uint64(50) {
		for _, spaced := range []bool{false, true} {
			h, tok := hashArray(300, seed), tokenArray(300, seed)
			if spaced {
				h = []byte(strings.ReplaceAll(string(h), ",", ", "))
				tok = []byte(strings.ReplaceAll(string(tok), ",", " ,\n"))
			}
			if out, end, ok := fastI64s(h, 0, nil); !ok || end != len(h) || len(out) != 300 {
				t.Fatalf("hashes (seed %d, spaced %v): ok %v, end %d of %d, %d values", seed, spaced, ok, end, len(h), len(out))
			}
			if out, end, ok := fastU32s(tok, 0, nil); !ok || end != len(tok) || len(out) != 300 {
				t.Fatalf("token ids (seed %d, spaced %v): ok %v, end %d of %d, %d values", seed, spaced, ok, end, len(tok), len(out))
			}
		}
	}
}

// readInts reads body as an array of kind, through the public readers
// (fast path first) or the generic one alone, and formats the result.
func readInts(body, kind string, fast bool) (string, error) {
	s := New([]byte(body))
	var out []string
	var err error
	if fast {
		switch kind {
		case "i64":
			var v []uint64
			v, _, err = s.I64s("a", nil)
			for _, x := range v {
				out = append(out, strconv.FormatInt(int64(x), 10))
			}
		case "u64":
			var v []uint64
			v, _, err = s.U64s("a", nil)
			for _, x := range v {
				out = append(out, strconv.FormatUint(x, 10))
			}
		default:
			var v []uint32
			v, _, err = s.U32s("a", nil)
			for _, x := range v {
				out = append(out, strconv.FormatUint(uint64(x), 10))
			}
		}
	} else {
		_, err = s.Array("a", "a sequence", func() error {
			switch kind {
			case "i64":
				v, err := s.int64("a")
				out = append(out, strconv.FormatInt(v, 10))
				return err
			case "u64":
				v, err := s.Uint("a", 1<<64-1, "u64")
				out = append(out, strconv.FormatUint(v, 10))
				return err
			}
			v, err := s.Uint("a", 1<<32-1, "u32")
			out = append(out, strconv.FormatUint(v, 10))
			return err
		})
	}
	if err != nil {
		return "", err
	}
	return strings.Join(out, ","), nil
}

func errText(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

// TestScanAllocs: reading a document whose strings have no escapes, into
// slices with room, allocates nothing; neither does one with escapes once
// the unescape buffer has grown.
func TestScanAllocs(t *testing.T) {
	if raceEnabled {
		t.Skip("allocation counts need a non-race run")
	}
	var b strings.Builder
	b.WriteString(`{"name":"model","unknown":{"a":[1,2.5,"x\ty",null,true]},"id":7,"weight":0.25,"on":false,"pin":{"worker_id":3},"hashes":[`)
	for i := range 128 {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(strconv.FormatInt(int64(i)*-72057594037927935, 10))
	}
	b.WriteString(`],"tokens":[1,2,3,4,5,6,7,8]}`)
	body := []byte(b.String())
	escaped := []byte(`{"name":"a\nb\u00e9","hashes":[1 , 2]}`)
	var s Scanner
	r := record{hashes: make([]uint64, 0, 128), tokens: make([]uint32, 0, 8)}
	for _, doc := range [][]byte{body, escaped} {
		s.Reset(doc)
		if err := decodeRecord(&s, &r); err != nil {
			t.Fatal(err)
		}
		n := testing.AllocsPerRun(100, func() {
			s.Reset(doc)
			if err := decodeRecord(&s, &r); err != nil {
				t.Fatal(err)
			}
		})
		if n != 0 {
			t.Errorf("%.30s...: %.1f allocations per document, want 0", doc, n)
		}
	}
}
