package epp

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	filterv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"github.com/goccy/go-json"
	"github.com/kvselect/kvselect/core"
	"github.com/kvselect/kvselect/core/text"
	"github.com/kvselect/kvselect/sched"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/protobuf/types/known/structpb"
)

// gateway is the test's Envoy: a real gRPC server on loopback running
// the Server, and the generated ext_proc client playing Envoy's side of
// each stream message by message.
type gateway struct {
	t      testing.TB
	svc    *core.Service
	srv    *Server
	client extprocv3.ExternalProcessorClient
	health healthpb.HealthClient
}

// newGateway starts a Server over a service with n workers of model "m"
// at 127.0.0.{1..n}:8000 (worker ids 1..n), in the approximate index
// (each booking predicts its worker's cache).
func newGateway(t testing.TB, n int, cfg Config, edit func(*core.Config)) *gateway {
	ccfg := core.DefaultConfig()
	ccfg.UseKVEvents = false
	if edit != nil {
		edit(&ccfg)
	}
	svc, err := core.New(ccfg, core.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(svc.Close)
	for w := 1; w <= n; w++ {
		addWorker(t, svc, uint64(w), "", fmt.Sprintf("http://127.0.0.%d:8000", w))
	}
	if cfg.ModelName == "" {
		cfg.ModelName = "m"
	}
	srv, err := New(svc, cfg)
	if err != nil {
		t.Fatal(err)
	}
	g := grpc.NewServer()
	srv.Register(g)
	h := RegisterHealth(g)
	SetServing(h, true)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = g.Serve(ln) }()
	t.Cleanup(g.Stop)
	conn, err := grpc.NewClient(ln.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return &gateway{t: t, svc: svc, srv: srv, client: extprocv3.NewExternalProcessorClient(conn), health: healthpb.NewHealthClient(conn)}
}

func addWorker(t testing.TB, svc *core.Service, id uint64, group, ep string) {
	bs, mb := uint32(16), uint64(100_000)
	if _, err := svc.UpsertWorker(&core.WorkerSpec{WorkerID: id, ModelName: "m", RoutingGroup: group, WorkerFields: core.WorkerFields{Endpoint: &ep, BlockSize: &bs, MaxNumBatchedTokens: &mb}}); err != nil {
		t.Fatal(err)
	}
}

// conv is one open stream with its cancel (the gateway dropping it).
type conv struct {
	t      testing.TB
	s      extprocv3.ExternalProcessor_ProcessClient
	cancel context.CancelFunc
}

func (g *gateway) open() *conv {
	ctx, cancel := context.WithCancel(context.Background())
	s, err := g.client.Process(ctx)
	if err != nil {
		g.t.Fatal(err)
	}
	g.t.Cleanup(cancel)
	return &conv{t: g.t, s: s, cancel: cancel}
}

func (c *conv) send(m *extprocv3.ProcessingRequest) {
	c.t.Helper()
	if err := c.s.Send(m); err != nil {
		c.t.Fatal(err)
	}
}

func (c *conv) recv() *extprocv3.ProcessingResponse {
	c.t.Helper()
	r, err := c.s.Recv()
	if err != nil {
		c.t.Fatal(err)
	}
	return r
}

func headerMap(kv ...string) *corev3.HeaderMap {
	hm := &corev3.HeaderMap{}
	for i := 0; i+1 < len(kv); i += 2 {
		hm.Headers = append(hm.Headers, &corev3.HeaderValue{Key: kv[i], RawValue: []byte(kv[i+1])})
	}
	return hm
}

func reqHeaders(eos bool, md *corev3.Metadata, kv ...string) *extprocv3.ProcessingRequest {
	kv = append([]string{":method", "POST", ":path", "/v1/chat/completions", "content-type", "application/json"}, kv...)
	return &extprocv3.ProcessingRequest{
		Request:         &extprocv3.ProcessingRequest_RequestHeaders{RequestHeaders: &extprocv3.HttpHeaders{Headers: headerMap(kv...), EndOfStream: eos}},
		MetadataContext: md,
	}
}

func reqBody(b string, eos bool) *extprocv3.ProcessingRequest {
	return &extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_RequestBody{RequestBody: &extprocv3.HttpBody{Body: []byte(b), EndOfStream: eos}}}
}

