package core

import (
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// TestReplayTwiceAfterFree: replay B peeks the cached entry, then stalls
// (here: in the clock read at the top of book). Replay A books the same
// entry and the client frees it. B resumes: its claim succeeds (the ledger
// no longer holds the id), and it must then find the entry it replays gone
// and answer not found: a cached selection books at most once.
func TestReplayTwiceAfterFree(t *testing.T) {
	var calls atomic.Int64
	var blockAt atomic.Int64
	blockAt.Store(-1)
	gate := make(chan struct{})
	reached := make(chan struct{})
	now := time.Unix(1_700_000_000, 0)
	clock := func() time.Time {
		n := calls.Add(1)
		if n == blockAt.Load() {
			close(reached)
			<-gate
		}
		return now
	}
	s := oneWorkerService(t, DefaultConfig(), Options{Clock: clock})
	req := hashReq(4)
	req.SelectionID, req.HasSelectionID = "sel", true
	var out Selection
	if err := s.Select(&req, &out); err != nil {
		t.Fatal(err)
	}
	// B: the 1st clock read (peek) passes, the 2nd (book) blocks.
	blockAt.Store(calls.Load() + 2)
	var wg sync.WaitGroup
	var errB error
	wg.Add(1)
	go func() {
		defer wg.Done()
		_, errB = s.Reserve(&ReservationRequest{SelectionID: "sel"})
	}()
	<-reached
	if _, err := s.Reserve(&ReservationRequest{SelectionID: "sel"}); err != nil {
		t.Fatalf("replay A: %v", err)
	}
	if err := s.Free("sel"); err != nil {
		t.Fatalf("free A: %v", err)
	}
	close(gate)
	wg.Wait()
	if errB == nil {
		t.Fatalf("replay B booked the cached selection a second time (after A's booking was freed); live=%d", s.Stats().Reservations)
	}
}
