package bench

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/kvselect/kvselect/core"
	"github.com/kvselect/kvselect/radix"
	"github.com/kvselect/kvselect/zmqin"
)

// openAIEngine is an engine of block size 4 with two ranks, an index fed
// by its real KV events over ZMQ, and its OpenAI endpoint on loopback.
type openAIEngine struct {
	e   *Engine
	srv *OpenAIServer
	ix  *radix.Index
	in  *zmqin.Ingress
}

func newOpenAIEngine(t *testing.T, cfg OpenAIConfig) *openAIEngine {
	t.Helper()
	e := newEngine(t, EngineConfig{Ranks: 2, BlockSize: 4, CapacityBlocks: 256, Endpoint: "tcp://127.0.0.1:0"})
	in, err := zmqin.New(zmqin.Config{DialBackoffMin: time.Millisecond, DialBackoffMax: 10 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = in.Close() })
	ix, _ := radix.New(radix.Config{})
	eps := e.Endpoints()
	in.Sync(1, 4, []core.RankSource{{DPRank: 0, Endpoint: eps[0]}, {DPRank: 1, Endpoint: eps[1]}}, indexSink{ix})
	waitFor(t, "subscribed", func() bool { return e.Subscribers(0) == 1 && e.Subscribers(1) == 1 })
	srv, err := e.ServeOpenAI("127.0.0.1:0", cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Close() })
	return &openAIEngine{e: e, srv: srv, ix: ix, in: in}
}

// depth is how many leading blocks of toks the index holds on rank.
func (o *openAIEngine) depth(rank int, toks []uint32) int {
	var r radix.Result
	o.ix.Match(radix.LocalHashes(nil, toks, 4, radix.HashSeed("", "")), &r)
	for _, m := range r.Matches {
		if m.Worker == (radix.WorkerKey{WorkerID: 1, DPRank: uint32(rank)}) {
			return int(m.Device)
		}
	}
	return 0
}

// post sends body to path with headers (key, value pairs) and returns the
// response, its body unread.
func (o *openAIEngine) post(t *testing.T, path, body string, headers ...string) *http.Response {
	t.Helper()
	req, err := http.NewRequest("POST", o.srv.URL()+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { res.Body.Close() })
	return res
}