func respHeaders(sse, eos bool) *extprocv3.ProcessingRequest {
	ct := "application/json"
	if sse {
		ct = "text/event-stream"
	}
	return &extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_ResponseHeaders{ResponseHeaders: &extprocv3.HttpHeaders{Headers: headerMap(":status", "200", "content-type", ct), EndOfStream: eos}}}
}

func respBody(b string, eos bool) *extprocv3.ProcessingRequest {
	return &extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_ResponseBody{ResponseBody: &extprocv3.HttpBody{Body: []byte(b), EndOfStream: eos}}}
}

func subsetMD(ns string, v *structpb.Value) *corev3.Metadata {
	return &corev3.Metadata{FilterMetadata: map[string]*structpb.Struct{ns: {Fields: map[string]*structpb.Value{SubsetKey: v}}}}
}

// picked returns the destination of a headers (or body) answer, checking
// that the header and the metadata agree.
func picked(t testing.TB, r *extprocv3.ProcessingResponse) string {
	t.Helper()
	var common *extprocv3.CommonResponse
	switch {
	case r.GetRequestHeaders() != nil:
		common = r.GetRequestHeaders().GetResponse()
	case r.GetRequestBody() != nil:
		common = r.GetRequestBody().GetResponse()
	default:
		t.Fatalf("want the pick, got %v", r)
	}
	var hdr string
	for _, h := range common.GetHeaderMutation().GetSetHeaders() {
		if h.GetHeader().GetKey() == DestinationHeader {
			if h.GetHeader().GetValue() != "" {
				t.Fatal("value set beside raw_value")
			}
			hdr = string(h.GetHeader().GetRawValue())
		}
	}
	md := r.GetDynamicMetadata().GetFields()[DefaultMetadataNS].GetStructValue().GetFields()[DestinationHeader].GetStringValue()
	if hdr == "" || hdr != md || !common.GetClearRouteCache() {
		t.Fatalf("header %q, metadata %q, clear_route_cache %v", hdr, md, common.GetClearRouteCache())
	}
	return hdr
}

func headerOf(r *extprocv3.ProcessingResponse, key string) string {
	for _, h := range r.GetRequestHeaders().GetResponse().GetHeaderMutation().GetSetHeaders() {
		if h.GetHeader().GetKey() == key {
			return string(h.GetHeader().GetRawValue())
		}
	}
	return ""
}

// echoed reads the full-duplex body answers up to the last one and
// returns the body they carry.
func (c *conv) echoed() string {
	c.t.Helper()
	var b strings.Builder
	for {
		r := c.recv()
		sr := r.GetRequestBody().GetResponse().GetBodyMutation().GetStreamedResponse()
		if sr == nil {
			c.t.Fatalf("want a streamed body chunk, got %v", r)
		}
		b.Write(sr.GetBody())
		if sr.GetEndOfStream() {
			return b.String()
		}
	}
}

// immediateOf returns an ImmediateResponse's status and error text.
func immediateOf(t testing.TB, r *extprocv3.ProcessingResponse) (int, string) {
	t.Helper()
	ir := r.GetImmediateResponse()
	if ir == nil {
		t.Fatalf("want an ImmediateResponse, got %v", r)
	}
	var e struct{ Error string }
	if err := json.Unmarshal(ir.GetBody(), &e); err != nil || e.Error == "" {
		t.Fatalf("body %q is not {\"error\": ...}: %v", ir.GetBody(), err)
	}
	return int(ir.GetStatus().GetCode()), e.Error
}

// settle waits until no stream is open on the server (Process returned,
// so its booking is freed) and returns the live bookings.
func (g *gateway) settle() int64 {
	g.t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for g.srv.Stats().Active != 0 {
		if time.Now().After(deadline) {
			g.t.Fatalf("streams still open: %+v", g.srv.Stats())
		}
		time.Sleep(time.Millisecond)
	}
	return g.svc.Stats().Reservations
}

const chatBody = `{"model":"m","stream":true,"messages":[{"role":"user","content":"hello there"}]}`

