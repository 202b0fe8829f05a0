package httpapi

import (
	"encoding/json"
	"errors"
	"time"

	"github.com/kvselect/kvselect/core"
	"github.com/kvselect/kvselect/core/text"
	"github.com/kvselect/kvselect/httpapi/internal/jsonscan"
)

// textIn is a body's text in place of token_ids, a kvselect extension of
// the selection, reservation, disaggregation and tokenize bodies: prompt
// (a completion's text), or messages (a chat completion's, rendered with
// the model's chat template, with tools, chat_template_kwargs,
// add_generation_prompt, continue_final_message and chat_template as
// vLLM's ChatCompletionRequest takes them). The raw JSON fields and text
// alias the body: valid while the handler runs.
type textIn struct {
	text                           string
	hasText                        bool
	messages, tools, kwargs        []byte // raw JSON; nil: absent
	template                       string
	addGen, hasAddGen, continueMsg bool
}

// textFields are textIn's keys, for the routes' field sets.
var textFields = []string{"prompt", "messages", "tools", "chat_template_kwargs", "add_generation_prompt", "continue_final_message", "chat_template"}

func (t *textIn) reset() { *t = textIn{} }

// field reads key's value into t when key is one of textFields; known is
// false otherwise (the caller reads the key).
func (t *textIn) field(s *jsonscan.Scanner, key string) (known bool, err error) {
	switch key {
	case "prompt":
		t.text, t.hasText, err = s.Str("prompt")
	case "messages":
		t.messages, err = rawValue(s)
	case "tools":
		t.tools, err = rawValue(s)
	case "chat_template_kwargs":
		t.kwargs, err = rawValue(s)
	case "chat_template":
		var v *string
		if v, err = optStr(s, "chat_template"); v != nil {
			t.template = *v
		}
	case "add_generation_prompt":
		if n, e := s.Null(); n || e != nil {
			return true, e
		}
		t.addGen, err = s.Boolean("add_generation_prompt")
		t.hasAddGen = true
	case "continue_final_message":
		if n, e := s.Null(); n || e != nil {
			return true, e
		}
		t.continueMsg, err = s.Boolean("continue_final_message")
	default:
		return false, nil
	}
	return true, err
}

// rawValue skips a value and returns its bytes (nil for null).
func rawValue(s *jsonscan.Scanner) ([]byte, error) {
	if s.Peek() == 'n' {
		_, err := s.Null()
		return nil, err
	}
	start := s.Offset()
	if err := s.Skip(); err != nil {
		return nil, err
	}
	return s.Input()[start:s.Offset()], nil
}

// has reports whether the body carried text of either kind.
func (t *textIn) has() bool { return t.hasText || t.messages != nil }

// tokens appends the text's token ids to dst as the engine computes them:
// a prompt with special tokens when addSpecial (vLLM's completions
// default: true), messages rendered and tokenized without them unless
// addSpecial (vLLM's chat default: false; the template writes the BOS).
// add_generation_prompt defaults to true, as in vLLM's chat request. An
// error is the client's: its message is the 400's.
func (t *textIn) tokens(tok *text.Tokenizer, dst []uint32, addSpecial bool) ([]uint32, error) {
	if t.hasText {
		return tok.Encode(dst, t.text, addSpecial), nil
	}
	req := text.ChatRequest{
		Messages: t.messages, Tools: t.tools, Template: t.template,
		AddGenerationPrompt: !t.hasAddGen || t.addGen, ContinueFinalMessage: t.continueMsg,
		Now: time.Now(),
	}
	if t.continueMsg && !t.hasAddGen {
		req.AddGenerationPrompt = false // vLLM: the two are exclusive, the default yields
	}
	if t.kwargs != nil {
		if err := json.Unmarshal(t.kwargs, &req.Kwargs); err != nil {
			return dst, errors.New("chat_template_kwargs: want a JSON object: " + err.Error())
		}
	}
	prompt, err := tok.RenderChat(req)
	if errors.Is(err, text.ErrNoChatTemplate) {
		return dst, errors.New("the model's tokenizer has no chat template (tokenizer_config.json's chat_template): send prompt, or chat_template")
	}
	if err != nil {
		return dst, err
	}
	return tok.Encode(dst, prompt, addSpecial), nil
}

// textTokens puts the body's text's ids into p for model: a selection or
// query body's text, tokenized as vLLM's completions (prompt) or chat
// (messages) endpoint tokenizes it, so that the blocks hashed are the
// engine's. A body with token_ids or block_hashes keeps them and its text
// is ignored, and so is all text when no tokenizer is configured: a
// reference caller, to whom these are unknown fields, sees no change. It
// returns the 400's message, else "".
func (s *Server) textTokens(p *core.Prompt, model string, t *textIn) string {
	if !t.has() || len(s.cfg.Tokenizers) == 0 || p.HasTokenIDs || p.HasBlockHashes {
		return ""
	}
	tok, msg := s.tokenizer(model, model != "")
	if tok == nil {
		return msg
	}
	ids, err := t.tokens(tok, p.TokenIDs[:0], t.hasText)
	if err != nil {
		return err.Error()
	}
	p.TokenIDs, p.HasTokenIDs = ids, true
	return ""
}
