package core

import (
	"context"
	"errors"
	"testing"
	"time"
)

// sessionEnv is a service with session affinity (TTL 10 s, mode) and
// workers 1 and 2, on a fake clock the test moves.
func sessionEnv(t *testing.T, mode AffinityMode) (*Service, *time.Time, *recAffinity) {
	cfg := DefaultConfig()
	cfg.UseKVEvents = false
	cfg.SessionAffinity = AffinityConfig{TTL: 10 * time.Second, Mode: mode}
	now := time.Unix(1_700_000_000, 0)
	rec := &recAffinity{}
	s, err := New(cfg, Options{Clock: func() time.Time { return now }, Rand: firstRand{}, Affinity: rec, WriterID: 1})
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range []uint64{1, 2} {
		ep, bs := "http://w", uint32(4)
		if _, err := s.UpsertWorker(&WorkerSpec{WorkerID: id, WorkerFields: WorkerFields{Endpoint: &ep, BlockSize: &bs}}); err != nil {
			t.Fatal(err)
		}
	}
	return s, &now, rec
}

func sessionReq(id, session string) *SelectRequest {
	r := tokReq(id, 4)
	r.SessionID, r.HasSessionID = session, true
	return r
}

func bound(t *testing.T, s *Service, session string) (AffinityTarget, int) {
	t.Helper()
	tb := s.lookup(DefaultPartition, DefaultPartition).affinity
	sh := tb.shard(session)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	e := sh.m[session]
	if e == nil || !e.bound {
		t.Fatalf("session %s not bound", session)
	}
	return e.target, e.leases
}

// TestSessionFailoverAfterHold: hard mode, the bound worker departs after
// the hold checked it: the commit re-binds the session to the booked
// worker instead of failing; a live bound worker would have failed.
func TestSessionFailoverAfterHold(t *testing.T) {
	s, _, _ := sessionEnv(t, AffinityHard)
	var out Selection
	if err := s.SelectAndReserve(sessionReq("a", "s"), &out); err != nil {
		t.Fatal(err)
	}
	first := out.WorkerID
	other := 3 - first
	p := s.lookup(DefaultPartition, DefaultPartition)
	h, err := s.holdSession(context.Background(), p, "s")
	if err != nil || h == nil || h.init || h.target.WorkerID != first {
		t.Fatalf("hold: %+v %v", h, err)
	}
	if _, err := s.DeleteWorker(first); err != nil {
		t.Fatal(err)
	}
	l, err := s.commitSession(p, h, WorkerKey{WorkerID: other})
	if err != nil || l == nil {
		t.Fatalf("failover commit: %v", err)
	}
	if tg, leases := bound(t, s, "s"); tg.WorkerID != other || leases != 1 {
		t.Fatalf("after failover: %v leases %d", tg, leases)
	}
	// With the bound worker live, the same mismatch is the client's.
	h, _ = s.holdSession(context.Background(), p, "s")
	ep, bs := "http://w", uint32(4)
	if _, err := s.UpsertWorker(&WorkerSpec{WorkerID: first, WorkerFields: WorkerFields{Endpoint: &ep, BlockSize: &bs}}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.commitSession(p, h, WorkerKey{WorkerID: first}); err == nil || !errors.Is(err, ErrBadRequest) {
		t.Fatalf("live mismatch: %v", err)
	}
	l.Release()
}

// TestSessionWaitsForInitialization: a booking of a session another
// booking is initializing waits on the table's channel (no lock, no
// spin) and proceeds once it is bound; a caller that goes away stops
// waiting.
func TestSessionWaitsForInitialization(t *testing.T) {
	s, _, _ := sessionEnv(t, AffinityHard)
	tb := s.lookup(DefaultPartition, DefaultPartition).affinity
	init, _, err := tb.tryAcquire("s", nil)
	if err != nil || !init.init {
		t.Fatal("initialize")
	}
	res := make(chan error, 2)
	var out Selection
	go func() { res <- s.SelectAndReserve(sessionReq("w", "s"), &out) }()
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		var o Selection
		res <- s.SelectAndReserveContext(ctx, sessionReq("gone", "s"), &o)
	}()
	cancel()
	if err := <-res; !errors.Is(err, errCancelled) {
		t.Fatalf("cancelled waiter: %v", err)
	}
	l, err := tb.commit(init, AffinityTarget{WorkerID: 2, DPRank: 0, HasDPRank: true})
	if err != nil {
		t.Fatal(err)
	}
	if err := <-res; err != nil || out.WorkerID != 2 {
		t.Fatalf("waiter: %v on %d", err, out.WorkerID)
	}
	if _, leases := bound(t, s, "s"); leases != 2 {
		t.Fatalf("leases %d", leases)
	}
	l.Release()
	if s.Stats().Reservations != 1 {
		t.Fatal("the cancelled waiter booked")
	}
}

// TestSessionLeaseEndsWithRecord: the lease lives on the reservation and
// is released when it ends by expiry or by its worker's removal.
func TestSessionLeaseEndsWithRecord(t *testing.T) {
	s, now, rec := sessionEnv(t, AffinityHard)
	var out Selection
	if err := s.SelectAndReserve(sessionReq("a", "s"), &out); err != nil {
		t.Fatal(err)
	}
	if err := s.SelectAndReserve(sessionReq("b", "s"), &out); err != nil {
		t.Fatal(err)
	}
	if _, leases := bound(t, s, "s"); leases != 2 {
		t.Fatalf("leases %d", leases)
	}
	*now = now.Add(s.cfg.Sched.ActiveRequestExpiry + time.Second)
	if n := s.Sweep(*now); n != 2 {
		t.Fatalf("expired %d", n)
	}
	tg, leases := bound(t, s, "s")
	if leases != 0 {
		t.Fatalf("after expiry: leases %d", leases)
	}
	if got := take(&rec.mu, &rec.log); got == "(none)" {
		t.Fatal("no release published")
	}
	if err := s.SelectAndReserve(sessionReq("c", "s"), &out); err != nil || out.WorkerID != tg.WorkerID {
		t.Fatalf("rebook: %v", err)
	}
	if _, err := s.DeleteWorker(tg.WorkerID); err != nil {
		t.Fatal(err)
	}
	if _, leases := bound(t, s, "s"); leases != 0 {
		t.Fatalf("after worker removal: leases %d", leases)
	}
	if n := s.ReapAffinity(now.Add(10 * time.Second)); n != 1 {
		t.Fatalf("reaped %d", n)
	}
	if st := s.AffinityStats(); st.Entries != 0 || st.Reaped != 1 {
		t.Fatalf("stats %+v", st)
	}
}

// TestAffinityConfig: the TTL bound's text; the reaper's period.
func TestAffinityConfig(t *testing.T) {
	for _, ttl := range []time.Duration{time.Second - 1, MaxSessionAffinityTTL + time.Second} {
		c := DefaultConfig()
		c.SessionAffinity.TTL = ttl
		if err := c.Validate(); err == nil || !errors.Is(err, ErrConfig) ||
			err.Error() != "core: invalid config: session affinity TTL must be between 1 and 31536000 seconds" {
			t.Errorf("ttl %v: %v", ttl, err)
		}
	}
	c := AffinityConfig{TTL: 5 * time.Second}
	if c.ReapInterval() != 5*time.Second || (&AffinityConfig{TTL: time.Hour}).ReapInterval() != 30*time.Second {
		t.Error("reap interval")
	}
	if _, err := ParseAffinityMode("firm"); err == nil || err.Error() != `invalid session affinity mode "firm"; expected 'hard' or 'soft'` {
		t.Errorf("mode: %v", err)
	}
}
