package httpapi

import (
	"errors"
	"io"
	"slices"
	"strconv"
	"sync"

	"github.com/kvselect/kvselect/core"
	"github.com/kvselect/kvselect/perf"
	"github.com/valyala/fasthttp"
)

// The standalone indexer's routes (`python -m dynamo.indexer`,
// ai-dynamo/dynamo:lib/kv-router/src/services/indexer/server.rs; the
// /query_tiered_by_hash route is the newer fork's). Unlike the selector,
// the reference extracts bodies with axum's non-fallible Json, so a body
// that cannot be read is answered in plain text (415, 400, 422, 413, the
// same texts as the selector's JSON errors); handler errors are JSON
// {"error": msg}; an unknown route is an empty 404, a wrong method an
// empty 405 with Allow; /health is an empty 200. GET /openapi.json (a
// kvselect addition) serves indexer_openapi.json, the description of all
// of it.

// Indexer route ids, for metrics.
const (
	ixrRegister = iota
	ixrUnregister
	ixrWorkers
	ixrQuery
	ixrQueryByHash
	ixrQueryTiered
	ixrDump
	ixrRegisterPeer
	ixrDeregisterPeer
	ixrPeers
	ixrHealth
	ixrReopenLogs
	ixrMetrics
	ixrOpenAPI
	ixrTestPause
	ixrTestResume
	ixrTokenize
	ixrDetokenize
	ixrUnmatched
	ixrDraining
	ixrUnauthorized
	numIxRoutes
)

// ixRouteNames names every route id (keyed, so that an id cannot be paired
// with another's name); TestIndexerRouteNames checks that none is empty.
var ixRouteNames = [numIxRoutes]string{
	ixrRegister: "POST /register", ixrUnregister: "POST /unregister", ixrWorkers: "GET /workers",
	ixrQuery: "POST /query", ixrQueryByHash: "POST /query_by_hash", ixrQueryTiered: "POST /query_tiered_by_hash",
	ixrDump: "GET /dump", ixrRegisterPeer: "POST /register_peer", ixrDeregisterPeer: "POST /deregister_peer",
	ixrPeers: "GET /peers", ixrHealth: "GET /health", ixrReopenLogs: "POST /reopen_logs", ixrMetrics: "GET /metrics",
	ixrOpenAPI: "GET /openapi.json", ixrTestPause: "POST /test/pause_listener", ixrTestResume: "POST /test/resume_listener",
	ixrTokenize: "POST /tokenize", ixrDetokenize: "POST /detokenize", ixrUnmatched: "unmatched", ixrDraining: "shutting down", ixrUnauthorized: "unauthorized",
}

// Body limits: the query routes take 8 MiB (a million tokens as JSON), the
// others axum's default of 2 MB.
const (
	ixQueryBodyLimit = 8 << 20
	ixBodyLimit      = 2 << 20
)

var indexerRoutes = routeTable{
	names: ixRouteNames[:], dispatch: (*Server).dispatchIndexer, draining: ixrDraining, unauthorized: ixrUnauthorized,
	drainBody: []byte(`{"error":"indexer is shutting down"}`), stats: (*Server).writeIndexerStats, descs: indexerDescs,
}

// ixQueryPool holds *ixrQuery.
var ixQueryPool = sync.Pool{New: func() any { return new(ixQuery) }}

// NewIndexer returns the HTTP front end of a standalone indexer: the same
// connection handling, drain, auth and metrics as New, with the indexer's
// route set. cfg.MaxRequestBodySize must be at least 8 MiB (the query
// routes' limit).
func NewIndexer(ix *core.Indexer, cfg Config) (*Server, error) {
	cfg.MaxRequestBodySize = max(cfg.MaxRequestBodySize, ixQueryBodyLimit)
	s, err := newServer(cfg, &indexerRoutes)
	if err != nil {
		return nil, err
	}
	s.ix = ix
	return s, nil
}

