package text

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/kvselect/kvselect/core/text/jinja"
)

// The chat template exactness tests: every (template, conversation) pair
// rendered here and by Python's Jinja2 in transformers' environment
// (testdata/chat_ref.py, Debian's python3-jinja2), byte for byte; where
// Python raises, so must we (raise_exception: the same message). jinja.js
// (testdata/npm/chat.mjs) is a second opinion whose known differences
// from Python are counted by class.

// python is Debian's interpreter: only it has python3-jinja2.
const python = "/usr/bin/python3"

// chatNow is the clock of every render (chat_ref.py's NOW).
var chatNow = time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC)

func needPython(t testing.TB) {
	t.Helper()
	if _, err := os.Stat(python); err != nil {
		t.Skipf("chat template references need %s (python3-jinja2): %v", python, err)
	}
	if out, err := exec.Command(python, "-c", "import jinja2").CombinedOutput(); err != nil {
		t.Skipf("chat template references need python3-jinja2 (make tokenizer-refs installs it): %s", out)
	}
}

// chatCase is one render: chat_ref.py's and chat.mjs's input.
type chatCase struct {
	T                    int                        `json:"t"`
	Messages             json.RawMessage            `json:"messages"`
	Tools                json.RawMessage            `json:"tools,omitempty"`
	Documents            json.RawMessage            `json:"documents,omitempty"`
	AddGenerationPrompt  bool                       `json:"add_generation_prompt"`
	ContinueFinalMessage bool                       `json:"continue_final_message"`
	Kwargs               map[string]json.RawMessage `json:"kwargs,omitempty"`
	Special              map[string]any             `json:"special,omitempty"`
	Format               string                     `json:"format"`
}

type chatResult struct {
	Text    *string `json:"text"`
	Format  string  `json:"format"`
	Error   string  `json:"error"`
	Message string  `json:"message"`
}

// obj is a JSON object with its keys in the order given.
func obj(kv ...any) json.RawMessage {
	var b bytes.Buffer
	b.WriteByte('{')
	for i := 0; i < len(kv); i += 2 {
		if i > 0 {
			b.WriteString(", ")
		}
		k, _ := json.Marshal(kv[i])
		v, _ := json.Marshal(kv[i+1])
		b.Write(k)
		b.WriteString(": ")
		b.Write(v)
	}
	b.WriteByte('}')
	return b.Bytes()
}

func arr(items ...json.RawMessage) json.RawMessage {
	var b bytes.Buffer
	b.WriteByte('[')
	for i, it := range items {
		if i > 0 {
			b.WriteByte(',')
		}
		b.Write(it)
	}
	b.WriteByte(']')
	return b.Bytes()
}

var chatTexts = []string{
	"Hello!", "What's 2+2?", "  leading and trailing spaces  ", "line one\nline two\n\nline four",
	"Unicode: héllo wörld, 日本語, emoji 🎉👍, RTL مرحبا", "", "tabs\tand\ttabs", "quotes: 'single' \"double\" `back`",
	"<|im_start|>look-alike<|im_end|>", "{{ not a template }} {% neither %}", "trailing newline\n",
	"A longer message. " + strings.Repeat("Lorem ipsum dolor sit amet. ", 8), "\u00a0nbsp\u3000ideographic space\u2028",
	"backslash \\ and \\n literal", "数字 123 and 4.0",
}

var chatTool = obj("type", "function", "function", obj("name", "get_weather", "description", "Get the weather for a city.",
	"parameters", obj("type", "object", "properties", obj("city", obj("type", "string", "description", "The city"),
		"days", obj("type", "integer", "default", 1), "scale", obj("type", "number", "minimum", 0.5)), "required", []string{"city"})))

var chatTool2 = obj("type", "function", "function", obj("name", "search", "description", "Search the web.",
	"parameters", obj("type", "object", "properties", obj("query", obj("type", "string")), "required", []string{"query"})))

