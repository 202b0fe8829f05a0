package epp

import (
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"google.golang.org/protobuf/types/known/structpb"
)

// The answers of the full-duplex path, built once per pooled stream and
// reused message after message, stream after stream: of the 33
// allocations a stream's own answers made (BenchmarkEPPStream, alloc
// profile), this leaves none on the routed path.
//
// Invariant: a reused message is changed only between two Sends of its
// stream's goroutine. grpc-go's ServerStream.SendMsg has encoded the
// message when it returns; only a stats handler or tracer may read it
// later (grpc.ServerStream's doc), and the EPP's gRPC server installs
// none. The bodies the echoes carry alias the request's message, which
// Process does not reuse before the echo is sent.
type answers struct {
	// pick is the full-duplex pick: the headers answer with the
	// destination header (destHV.RawValue) and the same list in the
	// dynamic metadata (destMD.StringValue, under the namespace the
	// stream's Server was built with: a pooled stream never changes
	// Server).
	pick       *extprocv3.ProcessingResponse
	pickMut    *extprocv3.HeaderMutation
	destHV     *corev3.HeaderValue
	destOpt    *corev3.HeaderValueOption
	destMD     *structpb.Value_StringValue
	pickCommon *extprocv3.CommonResponse
	// reqEcho and respEcho are a body chunk's echo; their streamed
	// response (reqSR, respSR) takes each chunk's body and end_of_stream.
	reqEcho, respEcho *extprocv3.ProcessingResponse
	reqSR, respSR     *extprocv3.StreamedBodyResponse
	// in is the message Recv decodes into (proto's Unmarshal resets it
	// first, so nothing of the previous message is read).
	in *extprocv3.ProcessingRequest
}

// removePrefillHeaders is the pick's RemoveHeaders when no prefill worker
// is named: shared by every stream, read-only (marshalling reads it).
var removePrefillHeaders = []string{PrefillerHostHeader, PrefillIDHeader, PrefillRankHeader}

// responseHeadersAck is the answer to the response headers: shared by
// every stream, never changed (marshalling reads a message; its size
// cache is atomic).
var responseHeadersAck = &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_ResponseHeaders{ResponseHeaders: &extprocv3.HeadersResponse{}}}

func newAnswers(ns string) *answers {
	a := &answers{in: &extprocv3.ProcessingRequest{}}
	a.destHV = &corev3.HeaderValue{Key: DestinationHeader}
	a.destOpt = &corev3.HeaderValueOption{Header: a.destHV, AppendAction: corev3.HeaderValueOption_OVERWRITE_IF_EXISTS_OR_ADD}
	a.pickMut = &extprocv3.HeaderMutation{}
	a.destMD = &structpb.Value_StringValue{}
	a.pickCommon = &extprocv3.CommonResponse{HeaderMutation: a.pickMut, ClearRouteCache: true}
	a.pick = &extprocv3.ProcessingResponse{
		Response: &extprocv3.ProcessingResponse_RequestHeaders{RequestHeaders: &extprocv3.HeadersResponse{Response: a.pickCommon}},
		DynamicMetadata: &structpb.Struct{Fields: map[string]*structpb.Value{
			ns: structpb.NewStructValue(&structpb.Struct{Fields: map[string]*structpb.Value{DestinationHeader: {Kind: a.destMD}}}),
		}},
	}
	a.reqSR, a.respSR = &extprocv3.StreamedBodyResponse{}, &extprocv3.StreamedBodyResponse{}
	echo := func(sr *extprocv3.StreamedBodyResponse) *extprocv3.BodyResponse {
		return &extprocv3.BodyResponse{Response: &extprocv3.CommonResponse{BodyMutation: &extprocv3.BodyMutation{
			Mutation: &extprocv3.BodyMutation_StreamedResponse{StreamedResponse: sr},
		}}}
	}
	a.reqEcho = &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_RequestBody{RequestBody: echo(a.reqSR)}}
	a.respEcho = &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_ResponseBody{ResponseBody: echo(a.respSR)}}
	return a
}

// destination sets the pick's header mutation to name list: the
// destination header first (SetHeaders[0]), the caller appending the
// prefill worker's headers or setting RemoveHeaders.
func (a *answers) destination(list string) *extprocv3.HeaderMutation {
	a.destHV.RawValue = append(a.destHV.RawValue[:0], list...)
	a.pickMut.SetHeaders = append(a.pickMut.SetHeaders[:0], a.destOpt)
	a.pickMut.RemoveHeaders = nil
	return a.pickMut
}

// streamed is the echo of one body chunk, of the request's or the
// response's.
func (a *answers) streamed(b []byte, last, request bool) *extprocv3.ProcessingResponse {
	if request {
		a.reqSR.Body, a.reqSR.EndOfStream = b, last
		return a.reqEcho
	}
	a.respSR.Body, a.respSR.EndOfStream = b, last
	return a.respEcho
}

// clear drops what the answers alias (bodies, the request message) so
// that a pooled stream keeps no request's bytes alive.
func (a *answers) clear() {
	a.reqSR.Body, a.respSR.Body = nil, nil
	a.in.Reset()
}
