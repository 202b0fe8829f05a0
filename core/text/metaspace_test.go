package text

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"testing"
)

// metaspaceFiles writes llama2's files (Mistral's vocabulary) with the
// Replace/Prepend normalizer swapped for a Metaspace pre-tokenizer of the
// given fields, the form transformers' LlamaConverter writes for
// non-legacy files, and returns the directory.
func metaspaceFiles(t testing.TB, pre map[string]any) string {
	t.Helper()
	src := modelDir("llama2")
	raw, err := os.ReadFile(filepath.Join(src, "tokenizer.json"))
	if err != nil {
		t.Skipf("tokenizer references not installed (make tokenizer-refs): %v", err)
	}
	var f map[string]any
	if err := json.Unmarshal(raw, &f); err != nil {
		t.Fatal(err)
	}
	f["normalizer"] = nil
	f["pre_tokenizer"] = pre
	out, _ := json.Marshal(f)
	dir := t.TempDir()
	cfg, err := os.ReadFile(filepath.Join(src, "tokenizer_config.json"))
	if err != nil {
		t.Fatal(err)
	}
	for name, b := range map[string][]byte{"tokenizer.json": out, "tokenizer_config.json": cfg} {
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

func loadDir(t testing.TB, dir string) (*Tokenizer, error) {
	t.Helper()
	tj, err := os.ReadFile(filepath.Join(dir, "tokenizer.json"))
	if err != nil {
		t.Fatal(err)
	}
	tc, err := os.ReadFile(filepath.Join(dir, "tokenizer_config.json"))
	if err != nil {
		t.Fatal(err)
	}
	return Load(tj, tc)
}

// TestExactMetaspace: the Metaspace pre-tokenizer with
// prepend_scheme "first" (the form in use) gives tokenizers.js's ids on
// the whole corpus, "always" and "never" on its first fifth, with
// and without special tokens ("first" puts no ▁ before the text after an
// added token, "always" does).
func TestExactMetaspace(t *testing.T) {
	requireReferences(t)
	all := sampled(corpus())
	for _, scheme := range []string{"first", "always", "never"} {
		inputs := all
		if scheme != "first" {
			inputs = all[:len(all)/5]
		}
		t.Run(scheme, func(t *testing.T) {
			dir := metaspaceFiles(t, map[string]any{"type": "Metaspace", "replacement": "▁", "prepend_scheme": scheme, "split": false})
			tok, err := loadDir(t, dir)
			if err != nil {
				t.Fatal(err)
			}
			for _, special := range []bool{false, true} {
				refs := references(t, dir, inputs, special)
				bad := 0
				for i, s := range inputs {
					if got := tok.Encode(nil, s, special); !slices.Equal(got, refs[i]) {
						if bad++; bad <= 5 {
							t.Errorf("special=%v %q:\n got  %v\n want %v", special, clip(s), clipIDs(got), clipIDs(refs[i]))
						}
					}
				}
				if bad > 0 {
					t.Fatalf("special=%v: %d of %d strings differ", special, bad, len(inputs))
				}
			}
		})
	}
}

// TestMetaspaceRules pins the rules that tell the schemes apart on
// Mistral's vocabulary, and the refusals.
func TestMetaspaceRules(t *testing.T) {
	requireReferences(t)
	first, err := loadDir(t, metaspaceFiles(t, map[string]any{"type": "Metaspace", "replacement": "▁", "prepend_scheme": "first", "split": false}))
	if err != nil {
		t.Fatal(err)
	}
	legacy := load(t, "llama2") // the Prepend normalizer: a ▁ before every segment
	hello, _ := first.idOf("Hello")
	helloMark, _ := first.idOf("▁Hello")
	if got := first.Encode(nil, "Hello", false); !slices.Equal(got, []uint32{helloMark}) {
		t.Errorf("first: Hello = %v, want [%d] (▁ prepended)", got, helloMark)
	}
	if got := first.Encode(nil, "</s>Hello", false); got[len(got)-1] != hello {
		t.Errorf("first: </s>Hello ends %v, want %d (no ▁ after an added token)", got, hello)
	}
	if got := legacy.Encode(nil, "</s>Hello", false); got[len(got)-1] != helloMark {
		t.Errorf("legacy: </s>Hello ends %v, want %d", got, helloMark)
	}
	for name, pre := range map[string]map[string]any{
		"split true":    {"type": "Metaspace", "replacement": "▁", "prepend_scheme": "first", "split": true},
		"split omitted": {"type": "Metaspace", "replacement": "▁", "prepend_scheme": "first"},
		"replacement":   {"type": "Metaspace", "replacement": "_", "prepend_scheme": "first", "split": false},
		"scheme":        {"type": "Metaspace", "replacement": "▁", "prepend_scheme": "sometimes", "split": false},
	} {
		if _, err := loadDir(t, metaspaceFiles(t, pre)); !errors.Is(err, ErrUnsupported) {
			t.Errorf("%s: err %v, want ErrUnsupported", name, err)
		}
	}
}
