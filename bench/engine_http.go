package bench

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// An engine's OpenAI-compatible HTTP endpoint: what vLLM's OpenAI server
// answers (vllm-project/vllm:vllm/entrypoints/openai/protocol.py for the
// shapes, serving_completion.py and serving_chat.py for the stream), over
// the engine's KV pool. Request shapes and prompt rendering are in
// engine_openai.go.

// OpenAIConfig configures an engine's OpenAI endpoint (ServeOpenAI).
type OpenAIConfig struct {
	// Model is the served model's name (vLLM's --served-model-name):
	// GET /v1/models lists it, and a response names it when the request
	// names no model. "" means "mock".
	Model string
	// AnyModel accepts a request naming any model, and answers in its
	// name. Without it a request naming a model other than Model is a
	// 404, as vLLM answers.
	AnyModel bool
	// Tokenizer tokenizes text prompts and rendered chats (special tokens
	// added to a completion's prompt, not to a chat, unless the request's
	// add_special_tokens says otherwise, as vLLM does). Nil: the engine
	// has no tokenizer, and a text is tokenized as its UTF-8 bytes (token
	// id = byte value), so that equal text prefixes still give equal
	// token prefixes and the KV events of a conversation's turns share
	// blocks.
	Tokenizer Tokenizer
	// DefaultMaxTokens is the tokens generated when the request sets no
	// max_tokens (0: 16).
	DefaultMaxTokens int
	// MaxTokensLimit bounds a request's max_tokens, and so a response's
	// size (0: 4096); a larger one is a 400.
	MaxTokensLimit int
	// MaxBodyBytes bounds a request body (0: 8 MiB); a larger one is a
	// 413.
	MaxBodyBytes int
	// TokenInterval is the pause between two generated tokens of a
	// stream (0: none).
	TokenInterval time.Duration
	// Now is the clock of the responses' created field; nil: time.Now.
	Now func() time.Time
}

// The defaults of OpenAIConfig's zero fields.
const (
	DefaultOpenAIMaxTokens      = 16
	DefaultOpenAIMaxTokensLimit = 4096
	DefaultOpenAIMaxBodyBytes   = 8 << 20
)

func (c *OpenAIConfig) defaults() {
	if c.Model == "" {
		c.Model = "mock"
	}
	if c.DefaultMaxTokens <= 0 {
		c.DefaultMaxTokens = DefaultOpenAIMaxTokens
	}
	if c.MaxTokensLimit <= 0 {
		c.MaxTokensLimit = DefaultOpenAIMaxTokensLimit
	}
	if c.MaxBodyBytes <= 0 {
		c.MaxBodyBytes = DefaultOpenAIMaxBodyBytes
	}
	if c.Now == nil {
		c.Now = time.Now
	}
}

// OpenAIStats are an endpoint's cumulative counters.
type OpenAIStats struct {
	Requests         uint64 // completions and chat requests answered 200
	Streams          uint64 // of them, streamed (SSE)
	Errors           uint64 // requests answered with an error status
	Aborted          uint64 // streams cut by the client or Close before their end
	PromptTokens     uint64 // prompt tokens served
	CachedTokens     uint64 // of them, found in the pool (usage's cached_tokens)
	CompletionTokens uint64 // tokens generated
}

// OpenAIServer is an engine's OpenAI endpoint on one listener: POST
// /v1/completions, POST /v1/chat/completions, GET /v1/models and GET
// /health. A completions or chat request serves its prompt's tokens on a
// rank (vLLM's X-data-parallel-rank header, else rank 0) through
// Engine.ServeTokens, so its KV events are published as vLLM publishes
// them after the prefill, and then generates max_tokens tokens: as SSE
// chunks when stream is true (a final usage chunk when
// stream_options.include_usage, then data: [DONE]), else as one JSON body
// with its usage. usage.prompt_tokens_details.cached_tokens is what the
// pool held of the prompt before it was served (ServeTokens' leading
// blocks, in tokens). Errors are OpenAI's {"error": {"message", "type",
// "param", "code"}} with the status as code.
//
// Generated tokens are simulated: the i-th one is the letter 'a'+i%26,
// whatever the tokenizer, and they are not stored in the pool (only the
// prompt's blocks are, which is what a conversation's next turn reuses).
//
// Goroutines: the http.Server's (Serve, one per connection) until Close,
// which waits for every handler to return.
type OpenAIServer struct {
	e     *Engine
	cfg   OpenAIConfig
	ln    net.Listener
	srv   *http.Server
	nonce string
	seq   atomic.Uint64
	// ctx ends at Close: streams stop between two tokens.
	ctx    context.Context
	cancel context.CancelFunc
	// mu guards closed; handlers joins active handlers once closed is
	// set (a handler starts only under mu while !closed).
	mu       sync.Mutex
	closed   bool
	handlers sync.WaitGroup
	served   chan struct{} // closed when Serve returns

	requests, streams, errs, aborted atomic.Uint64
	prompt, cached, completion       atomic.Uint64
}

