package natsplane

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/kvselect/kvselect/core"
	"github.com/kvselect/kvselect/radix"
	"github.com/kvselect/kvselect/zmqin/mesh"
	"github.com/nats-io/nats.go"
)

// dynamoTap records the Dynamo-form bookings on active_sequences_events,
// as a Dynamo router receives them.
type dynamoTap struct {
	mu   sync.Mutex
	evs  []core.ReplicaEvent
	pubs []uint64
}

func tapDynamo(t *testing.T, nc *nats.Conn) *dynamoTap {
	t.Helper()
	d := &dynamoTap{}
	sub, err := nc.Subscribe(testScope.Subject(TopicActiveSequences), func(m *nats.Msg) {
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
		d.mu.Lock()
		d.evs, d.pubs = append(d.evs, ev), append(d.pubs, env.PublisherID)
		d.mu.Unlock()
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	return d
}

func (d *dynamoTap) len() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return len(d.evs)
}

// routerSend publishes ev as a Dynamo router does: publisher id pub,
// router_id router.
func routerSend(t *testing.T, nc *nats.Conn, pub, router uint64, ev core.ReplicaEvent) {
	t.Helper()
	if err := nc.Publish(testScope.Subject(TopicActiveSequences), AppendEnvelope(nil, pub, 0, 1, TopicActiveSequences, mesh.AppendSequenceEvent(nil, &ev, router))); err != nil {
		t.Fatal(err)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
}

// TestBookingBatches: between kvselect replicas bookings go in batches
// on kvselect-bookings, cut by count (PublishBatch) and by the wait after
// the first event; with no Dynamo router heard (auto) Dynamo's form is not
// published at all.
func TestBookingBatches(t *testing.T) {
	srv, tapConn := bus(t)
	tap := tapDynamo(t, tapConn)
	a := newNodeWith(t, srv.ClientURL(), BookingsConfig{PublishBatch: 4, PublishWait: 300 * time.Millisecond, NoSnapshot: true})
	b := newNodeWith(t, srv.ClientURL(), BookingsConfig{NoSnapshot: true})
	model, group, bs, ok := b.svc.WorkerPartition(1)
	if !ok {
		t.Fatal("worker 1 not schedulable")
	}
	// Ten admissions queued at once: the first wakes the publisher, which
	// waits 300 ms, then sends what is queued in batches of four.
	for i := range 10 {
		a.bk.Publish(&core.ReplicaEvent{Kind: core.ReplicaAdd, ModelName: model, RoutingGroup: group, BlockSize: bs,
			RequestID: fmt.Sprintf("r%d", i), Worker: radix.WorkerKey{WorkerID: 1}, SequenceHashes: []uint64{uint64(100 + i)}})
	}
	eventually(t, "the ten bookings on B", func() bool { return b.requests() == 10 })
	if st := a.bk.Stats(); st.Batches != 3 || st.BatchEvents != 10 || st.Published != 0 || st.DynamoForm || st.QueueBytes != 0 {
		t.Errorf("A's stats %+v, want 3 batches (4, 4, 2) of 10 events and no Dynamo form", st)
	}
	if st := b.bk.Stats(); st.BatchesReceived != 3 || st.Applied != 10 || st.Received != 0 {
		t.Errorf("B's stats %+v", st)
	}
	time.Sleep(20 * time.Millisecond)
	if n := tap.len(); n != 0 {
		t.Errorf("%d Dynamo-form messages with no Dynamo router", n)
	}
	for i := range 10 {
		a.bk.Publish(&core.ReplicaEvent{Kind: core.ReplicaFree, ModelName: model, RoutingGroup: group, BlockSize: bs, RequestID: fmt.Sprintf("r%d", i), Worker: radix.WorkerKey{WorkerID: 1}})
	}
	eventually(t, "the frees on B", func() bool { return b.requests() == 0 })
}

// TestDynamoFormAuto: once a Dynamo router's booking is heard, a replica
// publishes Dynamo's form as well, which the router applies; the peer
// replica, subscribed to both subjects, applies every booking once (from
// the batch) and skips the Dynamo form by its publisher_id. A Dynamo
// router whose publisher_id is its router_id (Dynamo before #11014) is
// still applied.
func TestDynamoFormAuto(t *testing.T) {
	srv, router := bus(t)
	tap := tapDynamo(t, router)
	a := newNodeWith(t, srv.ClientURL(), BookingsConfig{NoSnapshot: true})
	b := newNodeWith(t, srv.ClientURL(), BookingsConfig{NoSnapshot: true})
	a.book(t, "before")
	eventually(t, "A's first booking on B", func() bool { return b.holds("before") })
	if a.bk.Stats().Published != 0 || tap.len() != 0 {
		t.Fatal("Dynamo form published before any Dynamo router")
	}

	// An old Dynamo router (publisher_id = router_id) books: both
	// replicas apply it, and A starts publishing Dynamo's form.
	routerSend(t, router, 4242, 4242, core.ReplicaEvent{Kind: core.ReplicaAdd, RequestID: "dyn-1", Worker: radix.WorkerKey{WorkerID: 2}, SequenceHashes: []uint64{7}})
	eventually(t, "the router's booking on both", func() bool { return a.holds("dyn-1") && b.holds("dyn-1") })
	eventually(t, "A in Dynamo form", func() bool { return a.bk.Stats().DynamoForm })

	a.book(t, "k1")
	a.book(t, "k2")
	a.free(t, "k1")
	eventually(t, "A's three events at the router", func() bool { return tap.len() == 3+1 }) // and its own dyn-1
	eventually(t, "k2 on B, k1 freed", func() bool { return b.holds("k2") && !b.holds("k1") })
	tap.mu.Lock()
	for i, ev := range tap.evs[1:] {
		if uint64(ev.Origin) != a.bk.RouterID() || tap.pubs[i+1] != kvselectPublisher(a.bk.RouterID()) || tap.pubs[i+1] == a.bk.RouterID() {
			t.Errorf("Dynamo-form event %d: router_id %d publisher %d (A is %d)", i, ev.Origin, tap.pubs[i+1], a.bk.RouterID())
		}
	}
	tap.mu.Unlock()
	eventually(t, "B skipped A's Dynamo form", func() bool { return b.bk.Stats().SkippedPeerForm == 3 })
	st := b.bk.Stats()
	// B applied: the router's admission (Dynamo form) and A's four events
	// (batches), each once.
	if st.Applied != 1+4 || st.Received != 1+3 {
		t.Errorf("B's stats %+v", st)
	}
	if r := b.requests(); r != 3 { // before, dyn-1, k2
		t.Errorf("B counts %d requests, want 3", r)
	}
}

// TestDynamoFormModes: never publishes batches only, even with a Dynamo
// router heard; always publishes Dynamo's form with none.
func TestDynamoFormModes(t *testing.T) {
	srv, router := bus(t)
	tap := tapDynamo(t, router)
	never := newNodeWith(t, srv.ClientURL(), BookingsConfig{NoSnapshot: true, DynamoForm: DynamoNever})
	routerSend(t, router, 5, 4242, core.ReplicaEvent{Kind: core.ReplicaAdd, RequestID: "dyn-1", Worker: radix.WorkerKey{WorkerID: 2}, SequenceHashes: []uint64{7}})
	eventually(t, "the router's booking", func() bool { return never.holds("dyn-1") })
	never.book(t, "n1")
	eventually(t, "never's batch", func() bool { return never.bk.Stats().BatchEvents == 1 })
	time.Sleep(20 * time.Millisecond)
	if n := tap.len(); n != 1 || never.bk.Stats().Published != 0 {
		t.Errorf("never: %d Dynamo-form messages, want the router's own", n)
	}

	always := newNodeWith(t, srv.ClientURL(), BookingsConfig{NoSnapshot: true, DynamoForm: DynamoAlways})
	always.book(t, "w1")
	eventually(t, "always's Dynamo form", func() bool { return tap.len() == 2 })
	if _, err := ParseDynamoForm("sometimes"); err == nil {
		t.Error("ParseDynamoForm took sometimes")
	}
	if f, err := ParseDynamoForm("always"); err != nil || f != DynamoAlways {
		t.Errorf("ParseDynamoForm(always) %v %v", f, err)
	}
}

// TestBookingQueueBytes: the outbound queue also holds at most QueueBytes
// of encoded events; past it Publish drops (counted), and the gauge says
// what is held.
func TestBookingQueueBytes(t *testing.T) {
	bk, err := NewBookings(BookingsConfig{Scope: testScope, QueueBytes: 4096})
	if err != nil {
		t.Fatal(err)
	}
	defer bk.Close()
	ev := core.ReplicaEvent{Kind: core.ReplicaAdd, RequestID: "r", Worker: radix.WorkerKey{WorkerID: 1}, SequenceHashes: make([]uint64, 100)}
	for range 5 {
		bk.Publish(&ev) // about 1.3 KB each
	}
	st := bk.Stats()
	if st.QueueDepth != 3 || st.OutboundDropped != 2 || st.QueueBytes > 4096 || st.QueueBytes < 3*900 || st.QueueBytesLimit != 4096 {
		t.Errorf("stats %+v", st)
	}
}

// TestMalformedBatch: a batch that is not [flags, [bin, ...]], or an
// event in it not of its publisher, is a counted drop; good batches still
// apply.
func TestMalformedBatch(t *testing.T) {
	srv, nc := bus(t)
	n := newNodeWith(t, srv.ClientURL(), BookingsConfig{NoSnapshot: true})
	model, group, bs, _ := n.svc.WorkerPartition(1)
	good := core.ReplicaEvent{Kind: core.ReplicaAdd, ModelName: model, RoutingGroup: group, BlockSize: bs, RequestID: "g", Worker: radix.WorkerKey{WorkerID: 1}, SequenceHashes: []uint64{1}}
	subject := testScope.Subject(TopicBookingBatch)
	for _, body := range [][]byte{
		AppendEnvelope(nil, 77, 0, 1, TopicBookingBatch, []byte{0x92, 0x00, 0x91, 0x01}),                  // not a bin
		AppendEnvelope(nil, 77, 1, 1, TopicBookingBatch, []byte{0x92, 0x08, 0x90}),                        // an unknown flag
		AppendEnvelope(nil, 77, 2, 1, TopicBookingBatch, []byte{0x91, 0x90}),                              // no flags
		AppendEnvelope(nil, 77, 3, 1, TopicBookingBatch, batchOf(0, []byte{1, 2, 3})),                     // a bin, not an envelope
		AppendEnvelope(nil, 77, 4, 1, TopicBookingBatch, batchOf(0, mesh.AppendEnvelope(nil, &good, 78))), // another router's event
		AppendEnvelope(nil, 77, 5, 1, TopicBookingBatch, batchOf(0, mesh.AppendEnvelope(nil, &good, 77))), // good
	} {
		if err := nc.Publish(subject, body); err != nil {
			t.Fatal(err)
		}
	}
	eventually(t, "the good batch", func() bool { return n.holds("g") })
	st := n.bk.Stats()
	if st.Dropped[BookingMalformedBatch] != 3 || st.Dropped[BookingMalformedEvent] != 2 || st.Applied != 1 {
		t.Errorf("stats %+v", st)
	}
}

// batchOf is a batch payload, [flags, [bin, ...]], of the given mesh
// envelopes (small flags and fewer than 16 bins).
func batchOf(flags byte, bins ...[]byte) []byte {
	out := []byte{0x92, flags, 0x90 | byte(len(bins))}
	for _, b := range bins {
		out = append(out, 0xc5, byte(len(b)>>8), byte(len(b)))
		out = append(out, b...)
	}
	return out
}
