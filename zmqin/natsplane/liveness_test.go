package natsplane

import (
	"fmt"
	"io"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/kvselect/kvselect/core"
	"github.com/kvselect/kvselect/radix"
	"github.com/kvselect/kvselect/zmqin/mesh"
)

// routeProxy forwards one NATS route (a listener on port to the route
// port target) and can cut it: every connection closed and new ones
// refused, while both servers and their clients stay up.
type routeProxy struct {
	t      *testing.T
	port   int
	target string
	mu     sync.Mutex
	ln     net.Listener
	conns  []net.Conn
}

func newRouteProxy(t *testing.T, port, target int) *routeProxy {
	p := &routeProxy{t: t, port: port, target: fmt.Sprintf("127.0.0.1:%d", target)}
	p.heal()
	t.Cleanup(p.cut)
	return p
}

func (p *routeProxy) heal() {
	ln, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", p.port))
	if err != nil {
		p.t.Fatal(err)
	}
	p.mu.Lock()
	p.ln = ln
	p.mu.Unlock()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			u, err := net.Dial("tcp", p.target)
			if err != nil {
				c.Close()
				continue
			}
			p.mu.Lock()
			p.conns = append(p.conns, c, u)
			p.mu.Unlock()
			go func() { _, _ = io.Copy(u, c); u.Close() }()
			go func() { _, _ = io.Copy(c, u); c.Close() }()
		}
	}()
}

func (p *routeProxy) cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.ln != nil {
		p.ln.Close()
		p.ln = nil
	}
	for _, c := range p.conns {
		c.Close()
	}
	p.conns = nil
}

// TestPeerRestoredWhenHeardAgain: two nodes on two servers whose route is
// cut while both clients stay connected (no reconnect, so no Resync): A
// hears no beat of B for PeerTimeout and releases B's mirrors, as it
// must. Once the route is back and B's beats reach A again, A asks B for
// its snapshot and holds B's live bookings again: a peer taken for dead
// while it was alive (beats lost between servers, or this replica
// stalled) is not left under-counted until its bookings end.
func TestPeerRestoredWhenHeardAgain(t *testing.T) {
	ports := freePorts(t, 5)
	pa, ca, pb, cb, proxy := ports[0], ports[1], ports[2], ports[3], ports[4]
	clusterMember(t, pa, ca)
	clusterMember(t, pb, cb, proxy) // B's server routes to A's through the proxy only
	route := newRouteProxy(t, proxy, ca)
	live := BookingsConfig{HeartbeatInterval: 20 * time.Millisecond, PeerTimeout: 300 * time.Millisecond}
	a := newNodeWith(t, fmt.Sprintf("nats://127.0.0.1:%d", pa), live)
	b := newNodeWith(t, fmt.Sprintf("nats://127.0.0.1:%d", pb), live)
	// The route carries interest asynchronously: book on B until A holds
	// one.
	for i := 0; ; i++ {
		id := fmt.Sprintf("warm-%d", i)
		b.book(t, id)
		seen := within(100*time.Millisecond, func() bool { return a.holds(id) })
		b.free(t, id)
		if seen {
			break
		}
	}
	b.book(t, "b1")
	eventually(t, "b1 on A", func() bool { return a.holds("b1") })

	route.cut()
	eventually(t, "B's mirrors released on A", func() bool { return !a.holds("b1") })
	// The counters follow the release.
	eventually(t, "A's expiry counted", func() bool {
		st := a.bk.ReplicaStats()
		return st.PeersExpired == 1 && st.MirrorsExpired == 1
	})
	route.heal()
	eventually(t, "b1 back on A", func() bool { return a.holds("b1") })
	if a.link.Status().Reconnects != 0 || b.link.Status().Reconnects != 0 {
		t.Fatal("a link reconnected: the test is about beats lost while both links stay up")
	}
	if st := a.bk.ReplicaStats(); st.PeersRevived == 0 || st.SnapshotReplies == 0 {
		t.Errorf("A %+v", st)
	}
	b.free(t, "b1")
	eventually(t, "b1's free on A", func() bool { return !a.holds("b1") })
}

