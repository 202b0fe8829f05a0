package kube

import (
	"bytes"
	"errors"
	"maps"
	"strings"
	"testing"

	"github.com/kvselect/kvselect/core"
	"github.com/kvselect/kvselect/httpapi/kube/kubetest"
	"github.com/kvselect/kvselect/perf"
)

// groups returns the catalog as worker id → routing group.
func (e *env) groups() map[uint64]string {
	out := map[uint64]string{}
	for _, r := range e.svc.ListWorkers("", "") {
		out[r.WorkerID] = r.RoutingGroup
	}
	return out
}

// waitGroups waits until the catalog is want (worker id → routing group).
func (e *env) waitGroups(t *testing.T, what string, want map[uint64]string) {
	t.Helper()
	until(t, what, func() bool { return maps.Equal(e.groups(), want) })
}

// plan books a disaggregated plan on the catalog the source built, as
// httpapi/epp does, with the given prefill-failure policy.
func (e *env) plan(t *testing.T, failure core.PrefillFailurePolicy) (core.DisaggPlanView, error) {
	t.Helper()
	req := &core.DisaggRequest{ModelName: "llama", PrefillFailure: failure}
	req.Prompt.TokenIDs, req.Prompt.HasTokenIDs = make([]uint32, 64), true
	for i := range req.Prompt.TokenIDs {
		req.Prompt.TokenIDs[i] = uint32(i + 1)
	}
	return e.svc.PlanDisagg(req)
}