// conversations are generated from a fixed seed: system, user, assistant
// and tool turns in valid and invalid orders, tool calls with arguments
// as objects and as JSON strings, content as a string, null, or a list
// of text parts, reasoning_content, unicode and special-token look-alikes.
func conversations(n int) []chatCase {
	rng := rand.New(rand.NewSource(22))
	text := func() string { return chatTexts[rng.Intn(len(chatTexts))] }
	content := func() any {
		switch rng.Intn(8) {
		case 0:
			return []any{map[string]any{"type": "text", "text": text()}}
		case 1:
			return []any{map[string]any{"type": "text", "text": text()}, map[string]any{"type": "text", "text": text()}}
		}
		return text()
	}
	var out []chatCase
	for i := 0; len(out) < n; i++ {
		var msgs []json.RawMessage
		hasTools := rng.Intn(3) == 0
		if rng.Intn(2) == 0 {
			msgs = append(msgs, obj("role", "system", "content", content()))
		}
		turns := 1 + rng.Intn(4)
		for k := 0; k < turns; k++ {
			msgs = append(msgs, obj("role", "user", "content", content()))
			if k == turns-1 && rng.Intn(2) == 0 {
				break
			}
			switch r := rng.Intn(6); {
			case r == 0 && hasTools:
				var args any = map[string]any{"city": "Paris", "days": 3}
				if rng.Intn(2) == 0 {
					args = `{"city": "Tōkyō", "scale": 2.0}`
				}
				call := obj("id", fmt.Sprintf("call_%d", k), "type", "function", "function", obj("name", "get_weather", "arguments", args))
				var c any = nil
				if rng.Intn(2) == 0 {
					c = ""
				}
				msgs = append(msgs, json.RawMessage(fmt.Sprintf(`{"role": "assistant", "content": %s, "tool_calls": [%s]}`, mustJSON(c), call)))
				msgs = append(msgs, obj("role", "tool", "tool_call_id", fmt.Sprintf("call_%d", k), "name", "get_weather", "content", `{"temp": 21.5, "sky": "clear"}`))
				msgs = append(msgs, obj("role", "assistant", "content", "It is 21.5 °C and clear."))
			case r == 1:
				msgs = append(msgs, obj("role", "assistant", "content", "<think>\nLet me think.\n</think>\n\n"+text()))
			case r == 2:
				msgs = append(msgs, obj("role", "assistant", "reasoning_content", "I reason.", "content", text()))
			default:
				msgs = append(msgs, obj("role", "assistant", "content", content()))
			}
		}
		switch rng.Intn(12) { // orders some templates refuse
		case 0:
			msgs = append(msgs, obj("role", "user", "content", "two users in a row"))
		case 1:
			msgs = append([]json.RawMessage{obj("role", "assistant", "content", "assistant first")}, msgs...)
		case 2:
			msgs = append(msgs, obj("role", "system", "content", "a late system message"))
		}
		c := chatCase{Messages: arr(msgs...), AddGenerationPrompt: rng.Intn(3) != 0}
		if hasTools {
			if rng.Intn(2) == 0 {
				c.Tools = arr(chatTool)
			} else {
				c.Tools = arr(chatTool, chatTool2)
			}
		}
		if rng.Intn(8) == 0 {
			c.Kwargs = map[string]json.RawMessage{"enable_thinking": json.RawMessage(mustJSON(rng.Intn(2) == 0))}
		}
		out = append(out, c)
	}
	return out
}

func mustJSON(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}

// chatTemplate is one template under test and where it came from.
type chatTemplate struct {
	name, src string
	family    string // a lenml family with a tokenizer here; "" none
}

// ollamaTemplates are @huggingface/ollama-utils' templates, by model.
func ollamaTemplates(t *testing.T) []chatTemplate {
	t.Helper()
	cmd := exec.Command("node", "chat.mjs", "templates")
	cmd.Dir = npmDir
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("node chat.mjs templates: %v", err)
	}
	var m map[string]string
	if err := json.Unmarshal(out, &m); err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	var names []string
	for k := range m {
		names = append(names, k)
	}
	sort.Strings(names)
	var ts []chatTemplate
	for _, k := range names {
		if !seen[m[k]] {
			seen[m[k]] = true
			ts = append(ts, chatTemplate{name: k, src: m[k]})
		}
	}
	return ts
}