func (s *Server) dispatchIndexer(ctx *fasthttp.RequestCtx) int {
	m := string(ctx.Method())
	get, post := m == "GET" || m == "HEAD", m == "POST"
	route, wantPost := -1, true
	switch string(ctx.Path()) {
	case "/register":
		route = ixrRegister
	case "/unregister":
		route = ixrUnregister
	case "/query":
		route = ixrQuery
	case "/query_by_hash":
		route = ixrQueryByHash
	case "/query_tiered_by_hash":
		route = ixrQueryTiered
	case "/register_peer":
		route = ixrRegisterPeer
	case "/deregister_peer":
		route = ixrDeregisterPeer
	case "/reopen_logs":
		route = ixrReopenLogs
	case "/workers":
		route, wantPost = ixrWorkers, false
	case "/dump":
		route, wantPost = ixrDump, false
	case "/peers":
		route, wantPost = ixrPeers, false
	case "/health":
		route, wantPost = ixrHealth, false
	case "/metrics":
		route, wantPost = ixrMetrics, false
	case "/openapi.json":
		route, wantPost = ixrOpenAPI, false
	case "/tokenize":
		route = ixrTokenize
	case "/detokenize":
		route = ixrDetokenize
	case "/test/pause_listener":
		if s.cfg.IndexerTestEndpoints {
			route = ixrTestPause
		}
	case "/test/resume_listener":
		if s.cfg.IndexerTestEndpoints {
			route = ixrTestResume
		}
	}
	if route < 0 {
		ctx.SetStatusCode(fasthttp.StatusNotFound)
		return ixrUnmatched
	}
	if (wantPost && !post) || (!wantPost && !get) {
		if wantPost {
			ctx.Response.Header.Set("Allow", "POST")
		} else {
			ctx.Response.Header.Set("Allow", "GET,HEAD")
		}
		ctx.SetStatusCode(fasthttp.StatusMethodNotAllowed)
		return ixrUnmatched
	}
	switch route {
	case ixrHealth:
		ctx.SetStatusCode(fasthttp.StatusOK)
	case ixrReopenLogs:
		// Without an access log the reference answers ok too.
		if a := s.cfg.AccessLog; a != nil {
			if err := a.Reopen(); err != nil {
				s.writeErrMsg(ctx, fasthttp.StatusInternalServerError, err.Error())
				return route
			}
		}
		s.writeRaw(ctx, 200, statusOK)
	case ixrMetrics:
		ctx.Response.Header.SetContentType("text/plain; version=0.0.4; charset=utf-8")
		s.reg.WritePrometheus(ctx)
	case ixrWorkers:
		q := ctx.QueryArgs()
		s.writeValue(ctx, 200, s.ix.Workers(string(q.Peek("model_name")), string(q.Peek("routing_group"))))
	case ixrOpenAPI:
		s.writeRaw(ctx, 200, indexerOpenAPI)
	case ixrDump:
		s.writeRaw(ctx, 200, appendDump(nil, s.ix.Dump()))
	case ixrPeers:
		s.writeValue(ctx, 200, s.ix.Peers())
	case ixrTokenize:
		s.handleTokenize(ctx)
	case ixrDetokenize:
		s.handleDetokenize(ctx)
	default:
		limit := ixBodyLimit
		if route == ixrQuery || route == ixrQueryByHash || route == ixrQueryTiered {
			limit = ixQueryBodyLimit
		}
		if body, ok := s.ixBody(ctx, limit); ok {
			s.handleIxPost(ctx, route, body)
		}
	}
	return route
}

// ixBody returns the body of a JSON request within limit, else answers as
// axum's Json extractor does, in plain text.
func (s *Server) ixBody(ctx *fasthttp.RequestCtx, limit int) ([]byte, bool) {
	if !isJSONContentType(ctx.Request.Header.ContentType()) {
		writeText(ctx, fasthttp.StatusUnsupportedMediaType, "Expected request with `Content-Type: application/json`")
		return nil, false
	}
	body := ctx.PostBody()
	if len(body) > limit {
		writeText(ctx, fasthttp.StatusRequestEntityTooLarge, "Failed to buffer the request body: length limit exceeded")
		return nil, false
	}
	return body, true
}

