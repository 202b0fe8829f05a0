package mesh

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/kvselect/kvselect/core"
	"github.com/zeebo/xxh3"
)

// replica is one selector of a mesh test: a service with workers 1 and 2
// (2 ranks each) and its mesh on a loopback port.
type replica struct {
	svc  *core.Service
	mesh *Mesh
}

func newReplica(t *testing.T, cfg Config) *replica {
	t.Helper()
	r := newBareReplica(t, cfg)
	r.registerWorkers(t)
	if err := r.mesh.Start(r.svc); err != nil {
		t.Fatal(err)
	}
	return r
}

// newBareReplica is a replica with no worker registered and its mesh not
// started.
func newBareReplica(t *testing.T, cfg Config) *replica {
	t.Helper()
	if cfg.Bind == "" {
		cfg.Bind = "tcp://127.0.0.1:0"
	}
	m, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ccfg := core.DefaultConfig()
	ccfg.UseKVEvents = false
	svc, err := core.New(ccfg, core.Options{Replica: m})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = m.Close() })
	return &replica{svc: svc, mesh: m}
}

func (r *replica) registerWorkers(t *testing.T) {
	t.Helper()
	for _, id := range []uint64{1, 2} {
		ep, bs, dp := fmt.Sprintf("http://w%d", id), uint32(4), uint32(2)
		if _, err := r.svc.UpsertWorker(&core.WorkerSpec{WorkerID: id, WorkerFields: core.WorkerFields{Endpoint: &ep, BlockSize: &bs, DataParallelSize: &dp}}); err != nil {
			t.Fatal(err)
		}
	}
}

// loads sums a replica's loads over every rank.
func (r *replica) loads() (prefill, blocks, reqs int64) {
	for _, pl := range r.svc.Loads("", "") {
		for _, l := range pl.Loads {
			prefill += l.PotentialPrefillTokens
			blocks += l.PotentialDecodeBlocks
			reqs += l.ActiveRequests
		}
	}
	return
}

func (r *replica) book(t *testing.T, id string, n int) {
	t.Helper()
	req := core.SelectRequest{SelectionID: id, HasSelectionID: true}
	// Block hashes of the id's own: without KV events a booking predicts
	// its prompt on its worker (approximate index), and a repeated prompt
	// would be booked with less prefill.
	for i := range n {
		req.BlockHashes = append(req.BlockHashes, xxh3.HashString(id)+uint64(i))
		req.SequenceHashes = append(req.SequenceHashes, uint64(7000*len(id)+i+1))
	}
	req.HasBlockHashes, req.HasSequenceHashes = true, true
	req.ISLTokens, req.HasISLTokens = uint64(4*n), true
	var out core.Selection
	if err := r.svc.SelectAndReserve(&req, &out); err != nil {
		t.Fatal(err)
	}
}

// flushed waits until every event r's mesh has published has left its
// publisher for the PUB socket, so that a replica that connects afterwards
// receives none of them live.
func (r *replica) flushed(t *testing.T) {
	t.Helper()
	waitFor(t, "the publisher flushed", func() bool { return r.mesh.st.sent.Load() == r.mesh.st.published.Load() })
}

func wantLoads(t *testing.T, r *replica, what string, prefill, blocks, reqs int64) {
	t.Helper()
	waitFor(t, what, func() bool {
		p, b, n := r.loads()
		return p == prefill && b == blocks && n == reqs
	})
}