func lenmlTokenizer(t testing.TB, family string) (*Tokenizer, []byte) {
	t.Helper()
	dir := modelDir(family)
	tj, err := os.ReadFile(filepath.Join(dir, "tokenizer.json"))
	if err != nil {
		t.Skipf("reference tokenizers not installed (make tokenizer-refs): %v", err)
	}
	cj, err := os.ReadFile(filepath.Join(dir, "tokenizer_config.json"))
	if err != nil {
		t.Fatal(err)
	}
	tok, err := Load(tj, cj)
	if err != nil {
		t.Fatal(err)
	}
	return tok, cj
}

// runChatRef runs a reference script over cases.
func runChatRef(t *testing.T, name string, args []string, dir string, templates []string, cases []chatCase) []chatResult {
	t.Helper()
	in, _ := json.Marshal(map[string]any{"templates": templates, "cases": cases})
	path := filepath.Join(t.TempDir(), "cases.json")
	if err := os.WriteFile(path, in, 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(name, append(args, path)...)
	cmd.Dir = dir
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("%s %v: %v: %s", name, args, err, stderr.String())
	}
	var res []chatResult
	sc := bufio.NewScanner(bytes.NewReader(out))
	sc.Buffer(make([]byte, 1<<20), 256<<20)
	for sc.Scan() {
		var r chatResult
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		res = append(res, r)
	}
	if len(res) != len(cases) {
		t.Fatalf("%s: %d results for %d cases", name, len(res), len(cases))
	}
	return res
}

// rawRender renders a case with the engine alone, as chat_ref.py's
// format "none" does.
func rawRender(tpl *jinja.Template, c *chatCase) (string, error) {
	vars := map[string]any{}
	for k, v := range c.Special {
		vars[k] = v
	}
	for k, raw := range c.Kwargs {
		v, err := jinja.FromJSON(raw)
		if err != nil {
			return "", err
		}
		vars[k] = v
	}
	for k, raw := range map[string]json.RawMessage{"messages": c.Messages, "tools": c.Tools, "documents": c.Documents} {
		var v jinja.Value
		if len(raw) > 0 {
			var err error
			if v, err = jinja.FromJSON(raw); err != nil {
				return "", err
			}
		}
		vars[k] = v
	}
	vars["add_generation_prompt"] = c.AddGenerationPrompt
	vars["strftime_now"] = jinja.Strftime(chatNow)
	return tpl.Render(vars)
}

// sameOutcome checks ours against Python's: the same text, or an error
// where Python raised (raise_exception's with its message).
func sameOutcome(got string, err error, ref chatResult) string {
	if ref.Text != nil {
		if err != nil {
			return fmt.Sprintf("python rendered %q, we failed: %v", trunc(*ref.Text), err)
		}
		if got != *ref.Text {
			return fmt.Sprintf("differ at byte %d:\n python %q\n ours   %q", diffAt(got, *ref.Text), trunc(*ref.Text), trunc(got))
		}
		return ""
	}
	if err == nil {
		return fmt.Sprintf("python raised %s: %s; we rendered %q", ref.Error, ref.Message, trunc(got))
	}
	var raised *jinja.Raised
	if ref.Error == "TemplateError" && (!errors.As(err, &raised) || raised.Message != ref.Message) {
		return fmt.Sprintf("python raised TemplateError(%q); we: %v", ref.Message, err)
	}
	return ""
}

func diffAt(a, b string) int {
	i := 0
	for i < len(a) && i < len(b) && a[i] == b[i] {
		i++
	}
	return i
}

func trunc(s string) string {
	if len(s) > 600 {
		return s[:600] + "…"
	}
	return s
}

// unsupportedTemplates are templates of the map the engine refuses at
// Parse, by name, with the construct; empty when all parse.
var unsupportedTemplates = map[string]string{}

