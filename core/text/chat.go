package text

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/kvselect/kvselect/core/text/jinja"
)

// Chat templates: a conversation into the prompt text the engine
// tokenizes, as vLLM renders it through transformers' apply_chat_template.

var (
	// ErrNoChatTemplate: the tokenizer has no chat template (and the
	// request gives none).
	ErrNoChatTemplate = errors.New("text: no chat template")
	// ErrChatTemplate wraps a template that fails to parse or to render
	// (including its own raise_exception: errors.As to *jinja.Raised
	// gives the message), or a request transformers would refuse.
	ErrChatTemplate = errors.New("text: chat template")
)

// ChatRequest is a chat completion's template inputs. Messages, Tools
// and Documents are JSON as the client sent it (decoded here as Python's
// json.loads decodes it: key order kept, 1 an int, 1.0 a float, which
// tojson and repr show).
type ChatRequest struct {
	// Messages is a JSON array of message objects.
	Messages json.RawMessage
	// Tools is a JSON array of tool schemas; empty or null: none (the
	// template's tools is None, as when the request has no tools).
	Tools json.RawMessage
	// Documents is a JSON array (RAG templates); empty or null: none.
	Documents json.RawMessage
	// AddGenerationPrompt and ContinueFinalMessage are transformers'
	// flags (exclusive).
	AddGenerationPrompt  bool
	ContinueFinalMessage bool
	// Kwargs are chat_template_kwargs: extra template variables, over
	// the special tokens of the same name.
	Kwargs map[string]json.RawMessage
	// Template overrides the tokenizer's: the name of one of its named
	// templates, or a template's source. "" uses the tokenizer's.
	Template string
	// ContentFormat is vLLM's --chat-template-content-format: "" or
	// "auto" (detected from the template: jinja.Template.ContentFormat),
	// "string" or "openai".
	ContentFormat string
	// Now is the clock strftime_now reads (vLLM's server time, in the
	// zone the caller wants). Zero: strftime_now is undefined, and
	// templates that test for it use their fixed fallback date.
	Now time.Time
}

// chatTemplates is tokenizer_config.json's chat_template, parsed at Load.
type chatTemplates struct {
	// named holds each template by name: one string template is
	// "default".
	named map[string]*jinja.Template
	// special is transformers' special_tokens_map (bos_token, eos_token,
	// unk_token, sep_token, pad_token, cls_token, mask_token as strings,
	// additional_special_tokens as a list), the tokens set and non-empty.
	special map[string]any
}

// loadChat parses tokenizer_config.json's chat_template (a string, or a
// list of {"name", "template"}) and special tokens. A template that does
// not parse fails the load.
func (t *Tokenizer) loadChat(configJSON []byte) error {
	c := &chatTemplates{named: map[string]*jinja.Template{}, special: map[string]any{}}
	t.chat = c
	if configJSON == nil {
		return nil
	}
	var cfg map[string]json.RawMessage
	if err := json.Unmarshal(configJSON, &cfg); err != nil {
		return fmt.Errorf("text: tokenizer_config.json: %w", err)
	}
	for _, k := range []string{"bos_token", "eos_token", "unk_token", "sep_token", "pad_token", "cls_token", "mask_token"} {
		if s := tokenContent(cfg[k]); s != "" {
			c.special[k] = s
		}
	}
	if raw, ok := cfg["additional_special_tokens"]; ok {
		var list []json.RawMessage
		if json.Unmarshal(raw, &list) == nil && len(list) > 0 {
			var toks []any
			for _, r := range list {
				toks = append(toks, tokenContent(r))
			}
			c.special["additional_special_tokens"] = toks
		}
	}
	raw := cfg["chat_template"]
	if len(raw) == 0 || string(raw) == "null" {
		return nil
	}
	var src string
	if json.Unmarshal(raw, &src) == nil {
		tpl, err := jinja.Parse(src)
		if err != nil {
			return fmt.Errorf("%w: tokenizer_config.json: %w", ErrChatTemplate, err)
		}
		c.named["default"] = tpl
		t.ChatTemplate = src
		return nil
	}
	var list []struct {
		Name     string `json:"name"`
		Template string `json:"template"`
	}
	if err := json.Unmarshal(raw, &list); err != nil {
		return fmt.Errorf("%w: tokenizer_config.json: chat_template is neither a string nor a list of named templates", ErrChatTemplate)
	}
	for _, n := range list {
		tpl, err := jinja.Parse(n.Template)
		if err != nil {
			return fmt.Errorf("%w: tokenizer_config.json: template %q: %w", ErrChatTemplate, n.Name, err)
		}
		c.named[n.Name] = tpl
		if n.Name == "default" {
			t.ChatTemplate = n.Template
		}
	}
	return nil
}