// writeText answers a plain-text body.
func writeText(ctx *fasthttp.RequestCtx, status int, msg string) {
	ctx.Response.Header.SetContentType("text/plain; charset=utf-8")
	ctx.SetStatusCode(status)
	ctx.SetBodyString(msg)
}

// writeIxDecodeErr answers a body that could not be decoded in plain text
// with its status.
func writeIxDecodeErr(ctx *fasthttp.RequestCtx, err error) {
	var de *decodeError
	if errors.As(err, &de) {
		writeText(ctx, de.status, de.msg)
		return
	}
	writeText(ctx, fasthttp.StatusBadRequest, err.Error())
}

func (s *Server) handleIxPost(ctx *fasthttp.RequestCtx, route int, body []byte) {
	switch route {
	case ixrRegister:
		r, err := decodeIxRegister(body)
		if err != nil {
			writeIxDecodeErr(ctx, err)
			return
		}
		s.setModel(ctx, r.ModelName)
		if err := s.ix.Register(&r); err != nil {
			s.writeErr(ctx, err)
			return
		}
		s.writeRaw(ctx, fasthttp.StatusCreated, statusOK)
	case ixrUnregister:
		r, err := decodeIxUnregister(body)
		if err != nil {
			writeIxDecodeErr(ctx, err)
			return
		}
		s.setModel(ctx, r.model)
		s.writeStatusOK(ctx, s.ix.Unregister(r.id, r.model, r.group, r.dpRank))
	case ixrRegisterPeer, ixrDeregisterPeer:
		url, err := decodeIxPeer(body)
		if err != nil {
			writeIxDecodeErr(ctx, err)
			return
		}
		if route == ixrDeregisterPeer {
			s.writeStatusOK(ctx, s.ix.DeregisterPeer(url))
			return
		}
		if err := s.ix.RegisterPeer(url); err != nil {
			s.writeErr(ctx, err)
			return
		}
		s.writeRaw(ctx, fasthttp.StatusCreated, statusOK)
	case ixrTestPause, ixrTestResume:
		id, rank, err := decodeIxListenerControl(body)
		if err != nil {
			writeIxDecodeErr(ctx, err)
			return
		}
		if route == ixrTestPause {
			err = s.ix.PauseListener(id, rank)
		} else {
			err = s.ix.ResumeListener(id, rank)
		}
		s.writeStatusOK(ctx, err)
	default:
		s.handleIxQuery(ctx, route, body)
	}
}

// handleIxQuery serves the three query routes from a pooled request and
// buffer: no allocation in the steady state.
func (s *Server) handleIxQuery(ctx *fasthttp.RequestCtx, route int, body []byte) {
	q := ixQueryPool.Get().(*ixQuery)
	defer func() {
		q.reset(nil)
		ixQueryPool.Put(q)
	}()
	if err := decodeIxQuery(body, q, route != ixrQuery, len(s.cfg.Tokenizers) > 0); err != nil {
		writeIxDecodeErr(ctx, err)
		return
	}
	s.setModel(ctx, q.model)
	if route == ixrQuery && !q.hasData {
		// A prompt in place of token_ids (decodeIxQuery let it through
		// only with a tokenizer configured): its ids as vLLM's
		// completions endpoint computes them.
		tok, msg := s.tokenizer(q.model, true)
		if tok == nil {
			s.writeErrMsg(ctx, fasthttp.StatusBadRequest, msg)
			return
		}
		q.tokens = tok.Encode(q.tokens[:0], q.text, true)
	}
	var err error
	if route == ixrQuery {
		err = s.ix.Query(q.model, q.group, q.tokens, q.lora, q.salt, &q.match)
	} else {
		if q.hasSalt {
			name := "/query_by_hash"
			if route == ixrQueryTiered {
				name = "/query_tiered_by_hash"
			}
			s.writeErrMsg(ctx, fasthttp.StatusBadRequest, "cache_salt is not accepted by "+name+"; block_hashes must already include the intended cache salt")
			return
		}
		err = s.ix.QueryByHash(q.model, q.group, q.hashes, &q.match)
	}
	if err != nil {
		s.writeErr(ctx, err)
		return
	}
	bp := s.bufPool.Get().(*[]byte)
	if route == ixrQueryTiered {
		*bp = appendTiered((*bp)[:0], &q.match)
	} else {
		*bp = appendScores((*bp)[:0], &q.match)
	}
	s.writeRaw(ctx, 200, *bp)
	s.putBuf(bp)
}

