package httpapi

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"sync"
	"time"

	json "github.com/goccy/go-json"
	"github.com/kvselect/kvselect/core"
	"github.com/kvselect/kvselect/perf"
	"github.com/valyala/fasthttp"
)

// DefaultMaxRequestBodySize is the reference's REQUEST_BODY_LIMIT_BYTES.
const DefaultMaxRequestBodySize = 8 << 20

// Config configures a Server.
type Config struct {
	// MaxRequestBodySize is the body limit of every route; larger bodies
	// get 413. > 0.
	MaxRequestBodySize int
	// Pprof mounts /debug/pprof/*.
	Pprof bool
	// ReadTimeout, WriteTimeout and IdleTimeout bound one connection;
	// WriteTimeout must exceed the longest CPU profile requested.
	ReadTimeout, WriteTimeout, IdleTimeout time.Duration
	// Concurrency caps concurrent connections (fasthttp's Server.Concurrency);
	// 0 is fasthttp's default (256 Ki).
	Concurrency int
	// Peers manages replica-sync peers; nil answers as a selector started
	// without --replica-sync-port.
	Peers Peers
	// Logf logs server errors; nil discards them.
	Logf func(format string, args ...any)
}

// DefaultConfig returns the defaults: 8 MiB bodies, pprof on, 60 s
// read/idle and 120 s write timeouts.
func DefaultConfig() Config {
	return Config{
		MaxRequestBodySize: DefaultMaxRequestBodySize,
		Pprof:              true,
		ReadTimeout:        60 * time.Second,
		WriteTimeout:       120 * time.Second,
		IdleTimeout:        60 * time.Second,
	}
}

// Validate reports an invalid Config.
func (c *Config) Validate() error {
	if c.MaxRequestBodySize <= 0 {
		return fmt.Errorf("httpapi: max request body size must be > 0, got %d", c.MaxRequestBodySize)
	}
	if c.ReadTimeout < 0 || c.WriteTimeout < 0 || c.IdleTimeout < 0 || c.Concurrency < 0 {
		return errors.New("httpapi: timeouts and concurrency must be >= 0")
	}
	return nil
}

// Peers is the replica-sync peer manager behind /replica_sync/*.
type Peers interface {
	// Register adds a peer endpoint; added is false when already present.
	// An invalid endpoint is an error wrapping core.ErrBadRequest.
	Register(endpoint string) (added bool, err error)
	// Deregister removes a peer; a core.ErrNotFound error when unknown.
	Deregister(endpoint string) error
	// List returns the sorted endpoints.
	List() []string
}

// Server is the HTTP front end of a core.Service.
type Server struct {
	svc    *core.Service
	cfg    Config
	srv    *fasthttp.Server
	reg    *perf.Registry
	routes [numRoutes]*perf.Route

	selectPool  sync.Pool // *selectReq
	reservePool sync.Pool // *reserveReq
	bufPool     sync.Pool // *[]byte
}

// New returns a server for svc. It registers its metrics on a registry of
// its own (Registry).
func New(svc *core.Service, cfg Config) (*Server, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	s := &Server{svc: svc, cfg: cfg, reg: perf.NewRegistry()}
	for i := range s.routes {
		s.routes[i] = s.reg.Route(routeNames[i])
	}
	s.reg.OnScrape(s.writeStats)
	s.selectPool.New = func() any { return new(selectReq) }
	s.reservePool.New = func() any { return new(reserveReq) }
	s.bufPool.New = func() any { b := make([]byte, 0, 4096); return &b }
	s.srv = &fasthttp.Server{
		Handler:                       s.Handle,
		ErrorHandler:                  s.handleError,
		Name:                          "kvselect",
		MaxRequestBodySize:            cfg.MaxRequestBodySize,
		ReadTimeout:                   cfg.ReadTimeout,
		WriteTimeout:                  cfg.WriteTimeout,
		IdleTimeout:                   cfg.IdleTimeout,
		Concurrency:                   cfg.Concurrency,
		NoDefaultServerHeader:         true,
		NoDefaultContentType:          true,
		DisablePreParseMultipartForm:  true,
		DisableHeaderNamesNormalizing: false,
		Logger:                        logger{cfg.Logf},
	}
	return s, nil
}