// tokenContent is a config token's text: a string, or an AddedToken
// object's "content"; "" for none.
func tokenContent(raw json.RawMessage) string {
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s
	}
	var o struct {
		Content string `json:"content"`
	}
	_ = json.Unmarshal(raw, &o)
	return o.Content
}

// HasChatTemplate reports whether RenderChat has a template of the
// tokenizer's own.
func (t *Tokenizer) HasChatTemplate() bool { return t.chat != nil && len(t.chat.named) > 0 }

// template is transformers' get_chat_template: a named one, or the
// request's source; else "tool_use" when tools are given and it exists,
// then "default".
func (t *Tokenizer) template(req *ChatRequest, hasTools bool) (*jinja.Template, error) {
	var named map[string]*jinja.Template
	if t.chat != nil {
		named = t.chat.named
	}
	if req.Template != "" {
		if tpl, ok := named[req.Template]; ok && len(named) > 1 {
			return tpl, nil
		}
		tpl, err := jinja.Parse(req.Template)
		if err != nil {
			return nil, fmt.Errorf("%w: %w", ErrChatTemplate, err)
		}
		return tpl, nil
	}
	if len(named) == 0 {
		return nil, ErrNoChatTemplate
	}
	if tpl, ok := named["tool_use"]; ok && hasTools {
		return tpl, nil
	}
	if tpl, ok := named["default"]; ok {
		return tpl, nil
	}
	return nil, fmt.Errorf("%w: multiple chat templates and none named default", ErrChatTemplate)
}

// continueTag is transformers' continue_final_message_tag.
const continueTag = "CONTINUE_FINAL_MESSAGE_TAG "