// sse reads a stream's data events to its end: the JSON payloads, and
// whether data: [DONE] ended it.
func sse(t *testing.T, res *http.Response) (events []map[string]any, done bool) {
	t.Helper()
	if ct := res.Header.Get("Content-Type"); ct != "text/event-stream; charset=utf-8" || res.StatusCode != 200 {
		t.Fatalf("stream: %d %q", res.StatusCode, ct)
	}
	sc := bufio.NewScanner(res.Body)
	for sc.Scan() {
		line := sc.Text()
		if line == "" {
			continue
		}
		payload, ok := strings.CutPrefix(line, "data: ")
		if !ok {
			t.Fatalf("not an SSE data line: %q", line)
		}
		if done {
			t.Fatalf("%q after [DONE]", line)
		}
		if payload == "[DONE]" {
			done = true
			continue
		}
		var ev map[string]any
		if err := json.Unmarshal([]byte(payload), &ev); err != nil {
			t.Fatalf("%q: %v", payload, err)
		}
		events = append(events, ev)
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return events, done
}

func decode(t *testing.T, res *http.Response) map[string]any {
	t.Helper()
	var v map[string]any
	if err := json.NewDecoder(res.Body).Decode(&v); err != nil {
		t.Fatal(err)
	}
	return v
}

// usageOf is an event's usage as prompt, completion, total and cached
// tokens (-1 when absent).
func usageOf(v map[string]any) [4]int {
	u, ok := v["usage"].(map[string]any)
	if !ok {
		return [4]int{-1, -1, -1, -1}
	}
	n := func(x any) int {
		if f, ok := x.(float64); ok {
			return int(f)
		}
		return -1
	}
	d, _ := u["prompt_tokens_details"].(map[string]any)
	return [4]int{n(u["prompt_tokens"]), n(u["completion_tokens"]), n(u["total_tokens"]), n(d["cached_tokens"])}
}

func ids(n, from int) string {
	s := make([]string, n)
	for i := range s {
		s[i] = fmt.Sprint(from + i)
	}
	return "[" + strings.Join(s, ",") + "]"
}

func tokensFrom(n, from int) []uint32 {
	out := make([]uint32, n)
	for i := range out {
		out[i] = uint32(from + i)
	}
	return out
}

// TestOpenAICompletionsStream: a streamed completion of token ids is
// served on rank 0, its blocks reach an index over the engine's real KV
// events, and the stream is vLLM's: one chunk per token (text_completion,
// the id, the model, finish_reason on the last), the usage chunk with no
// choices, then [DONE]. The next turn, extending the prompt, reports the
// blocks it found cached, not streamed.
func TestOpenAICompletionsStream(t *testing.T) {
	noLeak(t)
	o := newOpenAIEngine(t, OpenAIConfig{Model: "m"})
	res := o.post(t, "/v1/completions", `{"model":"m","prompt":`+ids(10, 1)+`,"max_tokens":6,"stream":true,"stream_options":{"include_usage":true}}`)
	events, done := sse(t, res)
	if !done || len(events) != 7 {
		t.Fatalf("%d events, done %v: %v", len(events), done, events)
	}
	id := events[0]["id"].(string)
	if !strings.HasPrefix(id, "cmpl-") {
		t.Fatalf("id %q", id)
	}
	var text string
	for i, ev := range events[:6] {
		if ev["id"] != id || ev["object"] != "text_completion" || ev["model"] != "m" || ev["created"] == nil || ev["usage"] != nil {
			t.Fatalf("chunk %d: %v", i, ev)
		}
		ch := ev["choices"].([]any)
		c := ch[0].(map[string]any)
		if len(ch) != 1 || c["index"] != 0.0 {
			t.Fatalf("chunk %d choices %v", i, ch)
		}
		text += c["text"].(string)
		if want := any(nil); i == 5 {
			if c["finish_reason"] != "length" {
				t.Fatalf("last chunk %v", c)
			}
		} else if c["finish_reason"] != want {
			t.Fatalf("chunk %d finish %v", i, c["finish_reason"])
		}
	}
	if text != "abcdef" {
		t.Fatalf("text %q", text)
	}
	last := events[6]
	if len(last["choices"].([]any)) != 0 || usageOf(last) != [4]int{10, 6, 16, 0} || last["id"] != id {
		t.Fatalf("usage chunk %v", last)
	}
	waitFor(t, "the prompt's 2 blocks in the index on rank 0", func() bool { return o.depth(0, tokensFrom(10, 1)) == 2 })
	if o.depth(1, tokensFrom(10, 1)) != 0 {
		t.Fatal("rank 1 holds the prompt")
	}

	// The next turn, not streamed: 8 of its tokens were cached.
	v := decode(t, o.post(t, "/v1/completions", `{"prompt":`+ids(14, 1)+`,"max_tokens":3}`))
	c := v["choices"].([]any)[0].(map[string]any)
	if v["object"] != "text_completion" || v["model"] != "m" || c["text"] != "abc" || c["finish_reason"] != "length" || usageOf(v) != [4]int{14, 3, 17, 8} {
		t.Fatalf("second turn %v", v)
	}
	waitFor(t, "the turn's third block", func() bool { return o.depth(0, tokensFrom(14, 1)) == 3 })
	if st := o.srv.Stats(); st != (OpenAIStats{Requests: 2, Streams: 1, PromptTokens: 24, CachedTokens: 8, CompletionTokens: 9}) {
		t.Fatalf("stats %+v", st)
	}
}

// TestOpenAIChat: chat requests render their messages (no template: the
// engine's own rendering, tokenized as UTF-8 bytes without a tokenizer),
// stream the assistant's role first, then the content deltas; the
// X-data-parallel-rank header picks the rank; continuous usage stats
// count every chunk; not streamed, one chat.completion.
func TestOpenAIChat(t *testing.T) {
	noLeak(t)
	o := newOpenAIEngine(t, OpenAIConfig{AnyModel: true})
	msgs := `[{"role":"system","content":"be brief"},{"role":"user","content":[{"type":"text","text":"hi"}]}]`
	res := o.post(t, "/v1/chat/completions", `{"model":"llama","messages":`+msgs+`,"max_completion_tokens":3,"stream":true,"stream_options":{"continuous_usage_stats":true}}`, "X-data-parallel-rank", "1")
	events, done := sse(t, res)
	if !done || len(events) != 5 { // role, 3 tokens, usage (include_usage defaults to true)
		t.Fatalf("%d events: %v", len(events), events)
	}
	rendered := "<|system|>\nbe brief\n<|user|>\nhi\n<|assistant|>\n"
	prompt := make([]uint32, len(rendered))
	for i := range rendered {
		prompt[i] = uint32(rendered[i])
	}
	var content string
	for i, ev := range events[:4] {
		if ev["object"] != "chat.completion.chunk" || ev["model"] != "llama" || !strings.HasPrefix(ev["id"].(string), "chatcmpl-") {
			t.Fatalf("chunk %d: %v", i, ev)
		}
		d := ev["choices"].([]any)[0].(map[string]any)["delta"].(map[string]any)
		if i == 0 {
			if !reflect.DeepEqual(d, map[string]any{"role": "assistant", "content": ""}) || ev["usage"] != nil {
				t.Fatalf("role chunk %v", ev)
			}
			continue
		}
		content += d["content"].(string)
		if u := usageOf(ev); u != [4]int{len(prompt), i, len(prompt) + i, 0} {
			t.Fatalf("chunk %d usage %v", i, u)
		}
	}
	if content != "abc" || usageOf(events[4]) != [4]int{len(prompt), 3, len(prompt) + 3, 0} {
		t.Fatalf("content %q, usage %v", content, events[4])
	}
	blocks := len(prompt) / 4
	waitFor(t, "the rendered chat's blocks on rank 1", func() bool { return o.depth(1, prompt) == blocks })

	// The same chat, not streamed, on rank 1 again: its blocks cached.
	v := decode(t, o.post(t, "/v1/chat/completions", `{"messages":`+msgs+`,"max_tokens":2}`, "x-data-parallel-rank", "1"))
	ch := v["choices"].([]any)[0].(map[string]any)
	if v["object"] != "chat.completion" || v["model"] != "mock" || !reflect.DeepEqual(ch["message"], map[string]any{"role": "assistant", "content": "ab"}) ||
		ch["finish_reason"] != "length" || usageOf(v) != [4]int{len(prompt), 2, len(prompt) + 2, blocks * 4} {
		t.Fatalf("chat %v", v)
	}
	// A stream without stream_options: no usage chunk.
	events, done = sse(t, o.post(t, "/v1/chat/completions", `{"messages":[{"role":"user","content":"x"}],"max_tokens":2,"stream":true}`))
	if !done || len(events) != 3 || events[2]["choices"].([]any)[0].(map[string]any)["finish_reason"] != "length" {
		t.Fatalf("%v", events)
	}
}

// wordTokenizer is a test tokenizer: one token per byte, offset by 100,
// a BOS of 1 when special tokens are added.
type wordTokenizer struct{}

func (wordTokenizer) Encode(dst []uint32, s string, addSpecial bool) []uint32 {
	if addSpecial {
		dst = append(dst, 1)
	}
	for i := range len(s) {
		dst = append(dst, uint32(s[i])+100)
	}
	return dst
}
func (wordTokenizer) Decode([]uint32, bool) string { return "" }
func (wordTokenizer) VocabSize() int               { return 400 }

// TestOpenAITextPrompts: without a tokenizer a text prompt is its UTF-8
// bytes, so a longer text sharing a prefix finds the prefix's blocks
// cached; with one, its encoding (special tokens added to a completion,
// as vLLM adds them), and token ids past its vocabulary are refused.
func TestOpenAITextPrompts(t *testing.T) {
	noLeak(t)
	o := newOpenAIEngine(t, OpenAIConfig{})
	if u := usageOf(decode(t, o.post(t, "/v1/completions", `{"prompt":"hello, world","max_tokens":1}`))); u != [4]int{12, 1, 13, 0} {
		t.Fatalf("usage %v", u)
	}
	if u := usageOf(decode(t, o.post(t, "/v1/completions", `{"prompt":"hello, world, again","max_tokens":1}`))); u != [4]int{19, 1, 20, 12} {
		t.Fatalf("usage %v", u)
	}
	waitFor(t, "the bytes' blocks", func() bool { return o.depth(0, []uint32{'h', 'e', 'l', 'l', 'o', ',', ' ', 'w'}) == 2 })

	tk := newOpenAIEngine(t, OpenAIConfig{Tokenizer: wordTokenizer{}})
	if u := usageOf(decode(t, tk.post(t, "/v1/completions", `{"prompt":"abc","max_tokens":1}`))); u != [4]int{4, 1, 5, 0} {
		t.Fatalf("usage %v", u)
	}
	waitFor(t, "BOS and the tokens", func() bool { return tk.depth(0, []uint32{1, 'a' + 100, 'b' + 100, 'c' + 100}) == 1 })
	if u := usageOf(decode(t, tk.post(t, "/v1/completions", `{"prompt":"abc","max_tokens":1,"add_special_tokens":false}`))); u != [4]int{3, 1, 4, 0} {
		t.Fatalf("usage %v", u)
	}
	res := tk.post(t, "/v1/completions", `{"prompt":[1,2,400]}`)
	if v := decode(t, res); res.StatusCode != 400 || !strings.Contains(fmt.Sprint(v), "Token id 400 is out of vocabulary") {
		t.Fatalf("%d %v", res.StatusCode, v)
	}
}

// TestOpenAIErrors: every bad request gets its status and OpenAI's
// error envelope, counted; the routes answer their method only.
func TestOpenAIErrors(t *testing.T) {
	noLeak(t)
	o := newOpenAIEngine(t, OpenAIConfig{Model: "m", MaxTokensLimit: 100, MaxBodyBytes: 1 << 10})
	for _, c := range []struct {
		path, body string
		headers    []string
		status     int
		msg        string
	}{
		{"/v1/completions", `{"prompt":`, nil, 400, "not an OpenAI request"},
		{"/v1/completions", `[1,2]`, nil, 400, "not an OpenAI request"},
		{"/v1/completions", `{"max_tokens":3}`, nil, 400, "At least one of `prompt`"},
		{"/v1/completions", `{"prompt":null}`, nil, 400, "At least one of `prompt`"},
		{"/v1/completions", `{"prompt":["a","b"]}`, nil, 400, "no batch of prompts"},
		{"/v1/completions", `{"prompt":[[1,2],[3]]}`, nil, 400, "no batch of prompts"},
		{"/v1/completions", `{"prompt":7}`, nil, 400, "want a string or a list of token ids"},
		{"/v1/completions", `{"prompt":[1,-2]}`, nil, 400, "Token id -2 is out of vocabulary"},
		{"/v1/completions", `{"prompt":[]}`, nil, 400, "the prompt is empty"},
		{"/v1/completions", `{"prompt":""}`, nil, 400, "the prompt is empty"},
		{"/v1/completions", `{"prompt":[1],"max_tokens":0}`, nil, 400, "max_tokens must be in [1, 100], got 0."},
		{"/v1/completions", `{"prompt":[1],"max_tokens":101}`, nil, 400, "max_tokens must be in [1, 100], got 101."},
		{"/v1/completions", `{"prompt":[1],"max_tokens":1.5}`, nil, 400, "not an OpenAI request"},
		{"/v1/completions", `{"prompt":[1],"stream_options":{"include_usage":true}}`, nil, 400, "Stream options can only be defined when `stream=True`."},
		{"/v1/completions", `{"prompt":[1],"n":2}`, nil, 400, "one choice"},
		{"/v1/completions", `{"model":"other","prompt":[1]}`, nil, 404, "The model `other` does not exist."},
		{"/v1/completions", `{"prompt":[1]}`, []string{"X-data-parallel-rank", "2"}, 400, "X-data-parallel-rank \"2\""},
		{"/v1/completions", `{"prompt":[1]}`, []string{"X-data-parallel-rank", "x"}, 400, "X-data-parallel-rank"},
		{"/v1/completions", `{"prompt":"` + strings.Repeat("a", 1<<10) + `"}`, nil, 413, "larger than 1024 bytes"},
		{"/v1/chat/completions", `{"prompt":"x"}`, nil, 400, "messages: required"},
		{"/v1/chat/completions", `{"messages":[]}`, nil, 400, "messages: empty"},
		{"/v1/chat/completions", `{"messages":{"role":"user"}}`, nil, 400, "want a list of message objects"},
		{"/v1/chat/completions", `{"messages":[{"content":"x"}]}`, nil, 400, "messages[0]: no role"},
		{"/v1/chat/completions", `{"messages":[{"role":"user","content":[{"type":"image_url"}]}]}`, nil, 400, "text parts only"},
		{"/v1/chat/completions", `{"messages":[{"role":"user","content":3}]}`, nil, 400, "want a string or a list of content parts"},
		{"/v1/chat/completions", `{"messages":[{"role":"user","content":"x"}],"max_completion_tokens":0}`, nil, 400, "max_completion_tokens must be in"},
		{"/v1/embeddings", `{}`, nil, 404, "no route /v1/embeddings"},
	} {
		res := o.post(t, c.path, c.body, c.headers...)
		b, _ := io.ReadAll(res.Body)
		var e struct {
			Error *struct {
				Message *string `json:"message"`
				Type    *string `json:"type"`
				Param   any     `json:"param"`
				Code    *int    `json:"code"`
			} `json:"error"`
		}
		if err := json.Unmarshal(b, &e); err != nil || e.Error == nil || e.Error.Message == nil || e.Error.Type == nil || e.Error.Code == nil || !strings.Contains(string(b), `"param":null`) {
			t.Fatalf("%s %s: not the error envelope: %s", c.path, c.body, b)
		}
		if res.StatusCode != c.status || *e.Error.Code != c.status || !strings.Contains(*e.Error.Message, c.msg) || res.Header.Get("Content-Type") != "application/json" {
			t.Errorf("%s %s: %d %s, want %d with %q", c.path, c.body, res.StatusCode, b, c.status, c.msg)
		}
		if c.status == 400 && *e.Error.Type != "BadRequestError" || c.status == 404 && *e.Error.Type != "NotFoundError" {
			t.Errorf("%s: type %s", b, *e.Error.Type)
		}
	}
	res, err := http.Get(o.srv.URL() + "/v1/completions")
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != 405 || res.Header.Get("Allow") != "POST" {
		t.Fatalf("GET /v1/completions: %d", res.StatusCode)
	}
	if res := o.post(t, "/health", ""); res.StatusCode != 405 {
		t.Fatalf("POST /health: %d", res.StatusCode)
	}
	if st := o.srv.Stats(); st.Errors != 29 || st.Requests != 0 || st.PromptTokens != 0 {
		t.Fatalf("stats %+v", st)
	}
	if o.e.Stats().Prompts != 0 {
		t.Fatal("a refused request was served")
	}
}

// TestOpenAIModelsHealth: GET /v1/models lists the served model, GET
// /health is 200.
func TestOpenAIModelsHealth(t *testing.T) {
	noLeak(t)
	o := newOpenAIEngine(t, OpenAIConfig{Model: "llama"})
	res, err := http.Get(o.srv.URL() + "/v1/models")
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	v := decode(t, res)
	data := v["data"].([]any)
	if v["object"] != "list" || len(data) != 1 || data[0].(map[string]any)["id"] != "llama" || data[0].(map[string]any)["object"] != "model" {
		t.Fatalf("%v", v)
	}
	h, err := http.Get(o.srv.URL() + "/health")
	if err != nil {
		t.Fatal(err)
	}
	h.Body.Close()
	if h.StatusCode != 200 {
		t.Fatalf("/health %d", h.StatusCode)
	}
}

// TestOpenAIStreamCut: a client that goes away mid-stream stops it (counted
// aborted), and Close during a stream returns once its handler has: no
// goroutine outlives the server.
func TestOpenAIStreamCut(t *testing.T) {
	noLeak(t)
	o := newOpenAIEngine(t, OpenAIConfig{TokenInterval: 2 * time.Millisecond, MaxTokensLimit: 100000})
	res := o.post(t, "/v1/completions", `{"prompt":[1,2,3,4],"max_tokens":100000,"stream":true}`)
	line, err := bufio.NewReader(res.Body).ReadString('\n')
	if err != nil || !strings.HasPrefix(line, "data: {") {
		t.Fatalf("%q %v", line, err)
	}
	res.Body.Close()
	waitFor(t, "the cut stream counted", func() bool { return o.srv.Stats().Aborted == 1 })
	if c := o.srv.Stats().CompletionTokens; c == 0 || c >= 100000 {
		t.Fatalf("completion tokens of the cut stream: %d", c)
	}

	res = o.post(t, "/v1/completions", `{"prompt":[1,2,3,4],"max_tokens":100000,"stream":true}`)
	if _, err := bufio.NewReader(res.Body).ReadString('\n'); err != nil {
		t.Fatal(err)
	}
	closed := make(chan error, 1)
	go func() { closed <- o.srv.Close() }()
	select {
	case <-closed:
	case <-time.After(10 * time.Second):
		t.Fatal("Close did not return during a stream")
	}
	if o.srv.Stats().Aborted != 2 {
		t.Fatalf("stats %+v", o.srv.Stats())
	}
	if _, err := http.Get(o.srv.URL() + "/health"); err == nil {
		t.Fatal("answering after Close")
	}
}
