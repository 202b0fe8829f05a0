package httpapi_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kvselect/kvselect/core"
	"github.com/kvselect/kvselect/httpapi"
)

// startEPP serves httpapi.NewEPP over a fresh service on a loopback port;
// notReady, when set, is its Config.ReadyCheck's answer.
func startEPP(t *testing.T, notReady *atomic.Pointer[error]) (*harness, *httpapi.Server) {
	t.Helper()
	cfg := core.DefaultConfig()
	cfg.UseKVEvents = false
	h := &harness{t: t, now: time.Unix(1_700_000_000, 0)}
	svc, err := core.New(cfg, core.Options{Clock: func() time.Time { return h.now }})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(svc.Close)
	hcfg := httpapi.DefaultConfig()
	hcfg.MaxRequestBodySize = 64 << 10
	hcfg.ReadyCheck = func() error {
		if p := notReady.Load(); p != nil {
			return *p
		}
		return nil
	}
	hcfg.EngineLoads = func(id uint64) (httpapi.EngineLoad, bool) {
		if id != 1 {
			return httpapi.EngineLoad{}, false
		}
		return httpapi.EngineLoad{Answering: true, Waiting: 3, Running: 2, KVUsage: 0.25, HasWaiting: true, HasRunning: true, HasKV: true}, true
	}
	srv, err := httpapi.NewEPP(svc, hcfg)
	if err != nil {
		t.Fatal(err)
	}
	h.base, h.svc = serveLoopback(t, srv), svc
	return h, srv
}

