package natsplane

import (
	"fmt"
	"net"
	"os/exec"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kvselect/kvselect/core"
	"github.com/kvselect/kvselect/radix"
	"github.com/kvselect/kvselect/zmqin/mesh"
	"github.com/nats-io/nats.go"
)

// These tests run against a real NATS server: the embedded one
// (StartServer), and Debian's nats-server binary in TestDebianNatsServer.
// A simulated Dynamo worker publishes envelopes of RouterEvents the way
// ai-dynamo/dynamo:lib/llm/src/kv_router/publisher/sinks.rs does, and a
// simulated Dynamo router publishes ActiveSequenceEvents.

var testScope = Scope{Namespace: "dynamo", Component: "backend", Endpoint: "generate"}

const blockSize = 4

// bus starts an embedded server and returns it and a client connection.
func bus(t *testing.T) (*Server, *nats.Conn) {
	t.Helper()
	srv, err := StartServer(ServerConfig{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Close() })
	return srv, dial(t, srv.ClientURL())
}

func dial(t *testing.T, url string) *nats.Conn {
	t.Helper()
	nc, err := nats.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	return nc
}

// node is a selector on the bus: a service whose KV ingress and bookings
// are the event plane's, with workers 1 and 2 (one rank each, no ZMQ
// endpoint) registered.
type node struct {
	svc  *core.Service
	in   *Ingress
	bk   *Bookings
	nc   *nats.Conn
	link *Link
}

func newNode(t *testing.T, url string, routerID uint64) *node {
	t.Helper()
	return newNodeWith(t, url, BookingsConfig{RouterID: routerID})
}

// newNodeWith is newNode with bookings configured by bc (its Scope set).
func newNodeWith(t *testing.T, url string, bc BookingsConfig) *node {
	t.Helper()
	in, err := NewIngress(IngressConfig{Scope: testScope})
	if err != nil {
		t.Fatal(err)
	}
	bc.Scope = testScope
	bk, err := NewBookings(bc)
	if err != nil {
		t.Fatal(err)
	}
	cfg := core.DefaultConfig()
	cfg.KVEndpointsOptional = true
	svc, err := core.New(cfg, core.Options{Ingress: in, Replica: bk})
	if err != nil {
		t.Fatal(err)
	}
	link, err := Dial(url, "kvselect-test", nil)
	if err != nil {
		t.Fatal(err)
	}
	nc := link.Conn()
	link.OnReconnect(bk.Resync)
	n := &node{svc: svc, in: in, bk: bk, nc: nc, link: link}
	t.Cleanup(func() {
		_ = bk.Close()
		svc.Close()
		_ = in.Close()
		link.Close()
	})
	for _, id := range []uint64{1, 2} {
		ep, bs := fmt.Sprintf("http://w%d", id), uint32(blockSize)
		rec, err := svc.UpsertWorker(&core.WorkerSpec{WorkerID: id, WorkerFields: core.WorkerFields{Endpoint: &ep, BlockSize: &bs}})
		if err != nil || rec.Lifecycle != core.Schedulable {
			t.Fatalf("worker %d: %v %v", id, err, rec.NotSchedulableReasons)
		}
	}
	if err := in.Start(nc); err != nil {
		t.Fatal(err)
	}
	if err := bk.Start(nc, svc); err != nil {
		t.Fatal(err)
	}
	if err := nc.Flush(); err != nil { // subscriptions are on the server
		t.Fatal(err)
	}
	return n
}

// worker simulates a Dynamo worker rank's KV publisher: envelopes with its
// publisher id and sequence, RouterEvents with contiguous event ids.
type worker struct {
	nc      *nats.Conn
	subject string
	pub     uint64
	seq     uint64
	id      uint64
	key     radix.WorkerKey
}

func newWorker(nc *nats.Conn, id uint64, pub uint64) *worker {
	return &worker{nc: nc, subject: testScope.Subject(TopicKVEvents), pub: pub, key: radix.WorkerKey{WorkerID: id}}
}

