package httpapi

import (
	"bytes"
	"context"

	"github.com/kvselect/kvselect/core"
	"github.com/valyala/fasthttp"
)

// 415 as axum's Json extractor does.
func (s *Server) jsonBody(ctx *fasthttp.RequestCtx) ([]byte, bool) {
	if !isJSONContentType(ctx.Request.Header.ContentType()) {
		s.writeErrMsg(ctx, 415, "Expected request with `Content-Type: application/json`")
		return nil, false
	}
	return ctx.PostBody(), true
}

// isJSONContentType accepts application/json and application/*+json, with
// parameters.
func isJSONContentType(ct []byte) bool {
	if i := bytes.IndexByte(ct, ';'); i >= 0 {
		ct = ct[:i]
	}
	ct = bytes.TrimSpace(ct)
	typ, sub, ok := bytes.Cut(ct, []byte("/"))
	if !ok || !bytes.EqualFold(typ, []byte("application")) {
		return false
	}
	return bytes.EqualFold(sub, []byte("json")) || (len(sub) >= 5 && bytes.EqualFold(sub[len(sub)-5:], []byte("+json")))
}

// policyClassHeader names the router policy class a selection asks for
// (the reference reads it on /select and /select_and_reserve; trimmed, an
// empty value is none).
const policyClassHeader = "x-dynamo-meta-policy-class"

// handleSelect serves /select and /select_and_reserve: decode into a pooled
// request, run core, encode into a pooled buffer. Nothing of ctx outlives
// the call.
func (s *Server) handleSelect(ctx *fasthttp.RequestCtx, book bool) {
	body, ok := s.jsonBody(ctx)
	if !ok {
		return
	}
	r := s.selectPool.Get().(*selectReq)
	defer s.releaseSelect(r)
	fields := selectFields
	if book {
		fields = reserveFields
	}
	if err := decodeSelectAs(body, r, fields); err != nil {
		s.writeErr(ctx, err)
		return
	}
	if msg := s.promptTokens(r); msg != "" {
		s.writeErrMsg(ctx, fasthttp.StatusBadRequest, msg)
		return
	}
	var wctx context.Context = context.Background()
	if s.svc.MayWait() {
		// The selection may wait: it ends when the client goes away. The
		// policy class matters only to a queue.
		r.wctx.reset(ctx.Conn())
		defer r.wctx.stop()
		wctx = &r.wctx
		if v := bytes.TrimSpace(ctx.Request.Header.Peek(policyClassHeader)); len(v) > 0 {
			r.req.PolicyClass = b2s(v)
		}
	}
	var err error
	if book {
		err = s.svc.SelectAndReserveContext(wctx, &r.req, &r.out)
	} else {
		err = s.svc.SelectContext(wctx, &r.req, &r.out)
	}
	if err != nil {
		s.writeErr(ctx, err)
		return
	}
	bp := s.bufPool.Get().(*[]byte)
	*bp = appendSelection((*bp)[:0], &r.out, r.echoSeq())
	s.writeRaw(ctx, 200, *bp)
	s.putBuf(bp)
}

// releaseSelect drops the references into the request buffers before the
// pooled request is reused.
//
// A request that grew past maxPooledBytes (an 8 MiB body of token ids
// reaches 8 MiB of slices) is not pooled: the pool would otherwise keep the
// largest prompt ever seen once per P, for the process's life.
func (s *Server) releaseSelect(r *selectReq) {
	r.req.Reset()
	r.out.Reset()
	r.sc.Reset(nil)
	r.rawSeq = nil
	r.wctx.raw, r.wctx.done, r.wctx.finished = nil, nil, nil
	if r.retained() <= maxPooledBytes {
		s.selectPool.Put(r)
	}
}

// maxPooledBytes bounds what one pooled request or response buffer keeps
// between requests: 64 Ki hashes, far above a real prompt's 256 to 8 Ki
// blocks.
const maxPooledBytes = 512 << 10

func (s *Server) handleReserve(ctx *fasthttp.RequestCtx) {
	body, ok := s.jsonBody(ctx)
	if !ok {
		return
	}
	r := s.reservePool.Get().(*reserveReq)
	defer func() {
		r.req.Reset()
		r.sc.Reset(nil)
		if r.retained() <= maxPooledBytes {
			s.reservePool.Put(r)
		}
	}()
	if err := decodeReservation(body, r); err != nil {
		s.writeErr(ctx, err)
		return
	}
	if msg := s.textTokens(&r.req.Prompt, r.req.ModelName, &r.txt); msg != "" {
		s.writeErrMsg(ctx, fasthttp.StatusBadRequest, msg)
		return
	}
	res, err := s.svc.Reserve(&r.req)
	if err != nil {
		s.writeErr(ctx, err)
		return
	}
	s.writeValue(ctx, 201, res)
}

