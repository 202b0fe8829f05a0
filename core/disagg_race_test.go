package core

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// disaggService is a service on a settable clock with one prefill worker
// (1) and one decode worker (2) of model "model".
func disaggService(t *testing.T, now *atomic.Int64) *Service {
	t.Helper()
	cfg := DefaultConfig()
	cfg.UseKVEvents = false
	s, err := New(cfg, Options{Clock: func() time.Time { return time.Unix(0, now.Load()) }})
	if err != nil {
		t.Fatal(err)
	}
	for _, w := range []struct {
		id    uint64
		group string
	}{{1, "prefill"}, {2, "decode"}} {
		ep, bs := "http://w", uint32(4)
		if _, err := s.UpsertWorker(&WorkerSpec{WorkerID: w.id, ModelName: "model", RoutingGroup: w.group, WorkerFields: WorkerFields{Endpoint: &ep, BlockSize: &bs}}); err != nil {
			t.Fatal(err)
		}
	}
	return s
}

func disaggReq(id string, order DisaggOrder) *DisaggRequest {
	return &DisaggRequest{SelectionID: id, ModelName: "model", Order: order,
		Prompt: Prompt{TokenIDs: []uint32{1, 2, 3, 4, 5, 6, 7, 8}, HasTokenIDs: true}}
}

// TestPlansRaceEndEmpty: plans of both orders are made, completed, decoded,
// released and expired from many goroutines at once, while the decode
// worker leaves and comes back (the clock stands still: nothing expires).
// Every step answers with one of its documented outcomes, and once the
// plans left are released no plan, reservation or load remains: each leg
// ended exactly once, whoever ended it.
func TestPlansRaceEndEmpty(t *testing.T) {
	var now atomic.Int64
	now.Store(time.Unix(1_700_000_000, 0).UnixNano())
	s := disaggService(t, &now)
	const workers, perWorker = 8, 40
	var wg sync.WaitGroup
	var ok atomic.Int64
	unexpected := make(chan error, workers*perWorker)
	allowed := func(err error) bool {
		return err == nil || errors.Is(err, ErrNotFound) || errors.Is(err, ErrNotReady) || errors.Is(err, ErrConflict)
	}
	for g := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range perWorker {
				// Ids repeat across goroutines, so the same plan id is
				// raced for: at most one live plan has it.
				id := fmt.Sprintf("p%d", (g*perWorker+i)%(2*perWorker))
				order := DecodeAnchored
				if i%2 == 1 {
					order = PrefillAnchored
				}
				req := disaggReq(id, order)
				req.DeferDecode = order == PrefillAnchored && i%4 == 1
				_, err := s.PlanDisagg(req)
				if err == nil {
					ok.Add(1)
				}
				for _, step := range []error{s.DisaggPrefillComplete(id), second(s.PlanDecode(id)), second(s.ReleaseDisagg(id))} {
					var ce *CoordinatorError
					if !allowed(step) && !(errors.As(step, &ce) && ce.Failure == InvalidPlanState) {
						unexpected <- step
					}
				}
				if !allowed(err) {
					unexpected <- err
				}
			}
		}()
	}
	wg.Add(2)
	go func() {
		defer wg.Done()
		for range 20 {
			s.Sweep(time.Unix(0, now.Load()))
		}
	}()
	go func() {
		defer wg.Done()
		ep, bs := "http://w", uint32(4)
		for range 10 {
			if _, err := s.DeleteWorker(2); err != nil {
				unexpected <- err
			}
			if _, err := s.UpsertWorker(&WorkerSpec{WorkerID: 2, ModelName: "model", RoutingGroup: "decode", WorkerFields: WorkerFields{Endpoint: &ep, BlockSize: &bs}}); err != nil {
				unexpected <- err
			}
		}
	}()
	wg.Wait()
	close(unexpected)
	for err := range unexpected {
		t.Errorf("unexpected error: %v", err)
	}
	if ok.Load() == 0 {
		t.Fatal("no plan succeeded: the race exercised nothing")
	}
	// A release may have ended another goroutine's plan of the same id, so
	// some plans can be left: release them. The clock never moved, so no
	// booking expired: a leaked leg would still be counted below.
	for i := range 2 * perWorker {
		if _, err := s.ReleaseDisagg(fmt.Sprintf("p%d", i)); err != nil && !errors.Is(err, ErrNotFound) {
			t.Error(err)
		}
	}
	st := s.Stats()
	if st.Plans != 0 || st.Reservations != 0 || activeRequests(s) != 0 {
		t.Fatalf("left: %d plans, %d reservations, %d active requests", st.Plans, st.Reservations, activeRequests(s))
	}
}

func second[T any](_ T, err error) error { return err }

// TestPlanIDClaimedOnce: concurrent plans of one id: exactly one is made,
// the others are conflicts, and the winner's legs are the only bookings.
func TestPlanIDClaimedOnce(t *testing.T) {
	var now atomic.Int64
	now.Store(time.Unix(1_700_000_000, 0).UnixNano())
	s := disaggService(t, &now)
	const n = 16
	var wg sync.WaitGroup
	var won, conflicts atomic.Int32
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, err := s.PlanDisagg(disaggReq("one", DecodeAnchored))
			switch {
			case err == nil:
				won.Add(1)
			case errors.Is(err, ErrConflict):
				conflicts.Add(1)
			default:
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	if won.Load() != 1 || conflicts.Load() != n-1 {
		t.Fatalf("won %d, conflicts %d", won.Load(), conflicts.Load())
	}
	if st := s.Stats(); st.Reservations != 2 || st.Plans != 1 {
		t.Fatalf("%d reservations, %d plans; want 2 and 1", st.Reservations, st.Plans)
	}
	if _, err := s.ReleaseDisagg("one"); err != nil {
		t.Fatal(err)
	}
	if st := s.Stats(); st.Reservations != 0 || st.Plans != 0 {
		t.Fatalf("after release: %d reservations, %d plans", st.Reservations, st.Plans)
	}
}
