package httpapi

import (
	"slices"
	"strings"

	"github.com/kvselect/kvselect/core/text"
	"github.com/kvselect/kvselect/httpapi/internal/jsonscan"
	"github.com/valyala/fasthttp"
)

// POST /tokenize and POST /detokenize: the model's own tokenizer
// (Config.Tokenizers, from --model-path), with vLLM's request and response
// shapes (vllm/entrypoints/openai/protocol.py: TokenizeCompletionRequest,
// TokenizeResponse, DetokenizeRequest, DetokenizeResponse), so that a
// gateway can compute exactly the ids the engine will. Neither route is in
// Dynamo's select service: a kvselect extension.

var (
	tokenizeFields   = jsonscan.NewFieldSet(append([]string{"model", "add_special_tokens", "return_token_strs"}, textFields...)...)
	detokenizeFields = jsonscan.NewFieldSet("model", "tokens")
)

// tokenizeReq is a decoded /tokenize body: vLLM's
// TokenizeCompletionRequest (prompt) or TokenizeChatRequest (messages).
type tokenizeReq struct {
	model                          string
	txt                            textIn
	hasModel                       bool
	addSpecial, returnStrs, hasAdd bool
}

func decodeTokenize(body []byte) (tokenizeReq, error) {
	var r tokenizeReq
	s := jsonscan.New(body)
	var seen uint64
	err := s.Object("struct TokenizeRequest", func(k []byte) error {
		if done, err := s.SkipUnknown(s.Field(tokenizeFields, &seen, "", k)); done {
			return err
		}
		var err error
		if string(k) == "prompt" && s.Peek() == 'n' {
			return s.TypeErr("prompt", "invalid type: null, expected a string")
		}
		if known, err := r.txt.field(s, string(k)); known {
			return err
		}
		switch string(k) {
		case "model":
			var m *string
			if m, err = optStr(s, "model"); m != nil {
				r.model, r.hasModel = *m, true
			}
		case "add_special_tokens":
			r.addSpecial, err = s.Boolean("add_special_tokens")
			r.hasAdd = true
		case "return_token_strs":
			if s.Peek() == 'n' {
				_, err = s.Null()
				return err
			}
			r.returnStrs, err = s.Boolean("return_token_strs")
		}
		return err
	})
	if err != nil {
		return r, bodyErr(err)
	}
	if err := s.End(); err != nil {
		return r, bodyErr(err)
	}
	return r, nil
}

// tokenizer is the tokenizer of the request's model: the one named, or
// the only one configured when none is; else nil and the error message.
func (s *Server) tokenizer(model string, has bool) (*text.Tokenizer, string) {
	if !has || model == "" {
		if len(s.cfg.Tokenizers) == 1 {
			for _, t := range s.cfg.Tokenizers {
				return t, ""
			}
		}
		if len(s.cfg.Tokenizers) == 0 {
			return nil, "no tokenizer is configured: start kvselect with --model-path NAME=DIR (a model's Hugging Face tokenizer.json and tokenizer_config.json)"
		}
		return nil, "model is required: " + strings.Join(tokenizerNames(s.cfg.Tokenizers), ", ") + " have tokenizers"
	}
	if t, ok := s.cfg.Tokenizers[model]; ok {
		return t, ""
	}
	return nil, "model " + model + " has no tokenizer: give it one with --model-path " + model + "=DIR"
}

func tokenizerNames(m map[string]*text.Tokenizer) []string {
	var out []string
	for n := range m {
		out = append(out, n)
	}
	slices.Sort(out)
	return out
}

func (s *Server) handleTokenize(ctx *fasthttp.RequestCtx) {
	body, ok := s.jsonBody(ctx)
	if !ok {
		return
	}
	r, err := decodeTokenize(body)
	if err != nil {
		s.writeErr(ctx, err)
		return
	}
	tok, msg := s.tokenizer(r.model, r.hasModel)
	if tok == nil {
		s.writeErrMsg(ctx, fasthttp.StatusBadRequest, msg)
		return
	}
	if !r.txt.has() {
		s.writeErrMsg(ctx, fasthttp.StatusUnprocessableEntity, "Failed to deserialize the JSON body into the target type: missing field `prompt`")
		return
	}
	// vLLM's defaults: special tokens added to a prompt, not to a chat
	// (its template writes them).
	addSpecial := r.addSpecial
	if !r.hasAdd {
		addSpecial = r.txt.HasPrompt
	}
	ids, err := r.txt.tokens(tok, nil, addSpecial)
	if err != nil {
		s.writeErrMsg(ctx, fasthttp.StatusBadRequest, err.Error())
		return
	}
	bp := s.bufPool.Get().(*[]byte)
	b := append((*bp)[:0], `{"count":`...)
	b = appendInt(b, int64(len(ids)))
	b = append(b, `,"max_model_len":`...)
	b = appendInt(b, tok.ModelMaxLength)
	b = append(b, `,"tokens":[`...)
	for i, id := range ids {
		if i > 0 {
			b = append(b, ',')
		}
		b = appendUint(b, uint64(id))
	}
	b = append(b, ']')
	if r.returnStrs {
		b = append(b, `,"token_strs":[`...)
		for i, id := range ids {
			if i > 0 {
				b = append(b, ',')
			}
			b = appendString(b, tok.Decode([]uint32{id}, false))
		}
		b = append(b, ']')
	} else {
		b = append(b, `,"token_strs":null`...)
	}
	b = append(b, '}')
	*bp = b
	s.writeRaw(ctx, 200, b)
	s.putBuf(bp)
}

func (s *Server) handleDetokenize(ctx *fasthttp.RequestCtx) {
	body, ok := s.jsonBody(ctx)
	if !ok {
		return
	}
	js := jsonscan.New(body)
	var seen uint64
	var model string
	var hasModel, hasTokens bool
	var ids []uint32
	err := js.Object("struct DetokenizeRequest", func(k []byte) error {
		if done, err := js.SkipUnknown(js.Field(detokenizeFields, &seen, "", k)); done {
			return err
		}
		var err error
		if string(k) == "model" {
			var m *string
			if m, err = optStr(js, "model"); m != nil {
				model, hasModel = *m, true
			}
			return err
		}
		ids, hasTokens, err = js.U32s("tokens", ids)
		return err
	})
	if err == nil {
		err = js.End()
	}
	if err != nil {
		s.writeErr(ctx, bodyErr(err))
		return
	}
	if !hasTokens {
		s.writeErrMsg(ctx, fasthttp.StatusUnprocessableEntity, "Failed to deserialize the JSON body into the target type: missing field `tokens`")
		return
	}
	tok, msg := s.tokenizer(model, hasModel)
	if tok == nil {
		s.writeErrMsg(ctx, fasthttp.StatusBadRequest, msg)
		return
	}
	for _, id := range ids {
		if int(id) >= tok.VocabSize() {
			s.writeErrMsg(ctx, fasthttp.StatusBadRequest, "token id "+itoa(uint64(id))+" is outside the vocabulary of "+itoa(uint64(tok.VocabSize()))+" ids")
			return
		}
	}
	bp := s.bufPool.Get().(*[]byte)
	b := append((*bp)[:0], `{"prompt":`...)
	b = appendString(b, tok.Decode(ids, false))
	b = append(b, '}')
	*bp = b
	s.writeRaw(ctx, 200, b)
	s.putBuf(bp)
}

func itoa(v uint64) string { return string(appendUint(nil, v)) }

// promptTokens is textTokens of a selection or query body.
func (s *Server) promptTokens(r *selectReq) string {
	return s.textTokens(&r.req.Prompt, r.req.ModelName, &r.txt)
}