// send publishes evs (their Worker set to the worker's) in one envelope,
// numbering them from the next event id.
func (w *worker) send(t *testing.T, evs ...radix.Event) {
	t.Helper()
	for i := range evs {
		evs[i].Worker = w.key
		if evs[i].EventID == 0 {
			w.id++
			evs[i].EventID = w.id
		}
	}
	body := AppendEnvelope(nil, w.pub, w.seq, uint64(time.Now().UnixMilli()), TopicKVEvents, AppendRouterEvents(nil, evs))
	w.seq++
	w.raw(t, w.subject, body)
}

func (w *worker) raw(t *testing.T, subject string, body []byte) {
	t.Helper()
	if err := w.nc.Publish(subject, body); err != nil {
		t.Fatal(err)
	}
	if err := w.nc.Flush(); err != nil {
		t.Fatal(err)
	}
}

// prompt returns n blocks of tokens starting at token base, and their
// local hashes.
func prompt(base, n int) ([]uint32, []uint64) {
	toks := make([]uint32, n*blockSize)
	for i := range toks {
		toks[i] = uint32(base + i)
	}
	return toks, radix.LocalHashes(nil, toks, blockSize, radix.Seed)
}

// store is a Stored event of the prompt's blocks, engine hashes base+1...,
// chained after parent when parent != 0.
func store(base int, local []uint64, parent uint64) radix.Event {
	ev := radix.Event{Kind: radix.Stored, ParentHash: parent, HasParent: parent != 0}
	for i, l := range local {
		ev.Blocks = append(ev.Blocks, radix.Block{Hash: uint64(base + i + 1), Local: l})
	}
	return ev
}

// overlap is the device blocks worker id holds of toks.
func (n *node) overlap(t *testing.T, id uint64, toks []uint32) int64 {
	t.Helper()
	sc, err := n.svc.OverlapScores(&core.QueryRequest{Prompt: core.Prompt{TokenIDs: toks, HasTokenIDs: true}})
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range sc.Workers {
		if r.WorkerID == id {
			return r.DeviceBlocks
		}
	}
	return -1
}

// eventually polls cond every millisecond for at most 5 s: the bus
// delivers asynchronously and has no completion to wait on.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

func (n *node) waitMessages(t *testing.T, want uint64) {
	t.Helper()
	eventually(t, fmt.Sprintf("%d KV messages", want), func() bool { return n.in.Stats().Messages >= want })
}

// TestKVEventsChangeSelection: a Dynamo worker's KV events over NATS land
// in the index and move the selection to the worker that holds the prefix.
func TestKVEventsChangeSelection(t *testing.T) {
	srv, pubc := bus(t)
	n := newNode(t, srv.ClientURL(), 0)
	toks, local := prompt(0, 4)
	var first core.Selection
	if err := n.svc.Select(&core.SelectRequest{Prompt: core.Prompt{TokenIDs: toks, HasTokenIDs: true}}, &first); err != nil {
		t.Fatal(err)
	}
	other := uint64(3) - first.WorkerID // the worker not picked without events
	w := newWorker(pubc, other, 0xabc)
	w.send(t, store(0, local, 0))
	n.waitMessages(t, 1)
	if got := n.overlap(t, other, toks); got != 4 {
		t.Fatalf("worker %d holds %d blocks of the prompt, want 4 (stats %+v)", other, got, n.in.Stats())
	}
	for range 5 {
		var sel core.Selection
		if err := n.svc.Select(&core.SelectRequest{Prompt: core.Prompt{TokenIDs: toks, HasTokenIDs: true}}, &sel); err != nil {
			t.Fatal(err)
		}
		if sel.WorkerID != other {
			t.Fatalf("selected %d, want %d which holds the prefix", sel.WorkerID, other)
		}
	}
	st := n.in.Stats()
	if st.EventsApplied != 1 || st.ByForm[FormBatch] != 1 || st.Ranks != 2 {
		t.Errorf("stats %+v", st)
	}
	var rs []core.RankStatus
	if rs = n.in.Status(other, rs); len(rs) != 1 || rs[0].State != "live" || rs[0].LastSeq != 1 {
		t.Errorf("status %+v", rs)
	}
}

