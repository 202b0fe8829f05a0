package sched

import (
	"errors"
	"math"
	"testing"
	"time"
)

// TestHandleActsOnlyOnItsBooking: a lifecycle call through the handle of a
// booking that was freed is a no-op reporting "not live", even when the id
// has been booked again since (the newer booking keeps its prefill, blocks
// and request count); the newer booking's own handle still works.
func TestHandleActsOnlyOnItsBooking(t *testing.T) {
	tr := newTracker(t, nil)
	w := tr.AddWorker(wk(1, 0))
	seq := chain(seqN(1, 4))
	old, err := tr.BookHandle(&Booking{RequestID: "a", Worker: w.Key(), SequenceHashes: seq, PrefillTokens: 100, AssumeKVReuse: true}, t0)
	must(t, err)
	if old.Worker() != w.Key() || !tr.Live(old) {
		t.Fatalf("handle: worker %v live %v", old.Worker(), tr.Live(old))
	}
	if !tr.Free("a") {
		t.Fatal("Free(a) = false")
	}
	cur, err := tr.BookHandle(&Booking{RequestID: "a", Worker: w.Key(), SequenceHashes: seq, PrefillTokens: 50, AssumeKVReuse: true}, t0)
	must(t, err)
	want := Loads{PrefillTokens: 50, Blocks: 4, Requests: 1}
	wantLoads(t, w, want)

	if tr.Live(old) {
		t.Error("the freed booking's handle reports live")
	}
	if tr.PrefillCompleteHandle(old) {
		t.Error("PrefillCompleteHandle(old) = true")
	}
	if err := tr.OutputBlockHandle(old, nil); !errors.Is(err, ErrRequestNotFound) {
		t.Errorf("OutputBlockHandle(old) = %v, want ErrRequestNotFound", err)
	}
	if tr.FreeHandle(old) {
		t.Error("FreeHandle(old) = true")
	}
	wantLoads(t, w, want)
	if _, ok := tr.Lookup("a"); !ok {
		t.Fatal("the newer booking left the index")
	}
	if tr.FreeHandle(Handle{}) || tr.PrefillCompleteHandle(Handle{}) || tr.Live(Handle{}) {
		t.Error("the zero Handle acts")
	}

	if !tr.PrefillCompleteHandle(cur) || !tr.PrefillCompleteHandle(cur) {
		t.Fatal("PrefillCompleteHandle(cur) must report true, twice")
	}
	must(t, tr.OutputBlockHandle(cur, nil))
	wantLoads(t, w, Loads{Blocks: 5, Requests: 1})
	if !tr.FreeHandle(cur) || tr.FreeHandle(cur) || tr.Free("a") {
		t.Fatal("FreeHandle(cur) must report true once, then the id is gone")
	}
	wantLoads(t, w, Loads{})
	checkInvariants(t, tr)
	if st := tr.Stats(); st.Freed != 2 || st.ActiveRequests != 0 {
		t.Errorf("stats %+v, want 2 freed, 0 active", st)
	}
}

// TestExpireSparesANewerBooking: Expire frees the expired booking it found,
// not a newer booking of the same id made while it ran. Deterministic: the
// expired row is freed and the id rebooked from inside Expire's range via
// the test hook.
func TestExpireSparesANewerBooking(t *testing.T) {
	tr := newTracker(t, nil)
	w := tr.AddWorker(wk(1, 0))
	must(t, tr.Book(&Booking{RequestID: "a", Worker: w.Key(), PrefillTokens: 7}, t0))
	later := t0.Add(time.Duration(tr.expiry) + 1)
	tr.nextExpiry.Store(math.MaxInt64) // no lazy expiry inside the hook's Book
	ran := false
	tr.beforeExpireFree = func(id string) {
		if ran {
			return
		}
		ran = true
		tr.Free(id)
		must(t, tr.Book(&Booking{RequestID: id, Worker: w.Key(), PrefillTokens: 9}, later))
	}
	if n := tr.Expire(later); n != 0 {
		t.Errorf("Expire freed %d, want 0 (the expired booking was already freed)", n)
	}
	if !ran {
		t.Fatal("hook did not run")
	}
	wantLoads(t, w, Loads{PrefillTokens: 9, Requests: 1})
}
