package core

import (
	"errors"
	"testing"
)

// hookReplica runs f on every outbound event: a deterministic way to run
// other calls at the instant a booking publishes its admission (its slot
// booked and its pending entry consumed, its record not yet live).
type hookReplica struct{ f func(*ReplicaEvent) }

func (h hookReplica) Publish(ev *ReplicaEvent) { h.f(ev) }

// TestReplayIsSingleUseUnderConcurrency: a cached selection books at most
// once, even when a second replay and a free of the first booking run
// while the first replay is booking (a caller cancelling while another
// retries). The replay consumes its entry before its record turns live, so
// at that instant the free finds nothing live and the second replay
// finds no entry; once the first booking returns, it is freed normally.
func TestReplayIsSingleUseUnderConcurrency(t *testing.T) {
	var s *Service
	var nestedFree, nestedReplay error
	nestedRan := false
	hook := hookReplica{func(ev *ReplicaEvent) {
		if ev.Kind != ReplicaAdd || nestedRan {
			return
		}
		nestedRan = true
		nestedFree = s.Free("sel")
		_, nestedReplay = s.Reserve(&ReservationRequest{ModelName: "default", SelectionID: "sel"})
	}}
	s = oneWorkerService(t, DefaultConfig(), Options{Replica: hook})
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
	if !errors.Is(nestedFree, ErrNotFound) {
		t.Errorf("free during the booking: %v, want not found (in-flight bookings are invisible)", nestedFree)
	}
	if !errors.Is(nestedReplay, ErrNotFound) && !errors.Is(nestedReplay, ErrConflict) {
		t.Errorf("second replay: %v, want a conflict or not found", nestedReplay)
	}
	if err := s.Free("sel"); err != nil {
		t.Fatalf("free after the booking: %v", err)
	}
	if st := s.Stats(); st.Reservations != 0 || st.PendingEntries != 0 {
		t.Errorf("after: %d bookings, %d pending entries, want 0 and 0", st.Reservations, st.PendingEntries)
	}
}
