package core

import (
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

func servingEnv(t testing.TB, workers, ranks int) *Service {
	cfg := DefaultConfig()
	cfg.UseKVEvents = false
	s, err := New(cfg, Options{})
	if err != nil {
		t.Fatal(err)
	}
	for w := range workers {
		ep, bs, dp := fmt.Sprintf("http://w%d", w), uint32(16), uint32(ranks)
		if _, err := s.UpsertWorker(&WorkerSpec{WorkerID: uint64(w), WorkerFields: WorkerFields{Endpoint: &ep, BlockSize: &bs, DataParallelSize: &dp}}); err != nil {
			t.Fatal(err)
		}
	}
	return s
}

// oneWorkerService is a Service of cfg without KV events (its bookings
// need no index) with worker 1 registered: endpoint http://w, block size
// 16.
func oneWorkerService(t testing.TB, cfg Config, opts Options) *Service {
	t.Helper()
	cfg.UseKVEvents = false
	s, err := New(cfg, opts)
	if err != nil {
		t.Fatal(err)
	}
	ep, bs := "http://w", uint32(16)
	if _, err := s.UpsertWorker(&WorkerSpec{WorkerID: 1, WorkerFields: WorkerFields{Endpoint: &ep, BlockSize: &bs}}); err != nil {
		t.Fatal(err)
	}
	return s
}

func hashReq(n int) SelectRequest {
	var r SelectRequest
	for i := range n {
		r.BlockHashes = append(r.BlockHashes, uint64(i*7919+1))
		r.SequenceHashes = append(r.SequenceHashes, uint64(i*104729+3))
	}
	r.HasBlockHashes, r.HasSequenceHashes = true, true
	r.ISLTokens, r.HasISLTokens = uint64(16*n), true
	return r
}

// TestSelectAllocs: a warmed-up Select allocates nothing; SelectAndReserve
// plus Free stays within its budget (the id copy, the ledger record, the
// slot's hashes and trie path).
func TestSelectAllocs(t *testing.T) {
	if raceEnabled {
		t.Skip("allocation counts need a non-race run")
	}
	s := servingEnv(t, 8, 2)
	req := hashReq(128)
	var out Selection
	for range 5 {
		if err := s.Select(&req, &out); err != nil {
			t.Fatal(err)
		}
	}
	if n := testing.AllocsPerRun(200, func() { _ = s.Select(&req, &out) }); n != 0 {
		t.Errorf("Select allocates %v times", n)
	}
	req.SelectionID, req.HasSelectionID = "a-1", true
	n := testing.AllocsPerRun(200, func() {
		if err := s.SelectAndReserve(&req, &out); err != nil {
			t.Fatal(err)
		}
		if err := s.Free("a-1"); err != nil {
			t.Fatal(err)
		}
	})
	t.Logf("SelectAndReserve+Free: %v allocs", n)
	// 7 with one ledger record per request (10 with the former reservation
	// row plus tracker request and handle): the id copy, the record, the
	// slot's hash copy, the trie path and its copy-on-write child sets.
	if n > 7 {
		t.Errorf("SelectAndReserve+Free allocates %v times, want <= 7", n)
	}
}

// TestConcurrentBookingsSpread: concurrent select_and_reserve calls on
// equally good workers spread their bookings (no global lock serializes
// them, and booking updates the loads right after the pick).
func TestConcurrentBookingsSpread(t *testing.T) {
	s := servingEnv(t, 4, 1)
	const perG, gs = 50, 8
	var wg sync.WaitGroup
	for g := range gs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			req := hashReq(8)
			var out Selection
			for i := range perG {
				req.SelectionID, req.HasSelectionID = "g"+strconv.Itoa(g)+"-"+strconv.Itoa(i), true
				// Without KV events a booking predicts its prompt on its
				// worker: a fresh prompt each time keeps the workers equally
				// good, which is what this test needs.
				for j := range req.BlockHashes {
					req.BlockHashes[j] = uint64(g<<32 | i<<16 | j)
				}
				if err := s.SelectAndReserve(&req, &out); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	ls := s.Loads("", "")
	if len(ls) != 1 || len(ls[0].Loads) != 4 {
		t.Fatalf("loads %+v", ls)
	}
	total := int64(0)
	for _, l := range ls[0].Loads {
		total += l.ActiveRequests
		if l.ActiveRequests < perG*gs/4/2 {
			t.Errorf("worker %d got %d of %d bookings: not spread", l.WorkerID, l.ActiveRequests, perG*gs)
		}
	}
	if total != perG*gs {
		t.Fatalf("booked %d, want %d", total, perG*gs)
	}
	if st := s.Stats(); st.Reservations != perG*gs || st.BookOK != perG*gs {
		t.Fatalf("stats %+v", st)
	}
}

// TestConcurrentCatalogAndLifecycle runs selections, bookings, lifecycle
// calls, catalog churn and sweeps at once (for -race), then checks that the
// ledger and the workers' load counters agree after a final sweep.
func TestConcurrentCatalogAndLifecycle(t *testing.T) {
	s := servingEnv(t, 3, 2)
	var wg sync.WaitGroup
	stop := make(chan struct{})
	for g := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			req := hashReq(16)
			var out Selection
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				id := fmt.Sprintf("c%d-%d", g, i)
				req.SelectionID, req.HasSelectionID = id, true
				if s.SelectAndReserve(&req, &out) == nil {
					_ = s.PrefillComplete(id)
					_ = s.OutputBlock(id, nil)
					if i%3 != 0 {
						_ = s.Free(id)
					}
				}
				_ = s.Select(&req, &out)
				_, _ = s.Reserve(&ReservationRequest{SelectionID: id})
			}
		}()
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := 0; i < 50; i++ {
			ep, bs, dp := "http://x", uint32(16), uint32(1+i%2)
			_, _ = s.UpsertWorker(&WorkerSpec{WorkerID: 1, WorkerFields: WorkerFields{Endpoint: &ep, BlockSize: &bs, DataParallelSize: &dp}})
			_, _ = s.DeleteWorker(2)
			_, _ = s.UpsertWorker(&WorkerSpec{WorkerID: 2, ModelName: []string{"default", "other"}[i%2], WorkerFields: WorkerFields{Endpoint: &ep, BlockSize: &bs}})
			s.Sweep(time.Now())
		}
		close(stop)
	}()
	wg.Wait()
	s.Sweep(time.Now())
	st := s.Stats()
	if n := activeRequests(s); st.Reservations != n {
		t.Fatalf("ledger %d reservations, worker counters %d requests", st.Reservations, n)
	}
}

