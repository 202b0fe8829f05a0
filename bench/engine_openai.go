package bench

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/http"
	"strings"
)

// The OpenAI endpoint's request and response shapes: vLLM's
// CompletionRequest, ChatCompletionRequest, CompletionResponse,
// CompletionStreamResponse, ChatCompletionResponse and
// ChatCompletionStreamResponse (vllm-project/vllm:vllm/entrypoints/openai/protocol.py),
// in the fields the simulated engine reads or writes.

// openAIRequest is what the engine reads of a completions or chat body;
// other fields (sampling, logprobs, ...) are accepted and ignored.
type openAIRequest struct {
	Model               *string         `json:"model"`
	Prompt              json.RawMessage `json:"prompt"`
	Messages            json.RawMessage `json:"messages"`
	MaxTokens           *int            `json:"max_tokens"`
	MaxCompletionTokens *int            `json:"max_completion_tokens"`
	N                   *int            `json:"n"`
	Stream              *bool           `json:"stream"`
	StreamOptions       *struct {
		IncludeUsage         *bool `json:"include_usage"`
		ContinuousUsageStats *bool `json:"continuous_usage_stats"`
	} `json:"stream_options"`
	AddSpecialTokens *bool `json:"add_special_tokens"`
}

// genRequest is a parsed request.
type genRequest struct {
	chat      bool
	model     string
	tokens    []uint32
	maxTokens int
	stream    bool
	// includeUsage: a final usage chunk; continuousUsage: usage on every
	// token chunk (vLLM's stream_options).
	includeUsage, continuousUsage bool
	cached                        int // prompt tokens the pool held
}

// parse reads a completions (chat false) or chat body, returning the
// status of its error (400, or 404 for an unknown model).
func (s *OpenAIServer) parse(body []byte, chat bool) (*genRequest, int, error) {
	var b openAIRequest
	if err := json.Unmarshal(body, &b); err != nil {
		return nil, http.StatusBadRequest, fmt.Errorf("the body is not an OpenAI request: %v", err)
	}
	req := &genRequest{chat: chat, model: s.cfg.Model}
	if b.Model != nil && *b.Model != s.cfg.Model {
		if !s.cfg.AnyModel {
			return nil, http.StatusNotFound, fmt.Errorf("The model `%s` does not exist.", *b.Model)
		}
		req.model = *b.Model
	}
	if b.N != nil && *b.N != 1 {
		return nil, http.StatusBadRequest, fmt.Errorf("n = %d: the simulated engine generates one choice (n = 1)", *b.N)
	}
	req.stream = b.Stream != nil && *b.Stream
	if b.StreamOptions != nil {
		if !req.stream {
			return nil, http.StatusBadRequest, errors.New("Stream options can only be defined when `stream=True`.")
		}
		// vLLM's StreamOptions: include_usage defaults to true once
		// stream_options is given.
		req.includeUsage = b.StreamOptions.IncludeUsage == nil || *b.StreamOptions.IncludeUsage
		req.continuousUsage = b.StreamOptions.ContinuousUsageStats != nil && *b.StreamOptions.ContinuousUsageStats
	}
	req.maxTokens = s.cfg.DefaultMaxTokens
	name, mt := "max_tokens", b.MaxTokens
	if chat && b.MaxCompletionTokens != nil {
		name, mt = "max_completion_tokens", b.MaxCompletionTokens
	}
	if mt != nil {
		if *mt < 1 || *mt > s.cfg.MaxTokensLimit {
			return nil, http.StatusBadRequest, fmt.Errorf("%s must be in [1, %d], got %d.", name, s.cfg.MaxTokensLimit, *mt)
		}
		req.maxTokens = *mt
	}
	var err error
	if chat {
		add := b.AddSpecialTokens != nil && *b.AddSpecialTokens
		req.tokens, err = s.chatTokens(b.Messages, add)
	} else {
		add := b.AddSpecialTokens == nil || *b.AddSpecialTokens
		req.tokens, err = s.promptTokens(b.Prompt, add)
	}
	if err != nil {
		return nil, http.StatusBadRequest, err
	}
	if len(req.tokens) == 0 {
		return nil, http.StatusBadRequest, errors.New("the prompt is empty")
	}
	return req, 0, nil
}