type logger struct{ f func(string, ...any) }

func (l logger) Printf(format string, args ...any) {
	if l.f != nil {
		l.f(format, args...)
	}
}

// Registry returns the server's metric registry.
func (s *Server) Registry() *perf.Registry { return s.reg }

// Serve serves HTTP on ln until Shutdown.
func (s *Server) Serve(ln net.Listener) error { return s.srv.Serve(ln) }

// Shutdown stops accepting, waits for in-flight requests to finish (or ctx
// to end) and closes the listeners.
func (s *Server) Shutdown(ctx context.Context) error { return s.srv.ShutdownWithContext(ctx) }

// handleError answers what fasthttp rejects before the handler: a body over
// the limit (413) and malformed requests (400), as JSON.
func (s *Server) handleError(ctx *fasthttp.RequestCtx, err error) {
	status, msg := fasthttp.StatusBadRequest, "Failed to read the request: "+err.Error()
	if errors.Is(err, fasthttp.ErrBodyTooLarge) {
		status, msg = fasthttp.StatusRequestEntityTooLarge, "Failed to buffer the request body: length limit exceeded"
	}
	ctx.Response.Header.SetContentType("application/json")
	ctx.SetStatusCode(status)
	ctx.SetBody(appendError(nil, msg))
}

// Route identifiers, for metrics.
const (
	rWorkersGet = iota
	rWorkersPost
	rWorkerPatch
	rWorkerDelete
	rHealth
	rReady
	rSelect
	rSelectAndReserve
	rReservations
	rPrefillComplete
	rOutputBlock
	rReservationDelete
	rLoads
	rPotentialLoads
	rOverlapScores
	rDump
	rRegisterPeer
	rDeregisterPeer
	rPeers
	rMetrics
	rPprof
	rUnmatched
	numRoutes
)

var routeNames = [numRoutes]string{
	"GET /workers", "POST /workers", "PATCH /workers/{worker_id}", "DELETE /workers/{worker_id}",
	"GET /health", "GET /ready", "POST /select", "POST /select_and_reserve", "POST /reservations",
	"POST /reservations/{selection_id}/prefill_complete", "POST /reservations/{selection_id}/output_block",
	"DELETE /reservations/{selection_id}", "GET /loads", "POST /potential_loads", "POST /overlap_scores",
	"GET /dump", "POST /replica_sync/register_peer", "POST /replica_sync/deregister_peer",
	"GET /replica_sync/peers", "GET /metrics", "GET /debug/pprof/*", "unmatched",
}

// Handle is the fasthttp handler: dispatch, then per-route metrics.
func (s *Server) Handle(ctx *fasthttp.RequestCtx) {
	start := time.Now()
	r := s.dispatch(ctx)
	s.routes[r].Observe(ctx.Response.StatusCode(), time.Since(start))
}

var (
	errRouteNotFound    = []byte(`{"error":"route not found"}`)
	errMethodNotAllowed = []byte(`{"error":"method not allowed"}`)
	statusOK            = []byte(`{"status":"ok"}`)
)