// sse is n streamed chunks of one token, then a usage event and [DONE].
func sse(n int, usage int) string {
	var b strings.Builder
	for i := range n {
		fmt.Fprintf(&b, "data: {\"choices\":[{\"delta\":{\"content\":\"t%d\"}}]}\n\n", i)
	}
	if usage > 0 {
		fmt.Fprintf(&b, "data: {\"choices\":[],\"usage\":{\"prompt_tokens\":5,\"completion_tokens\":%d}}\n\n", usage)
	}
	b.WriteString("data: [DONE]\n\n")
	return b.String()
}

// TestEPPFullDuplexStream: a streamed body in three chunks is answered
// after its end with the pick (header = metadata), then echoed
// unchanged; the SSE response marks prefill complete at its first chunk,
// reports an output block per 16 events (split across chunks mid-line),
// and frees at its end_of_stream.
func TestEPPFullDuplexStream(t *testing.T) {
	g := newGateway(t, 2, Config{}, nil)
	c := g.open()
	c.send(reqHeaders(false, nil, "x-request-id", "r1"))
	body := chatBody
	c.send(reqBody(body[:10], false))
	c.send(reqBody(body[10:30], false))
	c.send(reqBody(body[30:], true))
	dest := picked(t, c.recv())
	if dest != "127.0.0.1:8000" && dest != "127.0.0.2:8000" {
		t.Fatalf("dest %q", dest)
	}
	if got := c.echoed(); got != body {
		t.Fatalf("echoed %q", got)
	}
	if n := g.svc.Stats().Reservations; n != 1 {
		t.Fatalf("live %d after the pick", n)
	}
	c.send(respHeaders(true, false))
	if r := c.recv(); r.GetResponseHeaders() == nil {
		t.Fatalf("want the response headers answer: %v", r)
	}
	events := sse(40, 0)
	cut := len(events) / 2
	for _, chunk := range []string{events[:7], events[7:cut], events[cut:]} {
		c.send(respBody(chunk, chunk == events[cut:]))
		sr := c.recv().GetResponseBody().GetResponse().GetBodyMutation().GetStreamedResponse()
		if string(sr.GetBody()) != chunk {
			t.Fatalf("response chunk not echoed: %q", sr.GetBody())
		}
	}
	st := g.srv.Stats()
	if st.PrefillComplete != 1 || st.OutputBlocks != 2 || st.Freed[FreeComplete] != 1 || st.Requests[OutcomeRouted] != 1 {
		t.Fatalf("stats %+v", st)
	}
	if n := g.svc.Stats().Reservations; n != 0 {
		t.Fatalf("live %d after end_of_stream", n)
	}
	_ = c.s.CloseSend()
	if g.settle() != 0 {
		t.Fatal("leak")
	}
}

// TestEPPBufferedModes: with protocol_config BUFFERED the headers are
// answered at once and the pick rides on the body's answer; a BUFFERED
// JSON response's usage.completion_tokens gives the output blocks.
func TestEPPBufferedModes(t *testing.T) {
	g := newGateway(t, 2, Config{}, nil)
	c := g.open()
	h := reqHeaders(false, nil)
	h.ProtocolConfig = &extprocv3.ProtocolConfiguration{RequestBodyMode: filterv3.ProcessingMode_BUFFERED, ResponseBodyMode: filterv3.ProcessingMode_BUFFERED}
	c.send(h)
	if r := c.recv(); r.GetRequestHeaders() == nil || r.GetRequestHeaders().GetResponse().GetHeaderMutation() != nil {
		t.Fatalf("want an empty headers answer: %v", r)
	}
	c.send(reqBody(`{"model":"m","prompt":"once upon a time"}`, true))
	picked(t, c.recv())
	c.send(respHeaders(false, false))
	c.recv()
	c.send(respBody(`{"choices":[{"text":"x"}],"usage":{"prompt_tokens":4,"completion_tokens":50}}`, true))
	if r := c.recv(); r.GetResponseBody() == nil || r.GetResponseBody().GetResponse().GetBodyMutation() != nil {
		t.Fatalf("want an empty body answer: %v", r)
	}
	st := g.srv.Stats()
	if st.OutputBlocks != 3 || st.Freed[FreeComplete] != 1 {
		t.Fatalf("stats %+v", st)
	}
	_ = c.s.CloseSend()
	if g.settle() != 0 {
		t.Fatal("leak")
	}
	// A mode the EPP cannot serve fails the stream.
	c = g.open()
	h = reqHeaders(false, nil)
	h.ProtocolConfig = &extprocv3.ProtocolConfiguration{RequestBodyMode: filterv3.ProcessingMode_STREAMED}
	c.send(h)
	if _, err := c.s.Recv(); err == nil || !strings.Contains(err.Error(), "FULL_DUPLEX_STREAMED") {
		t.Fatalf("STREAMED: %v", err)
	}
}

