package httpapi

import (
	_ "embed"
	"errors"
	"slices"

	"github.com/kvselect/kvselect/core"
	"github.com/valyala/fasthttp"
)

// The endpoint picker's HTTP port (NewEPP): what an operator reads of a
// `kvselect epp`, the selector's read-only routes and nothing that
// changes the catalog or books. GIE's EPP serves only /metrics there
// (llm-d/llm-d-router:pkg/epp/server/options.go, --metrics-port 9090);
// kvselect adds the inspection routes serve has, so the same dashboards
// and scripts read either. The EPP's catalog belongs to its discovery
// (Kubernetes or --workers-file) and its bookings to its ext_proc
// streams: a write route here could only fight them, so none is routed
// (an unknown path is the selector's 404, a write method on a routed
// path its 405).
//
// Invariant: every route of eppRouteNames answers exactly as the
// selector's route of the same name (the handler is the selector's,
// reached through dispatch after the method check), except GET /ready,
// which also asks Config.ReadyCheck, and GET /openapi.json, which serves
// epp_openapi.json, the description of exactly these routes
// (TestEPPOpenAPIDescribesResponses holds it to the server).

// EPP route ids, for metrics.
const (
	erHealth = iota
	erReady
	erLoads
	erWorkers
	erOverlapScores
	erMetrics
	erOpenAPI
	erUnmatched
	erDraining
	erUnauthorized
	numEPPRoutes
)

// eppRouteNames names every route id (keyed, so that an id cannot be
// paired with another's name).
var eppRouteNames = [numEPPRoutes]string{
	erHealth: "GET /health", erReady: "GET /ready", erLoads: "GET /loads", erWorkers: "GET /workers",
	erOverlapScores: "POST /overlap_scores", erMetrics: "GET /metrics", erOpenAPI: "GET /openapi.json",
	erUnmatched: "unmatched", erDraining: "shutting down", erUnauthorized: "unauthorized",
}

var eppRoutes = routeTable{
	names: eppRouteNames[:], dispatch: (*Server).dispatchEPP, draining: erDraining, unauthorized: erUnauthorized,
	drainBody: errShuttingDown, stats: (*Server).writeStats, descs: slices.Concat(statsDescs, sessionDescs, dynamoDescs),
}

// eppOpenAPI is the OpenAPI 3.1 description of the EPP's routes, served
// at its GET /openapi.json; kept by hand like openAPI.
//
//go:embed epp_openapi.json
var eppOpenAPI []byte

// EPPOpenAPI returns the OpenAPI 3.1 document of the EPP's read-only
// routes. The caller must not modify it.
func EPPOpenAPI() []byte { return eppOpenAPI }

// NewEPP returns the read-only HTTP front end of an endpoint picker's
// svc: the routes of eppRouteNames, the same connection handling, drain
// and metrics as New. It takes no bearer token (cfg.AuthToken must be
// empty): nothing it serves changes state, and probes and scrapers read
// it unauthenticated, as GIE's metrics port.
func NewEPP(svc *core.Service, cfg Config) (*Server, error) {
	if len(cfg.AuthToken) > 0 {
		return nil, errors.New("httpapi: the EPP's read-only server takes no auth token")
	}
	s, err := newServer(cfg, &eppRoutes)
	if err != nil {
		return nil, err
	}
	s.svc = svc
	return s, nil
}

// eppPaths maps each EPP path to its route id and whether it is a POST
// (else GET or HEAD).
var eppPaths = map[string]struct {
	route int
	post  bool
}{
	"/health": {erHealth, false}, "/ready": {erReady, false}, "/loads": {erLoads, false}, "/workers": {erWorkers, false},
	"/overlap_scores": {erOverlapScores, true}, "/metrics": {erMetrics, false}, "/openapi.json": {erOpenAPI, false},
}

func (s *Server) dispatchEPP(ctx *fasthttp.RequestCtx) int {
	p, ok := eppPaths[string(ctx.Path())]
	if !ok {
		s.writeRaw(ctx, fasthttp.StatusNotFound, errRouteNotFound)
		return erUnmatched
	}
	m := string(ctx.Method())
	if p.post != (m == "POST") || (!p.post && m != "GET" && m != "HEAD") {
		s.writeRaw(ctx, fasthttp.StatusMethodNotAllowed, errMethodNotAllowed)
		return erUnmatched
	}
	if p.route == erOpenAPI {
		s.writeRaw(ctx, fasthttp.StatusOK, eppOpenAPI)
		return erOpenAPI
	}
	s.dispatch(ctx) // the selector's handler of the same route
	return p.route
}
