// Package httpapi is the fasthttp front end of core.Service: the routes of
// Dynamo's standalone selection service (spec service-api 1), JSON decoding
// and encoding, the mapping of error classes to status codes (core.Status),
// /metrics and /debug/pprof.
//
// # Request lifetime
//
//  1. fasthttp reads the whole body (at most Config.MaxRequestBodySize;
//     larger is a 413 from handleError).
//  2. A JSON route checks Content-Type (415) and decodes: the selection
//     bodies with the hand-written scanner into a pooled request whose
//     slices are reused and whose strings alias the body; the cold routes
//     with go-json (strings copied).
//  3. core runs; it copies every string and slice it keeps.
//  4. The response is encoded into a pooled buffer and copied into the
//     fasthttp response; the pooled request is reset (dropping every
//     reference into the body) and released before the handler returns.
//
// Nothing obtained from a RequestCtx outlives the handler.
//
// # Errors
//
// Every error body is {"error": msg}. Syntax errors are 400 and data errors
// (wrong type, missing required field) 422, with axum's texts ("Failed to
// parse the request body as JSON: ..." and "Failed to deserialize the JSON
// body into the target type: ..."). Unknown fields are ignored. Unknown
// routes are 404 "route not found", wrong methods 405 "method not allowed".
package httpapi