// RenderChat renders a conversation into the prompt text, as vLLM's
// chat endpoints render it:
//
//  1. the template: get_chat_template's choice (ChatRequest.Template);
//  2. vLLM's message handling (vllm/entrypoints/chat_utils.py): the
//     content format ("auto": vLLM's AST rule, see
//     jinja.Template.ContentFormat); in "string" format a message's
//     content becomes its text parts joined by "\n" (null: ""), in
//     "openai" format a list of {"type": "text", "text"} parts (a string
//     is one part); a part of another type is an error (vLLM would put a
//     multimodal placeholder there); an assistant's tool call arguments
//     given as a JSON string are decoded (empty: {}), as vLLM's
//     _postprocess_messages does; other message keys pass as they are;
//  3. transformers' render_jinja_template
//     (huggingface/transformers: src/transformers/utils/chat_template_utils.py):
//     the variables messages, tools, documents, add_generation_prompt,
//     the special tokens map, then Kwargs; with ContinueFinalMessage,
//     its tag appended to the final message's (last text part's) content
//     and the render cut at it.
//
// vLLM tokenizes the result with add_special_tokens=False (the template
// writes the BOS itself): Encode(dst, prompt, false).
func (t *Tokenizer) RenderChat(req ChatRequest) (string, error) {
	if req.AddGenerationPrompt && req.ContinueFinalMessage {
		return "", fmt.Errorf("%w: continue_final_message and add_generation_prompt are not compatible", ErrChatTemplate)
	}
	vars := map[string]any{}
	if t.chat != nil {
		for k, v := range t.chat.special {
			vars[k] = v
		}
	}
	decode := func(what string, raw json.RawMessage) (jinja.Value, error) {
		if len(raw) == 0 || string(raw) == "null" {
			return nil, nil
		}
		v, err := jinja.FromJSON(raw)
		if err != nil {
			return nil, fmt.Errorf("%w: %s: %w", ErrChatTemplate, what, err)
		}
		return v, nil
	}
	msgsV, err := decode("messages", req.Messages)
	if err != nil {
		return "", err
	}
	msgs, ok := msgsV.(*jinja.List)
	if !ok {
		return "", fmt.Errorf("%w: messages is not a list", ErrChatTemplate)
	}
	tools, err := decode("tools", req.Tools)
	if err != nil {
		return "", err
	}
	docs, err := decode("documents", req.Documents)
	if err != nil {
		return "", err
	}
	tpl, err := t.template(&req, tools != nil)
	if err != nil {
		return "", err
	}
	format := req.ContentFormat
	switch format {
	case "", "auto":
		format = tpl.ContentFormat()
	case "string", "openai":
	default:
		return "", fmt.Errorf("%w: content format %q (auto, string or openai)", ErrChatTemplate, format)
	}
	if msgs, err = vllmMessages(msgs, format); err != nil {
		return "", err
	}
	var final string
	if req.ContinueFinalMessage {
		if final, err = appendContinueTag(msgs); err != nil {
			return "", err
		}
	}
	for k, raw := range req.Kwargs {
		switch k {
		case "messages", "conversation", "tools", "documents", "add_generation_prompt", "continue_final_message", "chat_template", "tokenize":
			return "", fmt.Errorf("%w: chat_template_kwargs may not set %q", ErrChatTemplate, k)
		}
		v, err := decode("chat_template_kwargs."+k, raw)
		if err != nil {
			return "", err
		}
		vars[k] = v
	}
	vars["messages"] = msgs
	vars["tools"] = tools
	vars["documents"] = docs
	vars["add_generation_prompt"] = req.AddGenerationPrompt
	if !req.Now.IsZero() {
		vars["strftime_now"] = jinja.Strftime(req.Now)
	}
	out, err := tpl.Render(vars)
	if err != nil {
		return "", fmt.Errorf("%w: %w", ErrChatTemplate, err)
	}
	if req.ContinueFinalMessage {
		bare := strings.TrimSpace(continueTag)
		if !strings.Contains(out, strings.TrimFunc(final, isPySpace)) || !strings.Contains(out, bare) {
			return "", fmt.Errorf("%w: continue_final_message is set but the final message does not appear in the chat after applying the chat template", ErrChatTemplate)
		}
		loc := strings.LastIndex(out, bare)
		if strings.HasPrefix(out[loc:], continueTag) {
			out = out[:loc]
		} else {
			out = strings.TrimRightFunc(out[:loc], isPySpace)
		}
	}
	return out, nil
}

// isPySpace is Python's str.isspace for one code point (str.strip's
// whitespace): Go's unicode.IsSpace and U+001C..U+001F.
func isPySpace(r rune) bool {
	return r == ' ' || (r >= '\t' && r <= '\r') || (r >= 0x1c && r <= 0x1f) || r == 0x85 || r == 0xa0 || r == 0x1680 ||
		(r >= 0x2000 && r <= 0x200a) || r == 0x2028 || r == 0x2029 || r == 0x202f || r == 0x205f || r == 0x3000
}

// vllmMessages applies vLLM's content format and tool call argument
// decoding to copies of the messages.
func vllmMessages(msgs *jinja.List, format string) (*jinja.List, error) {
	out := &jinja.List{Items: make([]jinja.Value, len(msgs.Items))}
	for i, mv := range msgs.Items {
		m, ok := mv.(*jinja.Dict)
		if !ok {
			return nil, fmt.Errorf("%w: message %d is not an object", ErrChatTemplate, i)
		}
		c := jinja.NewDict(m.Len())
		for j, k := range m.Keys() {
			c.Set(k, m.Values()[j])
		}
		content, _ := c.Get("content")
		var parts []string
		switch x := content.(type) {
		case nil:
		case string:
			parts = []string{x}
		case *jinja.List:
			for _, p := range x.Items {
				switch p := p.(type) {
				case string:
					parts = append(parts, p)
				case *jinja.Dict:
					typ, ok := p.Get("type")
					if !ok {
						typ = "text"
					}
					text, isText := p.Get("text")
					ts, isStr := text.(string)
					if typ != "text" || !isText || !isStr {
						return nil, fmt.Errorf("%w: message %d: content part of type %v (only text parts)", ErrChatTemplate, i, typ)
					}
					parts = append(parts, ts)
				default:
					return nil, fmt.Errorf("%w: message %d: a content part that is not an object", ErrChatTemplate, i)
				}
			}
		default:
			return nil, fmt.Errorf("%w: message %d: content is neither a string nor a list of parts", ErrChatTemplate, i)
		}
		if format == "string" {
			c.Set("content", strings.Join(parts, "\n"))
		} else {
			l := &jinja.List{Items: make([]jinja.Value, len(parts))}
			for j, p := range parts {
				d := jinja.NewDict(2)
				d.Set("type", "text")
				d.Set("text", p)
				l.Items[j] = d
			}
			c.Set("content", l)
		}
		if role, _ := c.Get("role"); role == "assistant" {
			if calls, ok := c.Get("tool_calls"); ok {
				if l, ok := calls.(*jinja.List); ok {
					nl, err := decodeToolArgs(l)
					if err != nil {
						return nil, fmt.Errorf("%w: message %d: %w", ErrChatTemplate, i, err)
					}
					c.Set("tool_calls", nl)
				}
			}
		}
		out.Items[i] = c
	}
	return out, nil
}