// TestEventIDGapClearsRank: an event id past the next one clears the rank
// (Dynamo's degraded reset), then applies the event.
func TestEventIDGapClearsRank(t *testing.T) {
	srv, pubc := bus(t)
	n := newNode(t, srv.ClientURL(), 0)
	w := newWorker(pubc, 1, 0xabc)
	toksA, localA := prompt(0, 2)
	toksB, localB := prompt(100, 2)
	w.send(t, store(0, localA, 0))
	w.id++ // event 2 lost
	w.send(t, store(100, localB, 0))
	n.waitMessages(t, 2)
	if a, b := n.overlap(t, 1, toksA), n.overlap(t, 1, toksB); a != 0 || b != 2 {
		t.Errorf("after the gap: prefix A %d blocks (want 0: cleared), B %d (want 2)", a, b)
	}
	if st := n.in.Stats(); st.EventGaps != 1 || st.MissedEvents != 1 || st.Recoveries != 1 {
		t.Errorf("stats %+v", st)
	}
	// A stale repeat is dropped.
	w.send(t, radix.Event{Kind: radix.Cleared, EventID: 3})
	n.waitMessages(t, 3)
	if b := n.overlap(t, 1, toksB); b != 2 || n.in.Stats().Dropped[DropStale] != 1 {
		t.Errorf("stale clear: B %d blocks, stats %+v", b, n.in.Stats())
	}
}

// TestEnvelopeGapAndRestart: a lost envelope (sequence jump) clears the
// rank; so does a new publisher id for it (a restarted worker).
func TestEnvelopeGapAndRestart(t *testing.T) {
	srv, pubc := bus(t)
	n := newNode(t, srv.ClientURL(), 0)
	w := newWorker(pubc, 1, 0xabc)
	toks, local := prompt(0, 2)
	w.send(t, store(0, local, 0))
	w.seq++ // an envelope lost on the bus; event ids still contiguous
	toks2, local2 := prompt(50, 1)
	w.send(t, store(50, local2, 0))
	n.waitMessages(t, 2)
	if a, b := n.overlap(t, 1, toks), n.overlap(t, 1, toks2); a != 0 || b != 1 {
		t.Errorf("after the envelope gap: %d and %d blocks, want 0 and 1", a, b)
	}
	st := n.in.Stats()
	if st.EnvelopeGaps != 1 || st.MissedEnvelopes != 1 || st.EventGaps != 0 {
		t.Errorf("stats %+v", st)
	}
	// The worker restarts: a new publisher id, event ids from 1 again.
	w2 := newWorker(pubc, 1, 0xdef)
	w2.send(t, store(0, local, 0))
	n.waitMessages(t, 3)
	if a, b := n.overlap(t, 1, toks), n.overlap(t, 1, toks2); a != 2 || b != 0 {
		t.Errorf("after the restart: %d and %d blocks, want 2 and 0", a, b)
	}
	if st := n.in.Stats(); st.Restarts != 1 || st.Dropped[DropStale] != 0 {
		t.Errorf("stats %+v", st)
	}
}

// TestMalformedMessagesAreCountedDrops: bad bodies are dropped and counted
// by reason, and the subscription keeps applying later good ones.
func TestMalformedMessagesAreCountedDrops(t *testing.T) {
	srv, pubc := bus(t)
	n := newNode(t, srv.ClientURL(), 0)
	w := newWorker(pubc, 1, 0xabc)
	_, local := prompt(0, 1)
	good := AppendEnvelope(nil, 0xabc, 0, 1, TopicKVEvents, AppendRouterEvents(nil, []radix.Event{{Worker: radix.WorkerKey{WorkerID: 1}, EventID: 1, Kind: radix.Stored, Blocks: []radix.Block{{Hash: 1, Local: local[0]}}}}))
	bodies := [][]byte{
		{0xc1, 0x00},        // not msgpack
		good[:len(good)/2],  // truncated envelope
		[]byte("{not json"), // legacy JSON, broken
		AppendEnvelope(nil, 0xabc, 0, 1, "other-topic", []byte{0x90}),       // wrong topic
		AppendEnvelope(nil, 0xabc, 0, 1, TopicKVEvents, []byte{0x91, 0x01}), // payload not RouterEvents
		AppendEnvelope(nil, 0xabc, 0, 1, TopicKVEvents, AppendRouterEvents(nil, []radix.Event{{Worker: radix.WorkerKey{WorkerID: 9}, EventID: 1, Kind: radix.Cleared}})), // unknown worker
	}
	for _, b := range bodies {
		w.raw(t, w.subject, b)
	}
	w.send(t, store(0, local, 0))
	n.waitMessages(t, uint64(len(bodies)+1))
	st := n.in.Stats()
	want := map[Drop]uint64{DropMalformedEnvelope: 2, DropMalformedPayload: 2, DropWrongTopic: 1, DropUnknownWorker: 1}
	for d, v := range want {
		if st.Dropped[d] != v {
			t.Errorf("%s drops %d, want %d", d, st.Dropped[d], v)
		}
	}
	if st.EventsApplied != 1 {
		t.Errorf("the good message after the bad ones: %d events applied, want 1", st.EventsApplied)
	}
}

