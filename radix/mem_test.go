package radix

import "testing"

// maxBytesPerBlock bounds the live heap of the index per device (worker,
// block) pair; doc.go has the measured values.
const maxBytesPerBlock = 40

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
		if per > maxBytesPerBlock || per < 8 {
			t.Errorf("%+v: %.1f bytes per (worker, block), want 8 to %d", s, per, maxBytesPerBlock)
		}
	}
}
