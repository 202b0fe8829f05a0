package main

import (
	"context"
	"crypto/tls"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"github.com/kvselect/kvselect/radix"
	"github.com/kvselect/kvselect/zmqin"
	"github.com/kvselect/kvselect/zmqin/zmqpub"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

// eppProc is a `kvselect epp` process: its metrics port (the selector
// routes), its ext_proc and health ports.
type eppProc struct {
	*selector
	grpc, health int
}

func startEppProc(t *testing.T, extra ...string) *eppProc {
	p := &eppProc{selector: &selector{t: t, http: freePort(t)}, grpc: freePort(t), health: freePort(t)}
	p.base = fmt.Sprintf("http://127.0.0.1:%d", p.http)
	// As a user starts it: default flags (the debug listener's default
	// address included), the ports, a workers file.
	p.args = append([]string{"epp", "--host", "127.0.0.1", "--metrics-port", fmt.Sprint(p.http), "--grpc-port", fmt.Sprint(p.grpc), "--grpc-health-port", fmt.Sprint(p.health)}, extra...)
	p.start()
	return p
}

func (p *eppProc) client() extprocv3.ExternalProcessorClient {
	// TLS, unverified, as a gateway connects to GIE's picker (its
	// default: --secure-serving, a self-signed certificate).
	conn, err := grpc.NewClient(fmt.Sprintf("127.0.0.1:%d", p.grpc), grpc.WithTransportCredentials(credentials.NewTLS(&tls.Config{InsecureSkipVerify: true})))
	if err != nil {
		p.t.Fatal(err)
	}
	p.t.Cleanup(func() { _ = conn.Close() })
	return extprocv3.NewExternalProcessorClient(conn)
}

// eppSend opens a stream on c, sends Envoy's request headers and body
// (one last chunk, full duplex) and returns the stream and the picker's
// first answer: the pick, or an ImmediateResponse.
func eppSend(t *testing.T, ctx context.Context, c extprocv3.ExternalProcessorClient, body string) (extprocv3.ExternalProcessor_ProcessClient, *extprocv3.ProcessingResponse) {
	t.Helper()
	s, err := c.Process(ctx)
	if err != nil {
		t.Fatal(err)
	}
	hdr := &corev3.HeaderMap{Headers: []*corev3.HeaderValue{{Key: ":method", RawValue: []byte("POST")}, {Key: "content-type", RawValue: []byte("application/json")}}}
	for _, m := range []*extprocv3.ProcessingRequest{
		{Request: &extprocv3.ProcessingRequest_RequestHeaders{RequestHeaders: &extprocv3.HttpHeaders{Headers: hdr}}},
		{Request: &extprocv3.ProcessingRequest_RequestBody{RequestBody: &extprocv3.HttpBody{Body: []byte(body), EndOfStream: true}}},
	} {
		if err := s.Send(m); err != nil {
			t.Fatal(err)
		}
	}
	r, err := s.Recv()
	if err != nil {
		t.Fatal(err)
	}
	return s, r
}

// eppPick plays Envoy's request side of one stream (full duplex) and
// returns the destination and the open stream (cancel drops it).
func eppPick(t *testing.T, c extprocv3.ExternalProcessorClient, body string) (string, extprocv3.ExternalProcessor_ProcessClient, context.CancelFunc) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	s, r := eppSend(t, ctx, c, body)
	if ir := r.GetImmediateResponse(); ir != nil {
		t.Fatalf("immediate %d %s", ir.GetStatus().GetCode(), ir.GetBody())
	}
	dest := r.GetDynamicMetadata().GetFields()["envoy.lb"].GetStructValue().GetFields()["x-gateway-destination-endpoint"].GetStringValue()
	for { // the echoed body
		r, err := s.Recv()
		if err != nil {
			t.Fatal(err)
		}
		if r.GetRequestBody().GetResponse().GetBodyMutation().GetStreamedResponse().GetEndOfStream() {
			break
		}
	}
	return dest, s, cancel
}