// decodeToolArgs is vLLM's _postprocess_messages for one message: each
// call's function.arguments, a JSON string, decoded; empty or missing:
// {}.
func decodeToolArgs(calls *jinja.List) (*jinja.List, error) {
	out := &jinja.List{Items: make([]jinja.Value, len(calls.Items))}
	for i, cv := range calls.Items {
		call, ok := cv.(*jinja.Dict)
		if !ok {
			return nil, fmt.Errorf("tool call %d is not an object", i)
		}
		nc := jinja.NewDict(call.Len())
		for j, k := range call.Keys() {
			nc.Set(k, call.Values()[j])
		}
		fv, _ := nc.Get("function")
		f, ok := fv.(*jinja.Dict)
		if !ok {
			return nil, fmt.Errorf("tool call %d has no function object", i)
		}
		nf := jinja.NewDict(f.Len())
		for j, k := range f.Keys() {
			nf.Set(k, f.Values()[j])
		}
		args, _ := nf.Get("arguments")
		switch a := args.(type) {
		case *jinja.Dict, *jinja.List:
		case string:
			if a == "" {
				nf.Set("arguments", jinja.NewDict(0))
				break
			}
			v, err := jinja.FromJSON([]byte(a))
			if err != nil {
				return nil, fmt.Errorf("tool call %d: arguments: %w", i, err)
			}
			nf.Set("arguments", v)
		default:
			if !isTruthyScalar(a) {
				nf.Set("arguments", jinja.NewDict(0))
			} else {
				return nil, fmt.Errorf("tool call %d: arguments are neither a JSON string nor an object", i)
			}
		}
		nc.Set("function", nf)
		out.Items[i] = nc
	}
	return out, nil
}

// isTruthyScalar is Python's bool for the scalars JSON can hold.
func isTruthyScalar(v jinja.Value) bool {
	switch x := v.(type) {
	case nil:
		return false
	case bool:
		return x
	case int64:
		return x != 0
	case float64:
		return x != 0
	}
	return true
}

// appendContinueTag appends transformers' tag to the final message's
// content (a list's last text part) and returns the content before it.
func appendContinueTag(msgs *jinja.List) (string, error) {
	if len(msgs.Items) == 0 {
		return "", fmt.Errorf("%w: continue_final_message with no messages", ErrChatTemplate)
	}
	last := msgs.Items[len(msgs.Items)-1].(*jinja.Dict)
	content, _ := last.Get("content")
	switch x := content.(type) {
	case string:
		last.Set("content", x+continueTag)
		return x, nil
	case *jinja.List:
		for i := len(x.Items) - 1; i >= 0; i-- {
			if p, ok := x.Items[i].(*jinja.Dict); ok {
				if text, ok := p.Get("text"); ok {
					s, _ := text.(string)
					p.Set("text", s+continueTag)
					return s, nil
				}
			}
		}
		return "", fmt.Errorf("%w: continue_final_message is set but we could not find any text to continue in the final message", ErrChatTemplate)
	}
	return "", fmt.Errorf("%w: continue_final_message: the final message has no content", ErrChatTemplate)
}
