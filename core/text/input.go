package text

import (
	"encoding/json"
	"errors"
	"time"
)

// Input is a request's text in one of vLLM's two forms, as the front ends
// decode it (httpapi's prompt/messages fields, the EPP's OpenAI bodies): a
// completion's Prompt (HasPrompt), or a chat completion's Messages with
// the fields of vLLM's ChatCompletionRequest that change the rendered
// prompt. The raw JSON fields may alias the caller's body; Input keeps
// nothing after Tokens returns.
type Input struct {
	Prompt    string
	HasPrompt bool
	// Messages, Tools and Kwargs (chat_template_kwargs) are raw JSON; nil
	// is absent.
	Messages, Tools, Kwargs json.RawMessage
	// Template is chat_template: a named template of the tokenizer's or a
	// template's source; "" uses the tokenizer's.
	Template string
	// AddGenerationPrompt is add_generation_prompt when
	// HasAddGenerationPrompt (absent: true, as vLLM's default);
	// ContinueFinalMessage is continue_final_message.
	AddGenerationPrompt, HasAddGenerationPrompt, ContinueFinalMessage bool
}

// Has reports whether the request carried text of either kind.
func (in *Input) Has() bool { return in.HasPrompt || in.Messages != nil }

// Tokens appends the text's token ids to dst as the engine computes them:
// a prompt with special tokens when addSpecial (vLLM's completions
// default: true), messages rendered with the chat template and tokenized
// without them unless addSpecial (vLLM's chat default: false; the
// template writes the BOS). add_generation_prompt defaults to true, as in
// vLLM's chat request, and yields to continue_final_message. now is the
// template's strftime_now clock. An error is the client's: its message is
// the front end's bad-request answer.
func (in *Input) Tokens(tok *Tokenizer, dst []uint32, addSpecial bool, now time.Time) ([]uint32, error) {
	if in.HasPrompt {
		return tok.Encode(dst, in.Prompt, addSpecial), nil
	}
	req := ChatRequest{
		Messages: in.Messages, Tools: in.Tools, Template: in.Template,
		AddGenerationPrompt: !in.HasAddGenerationPrompt || in.AddGenerationPrompt, ContinueFinalMessage: in.ContinueFinalMessage,
		Now: now,
	}
	if in.ContinueFinalMessage && !in.HasAddGenerationPrompt {
		req.AddGenerationPrompt = false // vLLM: the two are exclusive, the default yields
	}
	if in.Kwargs != nil {
		if err := json.Unmarshal(in.Kwargs, &req.Kwargs); err != nil {
			return dst, errors.New("chat_template_kwargs: want a JSON object: " + err.Error())
		}
	}
	prompt, err := tok.RenderChat(req)
	if errors.Is(err, ErrNoChatTemplate) {
		return dst, errors.New("the model's tokenizer has no chat template (tokenizer_config.json's chat_template): send prompt, or chat_template")
	}
	if err != nil {
		return dst, err
	}
	return tok.Encode(dst, prompt, addSpecial), nil
}
