package natsplane

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/kvselect/kvselect/core"
	"github.com/kvselect/kvselect/radix"
	"github.com/kvselect/kvselect/zmqin/mesh"
)

// book books id on n (a selection of a prompt of its own).
func (n *node) book(t *testing.T, id string) {
	t.Helper()
	toks, _ := prompt(int(len(id))*1000+int(id[len(id)-1])*10, 2)
	var sel core.Selection
	if err := n.svc.SelectAndReserve(&core.SelectRequest{SelectionID: id, HasSelectionID: true, Prompt: core.Prompt{TokenIDs: toks, HasTokenIDs: true}}, &sel); err != nil {
		t.Fatal(err)
	}
}

func (n *node) free(t *testing.T, id string) {
	t.Helper()
	if err := n.svc.Free(id); err != nil {
		t.Fatal(err)
	}
}

// within polls cond for at most d.
func within(d time.Duration, cond func() bool) bool {
	for deadline := time.Now().Add(d); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
		if cond() {
			return true
		}
	}
	return cond()
}

// holds reports whether every id is live on n.
func (n *node) holds(ids ...string) bool {
	for _, id := range ids {
		if _, ok := n.svc.Reservation(id); !ok {
			return false
		}
	}
	return true
}

// requests is the live requests n counts over every worker.
func (n *node) requests() int64 {
	var r int64
	for _, pl := range n.svc.Loads("", "") {
		for _, l := range pl.Loads {
			r += l.ActiveRequests
		}
	}
	return r
}

// TestSnapshotOnJoin: a node that joins the bus asks for its peers' live
// bookings and starts with their load; live events follow.
func TestSnapshotOnJoin(t *testing.T) {
	srv, _ := bus(t)
	a := newNode(t, srv.ClientURL(), 0)
	a.book(t, "k1")
	a.book(t, "k2")
	// A's live admissions leave for the bus before B joins, so that B
	// learns them from the snapshot; and the snapshot is in before A frees
	// k1 (a snapshot served after the free would hold one booking).
	eventually(t, "A's admissions published", func() bool { return a.bk.Stats().BatchEvents == 2 })
	b := newNode(t, srv.ClientURL(), 0)
	eventually(t, "A's bookings on B from A's snapshot", func() bool {
		return b.requests() == 2 && b.bk.ReplicaStats().SnapshotReplies == 1
	})
	a.free(t, "k1")
	eventually(t, "A's live free on B", func() bool { return b.requests() == 1 })
	if st := a.bk.ReplicaStats(); st.SnapshotsServed != 1 || st.SnapshotEventsServed != 2 {
		t.Errorf("A served %+v", st)
	}
	if st := b.bk.ReplicaStats(); st.SnapshotReplies != 1 || st.SnapshotEvents != 2 || st.SnapshotDropped != 0 {
		t.Errorf("B asked %+v", st)
	}
}

// TestPartitionHealReconciles: two nodes on two clustered servers; one is
// cut off (its server stops) while both book and free. On reconnect each
// asks the other for its snapshot: the bookings the other made meanwhile
// appear, the mirrors of what it freed meanwhile are released, and after
// every free both count nothing (no leak).
func TestPartitionHealReconciles(t *testing.T) {
	ports := freePorts(t, 4)
	pa, ca, pb, cb := ports[0], ports[1], ports[2], ports[3]
	sa := clusterMember(t, pa, ca, cb)
	clusterMember(t, pb, cb, ca)
	a := newNode(t, fmt.Sprintf("nats://127.0.0.1:%d", pa), 0)
	b := newNode(t, fmt.Sprintf("nats://127.0.0.1:%d", pb), 0)
	eventually(t, "the route", func() bool { return sa.NumRoutes() > 0 })
	// The route carries interest asynchronously: book until it does, both
	// ways.
	for _, pair := range [][2]*node{{b, a}, {a, b}} {
		from, to := pair[0], pair[1]
		for i := 0; ; i++ {
			id := fmt.Sprintf("warm%p-%d", from, i)
			from.book(t, id)
			seen := within(100*time.Millisecond, func() bool { return to.holds(id) })
			from.free(t, id)
			if seen {
				break
			}
		}
	}
	// Every warm-up booking is freed (its mirror too): both count none.
	// Equal counts are not enough: each may still hold the other's last
	// mirror, its free in flight.
	eventually(t, "the warm-up freed", func() bool { return a.requests() == 0 && b.requests() == 0 })
	b.book(t, "b1")
	b.book(t, "b2")
	a.book(t, "a1")
	eventually(t, "both see all", func() bool { return a.requests() == 3 && b.requests() == 3 })

	sa.Shutdown()
	sa.WaitForShutdown()
	eventually(t, "A cut off", func() bool { return !a.link.IsConnected() })
	b.free(t, "b1")
	b.book(t, "b3")
	a.free(t, "a1")
	a.book(t, "a2")
	a.book(t, "a3")

	clusterMember(t, pa, ca, cb)
	eventually(t, "A reconnected", func() bool { return a.link.Status().Reconnects == 1 })
	// Live: b2 b3 a2 a3; b1 and a1 freed. A missed b1's free and b3's
	// admission, and only B's snapshot tells it.
	eventually(t, "views converge", func() bool {
		return a.holds("b2", "b3", "a2", "a3") && b.holds("b2", "b3", "a2", "a3") && !a.holds("b1") && !b.holds("a1") &&
			a.requests() == 4 && b.requests() == 4
	})
	// The views may converge on live events before B's snapshot is
	// applied; A must still reconcile from it.
	eventually(t, "A reconciled from B's snapshot", func() bool {
		st := a.bk.ReplicaStats()
		return st.MirrorsReconciled > 0 && st.SnapshotReplies > 0
	})
	for _, id := range []string{"b2", "b3"} {
		b.free(t, id)
	}
	for _, id := range []string{"a2", "a3"} {
		a.free(t, id)
	}
	eventually(t, "no leak", func() bool { return a.requests() == 0 && b.requests() == 0 })
	t.Logf("A: %+v", a.bk.ReplicaStats())
	t.Logf("B: %+v", b.bk.ReplicaStats())
}

