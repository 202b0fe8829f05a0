package httpapi

import (
	"bytes"
	"strconv"
	"unicode/utf8"

	"github.com/kvselect/kvselect/httpapi/internal/jsonscan"
	"github.com/valyala/fasthttp"
)

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
	rDisaggPlan
	rDisaggPrefillComplete
	rDisaggPlanDecode
	rDisaggDelete
	rDisaggGet
	rMetrics
	rOpenAPI
	rTokenize
	rDetokenize
	rUnmatched
	rDraining
	rUnauthorized
	numRoutes
)

// routeNames names every route id (keyed, so that an id cannot be paired
// with another's name).
var routeNames = [numRoutes]string{
	rWorkersGet:            "GET /workers",
	rWorkersPost:           "POST /workers",
	rWorkerPatch:           "PATCH /workers/{worker_id}",
	rWorkerDelete:          "DELETE /workers/{worker_id}",
	rHealth:                "GET /health",
	rReady:                 "GET /ready",
	rSelect:                "POST /select",
	rSelectAndReserve:      "POST /select_and_reserve",
	rReservations:          "POST /reservations",
	rPrefillComplete:       "POST /reservations/{selection_id}/prefill_complete",
	rOutputBlock:           "POST /reservations/{selection_id}/output_block",
	rReservationDelete:     "DELETE /reservations/{selection_id}",
	rLoads:                 "GET /loads",
	rPotentialLoads:        "POST /potential_loads",
	rOverlapScores:         "POST /overlap_scores",
	rDump:                  "GET /dump",
	rRegisterPeer:          "POST /replica_sync/register_peer",
	rDeregisterPeer:        "POST /replica_sync/deregister_peer",
	rPeers:                 "GET /replica_sync/peers",
	rDisaggPlan:            "POST /disagg/plan",
	rDisaggPrefillComplete: "POST /disagg/{selection_id}/prefill_complete",
	rDisaggPlanDecode:      "POST /disagg/{selection_id}/plan_decode",
	rDisaggDelete:          "DELETE /disagg/{selection_id}",
	rDisaggGet:             "GET /disagg/{selection_id}",
	rMetrics:               "GET /metrics",
	rOpenAPI:               "GET /openapi.json",
	rTokenize:              "POST /tokenize",
	rDetokenize:            "POST /detokenize",
	rUnmatched:             "unmatched",
	rDraining:              "shutting down",
	rUnauthorized:          "unauthorized",
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
	case "/tokenize":
		if !post {
			return s.notAllowed(ctx)
		}
		s.handleTokenize(ctx)
		return rTokenize
	case "/detokenize":
		if !post {
			return s.notAllowed(ctx)
		}
		s.handleDetokenize(ctx)
		return rDetokenize
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
		body := readinessJSON(s.svc.Ready())
		if s.cfg.ReadyCheck != nil {
			if err := s.cfg.ReadyCheck(); err != nil {
				body.Ready, body.NotReadyReason = false, err.Error()
			}
		}
		status := 200
		if !body.Ready {
			status = 503
		}
		s.writeValue(ctx, status, body)
		return rReady
	case "/loads":
		if !get {
			return s.notAllowed(ctx)
		}
		q := ctx.QueryArgs()
		s.writeLoads(ctx, string(q.Peek("model_name")), string(q.Peek("routing_group")))
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
	case "/disagg/plan":
		// POST plans; the other methods address a plan whose id is
		// "plan" (below).
		if post {
			s.handleDisaggPlan(ctx)
			return rDisaggPlan
		}
	case "/openapi.json":
		if !get {
			return s.notAllowed(ctx)
		}
		s.writeRaw(ctx, 200, openAPI)
		return rOpenAPI
	case "/metrics":
		if !get {
			return s.notAllowed(ctx)
		}
		ctx.Response.Header.SetContentType("text/plain; version=0.0.4; charset=utf-8")
		s.reg.WritePrometheus(ctx)
		return rMetrics
	}
	if rest, ok := bytes.CutPrefix(path, []byte("/workers/")); ok && len(rest) > 0 && bytes.IndexByte(rest, '/') < 0 {
		id, bad := workerIDParam(rest)
		switch string(m) {
		case "PATCH":
			if bad != "" {
				s.writeErrMsg(ctx, 400, bad)
			} else {
				s.handlePatch(ctx, id)
			}
			return rWorkerPatch
		case "DELETE":
			if bad != "" {
				s.writeErrMsg(ctx, 400, bad)
			} else {
				rec, err := s.svc.DeleteWorker(id)
				if err == nil {
					LogCatalogChange(s.cfg.Logger, "http", "removed", rec)
				}
				s.writeRecord(ctx, 200, rec, err)
			}
			return rWorkerDelete
		}
		return s.notAllowed(ctx)
	}
	if id, action, ok := idPath(ctx, "/reservations/"); ok {
		if r, ok := s.dispatchReservation(ctx, id, string(action)); ok {
			return r
		}
	}
	if id, action, ok := idPath(ctx, "/disagg/"); ok {
		if r, ok := s.dispatchDisagg(ctx, id, string(action)); ok {
			return r
		}
	}
	s.writeRaw(ctx, 404, errRouteNotFound)
	return rUnmatched
}

