package main

import (
	"fmt"
	"strings"
	"testing"
)

// natsReplica is a `kvselect serve` with --event-plane nats, its embedded
// server clustered through routes to the others'.
type natsReplica struct {
	*selector
	client, route int
}

// natsReplicas makes n replicas (not started), each routed to every
// other's server, with extra flags.
func natsReplicas(t *testing.T, n int, env []string, extra ...string) []*natsReplica {
	rs := make([]*natsReplica, n)
	for i := range rs {
		rs[i] = &natsReplica{client: freePort(t), route: freePort(t)}
	}
	for i, r := range rs {
		var routes []string
		for j, o := range rs {
			if j != i {
				routes = append(routes, fmt.Sprintf("nats://127.0.0.1:%d", o.route))
			}
		}
		args := append([]string{"--event-plane", "nats", "--nats-listen", fmt.Sprintf("127.0.0.1:%d", r.client),
			"--nats-cluster-listen", fmt.Sprintf("127.0.0.1:%d", r.route), "--nats-routes", strings.Join(routes, ",")}, extra...)
		r.selector = newSelector(t, env, args...)
	}
	return rs
}

// metric is the value of one sample line of s's /metrics, "" when absent.
func (s *selector) metric(name string) string {
	m, _ := s.get("/metrics")
	for _, l := range strings.Split(m, "\n") {
		if v, ok := strings.CutPrefix(l, name+" "); ok {
			return v
		}
	}
	return ""
}

// TestEventPlaneReplicaTraffic runs two replicas over the NATS event
// plane (the built binary, default flags plus ports): a replica that
// joins after its peer booked starts with that booking (the catch-up
// snapshot by request/reply), and a session bound on one steers the
// other's selections (the bindings' subject).
func TestEventPlaneReplicaTraffic(t *testing.T) {
	rs := natsReplicas(t, 2, []string{"DYN_USE_KV_EVENTS=false"}, "--session-affinity-ttl-secs", "600")
	a, b := rs[0], rs[1]
	a.start()
	a.registerWorkers()
	a.book("early", 2)
	b.start()
	b.registerWorkers()
	b.wantTotals("A's early booking on B, from A's snapshot", 8, 2, 1)
	if v := b.metric(`kvselect_event_plane_snapshot_events_total{outcome="received"}`); v == "" || v == "0" {
		t.Errorf("B received no snapshot events (%q)", v)
	}

	bound := workerOf(t, a.must("POST", "/select_and_reserve",
		`{"selection_id":"s1","token_ids":[1,2,3,4],"session_context":{"session_id":"conv-1","input_trigger":"user_message"}}`, 200))
	b.eventually("the binding on B", func() bool {
		return b.metric(`kvselect_session_affinity_replica_events_total{outcome="inserted"}`) == "1"
	})
	for i := range 3 {
		if got := workerOf(t, b.must("POST", "/select", `{"token_ids":[9,8,7,6],"session_id":"conv-1"}`, 200)); got != bound {
			t.Fatalf("B's select %d went to worker %s, bound to %s", i, got, bound)
		}
	}
	if v := a.metric(`kvselect_event_plane_affinity_published_total`); v == "" || v == "0" {
		t.Errorf("A published no binding on NATS (%q)", v)
	}
	a.must("DELETE", "/reservations/s1", "", 200)
	a.must("DELETE", "/reservations/early", "", 200)
	b.wantTotals("A's frees on B", 0, 0, 0)
}
