package mesh

import (
	"testing"

	"github.com/kvselect/kvselect/core"
)

// TestMeshLiveAdmissionOfLateWorker: B has joined A's mesh (its snapshot
// applied: nothing to catch up), then A registers a worker before B does
// (A's discovery ran ahead) and books on it. B drops that live admission
// for an unknown worker; once B registers the worker and its catalog
// settles, B asks A for its snapshot again and shows A's booking, with no
// new event of A's. A worker B never registers asks nothing more.
func TestMeshLiveAdmissionOfLateWorker(t *testing.T) {
	checkNoLeak(t)
	a := newReplica(t, Config{})
	b := newReplica(t, Config{})
	if _, err := b.mesh.Register(a.mesh.Endpoint()); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "B subscribed to A", func() bool { return a.mesh.Stats().Subscribers == 1 })

	ep, bs, dp := "http://w3", uint32(4), uint32(2)
	spec := core.WorkerSpec{WorkerID: 3, WorkerFields: core.WorkerFields{Endpoint: &ep, BlockSize: &bs, DataParallelSize: &dp}}
	if _, err := a.svc.UpsertWorker(&spec); err != nil {
		t.Fatal(err)
	}
	req := core.SelectRequest{SelectionID: "on-3", HasSelectionID: true, AllowedWorkerIDs: []uint64{3}, HasAllowedWorkerIDs: true}
	req.BlockHashes, req.HasBlockHashes = []uint64{11, 12, 13}, true
	req.SequenceHashes, req.HasSequenceHashes = []uint64{21, 22, 23}, true
	req.ISLTokens, req.HasISLTokens = 12, true
	var out core.Selection
	if err := a.svc.SelectAndReserve(&req, &out); err != nil || out.WorkerID != 3 {
		t.Fatalf("booking on worker 3: %+v %v", out, err)
	}
	a.flushed(t)
	waitFor(t, "B dropped the live admission: no worker 3", func() bool {
		return b.svc.Stats().ReplicaDropped[core.DropUnknownWorker] == 1
	})
	if _, _, n := b.loads(); n != 0 {
		t.Fatalf("B shows %d requests before it has worker 3", n)
	}
	published := a.mesh.Stats().Published
	ap, ab, an := a.loads()

	if _, err := b.svc.UpsertWorker(&spec); err != nil {
		t.Fatal(err)
	}
	wantLoads(t, b, "B caught up once it registered worker 3", ap, ab, an)
	if st := b.mesh.Stats(); st.SnapshotRequests != 1 {
		t.Fatalf("B's snapshot requests %d, want 1", st.SnapshotRequests)
	}
	if got := a.mesh.Stats().Published; got != published {
		t.Fatalf("A published %d events meanwhile: B caught up from a live event", got-published)
	}
	// The free reaches B's mirror.
	if err := a.svc.Free("on-3"); err != nil {
		t.Fatal(err)
	}
	wantLoads(t, b, "the free on B", 0, 0, 0)

	// A worker B never registers: its drop marks A short, but with no
	// catalog change on B nothing is asked again.
	ep4 := "http://w4"
	spec4 := core.WorkerSpec{WorkerID: 4, WorkerFields: core.WorkerFields{Endpoint: &ep4, BlockSize: &bs, DataParallelSize: &dp}}
	if _, err := a.svc.UpsertWorker(&spec4); err != nil {
		t.Fatal(err)
	}
	req.SelectionID, req.AllowedWorkerIDs = "on-4", []uint64{4}
	if err := a.svc.SelectAndReserve(&req, &out); err != nil || out.WorkerID != 4 {
		t.Fatalf("booking on worker 4: %+v %v", out, err)
	}
	waitFor(t, "B dropped it", func() bool { return b.svc.Stats().ReplicaDropped[core.DropUnknownWorker] == 2 })
	from := b.mesh.st.resyncChecks.Load()
	waitFor(t, "twenty drainer checks", func() bool { return b.mesh.st.resyncChecks.Load() >= from+20 })
	if st := b.mesh.Stats(); st.SnapshotRequests != 1 {
		t.Fatalf("B asked again (%d requests) with no catalog change", st.SnapshotRequests)
	}
}
