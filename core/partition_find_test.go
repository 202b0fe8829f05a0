package core

import (
	"testing"

	"github.com/kvselect/kvselect/sched"
)

// TestSnapshotFind: find returns a worker's index in the sorted rows, or
// -1, for every size and every id present, between, below and above.
func TestSnapshotFind(t *testing.T) {
	for n := range 20 {
		sn := &snapshot{}
		for i := range n {
			sn.workers = append(sn.workers, sched.Worker{ID: uint64(3*i + 1)})
		}
		for id := range uint64(3*n + 3) {
			want := -1
			for i, w := range sn.workers {
				if w.ID == id {
					want = i
				}
			}
			if got := sn.find(id); got != want {
				t.Fatalf("%d rows: find(%d) = %d, want %d", n, id, got, want)
			}
		}
	}
}