// TestTwoPools: with a prefill pool, the decode pool's workers are in the
// decode group and the prefill pool's in the prefill group, each at its
// pool's port, so a plan books one of each; a pod both pools select is a
// decode worker; a pod relabelled from one pool to the other moves group
// under the same id (its booking released); a prefill pool without pods
// leaves decode-only plans (the coordinator's bypass on a prefill
// failure); a deleted prefill pool makes the source not ready and takes
// only its own workers out.
func TestTwoPools(t *testing.T) {
	api := kubetest.NewAPI(t)
	dec, pre := map[string]string{"decode": "yes"}, map[string]string{"prefill": "yes"}
	api.Put("inferencepools", kubetest.PoolObj(testNS, "llama-decode", dec, 8000))
	api.Put("inferencepools", kubetest.PoolObj(testNS, "llama-prefill", pre, 8100))
	api.Put("inferencepools", kubetest.PoolObj(testNS, "unrelated", map[string]string{"x": "y"}, 7000))
	api.Put("pods", kubetest.PodObj(testNS, "d-0", "d0", "10.0.0.1", true, dec))
	api.Put("pods", kubetest.PodObj(testNS, "p-0", "p0", "10.0.1.1", true, pre))
	api.Put("pods", kubetest.PodObj(testNS, "x-0", "both", "10.0.2.1", true, map[string]string{"decode": "yes", "prefill": "yes"}))
	api.Put("pods", kubetest.PodObj(testNS, "p-1", "p1", "10.0.1.2", false, pre))

	cfg := testConfig()
	cfg.PoolName, cfg.PrefillPoolName = "llama-decode", "llama-prefill"
	e := start(t, api, cfg)
	reg := perf.NewRegistry()
	e.src.RegisterMetrics(reg)
	e.waitFor(t, "both pools' workers", map[uint64]string{
		id("d0"): "http://10.0.0.1:8000", id("both"): "http://10.0.2.1:8000", id("p0"): "http://10.0.1.1:8100",
	})
	e.waitGroups(t, "their groups", map[uint64]string{id("d0"): "decode", id("both"): "decode", id("p0"): "prefill"})
	until(t, "stats", func() bool {
		st := e.src.Stats()
		return st.Ready() && st.PodsInBothPools == 1 && st.PodsMatched == 4 && len(st.Pools) == 2 &&
			st.Pools[0] == PoolStats{Name: "llama-decode", RoutingGroup: "decode", Resolved: true, Workers: 2} &&
			st.Pools[1] == PoolStats{Name: "llama-prefill", RoutingGroup: "prefill", Resolved: true, Workers: 1}
	})
	var b bytes.Buffer
	reg.WritePrometheus(&b)
	for _, want := range []string{
		`kvselect_kube_pool_workers{pool="llama-decode",routing_group="decode"} 2` + "\n",
		`kvselect_kube_pool_workers{pool="llama-prefill",routing_group="prefill"} 1` + "\n",
		`kvselect_kube_pool_ready{pool="llama-prefill",routing_group="prefill"} 1` + "\n",
		"kvselect_kube_pods_in_both_pools 1\n", "kvselect_kube_ready 1\n",
	} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("metrics lack %q", want)
		}
	}
	// Each pool is listed and watched by its own name.
	var sawDecode, sawPrefill bool
	for _, q := range api.QueriesOf("inferencepools") {
		sawDecode = sawDecode || strings.Contains(q, "fieldSelector=metadata.name%3Dllama-decode")
		sawPrefill = sawPrefill || strings.Contains(q, "fieldSelector=metadata.name%3Dllama-prefill")
		if !strings.Contains(q, "fieldSelector=metadata.name%3Dllama-") {
			t.Errorf("pool query %q names no pool", q)
		}
	}
	if !sawDecode || !sawPrefill {
		t.Errorf("pool queries %v: want one informer per pool", api.QueriesOf("inferencepools"))
	}

	// A plan: prefill in the prefill pool, decode in the decode pool.
	v, err := e.plan(t, core.PrefillFailureDefault)
	if err != nil || v.Prefill == nil || v.Decode == nil || v.Prefill.WorkerID != id("p0") || v.Prefill.Endpoint != "http://10.0.1.1:8100" ||
		(v.Decode.WorkerID != id("d0") && v.Decode.WorkerID != id("both")) {
		t.Fatalf("plan %+v %v: want prefill on p-0, decode on a decode pod", v, err)
	}
	// p-0 moves to the decode pool while its prefill leg is booked: same
	// id, decode group, the leg released; the prefill pool is empty.
	api.Put("pods", kubetest.PodObj(testNS, "p-0", "p0", "10.0.1.1", true, dec))
	e.waitGroups(t, "p-0 moved to decode", map[uint64]string{id("d0"): "decode", id("both"): "decode", id("p0"): "decode"})
	e.waitFor(t, "p-0 at the decode port", map[uint64]string{
		id("d0"): "http://10.0.0.1:8000", id("both"): "http://10.0.2.1:8000", id("p0"): "http://10.0.1.1:8000",
	})
	// The leg is released by the membership change that moved p-0; the
	// catalog shows the move first, so poll for the release.
	until(t, "the prefill leg on p-0 released after p-0 left the prefill pool", func() bool {
		_, ok := e.svc.Reservation(v.Prefill.SelectionID)
		return !ok
	})
	if _, err := e.svc.ReleaseDisagg(v.SelectionID); err != nil {
		t.Fatal(err)
	}
	if st := e.svc.Stats(); st.Reservations != 0 {
		t.Fatalf("after the release: %d reservations", st.Reservations)
	}
	until(t, "empty prefill pool counted", func() bool {
		st := e.src.Stats()
		return st.Ready() && st.Pools[1].Workers == 0 && st.Pools[0].Workers == 3
	})

	// No prefill worker: with the bypass policy (the EPP's) the plan is
	// decode-only; with free_decode it fails and holds nothing.
	v, err = e.plan(t, core.BypassOnDecode)
	if err != nil || v.Prefill != nil || v.Decode == nil || !v.Bypass {
		t.Fatalf("plan without prefill workers: %+v %v; want decode-only", v, err)
	}
	if _, err := e.svc.ReleaseDisagg(v.SelectionID); err != nil {
		t.Fatal(err)
	}
	if _, err := e.plan(t, core.FreeDecode); err == nil {
		t.Fatal("free_decode plan succeeded without prefill workers")
	}
	if st := e.svc.Stats(); st.Reservations != 0 {
		t.Fatalf("%d reservations after the decode-only plans", st.Reservations)
	}

	// d-0 moves the other way.
	api.Put("pods", kubetest.PodObj(testNS, "d-0", "d0", "10.0.0.1", true, pre))
	e.waitGroups(t, "d-0 moved to prefill", map[uint64]string{id("d0"): "prefill", id("both"): "decode", id("p0"): "decode"})
	if v, err := e.plan(t, core.PrefillFailureDefault); err != nil || v.Prefill == nil || v.Prefill.WorkerID != id("d0") || v.Prefill.Endpoint != "http://10.0.0.1:8100" {
		t.Fatalf("plan after d-0 moved: %+v %v", v, err)
	} else if _, err := e.svc.ReleaseDisagg(v.SelectionID); err != nil {
		t.Fatal(err)
	}

	// The prefill pool is deleted: not ready, its worker gone, the decode
	// pool's kept; recreated: ready again.
	api.Remove("inferencepools", testNS, "llama-prefill")
	e.waitGroups(t, "prefill pool deleted", map[uint64]string{id("both"): "decode", id("p0"): "decode"})
	until(t, "not ready without the prefill pool", func() bool {
		st := e.src.Stats()
		return !e.src.Ready() && st.Synced && st.Pools[0].Resolved && !st.Pools[1].Resolved && st.PoolErrors == 1
	})
	api.Put("inferencepools", kubetest.PoolObj(testNS, "llama-prefill", pre, 8100))
	e.waitGroups(t, "prefill pool recreated", map[uint64]string{id("d0"): "prefill", id("both"): "decode", id("p0"): "decode"})
	until(t, "ready again", e.src.Ready)
}

// TestTwoPoolsConfig: a prefill pool needs a distinct decode pool, no
// endpoint selector and no role label, and distinct groups.
func TestTwoPoolsConfig(t *testing.T) {
	for _, mut := range []func(*Config){
		func(c *Config) { c.PoolName = ""; c.Selector, c.TargetPorts = "app=x", []int{8000} },
		func(c *Config) { c.PrefillPoolName = c.PoolName },
		func(c *Config) { c.RoleLabel = "llm-d.ai/role" },
		func(c *Config) { c.PrefillRoutingGroup, c.DecodeRoutingGroup = "g", "g" },
		func(c *Config) { c.DecodeRoutingGroup = "prefill" },
	} {
		c := testConfig()
		c.PoolName, c.PrefillPoolName = "d", "p"
		mut(&c)
		if err := c.Validate(); !errors.Is(err, ErrConfig) {
			t.Errorf("%+v: %v, want ErrConfig", c, err)
		}
	}
	c := testConfig()
	c.PoolName, c.PrefillPoolName, c.PrefillRoutingGroup, c.DecodeRoutingGroup = "d", "p", "pre", "dec"
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
}