// affinityLog records applied bindings.
type affinityLog struct {
	mu  sync.Mutex
	evs []core.AffinityEvent
}

func (l *affinityLog) ApplyAffinity(evs []core.AffinityEvent) {
	l.mu.Lock()
	l.evs = append(l.evs, evs...)
	l.mu.Unlock()
}

func (l *affinityLog) len() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.evs)
}

// TestSessionBindings: a binding published by one process reaches the
// others' handler, in the mesh's encoding, and not its own; the outbound
// queue is bounded and counts its drops.
func TestSessionBindings(t *testing.T) {
	srv, _ := bus(t)
	var logs [2]affinityLog
	var bks [2]*Bookings
	for i := range bks {
		bk, err := NewBookings(BookingsConfig{Scope: testScope, NoSnapshot: true})
		if err != nil {
			t.Fatal(err)
		}
		bk.HandleAffinity(&logs[i])
		link, err := Dial(srv.ClientURL(), "t", nil)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(link.Close)
		t.Cleanup(func() { _ = bk.Close() })
		if err := bk.Start(link.Conn(), nil); err != nil {
			t.Fatal(err)
		}
		if err := link.Conn().Flush(); err != nil {
			t.Fatal(err)
		}
		bks[i] = bk
	}
	ev := core.AffinityEvent{ModelName: "m", RoutingGroup: "g", SessionID: "s-1", WorkerID: 2, Sequence: 7, WriterID: bks[0].RouterID()}
	bks[0].PublishAffinity(&ev)
	eventually(t, "the binding on the peer", func() bool { return logs[1].len() == 1 })
	if got := logs[1].evs[0]; got != ev {
		t.Errorf("applied %+v, want %+v", got, ev)
	}
	time.Sleep(20 * time.Millisecond) // our own would be back by now
	if logs[0].len() != 0 {
		t.Error("own binding applied")
	}

	small, err := NewBookings(BookingsConfig{Scope: testScope, AffinityQueueLimit: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer small.Close()
	for range 5 {
		small.PublishAffinity(&ev)
	}
	if st := small.ReplicaStats(); st.AffinityQueueDepth != 2 || st.AffinityQueueLimit != 2 || st.AffinityOutboundDropped != 3 {
		t.Errorf("bounded queue: %+v", st)
	}
}

// TestSnapshotChunks: a snapshot larger than a chunk arrives whole, in
// numbered chunks, and a malformed reply is a counted drop.
func TestSnapshotChunks(t *testing.T) {
	srv, _ := bus(t)
	a := newNode(t, srv.ClientURL(), 0)
	const n = 3000 // about 330 KiB of envelopes: two chunks
	for i := range n {
		a.book(t, fmt.Sprintf("c%05d", i))
	}
	b := newNode(t, srv.ClientURL(), 0)
	eventually(t, "the whole snapshot", func() bool { return b.requests() == n })
	if st := b.bk.ReplicaStats(); st.SnapshotReplies != 1 || st.SnapshotEvents != n {
		t.Errorf("B %+v", st)
	}
	if _, _, _, err := decodeSnapshotChunk([]byte{0x92, 0x05, 0x90}); err == nil {
		t.Error("a last flag of 5 decoded")
	}
}

// TestDeadPeerMirrorsReleased: a kvselect peer that stops beating (killed
// with live bookings: no free will come) has its mirrors released after
// PeerTimeout; a Dynamo router's bookings (no beats) are kept.
func TestDeadPeerMirrorsReleased(t *testing.T) {
	srv, router := bus(t)
	live := BookingsConfig{HeartbeatInterval: 20 * time.Millisecond, PeerTimeout: 200 * time.Millisecond}
	a := newNodeWith(t, srv.ClientURL(), live)
	b := newNodeWith(t, srv.ClientURL(), live)
	b.book(t, "b1")
	b.book(t, "b2")
	// A Dynamo router's booking, which never beats.
	ev := core.ReplicaEvent{Kind: core.ReplicaAdd, RequestID: "dyn-1", Worker: radix.WorkerKey{WorkerID: 2}, SequenceHashes: []uint64{9}}
	if err := router.Publish(testScope.Subject(TopicActiveSequences), AppendEnvelope(nil, 5, 0, 1, TopicActiveSequences, mesh.AppendSequenceEvent(nil, &ev, 4242))); err != nil {
		t.Fatal(err)
	}
	eventually(t, "B's and the router's bookings on A", func() bool { return a.holds("b1", "b2", "dyn-1") })
	time.Sleep(300 * time.Millisecond) // beats keep B alive past its timeout
	if !a.holds("b1", "b2") {
		t.Fatal("a beating peer's mirrors released")
	}
	// B dies: its beats stop, and its frees never come.
	_ = b.bk.Close()
	b.link.Close()
	eventually(t, "B's mirrors released on A", func() bool { return !a.holds("b1") && !a.holds("b2") })
	if !a.holds("dyn-1") {
		t.Error("the router's booking released")
	}
	// The counters follow the release.
	eventually(t, "the expiry counted", func() bool {
		st := a.bk.ReplicaStats()
		return st.PeersExpired == 1 && st.MirrorsExpired == 2
	})
}
