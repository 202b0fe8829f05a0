package radix

import "testing"

// maxBytesPerBlock bounds the live heap of the index per device (worker,
// block) pair, by shape: when the workers share their blocks' nodes and
// when every worker's blocks are its own (see memShape); doc.go has the
// measured values. Each bound is 0.6 to 1.3 bytes over the numbers at the
// test's sizes (14.2 to 14.5 shared, 24.5 to 24.9 distinct, across runs,
// -race and -tags invariants): one more byte in every lookup slot (1.3 to
// 2.4 bytes per pair here) fails all four shapes.
const (
	maxBytesPerBlockShared   = 15.5
	maxBytesPerBlockDistinct = 25.5
)

// TestMemoryPerBlock checks maxBytesPerBlock the way BenchmarkMemory
// measures (live heap after a full GC, before and after building) at two
// smaller sizes, 61 K and 127 K pairs, in both shapes. The lower bound
// catches a broken measurement: every pair holds at least its 8-byte
// external hash. The race detector keeps its shadow memory outside the Go
// heap, so the numbers are the same with -race.
func TestMemoryPerBlock(t *testing.T) {
	for _, s := range []memShape{
		{workers: 64, convs: 7, shared: true},
		{workers: 64, convs: 7, shared: false},
		{workers: 64, convs: 15, shared: true},
		{workers: 64, convs: 15, shared: false},
	} {
		per, n := heapPerBlock(t, s)
		t.Logf("%+v: %d pairs, %.1f bytes each", s, n, per)
		bound := float64(maxBytesPerBlockDistinct)
		if s.shared {
			bound = maxBytesPerBlockShared
		}
		if per > bound || per < 8 {
			t.Errorf("%+v: %.1f bytes per (worker, block), want 8 to %.1f", s, per, bound)
		}
	}
}