// present is raw without surrounding space, nil for an absent or null
// field.
func present(raw json.RawMessage) json.RawMessage {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || string(raw) == "null" {
		return nil
	}
	return raw
}

// promptTokens reads a completion's prompt: one string (tokenized) or one
// list of token ids.
func (s *OpenAIServer) promptTokens(raw json.RawMessage, addSpecial bool) ([]uint32, error) {
	p := present(raw)
	if p == nil {
		return nil, errors.New("At least one of `prompt` or `prompt_embeds` must be set.")
	}
	switch p[0] {
	case '"':
		var text string
		if err := json.Unmarshal(p, &text); err != nil {
			return nil, fmt.Errorf("prompt: %v", err)
		}
		return s.tokenize(text, addSpecial), nil
	case '[':
		var ids []int64
		if err := json.Unmarshal(p, &ids); err != nil {
			return nil, errors.New("prompt: want one string or one list of token ids (the simulated engine serves no batch of prompts)")
		}
		vocab := int64(math.MaxUint32) + 1
		if s.cfg.Tokenizer != nil {
			vocab = int64(s.cfg.Tokenizer.VocabSize())
		}
		out := make([]uint32, len(ids))
		for i, id := range ids {
			if id < 0 || id >= vocab {
				return nil, fmt.Errorf("Token id %d is out of vocabulary", id)
			}
			out[i] = uint32(id)
		}
		return out, nil
	}
	return nil, errors.New("prompt: want a string or a list of token ids")
}

// tokenize is the configured tokenizer's encoding of text, else its
// UTF-8 bytes.
func (s *OpenAIServer) tokenize(text string, addSpecial bool) []uint32 {
	if s.cfg.Tokenizer != nil {
		return s.cfg.Tokenizer.Encode(nil, text, addSpecial)
	}
	out := make([]uint32, len(text))
	for i := range len(text) {
		out[i] = uint32(text[i])
	}
	return out
}

// chatMessage is a message of a chat request: its content a string, a
// list of text parts, or null.
type chatMessage struct {
	Role    string          `json:"role"`
	Content json.RawMessage `json:"content"`
}

// chatTokens renders a chat's messages and tokenizes the result. The
// engine has no chat template: each message is "<|role|>\n" content "\n",
// then the generation prompt "<|assistant|>\n", so that a conversation's
// next turn (its messages extended) renders to an extension of the
// previous turn's text, as a model's template does.
func (s *OpenAIServer) chatTokens(raw json.RawMessage, addSpecial bool) ([]uint32, error) {
	m := present(raw)
	if m == nil {
		return nil, errors.New("messages: required")
	}
	var msgs []chatMessage
	if err := json.Unmarshal(m, &msgs); err != nil {
		return nil, fmt.Errorf("messages: want a list of message objects: %v", err)
	}
	if len(msgs) == 0 {
		return nil, errors.New("messages: empty")
	}
	var text strings.Builder
	for i, msg := range msgs {
		if msg.Role == "" {
			return nil, fmt.Errorf("messages[%d]: no role", i)
		}
		content, err := messageText(msg.Content)
		if err != nil {
			return nil, fmt.Errorf("messages[%d].content: %v", i, err)
		}
		text.WriteString("<|" + msg.Role + "|>\n" + content + "\n")
	}
	text.WriteString("<|assistant|>\n")
	return s.tokenize(text.String(), addSpecial), nil
}

// messageText is a message content's text: a string, the text parts of
// a list joined by newlines, or "" for null.
func messageText(raw json.RawMessage) (string, error) {
	c := present(raw)
	if c == nil {
		return "", nil
	}
	switch c[0] {
	case '"':
		var s string
		err := json.Unmarshal(c, &s)
		return s, err
	case '[':
		var parts []struct {
			Type string `json:"type"`
			Text string `json:"text"`
		}
		if err := json.Unmarshal(c, &parts); err != nil {
			return "", err
		}
		texts := make([]string, 0, len(parts))
		for _, p := range parts {
			if p.Type != "text" {
				return "", fmt.Errorf("a %q part: the simulated engine reads text parts only", p.Type)
			}
			texts = append(texts, p.Text)
		}
		return strings.Join(texts, "\n"), nil
	}
	return "", errors.New("want a string or a list of content parts")
}