// TestEppProcess runs two `kvselect epp` binaries on one host with the
// default flags and one --workers-file: both start (the second's default
// debug address taken, it falls back), both subscribe to the workers'
// real ZMQ KV events, and a prompt whose blocks one worker stores goes
// there, on either process. A stream that ends frees its booking as
// complete, a dropped one as cancelled (the process's /metrics); gRPC
// health answers on its own port.
func TestEppProcess(t *testing.T) {
	pubs := make([]*zmqpub.Publisher, 2)
	var workers []string
	for i := range pubs {
		p, err := zmqpub.New(zmqpub.Config{Endpoint: "tcp://127.0.0.1:0"})
		if err != nil {
			t.Fatal(err)
		}
		defer p.Close()
		pubs[i] = p
		workers = append(workers, fmt.Sprintf(`{"worker_id":%d,"model_name":"m","endpoint":"http://127.0.0.%d:8000","block_size":4,"kv_events_endpoint":%q}`, i+1, i+1, p.Endpoint()))
	}
	file := filepath.Join(t.TempDir(), "workers.json")
	if err := os.WriteFile(file, []byte(`{"workers":[`+strings.Join(workers, ",")+`]}`), 0o644); err != nil {
		t.Fatal(err)
	}
	a := startEppProc(t, "--workers-file", file, "--model-name", "m")
	b := startEppProc(t, "--workers-file", file, "--model-name", "m")
	if debugURLOf(a.selector) == debugURLOf(b.selector) {
		t.Fatal("both processes report one debug listener")
	}
	waitFor(t, "both processes subscribed to both workers", func() bool {
		return pubs[0].Stats().Subscribers == 2 && pubs[1].Stats().Subscribers == 2
	})
	// Worker 2 stores the prompt's three blocks.
	ids := []uint32{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12}
	pubs[1].Publish(&zmqin.WireBatch{Events: []zmqin.WireEvent{{Kind: radix.Stored, BlockHashes: []uint64{1, 2, 3}, TokenIDs: ids, BlockSize: 4, Medium: "GPU"}}})
	body := `{"model":"m","prompt":[1,2,3,4,5,6,7,8,9,10,11,12,13]}`
	for _, p := range []*eppProc{a, b} {
		c := p.client()
		p.eventually("the cached prompt picks worker 2", func() bool {
			d, _, cancel := eppPick(t, c, body)
			cancel()
			return d == "127.0.0.2:8000"
		})
		for range 5 {
			d, s, _ := eppPick(t, c, body)
			if d != "127.0.0.2:8000" {
				t.Fatalf("a cache hit on worker 2 picked %s", d)
			}
			// The response: first chunk, end of stream.
			for _, m := range []*extprocv3.ProcessingRequest{
				{Request: &extprocv3.ProcessingRequest_ResponseHeaders{ResponseHeaders: &extprocv3.HttpHeaders{Headers: &corev3.HeaderMap{Headers: []*corev3.HeaderValue{{Key: "content-type", RawValue: []byte("text/event-stream")}}}}}},
				{Request: &extprocv3.ProcessingRequest_ResponseBody{ResponseBody: &extprocv3.HttpBody{Body: []byte("data: {\"choices\":[]}\n\ndata: [DONE]\n\n"), EndOfStream: true}}},
			} {
				if err := s.Send(m); err != nil {
					t.Fatal(err)
				}
				if _, err := s.Recv(); err != nil {
					t.Fatal(err)
				}
			}
			_ = s.CloseSend()
		}
	}
	b.eventually("the completed streams freed", func() bool {
		m, _ := b.get("/metrics")
		return strings.Contains(m, `kvselect_epp_frees_total{reason="complete"} 5`) && strings.Contains(m, "kvselect_epp_active_streams 0")
	})
	_, _, cancel := eppPick(t, b.client(), body)
	cancel()
	b.eventually("the dropped stream freed", func() bool {
		m, _ := b.get("/metrics")
		return strings.Contains(m, `kvselect_epp_frees_total{reason="cancelled"}`) && strings.Contains(m, "kvselect_epp_active_streams 0") &&
			strings.Contains(m, "kvselect_active_reservations 0")
	})
	conn, err := grpc.NewClient(fmt.Sprintf("127.0.0.1:%d", a.health), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	for _, svc := range []string{"", "liveness", "readiness", "envoy.service.ext_proc.v3.ExternalProcessor", "inference-extension"} {
		r, err := healthpb.NewHealthClient(conn).Check(context.Background(), &healthpb.HealthCheckRequest{Service: svc})
		if err != nil || r.GetStatus() != healthpb.HealthCheckResponse_SERVING {
			t.Fatalf("health %q: %v %v", svc, r, err)
		}
	}
}

// TestEppFlags: GIE's defaults, Dynamo's environment under the flags, a
// mode other than standalone refused.
func TestEppFlags(t *testing.T) {
	o, err := parseEpp(nil, envOf(map[string]string{"DYN_MODEL_NAME": "llama", "DYN_KV_CACHE_BLOCK_SIZE": "32", "POD_NAMESPACE": "inf", "DYN_EPP_INFERENCE_POOL_NAME": "pool"}), os.Stderr)
	if err != nil {
		t.Fatal(err)
	}
	if o.grpcPort != 9002 || o.healthPort != 9003 || o.metricsPort != 9090 || o.epp.ModelName != "llama" || o.epp.BlockSize != 32 || o.kube.Namespace != "inf" || o.kube.PoolName != "pool" || !o.kubeOn || o.kube.ModelName != "llama" || o.kube.BlockSize != 32 || o.epp.Disaggregated {
		t.Fatalf("%+v", o)
	}
	o, err = parseEpp([]string{"--block-size", "64", "--prefill-pool-name", "pre"}, envOf(map[string]string{"DYN_KV_CACHE_BLOCK_SIZE": "32"}), os.Stderr)
	if err != nil || o.epp.BlockSize != 64 || !o.epp.Disaggregated {
		t.Fatalf("%+v %v", o, err)
	}
	if _, err := parseEpp(nil, envOf(map[string]string{"DYN_EPP_MODE": "dynamo"}), os.Stderr); err == nil {
		t.Fatal("DYN_EPP_MODE=dynamo accepted")
	}
	// Kubernetes discovery: one source, and the model it serves.
	for _, args := range [][]string{
		{"--pool-name", "p", "--model-name", "m", "--workers-file", "w.json"},
		{"--pool-name", "p"},
		{"--endpoint-selector", "app=vllm", "--model-name", "m"}, // no target port
		{"--pool-name", "p", "--endpoint-selector", "app=vllm", "--endpoint-target-ports", "8000", "--model-name", "m"},
	} {
		if _, err := parseEpp(args, envOf(nil), os.Stderr); err == nil {
			t.Errorf("%q accepted", args)
		}
	}
	o, err = parseEpp([]string{"--endpoint-selector", "app=vllm", "--endpoint-target-ports", "8000", "--model-name", "m", "--role-label", "llm-d.ai/role"}, envOf(nil), os.Stderr)
	if err != nil || !o.kubeOn || o.kube.TargetPorts[0] != 8000 || !o.epp.Disaggregated {
		t.Fatalf("selector mode: %+v %v", o, err)
	}
}