func TestExactChatTemplates(t *testing.T) {
	needPython(t)
	if _, err := os.Stat(filepath.Join(npmDir, "node_modules", "@huggingface", "ollama-utils")); err != nil {
		t.Skipf("chat template references not installed (make tokenizer-refs): %v", err)
	}
	templates := ollamaTemplates(t)
	for _, fam := range []string{"llama3", "qwen3", "deepseek_v3"} {
		tok, _ := lenmlTokenizer(t, fam)
		templates = append(templates, chatTemplate{name: "lenml/" + fam, src: tok.ChatTemplate, family: fam})
	}
	convs := sampled(conversations(240))
	special := map[string]any{"bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>", "pad_token": "<pad>"}
	var srcs []string
	var parsed []*jinja.Template
	var cases []chatCase
	for i, tt := range templates {
		srcs = append(srcs, tt.src)
		tpl, err := jinja.Parse(tt.src)
		if err != nil {
			if _, ok := unsupportedTemplates[tt.name]; !ok {
				t.Errorf("%s: %v", tt.name, err)
			}
		}
		parsed = append(parsed, tpl)
		for _, c := range convs {
			c.T, c.Special, c.Format = i, special, "none"
			cases = append(cases, c)
		}
	}
	py := runChatRef(t, python, []string{"testdata/chat_ref.py"}, ".", srcs, cases)
	js := runChatRef(t, "node", []string{"chat.mjs", "render"}, npmDir, srcs, cases)
	type stat struct{ same, pyErr, pyCompileErr int }
	perTemplate := make([]stat, len(templates))
	jsClass := map[string]int{}
	var jsExamples []string
	failures := 0
	for i, c := range cases {
		tt := templates[c.T]
		ref := py[i]
		st := &perTemplate[c.T]
		if parsed[c.T] == nil {
			if ref.Text != nil {
				continue // reported above
			}
			st.pyCompileErr++
			continue
		}
		got, err := rawRender(parsed[c.T], &c)
		if msg := sameOutcome(got, err, ref); msg != "" {
			failures++
			if failures <= 8 {
				t.Errorf("%s, conversation %d: %s\nmessages: %s", tt.name, i%len(convs), msg, c.Messages)
			}
			continue
		}
		if ref.Text == nil {
			st.pyErr++
			continue
		}
		st.same++
		if cl := jsDifference(*ref.Text, js[i]); cl != "" {
			jsClass[cl]++
			if cl == "other" && len(jsExamples) < 3 {
				jsExamples = append(jsExamples, fmt.Sprintf("%s: python %q, jinja.js %q %s", tt.name, trunc(*ref.Text), trunc(deref(js[i].Text)), js[i].Message))
			}
		}
	}
	if failures > 0 {
		t.Errorf("%d of %d renders differ from Python", failures, len(cases))
	}
	same, errs, templatesOK := 0, 0, 0
	for _, s := range perTemplate {
		same += s.same
		errs += s.pyErr
		if s.same > 0 {
			templatesOK++
		}
	}
	t.Logf("%d templates × %d conversations: %d renders identical to Python, %d raised by both; %d templates rendered at least once", len(templates), len(convs), same, errs, templatesOK)
	t.Logf("jinja.js differences from Python by class: %v", jsClass)
	for _, e := range jsExamples {
		t.Logf("jinja.js other: %s", e)
	}
	if same < len(convs)*len(templates)*3/10 { // 9,838 of 23,520 in full (42%)
		t.Errorf("only %d identical renders", same)
	}
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

var floatZero = regexp.MustCompile(`(\d)\.0\b`)

// jsDifference classes jinja.js's render against Python's: "" the
// same; "js-error" it raised where Python rendered; "float" only 2.0
// printed as 2 (JS numbers have no int/float distinction); "whitespace"
// only whitespace (its trim and strip(chars) rules); "other".
func jsDifference(py string, js chatResult) string {
	switch {
	case js.Text == nil:
		return "js-error"
	case *js.Text == py:
		return ""
	case floatZero.ReplaceAllString(py, "$1") == floatZero.ReplaceAllString(*js.Text, "$1"):
		return "float"
	case strings.Join(strings.Fields(py), "") == strings.Join(strings.Fields(*js.Text), ""):
		return "whitespace"
	}
	return "other"
}

var _ = slices.Contains[[]string]