// TestEPPCancelFreesAtEveryPoint: a stream dropped by the gateway at any
// point leaves no booking, and the ones that held a booking count a
// cancelled free; a stream the gateway closes cleanly mid-response frees
// as closed.
func TestEPPCancelFreesAtEveryPoint(t *testing.T) {
	for _, tc := range []struct {
		name   string
		booked bool
		run    func(c *conv)
	}{
		{"after request headers", false, func(c *conv) { c.send(reqHeaders(false, nil)) }},
		{"mid request body", false, func(c *conv) {
			c.send(reqHeaders(false, nil))
			c.send(reqBody(chatBody[:20], false))
		}},
		{"after the pick", true, func(c *conv) {
			c.send(reqHeaders(false, nil))
			c.send(reqBody(chatBody, true))
			c.recv()
			c.echoed()
		}},
		{"after response headers", true, func(c *conv) {
			c.send(reqHeaders(false, nil))
			c.send(reqBody(chatBody, true))
			c.recv()
			c.echoed()
			c.send(respHeaders(true, false))
			c.recv()
		}},
		{"mid response", true, func(c *conv) {
			c.send(reqHeaders(false, nil))
			c.send(reqBody(chatBody, true))
			c.recv()
			c.echoed()
			c.send(respHeaders(true, false))
			c.recv()
			c.send(respBody(sse(20, 0)[:300], false))
			c.recv()
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := newGateway(t, 2, Config{}, nil)
			c := g.open()
			tc.run(c)
			if want := map[bool]int64{true: 1, false: 0}[tc.booked]; g.svc.Stats().Reservations != want {
				t.Fatalf("live %d before the cancel, want %d", g.svc.Stats().Reservations, want)
			}
			c.cancel()
			if n := g.settle(); n != 0 {
				t.Fatalf("%d bookings leaked", n)
			}
			st := g.srv.Stats()
			if tc.booked && st.Freed[FreeCancelled] != 1 {
				t.Fatalf("freed %v", st.Freed)
			}
		})
	}
	t.Run("closed mid response", func(t *testing.T) {
		g := newGateway(t, 2, Config{}, nil)
		c := g.open()
		c.send(reqHeaders(false, nil))
		c.send(reqBody(chatBody, true))
		c.recv()
		c.echoed()
		c.send(respHeaders(true, false))
		c.recv()
		_ = c.s.CloseSend()
		if _, err := c.s.Recv(); err == nil {
			t.Fatal("the stream stayed open")
		}
		if n := g.settle(); n != 0 || g.srv.Stats().Freed[FreeClosed] != 1 {
			t.Fatalf("live %d, freed %v", n, g.srv.Stats().Freed)
		}
	})
}

// queuePolicy is one class whose queue holds one request per worker and
// whose workers are busy from the first booked prefill token: a second
// request waits, a third is refused (core.ErrOverloaded).
func queuePolicy(t testing.TB) func(*core.Config) {
	p := func(v int64) *int64 { return &v }
	all, agents := "all", "agents"
	doc := sched.PolicyDoc{PolicyProfileDoc: sched.PolicyProfileDoc{
		DefaultPolicyFamily: &agents,
		UncachedISLBuckets:  []sched.BucketDoc{{MinTokens: p(0), Bucket: all}},
		PolicyClasses: []sched.PolicyClassDoc{{Name: agents, PolicyFamily: &agents, CacheBucket: &all,
			Quantum: p(10), PrefillBusyThreshold: p(0), RequestQueueLimitPerWorker: p(1)}},
	}}
	pc, err := doc.Resolve()
	if err != nil {
		t.Fatal(err)
	}
	return func(c *core.Config) { c.Sched.QueueThreshold, c.Sched.Policy = nil, pc }
}

