package core

import (
	"errors"
	"testing"
)

// hookReplica runs f on every outbound event: a deterministic way to run
// other calls at the instant a booking has landed (row installed) but its
// caller has not returned yet.
type hookReplica struct{ f func(*ReplicaEvent) }

func (h hookReplica) Publish(ev *ReplicaEvent) { h.f(ev) }

// TestReplayIsSingleUseUnderConcurrency: a cached selection books at most
// once (spec 3.4, single use), even when a second replay runs between the
// first one's booking and its removal of the entry, and the first booking
// is freed in between (a caller cancelling while another retries).
func TestReplayIsSingleUseUnderConcurrency(t *testing.T) {
	var s *Service
	var nested error
	nestedRan := false
	hook := hookReplica{func(ev *ReplicaEvent) {
		if ev.Kind != ReplicaAdd || nestedRan {
			return
		}
		nestedRan = true
		if err := s.Free("sel"); err != nil {
			t.Errorf("free of the first booking: %v", err)
		}
		_, nested = s.Reserve(&ReservationRequest{ModelName: "default", SelectionID: "sel"})
	}}
	cfg := DefaultConfig()
	cfg.UseKVEvents = false
	var err error
	s, err = New(cfg, Options{Replica: hook})
	if err != nil {
		t.Fatal(err)
	}
	ep, bs := "http://w", uint32(16)
	if _, err := s.UpsertWorker(&WorkerSpec{WorkerID: 1, WorkerFields: WorkerFields{Endpoint: &ep, BlockSize: &bs}}); err != nil {
		t.Fatal(err)
	}
	req := hashReq(4)
	req.SelectionID, req.HasSelectionID = "sel", true
	var out Selection
	if err := s.Select(&req, &out); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Reserve(&ReservationRequest{SelectionID: "sel"}); err != nil {
		t.Fatalf("first replay: %v", err)
	}
	if !nestedRan {
		t.Fatal("the hook did not run")
	}
	if nested == nil {
		t.Fatal("a second replay of the same cached selection booked again")
	}
	if !errors.Is(nested, ErrConflict) && !errors.Is(nested, ErrNotFound) {
		t.Errorf("second replay: %v, want a 409 or 404", nested)
	}
	if st := s.Stats(); st.Reservations != 0 || st.PendingEntries != 0 {
		t.Errorf("after: %d bookings, %d pending entries, want 0 and 0", st.Reservations, st.PendingEntries)
	}
}
