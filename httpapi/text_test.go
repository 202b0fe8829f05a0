package httpapi_test

import (
	"encoding/json"
	"strconv"
	"strings"
	"testing"

	"github.com/kvselect/kvselect/core"
	"github.com/kvselect/kvselect/core/text"
	"github.com/kvselect/kvselect/httpapi"
	"github.com/kvselect/kvselect/httpapi/client"
)

// miniTokenizer is a real byte-level BPE tokenizer.json, small: GPT-2's
// byte alphabet (tokens 0-255, in byte order), "ab" (256) by one merge,
// the special token <s> (257) added first by a TemplateProcessing, the
// Llama 3 pre-tokenizer.
func miniTokenizer(t testing.TB) *text.Tokenizer {
	t.Helper()
	vocab := map[string]int{}
	n := 0
	for b := 0; b < 256; b++ {
		r := rune(b)
		if !((b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF)) {
			r = rune(256 + n)
			n++
		}
		vocab[string(r)] = b
	}
	vocab["ab"] = 256
	v, _ := json.Marshal(vocab)
	pre := `{"type":"Sequence","pretokenizers":[{"type":"Split","pattern":{"Regex":"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"},"behavior":"Isolated","invert":false},{"type":"ByteLevel","add_prefix_space":false,"trim_offsets":true,"use_regex":false}]}`
	tj := `{"added_tokens":[{"id":257,"content":"<s>","special":true}],"normalizer":null,"pre_tokenizer":` + pre +
		`,"post_processor":{"type":"TemplateProcessing","single":[{"SpecialToken":{"id":"<s>","type_id":0}},{"Sequence":{"id":"A","type_id":0}}]},"decoder":{"type":"ByteLevel"},"model":{"type":"BPE","vocab":` + string(v) + `,"merges":["a b"]}}`
	tok, err := text.Load([]byte(tj), []byte(`{"model_max_length":4096,"bos_token":"<s>"}`))
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

func withTokenizer(t testing.TB) opt {
	tok := miniTokenizer(t)
	return func(_ *core.Config, hc *httpapi.Config) { hc.Tokenizers = map[string]*text.Tokenizer{"m": tok} }
}

// TestTokenizeRoutes: /tokenize and /detokenize answer vLLM's shapes with
// the configured tokenizer; a model without one is a 400 naming the flag.
func TestTokenizeRoutes(t *testing.T) {
	h := start(t, withTokenizer(t))
	h.want(h.do("POST", "/tokenize", `{"model":"m","prompt":"ab b"}`), 200, `{"count":4,"max_model_len":4096,"tokens":[257,256,32,98],"token_strs":null}`)
	h.want(h.do("POST", "/tokenize", `{"prompt":"ab","add_special_tokens":false,"return_token_strs":true}`), 200, `{"count":1,"max_model_len":4096,"tokens":[256],"token_strs":["ab"]}`)
	h.want(h.do("POST", "/tokenize", `{"model":"other","prompt":"x"}`), 400, "--model-path other=DIR")
	h.want(h.do("POST", "/tokenize", `{"model":"m","messages":[{"role":"user","content":"hi"}]}`), 400, "has no chat template")
	h.want(h.do("POST", "/tokenize", `{"model":"m"}`), 422, "missing field `prompt`")
	h.want(h.do("POST", "/detokenize", `{"model":"m","tokens":[257,256,32,98]}`), 200, `{"prompt":"<s>ab b"}`)
	h.want(h.do("POST", "/detokenize", `{"tokens":[999]}`), 400, "outside the vocabulary")
	h.want(h.do("POST", "/detokenize", `{"model":"m"}`), 422, "missing field `tokens`")
	none := start(t)
	h.want(none.do("POST", "/tokenize", `{"prompt":"x"}`), 400, "start kvselect with --model-path NAME=DIR")
	// Round trip of a long prompt.
	long := strings.Repeat("abc déf 123 ", 500)
	r := h.do("POST", "/tokenize", `{"prompt":`+strconv.Quote(long)+`,"add_special_tokens":false}`)
	var got struct{ Tokens []uint32 }
	if err := json.Unmarshal([]byte(r.raw), &got); err != nil {
		t.Fatal(err)
	}
	ids, _ := json.Marshal(got.Tokens)
	if d := h.do("POST", "/detokenize", `{"tokens":`+string(ids)+`}`); d.obj()["prompt"] != long {
		t.Fatalf("round trip: %.80s", d.raw)
	}
}

// TestPromptOnSelection: with a tokenizer, prompt stands in for token_ids
// on /select, /select_and_reserve, /overlap_scores and /potential_loads:
// the answer is the one the prompt's token ids (BOS included, as vLLM's
// completions endpoint adds it) get. token_ids win over a prompt; without
// a tokenizer a prompt is the unknown field it is to the reference.
func TestPromptOnSelection(t *testing.T) {
	h := start(t, withTokenizer(t))
	h.want(h.do("POST", "/workers", `{"worker_id":1,"model_name":"m","endpoint":"http://w1","block_size":4}`), 201)
	h.want(h.do("POST", "/workers", `{"worker_id":2,"model_name":"m","endpoint":"http://w2","block_size":4}`), 201)
	text := "ab ab ab ab ab ab ab"
	var tok struct{ Tokens []uint32 }
	if err := json.Unmarshal([]byte(h.do("POST", "/tokenize", `{"prompt":`+strconv.Quote(text)+`}`).raw), &tok); err != nil {
		t.Fatal(err)
	}
	ids, _ := json.Marshal(tok.Tokens)
	for _, route := range []string{"/overlap_scores", "/potential_loads"} {
		byText := h.do("POST", route, `{"model_name":"m","prompt":`+strconv.Quote(text)+`}`)
		byIDs := h.do("POST", route, `{"model_name":"m","token_ids":`+string(ids)+`}`)
		h.want(byText, 200)
		if byText.raw != byIDs.raw {
			t.Fatalf("%s: by text %s, by ids %s", route, byText.raw, byIDs.raw)
		}
	}
	r := h.do("POST", "/select_and_reserve", `{"model_name":"m","selection_id":"p1","prompt":`+strconv.Quote(text)+`}`)
	h.want(r, 200, `"isl_tokens":`+strconv.Itoa(len(tok.Tokens)))
	// An explicit reservation and a disaggregated plan take a prompt too.
	h.want(h.do("POST", "/reservations", `{"selection_id":"p2","model_name":"m","worker_id":2,"prompt":`+strconv.Quote(text)+`}`), 201)
	// (without the prompt's tokens it would be a 400: block_hashes is
	// required without token_ids)
	h.want(h.do("POST", "/workers", `{"worker_id":3,"model_name":"m","routing_group":"prefill","endpoint":"http://w3","block_size":4}`), 201)
	h.want(h.do("POST", "/workers", `{"worker_id":4,"model_name":"m","routing_group":"decode","endpoint":"http://w4","block_size":4}`), 201)
	h.want(h.do("POST", "/disagg/plan", `{"selection_id":"d1","model_name":"m","prompt":`+strconv.Quote(text)+`}`), 200, `"selection_id":"d1"`)
	h.want(h.do("POST", "/disagg/plan", `{"selection_id":"d2","model_name":"x","prompt":"ab"}`), 400, "--model-path x=DIR")
	// token_ids win; a model without a tokenizer is a 400 naming the flag.
	h.want(h.do("POST", "/select", `{"model_name":"m","token_ids":[1,2,3,4],"prompt":"ignored"}`), 200, `"worker_id"`)
	h.want(h.do("POST", "/select", `{"model_name":"x","prompt":"ab"}`), 400, "--model-path x=DIR")
	none := start(t)
	none.want(none.do("POST", "/workers", `{"worker_id":1,"endpoint":"http://w1","block_size":4}`), 201)
	none.want(none.do("POST", "/select", `{"prompt":"ab"}`), 400, "block_hashes is required without token_ids")
}

// chatTemplate is a small template in the shape of the real ones: the
// BOS written by the template, turns, a generation prompt, tools and a
// raise_exception on a bad role.
const chatTemplate = `{{ bos_token }}{% for m in messages %}{% if m['role'] not in ['user', 'assistant'] %}{{ raise_exception('roles: user and assistant only, not ' ~ m['role']) }}{% endif %}{{ m['role'] }} {{ m['content'] }}
{% endfor %}{% if tools %}tools {{ tools | tojson }}
{% endif %}{% if add_generation_prompt %}assistant {% endif %}`

// TestMessages: messages stand in for prompt on /tokenize and the
// selection routes, rendered with the chat template (chat_template, or
// the tokenizer's) and tokenized without special tokens as vLLM's chat
// endpoint does, add_generation_prompt on by default; the template's own
// raise_exception is a 400 with its message.
func TestMessages(t *testing.T) {
	h := start(t, withTokenizer(t))
	h.want(h.do("POST", "/workers", `{"worker_id":1,"model_name":"m","endpoint":"http://w1","block_size":4}`), 201)
	tmpl := strconv.Quote(chatTemplate)
	msgs := `[{"role":"user","content":"ab b"},{"role":"assistant","content":"ab"},{"role":"user","content":"b ab"}]`
	rendered := "<s>user ab b\nassistant ab\nuser b ab\nassistant "
	want := h.do("POST", "/tokenize", `{"prompt":`+strconv.Quote(rendered)+`,"add_special_tokens":false}`)
	h.want(want, 200)
	got := h.do("POST", "/tokenize", `{"messages":`+msgs+`,"chat_template":`+tmpl+`}`)
	if got.raw != want.raw {
		t.Fatalf("messages: %s, want the ids of the rendered prompt %s", got.raw, want.raw)
	}
	noGen := h.do("POST", "/tokenize", `{"messages":`+msgs+`,"chat_template":`+tmpl+`,"add_generation_prompt":false}`)
	if noGen.raw == want.raw {
		t.Fatal("add_generation_prompt false renders the same")
	}
	withBOS := h.do("POST", "/tokenize", `{"messages":`+msgs+`,"chat_template":`+tmpl+`,"add_special_tokens":true}`)
	if !strings.Contains(withBOS.raw, `"tokens":[257,257,`) {
		t.Fatalf("add_special_tokens true: %s, want the tokenizer's BOS before the template's", withBOS.raw)
	}
	h.want(h.do("POST", "/tokenize", `{"messages":[{"role":"system","content":"x"}],"chat_template":`+tmpl+`}`), 400, "roles: user and assistant only, not system")
	h.want(h.do("POST", "/tokenize", `{"messages":`+msgs+`,"chat_template":"{% for"}`), 400)
	h.want(h.do("POST", "/tokenize", `{"messages":`+msgs+`,"chat_template":`+tmpl+`,"chat_template_kwargs":[1]}`), 400, "chat_template_kwargs")
	// With tools, the ids of the prompt rendered with them.
	tools := `[{"type":"function","function":{"name":"f","parameters":{"x":1}}}]`
	withTools := h.do("POST", "/tokenize", `{"messages":`+msgs+`,"chat_template":`+tmpl+`,"tools":`+tools+`}`)
	if withTools.raw == want.raw || !strings.Contains(h.do("POST", "/detokenize", `{"tokens":`+tokensOf(t, withTools.raw)+`}`).raw, `tools [{\"type\": \"function\"`) {
		t.Fatalf("tools: %s", withTools.raw)
	}
	// On a selection route: the answer of the rendered prompt's ids.
	for _, route := range []string{"/overlap_scores", "/potential_loads", "/select"} {
		byMsgs := h.do("POST", route, `{"model_name":"m","messages":`+msgs+`,"chat_template":`+tmpl+`}`)
		byIDs := h.do("POST", route, `{"model_name":"m","token_ids":`+tokensOf(t, want.raw)+`}`)
		h.want(byMsgs, 200)
		if route != "/select" && byMsgs.raw != byIDs.raw {
			t.Fatalf("%s: by messages %s, by ids %s", route, byMsgs.raw, byIDs.raw)
		}
	}
	r := h.do("POST", "/select_and_reserve", `{"model_name":"m","selection_id":"c1","messages":`+msgs+`,"chat_template":`+tmpl+`}`)
	h.want(r, 200, `"isl_tokens":`+strconv.Itoa(strings.Count(tokensOf(t, want.raw), ",")+1))
	h.want(h.do("POST", "/select", `{"model_name":"m","messages":[{"role":"tool","content":"x"}],"chat_template":`+tmpl+`}`), 400, "not tool")
}

// tokensOf is the tokens array of a /tokenize answer, as JSON.
func tokensOf(t *testing.T, raw string) string {
	t.Helper()
	var v struct{ Tokens []uint32 }
	if err := json.Unmarshal([]byte(raw), &v); err != nil {
		t.Fatal(err)
	}
	b, _ := json.Marshal(v.Tokens)
	return string(b)
}

// TestClientMessages: the Go client's Prompt.Messages, Tools and
// ChatTemplate reach the selector as messages: SelectAndReserve books the
// rendered prompt's tokens.
func TestClientMessages(t *testing.T) {
	h := start(t, withTokenizer(t))
	h.want(h.do("POST", "/workers", `{"worker_id":1,"model_name":"m","endpoint":"http://w1","block_size":4}`), 201)
	c, err := client.New(h.base, client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	msgs := []client.ChatMessage{{"role": "user", "content": "ab b"}, {"role": "assistant", "content": "ab"}}
	sel, err := c.SelectAndReserve(t.Context(), &client.SelectRequest{SelectionID: "c", ModelName: "m",
		Prompt: client.Prompt{Messages: msgs, ChatTemplate: chatTemplate, Tools: []any{map[string]any{"type": "function"}}}})
	if err != nil {
		t.Fatal(err)
	}
	rendered := "<s>user ab b\nassistant ab\ntools [{\"type\": \"function\"}]\nassistant "
	want := strings.Count(tokensOf(t, h.do("POST", "/tokenize", `{"prompt":`+strconv.Quote(rendered)+`,"add_special_tokens":false}`).raw), ",") + 1
	if sel.ISLTokens != int64(want) {
		t.Fatalf("isl_tokens %d, want %d (the rendered prompt's)", sel.ISLTokens, want)
	}
}

// TestTokenizerCacheMetrics: each configured tokenizer's word and chunk
// caches are in /metrics with their bytes, limit, hits and misses; a long
// prompt tokenized twice shows chunk hits.
func TestTokenizerCacheMetrics(t *testing.T) {
	h := start(t, withTokenizer(t))
	long := strings.Repeat("ab abab b ", 400)
	for range 2 {
		h.want(h.do("POST", "/tokenize", `{"prompt":`+strconv.Quote(long)+`}`), 200)
	}
	m := h.do("GET", "/metrics", "").raw
	for _, want := range []string{
		`kvselect_tokenizer_cache_limit_bytes{model="m",cache="word"} 8.388608e+06`,
		`kvselect_tokenizer_cache_limit_bytes{model="m",cache="chunk"} 3.3554432e+07`,
		`kvselect_tokenizer_cache_hits_total{model="m",cache="chunk"} `,
		`# TYPE kvselect_tokenizer_cache_bytes gauge`,
	} {
		if !strings.Contains(m, want) {
			t.Fatalf("metrics lack %q:\n%s", want, m)
		}
	}
	if strings.Contains(m, `kvselect_tokenizer_cache_hits_total{model="m",cache="chunk"} 0`+"\n") {
		t.Fatal("no chunk hits after the same long prompt twice")
	}
}