// TestMeshPropagatesLifecycle: a booking on A shows on B (prefill, blocks,
// one request); prefill_complete clears B's prefill; output blocks stay
// local; a free on A frees B's mirror; a mirror completed and freed on B
// propagates back to A; a duplicate id booked later on B is a conflict;
// own events are dropped by process id.
func TestMeshPropagatesLifecycle(t *testing.T) {
	checkNoLeak(t)
	a := newReplica(t, Config{})
	b := newReplica(t, Config{})
	if _, err := a.mesh.Register(b.mesh.Endpoint()); err != nil {
		t.Fatal(err)
	}
	if _, err := b.mesh.Register(a.mesh.Endpoint()); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "both subscribed", func() bool {
		return a.mesh.Stats().Subscribers == 1 && b.mesh.Stats().Subscribers == 1
	})

	a.book(t, "r1", 3)
	wantLoads(t, b, "the booking on B", 12, 3, 1)
	if err := a.svc.OutputBlock("r1", nil); err != nil {
		t.Fatal(err)
	}
	if err := a.svc.PrefillComplete("r1"); err != nil {
		t.Fatal(err)
	}
	wantLoads(t, b, "the completion on B (and no output block)", 0, 3, 1)
	if _, ab, _ := a.loads(); ab != 4 {
		t.Fatalf("A's blocks %d, want 4 (3 prompt + 1 output)", ab)
	}
	var out core.Selection
	dup := core.SelectRequest{SelectionID: "r1", HasSelectionID: true, Prompt: core.Prompt{BlockHashes: []uint64{1}, HasBlockHashes: true, SequenceHashes: []uint64{1}, HasSequenceHashes: true, ISLTokens: 4, HasISLTokens: true}}
	if err := b.svc.SelectAndReserve(&dup, &out); !errors.Is(err, core.ErrConflict) {
		t.Fatalf("duplicate of a mirrored id on B: %v", err)
	}
	if err := a.svc.Free("r1"); err != nil {
		t.Fatal(err)
	}
	wantLoads(t, b, "the free on B", 0, 0, 0)

	// A mirror completed and freed on B.
	a.book(t, "r2", 2)
	wantLoads(t, b, "r2 on B", 8, 2, 1)
	if err := b.svc.PrefillComplete("r2"); err != nil {
		t.Fatal(err)
	}
	wantLoads(t, a, "B's completion on A", 0, 2, 1)
	if err := b.svc.Free("r2"); err != nil {
		t.Fatal(err)
	}
	wantLoads(t, a, "B's free on A", 0, 0, 0)
	// The load is released before the release is counted: wait for both.
	waitFor(t, "B's free counted on A", func() bool {
		st := a.svc.Stats()
		return st.ReplicaFreed == 1 && st.Reservations == 0
	})
	if st := a.mesh.Stats(); st.Dropped[DropOwn] != 0 || st.Published < 4 {
		t.Fatalf("A mesh %+v", st)
	}
}

// TestMeshDynamicPeers: registration validates endpoints with the
// reference's texts and is idempotent; deregistering stops delivery;
// unknown peers are not found; a peer that is down is redialed until it
// comes up.
func TestMeshDynamicPeers(t *testing.T) {
	checkNoLeak(t)
	a := newReplica(t, Config{})
	for ep, want := range map[string]string{
		"10.0.0.1:5":      "invalid ZMQ endpoint `10.0.0.1:5`: missing scheme",
		"tcp://":          "invalid ZMQ endpoint `tcp://`: missing address",
		"tcp://host":      "invalid ZMQ endpoint `tcp://host`: missing TCP port",
		"tcp://:5":        "invalid ZMQ endpoint `tcp://:5`: missing TCP host",
		"tcp://[::1:5":    "invalid ZMQ endpoint `tcp://[::1:5`: missing closing `]`",
		"tcp://h:x":       "invalid ZMQ endpoint `tcp://h:x`: invalid TCP port: invalid digit found in string",
		"tcp://h:70000":   "invalid ZMQ endpoint `tcp://h:70000`: invalid TCP port: number too large to fit in target type",
		"udp://h:5":       "invalid ZMQ endpoint `udp://h:5`: unsupported scheme `udp`",
		"inproc://mesh-a": "invalid ZMQ endpoint `inproc://mesh-a`: inproc endpoints",
	} {
		_, err := a.mesh.Register(ep)
		if !errors.Is(err, core.ErrBadRequest) || len(err.Error()) < len(want) || err.Error()[:len(want)] != want {
			t.Errorf("%s: %v, want %q", ep, err, want)
		}
	}
	if err := a.mesh.Deregister("tcp://10.9.9.9:1"); !errors.Is(err, core.ErrNotFound) || err.Error() != "peer not found" {
		t.Fatalf("unknown peer: %v", err)
	}

	// A peer that is not up yet: registered, redialed, delivers once up.
	b := newReplica(t, Config{})
	bEP := b.mesh.Endpoint()
	_ = b.mesh.Close()
	if added, err := a.mesh.Register(bEP); !added || err != nil {
		t.Fatalf("register: %v %v", added, err)
	}
	if added, _ := a.mesh.Register(bEP); added {
		t.Fatal("a second registration added the peer again")
	}
	waitFor(t, "dial errors while the peer is down", func() bool { return a.mesh.Stats().DialErrors > 0 })
	c := newReplica(t, Config{Bind: bEP})
	c.book(t, "x", 1)
	waitFor(t, "the restarted peer's booking", func() bool { _, _, n := a.loads(); return n == 1 })
	if got := a.mesh.List(); len(got) != 1 || got[0] != bEP {
		t.Fatalf("peers %v", got)
	}
	if err := a.mesh.Deregister(bEP); err != nil {
		t.Fatal(err)
	}
	// Deregister returns with the connection closed; once the peer has
	// seen it, nothing it publishes has a way to A.
	waitFor(t, "the peer to lose its subscriber", func() bool { return c.mesh.Stats().Subscribers == 0 })
	c.book(t, "y", 1)
	if st := a.mesh.Stats(); st.Peers != 0 || st.PeersLive != 0 {
		t.Fatalf("after deregistering: %+v", st)
	}
	if _, _, n := a.loads(); n != 1 {
		t.Fatalf("a deregistered peer still delivers: %d requests", n)
	}
}