// usageInfo is vLLM's UsageInfo, with prompt_tokens_details.
type usageInfo struct {
	PromptTokens        int `json:"prompt_tokens"`
	TotalTokens         int `json:"total_tokens"`
	CompletionTokens    int `json:"completion_tokens"`
	PromptTokensDetails struct {
		CachedTokens int `json:"cached_tokens"`
	} `json:"prompt_tokens_details"`
}

func usage(req *genRequest, completion int) usageInfo {
	u := usageInfo{PromptTokens: len(req.tokens), CompletionTokens: completion, TotalTokens: len(req.tokens) + completion}
	u.PromptTokensDetails.CachedTokens = req.cached
	return u
}

// delta is a chat chunk's DeltaMessage.
type delta struct {
	Role    string  `json:"role,omitempty"`
	Content *string `json:"content,omitempty"`
}

// streamChoice is a completion chunk's choice (text) or a chat chunk's
// (delta).
type streamChoice struct {
	Index        int     `json:"index"`
	Text         *string `json:"text,omitempty"`
	Delta        *delta  `json:"delta,omitempty"`
	Logprobs     *int    `json:"logprobs"`
	FinishReason *string `json:"finish_reason"`
	StopReason   *int    `json:"stop_reason"`
}

// streamChunk is CompletionStreamResponse or ChatCompletionStreamResponse.
type streamChunk struct {
	ID      string         `json:"id"`
	Object  string         `json:"object"`
	Created int64          `json:"created"`
	Model   string         `json:"model"`
	Choices []streamChoice `json:"choices"`
	Usage   *usageInfo     `json:"usage,omitempty"`
}

// objectName is a response's object.
func objectName(chat, stream bool) string {
	switch {
	case !chat:
		return "text_completion"
	case stream:
		return "chat.completion.chunk"
	}
	return "chat.completion"
}

// token is the text of generated token i.
func token(i int) string { return string(rune('a' + i%26)) }

// lengthReason is the finish reason of a response that generated its
// max_tokens.
var lengthReason = "length"

// chunk is the stream's chunk of generated token i; i < 0 is a chat's
// first chunk, the assistant's role with empty content.
func (s *OpenAIServer) chunk(req *genRequest, id string, created int64, i int) streamChunk {
	c := streamChunk{ID: id, Object: objectName(req.chat, true), Created: created, Model: req.model, Choices: make([]streamChoice, 1)}
	ch := &c.Choices[0]
	text := ""
	if i >= 0 {
		text = token(i)
		if i == req.maxTokens-1 {
			ch.FinishReason = &lengthReason
		}
		if req.continuousUsage {
			u := usage(req, i+1)
			c.Usage = &u
		}
	}
	if req.chat {
		ch.Delta = &delta{Content: &text}
		if i < 0 {
			ch.Delta.Role = "assistant"
		}
	} else {
		ch.Text = &text
	}
	return c
}

// whole is the response of a request that does not stream.
func (s *OpenAIServer) whole(req *genRequest) any {
	var text strings.Builder
	for i := range req.maxTokens {
		text.WriteString(token(i))
	}
	out := text.String()
	type message struct {
		Role    string `json:"role"`
		Content string `json:"content"`
	}
	type choice struct {
		Index        int      `json:"index"`
		Text         *string  `json:"text,omitempty"`
		Message      *message `json:"message,omitempty"`
		Logprobs     *int     `json:"logprobs"`
		FinishReason string   `json:"finish_reason"`
		StopReason   *int     `json:"stop_reason"`
	}
	c := choice{FinishReason: lengthReason}
	if req.chat {
		c.Message = &message{Role: "assistant", Content: out}
	} else {
		c.Text = &out
	}
	return struct {
		ID      string    `json:"id"`
		Object  string    `json:"object"`
		Created int64     `json:"created"`
		Model   string    `json:"model"`
		Choices []choice  `json:"choices"`
		Usage   usageInfo `json:"usage"`
	}{s.id(req.chat), objectName(req.chat, false), s.cfg.Now().Unix(), req.model, []choice{c}, usage(req, req.maxTokens)}
}
