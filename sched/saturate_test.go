package sched

import (
	"fmt"
	"math"
	"sync"
	"testing"
)

// TestPrefillCounterSaturates: huge prefill bookings (a client's isl_tokens
// or effective_prefill_tokens) never wrap A_p: it only grows while booking,
// stops at MaxActivePrefillTokens, never goes negative, and returns to zero
// once everything is completed or freed. A duplicate booking leaves it as
// it was.
func TestPrefillCounterSaturates(t *testing.T) {
	tr := newTracker(t, nil)
	w := tr.AddWorker(wk(1, 0))
	huge := []int64{math.MaxInt64, 1 << 62, math.MaxInt64, 1 << 62, math.MaxInt64}
	must(t, tr.Book(&tbook{RequestID: "small", Worker: w.Key(), PrefillTokens: 1000}, t0))
	prev := w.c.prefillTokens.Load()
	for i, p := range huge {
		must(t, tr.Book(&tbook{RequestID: fmt.Sprint("h", i), Worker: w.Key(), PrefillTokens: p}, t0))
		got := w.c.prefillTokens.Load()
		if got < prev || got > MaxActivePrefillTokens {
			t.Fatalf("after booking %d: A_p %d (before %d), want in [before, %d]", p, got, prev, int64(MaxActivePrefillTokens))
		}
		prev = got
	}
	if prev != MaxActivePrefillTokens {
		t.Fatalf("A_p = %d, want saturated at %d", prev, int64(MaxActivePrefillTokens))
	}
	if err := tr.Book(&tbook{RequestID: "h0", Worker: w.Key(), PrefillTokens: math.MaxInt64}, t0); err == nil {
		t.Fatal("duplicate booking accepted")
	}
	if got := w.c.prefillTokens.Load(); got != prev {
		t.Fatalf("a rejected duplicate moved A_p: %d, want %d", got, prev)
	}
	checkInvariants(t, tr)
	// Freeing the small booking makes room; a new huge booking fills it.
	tr.Free("small")
	if got := w.c.prefillTokens.Load(); got != MaxActivePrefillTokens-1000 {
		t.Fatalf("after freeing 1000: A_p %d", got)
	}
	must(t, tr.Book(&tbook{RequestID: "h5", Worker: w.Key(), PrefillTokens: math.MaxInt64}, t0))
	if got := w.c.prefillTokens.Load(); got != MaxActivePrefillTokens {
		t.Fatalf("refilled A_p %d", got)
	}
	checkInvariants(t, tr)
	tr.PrefillComplete("h0")
	tr.PrefillComplete("h0")
	for i := range len(huge) + 1 {
		tr.Free(fmt.Sprint("h", i))
		if got := w.c.prefillTokens.Load(); got < 0 || got > prev {
			t.Fatalf("freeing: A_p %d (before %d), want in [0, before]", got, prev)
		} else {
			prev = got
		}
	}
	wantLoads(t, w, Loads{})
	checkInvariants(t, tr)
}

// TestPrefillCounterSaturatesConcurrently: concurrent huge and small
// bookings, completions and frees on one worker keep A_p within [0,
// MaxActivePrefillTokens] at every read, and leave it at zero. Run under
// -race.
func TestPrefillCounterSaturatesConcurrently(t *testing.T) {
	tr := newTracker(t, nil)
	w := tr.AddWorker(wk(1, 0))
	const gs, per = 4, 200
	var wg sync.WaitGroup
	for g := range gs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range per {
				id := fmt.Sprint(g, "-", i)
				p := int64(100)
				if i%3 == 0 {
					p = math.MaxInt64 - int64(i)
				}
				if err := tr.Book(&tbook{RequestID: id, Worker: w.Key(), PrefillTokens: p}, t0); err != nil {
					t.Error(err)
					return
				}
				if got := w.c.prefillTokens.Load(); got < 0 || got > MaxActivePrefillTokens {
					t.Errorf("A_p %d out of [0, %d]", got, int64(MaxActivePrefillTokens))
					return
				}
				if i%2 == 0 {
					tr.PrefillComplete(id)
				}
				if i%5 != 0 {
					tr.Free(id)
				}
			}
		}()
	}
	wg.Wait()
	checkInvariants(t, tr)
	tr.reqs.Range(func(id string, _ *Slot) bool { tr.Free(id); return true })
	wantLoads(t, w, Loads{})
	if got := w.c.prefillTokens.Load(); got != 0 {
		t.Fatalf("A_p %d after freeing everything", got)
	}
}
