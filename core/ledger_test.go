package core

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// countingLease counts its releases.
type countingLease struct{ n atomic.Int32 }

func (l *countingLease) Release() { l.n.Add(1) }

// attachLease hangs a lease on id's live record, as session affinity will.
func attachLease(t *testing.T, s *Service, id string) *countingLease {
	t.Helper()
	r := s.ledger.live(id)
	if r == nil {
		t.Fatalf("%s is not live", id)
	}
	l := new(countingLease)
	r.lease = l
	return l
}

// TestReleaseExactlyOnce: a free, an expiry sweep and the removal of the
// worker race for the same reservations; each record is released exactly
// once (one 200 or one expiry or one worker-gone), its lease once, and the
// worker's load counters and the ledger end empty.
func TestReleaseExactlyOnce(t *testing.T) {
	var now atomic.Int64
	t0 := time.Unix(1_700_000_000, 0)
	now.Store(t0.UnixNano())
	cfg := DefaultConfig()
	cfg.UseKVEvents = false
	s, err := New(cfg, Options{Clock: func() time.Time { return time.Unix(0, now.Load()) }})
	if err != nil {
		t.Fatal(err)
	}
	ep, bs := "http://w", uint32(16)
	for round := range 50 {
		if _, err := s.UpsertWorker(&WorkerSpec{WorkerID: 1, WorkerFields: WorkerFields{Endpoint: &ep, BlockSize: &bs}}); err != nil {
			t.Fatal(err)
		}
		const n = 8
		leases := make([]*countingLease, n)
		for i := range n {
			req := hashReq(4)
			req.SelectionID, req.HasSelectionID = fmt.Sprintf("r%d-%d", round, i), true
			var out Selection
			if err := s.SelectAndReserve(&req, &out); err != nil {
				t.Fatal(err)
			}
			leases[i] = attachLease(t, s, req.SelectionID)
		}
		before := s.Stats()
		// Past the expiry guard: the sweep may release any of them.
		now.Add(int64(cfg.Sched.ActiveRequestExpiry) + 1)
		var wg sync.WaitGroup
		var freed atomic.Int64
		for i := range n {
			wg.Add(1)
			go func() {
				defer wg.Done()
				if s.Free(fmt.Sprintf("r%d-%d", round, i)) == nil {
					freed.Add(1)
				}
			}()
		}
		wg.Add(2)
		go func() { defer wg.Done(); s.Sweep(time.Unix(0, now.Load())) }()
		go func() { defer wg.Done(); _, _ = s.DeleteWorker(1) }()
		wg.Wait()
		after := s.Stats()
		released := int64(after.Freed-before.Freed) + int64(after.Expired-before.Expired) + int64(after.WorkerGone-before.WorkerGone)
		if released != n || int64(after.Freed-before.Freed) != freed.Load() {
			t.Fatalf("round %d: released %d (freed %d, 200s %d, expired %d, worker gone %d), want %d", round, released,
				after.Freed-before.Freed, freed.Load(), after.Expired-before.Expired, after.WorkerGone-before.WorkerGone, n)
		}
		for i, l := range leases {
			if got := l.n.Load(); got != 1 {
				t.Fatalf("round %d: lease %d released %d times", round, i, got)
			}
		}
		if after.Reservations != 0 || after.ReservationBytes != 0 {
			t.Fatalf("round %d: ledger holds %d reservations, %d bytes", round, after.Reservations, after.ReservationBytes)
		}
	}
}

