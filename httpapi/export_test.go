package httpapi

// RaceEnabled exports raceEnabled to the external tests (package
// httpapi_test).
const RaceEnabled = raceEnabled

// RouteNames returns the selector's route names ("METHOD /template"), for
// the OpenAPI test.
func RouteNames() []string { return routeNames[:] }

// IndexerRouteNames returns the standalone indexer's route names, for the
// OpenAPI test.
func IndexerRouteNames() []string { return ixRouteNames[:] }

// StartDraining makes s answer every request as Shutdown's drain does (503,
// Connection: close) without closing its listeners, so that a test can
// reach each route's draining answer on a fresh connection.
func StartDraining(s *Server) { s.draining.Store(true) }
