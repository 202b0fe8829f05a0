// Package httpapi is the fasthttp front end of core.Service: the routes of
// Dynamo's standalone selection service (ai-dynamo/dynamo:
// lib/kv-router/src/services/selection/server.rs), JSON decoding and
// encoding, the one table from core's error classes to status codes
// (classStatus),
// /metrics and GET /openapi.json (openapi.json, the OpenAPI 3.1
// description of every route, field, status and error body, kept in step
// by TestOpenAPIDescribesResponses). Profiling is not served here:
// perf.DebugServer serves /debug/pprof on a listener of its own. The same
// server machinery serves a second route table: NewIndexer, the standalone
// indexer's routes over a core.Indexer (indexer.go), which serves its own
// description at its GET /openapi.json (indexer_openapi.json, kept in step
// by TestIndexerOpenAPIDescribesResponses), and a third: NewEPP, the
// endpoint picker's read-only port, the selector's inspection routes
// without any write route (epp_routes.go, described by
// epp_openapi.json). Client side: Recover (a
// peer's /dump, for startup recovery into a selector or an indexer) and
// RemoteIndex (a standalone indexer as a selector's core.PrimaryIndex,
// remote.go). kvselect adds the /disagg routes over core's disaggregated
// plans (Dynamo's coordinator has no HTTP surface): POST
// /disagg/plan, POST /disagg/{id}/prefill_complete and /plan_decode, DELETE
// and GET /disagg/{id}; a plan answers 200 with its view (core's
// DisaggPlanView), errors their class's status like every route.
//
// # Request lifetime
//
//  1. fasthttp reads the whole body (at most Config.MaxRequestBodySize;
//     larger is a 413 from handleError).
//  2. A JSON route checks Content-Type (415) and decodes with the
//     hand-written scanner (internal/jsonscan, decode.go): the selection
//     bodies into a pooled request whose slices are reused and whose
//     strings alias the body, the cold bodies (workers, output_block,
//     peers) into values whose strings are copies. go-json only encodes
//     responses.
//  3. core runs; it copies every string and slice it keeps.
//  4. The response is encoded into a pooled buffer and copied into the
//     fasthttp response; the pooled request is reset (dropping every
//     reference into the body) and released before the handler returns.
//
// Nothing obtained from a RequestCtx outlives the handler.
//
// A selection that may wait (core.Service.MayWait: a router queue or
// session affinity) runs under a context that ends when its client hangs
// up (clientgone.go): the connection is watched only while the selection
// waits, and the watch ends before the handler returns. The
// x-dynamo-meta-policy-class header (trimmed; empty is none) names the
// router policy class a selection asks for.
//
// # Errors
//
// Every error body is {"error": msg}; a router queue at a class cap
// answers 429 with the reference's "details" ({policy_class, limit_kind,
// current, limit}). Syntax errors are 400 and data errors
// (wrong type, missing required field) 422, with axum's texts ("Failed to
// parse the request body as JSON: ..." and "Failed to deserialize the JSON
// body into the target type: ..."). Keys match field names exactly and
// case-sensitively; a key that matches none is an unknown field and is
// ignored, a known field given twice is a 422 "duplicate field `x`", and a
// string that is not UTF-8 (anywhere in the body) is a 400 "invalid unicode
// code point", as serde_json answers on every route. A message quotes at
// most jsonscan.MaxEcho (256) bytes of the request. Unknown routes are 404
// "route not found", wrong methods 405 "method not allowed".
//
// # Connections, shutdown, security
//
// Serve wraps its listener (conns.go): temporary accept errors such as
// EMFILE are retried with backoff, at most Config.MaxConnections
// connections are open (the excess get a 503 JSON answer and are closed),
// and every connection is registered for Shutdown, which drains them
// (drain.go): requests in the handler finish, later ones get 503 with
// Connection: close, idle connections are closed once nothing waits in
// them. Config.AuthToken requires a bearer token on every route but
// /health, /ready and /metrics (auth.go); Config.TLS serves HTTPS. Neither
// exists in the reference.
package httpapi
