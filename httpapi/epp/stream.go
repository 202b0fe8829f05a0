package epp

import (
	"cmp"
	"context"
	"errors"
	"strconv"
	"strings"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	filterv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"github.com/goccy/go-json"
	"github.com/kvselect/kvselect/core"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/structpb"
)

// stream is one gateway stream's request: owned by the goroutine running
// Server.Process for it, start to end; nothing else reads or writes it.
//
// Invariant: booked is true exactly while the request holds a booking
// (id: a reservation, or a plan when plan) that nothing has freed; free
// clears it, and Process calls finish, which frees, before it returns.
type stream struct {
	s   *Server
	ps  extprocv3.ExternalProcessor_ProcessServer
	ctx context.Context

	// The body modes: from the first protocol_config, else
	// Config.FullDuplex. respMode NONE sends no response body.
	modeSet               bool
	duplexReq, duplexResp bool

	// Request side.
	phase       phase
	session     string
	policyClass string
	subset      []string
	hasSubset   bool
	body        []byte
	req         request
	sreq        core.SelectRequest
	sel         core.Selection
	allowed     []uint64

	// The booking (invariant above).
	booked    bool
	plan      bool
	id, leg   string // leg: the decode leg's id of a plan
	dest      string // the booked endpoint, ip:port
	blockSize int64
	why       int // the free reason once known (FreeReasonNames)

	// Response side.
	sse       bool
	prefilled bool
	tokens    int64
	blocks    int64
	line      []byte // an SSE line split across chunks
	lineOver  bool
	resp      []byte // a JSON response body, for its usage
	respOver  bool

	// What the stream measures for Config.Observer (observe.go):
	// received is its first message's time, promptTokens the prompt's
	// tokens as tokenized (0 for the load-only prompt), usagePrompt the
	// response's usage.prompt_tokens (-1 until reported).
	received     time.Time
	promptTokens int64
	usagePrompt  int64
	obs          Observation

	// ans are the reused answers (reuse.go), built with the stream.
	ans *answers
}

// phase is how far the request got.
type phase uint8

const (
	phaseStart    phase = iota
	phaseHeaders        // request headers seen
	phasePicked         // the destination (or an error) was answered
	phaseRejected       // an ImmediateResponse was sent: the rest is ignored
	phaseDone           // the response ended
)

func (st *stream) reset(s *Server, ps extprocv3.ExternalProcessor_ProcessServer) {
	st.sreq.Reset()
	st.sel.Reset()
	if st.ans != nil {
		st.ans.clear()
	}
	*st = stream{
		s: s, ps: ps,
		subset: st.subset[:0], body: st.body[:0], req: request{ids: st.req.ids[:0]},
		sreq: st.sreq, sel: st.sel, allowed: st.allowed[:0], line: st.line[:0], resp: st.resp[:0],
		usagePrompt: -1, obs: Observation{Outcome: noOutcome},
		ans: st.ans,
	}
	if ps != nil {
		st.ctx = ps.Context()
		st.duplexReq, st.duplexResp = *s.cfg.FullDuplex, *s.cfg.FullDuplex
		s.stats.streams.Add(1)
	}
}