// dispatch routes one request and returns its route id.
func (s *Server) dispatch(ctx *fasthttp.RequestCtx) int {
	path := ctx.Path()
	m := ctx.Method()
	get := string(m) == "GET" || string(m) == "HEAD"
	post := string(m) == "POST"
	switch string(path) {
	case "/select_and_reserve":
		if !post {
			return s.notAllowed(ctx)
		}
		s.handleSelect(ctx, true)
		return rSelectAndReserve
	case "/select":
		if !post {
			return s.notAllowed(ctx)
		}
		s.handleSelect(ctx, false)
		return rSelect
	case "/reservations":
		if !post {
			return s.notAllowed(ctx)
		}
		s.handleReserve(ctx)
		return rReservations
	case "/workers":
		switch {
		case get:
			s.handleListWorkers(ctx)
			return rWorkersGet
		case post:
			s.handleUpsert(ctx)
			return rWorkersPost
		}
		return s.notAllowed(ctx)
	case "/health":
		if !get {
			return s.notAllowed(ctx)
		}
		s.writeRaw(ctx, 200, statusOK)
		return rHealth
	case "/ready":
		if !get {
			return s.notAllowed(ctx)
		}
		r := s.svc.Ready()
		status := 200
		if !r.Ready {
			status = 503
		}
		s.writeValue(ctx, status, readinessJSON(r))
		return rReady
	case "/loads":
		if !get {
			return s.notAllowed(ctx)
		}
		q := ctx.QueryArgs()
		s.writeValue(ctx, 200, s.svc.Loads(string(q.Peek("model_name")), string(q.Peek("routing_group"))))
		return rLoads
	case "/potential_loads":
		if !post {
			return s.notAllowed(ctx)
		}
		s.handleQuery(ctx, false)
		return rPotentialLoads
	case "/overlap_scores":
		if !post {
			return s.notAllowed(ctx)
		}
		s.handleQuery(ctx, true)
		return rOverlapScores
	case "/dump":
		if !get {
			return s.notAllowed(ctx)
		}
		s.handleDump(ctx)
		return rDump
	case "/replica_sync/register_peer":
		if !post {
			return s.notAllowed(ctx)
		}
		s.handlePeer(ctx, true)
		return rRegisterPeer
	case "/replica_sync/deregister_peer":
		if !post {
			return s.notAllowed(ctx)
		}
		s.handlePeer(ctx, false)
		return rDeregisterPeer
	case "/replica_sync/peers":
		if !get {
			return s.notAllowed(ctx)
		}
		var peers []string
		if s.cfg.Peers != nil {
			peers = s.cfg.Peers.List()
		}
		if peers == nil {
			peers = []string{}
		}
		s.writeValue(ctx, 200, peers)
		return rPeers
	case "/metrics":
		if !get {
			return s.notAllowed(ctx)
		}
		ctx.Response.Header.SetContentType("text/plain; version=0.0.4; charset=utf-8")
		s.reg.WritePrometheus(ctx)
		return rMetrics
	}
	if rest, ok := bytes.CutPrefix(path, []byte("/workers/")); ok && len(rest) > 0 && bytes.IndexByte(rest, '/') < 0 {
		id, err := strconv.ParseUint(string(rest), 10, 64)
		switch string(m) {
		case "PATCH":
			if err != nil {
				s.writeErrMsg(ctx, 400, "Invalid URL: Cannot parse `"+string(rest)+"` to a `u64`")
			} else {
				s.handlePatch(ctx, id)
			}
			return rWorkerPatch
		case "DELETE":
			if err != nil {
				s.writeErrMsg(ctx, 400, "Invalid URL: Cannot parse `"+string(rest)+"` to a `u64`")
			} else {
				rec, err := s.svc.DeleteWorker(id)
				s.writeRecord(ctx, 200, rec, err)
			}
			return rWorkerDelete
		}
		return s.notAllowed(ctx)
	}
	// The selection id is one path segment, percent-decoded as axum's Path
	// extractor decodes it: it is read from the original path, where %2F is
	// not yet a separator (the normalized path has decoded it and dropped
	// dot segments, so an id like "tenant/req-1" could never be freed).
	rest, ok := bytes.CutPrefix(ctx.URI().PathOriginal(), []byte("/reservations/"))
	escaped := ok
	if !ok {
		rest, ok = bytes.CutPrefix(path, []byte("/reservations/"))
	}
	if ok && len(rest) > 0 {
		id, action, _ := bytes.Cut(rest, []byte("/"))
		if escaped {
			id = unescapeSegment(id)
		}
		if len(id) > 0 {
			switch string(action) {
			case "":
				if bytes.IndexByte(rest, '/') >= 0 {
					break
				}
				if string(m) != "DELETE" {
					return s.notAllowed(ctx)
				}
				s.writeStatusOK(ctx, s.svc.Free(b2s(id)))
				return rReservationDelete
			case "prefill_complete":
				if !post {
					return s.notAllowed(ctx)
				}
				s.writeStatusOK(ctx, s.svc.PrefillComplete(b2s(id)))
				return rPrefillComplete
			case "output_block":
				if !post {
					return s.notAllowed(ctx)
				}
				s.handleOutputBlock(ctx, b2s(id))
				return rOutputBlock
			}
		}
	}
	if s.cfg.Pprof && perf.IsPprofPath(path) {
		perf.Pprof(ctx)
		return rPprof
	}
	s.writeRaw(ctx, 404, errRouteNotFound)
	return rUnmatched
}

