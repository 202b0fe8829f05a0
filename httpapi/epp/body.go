package epp

import (
	"bytes"
	"errors"

	"github.com/goccy/go-json"
	"github.com/kvselect/kvselect/core/text"
)

// request is what the picker reads of an OpenAI completions or chat
// completions body: the model, and the text as text.Input, or the
// completion's prompt given as token ids. Fields alias the body.
type request struct {
	model    string
	hasModel bool
	in       text.Input
	// ids are a completion prompt sent as token ids (hasIDs).
	ids    []uint32
	hasIDs bool
	// addSpecial is vLLM's add_special_tokens when hasAddSpecial.
	addSpecial, hasAddSpecial bool
}

// openAIBody is the wire shape: only the fields that change the prompt's
// tokens (vLLM's CompletionRequest and ChatCompletionRequest); the rest
// (stream, max_tokens, sampling) is the engine's and is forwarded
// unread.
type openAIBody struct {
	Model                *string         `json:"model"`
	Prompt               json.RawMessage `json:"prompt"`
	Messages             json.RawMessage `json:"messages"`
	Tools                json.RawMessage `json:"tools"`
	ChatTemplateKwargs   json.RawMessage `json:"chat_template_kwargs"`
	ChatTemplate         *string         `json:"chat_template"`
	AddGenerationPrompt  *bool           `json:"add_generation_prompt"`
	ContinueFinalMessage *bool           `json:"continue_final_message"`
	AddSpecialTokens     *bool           `json:"add_special_tokens"`
}

// errBody classes a client's body error (the 400).
var errBody = errors.New("epp: bad request body")

// bodyError is a 400's message.
type bodyError struct{ msg string }

func (e *bodyError) Error() string { return e.msg }
func (e *bodyError) Unwrap() error { return errBody }

func badBody(msg string) error { return &bodyError{msg} }

// parseBody decodes an OpenAI request body into r. A body that is not a
// JSON object, or whose prompt is neither one string nor one list of
// token ids, is a bodyError; a body with neither prompt nor messages is
// a request without text (routed by load).
func parseBody(body []byte, r *request) error {
	var b openAIBody
	if err := json.Unmarshal(body, &b); err != nil {
		return badBody("the body is not an OpenAI completions or chat JSON object: " + err.Error())
	}
	*r = request{ids: r.ids[:0]}
	if b.Model != nil {
		r.model, r.hasModel = *b.Model, true
	}
	if b.AddSpecialTokens != nil {
		r.addSpecial, r.hasAddSpecial = *b.AddSpecialTokens, true
	}
	if p := present(b.Prompt); p != nil {
		switch p[0] {
		case '"':
			if err := json.Unmarshal(p, &r.in.Prompt); err != nil {
				return badBody("prompt: " + err.Error())
			}
			r.in.HasPrompt = true
		case '[':
			// A completion prompt of token ids, [1, 2, ...]; a batch
			// (a list of strings or of lists) has no one destination.
			if err := json.Unmarshal(p, &r.ids); err != nil {
				return badBody("prompt: want one string or one list of token ids (a batch of prompts is not routable as one request)")
			}
			r.hasIDs = true
		default:
			return badBody("prompt: want a string or a list of token ids")
		}
		return nil
	}
	if m := present(b.Messages); m != nil {
		if m[0] != '[' {
			return badBody("messages: want a list of message objects")
		}
		r.in.Messages = m
		r.in.Tools = present(b.Tools)
		r.in.Kwargs = present(b.ChatTemplateKwargs)
		if b.ChatTemplate != nil {
			r.in.Template = *b.ChatTemplate
		}
		if b.AddGenerationPrompt != nil {
			r.in.AddGenerationPrompt, r.in.HasAddGenerationPrompt = *b.AddGenerationPrompt, true
		}
		if b.ContinueFinalMessage != nil {
			r.in.ContinueFinalMessage = *b.ContinueFinalMessage
		}
	}
	return nil
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