// handle answers one message of the gateway's.
func (st *stream) handle(m *extprocv3.ProcessingRequest) error {
	if st.received.IsZero() {
		st.received = time.Now()
	}
	if pc := m.GetProtocolConfig(); pc != nil && !st.modeSet {
		st.modeSet = true
		switch pc.GetRequestBodyMode() {
		case filterv3.ProcessingMode_FULL_DUPLEX_STREAMED:
			st.duplexReq = true
		case filterv3.ProcessingMode_BUFFERED:
			st.duplexReq = false
		default:
			return status.Errorf(codes.FailedPrecondition, "epp: request_body_mode %s: want FULL_DUPLEX_STREAMED or BUFFERED (the EPP reads the whole body before it picks)", pc.GetRequestBodyMode())
		}
		st.duplexResp = pc.GetResponseBodyMode() == filterv3.ProcessingMode_FULL_DUPLEX_STREAMED
	}
	if st.phase == phaseRejected {
		return nil
	}
	switch r := m.Request.(type) {
	case *extprocv3.ProcessingRequest_RequestHeaders:
		return st.requestHeaders(r.RequestHeaders, m.GetMetadataContext())
	case *extprocv3.ProcessingRequest_RequestBody:
		return st.requestBody(r.RequestBody)
	case *extprocv3.ProcessingRequest_RequestTrailers:
		if st.phase < phasePicked {
			if err := st.pick(); err != nil || st.phase == phaseRejected {
				return err
			}
		}
		return st.send(&extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_RequestTrailers{RequestTrailers: &extprocv3.TrailersResponse{}}})
	case *extprocv3.ProcessingRequest_ResponseHeaders:
		return st.responseHeaders(r.ResponseHeaders, m.GetMetadataContext())
	case *extprocv3.ProcessingRequest_ResponseBody:
		return st.responseBody(r.ResponseBody)
	case *extprocv3.ProcessingRequest_ResponseTrailers:
		st.responseEnd()
		return st.send(&extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_ResponseTrailers{ResponseTrailers: &extprocv3.TrailersResponse{}}})
	}
	return nil
}

func (st *stream) send(r *extprocv3.ProcessingResponse) error { return st.ps.Send(r) }

// headerValue is a header's value: raw_value, else value (Envoy since
// 1.27 sends raw_value; llm-d's pkg/common/envoy/headers.go reads both).
func headerValue(h *corev3.HeaderValue) string {
	if len(h.GetRawValue()) > 0 {
		return string(h.GetRawValue())
	}
	return h.GetValue()
}

func (st *stream) requestHeaders(h *extprocv3.HttpHeaders, md *corev3.Metadata) error {
	st.phase = phaseHeaders
	for _, hv := range h.GetHeaders().GetHeaders() {
		switch strings.ToLower(hv.GetKey()) {
		case SessionHeader:
			// Dynamo's EPP takes the first non-empty trimmed value.
			if v := strings.TrimSpace(headerValue(hv)); v != "" && st.session == "" {
				st.session = v
			}
		case PolicyClassHeader:
			st.policyClass = strings.TrimSpace(headerValue(hv))
		}
	}
	st.readSubset(md)
	if h.GetEndOfStream() {
		// A request without a body (GET /v1/models): any eligible worker,
		// nothing booked (as Dynamo's EPP and llm-d route them).
		return st.pickUnbooked()
	}
	if !st.duplexReq {
		// BUFFERED: Envoy waits for this answer before it sends the body;
		// the destination rides on the body's answer.
		return st.send(&extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_RequestHeaders{RequestHeaders: &extprocv3.HeadersResponse{}}})
	}
	return nil
}

// readSubset reads the subset hint: a list of ip:port strings (the
// protocol's form) or one comma-separated string (Dynamo's EPP accepts
// it too).
func (st *stream) readSubset(md *corev3.Metadata) {
	ns, ok := md.GetFilterMetadata()[st.s.cfg.SubsetNamespace]
	if !ok {
		return
	}
	v, ok := ns.GetFields()[SubsetKey]
	if !ok {
		return
	}
	st.hasSubset = true
	switch k := v.GetKind().(type) {
	case *structpb.Value_ListValue:
		for _, e := range k.ListValue.GetValues() {
			if s, ok := e.GetKind().(*structpb.Value_StringValue); ok && strings.TrimSpace(s.StringValue) != "" {
				st.subset = append(st.subset, strings.TrimSpace(s.StringValue))
			}
		}
	case *structpb.Value_StringValue:
		for _, s := range strings.Split(k.StringValue, ",") {
			if s = strings.TrimSpace(s); s != "" {
				st.subset = append(st.subset, s)
			}
		}
	}
}

