package core

import (
	"sync"
	"testing"
	"time"
)

type fnAffinity struct{ f func(*AffinityEvent) }

func (a fnAffinity) PublishAffinity(ev *AffinityEvent) { a.f(ev) }

type logReplica struct {
	mu  sync.Mutex
	evs []ReplicaEvent
}

func (r *logReplica) Publish(ev *ReplicaEvent) {
	r.mu.Lock()
	defer r.mu.Unlock()
	c := *ev
	c.SequenceHashes = append([]uint64(nil), ev.SequenceHashes...)
	r.evs = append(r.evs, c)
}

// TestFreePublishedAfterIDIsReusable: a booking of the same id made
// while a free is still releasing (here: from the session lease's publish
// hook) must reach peers after that free: peers that applied add(id),
// add(id), free(id) would drop the live second booking. Free publishes
// while the id is still held in the ledger.
func TestFreePublishedAfterIDIsReusable(t *testing.T) {
	var s *Service
	var nestedErr error
	armed := false
	aff := fnAffinity{func(ev *AffinityEvent) {
		if !armed {
			return
		}
		armed = false
		req := hashReq(2)
		req.SelectionID, req.HasSelectionID = "id", true
		var out Selection
		nestedErr = s.SelectAndReserve(&req, &out)
	}}
	rep := &logReplica{}
	cfg := DefaultConfig()
	cfg.SessionAffinity = AffinityConfig{TTL: 10 * time.Second}
	s = oneWorkerService(t, cfg, Options{Replica: rep, Affinity: aff, WriterID: 1})
	req := hashReq(2)
	req.SelectionID, req.HasSelectionID = "id", true
	req.SessionID, req.HasSessionID = "sess", true
	var out Selection
	if err := s.SelectAndReserve(&req, &out); err != nil {
		t.Fatal(err)
	}
	armed = true
	if err := s.Free("id"); err != nil {
		t.Fatal(err)
	}
	if nestedErr != nil {
		t.Fatalf("rebooking the id in the window: %v", nestedErr)
	}
	if n := s.Stats().Reservations; n != 1 {
		t.Fatalf("origin holds %d bookings, want 1", n)
	}
	// A peer applies what was published, in order.
	peer := oneWorkerService(t, cfg, Options{})
	var kinds []ReplicaEventKind
	for i := range rep.evs {
		rep.evs[i].Origin = 7
		kinds = append(kinds, rep.evs[i].Kind)
	}
	peer.ApplyReplica(rep.evs)
	if n := peer.Stats().Reservations; n != 1 {
		t.Fatalf("published %v (1=add 3=free): the peer mirrors %d bookings while the origin holds 1", kinds, n)
	}
}
