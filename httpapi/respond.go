package httpapi

import (
	"errors"

	json "github.com/goccy/go-json"
	"github.com/kvselect/kvselect/core"
	"github.com/valyala/fasthttp"
)

func (s *Server) writeRecord(ctx *fasthttp.RequestCtx, status int, rec core.WorkerRecord, err error) {
	if err != nil {
		s.writeErr(ctx, err)
		return
	}
	s.writeValue(ctx, status, toWorkerJSON(rec))
}

func (s *Server) writeStatusOK(ctx *fasthttp.RequestCtx, err error) {
	if err != nil {
		s.writeErr(ctx, err)
		return
	}
	s.writeRaw(ctx, 200, statusOK)
}

func (s *Server) writeRaw(ctx *fasthttp.RequestCtx, status int, body []byte) {
	ctx.Response.Header.SetContentType("application/json")
	ctx.SetStatusCode(status)
	ctx.SetBody(body)
}

// writeValue encodes v with go-json (cold routes).
func (s *Server) writeValue(ctx *fasthttp.RequestCtx, status int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		s.writeErrMsg(ctx, 500, "failed to encode response: "+err.Error())
		return
	}
	s.writeRaw(ctx, status, b)
}

// classStatus is the one table from the domain's error classes to HTTP
// statuses (ai-dynamo/dynamo:lib/kv-router/src/services/selection/error.rs:
// BadRequest 400, NotFound 404, Conflict 409, NotReady 503, overload 429,
// Internal 500; kvselect's own capacity limits answer 503, as a full
// service that another replica may serve).
var classStatus = [...]struct {
	class  error
	status int
}{
	{core.ErrBadRequest, fasthttp.StatusBadRequest},
	{core.ErrNotFound, fasthttp.StatusNotFound},
	{core.ErrConflict, fasthttp.StatusConflict},
	{core.ErrNotReady, fasthttp.StatusServiceUnavailable},
	{core.ErrOverloaded, fasthttp.StatusTooManyRequests},
	{core.ErrCapacity, fasthttp.StatusServiceUnavailable},
	{core.ErrInternal, fasthttp.StatusInternalServerError},
}

// statusOf returns the status of an error: a decode error's own, else its
// class's (500 for an unclassified error).
func statusOf(err error) int {
	var de *decodeError
	if errors.As(err, &de) {
		return de.status
	}
	class := core.ClassOf(err)
	for _, c := range classStatus {
		if c.class == class {
			return c.status
		}
	}
	return fasthttp.StatusInternalServerError
}

// writeErr answers {"error": msg} with the error's status; a router
// queue rejection adds its "details".
func (s *Server) writeErr(ctx *fasthttp.RequestCtx, err error) {
	if r := core.AsQueueRejection(err); r != nil {
		bp := s.bufPool.Get().(*[]byte)
		*bp = appendRejection((*bp)[:0], err.Error(), r)
		s.writeRaw(ctx, statusOf(err), *bp)
		s.putBuf(bp)
		return
	}
	s.writeErrMsg(ctx, statusOf(err), err.Error())
}

func (s *Server) writeErrMsg(ctx *fasthttp.RequestCtx, status int, msg string) {
	bp := s.bufPool.Get().(*[]byte)
	*bp = appendError((*bp)[:0], msg)
	s.writeRaw(ctx, status, *bp)
	s.putBuf(bp)
}

// retained is what a pooled request would keep between requests.
func (r *selectReq) retained() int  { return r.req.RetainedBytes() + r.sc.Retained() }
func (r *reserveReq) retained() int { return r.req.RetainedBytes() + r.sc.Retained() }

// putBuf returns a response buffer to the pool unless it grew past
// maxPooledBytes.
func (s *Server) putBuf(bp *[]byte) {
	if cap(*bp) <= maxPooledBytes {
		s.bufPool.Put(bp)
	}
}
