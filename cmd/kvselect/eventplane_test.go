package main

import (
	"fmt"
	"io"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/kvselect/kvselect/radix"
	"github.com/kvselect/kvselect/zmqin/natsplane"
	"github.com/nats-io/nats.go"
)

func TestSplitEventPlaneArgs(t *testing.T) {
	args := []string{"--port", "1", "--event-plane", "nats", "-nats-server=nats://x:1", "--threads", "2",
		"--event-plane-bookings", "--namespace", "ns", "--event-plane-bookings=false", "--", "--component", "c"}
	rest, mine := splitEventPlaneArgs(args)
	if want := []string{"--port", "1", "--threads", "2", "--", "--component", "c"}; !reflect.DeepEqual(rest, want) {
		t.Errorf("rest %q, want %q", rest, want)
	}
	if want := []string{"--event-plane", "nats", "-nats-server=nats://x:1", "--event-plane-bookings", "--namespace", "ns", "--event-plane-bookings=false"}; !reflect.DeepEqual(mine, want) {
		t.Errorf("mine %q, want %q", mine, want)
	}
}

func TestParseEventPlane(t *testing.T) {
	env := func(m map[string]string) func(string) (string, bool) {
		return func(k string) (string, bool) { v, ok := m[k]; return v, ok }
	}
	_, o, err := parseEventPlane(nil, env(nil), io.Discard)
	if err != nil || o.nats || o.scope != (natsplane.Scope{Namespace: "dynamo", Component: "backend", Endpoint: "generate"}) || !o.bookings {
		t.Errorf("defaults: %+v %v", o, err)
	}
	rest, o, err := parseEventPlane([]string{"--port", "9", "--component", "vllm"},
		env(map[string]string{"DYN_EVENT_PLANE": "nats", "NATS_SERVER": "nats://fleet:4222", "DYN_NAMESPACE": "prod"}), io.Discard)
	if err != nil || !o.nats || o.url != "nats://fleet:4222" || o.scope.Namespace != "prod" || o.scope.Component != "vllm" || len(rest) != 2 {
		t.Errorf("env: %+v %v %q", o, err, rest)
	}
	_, o, err = parseEventPlane([]string{"--endpoint", "dyn://a.b.c"}, env(nil), io.Discard)
	if err != nil || o.scope != (natsplane.Scope{Namespace: "a", Component: "b", Endpoint: "c"}) {
		t.Errorf("dyn://: %+v %v", o, err)
	}
	if _, o, err = parseEventPlane([]string{"--event-plane-dynamo-bookings", "always"}, env(nil), io.Discard); err != nil || o.dynamoForm != natsplane.DynamoAlways {
		t.Errorf("--event-plane-dynamo-bookings always: %+v %v", o, err)
	}
	for _, bad := range [][]string{{"--event-plane", "kafka"}, {"--endpoint", "dyn://a.b"}, {"--nats-server", "nats://x:1", "--nats-routes", "nats://y:2"}, {"--event-plane-queue", "0"}, {"--event-plane-dynamo-bookings", "sometimes"}} {
		if _, _, err := parseEventPlane(bad, env(nil), io.Discard); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}

// TestEventPlaneProcesses runs two `kvselect serve` processes (the built
// binary, default flags plus ports and --event-plane nats), each with its
// embedded NATS server, clustered through a route. A simulated Dynamo
// worker publishes KV events to A's server; they change A's /select. A
// booking on B shows in A's loads, and its free clears it.
func TestEventPlaneProcesses(t *testing.T) {
	natsA, natsB, routeA, routeB := freePort(t), freePort(t), freePort(t), freePort(t)
	a := newSelector(t, nil, "--event-plane", "nats", "--nats-listen", fmt.Sprintf("127.0.0.1:%d", natsA),
		"--nats-cluster-listen", fmt.Sprintf("127.0.0.1:%d", routeA), "--nats-routes", fmt.Sprintf("nats://127.0.0.1:%d", routeB))
	b := newSelector(t, []string{"DYN_EVENT_PLANE=nats"}, "--nats-listen", fmt.Sprintf("127.0.0.1:%d", natsB),
		"--nats-cluster-listen", fmt.Sprintf("127.0.0.1:%d", routeB), "--nats-routes", fmt.Sprintf("nats://127.0.0.1:%d", routeA))
	a.start()
	b.start()
	for _, s := range []*selector{a, b} {
		for id := 1; id <= 2; id++ {
			body := s.must("POST", "/workers", fmt.Sprintf(`{"worker_id":%d,"endpoint":"http://w%d","block_size":4}`, id, id), 201)
			if !strings.Contains(body, `"schedulable"`) {
				t.Fatalf("worker %d without a ZMQ endpoint not schedulable: %s", id, body)
			}
		}
	}

	// KV events the way a Dynamo worker publishes them (worker 2).
	nc, err := nats.Connect(fmt.Sprintf("nats://127.0.0.1:%d", natsA))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	toks := []uint32{1, 2, 3, 4, 5, 6, 7, 8}
	local := radix.LocalHashes(nil, toks, 4, radix.Seed)
	ev := radix.Event{Worker: radix.WorkerKey{WorkerID: 2}, EventID: 1, Kind: radix.Stored,
		Blocks: []radix.Block{{Hash: 11, Local: local[0]}, {Hash: 12, Local: local[1]}}}
	body := natsplane.AppendEnvelope(nil, 0xfeed, 0, uint64(time.Now().UnixMilli()), natsplane.TopicKVEvents, natsplane.AppendRouterEvents(nil, []radix.Event{ev}))
	if err := nc.Publish("namespace.dynamo.component.backend.endpoint.generate.kv-events", body); err != nil {
		t.Fatal(err)
	}
	a.eventually("the KV event applied", func() bool {
		m, _ := a.get("/metrics")
		return strings.Contains(m, "kvselect_event_plane_kv_events_applied_total 1")
	})
	for range 4 {
		if w := workerOf(t, a.must("POST", "/select", `{"token_ids":[1,2,3,4,5,6,7,8]}`, 200)); w != "2" {
			t.Fatalf("selected worker %s, want 2, which holds the prompt's blocks", w)
		}
	}

	// Bookings across the clustered servers: the route and the interest
	// propagate asynchronously, so book until A sees one.
	i := 0
	a.eventually("B's booking on A", func() bool {
		i++
		b.must("POST", "/select_and_reserve", fmt.Sprintf(`{"selection_id":"b-%d","block_hashes":[%d],"sequence_hashes":[%d],"isl_tokens":4}`, i, 1000+i, 1000+i), 200)
		time.Sleep(20 * time.Millisecond)
		_, _, n := a.totals()
		return n > 0
	})
	_, _, seen := a.totals()
	for j := 1; j <= i; j++ {
		b.must("DELETE", fmt.Sprintf("/reservations/b-%d", j), "", 200)
	}
	a.wantTotals("B's frees on A", 0, 0, 0)
	if seen != 1 {
		t.Logf("A saw %d of B's %d bookings (earlier ones left before the route)", seen, i)
	}
	m, _ := b.get("/metrics")
	if !strings.Contains(m, "kvselect_event_plane_bookings_queue_limit 100000") || !strings.Contains(m, "kvselect_event_plane_connected 1") {
		t.Errorf("B's metrics lack the event plane:\n%s", grepLines(m, "kvselect_event_plane"))
	}
}
