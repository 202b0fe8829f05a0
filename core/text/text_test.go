package text

import (
	"errors"
	"strings"
	"testing"
	"unicode/utf8"
)

// TestLossy: invalid UTF-8 decodes as Rust's String::from_utf8_lossy
// decodes it: one U+FFFD for each maximal invalid subpart (a truncated
// sequence is one, a stray continuation byte one each).
func TestLossy(t *testing.T) {
	for in, want := range map[string]string{
		"ok":                   "ok",
		"\x80\x80\x80":         "\ufffd\ufffd\ufffd",
		"a\xe2\x82b":           "a\ufffdb",           // E2 82 starts € (E2 82 AC): one
		"\xe2\x82\xac":         "€",                  // complete
		"\xed\xa0\x80":         "\ufffd\ufffd\ufffd", // a surrogate: ED A0 is invalid at once
		"\xf0\x9f\x98":         "\ufffd",             // truncated 😀
		"\xf0\x9f\x98\x80\xff": "😀\ufffd",
		"\xc0\xaf":             "\ufffd\ufffd", // overlong
		"\xf4\x90\x80\x80":     "\ufffd\ufffd\ufffd\ufffd",
	} {
		if got := lossy([]byte(in)); got != want {
			t.Errorf("lossy(%q) = %q, want %q", in, got, want)
		}
	}
}

// minimal is a byte-level tokenizer.json with the 256 byte tokens, "ab"
// from one merge, and the given pre-tokenizer and normalizer.
func minimal(pre, normalizer, decoder string) []byte {
	var vocab strings.Builder
	vocab.WriteString("{")
	for b := 0; b < 256; b++ {
		if b > 0 {
			vocab.WriteString(",")
		}
		vocab.WriteString(`"` + strings.ReplaceAll(strings.ReplaceAll(byteChar[b], `\`, `\\`), `"`, `\"`) + `":` + itoa(b))
	}
	vocab.WriteString(`,"ab":256}`)
	return []byte(`{"added_tokens":[{"id":257,"content":"<s>","special":true}],"normalizer":` + normalizer + `,"pre_tokenizer":` + pre +
		`,"post_processor":null,"decoder":` + decoder + `,"model":{"type":"BPE","vocab":` + vocab.String() + `,"merges":["a b"]}}`)
}

func itoa(n int) string {
	if n == 0 {
		return "0"
	}
	var b []byte
	for ; n > 0; n /= 10 {
		b = append([]byte{byte('0' + n%10)}, b...)
	}
	return string(b)
}

const llamaPre = `{"type":"Sequence","pretokenizers":[{"type":"Split","pattern":{"Regex":"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"},"behavior":"Isolated","invert":false},{"type":"ByteLevel","add_prefix_space":false,"trim_offsets":true,"use_regex":false}]}`

// TestLoadRefusesWhatItDoesNotImplement: an unknown pre-tokenizer, pattern,
// normalizer, model type or decoder is a load error naming it, never an
// approximation.
func TestLoadRefusesWhatItDoesNotImplement(t *testing.T) {
	if _, err := Load(minimal(llamaPre, "null", `{"type":"ByteLevel"}`), nil); err != nil {
		t.Fatalf("the minimal file: %v", err)
	}
	for name, tj := range map[string][]byte{
		"pattern":       minimal(strings.Replace(llamaPre, `\\p{N}{1,3}`, `\\p{N}{1,4}`, 1), "null", `{"type":"ByteLevel"}`),
		"pre-tokenizer": minimal(`{"type":"Whitespace"}`, "null", `{"type":"ByteLevel"}`),
		"normalizer":    minimal(llamaPre, `{"type":"Lowercase"}`, `{"type":"ByteLevel"}`),
		"decoder":       minimal(llamaPre, "null", `{"type":"WordPiece"}`),
		"model":         []byte(strings.Replace(string(minimal(llamaPre, "null", `{"type":"ByteLevel"}`)), `"type":"BPE"`, `"type":"Unigram"`, 1)),
	} {
		if _, err := Load(tj, nil); !errors.Is(err, ErrUnsupported) {
			t.Errorf("%s: %v, want ErrUnsupported", name, err)
		}
	}
}

// TestPreTokenizerCases pins the hand matchers on the alternatives'
// corners, as Oniguruma splits them (checked against tokenizers.js by
// TestExactAgainstTokenizersJS on the real files).
func TestPreTokenizerCases(t *testing.T) {
	split := func(sp splitter, s string) []string {
		var out []string
		for _, p := range splitIsolated(s, []span{{0, len(s)}}, sp, nil) {
			out = append(out, s[p.start:p.end])
		}
		return out
	}
	for _, c := range []struct {
		sp   splitter
		in   string
		want []string
	}{
		{cl100k(3), "I'm here", []string{"I", "'m", " here"}},
		{cl100k(3), "x  y", []string{"x", " ", " y"}},
		{cl100k(3), "x \n\n  y", []string{"x", " \n\n", " ", " y"}},
		{cl100k(3), "12345", []string{"123", "45"}},
		{cl100k(1), "123", []string{"1", "2", "3"}},
		{cl100k(3), "a  ", []string{"a", "  "}},
		{cl100k(3), "\tword", []string{"\tword"}},
		{cl100k(3), " ...\n\nx", []string{" ...\n\n", "x"}},
		{matcher(o200k), "HelloWorld don't", []string{"Hello", "World", " don't"}},
		{matcher(o200k), "ABCdef", []string{"ABCdef"}},
		{matcher(o200k), "a/b//\n", []string{"a", "/b", "//\n"}},
		{deepseekMain{}, "x123", []string{"x", "123"}},
		{cjk{}, "ab中文cd", []string{"ab", "中文", "cd"}},
	} {
		if got := split(c.sp, c.in); strings.Join(got, "|") != strings.Join(c.want, "|") {
			t.Errorf("%q: %q, want %q", c.in, got, c.want)
		}
	}
}

// FuzzEncode: no input panics; every id decodes; byte-level BPE keeps
// every byte of valid UTF-8.
func FuzzEncode(f *testing.F) {
	tok, err := Load(minimal(llamaPre, `{"type":"NFC"}`, `{"type":"ByteLevel"}`), nil)
	if err != nil {
		f.Fatal(err)
	}
	for _, s := range []string{"ab <s>ab", "I'm \n\n x", "中文 123456", "\xff\xfe", "<s", "e\u0301"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		ids := tok.Encode(nil, s, true)
		if len(ids) > 2*len(s)+2 {
			t.Fatalf("%d ids for %d bytes", len(ids), len(s))
		}
		back := tok.Decode(ids, false)
		if utf8.ValidString(s) && back != tok.normalize(s) {
			t.Fatalf("round trip of %q gave %q", s, back)
		}
	})
}
