package core

import "testing"

// TestReservationLookup: Reservation reports a live local booking with its
// worker, a peer's admission as a mirror with the peer's origin, and
// nothing once either is freed or for an unknown id.
func TestReservationLookup(t *testing.T) {
	s := servingEnv(t, 2, 1)
	req := hashReq(4)
	req.SelectionID, req.HasSelectionID = "local-1", true
	var out Selection
	if err := s.SelectAndReserve(&req, &out); err != nil {
		t.Fatal(err)
	}
	got, ok := s.Reservation("local-1")
	want := LiveReservation{ModelName: DefaultPartition, RoutingGroup: DefaultPartition, Worker: WorkerKey{WorkerID: out.WorkerID, DPRank: out.DPRank}, Origin: OriginLocal}
	if !ok || got != want {
		t.Fatalf("local booking: %+v %v, want %+v", got, ok, want)
	}
	s.ApplyReplica([]ReplicaEvent{{Kind: ReplicaAdd, ModelName: DefaultPartition, RoutingGroup: DefaultPartition, BlockSize: 16,
		RequestID: "peer-1", Worker: WorkerKey{WorkerID: 1}, SequenceHashes: []uint64{1, 2}, Origin: 42}})
	got, ok = s.Reservation("peer-1")
	if want := (LiveReservation{ModelName: DefaultPartition, RoutingGroup: DefaultPartition, Worker: WorkerKey{WorkerID: 1}, Origin: 42}); !ok || got != want {
		t.Fatalf("mirror: %+v %v, want %+v", got, ok, want)
	}
	if err := s.Free("local-1"); err != nil {
		t.Fatal(err)
	}
	s.ApplyReplica([]ReplicaEvent{{Kind: ReplicaFree, ModelName: DefaultPartition, RoutingGroup: DefaultPartition, BlockSize: 16, RequestID: "peer-1", Origin: 42}})
	for _, id := range []string{"local-1", "peer-1", "never"} {
		if r, ok := s.Reservation(id); ok {
			t.Fatalf("%s: still reported live: %+v", id, r)
		}
	}
}
