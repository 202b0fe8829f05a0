package core

import (
	"slices"
	"testing"
)

// TestEngineAvailable: a worker whose engine stops answering
// (SetEngineAvailable false) is out of selection and readiness but keeps
// its booking, which /loads still shows and which frees as usual; once it
// answers again it is selectable. An upsert of its record keeps the
// state; an unknown worker is ignored.
func TestEngineAvailable(t *testing.T) {
	s := loraEnv(t, Options{})
	defer s.Close()
	req := hashReq(4)
	req.SelectionID, req.HasSelectionID = "b1", true
	req.PinnedWorker = &WorkerKey{WorkerID: 1}
	var out Selection
	if err := s.SelectAndReserve(&req, &out); err != nil || out.WorkerID != 1 {
		t.Fatalf("booking on worker 1: %+v %v", out, err)
	}
	if !s.SetEngineAvailable(1, false) || s.SetEngineAvailable(99, false) {
		t.Fatal("known/unknown worker misreported")
	}
	if got := picks(t, s, hashReq(4)); slices.Contains(got, 1) || len(got) != 2 {
		t.Fatalf("with worker 1's engine down, picks %v", got)
	}
	if r := s.Ready(); !r.Ready || r.SchedulableWorkers != 2 {
		t.Fatalf("readiness %+v, want 2 schedulable", r.SchedulableWorkers)
	}
	ls := s.Loads("", "")[0].Loads
	if len(ls) != 3 || ls[0].WorkerID != 1 || !ls[0].EngineDown || ls[0].ActiveRequests != 1 || ls[1].EngineDown {
		t.Fatalf("loads %+v, want worker 1 first, down, with its booking", ls)
	}
	// An upsert keeps the state.
	ep, bs := "http://w", uint32(16)
	if _, err := s.UpsertWorker(&WorkerSpec{WorkerID: 1, WorkerFields: WorkerFields{Endpoint: &ep, BlockSize: &bs}}); err != nil {
		t.Fatal(err)
	}
	if got := picks(t, s, hashReq(4)); slices.Contains(got, 1) {
		t.Fatalf("after an upsert, picks %v", got)
	}
	if err := s.Free("b1"); err != nil {
		t.Fatalf("freeing the down worker's booking: %v", err)
	}
	if ls := s.Loads("", "")[0].Loads; ls[0].ActiveRequests != 0 {
		t.Fatalf("after the free: %+v", ls[0])
	}
	s.SetEngineAvailable(1, true)
	// Its approximate index holds the booked prompt: picked again.
	if got := picks(t, s, hashReq(4)); !slices.Contains(got, 1) {
		t.Fatalf("worker 1 answers again, picks %v", got)
	}
	if r := s.Ready(); r.SchedulableWorkers != 3 {
		t.Fatalf("schedulable %d, want 3", r.SchedulableWorkers)
	}
}