// unescapeSegment percent-decodes one path segment; malformed escapes stay
// as they are (as percent_decode leaves them). It allocates only when seg
// has an escape, and returns seg itself otherwise.
func unescapeSegment(seg []byte) []byte {
	i := bytes.IndexByte(seg, '%')
	if i < 0 {
		return seg
	}
	out := append(make([]byte, 0, len(seg)), seg[:i]...)
	for ; i < len(seg); i++ {
		if c := seg[i]; c == '%' && i+2 < len(seg) && isHex(seg[i+1]) && isHex(seg[i+2]) {
			out = append(out, unhex(seg[i+1])<<4|unhex(seg[i+2]))
			i += 2
		} else {
			out = append(out, c)
		}
	}
	return out
}

func isHex(c byte) bool { return c-'0' < 10 || (c|0x20)-'a' < 6 }

func unhex(c byte) byte {
	if c-'0' < 10 {
		return c - '0'
	}
	return (c | 0x20) - 'a' + 10
}

func (s *Server) notAllowed(ctx *fasthttp.RequestCtx) int {
	s.writeRaw(ctx, 405, errMethodNotAllowed)
	return rUnmatched
}

// jsonBody returns the body when the request declares JSON, else answers
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
	if err := decodeSelect(body, r); err != nil {
		s.writeErr(ctx, err)
		return
	}
	var err error
	if book {
		err = s.svc.SelectAndReserve(&r.req, &r.out)
	} else {
		err = s.svc.Select(&r.req, &r.out)
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
	r.sc = scanner{strbuf: r.sc.strbuf[:0]}
	r.rawSeq = nil
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
		r.sc = scanner{strbuf: r.sc.strbuf[:0]}
		if r.retained() <= maxPooledBytes {
			s.reservePool.Put(r)
		}
	}()
	if err := decodeReservation(body, r); err != nil {
		s.writeErr(ctx, err)
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
	if err := decodeSelect(body, r); err != nil {
		s.writeErr(ctx, err)
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
	var b outputBlockBody
	if err := decodeJSON(body, &b); err != nil {
		s.writeErr(ctx, err)
		return
	}
	s.writeStatusOK(ctx, s.svc.OutputBlock(id, b.DecayFraction))
}

func (s *Server) handleUpsert(ctx *fasthttp.RequestCtx) {
	body, ok := s.jsonBody(ctx)
	if !ok {
		return
	}
	var b workerBody
	if err := decodeJSON(body, &b); err != nil {
		s.writeErr(ctx, err)
		return
	}
	if b.WorkerID == nil {
		s.writeErr(ctx, missingField(body, "worker_id"))
		return
	}
	b.WorkerSpec.WorkerID = *b.WorkerID
	rec, err := s.svc.UpsertWorker(&b.WorkerSpec)
	s.writeRecord(ctx, 201, rec, err)
}

func (s *Server) handlePatch(ctx *fasthttp.RequestCtx, id uint64) {
	body, ok := s.jsonBody(ctx)
	if !ok {
		return
	}
	var p core.WorkerPatch
	if err := decodeJSON(body, &p); err != nil {
		s.writeErr(ctx, err)
		return
	}
	rec, err := s.svc.PatchWorker(id, &p)
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
	var b peerBody
	if err := decodeJSON(body, &b); err != nil {
		s.writeErr(ctx, err)
		return
	}
	if b.Endpoint == nil {
		s.writeErr(ctx, missingField(body, "endpoint"))
		return
	}
	if s.cfg.Peers == nil {
		s.writeErrMsg(ctx, 409, "replica sync is disabled")
		return
	}
	if !register {
		s.writeStatusOK(ctx, s.cfg.Peers.Deregister(*b.Endpoint))
		return
	}
	added, err := s.cfg.Peers.Register(*b.Endpoint)
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

// handleDump writes {"<model>:<group>": {"block_size": N, "events": [...]}}.
func (s *Server) handleDump(ctx *fasthttp.RequestCtx) {
	dst := []byte{'{'}
	for i, d := range s.svc.Dump() {
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = appendString(dst, d.Key)
		dst = append(dst, `:{"block_size":`...)
		dst = strconv.AppendUint(dst, uint64(d.BlockSize), 10)
		dst = append(dst, `,"events":[`...)
		for j := range d.Events {
			if j > 0 {
				dst = append(dst, ',')
			}
			dst = core.AppendEventJSON(dst, &d.Events[j])
		}
		dst = append(dst, "]}"...)
	}
	dst = append(dst, '}')
	s.writeRaw(ctx, 200, dst)
}

// workerJSON is a catalog record with its listener states.
type workerJSON struct {
	core.WorkerRecord
	Listeners []listenerJSON `json:"kv_event_listeners,omitempty"`
}

type listenerJSON struct {
	DPRank    uint32  `json:"dp_rank"`
	Endpoint  string  `json:"endpoint"`
	State     string  `json:"state"`
	LastSeq   *uint64 `json:"last_seq"`
	LastError string  `json:"last_error,omitempty"`
	Batches   uint64  `json:"batches"`
	Gaps      uint64  `json:"gaps"`
	Replays   uint64  `json:"replays"`
	Restarts  uint64  `json:"restarts"`
}

func toWorkerJSON(r core.WorkerRecord) workerJSON {
	w := workerJSON{WorkerRecord: r}
	for _, l := range r.Listeners {
		lj := listenerJSON{DPRank: l.DPRank, Endpoint: l.Endpoint, State: l.State, LastError: l.LastError, Batches: l.Batches, Gaps: l.Gaps, Replays: l.Replays, Restarts: l.Restarts}
		if l.HasSeq {
			seq := l.LastSeq
			lj.LastSeq = &seq
		}
		w.Listeners = append(w.Listeners, lj)
	}
	return w
}

type readinessBody struct {
	Ready              bool         `json:"ready"`
	SchedulableWorkers int          `json:"schedulable_workers"`
	Workers            []workerJSON `json:"workers"`
}

func readinessJSON(r core.Readiness) readinessBody {
	b := readinessBody{Ready: r.Ready, SchedulableWorkers: r.SchedulableWorkers, Workers: make([]workerJSON, len(r.Workers))}
	for i := range r.Workers {
		b.Workers[i] = toWorkerJSON(r.Workers[i])
	}
	return b
}

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

// writeErr answers {"error": msg} with the error's status.
func (s *Server) writeErr(ctx *fasthttp.RequestCtx, err error) {
	s.writeErrMsg(ctx, statusOf(err), err.Error())
}

func (s *Server) writeErrMsg(ctx *fasthttp.RequestCtx, status int, msg string) {
	bp := s.bufPool.Get().(*[]byte)
	*bp = appendError((*bp)[:0], msg)
	s.writeRaw(ctx, status, *bp)
	s.putBuf(bp)
}

// retained is what a pooled request would keep between requests.
func (r *selectReq) retained() int  { return r.req.RetainedBytes() + cap(r.sc.strbuf) }
func (r *reserveReq) retained() int { return r.req.RetainedBytes() + cap(r.sc.strbuf) }

// putBuf returns a response buffer to the pool unless it grew past
// maxPooledBytes.
func (s *Server) putBuf(bp *[]byte) {
	if cap(*bp) <= maxPooledBytes {
		s.bufPool.Put(bp)
	}
}

// writeStats turns core.Stats into scrape-time lines.
func (s *Server) writeStats(w io.Writer) {
	st := s.svc.Stats()
	perf.WriteCounter(w, `kvselect_selections_total{outcome="ok"}`, st.SelectOK)
	perf.WriteCounter(w, `kvselect_selections_total{outcome="error"}`, st.SelectFailed)
	perf.WriteCounter(w, `kvselect_bookings_total{outcome="ok"}`, st.BookOK)
	perf.WriteCounter(w, `kvselect_bookings_total{outcome="conflict"}`, st.BookConflict)
	perf.WriteCounter(w, `kvselect_bookings_total{outcome="failed"}`, st.BookFailed)
	perf.WriteCounter(w, `kvselect_reservation_replays_total{outcome="hit"}`, st.ReplayHit)
	perf.WriteCounter(w, `kvselect_reservation_replays_total{outcome="miss"}`, st.ReplayMiss)
	perf.WriteCounter(w, `kvselect_lifecycle_calls_total{outcome="ok"}`, st.LifecycleOK)
	perf.WriteCounter(w, `kvselect_lifecycle_calls_total{outcome="not_found"}`, st.LifecycleNotFound)
	perf.WriteCounter(w, `kvselect_bookings_total{outcome="refused"}`, st.BookRefused)
	perf.WriteCounter(w, `kvselect_reservations_released_total{cause="freed"}`, st.Freed)
	perf.WriteCounter(w, `kvselect_reservations_released_total{cause="expired"}`, st.Expired)
	perf.WriteCounter(w, `kvselect_reservations_released_total{cause="worker_removed"}`, st.WorkerGone)
	perf.WriteGauge(w, `kvselect_active_reservations`, float64(st.Reservations))
	perf.WriteGauge(w, `kvselect_active_reservations_limit`, float64(st.MaxReservations))
	perf.WriteGauge(w, `kvselect_reservation_bytes`, float64(st.ReservationBytes))
	perf.WriteGauge(w, `kvselect_reservation_bytes_limit`, float64(st.MaxReservationBytes))
	perf.WriteGauge(w, `kvselect_kv_listeners`, float64(st.Listeners))
	perf.WriteGauge(w, `kvselect_kv_listeners_limit`, float64(st.MaxListeners))
	perf.WriteGauge(w, `kvselect_pending_selections`, float64(st.PendingEntries))
	perf.WriteGauge(w, `kvselect_pending_selection_bytes`, float64(st.PendingBytes))
	perf.WriteGauge(w, `kvselect_schedulable_workers`, float64(st.SchedulableWorkers))
	perf.WriteGauge(w, `kvselect_partitions`, float64(st.Partitions))
	for t := range st.IndexBlocks {
		perf.WriteGauge(w, tierNames[t], float64(st.IndexBlocks[t]))
	}
	perf.WriteCounter(w, `kvselect_kv_events_applied_total`, st.EventsApplied)
	perf.WriteCounter(w, `kvselect_kv_events_dropped_total`, st.EventsDropped)
}

var tierNames = func() (out [core.NumTiers]string) {
	for t := range out {
		out[t] = perf.Label("kvselect_index_blocks", "tier", core.TierName(t))
	}
	return out
}()
