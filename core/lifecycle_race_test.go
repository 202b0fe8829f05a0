package core

import (
	"errors"
	"testing"
)

// TestLifecycleCallSparesANewerBooking: a lifecycle call that looked up a
// reservation's row, then lost the race with a Free of the id and a new
// booking of the same id, acts on nothing (404) and leaves the newer
// booking whole. Deterministic: the free and re-booking run from the
// afterLookup hook, between the outer call's ledger lookup and its use of
// the record.
func TestLifecycleCallSparesANewerBooking(t *testing.T) {
	half := 0.5
	calls := map[string]func(s *Service) error{
		"prefill_complete": func(s *Service) error { return s.PrefillComplete("r") },
		"output_block":     func(s *Service) error { return s.OutputBlock("r", &half) },
		"free":             func(s *Service) error { return s.Free("r") },
	}
	for name, call := range calls {
		t.Run(name, func(t *testing.T) {
			cfg := DefaultConfig()
			cfg.Sched.TrackOutputBlocks = true
			var events []ReplicaEventKind
			s := oneWorkerService(t, cfg, Options{Replica: hookReplica{func(ev *ReplicaEvent) { events = append(events, ev.Kind) }}})
			req := hashReq(4)
			req.SelectionID, req.HasSelectionID = "r", true
			var out Selection
			if err := s.SelectAndReserve(&req, &out); err != nil {
				t.Fatal(err)
			}
			// The newer booking has the same loads as the first, but other
			// block hashes: without KV events the first booking's prompt is
			// now cached on the worker (approximate index), which would
			// lower a repeat's prefill.
			req2 := hashReq(4)
			req2.SelectionID, req2.HasSelectionID = "r", true
			for i := range req2.BlockHashes {
				req2.BlockHashes[i] += 1 << 40
			}
			ran := false
			s.afterLookup = func(id string) {
				if ran {
					return
				}
				ran = true
				if err := s.Free(id); err != nil {
					t.Errorf("free of the first booking: %v", err)
				}
				if err := s.SelectAndReserve(&req2, &out); err != nil {
					t.Errorf("second booking: %v", err)
				}
			}
			want := s.Loads("", "")[0].Loads[0]
			if want.ActiveRequests != 1 || want.PotentialPrefillTokens == 0 {
				t.Fatalf("loads after the first booking: %+v", want)
			}
			events = events[:0]

			err := call(s)
			if !ran {
				t.Fatal("the hook did not run")
			}
			if !errors.Is(err, ErrNotFound) || err.Error() != "reservation r not found" {
				t.Errorf("outer call: %v, want the 404 \"reservation r not found\"", err)
			}
			if got := s.Loads("", "")[0].Loads[0]; got != want {
				t.Errorf("newer booking's loads %+v, want %+v untouched", got, want)
			}
			// The outer call published nothing: only the nested free and
			// booking did.
			if len(events) != 2 || events[0] != ReplicaFree || events[1] != ReplicaAdd {
				t.Errorf("replica events %v, want [free add]", events)
			}
			if err := s.PrefillComplete("r"); err != nil {
				t.Errorf("the newer booking's row is gone: %v", err)
			}
			if err := s.Free("r"); err != nil {
				t.Errorf("free of the newer booking: %v", err)
			}
			if err := s.Free("r"); !errors.Is(err, ErrNotFound) {
				t.Errorf("second free: %v, want 404", err)
			}
			if st := s.Stats(); st.Reservations != 0 {
				t.Errorf("after: %d bookings, want 0", st.Reservations)
			}
		})
	}
}