// dispatchReservation serves /reservations/{selection_id}[/action]; ok is
// false when action names no route.
func (s *Server) dispatchReservation(ctx *fasthttp.RequestCtx, id []byte, action string) (route int, ok bool) {
	m := string(ctx.Method())
	switch action {
	case "":
		if m != "DELETE" {
			return s.notAllowed(ctx), true
		}
		if !s.badSelectionID(ctx, id) {
			s.writeStatusOK(ctx, s.svc.Free(b2s(id)))
		}
		return rReservationDelete, true
	case "prefill_complete":
		if m != "POST" {
			return s.notAllowed(ctx), true
		}
		if !s.badSelectionID(ctx, id) {
			s.writeStatusOK(ctx, s.svc.PrefillComplete(b2s(id)))
		}
		return rPrefillComplete, true
	case "output_block":
		if m != "POST" {
			return s.notAllowed(ctx), true
		}
		if !s.badSelectionID(ctx, id) {
			s.handleOutputBlock(ctx, b2s(id))
		}
		return rOutputBlock, true
	}
	return 0, false
}

// dispatchDisagg serves /disagg/{selection_id}[/action] (kvselect's routes
// over core's disaggregated plans); ok is false when action names no
// route.
func (s *Server) dispatchDisagg(ctx *fasthttp.RequestCtx, id []byte, action string) (route int, ok bool) {
	m := string(ctx.Method())
	switch action {
	case "":
		switch m {
		case "GET", "HEAD":
			route = rDisaggGet
		case "DELETE":
			route = rDisaggDelete
		default:
			return s.notAllowed(ctx), true
		}
	case "prefill_complete":
		route = rDisaggPrefillComplete
	case "plan_decode":
		route = rDisaggPlanDecode
	default:
		return 0, false
	}
	if action != "" && m != "POST" {
		return s.notAllowed(ctx), true
	}
	if s.badSelectionID(ctx, id) {
		return route, true
	}
	sid := b2s(id)
	switch route {
	case rDisaggGet:
		v, err := s.svc.DisaggPlan(sid)
		s.writePlan(ctx, v, err)
	case rDisaggDelete:
		_, err := s.svc.ReleaseDisagg(sid)
		s.writeStatusOK(ctx, err)
	case rDisaggPrefillComplete:
		s.writeStatusOK(ctx, s.svc.DisaggPrefillComplete(sid))
	case rDisaggPlanDecode:
		v, err := s.svc.PlanDecode(sid)
		s.writePlan(ctx, v, err)
	}
	return route, true
}

// idPath splits a path prefix + "{selection_id}" [+ "/" + action]. The id
// is one path segment, percent-decoded as axum's Path extractor decodes it:
// it is read from the original path, where %2F is not yet a separator (the
// normalized path has decoded it and dropped dot segments, so an id like
// "tenant/req-1" could never be freed). ok is false for an empty id and for
// a separator with no action after it.
func idPath(ctx *fasthttp.RequestCtx, prefix string) (id, action []byte, ok bool) {
	rest, ok := bytes.CutPrefix(ctx.URI().PathOriginal(), []byte(prefix))
	escaped := ok
	if !ok {
		rest, ok = bytes.CutPrefix(ctx.Path(), []byte(prefix))
	}
	if !ok {
		return nil, nil, false
	}
	id, action, sep := bytes.Cut(rest, []byte("/"))
	if escaped {
		id = unescapeSegment(id)
	}
	if len(id) == 0 || (sep && len(action) == 0) {
		return nil, nil, false
	}
	return id, action, true
}

// workerIDParam parses the {worker_id} path segment as axum's Path<u64>
// does; bad is the 400 message when it is not UTF-8 or not a u64.
func workerIDParam(seg []byte) (id uint64, bad string) {
	if !utf8.Valid(seg) {
		return 0, "Invalid URL: Invalid UTF-8 in `worker_id`"
	}
	id, err := strconv.ParseUint(string(seg), 10, 64)
	if err != nil {
		return 0, "Invalid URL: Cannot parse `" + jsonscan.Echo(seg) + "` to a `u64`"
	}
	return id, ""
}

// badSelectionID answers 400 when the percent-decoded {selection_id} is not
// UTF-8, as axum's Path<String> does, and reports whether it did.
func (s *Server) badSelectionID(ctx *fasthttp.RequestCtx, id []byte) bool {
	if utf8.Valid(id) {
		return false
	}
	s.writeErrMsg(ctx, 400, "Invalid URL: Invalid UTF-8 in `selection_id`")
	return true
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
