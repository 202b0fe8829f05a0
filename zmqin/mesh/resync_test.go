package mesh

import (
	"testing"
	"time"

	"github.com/kvselect/kvselect/core"
)

// TestResyncWithoutCatalogChange: a joiner whose catalog never changes,
// peered with a replica holding bookings in a partition the joiner does
// not serve, does not ask the peer for its snapshot again: a resync waits
// for the catalog to move past the version the snapshot fell short
// against (it asked again every settle period, forever).
func TestResyncWithoutCatalogChange(t *testing.T) {
	a := newReplica(t, Config{})
	a.book(t, "early", 2)
	joiner := newBareReplica(t, Config{ResyncSettle: 10 * time.Millisecond}) // serves nothing of A's partition, never changes
	if err := joiner.mesh.Start(joiner.svc); err != nil {
		t.Fatal(err)
	}
	if _, err := joiner.mesh.Register(a.mesh.Endpoint()); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the snapshot dropped for an unknown partition", func() bool {
		return joiner.svc.Stats().ReplicaDropped[core.DropUnknownPartition] >= 1
	})
	// Many settle periods pass with no catalog change.
	from := joiner.mesh.st.resyncChecks.Load()
	waitFor(t, "forty drainer checks", func() bool { return joiner.mesh.st.resyncChecks.Load() >= from+40 })
	st := joiner.mesh.Stats()
	if st.SnapshotRequests != 0 {
		t.Fatalf("the catalog never changed, yet the joiner asked for the snapshot %d more times (A sent %d snapshot events; joiner dropped %d)",
			st.SnapshotRequests, a.mesh.Stats().SnapshotEvents, joiner.svc.Stats().ReplicaDropped[core.DropUnknownPartition])
	}
}
