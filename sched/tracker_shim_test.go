package sched

import (
	"fmt"
	"time"

	"github.com/kvselect/kvselect/radix"
	"github.com/puzpuzpuz/xsync/v3"
)

// testTracker is a minimal host for the tests of this package: the
// id-keyed table of live requests that core's ledger is in production,
// reduced to what exercising WorkerLoad and Slot needs. A request is
// published in reqs only once its Slot is booked, as core installs a
// record only after booking.
type testTracker struct {
	cfg     Config
	workers *xsync.MapOf[radix.WorkerKey, *WorkerLoad]
	reqs    *xsync.MapOf[string, *Slot]
}

// tbook is one booking of the test host: an id and a worker rank on top of
// sched's Booking.
type tbook struct {
	RequestID      string
	Worker         radix.WorkerKey
	SequenceHashes []uint64
	PrefillTokens  int64
	AssumeKVReuse  bool
	BlockSize      int64
}

var errDuplicate = fmt.Errorf("test host: duplicate request id")

func newTracker(t interface {
	Helper()
	Fatal(...any)
}, mod func(*Config)) *testTracker {
	t.Helper()
	c := DefaultConfig()
	if mod != nil {
		mod(&c)
	}
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	return &testTracker{cfg: c, workers: xsync.NewMapOf[radix.WorkerKey, *WorkerLoad](), reqs: xsync.NewMapOf[string, *Slot]()}
}

func (tr *testTracker) AddWorker(k radix.WorkerKey) *WorkerLoad {
	w, _ := tr.workers.LoadOrCompute(k, func() *WorkerLoad { return NewWorkerLoad(k, &tr.cfg) })
	return w
}

func (tr *testTracker) Worker(k radix.WorkerKey) (*WorkerLoad, bool) { return tr.workers.Load(k) }

// Book books b; the time is ignored (expiry is the host's, in core).
func (tr *testTracker) Book(b *tbook, _ time.Time) error {
	w, ok := tr.workers.Load(b.Worker)
	if !ok {
		return fmt.Errorf("%w: %v", ErrWorkerNotFound, b.Worker)
	}
	s := new(Slot)
	if err := s.Book(w, &Booking{SequenceHashes: b.SequenceHashes, PrefillTokens: b.PrefillTokens, AssumeKVReuse: b.AssumeKVReuse, BlockSize: b.BlockSize}); err != nil {
		return err
	}
	if _, loaded := tr.reqs.LoadOrStore(b.RequestID, s); loaded {
		s.Release()
		return errDuplicate
	}
	return nil
}

func (tr *testTracker) PrefillComplete(id string) bool {
	s, ok := tr.reqs.Load(id)
	if ok {
		s.CompletePrefill()
	}
	return ok
}

func (tr *testTracker) OutputBlock(id string, f *float64) error {
	s, ok := tr.reqs.Load(id)
	if !ok {
		if _, err := decayWeight(f); err != nil {
			return err
		}
		return errNotLive
	}
	return s.OutputBlock(f)
}

var errNotLive = fmt.Errorf("test host: request not live")

func (tr *testTracker) Free(id string) bool {
	s, ok := tr.reqs.LoadAndDelete(id)
	return ok && s.Release()
}

// RemoveWorker retires every rank of id and releases the requests on them.
func (tr *testTracker) RemoveWorker(id uint64) int {
	tr.workers.Range(func(k radix.WorkerKey, w *WorkerLoad) bool {
		if k.WorkerID == id {
			tr.workers.Delete(k)
			w.Retire()
		}
		return true
	})
	n := 0
	tr.reqs.Range(func(rid string, s *Slot) bool {
		if s.w.Retired() && tr.Free(rid) {
			n++
		}
		return true
	})
	return n
}
