package mesh

import (
	"fmt"
	"testing"

	"github.com/kvselect/kvselect/core"
)

// TestSnapshotShortOnIncompletePartition: when the peer's snapshot
// arrives, the joiner's partition exists but has no schedulable worker yet
// (its workers were registered incomplete, block size 0): the events are
// dropped as for an unknown worker, the snapshot counts as short, and once
// the workers become schedulable the joiner asks again and catches up (it
// used to drop them as a block-size mismatch and never ask again).
func TestSnapshotShortOnIncompletePartition(t *testing.T) {
	a := newReplica(t, Config{})
	a.book(t, "early", 2)
	a.flushed(t) // the joiner's one drop is the snapshot's, not the live event's
	ap, ab, an := a.loads()
	joiner := newBareReplica(t, Config{})
	for _, id := range []uint64{1, 2} {
		ep, dp := fmt.Sprintf("http://w%d", id), uint32(2)
		rec, err := joiner.svc.UpsertWorker(&core.WorkerSpec{WorkerID: id, WorkerFields: core.WorkerFields{Endpoint: &ep, DataParallelSize: &dp}})
		if err != nil || rec.Lifecycle != core.Incomplete {
			t.Fatalf("%v %v", rec.Lifecycle, err)
		}
	}
	if err := joiner.mesh.Start(joiner.svc); err != nil {
		t.Fatal(err)
	}
	if _, err := joiner.mesh.Register(a.mesh.Endpoint()); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the snapshot dropped", func() bool {
		st := joiner.svc.Stats()
		return st.ReplicaDropped[core.DropBlockSize]+st.ReplicaDropped[core.DropUnknownPartition]+st.ReplicaDropped[core.DropUnknownWorker] == 1
	})
	joiner.registerWorkers(t)
	wantLoads(t, joiner, "the joiner caught up after its workers became schedulable", ap, ab, an)
}
