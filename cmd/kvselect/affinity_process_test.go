package main

import (
	"regexp"
	"strings"
	"testing"
)

// workerOf reads worker_id from a selection response.
func workerOf(t *testing.T, body string) string {
	t.Helper()
	m := regexp.MustCompile(`"worker_id":(\d+)`).FindStringSubmatch(body)
	if m == nil {
		t.Fatalf("no worker_id in %s", body)
	}
	return m[1]
}

// TestAffinityOfProcesses runs two `kvselect serve` processes with session
// affinity, meshed on loopback: a session bound by a booking on A is
// applied on B over dynamo.session-affinity.v1 and steers B's selections
// and bookings to the same worker (which is also the loaded one, so
// nothing but the binding sends them there); the release of A's lease
// refreshes B's copy; a process without --session-affinity-ttl-secs does
// not subscribe to the topic.
func TestAffinityOfProcesses(t *testing.T) {
	env := []string{"DYN_USE_KV_EVENTS=false"}
	a := newSelector(t, env, "--session-affinity-ttl-secs", "600")
	b := newSelector(t, env, "--session-affinity-ttl-secs", "600")
	c := newSelector(t, env)
	a.args = append(a.args, "--replica-sync-peers", b.meshAddress+","+c.meshAddress)
	b.args = append(b.args, "--replica-sync-peers", a.meshAddress)
	c.args = append(c.args, "--replica-sync-peers", a.meshAddress)
	for _, s := range []*selector{a, b, c} {
		s.start()
		s.registerWorkers()
	}
	a.eventually("B and C subscribed to A, B to its bindings", func() bool {
		m, _ := a.get("/metrics")
		return strings.Contains(m, "kvselect_replica_subscribers 2") && strings.Contains(m, "kvselect_replica_affinity_subscribers 1")
	})
	b.eventually("B connected to A", func() bool {
		m, _ := b.get("/metrics")
		return strings.Contains(m, "kvselect_replica_peers_connected 1")
	})
	bound := workerOf(t, a.must("POST", "/select_and_reserve",
		`{"selection_id":"s1","token_ids":[1,2,3,4],"session_context":{"session_id":"conv-1","input_trigger":"user_message"}}`, 200))
	b.eventually("the binding on B", func() bool {
		m, _ := b.get("/metrics")
		return strings.Contains(m, `kvselect_session_affinity_replica_events_total{outcome="inserted"} 1`)
	})
	// B's bound worker also carries A's mirrored booking: only the binding
	// steers B there.
	b.wantTotals("A's booking mirrored on B", 4, 1, 1)
	for i := range 3 {
		got := workerOf(t, b.must("POST", "/select", `{"token_ids":[9,8,7,6],"session_id":"conv-1"}`, 200))
		if got != bound {
			t.Fatalf("B's select %d went to worker %s, bound to %s", i, got, bound)
		}
	}
	got := workerOf(t, b.must("POST", "/select_and_reserve", `{"selection_id":"s2","token_ids":[9,8,7,6],"session_id":"conv-1"}`, 200))
	if got != bound {
		t.Fatalf("B's booking went to worker %s, bound to %s", got, bound)
	}
	a.must("DELETE", "/reservations/s1", "", 200)
	b.eventually("A's lease release refreshing B's binding", func() bool {
		m, _ := b.get("/metrics")
		return strings.Contains(m, `kvselect_session_affinity_replica_events_total{outcome="refreshed"}`) &&
			!strings.Contains(m, `kvselect_session_affinity_replica_events_total{outcome="refreshed"} 0`)
	})
	m, _ := c.get("/metrics")
	if !strings.Contains(m, "kvselect_session_affinity_tables 0") || !strings.Contains(m, `kvselect_replica_messages_dropped_total{reason="unknown_topic"} 0`) {
		t.Fatalf("C (no affinity) saw bindings:\n%s", grepLines(m, "kvselect_session_affinity"))
	}
	am, _ := a.get("/metrics")
	if !strings.Contains(am, "kvselect_replica_affinity_outbound_queue_limit 4096") || strings.Contains(am, `kvselect_replica_affinity_events_published_total 0`) {
		t.Fatalf("A's affinity channel:\n%s", grepLines(am, "kvselect_replica_affinity"))
	}
}