// TestStalledReplicaGraces: a beat tick long overdue means this replica
// was stalled (CPU starvation, a pause), and the peers' beats may be
// waiting unread: every peer's clock restarts instead of the silent ones
// being released; the next timely tick expires a peer silent since.
func TestStalledReplicaGraces(t *testing.T) {
	srv, _ := bus(t)
	n := newNodeWith(t, srv.ClientURL(), BookingsConfig{HeartbeatInterval: time.Hour, PeerTimeout: 2 * time.Hour, NoSnapshot: true})
	model, group, bs, _ := n.svc.WorkerPartition(1)
	n.svc.ApplyReplica([]core.ReplicaEvent{{Kind: core.ReplicaAdd, Origin: 42, ModelName: model, RoutingGroup: group, BlockSize: bs, RequestID: "p1", Worker: radix.WorkerKey{WorkerID: 1}, SequenceHashes: []uint64{1}}})
	now := time.Now()
	n.bk.live.Lock()
	n.bk.live.seen[42] = now.Add(-3 * time.Hour)
	n.bk.live.Unlock()
	// The last tick was 3 hours ago (3 intervals): stalled.
	n.bk.tick(now, now.Add(-3*time.Hour), false)
	if !n.holds("p1") {
		t.Fatal("a stalled replica released a peer's mirrors")
	}
	// A timely tick 2 hours later, the peer still silent: released.
	n.bk.tick(now.Add(2*time.Hour), now.Add(time.Hour), false)
	if n.holds("p1") {
		t.Fatal("a peer silent past its timeout kept")
	}
	if st := n.bk.ReplicaStats(); st.PeersExpired != 1 || st.MirrorsExpired != 1 || st.Stalls != 1 {
		t.Errorf("%+v", st)
	}
}

// TestBatchesKeepPeerAlive: a peer whose batches say it beats is known
// from its first booking, before any beat of it is heard (a replica that
// joined less than a beat interval before the peer died held its
// bookings and kept them), and alive while its batches come; one that
// does not beat (its liveness off) is never expired, batches or not.
func TestBatchesKeepPeerAlive(t *testing.T) {
	srv, nc := bus(t)
	n := newNodeWith(t, srv.ClientURL(), BookingsConfig{HeartbeatInterval: 20 * time.Millisecond, PeerTimeout: 200 * time.Millisecond, NoSnapshot: true})
	model, group, bs, _ := n.svc.WorkerPartition(1)
	send := func(router uint64, seq uint64, flags byte, ev core.ReplicaEvent) {
		t.Helper()
		ev.ModelName, ev.RoutingGroup, ev.BlockSize, ev.Worker = model, group, bs, radix.WorkerKey{WorkerID: 1}
		if err := nc.Publish(testScope.Subject(TopicBookingBatch), AppendEnvelope(nil, router, seq, 1, TopicBookingBatch, batchOf(flags, mesh.AppendEnvelope(nil, &ev, router)))); err != nil {
			t.Fatal(err)
		}
	}
	// Peer 77 beats (its batches say so), but only its bookings arrive,
	// no beat; peer 88 does not beat.
	send(77, 0, flagBeats, core.ReplicaEvent{Kind: core.ReplicaAdd, RequestID: "p77", SequenceHashes: []uint64{1}})
	send(88, 0, 0, core.ReplicaEvent{Kind: core.ReplicaAdd, RequestID: "p88", SequenceHashes: []uint64{2}})
	eventually(t, "both bookings", func() bool { return n.holds("p77", "p88") })
	for i := range 30 { // 600 ms of batches, three timeouts
		send(77, uint64(i+1), flagBeats, core.ReplicaEvent{Kind: core.ReplicaPrefillCompleted, RequestID: "p77"})
		time.Sleep(20 * time.Millisecond)
	}
	if !n.holds("p77", "p88") {
		t.Fatalf("a booking peer released: %+v", n.bk.ReplicaStats())
	}
	// 77 falls silent: released; 88, which does not beat, is kept.
	eventually(t, "77 released", func() bool { return !n.holds("p77") })
	if !n.holds("p88") {
		t.Error("a peer without liveness released")
	}
}