// TestWorkerRemovalReleasesBookings: deleting a worker releases its
// bookings (their lifecycle calls are 404 after), moving it to another
// partition does too, and a rank dropped by a re-registration loses only
// its own bookings.
func TestWorkerRemovalReleasesBookings(t *testing.T) {
	s := servingEnv(t, 1, 2)
	book := func(id string, rank uint32) {
		t.Helper()
		req := hashReq(4)
		req.SelectionID, req.HasSelectionID = id, true
		req.PinnedWorker = &WorkerKey{WorkerID: 0, DPRank: rank}
		var out Selection
		if err := s.SelectAndReserve(&req, &out); err != nil {
			t.Fatal(err)
		}
	}
	book("r0", 0)
	book("r1", 1)
	ep, bs, one := "http://w0", uint32(16), uint32(1)
	// Shrink to rank 0: r1's rank left.
	if _, err := s.UpsertWorker(&WorkerSpec{WorkerID: 0, WorkerFields: WorkerFields{Endpoint: &ep, BlockSize: &bs, DataParallelSize: &one}}); err != nil {
		t.Fatal(err)
	}
	if err := s.PrefillComplete("r1"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("r1 after its rank left: %v, want not found", err)
	}
	if err := s.PrefillComplete("r0"); err != nil {
		t.Fatalf("r0 lost with r1's rank: %v", err)
	}
	// Move to another partition: r0 goes.
	if _, err := s.UpsertWorker(&WorkerSpec{WorkerID: 0, ModelName: "m2", WorkerFields: WorkerFields{Endpoint: &ep, BlockSize: &bs}}); err != nil {
		t.Fatal(err)
	}
	if err := s.Free("r0"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("r0 after the move: %v, want not found", err)
	}
	if st := s.Stats(); st.Reservations != 0 || st.WorkerGone != 2 {
		t.Fatalf("stats %+v", st)
	}
}

// TestLazyExpiryOnBooking: a booking runs the expiry sweep when the check
// interval has passed since the last run, so stale reservations go even if
// the host never calls Sweep; output blocks do not refresh a reservation.
func TestLazyExpiryOnBooking(t *testing.T) {
	t0 := time.Unix(1_700_000_000, 0)
	now := t0
	cfg := DefaultConfig()
	s := oneWorkerService(t, cfg, Options{Clock: func() time.Time { return now }})
	book := func(id string) {
		t.Helper()
		req := hashReq(2)
		req.SelectionID, req.HasSelectionID = id, true
		var out Selection
		if err := s.SelectAndReserve(&req, &out); err != nil {
			t.Fatal(err)
		}
	}
	book("old") // runs the first check at t0
	now = t0.Add(100 * time.Second)
	book("new")
	if err := s.OutputBlock("old", nil); err != nil {
		t.Fatal(err)
	}
	now = t0.Add(cfg.Sched.ActiveRequestExpiry + time.Second)
	book("trigger")
	if err := s.Free("old"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("old after lazy expiry: %v, want not found", err)
	}
	if err := s.Free("new"); err != nil {
		t.Fatalf("new expired too early: %v", err)
	}
	if n := s.Sweep(now.Add(cfg.Sched.ActiveRequestExpiry)); n != 0 {
		t.Fatalf("sweep at exactly the guard expired %d, want 0 (strictly older)", n)
	}
	if n := s.Sweep(now.Add(cfg.Sched.ActiveRequestExpiry + 1)); n != 1 {
		t.Fatalf("sweep past the guard expired %d, want 1", n)
	}
}

// TestLifecycleAllocs: prefill_complete and output_block allocate nothing
// (one ledger lookup and the slot's atomic or per-worker updates).
func TestLifecycleAllocs(t *testing.T) {
	if raceEnabled {
		t.Skip("allocation counts need a non-race run")
	}
	s := servingEnv(t, 2, 1)
	req := hashReq(16)
	req.SelectionID, req.HasSelectionID = "life", true
	var out Selection
	if err := s.SelectAndReserve(&req, &out); err != nil {
		t.Fatal(err)
	}
	half := 0.5
	if n := testing.AllocsPerRun(200, func() {
		if err := s.PrefillComplete("life"); err != nil {
			t.Fatal(err)
		}
		if err := s.OutputBlock("life", &half); err != nil {
			t.Fatal(err)
		}
	}); n != 0 {
		t.Errorf("prefill_complete + output_block allocate %v times", n)
	}
}
