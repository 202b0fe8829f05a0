package httpapi

import "strings"

// RaceEnabled exports raceEnabled to the external tests (package
// httpapi_test).
const RaceEnabled = raceEnabled

// RouteNames returns the selector's route names ("METHOD /template"), for
// the OpenAPI test.
func RouteNames() []string { return routeNames[:] }

// IndexerRouteNames returns the standalone indexer's route names, for the
// OpenAPI test, without the listener-control test routes: they are
// mounted only with DYN_KV_INDEXER_TEST_ENDPOINTS, never in production,
// and the document describes the production API (their contract is
// cmd/kvselect's TestIndexerTestEndpoints).
func IndexerRouteNames() []string {
	var out []string
	for _, n := range ixRouteNames {
		if !strings.HasPrefix(n, "POST /test/") {
			out = append(out, n)
		}
	}
	return out
}

// StartDraining makes s answer every request as Shutdown's drain does (503,
// Connection: close) without closing its listeners, so that a test can
// reach each route's draining answer on a fresh connection.
func StartDraining(s *Server) { s.draining.Store(true) }

// EPPRouteNames returns the EPP's read-only route names, for the OpenAPI
// test.
func EPPRouteNames() []string { return eppRouteNames[:] }