// TestOlderForms: the single-RouterEvent payload (before #11776) on the
// component scope, and the legacy JSON body on kv_events, both apply.
func TestOlderForms(t *testing.T) {
	srv, pubc := bus(t)
	n := newNode(t, srv.ClientURL(), 0)
	toks, local := prompt(0, 2)
	ev := store(0, local[:1], 0)
	ev.Worker, ev.EventID = radix.WorkerKey{WorkerID: 1}, 1
	single := AppendEnvelope(nil, 5, 0, 1, TopicKVEvents, AppendRouterEvent(nil, &ev))
	w := newWorker(pubc, 1, 5)
	w.raw(t, testScope.ComponentScope().Subject(TopicKVEvents), single)
	// Two subjects are two subscriptions, with no order between them (a
	// real rank publishes on one): wait for the first.
	n.waitMessages(t, 1)
	js := fmt.Sprintf(`{"worker_id":1,"event":{"event_id":2,"data":{"stored":{"parent_hash":1,"blocks":[{"block_hash":2,"tokens_hash":%d}]}},"dp_rank":0}}`, local[1])
	w.raw(t, testScope.ComponentScope().Subject(TopicKVEventsLegacy), []byte(js))
	n.waitMessages(t, 2)
	if got := n.overlap(t, 1, toks); got != 2 {
		t.Errorf("%d blocks, want 2 (stats %+v)", got, n.in.Stats())
	}
	if st := n.in.Stats(); st.ByForm[FormSingle] != 1 || st.ByForm[FormLegacyJSON] != 1 {
		t.Errorf("stats %+v", st)
	}
}

