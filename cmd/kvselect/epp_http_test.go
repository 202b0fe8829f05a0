package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kvselect/kvselect/httpapi"
	"github.com/kvselect/kvselect/httpapi/kube/kubetest"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

// TestEppHTTPReadOnly runs `kvselect epp` and reads its --metrics-port as
// an operator does: serve's read-only routes answer (the workers file's
// worker listed, its load shown, the overlap query answered, the EPP's
// own OpenAPI document), and every write route of the selector is
// absent: the catalog and the bookings stay the EPP's discovery's and
// streams'.
func TestEppHTTPReadOnly(t *testing.T) {
	file := filepath.Join(t.TempDir(), "workers.json")
	if err := os.WriteFile(file, []byte(`{"workers":[{"worker_id":1,"model_name":"m","endpoint":"http://127.0.0.1:8000","block_size":4}]}`), 0o644); err != nil {
		t.Fatal(err)
	}
	p := startEppProc(t, "--workers-file", file, "--model-name", "m", "--kv-events=false")
	p.eventually("the file's worker", func() bool {
		_, code := p.get("/ready")
		return code == 200
	})
	if w := p.must("GET", "/workers", "", 200); !strings.Contains(w, `"worker_id":1`) {
		t.Fatalf("/workers: %s", w)
	}
	if l := p.must("GET", "/loads", "", 200); !strings.Contains(l, `"worker_id":1`) {
		t.Fatalf("/loads: %s", l)
	}
	p.must("POST", "/overlap_scores", `{"model_name":"m","token_ids":[1,2,3,4]}`, 200)
	if doc := p.must("GET", "/openapi.json", "", 200); doc != string(httpapi.EPPOpenAPI()) {
		t.Fatal("/openapi.json is not the EPP's document")
	}
	p.must("GET", "/metrics", "", 200)
	p.must("POST", "/workers", `{"worker_id":2,"model_name":"m","endpoint":"http://x:1","block_size":4}`, 405)
	for _, c := range [][3]string{
		{"POST", "/select_and_reserve", `{"model_name":"m","token_ids":[1,2,3,4]}`},
		{"POST", "/select", `{"model_name":"m","token_ids":[1,2,3,4]}`},
		{"DELETE", "/workers/1", ""},
		{"PATCH", "/workers/1", `{}`},
		{"DELETE", "/reservations/r1", ""},
		{"GET", "/dump", ""},
	} {
		p.must(c[0], c[1], c[2], 404)
	}
	if w := p.must("GET", "/workers", "", 200); strings.Contains(w, `"worker_id":2`) || !strings.Contains(w, `"worker_id":1`) {
		t.Fatalf("the catalog changed: %s", w)
	}
	if m := p.must("GET", "/metrics", "", 200); !strings.Contains(m, "kvselect_active_reservations 0") {
		t.Fatal("a booking was made over HTTP")
	}
}

// TestEppReadyKubernetes: with Kubernetes discovery, the EPP's /ready
// waits for discovery (here its InferencePool is absent: unresolved),
// with the reason, and turns ready once the pool and a Ready pod exist.
func TestEppReadyKubernetes(t *testing.T) {
	api := kubetest.NewAPI(t)
	const ns = "inference"
	p := startEppProc(t, "--kubeconfig", api.Kubeconfig(t, ns), "--pool-name", "llama", "--model-name", "m", "--kv-events=false")
	body, code := p.get("/ready")
	var r struct {
		Ready  bool   `json:"ready"`
		Reason string `json:"not_ready_reason"`
	}
	if err := json.Unmarshal([]byte(body), &r); err != nil || code != 503 || r.Ready || !strings.Contains(r.Reason, "Kubernetes discovery") {
		t.Fatalf("/ready without the pool: %d %s", code, body)
	}
	if st := eppHealth(t, p, "readiness"); st != healthpb.HealthCheckResponse_NOT_SERVING {
		t.Fatalf("gRPC readiness without the pool: %v", st)
	}
	if st := eppHealth(t, p, "liveness"); st != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("gRPC liveness: %v", st)
	}
	api.Put("inferencepools", kubetest.PoolObj(ns, "llama", map[string]string{"app": "vllm"}, 8000))
	api.Put("pods", kubetest.PodObj(ns, "vllm-0", "uid-0", "127.0.0.2", true, map[string]string{"app": "vllm"}))
	p.eventually("ready once discovery resolved the pool and its pod", func() bool {
		body, code := p.get("/ready")
		return code == 200 && !strings.Contains(body, "not_ready_reason")
	})
	p.eventually("gRPC readiness serving too", func() bool {
		return eppHealth(t, p, "readiness") == healthpb.HealthCheckResponse_SERVING
	})
}

// eppHealth is the status of service on p's gRPC health port.
func eppHealth(t *testing.T, p *eppProc, service string) healthpb.HealthCheckResponse_ServingStatus {
	t.Helper()
	conn, err := grpc.NewClient(fmt.Sprintf("127.0.0.1:%d", p.health), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	r, err := healthpb.NewHealthClient(conn).Check(context.Background(), &healthpb.HealthCheckRequest{Service: service})
	if err != nil {
		t.Fatalf("health %q: %v", service, err)
	}
	return r.GetStatus()
}
