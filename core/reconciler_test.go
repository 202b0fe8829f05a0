package core

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"
)

// chanSource is a CatalogSource the test feeds.
type chanSource chan []WorkerSpec

func (c chanSource) Snapshots() <-chan []WorkerSpec { return c }

// fakeTimer is Run's timer: it records the delays asked for and fires only
// when the test says so.
type fakeTimer struct {
	asked []time.Duration
	fire  chan time.Time
}

func (f *fakeTimer) after(d time.Duration) <-chan time.Time {
	f.asked = append(f.asked, d)
	return f.fire
}

func worker(id uint64, ep string) WorkerSpec {
	bs := uint32(16)
	return WorkerSpec{WorkerID: id, WorkerFields: WorkerFields{Endpoint: &ep, BlockSize: &bs}}
}

func lifecycleOf(s *Service, id uint64) Lifecycle {
	for _, w := range s.ListWorkers("", "") {
		if w.WorkerID == id {
			return w.Lifecycle
		}
	}
	return ""
}

// TestReconcilerRun drives Run through a source and a timer the test
// controls (synctest.Wait returns once Run is blocked again): a failed
// snapshot asks for the retry delay and is applied again when the timer
// fires; a newer snapshot supersedes it; the source closing fails the
// catalog closed and ends Run.
func TestReconcilerRun(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var now atomic.Int64
		now.Store(time.Unix(1_700_000_000, 0).UnixNano())
		cfg := DefaultConfig()
		cfg.UseKVEvents = false
		s, err := New(cfg, Options{Clock: func() time.Time { return time.Unix(0, now.Load()) }})
		if err != nil {
			t.Fatal(err)
		}
		var fail atomic.Bool
		s.failUpsert = func(uint64) error {
			if fail.Load() {
				return errorf(ErrInternal, "test hook")
			}
			return nil
		}
		timer := &fakeTimer{fire: make(chan time.Time)}
		r, err := NewCatalogReconciler(s, ReconcilerConfig{Name: "test", Exclusive: true, After: timer.after})
		if err != nil {
			t.Fatal(err)
		}
		src := make(chanSource)
		done := make(chan error, 1)
		go func() { done <- r.Run(context.Background(), src) }()

		fail.Store(true)
		src <- []WorkerSpec{worker(1, "http://a")}
		synctest.Wait()
		if got := r.Stats(); got.Passes != 1 || got.Failures != 1 || len(timer.asked) != 1 || timer.asked[0] != DefaultReconcileRetryDelay {
			t.Fatalf("after a failed pass: %+v, timer asked %v", got, timer.asked)
		}
		fail.Store(false)
		now.Add(int64(DefaultReconcileRetryDelay))
		timer.fire <- time.Unix(0, now.Load())
		synctest.Wait()
		if lifecycleOf(s, 1) != Schedulable || r.Stats().Passes != 2 || len(timer.asked) != 1 {
			t.Fatalf("after the retry: %s, %+v, timer asked %v", lifecycleOf(s, 1), r.Stats(), timer.asked)
		}

		// A failing snapshot, then a newer one 1 s later: the newer is
		// applied at once and the timer is not asked for again.
		fail.Store(true)
		src <- []WorkerSpec{worker(1, "http://b")}
		synctest.Wait()
		fail.Store(false)
		now.Add(int64(time.Second))
		src <- []WorkerSpec{worker(2, "http://c")}
		synctest.Wait()
		if lifecycleOf(s, 1) != "" || lifecycleOf(s, 2) != Schedulable || len(timer.asked) != 2 {
			t.Fatalf("after the newer snapshot: 1 %q, 2 %q, timer asked %v", lifecycleOf(s, 1), lifecycleOf(s, 2), timer.asked)
		}
		if _, err := s.UpsertWorker(&WorkerSpec{WorkerID: 3}); ClassOf(err) != ErrConflict {
			t.Fatalf("a public upsert while the source owns the catalog: %v", err)
		}

		// The source stops: fail closed, and Run returns.
		close(src)
		synctest.Wait()
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		if n := len(s.ListWorkers("", "")); n != 0 || !r.Stats().Stopped {
			t.Fatalf("after the source stopped: %d workers, %+v", n, r.Stats())
		}
		r.Close()
		if _, err := s.UpsertWorker(&WorkerSpec{WorkerID: 3}); err != nil {
			t.Fatalf("after Close: %v", err)
		}
	})
}

// TestReconcilerRunCancel: a cancelled Run (shutdown) keeps the catalog.
func TestReconcilerRunCancel(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cfg := DefaultConfig()
		cfg.UseKVEvents = false
		s, err := New(cfg, Options{})
		if err != nil {
			t.Fatal(err)
		}
		r, err := NewCatalogReconciler(s, ReconcilerConfig{})
		if err != nil {
			t.Fatal(err)
		}
		src := make(chanSource, 1)
		src <- []WorkerSpec{worker(1, "http://a")}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- r.Run(ctx, src) }()
		synctest.Wait()
		cancel()
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		if lifecycleOf(s, 1) != Schedulable || r.Stats().Stopped {
			t.Fatalf("after cancel: %s, %+v", lifecycleOf(s, 1), r.Stats())
		}
	})
}

// TestReconcilerLogf: the reference's warnings reach Logf: a record not
// schedulable, a failed upsert and the failed pass's retry.
func TestReconcilerLogf(t *testing.T) {
	cfg := DefaultConfig()
	cfg.UseKVEvents = false
	s, err := New(cfg, Options{})
	if err != nil {
		t.Fatal(err)
	}
	s.failUpsert = func(id uint64) error {
		if id == 2 {
			return errorf(ErrInternal, "test hook")
		}
		return nil
	}
	var logs []string
	r, err := NewCatalogReconciler(s, ReconcilerConfig{Logf: func(f string, a ...any) { logs = append(logs, fmt.Sprintf(f, a...)) }})
	if err != nil {
		t.Fatal(err)
	}
	_ = r.Offer([]WorkerSpec{{WorkerID: 1}, worker(2, "http://b")}, time.Unix(0, 0))
	want := []string{
		"worker 1 upserted but not schedulable (incomplete: endpoint is required; block_size must be greater than 0); retrying on the next membership snapshot",
		"worker 2 upsert failed; continuing the pass: test hook",
		"membership reconcile failed; retrying in 5s: test hook",
	}
	if strings.Join(logs, "\n") != strings.Join(want, "\n") {
		t.Fatalf("logs:\n%s\nwant:\n%s", strings.Join(logs, "\n"), strings.Join(want, "\n"))
	}
}