// TestMeshSnapshotCatchUp: a replica that joins a mesh whose peer holds
// live bookings starts with the peer's load (kvselect's snapshot topic);
// with the snapshot turned off it starts at zero and sees only new events.
func TestMeshSnapshotCatchUp(t *testing.T) {
	checkNoLeak(t)
	a := newReplica(t, Config{})
	for i := range 20 {
		a.book(t, fmt.Sprintf("s%d", i), 1+i%3)
	}
	if err := a.svc.PrefillComplete("s0"); err != nil {
		t.Fatal(err)
	}
	ap, ab, an := a.loads()

	joiner := newReplica(t, Config{})
	if _, err := joiner.mesh.Register(a.mesh.Endpoint()); err != nil {
		t.Fatal(err)
	}
	wantLoads(t, joiner, "the joiner caught up", ap, ab, an)
	if st := a.mesh.Stats(); st.SnapshotEvents != 20 {
		t.Fatalf("snapshot events %d, want 20", st.SnapshotEvents)
	}

	cold := newReplica(t, Config{NoSnapshot: true})
	if _, err := cold.mesh.Register(a.mesh.Endpoint()); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the cold joiner subscribed", func() bool { return a.mesh.Stats().Subscribers == 2 })
	a.book(t, "late", 2)
	wantLoads(t, cold, "only the new booking on the cold joiner", 8, 2, 1)
}

// TestMeshSnapshotAfterLateRegistration: a replica that joins before its
// workers are registered cannot apply its peer's snapshot (replicas never
// create workers); once its catalog has changed and settled it asks the
// peer again and catches up.
func TestMeshSnapshotAfterLateRegistration(t *testing.T) {
	checkNoLeak(t)
	a := newReplica(t, Config{})
	a.book(t, "early", 2)
	a.flushed(t) // the joiner's one drop is the snapshot's, not the live event's
	ap, ab, an := a.loads()
	joiner := newBareReplica(t, Config{})
	if err := joiner.mesh.Start(joiner.svc); err != nil {
		t.Fatal(err)
	}
	if _, err := joiner.mesh.Register(a.mesh.Endpoint()); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the snapshot dropped for an unknown partition", func() bool {
		return joiner.svc.Stats().ReplicaDropped[core.DropUnknownPartition] == 1
	})
	joiner.registerWorkers(t)
	wantLoads(t, joiner, "the joiner caught up after registering its workers", ap, ab, an)
	if st := joiner.mesh.Stats(); st.SnapshotRequests != 1 {
		t.Fatalf("snapshot requests %d, want 1", st.SnapshotRequests)
	}
}

// TestMeshPublishBatchShapes: the publish batch's bounds, without timing:
// a negative PublishWait sends each event at once, and a batch that is
// full (here PublishBatch 1) goes without waiting even for an hour-long
// PublishWait. Either way a booking and its free reach the peer.
func TestMeshPublishBatchShapes(t *testing.T) {
	for _, cfg := range []Config{{PublishWait: -1}, {PublishWait: time.Hour, PublishBatch: 1}} {
		a := newReplica(t, cfg)
		b := newReplica(t, Config{})
		if _, err := b.mesh.Register(a.mesh.Endpoint()); err != nil {
			t.Fatal(err)
		}
		waitFor(t, "B subscribed to A", func() bool { return a.mesh.Stats().Subscribers == 1 })
		a.book(t, "r1", 2)
		wantLoads(t, b, fmt.Sprintf("%+v: the booking on B", cfg), 8, 2, 1)
		if err := a.svc.Free("r1"); err != nil {
			t.Fatal(err)
		}
		wantLoads(t, b, fmt.Sprintf("%+v: the free on B", cfg), 0, 0, 0)
	}
}
