package bench

import (
	"context"
	"strings"
	"testing"
)

// TestRunDisaggMix: the disagg mix sends plan, prefill_complete and DELETE
// per operation with the two pools named in the plan body, registers a
// prefill and a decode pool of Workers each with their zones as
// KV-transfer domains, and is measured against the no-op baseline in the
// same run (which answers /disagg/plan with a plan-shaped body).
func TestRunDisaggMix(t *testing.T) {
	srv := startCountingTestServer(t, nil)
	cfg := smallRun(srv.url)
	cfg.Mix = MixDisagg
	cfg.Baseline = "noop"
	rep, err := Run(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	got := srv.calls()
	plans := got["disagg_plan"]
	if plans == 0 || got["bad_body"] != 0 || got["active"] != 0 || got["select_and_reserve"] != 0 ||
		got["disagg_prefill_complete"] != plans || got["disagg_delete"] != plans {
		t.Fatalf("server saw %v: want every plan completed and deleted once, nothing else booked", got)
	}
	if rep.ErrorCount() != 0 || rep.LeakedReservations != 0 || rep.ByRoute["disagg_plan"] == 0 ||
		rep.ByRoute["disagg_delete"] != rep.ByRoute["disagg_plan"] || rep.Mix != "disagg" {
		t.Fatalf("report: errors %v, leaked %d, by route %v", rep.Errors, rep.LeakedReservations, rep.ByRoute)
	}
	if b := rep.Baseline; b == nil || b.ErrorCount() != 0 || b.ByRoute["disagg_plan"] == 0 || rep.Ratios == nil || rep.Ratios.Throughput <= 0 {
		t.Fatalf("baseline %+v, ratios %+v", rep.Baseline, rep.Ratios)
	}
	srv.mu.Lock()
	workers := append([]WorkerRequest(nil), srv.mu.workers...)
	srv.mu.Unlock()
	if len(workers) != 2*cfg.Workers {
		t.Fatalf("%d workers registered, want %d per pool", len(workers), cfg.Workers)
	}
	zones := map[string]map[string]int{}
	for i, w := range workers {
		wantGroup := "prefill"
		if i >= cfg.Workers {
			wantGroup = "decode"
		}
		zone := w.TopologyDomains["zone"]
		if w.WorkerID != uint64(i+1) || w.RoutingGroup != wantGroup || w.KVTransferDomain != "zone" || w.KVTransferEnforcement != "required" ||
			zone == "" || len(w.Taints) != 1 || w.Taints[0] != "dynamo.topology/zone="+zone {
			t.Fatalf("worker %d: %+v", i+1, w)
		}
		if zones[wantGroup] == nil {
			zones[wantGroup] = map[string]int{}
		}
		zones[wantGroup][zone]++
	}
	if len(zones["prefill"]) != 2 || len(zones["decode"]) != 2 {
		t.Fatalf("zones per pool %v: each pool must span both zones", zones)
	}
	var table strings.Builder
	if err := rep.WriteTable(&table); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(table.String(), "disagg_plan=") {
		t.Fatalf("table:\n%s", table.String())
	}
}
