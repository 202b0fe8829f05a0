package extproc

import (
	"errors"
	"fmt"
	"io"
	"net"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/types/known/structpb"
)

// NoopDestination is the no-op server's fixed pick.
const NoopDestination = "127.0.0.1:8000"

// noop is the baseline ExternalProcessor: the EPP's answers, message for
// message, with a fixed destination and no selection, no JSON, no
// tokenizing, no booking. What it costs is the gRPC stack's floor.
type noop struct {
	extprocv3.UnimplementedExternalProcessorServer
}

// The fixed answers, shared read-only by every stream (marshalling
// reads a message; their size caches are atomic).
var (
	noopPick = &extprocv3.ProcessingResponse{
		Response: &extprocv3.ProcessingResponse_RequestHeaders{RequestHeaders: &extprocv3.HeadersResponse{Response: &extprocv3.CommonResponse{
			HeaderMutation: &extprocv3.HeaderMutation{SetHeaders: []*corev3.HeaderValueOption{{
				Header:       &corev3.HeaderValue{Key: DestinationHeader, RawValue: []byte(NoopDestination)},
				AppendAction: corev3.HeaderValueOption_OVERWRITE_IF_EXISTS_OR_ADD,
			}}},
			ClearRouteCache: true,
		}}},
		DynamicMetadata: &structpb.Struct{Fields: map[string]*structpb.Value{
			MetadataNS: structpb.NewStructValue(&structpb.Struct{Fields: map[string]*structpb.Value{DestinationHeader: structpb.NewStringValue(NoopDestination)}}),
		}},
	}
	noopHeaders  = &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_ResponseHeaders{ResponseHeaders: &extprocv3.HeadersResponse{}}}
	noopTrailers = &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_ResponseTrailers{ResponseTrailers: &extprocv3.TrailersResponse{}}}
)

// Process answers as the EPP does in full duplex: nothing for the
// request headers, the pick at the first body chunk, every body chunk
// echoed (the request's and the response's), the response headers
// acknowledged; it returns when the client ends the stream.
func (noop) Process(ps extprocv3.ExternalProcessor_ProcessServer) error {
	picked := false
	for {
		m, err := ps.Recv()
		if err != nil {
			if errors.Is(err, io.EOF) {
				return nil
			}
			return err
		}
		var out *extprocv3.ProcessingResponse
		switch r := m.Request.(type) {
		case *extprocv3.ProcessingRequest_RequestBody:
			if !picked {
				picked = true
				if err := ps.Send(noopPick); err != nil {
					return err
				}
			}
			out = echo(r.RequestBody, true)
		case *extprocv3.ProcessingRequest_ResponseHeaders:
			out = noopHeaders
		case *extprocv3.ProcessingRequest_ResponseBody:
			out = echo(r.ResponseBody, false)
		case *extprocv3.ProcessingRequest_ResponseTrailers:
			out = noopTrailers
		default:
			continue
		}
		if err := ps.Send(out); err != nil {
			return err
		}
	}
}

func echo(b *extprocv3.HttpBody, request bool) *extprocv3.ProcessingResponse {
	br := &extprocv3.BodyResponse{Response: &extprocv3.CommonResponse{BodyMutation: &extprocv3.BodyMutation{
		Mutation: &extprocv3.BodyMutation_StreamedResponse{StreamedResponse: &extprocv3.StreamedBodyResponse{Body: b.GetBody(), EndOfStream: b.GetEndOfStream()}},
	}}}
	if request {
		return &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_RequestBody{RequestBody: br}}
	}
	return &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_ResponseBody{ResponseBody: br}}
}

// The no-op server's HTTP/2 windows: the picker's (httpapi/epp's
// StreamWindow and ConnWindow, checked equal by cmd/kvselect's
// TestNoopWindowsArePickers), so that both servers differ only in their
// work.
const (
	StreamWindow = 1 << 20
	ConnWindow   = 4 << 20
)

// StartNoop serves the no-op processor on addr ("127.0.0.1:0": a free
// port) with the picker's server options, as `kvselect epp` serves the
// EPP, and returns its address and a stop that cancels open streams and
// waits.
func StartNoop(addr string) (string, func(), error) {
	ln, err := net.Listen("tcp4", addr)
	if err != nil {
		return "", nil, fmt.Errorf("extproc: no-op baseline: %w", err)
	}
	g := grpc.NewServer(grpc.InitialWindowSize(StreamWindow), grpc.InitialConnWindowSize(ConnWindow))
	extprocv3.RegisterExternalProcessorServer(g, noop{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = g.Serve(ln)
	}()
	return ln.Addr().String(), func() { g.Stop(); <-done }, nil
}
