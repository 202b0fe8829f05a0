package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestEppReplicas: EPP replicas mesh over the replica mesh as serve's
// do. A stream booked on one replica shows on the other's /loads while it
// runs and leaves it when the stream is dropped, and a replica that joins
// later catches up on the live booking from its peer's snapshot: any
// replica can take any stream with the fleet's load in view.
func TestEppReplicas(t *testing.T) {
	file := filepath.Join(t.TempDir(), "workers.json")
	workers := `{"workers":[{"worker_id":1,"model_name":"m","endpoint":"http://127.0.0.2:8000","block_size":4},{"worker_id":2,"model_name":"m","endpoint":"http://127.0.0.3:8000","block_size":4}]}`
	if err := os.WriteFile(file, []byte(workers), 0o644); err != nil {
		t.Fatal(err)
	}
	pa, pb, pc := freePort(t), freePort(t), freePort(t)
	ep := func(p int) string { return fmt.Sprintf("tcp://127.0.0.1:%d", p) }
	common := []string{"--workers-file", file, "--model-name", "m", "--kv-events=false"}
	a := startEppProc(t, append(common, "--replica-sync-port", fmt.Sprint(pa), "--replica-sync-peers", ep(pb)+","+ep(pc))...)
	b := startEppProc(t, append(common, "--replica-sync-port", fmt.Sprint(pb), "--replica-sync-peers", ep(pa)+","+ep(pc))...)
	for _, p := range []*eppProc{a, b} {
		p.eventually("the peer connected", func() bool {
			m, _ := p.get("/metrics")
			return strings.Contains(m, "kvselect_replica_peers_connected 1")
		})
	}
	// A stream on A, left open: booked on A, mirrored on B.
	_, _, cancel := eppPick(t, a.client(), `{"model":"m","prompt":[1,2,3,4,5,6,7,8,9]}`)
	if _, _, n := a.totals(); n != 1 {
		t.Fatalf("A's own booking: %d requests", n)
	}
	b.eventually("A's booking on B", func() bool { _, _, n := b.totals(); return n == 1 })
	// C joins later and catches up from a snapshot.
	c := startEppProc(t, append(common, "--replica-sync-port", fmt.Sprint(pc), "--replica-sync-peers", ep(pa)+","+ep(pb))...)
	c.eventually("A's live booking on C, from the snapshot", func() bool { _, _, n := c.totals(); return n == 1 })
	// The gateway drops A's stream: the free reaches every replica.
	cancel()
	for _, p := range []*eppProc{a, b, c} {
		p.eventually("the booking freed everywhere", func() bool { _, _, n := p.totals(); return n == 0 })
	}
}
