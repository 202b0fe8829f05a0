package core

import "testing"

// TestTopRank: data_parallel_start_rank 4294967295 with size 1 ends the
// range at 2^32, where every uint32 loop over the ranks would wrap to
// nothing: such a worker must not be schedulable without being bookable.
func TestTopRank(t *testing.T) {
	cfg := DefaultConfig()
	cfg.UseKVEvents = false
	s, err := New(cfg, Options{})
	if err != nil {
		t.Fatal(err)
	}
	ep, bs, start := "http://w", uint32(16), uint32(4294967295)
	rec, err := s.UpsertWorker(&WorkerSpec{WorkerID: 1, WorkerFields: WorkerFields{Endpoint: &ep, BlockSize: &bs, DataParallelStartRank: &start}})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("lifecycle %v reasons %v", rec.Lifecycle, rec.NotSchedulableReasons)
	req := hashReq(2)
	var out Selection
	err = s.SelectAndReserve(&req, &out)
	t.Logf("select_and_reserve: %v (worker %d rank %d)", err, out.WorkerID, out.DPRank)
	if rec.Lifecycle == Schedulable && err != nil {
		t.Fatalf("a schedulable worker cannot be booked: %v", err)
	}
}