func (s *Server) handleQuery(ctx *fasthttp.RequestCtx, overlap bool) {
	body, ok := s.jsonBody(ctx)
	if !ok {
		return
	}
	r := s.selectPool.Get().(*selectReq)
	defer s.releaseSelect(r)
	if err := decodeSelectAs(body, r, queryFields); err != nil {
		s.writeErr(ctx, err)
		return
	}
	if msg := s.promptTokens(r); msg != "" {
		s.writeErrMsg(ctx, fasthttp.StatusBadRequest, msg)
		return
	}
	q := core.QueryRequest{ModelName: r.req.ModelName, RoutingGroup: r.req.RoutingGroup, Prompt: r.req.Prompt, Override: r.req.Override}
	if overlap {
		res, err := s.svc.OverlapScores(&q)
		if err != nil {
			s.writeErr(ctx, err)
			return
		}
		s.writeValue(ctx, 200, res)
		return
	}
	res, err := s.svc.PotentialLoads(&q)
	if err != nil {
		s.writeErr(ctx, err)
		return
	}
	s.writeValue(ctx, 200, res)
}

func (s *Server) handleOutputBlock(ctx *fasthttp.RequestCtx, id string) {
	body, ok := s.jsonBody(ctx)
	if !ok {
		return
	}
	frac, err := decodeOutputBlock(body)
	if err != nil {
		s.writeErr(ctx, err)
		return
	}
	s.writeStatusOK(ctx, s.svc.OutputBlock(id, frac))
}

func (s *Server) handleUpsert(ctx *fasthttp.RequestCtx) {
	body, ok := s.jsonBody(ctx)
	if !ok {
		return
	}
	spec, err := decodeWorker(body)
	if err != nil {
		s.writeErr(ctx, err)
		return
	}
	rec, err := s.svc.UpsertWorker(&spec)
	if err == nil {
		LogCatalogChange(s.cfg.Logger, "http", "upserted", rec)
	}
	s.writeRecord(ctx, 201, rec, err)
}

func (s *Server) handlePatch(ctx *fasthttp.RequestCtx, id uint64) {
	body, ok := s.jsonBody(ctx)
	if !ok {
		return
	}
	p, err := decodePatch(body)
	if err != nil {
		s.writeErr(ctx, err)
		return
	}
	rec, err := s.svc.PatchWorker(id, &p)
	if err == nil {
		LogCatalogChange(s.cfg.Logger, "http", "patched", rec)
	}
	s.writeRecord(ctx, 200, rec, err)
}

func (s *Server) handleListWorkers(ctx *fasthttp.RequestCtx) {
	q := ctx.QueryArgs()
	recs := s.svc.ListWorkers(string(q.Peek("model_name")), string(q.Peek("routing_group")))
	out := make([]workerJSON, len(recs))
	for i := range recs {
		out[i] = toWorkerJSON(recs[i])
	}
	s.writeValue(ctx, 200, out)
}

func (s *Server) handlePeer(ctx *fasthttp.RequestCtx, register bool) {
	body, ok := s.jsonBody(ctx)
	if !ok {
		return
	}
	endpoint, err := decodePeer(body)
	if err != nil {
		s.writeErr(ctx, err)
		return
	}
	if s.cfg.Peers == nil {
		s.writeErrMsg(ctx, 409, "replica sync is disabled")
		return
	}
	if !register {
		s.writeStatusOK(ctx, s.cfg.Peers.Deregister(endpoint))
		return
	}
	added, err := s.cfg.Peers.Register(endpoint)
	if err != nil {
		s.writeErr(ctx, err)
		return
	}
	status := 200
	if added {
		status = 201
	}
	s.writeRaw(ctx, status, statusOK)
}

// handleDump writes the dump of every partition (appendDump).
func (s *Server) handleDump(ctx *fasthttp.RequestCtx) {
	s.writeRaw(ctx, 200, appendDump(nil, s.svc.Dump()))
}

// handleDisaggPlan serves POST /disagg/plan: decode into a pooled request,
// plan in core (which copies the request), answer the plan's view.
func (s *Server) handleDisaggPlan(ctx *fasthttp.RequestCtx) {
	body, ok := s.jsonBody(ctx)
	if !ok {
		return
	}
	r := s.disaggPool.Get().(*disaggReq)
	defer func() {
		r.reset()
		if r.retained() <= maxPooledBytes {
			s.disaggPool.Put(r)
		}
	}()
	if err := decodeDisagg(body, r); err != nil {
		s.writeErr(ctx, err)
		return
	}
	if msg := s.textTokens(&r.req.Prompt, r.req.ModelName, &r.txt); msg != "" {
		s.writeErrMsg(ctx, fasthttp.StatusBadRequest, msg)
		return
	}
	v, err := s.svc.PlanDisagg(&r.req)
	s.writePlan(ctx, v, err)
}

// writePlan answers a plan's view (200), or the error alone: a failed
// plan's final view is for audit in core, not part of the answer.
func (s *Server) writePlan(ctx *fasthttp.RequestCtx, v core.DisaggPlanView, err error) {
	if err != nil {
		s.writeErr(ctx, err)
		return
	}
	s.writeValue(ctx, 200, v)
}
