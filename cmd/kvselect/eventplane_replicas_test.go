package main

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/kvselect/kvselect/zmqin/natsplane"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/zeebo/xxh3"
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

// bookOwn books id with n blocks of hashes and tracking hashes its own:
// no two bookings share a block, so /loads' totals are sums.
func (s *selector) bookOwn(id string, n int) {
	s.t.Helper()
	var bh, sh []string
	for i := range n {
		h := xxh3.HashString(id) >> 2
		bh = append(bh, fmt.Sprint(h+uint64(i)))
		sh = append(sh, fmt.Sprint(h/2+uint64(i)))
	}
	s.must("POST", "/select_and_reserve", fmt.Sprintf(`{"selection_id":%q,"block_hashes":[%s],"sequence_hashes":[%s],"isl_tokens":%d}`,
		id, strings.Join(bh, ","), strings.Join(sh, ","), 4*n), 200)
}

// natsMember runs a NATS server of the replicas' cluster in the test
// process, on fixed ports, advertising no other member to its clients (so
// that stopping it cuts its clients off rather than moving them).
func natsMember(t *testing.T, client, route int, routes ...int) *server.Server {
	t.Helper()
	opts := &server.Options{Host: "127.0.0.1", Port: client, NoSigs: true, NoLog: true, ServerName: fmt.Sprintf("test-%d", client), MaxPayload: natsplane.DefaultMaxPayload}
	opts.Cluster.Name, opts.Cluster.Host, opts.Cluster.Port, opts.Cluster.NoAdvertise = "kvselect", "127.0.0.1", route, true
	for _, r := range routes {
		opts.Routes = append(opts.Routes, server.RoutesFromStr(fmt.Sprintf("nats://127.0.0.1:%d", r))...)
	}
	s, err := server.NewServer(opts)
	if err != nil {
		t.Fatal(err)
	}
	s.Start()
	if !s.ReadyForConnections(10 * time.Second) {
		t.Fatal("NATS server not ready")
	}
	t.Cleanup(s.Shutdown)
	return s
}

// TestEventPlaneThreeReplicas runs three replicas over the NATS event
// plane: A and B the built binary with default flags plus ports and their
// embedded servers, C client-only on a server of the test's in the same
// cluster. Bookings propagate to all; B killed with SIGKILL and restarted
// starts with its peers' live bookings; C cut off (its server stopped)
// keeps booking and says so in /ready, and on heal every replica holds
// exactly the live bookings (what C missed comes from snapshots, the
// mirrors of frees it missed are released); after every free none holds
// anything. B is killed with a live booking, which peer liveness (on by
// default) releases on A and C.
func TestEventPlaneThreeReplicas(t *testing.T) {
	env := []string{"DYN_USE_KV_EVENTS=false"}
	// Peer liveness is on (the default, --event-plane-peer-timeout 10s).
	rs := natsReplicas(t, 2, env)
	a, b := rs[0], rs[1]
	cClient, cRoute := freePort(t), freePort(t)
	for _, r := range rs {
		i := slices.Index(r.args, "--nats-routes")
		r.args[i+1] += fmt.Sprintf(",nats://127.0.0.1:%d", cRoute)
	}
	cs := natsMember(t, cClient, cRoute, a.route, b.route)
	c := newSelector(t, env, "--event-plane", "nats", "--nats-server", fmt.Sprintf("nats://127.0.0.1:%d", cClient))
	all := []*selector{a.selector, b.selector, c}
	for _, s := range all {
		s.start()
		s.registerWorkers()
	}
	// Interest crosses the routes asynchronously: book from each until
	// the others see it.
	warm := func(from *selector) {
		for i := 0; ; i++ {
			id := fmt.Sprintf("warm-%d-%d", from.http, i)
			from.bookOwn(id, 1)
			time.Sleep(20 * time.Millisecond)
			seen := true
			for _, s := range all {
				if _, _, n := s.totals(); n != 1 {
					seen = false
				}
			}
			from.must("DELETE", "/reservations/"+id, "", 200)
			for _, s := range all {
				s.wantTotals("the warm-up freed", 0, 0, 0)
			}
			if seen {
				return
			}
		}
	}
	for _, s := range all {
		warm(s)
	}
	wantAll := func(what string, blocks, reqs int64) {
		t.Helper()
		for _, s := range all {
			s.wantTotals(what, 4*blocks, blocks, reqs)
		}
	}
	a.bookOwn("a1", 1)
	b.bookOwn("b1", 2)
	c.bookOwn("c1", 4)
	wantAll("every booking everywhere", 7, 3)

	// Kill B with b1 live: its free never comes, and A and C release
	// its mirror once its heartbeats have stopped for the peer timeout
	// (at the expiry guard, 300 s, without liveness). The restarted B
	// starts with A's and C's live bookings.
	b.kill()
	for _, s := range []*selector{a.selector, c} {
		for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(10 * time.Millisecond) { // a hang guard
			if p, bl, n := s.totals(); p == 20 && bl == 5 && n == 2 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: B's mirror not released by peer liveness\nlogs:\n%s", s.base, s.logs.String())
			}
		}
		// The counter follows the release.
		s.eventually("the expired mirror counted", func() bool { return s.metric("kvselect_event_plane_mirrors_expired_total") == "1" })
	}
	b.start()
	b.registerWorkers()
	b.wantTotals("the restarted B caught up", 20, 5, 2)
	b.bookOwn("b2", 8)
	wantAll("b2 everywhere", 13, 3)

	// Cut C off: stop its server. C keeps booking; /ready says so.
	cs.Shutdown()
	cs.WaitForShutdown()
	c.eventually("C to report the cut", func() bool { _, ep := readyPlane(t, c); return !ep.Connected })
	a.must("DELETE", "/reservations/a1", "", 200)
	a.bookOwn("a2", 16)
	c.must("DELETE", "/reservations/c1", "", 200)
	c.bookOwn("c2", 32)
	// Live: b2 (8), a2 (16), c2 (32).
	a.wantTotals("A's own view", 4*28, 28, 3)           // c1's free missed
	c.wantTotals("C's own view", 4*(1+8+32), 1+8+32, 3) // a1's free missed

	natsMember(t, cClient, cRoute, a.route, b.route)
	c.eventually("C back", func() bool { _, ep := readyPlane(t, c); return ep.Connected && ep.Reconnects == 1 })
	wantAll("healed: the live bookings everywhere", 56, 3)
	if v := c.metric("kvselect_event_plane_mirrors_reconciled_total"); v == "" || v == "0" {
		t.Errorf("C released no mirror on heal (%q)", v)
	}

	b.must("DELETE", "/reservations/b2", "", 200)
	a.must("DELETE", "/reservations/a2", "", 200)
	c.must("DELETE", "/reservations/c2", "", 200)
	wantAll("no leak", 0, 0)
	for _, s := range all {
		if v := s.metric("kvselect_event_plane_bookings_outbound_dropped_total"); v != "0" {
			t.Errorf("%s dropped bookings: %q", s.base, v)
		}
	}
}