// TestEPPQueue: 429 when the router queue is full, and a stream dropped
// while its pick waits in the queue books nothing.
func TestEPPQueue(t *testing.T) {
	g := newGateway(t, 1, Config{}, queuePolicy(t))
	prompt := `{"model":"m","prompt_token_ids":0,"prompt":[1,2,3,4,5,6,7,8]}`
	first := g.open()
	first.send(reqHeaders(false, nil))
	first.send(reqBody(prompt, true))
	picked(t, first.recv())
	first.echoed()
	waiting := g.open()
	waiting.send(reqHeaders(false, nil))
	waiting.send(reqBody(prompt, true))
	deadline := time.Now().Add(10 * time.Second)
	for g.svc.QueueStats().Depth != 1 {
		if time.Now().After(deadline) {
			t.Fatal("the second pick never queued")
		}
		time.Sleep(time.Millisecond)
	}
	third := g.open()
	third.send(reqHeaders(false, nil))
	third.send(reqBody(prompt, true))
	if code, msg := immediateOf(t, third.recv()); code != 429 || !strings.Contains(msg, "queue") {
		t.Fatalf("%d %q", code, msg)
	}
	third.cancel()   // Envoy ends a request it answered locally
	waiting.cancel() // dropped during the pick
	// The queue must see the drop before the first stream's free opens
	// capacity: else the waiting pick may be dispatched first, and the
	// case tested is not the drop of a queued pick.
	for g.svc.QueueStats().Cancelled != 1 {
		if time.Now().After(deadline) {
			t.Fatalf("the dropped pick never left the queue: %+v", g.svc.QueueStats())
		}
		time.Sleep(time.Millisecond)
	}
	first.cancel()
	if n := g.settle(); n != 0 {
		t.Fatalf("%d bookings leaked", n)
	}
	if st := g.svc.QueueStats(); st.Cancelled != 1 || st.Dispatched != 0 {
		t.Fatalf("queue %+v: want the queued pick cancelled, none dispatched", st)
	}
}

// TestEPPImmediateResponses: 400 for a body that is not JSON or whose
// session id is too long, 413 past the body bound (mid-body), 503 with
// no worker, each {"error": ...}.
func TestEPPImmediateResponses(t *testing.T) {
	g := newGateway(t, 1, Config{MaxBodyBytes: 100}, func(c *core.Config) { c.SessionAffinity.TTL = time.Minute })
	for _, tc := range []struct {
		name    string
		headers []string
		chunks  []string
		code    int
	}{
		{"not JSON", nil, []string{`{"model":`}, 400},
		{"batch prompt", nil, []string{`{"prompt":["a","b"]}`}, 400},
		{"too large", nil, []string{strings.Repeat("x", 60), strings.Repeat("x", 60), "never sent"}, 413},
		{"session id too long", []string{SessionHeader, strings.Repeat("s", 257)}, []string{`{"prompt":"hi"}`}, 400},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := g.open()
			c.send(reqHeaders(false, nil, tc.headers...))
			for i, ch := range tc.chunks {
				c.send(reqBody(ch, i == len(tc.chunks)-1))
				if tc.code == 413 && i == 1 {
					break
				}
			}
			if code, _ := immediateOf(t, c.recv()); code != tc.code {
				t.Fatalf("status %d, want %d", code, tc.code)
			}
			c.cancel()
		})
	}
	empty := newGateway(t, 0, Config{}, nil)
	c := empty.open()
	c.send(reqHeaders(false, nil))
	c.send(reqBody(chatBody, true))
	if code, _ := immediateOf(t, c.recv()); code != 503 {
		t.Fatalf("no workers: %d", code)
	}
	c.cancel()
	if g.settle() != 0 || empty.settle() != 0 {
		t.Fatal("leak")
	}
}