// TestEPPOpenAPIDescribesResponses sends every route of the EPP's
// read-only server its success case and each of its error classes, and
// validates every response against its GET /openapi.json (as the
// selector's test does): the document describes exactly the routes the
// server has. Every write route of the selector is absent: its path
// answers 404, or 405 where the path serves a read.
func TestEPPOpenAPIDescribesResponses(t *testing.T) {
	var notReady atomic.Pointer[error]
	h, srv := startEPP(t, &notReady)
	raw := do(t, h.base, apiCase{route: "GET /openapi.json", noAuth: true}).body
	if !bytes.Equal(raw, httpapi.EPPOpenAPI()) {
		t.Fatal("GET /openapi.json does not serve the EPP's embedded document")
	}
	validOpenAPI(t, raw)
	s := loadSpec(t, raw)
	big := `{"pad":"` + strings.Repeat("x", 65<<10) + `"}`
	check := func(route, path, body string, status int) {
		t.Helper()
		s.check(h.base, apiCase{route: route, path: path, body: body, status: status, noAuth: true})
	}
	check("GET /health", "", "", 200)
	check("GET /metrics", "", "", 200)
	check("GET /openapi.json", "", "", 200)
	check("GET /ready", "", "", 503) // no worker
	ep, bs, tkb := "http://w1:8000", uint32(4), uint64(100)
	if _, err := h.svc.UpsertWorker(&core.WorkerSpec{WorkerID: 1, ModelName: "m", WorkerFields: core.WorkerFields{Endpoint: &ep, BlockSize: &bs, TotalKVBlocks: &tkb}}); err != nil {
		t.Fatal(err)
	}
	check("GET /ready", "", "", 200)
	// The host not ready (discovery unsynced): 503 whatever the catalog,
	// with the reason.
	e := errors.New("Kubernetes discovery has not synced")
	notReady.Store(&e)
	res := do(t, h.base, apiCase{route: "GET /ready", noAuth: true})
	var rb struct {
		Ready  bool   `json:"ready"`
		Reason string `json:"not_ready_reason"`
	}
	if err := json.Unmarshal(res.body, &rb); err != nil || res.status != 503 || rb.Ready || rb.Reason != e.Error() {
		t.Fatalf("host not ready: %d %s", res.status, res.body)
	}
	check("GET /ready", "", "", 503)
	notReady.Store(nil)
	check("GET /workers", "/workers?model_name=m", "", 200)
	check("GET /loads", "/loads", "", 200)
	// The engine's scraped load beside the booked one (the extension
	// field), and answering false for a worker held out of selection.
	if res := do(t, h.base, apiCase{route: "GET /loads", noAuth: true}); !strings.Contains(string(res.body), `"engine":{"answering":true,"num_requests_waiting":3,"num_requests_running":2,"kv_cache_usage_perc":0.25}`) {
		t.Fatalf("/loads without the engine load: %s", res.body)
	}
	h.svc.SetEngineAvailable(1, false)
	check("GET /loads", "/loads", "", 200)
	if res := do(t, h.base, apiCase{route: "GET /loads", noAuth: true}); !strings.Contains(string(res.body), `"worker_id":1`) || !strings.Contains(string(res.body), `"answering":false`) {
		t.Fatalf("/loads of a worker out of selection: %s", res.body)
	}
	check("GET /ready", "", "", 503) // its one worker is out of selection
	h.svc.SetEngineAvailable(1, true)
	check("POST /overlap_scores", "", `{"model_name":"m",`+prompt8+`}`, 200)
	check("POST /overlap_scores", "", `{"model_name":"nope",`+prompt8+`}`, 503)
	check("POST /overlap_scores", "", `{"model_name":"m"}`, 400)
	check("POST /overlap_scores", "", `{"model_name":7}`, 422)
	check("POST /overlap_scores", "", big, 413)
	s.check(h.base, apiCase{route: "POST /overlap_scores", body: `{}`, ct: "none", status: 415, noAuth: true})
	s.check(h.base, apiCase{route: "GET /workers", method: "POST", body: `{"worker_id":2}`, status: 405, noAuth: true})
	s.check(h.base, apiCase{route: "GET /loads", method: "DELETE", status: 405, noAuth: true})
	s.checkCoverage(httpapi.EPPRouteNames())

	// The selector's write (and other) routes are not routed: 404, and
	// nothing changed.
	for _, c := range []apiCase{
		{route: "POST /select", body: `{"model_name":"m",` + prompt8 + `}`},
		{route: "POST /select_and_reserve", body: `{"model_name":"m",` + prompt8 + `}`},
		{route: "POST /reservations", body: `{}`},
		{route: "DELETE /reservations/x"},
		{route: "POST /reservations/x/prefill_complete"},
		{route: "PATCH /workers/1", body: `{}`},
		{route: "DELETE /workers/1"},
		{route: "POST /potential_loads", body: `{}`},
		{route: "GET /dump"},
		{route: "POST /replica_sync/register_peer", body: `{"endpoint":"tcp://b:9092"}`},
		{route: "POST /disagg/plan", body: `{}`},
		{route: "POST /tokenize", body: `{}`},
	} {
		if res := do(t, h.base, apiCase{route: c.route, body: c.body, noAuth: true}); res.status != 404 || string(res.body) != `{"error":"route not found"}` {
			t.Errorf("%s: %d %s, want the 404", c.route, res.status, res.body)
		}
	}
	if ws := h.svc.ListWorkers("", ""); len(ws) != 1 || h.svc.Stats().BookOK != 0 {
		t.Fatalf("the read-only server changed state: %d workers, %d bookings", len(ws), h.svc.Stats().BookOK)
	}
	// Draining: 503 as every server of httpapi.
	httpapi.StartDraining(srv)
	if res := do(t, h.base, apiCase{route: "GET /loads", noAuth: true}); res.status != 503 {
		t.Fatalf("draining: %d", res.status)
	}
}

// TestNewEPPRefusesToken: the read-only server has no bearer token.
func TestNewEPPRefusesToken(t *testing.T) {
	svc, err := core.New(core.DefaultConfig(), core.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer svc.Close()
	cfg := httpapi.DefaultConfig()
	cfg.AuthToken = []byte("t")
	if _, err := httpapi.NewEPP(svc, cfg); err == nil {
		t.Fatal("an auth token accepted")
	}
}
