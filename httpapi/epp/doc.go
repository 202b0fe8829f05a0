// Package epp is kvselect's Endpoint Picker (EPP) for the Gateway API
// Inference Extension: an Envoy ext_proc v3 ExternalProcessor
// (envoyproxy/envoy:api/envoy/service/ext_proc/v3/external_processor.proto)
// speaking GIE's endpoint picker protocol
// (kubernetes-sigs/gateway-api-inference-extension:docs/proposals/004-endpoint-picker-protocol/README.md)
// over the same core.Service as the HTTP front end. It is a sibling of
// httpapi in rank: it calls core and core/text, and nothing below it
// imports it.
//
// # One stream, one request
//
// The gateway opens one Process stream per HTTP request and sends its
// parts in order; Server.Process answers them on the stream's own
// goroutine, which owns every piece of the request's state (stream):
//
//  1. request_headers: the headers are kept (x-dynamo-session-id,
//     x-dynamo-meta-policy-class, x-request-id) with the subset hint of
//     the metadata (envoy.lb.subset_hint /
//     x-gateway-destination-endpoint-subset). In FULL_DUPLEX_STREAMED
//     (the reference mode) nothing is answered yet; in BUFFERED the
//     headers are answered at once, unchanged. A request without a body
//     is routed now, without a booking.
//  2. request_body: chunks accumulate up to Config.MaxBodyBytes (past
//     it: ImmediateResponse 413). At end_of_stream (or request_trailers)
//     the body is parsed as an OpenAI completions (prompt) or chat
//     (messages) request, tokenized exactly as httpapi tokenizes its
//     prompt and messages fields (text.Input.Tokens), and booked through
//     core.Service.SelectAndReserveContext, as POST /select_and_reserve
//     books (same partition, same ledger), or planned in both pools with
//     core.Service.PlanDisagg when Config.Disaggregated.
//  3. The pick is answered: the x-gateway-destination-endpoint header and
//     the same value in the dynamic metadata (Config.MetadataNamespace,
//     key x-gateway-destination-endpoint), both the booked endpoint then
//     Config.Fallbacks others, comma-separated; in full duplex the body
//     follows unchanged in chunks of at most 62,000 bytes. A request
//     that cannot be routed gets an ImmediateResponse whose body is
//     {"error": "..."}: 400 bad body or session id, 413 body too large,
//     429 router queue full, 503 no eligible endpoint (the subset's
//     included), 500 otherwise.
//  4. The response stream is the booking's lifecycle, with no caller
//     reporting anything: the first non-empty response body chunk is
//     prefill complete; every Config.BlockSize output tokens (SSE data:
//     events counted, or usage.completion_tokens of a JSON body or of
//     the final usage event) is one output block; the response's
//     end_of_stream (or its trailers) frees the booking. When the
//     response headers' metadata names another served endpoint
//     (x-gateway-destination-endpoint-served: the gateway fell back), the
//     booking moves to that worker first (served.go).
//
// # Who ends a stream, and what a cancel means
//
// The gateway ends the stream (io.EOF), resets it or drops it (the
// stream's context ends, Recv fails); the server's stop cancels every
// stream. Whatever ends it, Process returns only after the stream's
// booking is freed (stream.finish, counted by reason in Stats.Freed), so
// a request cancelled after its headers, mid-body, during the pick,
// after the pick, after the response headers or mid-response leaks
// nothing. A stream that stays open but goes silent is the one case
// Process cannot see: core's reservation expiry (Service.Sweep) is the
// backstop.
//
// # Observations
//
// Each stream measures its request as it passes, for the host's
// per-request metrics (GIE's request duration, sizes, tokens, TTFT, TPOT
// and scheduling histograms): the time of its first message (the
// request headers), the selection's duration, the request body's and the
// response body's bytes, the first non-empty response chunk, the
// response's end, the prompt's tokens (the response's usage.prompt_tokens,
// else the pick's tokens), the output tokens (usage, else the SSE events
// counted) and usage.prompt_tokens_details.cached_tokens. Process hands
// them to Config.Observer once per request, after the free (Observation,
// observe.go). The measuring reuses the pooled stream: no allocation.
//
// # Health
//
// RegisterHealth serves grpc.health.v1 under every name the gateways and
// charts probe (HealthServices); the host sets them serving once the
// catalog is in and not serving when it stops.
package epp
