package main

import (
	"fmt"
	"strings"
	"testing"

	"github.com/kvselect/kvselect/httpapi/kube/kubetest"
)

// TestEppReplicasKubernetesLateCatalog: with Kubernetes discovery a
// replica may join the mesh before its informers have the workers. B
// joins while its API server has no pool yet: A's snapshot of its live
// booking is dropped (no partition), and once B's catalog gains the
// pool's pods (the same pods, so the same worker ids) B asks A again and
// shows A's booking, with no new event on A.
func TestEppReplicasKubernetesLateCatalog(t *testing.T) {
	const ns = "inference"
	vllm := map[string]string{"app": "vllm"}
	apiA, apiB := kubetest.NewAPI(t), kubetest.NewAPI(t)
	put := func(api *kubetest.API) {
		api.Put("inferencepools", kubetest.PoolObj(ns, "llama", vllm, 8000))
		api.Put("pods", kubetest.PodObj(ns, "vllm-0", "uid-0", "127.0.0.2", true, vllm))
		api.Put("pods", kubetest.PodObj(ns, "vllm-1", "uid-1", "127.0.0.3", true, vllm))
	}
	put(apiA)
	pa, pb := freePort(t), freePort(t)
	ep := func(p int) string { return fmt.Sprintf("tcp://127.0.0.1:%d", p) }
	common := []string{"--pool-name", "llama", "--model-name", "m", "--block-size", "4", "--kv-events=false"}
	a := startEppProc(t, append(common, "--kubeconfig", apiA.Kubeconfig(t, ns), "--replica-sync-port", fmt.Sprint(pa), "--replica-sync-peers", ep(pb))...)
	a.eventually("A's workers", func() bool { w, _ := a.get("/workers"); return strings.Count(w, `"worker_id"`) == 2 })
	// A stream on A, left open.
	_, _, cancel := eppPick(t, a.client(), `{"model":"m","prompt":[1,2,3,4,5,6,7,8,9]}`)
	defer cancel()
	ap, ab, an := a.totals()
	if an != 1 {
		t.Fatalf("A's own booking: %d requests", an)
	}

	b := startEppProc(t, append(common, "--kubeconfig", apiB.Kubeconfig(t, ns), "--replica-sync-port", fmt.Sprint(pb), "--replica-sync-peers", ep(pa))...)
	b.eventually("A's snapshot dropped on B: no partition yet", func() bool {
		m, _ := b.get("/metrics")
		return strings.Contains(m, "kvselect_replica_peers_connected 1") && strings.Contains(m, `kvselect_replica_events_dropped_total{reason="unknown_partition"} 1`)
	})
	if _, _, n := b.totals(); n != 0 {
		t.Fatalf("B shows %d requests with no workers", n)
	}
	published := func() string {
		m, _ := a.get("/metrics")
		for l := range strings.SplitSeq(m, "\n") {
			if strings.HasPrefix(l, "kvselect_replica_events_published_total ") {
				return l
			}
		}
		return ""
	}
	before := published()

	// B's informers now see the pool and its pods.
	put(apiB)
	b.eventually("A's booking on B once B's catalog has the workers", func() bool {
		p, bl, n := b.totals()
		return p == ap && bl == ab && n == an
	})
	if after := published(); after != before {
		t.Fatalf("A published events meanwhile (%q, then %q): B caught up from a live event, not the snapshot", before, after)
	}
	if m, _ := b.get("/metrics"); !strings.Contains(m, "kvselect_replica_snapshot_requests_total 1") {
		t.Errorf("B's snapshot requests: want 1\n%.4000s", m)
	}
}
