package httpapi

// RaceEnabled exports raceEnabled to the external tests (package
// httpapi_test).
const RaceEnabled = raceEnabled

// RouteNames returns the selector's route names ("METHOD /template"), for
// the OpenAPI test.
func RouteNames() []string { return routeNames[:] }