// TestEPPSubsetHint: only the hint's endpoints are picked (a list or a
// comma string, ip:port or bare ip); none eligible, or an empty list, is
// a 503.
func TestEPPSubsetHint(t *testing.T) {
	g := newGateway(t, 4, Config{}, nil)
	list := func(s ...string) *structpb.Value {
		l := &structpb.ListValue{}
		for _, e := range s {
			l.Values = append(l.Values, structpb.NewStringValue(e))
		}
		return structpb.NewListValue(l)
	}
	for _, tc := range []struct {
		name string
		hint *structpb.Value
		want []string // "" : 503
	}{
		{"one", list("127.0.0.3:8000"), []string{"127.0.0.3:8000"}},
		{"two", list("127.0.0.2:8000", "127.0.0.4:8000"), []string{"127.0.0.2:8000", "127.0.0.4:8000"}},
		{"comma string", structpb.NewStringValue("127.0.0.4:8000, 127.0.0.1:8000"), []string{"127.0.0.4:8000", "127.0.0.1:8000"}},
		{"bare ip", list("127.0.0.2"), []string{"127.0.0.2:8000"}},
		{"wrong port", list("127.0.0.2:9000"), nil},
		{"unknown", list("10.9.9.9:8000"), nil},
		{"empty", list(), nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for range 6 {
				c := g.open()
				c.send(reqHeaders(false, subsetMD(DefaultSubsetNS, tc.hint)))
				c.send(reqBody(chatBody, true))
				r := c.recv()
				if tc.want == nil {
					if code, _ := immediateOf(t, r); code != 503 {
						t.Fatalf("status %d", code)
					}
					c.cancel()
					break
				}
				if d := picked(t, r); !contains(tc.want, d) {
					t.Fatalf("picked %s outside %v", d, tc.want)
				}
				c.cancel()
			}
			if g.settle() != 0 {
				t.Fatal("leak")
			}
		})
	}
}

func contains(s []string, v string) bool {
	for _, e := range s {
		if e == v {
			return true
		}
	}
	return false
}

// TestEPPBodylessAndFallbacks: a request without a body is routed at
// once, unbooked; with Fallbacks the destination is a list of distinct
// endpoints, the booked one first, in the header and the metadata alike.
func TestEPPBodylessAndFallbacks(t *testing.T) {
	g := newGateway(t, 3, Config{Fallbacks: 2}, nil)
	c := g.open()
	c.send(reqHeaders(true, nil, ":method", "GET"))
	if d := picked(t, c.recv()); !strings.HasPrefix(d, "127.0.0.") || strings.Contains(d, ",") {
		t.Fatalf("bodyless %q", d)
	}
	if g.svc.Stats().Reservations != 0 {
		t.Fatal("a bodyless request booked")
	}
	c.cancel()
	c = g.open()
	c.send(reqHeaders(false, nil))
	c.send(reqBody(chatBody, true))
	d := strings.Split(picked(t, c.recv()), ",")
	if len(d) != 3 || d[0] == d[1] || d[1] == d[2] || d[0] == d[2] {
		t.Fatalf("list %v", d)
	}
	c.cancel()
	if g.settle() != 0 {
		t.Fatal("leak")
	}
}

// TestEPPDisaggregated: the decode worker is the destination, the prefill
// worker is named for the upstream (Dynamo's headers and llm-d's
// x-prefiller-host-port); the first response chunk frees the prefill leg,
// the end frees the plan.
func TestEPPDisaggregated(t *testing.T) {
	g := newGateway(t, 0, Config{Disaggregated: true}, nil)
	addWorker(t, g.svc, 1, core.DefaultPrefillRoutingGroup, "http://10.0.0.1:8000")
	addWorker(t, g.svc, 2, core.DefaultDecodeRoutingGroup, "http://10.0.0.2:8000")
	c := g.open()
	c.send(reqHeaders(false, nil))
	c.send(reqBody(`{"model":"m","prompt":[1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17,18,19,20]}`, true))
	r := c.recv()
	if d := picked(t, r); d != "10.0.0.2:8000" {
		t.Fatalf("dest %q", d)
	}
	if headerOf(r, PrefillerHostHeader) != "10.0.0.1:8000" || headerOf(r, PrefillIDHeader) != "1" || headerOf(r, PrefillRankHeader) != "0" {
		t.Fatalf("prefill headers: %v", r.GetRequestHeaders().GetResponse().GetHeaderMutation())
	}
	c.echoed()
	if n := g.svc.Stats().Reservations; n != 2 {
		t.Fatalf("live %d, want both legs", n)
	}
	c.send(respHeaders(true, false))
	c.recv()
	c.send(respBody(sse(1, 0)[:20], false))
	c.recv()
	if n := g.svc.Stats().Reservations; n != 1 {
		t.Fatalf("live %d after the first token, want the decode leg", n)
	}
	c.cancel()
	if n := g.settle(); n != 0 || g.svc.Stats().Plans != 0 {
		t.Fatalf("live %d, plans %d", n, g.svc.Stats().Plans)
	}
}