func (st *stream) requestBody(b *extprocv3.HttpBody) error {
	if st.phase >= phasePicked {
		return nil // a body after the pick (a confused gateway): ignored
	}
	if len(st.body)+len(b.GetBody()) > st.s.cfg.MaxBodyBytes {
		return st.reject(413, OutcomeTooLarge, "request body larger than "+strconv.Itoa(st.s.cfg.MaxBodyBytes)+" bytes")
	}
	st.body = append(st.body, b.GetBody()...)
	if !b.GetEndOfStream() {
		return nil
	}
	return st.pick()
}

// reject answers an ImmediateResponse with status code and {"error": msg};
// the gateway then ends the request, and the stream's remaining messages
// are ignored.
func (st *stream) reject(code int, outcome int, msg string) error {
	st.phase = phaseRejected
	st.count(outcome)
	body, _ := json.Marshal(struct {
		Error string `json:"error"`
	}{msg})
	return st.send(immediate(code, body, OutcomeNames[outcome]))
}

// rejectErr answers err's status (statusOf).
func (st *stream) rejectErr(err error) error {
	if st.ctx.Err() != nil {
		// The gateway went away during the pick: nobody reads an answer.
		st.count(OutcomeAbandoned)
		st.why = FreeCancelled
		return st.ctx.Err()
	}
	code, outcome := statusOf(err)
	return st.reject(code, outcome, err.Error())
}

// statusOf maps an error to the protocol's status: 400 for the client's
// body and core's bad requests (a session id too long), 429 for a router
// queue at its cap (core.ErrOverloaded: the request is dropped, as the
// protocol's 429), 503 when no endpoint can take it now, 500 otherwise.
func statusOf(err error) (code, outcome int) {
	if errors.Is(err, errBody) {
		return 400, OutcomeBadRequest
	}
	switch core.ClassOf(err) {
	case core.ErrBadRequest:
		return 400, OutcomeBadRequest
	case core.ErrOverloaded:
		return 429, OutcomeOverloaded
	case core.ErrNotReady, core.ErrCapacity, core.ErrNotFound, core.ErrConflict:
		return 503, OutcomeUnavailable
	}
	return 500, OutcomeInternal
}

// prompt puts the body's tokens into st.sreq.Prompt: token ids as sent,
// or the text tokenized as httpapi's prompt and messages fields are
// (text.Input.Tokens; special tokens added to a prompt, not to a chat,
// unless add_special_tokens says otherwise, as vLLM). No tokenizer
// configured, or no text: the loadOnly prompt.
func (st *stream) prompt() error {
	r, p := &st.req, &st.sreq.Prompt
	if r.hasIDs {
		p.TokenIDs, p.HasTokenIDs = append(p.TokenIDs[:0], r.ids...), true
		st.promptTokens = int64(len(r.ids))
		return nil
	}
	if !r.in.Has() || len(st.s.cfg.Tokenizers) == 0 {
		p.TokenIDs, p.HasTokenIDs = append(p.TokenIDs[:0], loadOnly...), true
		return nil
	}
	tok, msg := st.s.tokenizer(r.model, r.hasModel)
	if tok == nil {
		return badBody(msg)
	}
	add := r.in.HasPrompt
	if r.hasAddSpecial {
		add = r.addSpecial
	}
	ids, err := r.in.Tokens(tok, p.TokenIDs[:0], add, st.s.cfg.Now())
	if err != nil {
		return badBody(err.Error())
	}
	p.TokenIDs, p.HasTokenIDs = ids, true
	st.promptTokens = int64(len(ids))
	return nil
}

// loadOnly is the prompt of a request without tokens (no tokenizer, no
// text, no body): core needs a prompt of at least one token, and one
// token fills no block, so the pick is by load alone and the index learns
// nothing from it.
var loadOnly = []uint32{0}

// model is the partition's model: the configured one, else the body's.
func (st *stream) model() string { return cmp.Or(st.s.cfg.ModelName, st.req.model) }