// TestBookingsWithDynamoRouter: a simulated Dynamo router's
// ActiveSequenceEvents change this node's loads; this node's own
// bookings reach the router and are skipped when they come back.
func TestBookingsWithDynamoRouter(t *testing.T) {
	srv, router := bus(t)
	n := newNode(t, srv.ClientURL(), 0)
	subject := testScope.Subject(TopicActiveSequences)
	var seen atomic.Int64
	var lastOrigin atomic.Uint64
	sub, err := router.Subscribe(subject, func(m *nats.Msg) {
		env, err := DecodeEnvelope(m.Data)
		if err != nil {
			t.Error(err)
			return
		}
		var ev core.ReplicaEvent
		if err := mesh.DecodeSequenceEvent(env.Payload, &ev); err != nil {
			t.Error(err)
			return
		}
		if uint64(ev.Origin) != 4242 {
			lastOrigin.Store(uint64(ev.Origin))
			seen.Add(1)
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	if err := router.Flush(); err != nil {
		t.Fatal(err)
	}
	var rseq uint64
	send := func(ev core.ReplicaEvent) {
		body := AppendEnvelope(nil, 777, rseq, 1, TopicActiveSequences, mesh.AppendSequenceEvent(nil, &ev, 4242))
		rseq++
		if err := router.Publish(subject, body); err != nil {
			t.Fatal(err)
		}
	}
	reqs := func(id uint64) int64 {
		for _, pl := range n.svc.Loads("", "") {
			for _, l := range pl.Loads {
				if l.WorkerID == id {
					return l.ActiveRequests
				}
			}
		}
		return -1
	}
	send(core.ReplicaEvent{Kind: core.ReplicaAdd, RequestID: "dyn-1", Worker: radix.WorkerKey{WorkerID: 2}, SequenceHashes: []uint64{1, 2, 3}, TrackPrefillTokens: true, EffectivePrefillTokens: 12})
	eventually(t, "the router's admission", func() bool { return reqs(2) == 1 })
	send(core.ReplicaEvent{Kind: core.ReplicaFree, RequestID: "dyn-1", Worker: radix.WorkerKey{WorkerID: 2}})
	eventually(t, "the router's free", func() bool { return reqs(2) == 0 })

	// Our own booking: published to the router, skipped on its way back.
	toks, _ := prompt(0, 2)
	var sel core.Selection
	if err := n.svc.SelectAndReserve(&core.SelectRequest{SelectionID: "ks-1", HasSelectionID: true, Prompt: core.Prompt{TokenIDs: toks, HasTokenIDs: true}}, &sel); err != nil {
		t.Fatal(err)
	}
	eventually(t, "our admission at the router", func() bool { return seen.Load() == 1 })
	if lastOrigin.Load() != n.bk.RouterID() {
		t.Errorf("router_id %d, want ours %d", lastOrigin.Load(), n.bk.RouterID())
	}
	// Our own event never comes back (the Link's NoEcho), and would be
	// skipped by router_id if it did.
	if r := reqs(sel.WorkerID); r != 1 {
		t.Errorf("worker %d has %d requests, want 1 (ours, not doubled)", sel.WorkerID, r)
	}
	st := n.bk.Stats()
	if st.Applied != 2 || st.Published != 1 || st.OutboundDropped != 0 {
		t.Errorf("booking stats %+v", st)
	}
}

// TestBookingQueueBound: the outbound queue holds QueueLimit events; past
// it Publish drops (counted) instead of waiting.
func TestBookingQueueBound(t *testing.T) {
	bk, err := NewBookings(BookingsConfig{Scope: testScope, QueueLimit: 3})
	if err != nil {
		t.Fatal(err)
	}
	defer bk.Close()
	ev := core.ReplicaEvent{Kind: core.ReplicaFree, RequestID: "r", Worker: radix.WorkerKey{WorkerID: 1}}
	for range 5 {
		bk.Publish(&ev)
	}
	if st := bk.Stats(); st.QueueDepth != 3 || st.QueueLimit != 3 || st.OutboundDropped != 2 {
		t.Errorf("stats %+v", st)
	}
}

// TestClusteredServers: two embedded servers joined by a NATS route carry
// one bus: a worker publishing on one reaches a node on the other.
func TestClusteredServers(t *testing.T) {
	a, err := StartServer(ServerConfig{ClusterPort: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	b, err := StartServer(ServerConfig{ClusterPort: -1, Routes: []string{a.ClusterURL()}})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	eventually(t, "the route", func() bool { return a.NumRoutes() > 0 && b.NumRoutes() > 0 })
	n := newNode(t, b.ClientURL(), 0)
	w := newWorker(dial(t, a.ClientURL()), 1, 0xabc)
	toks, local := prompt(0, 3)
	// Interest crosses the route asynchronously: resend a clear until the
	// node sees one, then the store.
	eventually(t, "interest across the route", func() bool {
		w.send(t, radix.Event{Kind: radix.Cleared})
		time.Sleep(5 * time.Millisecond)
		return n.in.Stats().Messages > 0
	})
	w.send(t, store(0, local, 0))
	eventually(t, "the store across the route", func() bool { return n.overlap(t, 1, toks) == 3 })
}

// TestDebianNatsServer runs the KV path against Debian's nats-server
// package (make test installs it), a server kvselect did not build.
func TestDebianNatsServer(t *testing.T) {
	bin, err := exec.LookPath("nats-server")
	if err != nil {
		t.Skip("no nats-server binary (apt-get update && apt-get install -y nats-server; make test installs it)")
	}
	port := freePort(t)
	cmd := exec.Command(bin, "-a", "127.0.0.1", "-p", strconv.Itoa(port))
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }) // after the node's cleanup
	url := fmt.Sprintf("nats://127.0.0.1:%d", port)
	var pubc *nats.Conn
	eventually(t, "nats-server up", func() bool {
		c, err := nats.Connect(url)
		if err == nil {
			pubc = c
		}
		return err == nil
	})
	defer pubc.Close()
	n := newNode(t, url, 0)
	w := newWorker(pubc, 1, 0xabc)
	toks, local := prompt(0, 2)
	w.send(t, store(0, local, 0))
	eventually(t, "the store via Debian's nats-server", func() bool { return n.overlap(t, 1, toks) == 2 })
}

func freePort(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}
