package epp

import (
	"fmt"
	"strings"
	"testing"
)

// TestCarriesToken: the stream events engines send, as vLLM
// (vllm/entrypoints/openai/serving_chat.py, serving_completion.py),
// SGLang and OpenAI write them: output counts, the role-only first chat
// chunk, the empty finish chunk and a usage-only chunk do not.
func TestCarriesToken(t *testing.T) {
	for _, c := range []struct {
		ev   string
		want bool
	}{
		{`{"id":"cmpl-1","object":"text_completion","created":1,"model":"m","choices":[{"index":0,"text":" the","logprobs":null,"finish_reason":null}]}`, true},
		{`{"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"role":"assistant","content":""},"logprobs":null,"finish_reason":null}]}`, false},
		{`{"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"content":"Hi"},"logprobs":null,"finish_reason":null}]}`, true},
		{`{"id":"chatcmpl-1","object":"chat.completion.chunk","choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}`, false},
		{`{"id":"chatcmpl-1","object":"chat.completion.chunk","choices":[],"usage":{"prompt_tokens":5,"completion_tokens":3}}`, false},
		{`{"choices":[{"index":0,"delta":{"reasoning_content":"Let"},"finish_reason":null}]}`, true},
		{`{"choices":[{"index":0,"delta":{"reasoning":"so"},"finish_reason":null}]}`, true},
		{`{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"{\""}}]}}]}`, true},
		{`{"choices":[{"index":0,"delta":{"content":null,"tool_calls":[]}}]}`, false},
		{`{"choices": [{"index": 0, "delta": {"content": "spaced"}}]}`, true},
		{`{"choices":[{"index":0,"text":"","finish_reason":"length"}]}`, false},
	} {
		if got := carriesToken([]byte(c.ev)); got != c.want {
			t.Errorf("%s: %v, want %v", c.ev, got, c.want)
		}
	}
}

// TestEPPChatStreamCountsOutputOnly: a chat stream as vLLM sends it (a
// role-only first chunk, 31 content chunks, a finish chunk without
// content, [DONE]) is 31 output tokens: one output block of 16, where
// counting every event (33) gave two.
func TestEPPChatStreamCountsOutputOnly(t *testing.T) {
	g := newGateway(t, 2, Config{}, nil)
	c := g.open()
	c.send(reqHeaders(false, nil))
	c.send(reqBody(chatBody, true))
	picked(t, c.recv())
	c.echoed()
	c.send(respHeaders(true, false))
	c.recv()
	var b strings.Builder
	b.WriteString("data: {\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":\"\"},\"finish_reason\":null}]}\n\n")
	for i := range 31 {
		fmt.Fprintf(&b, "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"t%d\"},\"finish_reason\":null}]}\n\n", i)
	}
	b.WriteString("data: {\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"length\"}]}\n\ndata: [DONE]\n\n")
	c.send(respBody(b.String(), true))
	c.recv()
	if st := g.srv.Stats(); st.OutputBlocks != 1 || st.Freed[FreeComplete] != 1 {
		t.Fatalf("output blocks %d, frees %v: want 1 block of 31 tokens, freed", st.OutputBlocks, st.Freed)
	}
	_ = c.s.CloseSend()
	if g.settle() != 0 {
		t.Fatal("leak")
	}
}
