package extproc

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	filterv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

// RequestChunk is the largest request body chunk a Stream sends: under
// Envoy's 64 KiB buffer advice, as the EPP's own answers
// (httpapi/epp's bodyChunk).
const RequestChunk = 62_000

// DestinationHeader and MetadataNS are where the protocol puts the pick
// (GIE's 004-endpoint-picker-protocol): the dynamic metadata's
// envoy.lb namespace, key x-gateway-destination-endpoint.
const (
	DestinationHeader = "x-gateway-destination-endpoint"
	MetadataNS        = "envoy.lb"
)

// ErrProtocol marks an answer out of the protocol's order.
var ErrProtocol = errors.New("extproc: unexpected answer")

// Client is a pool of gRPC connections to one ExternalProcessor; Stream i
// uses connection i mod len. Envoy opens one connection per worker thread,
// so a few connections carry many streams each.
type Client struct {
	conns []*grpc.ClientConn
	procs []extprocv3.ExternalProcessorClient
}

// Dial opens conns (>= 1) connections to addr (host:port), plaintext.
func Dial(addr string, conns int) (*Client, error) {
	if conns < 1 {
		return nil, fmt.Errorf("extproc: %d connections: want >= 1", conns)
	}
	c := &Client{}
	for range conns {
		// Windows as large as Envoy's defaults (256 KiB stream, 1 MiB
		// connection, envoyproxy/envoy:api/envoy/config/core/v3/protocol.proto
		// Http2ProtocolOptions), not grpc-go's 64 KiB dynamic start.
		cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()),
			grpc.WithInitialWindowSize(256<<10), grpc.WithInitialConnWindowSize(1<<20))
		if err != nil {
			_ = c.Close()
			return nil, fmt.Errorf("extproc: %s: %w", addr, err)
		}
		cc.Connect()
		c.conns = append(c.conns, cc)
		c.procs = append(c.procs, extprocv3.NewExternalProcessorClient(cc))
	}
	return c, nil
}

// Close closes the connections.
func (c *Client) Close() error {
	var errs []error
	for _, cc := range c.conns {
		errs = append(errs, cc.Close())
	}
	return errors.Join(errs...)
}

// Op shapes the response side of an operation.
type Op struct {
	// Chunks is the number of response body chunks (0: one last chunk of
	// data: [DONE] alone).
	Chunks int
	// EventsPerChunk is the SSE data events in each chunk (>= 1): one
	// output token each, as an engine streams one delta per step.
	EventsPerChunk int
}

// Stream runs operations over one connection of a Client, one at a time.
type Stream struct {
	proc extprocv3.ExternalProcessorClient
	op   Op
	// The messages, built once: Send has serialized them when it
	// returns, and Run changes only reqBody.Body and its end_of_stream
	// between sends.
	headers, reqBodyMsg, respHeaders, respBodyMsg *extprocv3.ProcessingRequest
	reqBody, respBody                             *extprocv3.HttpBody
	chunk, last                                   []byte
	// Dest is the destination of the last operation that got a pick.
	Dest string
}

