package main

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"

	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/kvselect/kvselect/core"
	"github.com/kvselect/kvselect/httpapi/epp"
	"github.com/kvselect/kvselect/httpapi/kube"
	"github.com/kvselect/kvselect/httpapi/kube/kubetest"
)

// eppPickHeaders plays Envoy's request side of one stream and returns the
// destination and the headers the picker set, then drops the stream
// (freeing its booking).
func eppPickHeaders(t *testing.T, c extprocv3.ExternalProcessorClient, body string) (string, map[string]string) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	_, r := eppSend(t, ctx, c, body)
	if ir := r.GetImmediateResponse(); ir != nil {
		t.Fatalf("immediate %d %s", ir.GetStatus().GetCode(), ir.GetBody())
	}
	dest := r.GetDynamicMetadata().GetFields()["envoy.lb"].GetStructValue().GetFields()["x-gateway-destination-endpoint"].GetStringValue()
	got := map[string]string{}
	mut := r.GetRequestHeaders().GetResponse().GetHeaderMutation()
	if mut == nil {
		mut = r.GetRequestBody().GetResponse().GetHeaderMutation()
	}
	for _, h := range mut.GetSetHeaders() {
		got[h.GetHeader().GetKey()] = string(h.GetHeader().GetRawValue())
	}
	return dest, got
}

// TestEppTwoPoolsProcess runs `kvselect epp` with a decode and a prefill
// InferencePool (--pool-name, --prefill-pool-name) read through client-go
// from the fake API server: a request goes to a pod of the decode pool
// and names a pod of the prefill pool in its prefill headers; with the
// prefill pool's pod gone it is served decode-only; /ready and gRPC
// readiness need both pools.
func TestEppTwoPoolsProcess(t *testing.T) {
	api := kubetest.NewAPI(t)
	const ns = "inference"
	dec, pre := map[string]string{"app": "vllm", "role": "decode"}, map[string]string{"app": "vllm", "role": "prefill"}
	api.Put("inferencepools", kubetest.PoolObj(ns, "llama", dec, 8000))
	api.Put("inferencepools", kubetest.PoolObj(ns, "llama-prefill", pre, 8100))
	api.Put("pods", kubetest.PodObj(ns, "decode-0", "uid-d0", "127.0.0.2", true, dec))
	api.Put("pods", kubetest.PodObj(ns, "decode-1", "uid-d1", "127.0.0.3", true, dec))
	api.Put("pods", kubetest.PodObj(ns, "prefill-0", "uid-p0", "127.0.0.4", true, pre))
	p := startEppProc(t, "--kubeconfig", api.Kubeconfig(t, ns), "--pool-name", "llama", "--prefill-pool-name", "llama-prefill",
		"--model-name", "m", "--block-size", "4", "--kv-events=false")
	waitFor(t, "both pools' pods as workers", func() bool {
		w, _ := p.get("/workers")
		return strings.Count(w, `"routing_group":"decode"`) == 2 && strings.Count(w, `"routing_group":"prefill"`) == 1 &&
			strings.Contains(w, `"endpoint":"http://127.0.0.4:8100"`)
	})
	waitFor(t, "ready", func() bool { _, code := p.get("/ready"); return code == 200 })

	body := `{"model":"m","prompt":[1,2,3,4,5,6,7,8,9,10,11,12,13]}`
	decodes := map[string]bool{"127.0.0.2:8000": true, "127.0.0.3:8000": true}
	for range 4 {
		dest, h := eppPickHeaders(t, p.client(), body)
		if !decodes[dest] {
			t.Fatalf("destination %q is not a pod of the decode pool", dest)
		}
		if h[epp.PrefillerHostHeader] != "127.0.0.4:8100" || h[epp.PrefillIDHeader] != strconv.FormatUint(kube.WorkerID("uid-p0"), 10) || h[epp.PrefillRankHeader] != "0" {
			t.Fatalf("prefill headers %v: want the prefill pool's pod", h)
		}
	}
	p.eventually("the dropped streams freed", func() bool {
		m, _ := p.get("/metrics")
		return strings.Contains(m, "kvselect_active_reservations 0") && strings.Contains(m, `kvselect_kube_pool_workers{pool="llama-prefill",routing_group="prefill"} 1`)
	})

	// The prefill pod goes unready: decode-only, no prefill headers.
	api.Put("pods", kubetest.PodObj(ns, "prefill-0", "uid-p0", "127.0.0.4", false, pre))
	waitFor(t, "the prefill pod removed", func() bool {
		w, _ := p.get("/workers")
		return !strings.Contains(w, `"routing_group":"prefill"`) && strings.Count(w, `"routing_group":"decode"`) == 2
	})
	dest, h := eppPickHeaders(t, p.client(), body)
	if !decodes[dest] || h[epp.PrefillerHostHeader] != "" || h[epp.PrefillIDHeader] != "" {
		t.Fatalf("without prefill workers: dest %q, headers %v; want decode-only", dest, h)
	}

	// The prefill pool is deleted: not ready (HTTP and gRPC) although the
	// decode pool is fine; recreated: ready.
	api.Remove("inferencepools", ns, "llama-prefill")
	waitFor(t, "not ready without the prefill pool", func() bool {
		_, code := p.get("/ready")
		return code == 503 && eppHealth(t, p, "readiness") == healthpb.HealthCheckResponse_NOT_SERVING
	})
	api.Put("inferencepools", kubetest.PoolObj(ns, "llama-prefill", pre, 8100))
	waitFor(t, "ready with both pools", func() bool {
		_, code := p.get("/ready")
		return code == 200 && eppHealth(t, p, "readiness") == healthpb.HealthCheckResponse_SERVING
	})
	if m, _ := p.get("/metrics"); !strings.Contains(m, fmt.Sprintf(`kvselect_kube_pool_ready{pool=%q,routing_group="decode"} 1`, "llama")) {
		t.Fatalf("no per-pool readiness:\n%.3000s", m)
	}
}

// TestEppPrefillPoolFlags: DYN_EPP_PREFILL_INFERENCE_POOL_NAME with a
// pool is a disaggregated pair whose prefill failures fall back to
// decode-only; it needs a pool (not a selector) of another name.
func TestEppPrefillPoolFlags(t *testing.T) {
	o, err := parseEpp(nil, envOf(map[string]string{"DYN_MODEL_NAME": "m", "DYN_EPP_INFERENCE_POOL_NAME": "dec", "DYN_EPP_PREFILL_INFERENCE_POOL_NAME": "pre"}), os.Stderr)
	if err != nil || o.kube.PoolName != "dec" || o.kube.PrefillPoolName != "pre" || !o.epp.Disaggregated || o.core.Disagg.PrefillFailure != core.BypassOnDecode || len(o.inactive) != 0 {
		t.Fatalf("%+v %v", o, err)
	}
	for _, args := range [][]string{
		{"--pool-name", "p", "--prefill-pool-name", "p", "--model-name", "m"},
		{"--endpoint-selector", "app=vllm", "--endpoint-target-ports", "8000", "--prefill-pool-name", "p", "--model-name", "m"},
		{"--pool-name", "p", "--prefill-pool-name", "q", "--role-label", "role", "--model-name", "m"},
	} {
		if _, err := parseEpp(args, envOf(nil), os.Stderr); err == nil {
			t.Errorf("%q accepted", args)
		}
	}
}
