package core

import (
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// blockingIngress parks every Sync and Detach of worker 1 until release is
// closed, and counts the calls in flight per worker to catch two changes of
// one worker interleaving.
type blockingIngress struct {
	NopIngress
	entered  chan uint64
	release  chan struct{}
	inFlight [4]atomic.Int32
	overlap  atomic.Bool
}

func (b *blockingIngress) call(id uint64) {
	if b.inFlight[id].Add(1) > 1 {
		b.overlap.Store(true)
	}
	if id == 1 {
		b.entered <- id
		<-b.release
	}
	b.inFlight[id].Add(-1)
}

func (b *blockingIngress) Sync(id uint64, _ int, _ []RankSource, _ EventSink) { b.call(id) }
func (b *blockingIngress) Detach(id uint64)                                   { b.call(id) }

// liveness bounds how long a call that must not block may take before the
// test reports it blocked (a deadlock guard, not a timing assertion).
const liveness = 10 * time.Second

// TestNoCatalogLockAcrossIngress: while worker 1's listeners take their
// time to sync, readiness, the worker list, selections and another
// worker's registration all proceed; a second change of worker 1 waits for
// the first (changes of one worker are serialized).
func TestNoCatalogLockAcrossIngress(t *testing.T) {
	in := &blockingIngress{entered: make(chan uint64, 4), release: make(chan struct{})}
	s, err := New(DefaultConfig(), Options{Ingress: in})
	if err != nil {
		t.Fatal(err)
	}
	ep, bs := "http://w", uint32(16)
	spec := func(id uint64, kv string) *WorkerSpec {
		return &WorkerSpec{WorkerID: id, WorkerFields: WorkerFields{Endpoint: &ep, BlockSize: &bs, KVEventsEndpoint: &kv}}
	}
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); _, _ = s.UpsertWorker(spec(1, "tcp://10.0.0.1:5557")) }()
	<-in.entered // worker 1's Sync is parked
	go func() { defer wg.Done(); _, _ = s.UpsertWorker(spec(1, "tcp://10.0.0.1:5558")) }()

	done := make(chan struct{})
	go func() {
		defer close(done)
		if r := s.Ready(); !r.Ready || r.SchedulableWorkers != 1 {
			t.Errorf("ready %+v, want worker 1 schedulable", r)
		}
		if ws := s.ListWorkers("", ""); len(ws) != 1 {
			t.Errorf("list: %d workers", len(ws))
		}
		req := hashReq(4)
		var out Selection
		if err := s.Select(&req, &out); err != nil || out.WorkerID != 1 {
			t.Errorf("select: %v %+v", err, out)
		}
		if _, err := s.UpsertWorker(spec(2, "tcp://10.0.0.2:5557")); err != nil {
			t.Errorf("worker 2: %v", err)
		}
		if _, err := s.DeleteWorker(2); err != nil {
			t.Errorf("delete worker 2: %v", err)
		}
	}()
	select {
	case <-done:
	case <-time.After(liveness):
		t.Fatal("catalog reads or another worker's change blocked behind worker 1's ingress call")
	}
	select {
	case id := <-in.entered:
		t.Fatalf("a second change of worker %d reached the ingress while the first was in it", id)
	default:
	}
	close(in.release)
	wg.Wait()
	if in.overlap.Load() {
		t.Fatal("two ingress calls of one worker overlapped")
	}
	if ws := s.ListWorkers("", ""); len(ws) != 1 || *ws[0].KVEventsEndpoint != "tcp://10.0.0.1:5558" {
		t.Fatalf("final catalog %+v, want worker 1 with the second endpoint", ws)
	}
	if n := len(s.workerLocks.workers); n != 0 {
		t.Fatalf("%d per-worker locks left after every change ended", n)
	}
}