// NewStream returns the i-th goroutine's stream driver with op.
func (c *Client) NewStream(i int, op Op) *Stream {
	op.EventsPerChunk = max(1, op.EventsPerChunk)
	s := &Stream{proc: c.procs[i%len(c.procs)], op: op}
	s.headers = &extprocv3.ProcessingRequest{
		Request: &extprocv3.ProcessingRequest_RequestHeaders{RequestHeaders: &extprocv3.HttpHeaders{Headers: &corev3.HeaderMap{Headers: []*corev3.HeaderValue{
			{Key: ":method", RawValue: []byte("POST")},
			{Key: ":path", RawValue: []byte("/v1/completions")},
			{Key: ":authority", RawValue: []byte("gateway")},
			{Key: "content-type", RawValue: []byte("application/json")},
		}}}},
		ProtocolConfig: &extprocv3.ProtocolConfiguration{
			RequestBodyMode:  filterv3.ProcessingMode_FULL_DUPLEX_STREAMED,
			ResponseBodyMode: filterv3.ProcessingMode_FULL_DUPLEX_STREAMED,
		},
	}
	s.reqBody = &extprocv3.HttpBody{}
	s.reqBodyMsg = &extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_RequestBody{RequestBody: s.reqBody}}
	s.respHeaders = &extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_ResponseHeaders{ResponseHeaders: &extprocv3.HttpHeaders{Headers: &corev3.HeaderMap{Headers: []*corev3.HeaderValue{
		{Key: ":status", RawValue: []byte("200")},
		{Key: "content-type", RawValue: []byte("text/event-stream")},
	}}}}}
	s.respBody = &extprocv3.HttpBody{}
	s.respBodyMsg = &extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_ResponseBody{ResponseBody: s.respBody}}
	for i := range op.EventsPerChunk {
		s.chunk = append(s.chunk, `data: {"id":"cmpl-bench","object":"text_completion","choices":[{"index":0,"text":" tok`...)
		s.chunk = strconv.AppendInt(s.chunk, int64(i), 10)
		s.chunk = append(s.chunk, `","finish_reason":null}]}`+"\n\n"...)
	}
	if op.Chunks > 0 {
		s.last = append(s.last, s.chunk...)
	}
	s.last = append(s.last, "data: [DONE]\n\n"...)
	return s
}

// Run makes one operation with an OpenAI request body (see the package
// doc) and returns 200 when it ran to the end, the ImmediateResponse's
// status when the processor rejected the request (the stream then
// ends), or 0 and the error of a failed stream. body is not retained.
func (s *Stream) Run(ctx context.Context, body []byte) (status int, err error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel() // a failed operation resets its stream
	ps, err := s.proc.Process(ctx)
	if err != nil {
		return 0, err
	}
	if err := ps.Send(s.headers); err != nil {
		return 0, err
	}
	for b := body; ; {
		n := min(len(b), RequestChunk)
		s.reqBody.Body, s.reqBody.EndOfStream = b[:n], n == len(b)
		err := ps.Send(s.reqBodyMsg)
		s.reqBody.Body = nil
		if err != nil {
			return 0, err
		}
		if b = b[n:]; len(b) == 0 {
			break
		}
	}
	r, err := ps.Recv()
	if err != nil {
		return 0, err
	}
	if ir := r.GetImmediateResponse(); ir != nil {
		code := int(ir.GetStatus().GetCode())
		_ = ps.CloseSend()
		return code, drain(ps)
	}
	if r.GetRequestHeaders() == nil {
		return 0, fmt.Errorf("%w: %T before the pick's headers answer", ErrProtocol, r.GetResponse())
	}
	s.Dest = r.GetDynamicMetadata().GetFields()[MetadataNS].GetStructValue().GetFields()[DestinationHeader].GetStringValue()
	for { // the echoed body
		r, err := ps.Recv()
		if err != nil {
			return 0, err
		}
		sr := r.GetRequestBody().GetResponse().GetBodyMutation().GetStreamedResponse()
		if sr == nil {
			return 0, fmt.Errorf("%w: %T while the body is echoed", ErrProtocol, r.GetResponse())
		}
		if sr.GetEndOfStream() {
			break
		}
	}
	if err := exchange(ps, s.respHeaders); err != nil {
		return 0, err
	}
	for i := range max(1, s.op.Chunks) {
		last := i == max(1, s.op.Chunks)-1
		s.respBody.Body, s.respBody.EndOfStream = s.chunk, last
		if last {
			s.respBody.Body = s.last
		}
		if err := exchange(ps, s.respBodyMsg); err != nil {
			return 0, err
		}
	}
	if err := ps.CloseSend(); err != nil {
		return 0, err
	}
	return 200, drain(ps)
}

// exchange sends m and reads its answer.
func exchange(ps extprocv3.ExternalProcessor_ProcessClient, m *extprocv3.ProcessingRequest) error {
	if err := ps.Send(m); err != nil {
		return err
	}
	_, err := ps.Recv()
	return err
}

// drain reads until the processor ends the stream: nil at io.EOF.
func drain(ps extprocv3.ExternalProcessor_ProcessClient) error {
	for {
		if _, err := ps.Recv(); err != nil {
			if errors.Is(err, io.EOF) {
				return nil
			}
			return err
		}
	}
}
