package httpapi

import (
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
// vLLM's ChatCompletionRequest takes them): text.Input, decoded from the
// body's fields. The raw JSON fields and text alias the body: valid while
// the handler runs.
type textIn struct{ text.Input }

// textFields are textIn's keys, for the routes' field sets.
var textFields = []string{"prompt", "messages", "tools", "chat_template_kwargs", "add_generation_prompt", "continue_final_message", "chat_template"}

func (t *textIn) reset() { *t = textIn{} }

// field reads key's value into t when key is one of textFields; known is
// false otherwise (the caller reads the key).
func (t *textIn) field(s *jsonscan.Scanner, key string) (known bool, err error) {
	switch key {
	case "prompt":
		t.Prompt, t.HasPrompt, err = s.Str("prompt")
	case "messages":
		t.Messages, err = rawValue(s)
	case "tools":
		t.Tools, err = rawValue(s)
	case "chat_template_kwargs":
		t.Kwargs, err = rawValue(s)
	case "chat_template":
		var v *string
		if v, err = optStr(s, "chat_template"); v != nil {
			t.Template = *v
		}
	case "add_generation_prompt":
		if n, e := s.Null(); n || e != nil {
			return true, e
		}
		t.AddGenerationPrompt, err = s.Boolean("add_generation_prompt")
		t.HasAddGenerationPrompt = true
	case "continue_final_message":
		if n, e := s.Null(); n || e != nil {
			return true, e
		}
		t.ContinueFinalMessage, err = s.Boolean("continue_final_message")
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
func (t *textIn) has() bool { return t.Has() }

// tokens is text.Input.Tokens at the server's time.
func (t *textIn) tokens(tok *text.Tokenizer, dst []uint32, addSpecial bool) ([]uint32, error) {
	return t.Tokens(tok, dst, addSpecial, time.Now())
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
	ids, err := t.tokens(tok, p.TokenIDs[:0], t.HasPrompt)
	if err != nil {
		return err.Error()
	}
	p.TokenIDs, p.HasTokenIDs = ids, true
	return ""
}