// ServeOpenAI listens on addr (host:port, port 0 for a free one) and
// serves the engine's OpenAI endpoint there until Close.
func (e *Engine) ServeOpenAI(addr string, cfg OpenAIConfig) (*OpenAIServer, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	return e.ServeOpenAIListener(ln, cfg), nil
}

// ServeOpenAIListener serves the engine's OpenAI endpoint on ln until
// Close, which closes ln.
func (e *Engine) ServeOpenAIListener(ln net.Listener, cfg OpenAIConfig) *OpenAIServer {
	cfg.defaults()
	var n [6]byte
	_, _ = rand.Read(n[:])
	s := &OpenAIServer{e: e, cfg: cfg, ln: ln, nonce: hex.EncodeToString(n[:]), served: make(chan struct{})}
	s.ctx, s.cancel = context.WithCancel(context.Background())
	s.srv = &http.Server{
		Handler:           http.HandlerFunc(s.serveHTTP),
		ReadHeaderTimeout: 10 * time.Second,
		BaseContext:       func(net.Listener) context.Context { return s.ctx },
	}
	go func() {
		defer close(s.served)
		_ = s.srv.Serve(ln)
	}()
	return s
}

// Addr is the listener's address, host:port.
func (s *OpenAIServer) Addr() string { return s.ln.Addr().String() }

// URL is the endpoint's base URL, http://host:port.
func (s *OpenAIServer) URL() string { return "http://" + s.Addr() }

// Stats returns the endpoint's counters.
func (s *OpenAIServer) Stats() OpenAIStats {
	return OpenAIStats{
		Requests: s.requests.Load(), Streams: s.streams.Load(), Errors: s.errs.Load(), Aborted: s.aborted.Load(),
		PromptTokens: s.prompt.Load(), CachedTokens: s.cached.Load(), CompletionTokens: s.completion.Load(),
	}
}

// Close stops the endpoint: the listener and every connection close,
// streams stop at their next token, and Close returns once every handler
// has.
func (s *OpenAIServer) Close() error {
	s.mu.Lock()
	already := s.closed
	s.closed = true
	s.mu.Unlock()
	if already {
		return nil
	}
	s.cancel()
	err := s.srv.Close()
	<-s.served
	s.handlers.Wait()
	return err
}

func (s *OpenAIServer) serveHTTP(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		s.fail(w, http.StatusServiceUnavailable, "the engine is shutting down")
		return
	}
	s.handlers.Add(1)
	s.mu.Unlock()
	defer s.handlers.Done()
	switch r.URL.Path {
	case "/health":
		if s.method(w, r, http.MethodGet) {
			w.WriteHeader(http.StatusOK)
		}
	case "/v1/models":
		if s.method(w, r, http.MethodGet) {
			s.models(w)
		}
	case "/v1/completions":
		if s.method(w, r, http.MethodPost) {
			s.generate(w, r, false)
		}
	case "/v1/chat/completions":
		if s.method(w, r, http.MethodPost) {
			s.generate(w, r, true)
		}
	default:
		s.fail(w, http.StatusNotFound, "no route "+r.URL.Path+" (the simulated engine serves /v1/completions, /v1/chat/completions, /v1/models and /health)")
	}
}

// method reports whether r is of method m, answering 405 when not.
func (s *OpenAIServer) method(w http.ResponseWriter, r *http.Request, m string) bool {
	if r.Method == m {
		return true
	}
	w.Header().Set("Allow", m)
	s.fail(w, http.StatusMethodNotAllowed, "method "+r.Method+" not allowed on "+r.URL.Path+": want "+m)
	return false
}

// apiError is OpenAI's error envelope (vLLM's ErrorResponse: ErrorInfo
// with the status as code).
type apiError struct {
	Error struct {
		Message string  `json:"message"`
		Type    string  `json:"type"`
		Param   *string `json:"param"`
		Code    int     `json:"code"`
	} `json:"error"`
}

// errorTypes are the error types vLLM names by status.
var errorTypes = map[int]string{
	http.StatusBadRequest:            "BadRequestError",
	http.StatusNotFound:              "NotFoundError",
	http.StatusMethodNotAllowed:      "MethodNotAllowed",
	http.StatusRequestEntityTooLarge: "BadRequestError",
	http.StatusServiceUnavailable:    "ServiceUnavailableError",
}

// fail answers status with OpenAI's error envelope.
func (s *OpenAIServer) fail(w http.ResponseWriter, status int, msg string) {
	s.errs.Add(1)
	var e apiError
	e.Error.Message, e.Error.Type, e.Error.Code = msg, errorTypes[status], status
	body, _ := json.Marshal(&e)
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Length", strconv.Itoa(len(body)))
	w.WriteHeader(status)
	_, _ = w.Write(body)
}