// pick parses, tokenizes, books and answers the destination.
func (st *stream) pick() error {
	st.phase = phasePicked
	st.obs.RequestBytes = len(st.body)
	if err := parseBody(st.body, &st.req); err != nil {
		return st.rejectErr(err)
	}
	if err := st.prompt(); err != nil {
		return st.rejectErr(err)
	}
	cfg := &st.s.cfg
	group := cfg.RoutingGroup
	if cfg.Disaggregated {
		group = cmp.Or(cfg.DecodeRoutingGroup, core.DefaultDecodeRoutingGroup)
	}
	if st.hasSubset {
		st.allowed = st.s.subsetIDs(st.model(), group, st.subset, st.allowed[:0])
		if len(st.allowed) == 0 {
			return st.reject(503, OutcomeUnavailable, "no endpoint of the subset hint is an eligible worker")
		}
		st.s.stats.subset.Add(1)
	}
	var prefill *core.PlanLeg
	var endpoint string
	start := time.Now()
	if cfg.Disaggregated {
		v, err := st.s.svc.PlanDisagg(&core.DisaggRequest{
			ModelName: st.model(), PrefillRoutingGroup: cfg.PrefillRoutingGroup, DecodeRoutingGroup: cfg.DecodeRoutingGroup,
			Prompt: st.sreq.Prompt, SessionID: st.session,
			AllowedWorkerIDs: st.planAllowed(), HasAllowedWorkerIDs: st.hasSubset,
		})
		st.scheduled(start)
		if err != nil {
			return st.rejectErr(err)
		}
		st.booked, st.plan, st.id, st.blockSize = true, true, v.SelectionID, int64(cfg.BlockSize)
		st.leg = v.SelectionID + "/decode"
		if v.Decode != nil {
			endpoint = v.Decode.Endpoint
		}
		prefill = v.Prefill
	} else {
		r := &st.sreq
		r.ModelName, r.RoutingGroup = st.model(), group
		r.SessionID, r.HasSessionID = st.session, st.session != ""
		r.PolicyClass = st.policyClass
		r.AllowedWorkerIDs, r.HasAllowedWorkerIDs = st.allowed, st.hasSubset
		err := st.s.svc.SelectAndReserveContext(st.ctx, r, &st.sel)
		st.scheduled(start)
		if err != nil {
			return st.rejectErr(err)
		}
		st.booked, st.id = true, st.sel.SelectionID
		st.blockSize = int64(cmp.Or(st.sel.BlockSize, cfg.BlockSize))
		endpoint = st.sel.Endpoint
	}
	dest, ok := hostPort(endpoint)
	if !ok {
		st.free(FreeRejected)
		return st.reject(503, OutcomeUnavailable, "the picked worker's endpoint "+strconv.Quote(endpoint)+" is not an ip:port")
	}
	st.dest = dest
	list := dest
	if cfg.Fallbacks > 0 && !cfg.Disaggregated {
		list = st.s.fallbacks(st, dest)
	}
	st.count(OutcomeRouted)
	st.s.stats.picks.Add(1)
	mut := st.ans.destination(list)
	if prefill != nil {
		if php, ok := hostPort(prefill.Endpoint); ok {
			mut.SetHeaders = append(mut.SetHeaders, setHeader(PrefillerHostHeader, php))
		}
		mut.SetHeaders = append(mut.SetHeaders,
			setHeader(PrefillIDHeader, strconv.FormatUint(prefill.WorkerID, 10)),
			setHeader(PrefillRankHeader, strconv.FormatUint(uint64(prefill.DPRank), 10)))
	} else {
		// A client's copies must not reach a P/D sidecar.
		mut.RemoveHeaders = removePrefillHeaders
	}
	return st.answerPick(mut, list)
}