// TestEPPHealth: every probed name answers over grpc.health.v1.
func TestEPPHealth(t *testing.T) {
	g := newGateway(t, 1, Config{}, nil)
	for _, name := range HealthServices {
		r, err := g.health.Check(context.Background(), &healthpb.HealthCheckRequest{Service: name})
		if err != nil || r.GetStatus() != healthpb.HealthCheckResponse_SERVING {
			t.Fatalf("%q: %v %v", name, r, err)
		}
	}
}

// llama3 loads the Llama 3 tokenizer of core/text's reference files
// (make tokenizer-refs), skipping without them unless CI=true.
func llama3(t testing.TB) *text.Tokenizer {
	dir := filepath.Join("..", "..", "core", "text", "testdata", "npm", "node_modules", "@lenml", "tokenizer-llama3", "models")
	tj, err := os.ReadFile(filepath.Join(dir, "tokenizer.json"))
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("the Llama 3 tokenizer files are missing (make tokenizer-refs): %v", err)
		}
		t.Skipf("no Llama 3 tokenizer files (make tokenizer-refs installs them): %v", err)
	}
	tc, err := os.ReadFile(filepath.Join(dir, "tokenizer_config.json"))
	if err != nil {
		t.Fatal(err)
	}
	tok, err := text.Load(tj, tc)
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

// TestEPPTokenizedCacheHit: chat bodies are tokenized with the model's
// template (the same ids as text.Input.Tokens gives), so a second request
// of the same conversation goes where the first one's blocks are, while
// another conversation goes to the idle worker; a body naming another
// model is tokenized with the configured model's tokenizer.
func TestEPPTokenizedCacheHit(t *testing.T) {
	tok := llama3(t)
	g := newGateway(t, 2, Config{Tokenizers: map[string]*text.Tokenizer{"m": tok}}, nil)
	long := strings.Repeat("The quick brown fox jumps over the lazy dog. ", 40)
	chat := func(s string) string {
		b, _ := json.Marshal(map[string]any{"model": "m", "messages": []map[string]string{{"role": "user", "content": s}}})
		return string(b)
	}
	// pick books body and, with started, streams the first token back
	// (prefill complete: the worker's prefill load is gone, its predicted
	// blocks stay).
	pick := func(body string, started bool) string {
		c := g.open()
		c.send(reqHeaders(false, nil))
		c.send(reqBody(body, true))
		d := picked(t, c.recv())
		c.echoed()
		if started {
			c.send(respHeaders(true, false))
			c.recv()
			c.send(respBody(sse(1, 0), false))
			c.recv()
		}
		return d
	}
	a := pick(chat(long), true)
	b := pick(chat(long), false)
	other := pick(chat(strings.Repeat("Lorem ipsum dolor sit amet. ", 60)), false)
	if a != b || other == a {
		t.Fatalf("same conversation %s then %s; another %s", a, b, other)
	}
	in := text.Input{Messages: []byte(`[{"role":"user","content":"hi"}]`)}
	want, err := in.Tokens(tok, nil, false, time.Now())
	if err != nil || len(want) == 0 {
		t.Fatal(err)
	}
	c := g.open()
	c.send(reqHeaders(false, nil))
	c.send(reqBody(`{"model":"other","messages":[{"role":"user","content":"hi"}]}`, true))
	if r := c.recv(); r.GetImmediateResponse() != nil {
		t.Fatalf("the configured model's tokenizer serves another name: %v", r)
	}
}