// models answers GET /v1/models: the served model (vLLM's ModelList).
func (s *OpenAIServer) models(w http.ResponseWriter) {
	type card struct {
		ID         string `json:"id"`
		Object     string `json:"object"`
		Created    int64  `json:"created"`
		OwnedBy    string `json:"owned_by"`
		Root       string `json:"root"`
		Parent     *int   `json:"parent"`
		Permission []int  `json:"permission"`
	}
	body, _ := json.Marshal(struct {
		Object string `json:"object"`
		Data   []card `json:"data"`
	}{"list", []card{{ID: s.cfg.Model, Object: "model", Created: s.cfg.Now().Unix(), OwnedBy: "kvselect", Root: s.cfg.Model, Permission: []int{}}}})
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(body)
}

// generate serves a completions (chat false) or chat request.
func (s *OpenAIServer) generate(w http.ResponseWriter, r *http.Request, chat bool) {
	body, err := readBody(r, s.cfg.MaxBodyBytes)
	if err != nil {
		if errors.Is(err, errTooLarge) {
			s.fail(w, http.StatusRequestEntityTooLarge, fmt.Sprintf("request body larger than %d bytes", s.cfg.MaxBodyBytes))
		} else {
			s.fail(w, http.StatusBadRequest, "reading the body: "+err.Error())
		}
		return
	}
	req, status, err := s.parse(body, chat)
	if err != nil {
		s.fail(w, status, err.Error())
		return
	}
	rank := 0
	if v := r.Header.Get("X-data-parallel-rank"); v != "" {
		rank, err = strconv.Atoi(strings.TrimSpace(v))
		if err != nil || rank < 0 || rank >= s.e.Ranks() {
			s.fail(w, http.StatusBadRequest, fmt.Sprintf("X-data-parallel-rank %q: want a rank in [0, %d)", v, s.e.Ranks()))
			return
		}
	}
	// The prefill: the prompt's blocks are looked up and stored, and
	// the batch describing it is published, before any token streams.
	req.cached = s.e.ServeTokens(rank, req.tokens) * s.e.cfg.BlockSize
	s.prompt.Add(uint64(len(req.tokens)))
	s.cached.Add(uint64(req.cached))
	if req.stream {
		s.stream(w, r, req)
		return
	}
	s.requests.Add(1)
	s.completion.Add(uint64(req.maxTokens))
	out, _ := json.Marshal(s.whole(req))
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Length", strconv.Itoa(len(out)))
	_, _ = w.Write(out)
}

// stream writes req's tokens as SSE chunks, each flushed on its own.
func (s *OpenAIServer) stream(w http.ResponseWriter, r *http.Request, req *genRequest) {
	s.requests.Add(1)
	s.streams.Add(1)
	w.Header().Set("Content-Type", "text/event-stream; charset=utf-8")
	w.Header().Set("Cache-Control", "no-cache")
	w.WriteHeader(http.StatusOK)
	flusher, _ := w.(http.Flusher)
	buf := make([]byte, 0, 512)
	write := func(v any) bool {
		b, _ := json.Marshal(v)
		buf = append(append(append(buf[:0], "data: "...), b...), "\n\n"...)
		if _, err := w.Write(buf); err != nil {
			return false
		}
		if flusher != nil {
			flusher.Flush()
		}
		return true
	}
	created := s.cfg.Now().Unix()
	id := s.id(req.chat)
	if req.chat && !write(s.chunk(req, id, created, -1)) { // the role chunk
		s.aborted.Add(1)
		return
	}
	for i := range req.maxTokens {
		if i > 0 && s.cfg.TokenInterval > 0 {
			t := time.NewTimer(s.cfg.TokenInterval)
			select {
			case <-t.C:
			case <-r.Context().Done():
				t.Stop()
			}
		}
		if r.Context().Err() != nil || !write(s.chunk(req, id, created, i)) {
			s.aborted.Add(1)
			s.completion.Add(uint64(i))
			return
		}
	}
	s.completion.Add(uint64(req.maxTokens))
	if req.includeUsage {
		u := usage(req, req.maxTokens)
		if !write(streamChunk{ID: id, Object: objectName(req.chat, true), Created: created, Model: req.model, Choices: []streamChoice{}, Usage: &u}) {
			s.aborted.Add(1)
			return
		}
	}
	buf = append(buf[:0], "data: [DONE]\n\n"...)
	if _, err := w.Write(buf); err == nil && flusher != nil {
		flusher.Flush()
	}
}

// id is a response id: vLLM's cmpl- or chatcmpl- prefix, the server's
// nonce and a sequence number.
func (s *OpenAIServer) id(chat bool) string {
	p := "cmpl-"
	if chat {
		p = "chatcmpl-"
	}
	return p + s.nonce + strconv.FormatUint(s.seq.Add(1), 16)
}

// errTooLarge is a body past the limit.
var errTooLarge = errors.New("body too large")

// readBody reads r's body, at most limit bytes.
func readBody(r *http.Request, limit int) ([]byte, error) {
	if r.ContentLength > int64(limit) {
		return nil, errTooLarge
	}
	b, err := io.ReadAll(io.LimitReader(r.Body, int64(limit)+1))
	if err != nil {
		return nil, err
	}
	if len(b) > limit {
		return nil, errTooLarge
	}
	return b, nil
}
