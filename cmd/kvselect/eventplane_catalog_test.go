package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestEventPlaneCatalog runs two replicas over the NATS event plane with
// --nats-catalog (the built binary, default flags plus ports): A owns a
// workers file and mirrors it into the JetStream bucket; B, given no
// catalog, takes A's from the bucket (its own registrations refused), and
// follows the file's changes; a booking on A is mirrored on B's copy of
// the worker.
func TestEventPlaneCatalog(t *testing.T) {
	file := filepath.Join(t.TempDir(), "workers.json")
	write := func(body string) {
		t.Helper()
		tmp := file + ".tmp"
		if err := os.WriteFile(tmp, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, file); err != nil {
			t.Fatal(err)
		}
	}
	write(`{"workers":[` + strings.Join([]string{`{"worker_id":1,"endpoint":"http://w1","block_size":4}`, `{"worker_id":2,"endpoint":"http://w2","block_size":4}`}, ",") + `]}`)
	rs := natsReplicas(t, 2, []string{"DYN_USE_KV_EVENTS=false"}, "--nats-catalog")
	a, b := rs[0], rs[1]
	a.args = append(a.args, "--workers-file", file)
	a.start()
	b.start()
	ready := func(s *selector, n string) func() bool {
		return func() bool {
			body, _ := s.get("/ready")
			return strings.Contains(body, `"schedulable_workers":`+n+`,`)
		}
	}
	b.eventually("B's catalog from the bucket", ready(b.selector, "2"))
	if body, code := b.do("POST", "/workers", `{"worker_id":3,"endpoint":"http://w3","block_size":4}`); code != 409 {
		t.Errorf("B's own registration: %d %s, want 409 (the bucket owns its catalog)", code, body)
	}
	a.bookOwn("on-a", 2)
	b.wantTotals("A's booking on B", 8, 2, 1)
	a.must("DELETE", "/reservations/on-a", "", 200)
	b.wantTotals("A's free on B", 0, 0, 0)

	write(`{"workers":[{"worker_id":2,"endpoint":"http://w2","block_size":4}]}`)
	b.eventually("worker 1 gone from B", ready(b.selector, "1"))
	for _, s := range []*selector{a.selector, b.selector} {
		if v := s.metric("kvselect_event_plane_catalog_bound"); v != "1" {
			t.Errorf("%s: catalog_bound %q", s.base, v)
		}
	}
	if v := a.metric(`kvselect_event_plane_catalog_writes_total{op="delete",outcome="ok"}`); v != "1" {
		t.Errorf("A's mirror deletes %q, want 1", v)
	}
}