// planAllowed is a plan's allow-set: the subset's decode workers and
// every prefill worker (the hint names the decode pool's endpoints;
// worker ids are service-wide).
func (st *stream) planAllowed() []uint64 {
	if !st.hasSubset {
		return nil
	}
	cfg := &st.s.cfg
	for _, r := range st.s.svc.ListWorkers(cmp.Or(st.model(), core.DefaultPartition), cmp.Or(cfg.PrefillRoutingGroup, core.DefaultPrefillRoutingGroup)) {
		st.allowed = append(st.allowed, r.WorkerID)
	}
	return st.allowed
}

// pickUnbooked routes a request without a body: core's pick over an
// empty prompt, not booked.
func (st *stream) pickUnbooked() error {
	st.phase = phasePicked
	cfg := &st.s.cfg
	group := cfg.RoutingGroup
	if cfg.Disaggregated {
		group = cmp.Or(cfg.DecodeRoutingGroup, core.DefaultDecodeRoutingGroup)
	}
	if st.hasSubset {
		st.allowed = st.s.subsetIDs(cfg.ModelName, group, st.subset, st.allowed[:0])
		if len(st.allowed) == 0 {
			return st.reject(503, OutcomeUnavailable, "no endpoint of the subset hint is an eligible worker")
		}
	}
	r := &st.sreq
	r.ModelName, r.RoutingGroup = cfg.ModelName, group
	r.TokenIDs, r.HasTokenIDs = append(r.TokenIDs[:0], loadOnly...), true
	r.AllowedWorkerIDs, r.HasAllowedWorkerIDs = st.allowed, st.hasSubset
	start := time.Now()
	err := st.s.svc.SelectContext(st.ctx, r, &st.sel)
	st.scheduled(start)
	if err != nil {
		return st.rejectErr(err)
	}
	dest, ok := hostPort(st.sel.Endpoint)
	if !ok {
		return st.reject(503, OutcomeUnavailable, "the picked worker's endpoint "+strconv.Quote(st.sel.Endpoint)+" is not an ip:port")
	}
	st.count(OutcomeRoutedUnbooked)
	st.s.stats.picks.Add(1)
	return st.send(&extprocv3.ProcessingResponse{
		Response: &extprocv3.ProcessingResponse_RequestHeaders{RequestHeaders: &extprocv3.HeadersResponse{
			Response: &extprocv3.CommonResponse{HeaderMutation: destination(dest), ClearRouteCache: true}}},
		DynamicMetadata: st.s.metadata(dest),
	})
}

// answerPick sends the destination: with the headers answer then the
// body in chunks (full duplex), or with the body's answer (BUFFERED).
func (st *stream) answerPick(mut *extprocv3.HeaderMutation, list string) error {
	if !st.duplexReq {
		common := &extprocv3.CommonResponse{HeaderMutation: mut, ClearRouteCache: true}
		md := st.s.metadata(list)
		return st.send(&extprocv3.ProcessingResponse{
			Response:        &extprocv3.ProcessingResponse_RequestBody{RequestBody: &extprocv3.BodyResponse{Response: common}},
			DynamicMetadata: md,
		})
	}
	st.ans.destMD.StringValue = list
	if err := st.send(st.ans.pick); err != nil {
		return err
	}
	// The body goes back unchanged: in full duplex a body the EPP does
	// not return reaches the upstream empty. An empty body is one empty
	// last chunk.
	b := st.body
	for {
		n := min(len(b), bodyChunk)
		last := n == len(b)
		if err := st.send(st.ans.streamed(b[:n], last, true)); err != nil {
			return err
		}
		if last {
			return nil
		}
		b = b[n:]
	}
}

func (st *stream) responseHeaders(h *extprocv3.HttpHeaders, md *corev3.Metadata) error {
	for _, hv := range h.GetHeaders().GetHeaders() {
		if strings.EqualFold(hv.GetKey(), "content-type") && strings.Contains(strings.ToLower(headerValue(hv)), "text/event-stream") {
			st.sse = true
		}
	}
	if st.booked {
		st.served(md) // served.go: the booking follows a fallback
	}
	if h.GetEndOfStream() {
		st.responseEnd()
	}
	return st.send(responseHeadersAck)
}
