// Package extproc is the load harness's side of Envoy's ext_proc v3
// protocol (envoyproxy/envoy:api/envoy/service/ext_proc/v3/external_processor.proto):
// a client that plays Envoy's part of one stream per operation, and a
// no-op ExternalProcessor on the same gRPC stack as the baseline of
// `kvselect bench --mix epp`.
//
// It is a package of its own, under bench, so that gRPC and Envoy's API
// types stay out of bench's own files: bench calls Client and StartNoop
// and knows no protobuf type (the import rule of cmd/kvselect's
// imports_test.go names this package, not bench, as an owner of gRPC).
//
// # One operation, one stream
//
// Stream.Run drives a stream as Envoy does in FULL_DUPLEX_STREAMED mode
// for both bodies, in Envoy's message order. Envoy does not wait for one
// answer before it sends the next message; Run does, after the request
// body and after each response message, so that an operation's latency
// is the processor's answers one after another and a slow processor
// slows its client as it would slow Envoy's downstream:
//
//  1. request_headers (with protocol_config FULL_DUPLEX_STREAMED), then
//     the request body in chunks of at most RequestChunk bytes, the last
//     with end_of_stream;
//  2. the pick: a request_headers answer (its dynamic metadata names the
//     destination), or an ImmediateResponse, which ends the operation
//     with its status;
//  3. the echoed body: request_body answers until one has end_of_stream;
//  4. response_headers (content-type text/event-stream) and its answer;
//  5. Op.Chunks response_body chunks of Op.EventsPerChunk SSE data events
//     each, the last also carrying data: [DONE] and end_of_stream, each
//     answered;
//  6. CloseSend, then Recv until io.EOF: the processor has returned, so
//     whatever it booked is freed when Run returns.
//
// A Stream is one goroutine's; its messages are built once and reused
// (gRPC has serialized a message when Send returns).
package extproc