// indexerDescs describe the families writeIndexerStats writes: its own,
// the index's and the connections' (shared with the selector).
var indexerDescs = append([]perf.Desc{
	{Name: "kvselect_indexer_partitions", Kind: perf.Gauge, Help: "Indexer partitions (model_name, routing_group)."},
	{Name: "kvselect_indexer_workers", Kind: perf.Gauge, Help: "Instances registered with the indexer."},
	{Name: "kvselect_indexer_peers", Kind: perf.Gauge, Help: "Recovery peers registered with the indexer."},
	{Name: "kvselect_indexer_peers_limit", Kind: perf.Gauge, Help: "The recovery peers allowed at most."},
}, pick(statsDescs, "kvselect_kv_listeners", "kvselect_kv_listeners_limit", "kvselect_index_blocks",
	"kvselect_index_events_applied_total", "kvselect_index_events_dropped_total", "kvselect_index_max_blocks_per_rank",
	"kvselect_http_connections_open", "kvselect_http_connections_max", "kvselect_http_connections_rejected_total",
	"kvselect_http_accept_retries_total", "kvselect_http_connections_timed_out_total", "kvselect_http_connection_rejecters", "kvselect_http_connection_rejecters_max",
	"kvselect_http_max_request_body_bytes", "kvselect_http_draining")...)

// pick returns the descriptions of the named families; a name without
// one is a bug.
func pick(ds []perf.Desc, names ...string) []perf.Desc {
	out := make([]perf.Desc, 0, len(names))
	for _, n := range names {
		i := slices.IndexFunc(ds, func(d perf.Desc) bool { return d.Name == n })
		if i < 0 {
			panic("BUG: httpapi: no description of " + n)
		}
		out = append(out, ds[i])
	}
	return out
}

// writeIndexerStats exports the indexer's counters at scrape time.
func (s *Server) writeIndexerStats(w io.Writer) {
	st := s.ix.Stats()
	perf.WriteGaugeUint(w, "kvselect_indexer_partitions", uint64(st.Partitions))
	perf.WriteGaugeUint(w, "kvselect_indexer_workers", uint64(st.Workers))
	perf.WriteGaugeUint(w, "kvselect_kv_listeners", uint64(st.Listeners))
	perf.WriteGaugeUint(w, "kvselect_kv_listeners_limit", uint64(st.MaxListeners))
	perf.WriteGaugeUint(w, "kvselect_indexer_peers", uint64(st.Peers))
	perf.WriteGaugeUint(w, "kvselect_indexer_peers_limit", uint64(st.MaxPeers))
	for t := range st.IndexBlocks {
		perf.WriteGauge(w, tierNames[t], float64(st.IndexBlocks[t]))
	}
	perf.WriteGaugeUint(w, "kvselect_index_max_blocks_per_rank", uint64(max(st.IndexMaxBlocksPerRank, 0)))
	perf.WriteCounter(w, `kvselect_index_events_applied_total`, st.EventsApplied)
	for r, n := range st.EventsDropped {
		perf.WriteCounter(w, indexDropNames[r], n)
	}
	s.writeConnStats(w)
}

// appendUint appends v in decimal.
func appendUint(dst []byte, v uint64) []byte { return strconv.AppendUint(dst, v, 10) }

// appendInt appends v in decimal.
func appendInt(dst []byte, v int64) []byte { return strconv.AppendInt(dst, v, 10) }
