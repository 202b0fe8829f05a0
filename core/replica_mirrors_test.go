package core

import (
	"testing"
	"time"

	"github.com/kvselect/kvselect/radix"
)

// TestReleaseMirrors: reconciling with a peer's snapshot releases that
// peer's mirrors admitted before the cut that the snapshot lacks, and
// nothing else: not the ones it holds, not later ones, not another
// peer's, not local bookings.
func TestReleaseMirrors(t *testing.T) {
	now := time.Unix(1000, 0)
	s := oneWorkerService(t, DefaultConfig(), Options{Clock: func() time.Time { return now }})
	add := func(id string, origin Origin) {
		s.ApplyReplica([]ReplicaEvent{{Kind: ReplicaAdd, ModelName: DefaultPartition, RoutingGroup: DefaultPartition, BlockSize: 16,
			RequestID: id, Worker: radix.WorkerKey{WorkerID: 1}, Origin: origin, SequenceHashes: []uint64{uint64(len(id))}}})
	}
	add("kept", 7)
	add("missed-free", 7)
	add("other-peer", 8)
	req := hashReq(1)
	req.SelectionID, req.HasSelectionID = "local", true
	var out Selection
	if err := s.SelectAndReserve(&req, &out); err != nil {
		t.Fatal(err)
	}
	cut := now.Add(time.Second)
	now = cut.Add(time.Second)
	add("after-cut", 7)
	if n := s.ReleaseMirrors(7, cut, func(id string) bool { return id == "kept" }); n != 1 {
		t.Fatalf("released %d, want 1", n)
	}
	for _, id := range []string{"kept", "other-peer", "local", "after-cut"} {
		if _, ok := s.Reservation(id); !ok {
			t.Errorf("%s released", id)
		}
	}
	if _, ok := s.Reservation("missed-free"); ok {
		t.Error("missed-free kept")
	}
}
