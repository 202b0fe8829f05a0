//go:build invariants

package radix

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

// mustPanicWith runs f and fails unless it panics with a broken-invariant
// BUG whose message contains want.
func mustPanicWith(t *testing.T, want string, f func()) {
	t.Helper()
	defer func() {
		t.Helper()
		msg := fmt.Sprint(recover())
		if !strings.HasPrefix(msg, "BUG: radix: invariant violated: ") || !strings.Contains(msg, want) {
			t.Fatalf("panic %q, want a broken invariant naming %q", msg, want)
		}
	}()
	f()
}

// TestMutationsRunTheChecks: built with -tags invariants, the mutation
// that follows a corruption panics with the corruption's error. The store
// is another worker's, so it does not touch what was corrupted.
func TestMutationsRunTheChecks(t *testing.T) {
	for _, c := range corruptions {
		t.Run(c.name, func(t *testing.T) {
			ix, s := corruptible(t)
			c.corrupt(t, s)
			mustPanicWith(t, c.want, func() { ix.Apply(chainStore(WorkerKey{WorkerID: 9}, TierDevice, 0, 900, 9000, 2)) })
		})
	}
}

// TestEveryMutationRunsTheChecks: every way to change an Index or an
// Approx runs the checks. Each case corrupts a count that the mutation
// does not recompute (worker 2's held count; the timers' live count).
func TestEveryMutationRunsTheChecks(t *testing.T) {
	w3, w9 := WorkerKey{WorkerID: 3}, WorkerKey{WorkerID: 9}
	for name, mutate := range map[string]func(ix *Index){
		"store":         func(ix *Index) { ix.Apply(chainStore(w9, TierDevice, 0, 900, 9000, 2)) },
		"store host":    func(ix *Index) { ix.Apply(chainStore(w9, TierHostPinned, 0, 900, 9000, 2)) },
		"remove":        func(ix *Index) { ix.Apply(&Event{Worker: w3, Kind: Removed, Hashes: []uint64{302}}) },
		"clear":         func(ix *Index) { ix.Apply(&Event{Worker: w3, Kind: Cleared}) },
		"batch":         func(ix *Index) { ix.ApplyBatch([]Event{*chainStore(w9, TierDevice, 0, 900, 9000, 2)}) },
		"restore":       func(ix *Index) { ix.Restore([]Event{*chainStore(w9, TierDevice, 0, 900, 9000, 2)}) },
		"remove worker": func(ix *Index) { ix.RemoveWorker(3) },
	} {
		t.Run(name, func(t *testing.T) {
			ix, s := corruptible(t)
			s.held[WorkerKey{WorkerID: 2}]++
			mustPanicWith(t, "held", func() { mutate(ix) })
		})
	}
	now := time.Unix(1_700_000_000, 0)
	for name, mutate := range map[string]func(a *Approx){
		"record":        func(a *Approx) { a.Record(w9, []uint64{7, 8}, now) },
		"expire":        func(a *Approx) { a.Expire(now) },
		"clear rank":    func(a *Approx) { a.ClearRank(w3) },
		"remove worker": func(a *Approx) { a.RemoveWorker(3) },
		"restore":       func(a *Approx) { a.Restore(chainStore(w9, TierDevice, 0, 900, 9000, 2), now) },
	} {
		t.Run("approx "+name, func(t *testing.T) {
			a, _ := NewApprox(ApproxConfig{TTL: time.Minute})
			a.Record(w3, []uint64{1, 2, 3}, now)
			a.mu.Lock()
			a.mu.t.live++
			a.mu.Unlock()
			mustPanicWith(t, "live", func() { mutate(a) })
		})
	}
}