// TestHugeDataParallelSizeIsIncomplete: a registration naming billions of
// ranks (or a range past the u32 rank space) is kept incomplete with a
// reason instead of allocating per rank under the catalog lock.
func TestHugeDataParallelSizeIsIncomplete(t *testing.T) {
	s, err := New(DefaultConfig(), Options{})
	if err != nil {
		t.Fatal(err)
	}
	ep, bs := "http://w", uint32(16)
	for _, tc := range []struct {
		start, size uint32
		want        string
	}{
		{0, 1 << 31, "exceeds kvselect's limit"},
		{1<<32 - 2, 4, "exceeds the u32 rank space"},
	} {
		spec := WorkerSpec{WorkerID: 7}
		spec.Endpoint, spec.BlockSize = &ep, &bs
		spec.DataParallelStartRank, spec.DataParallelSize = &tc.start, &tc.size
		rec, err := s.UpsertWorker(&spec)
		if err != nil {
			t.Fatal(err)
		}
		if rec.Lifecycle != Incomplete || len(rec.NotSchedulableReasons) != 1 || !strings.Contains(rec.NotSchedulableReasons[0], tc.want) {
			t.Fatalf("start %d size %d: %s %v", tc.start, tc.size, rec.Lifecycle, rec.NotSchedulableReasons)
		}
	}
}
