package zmqin

import (
	"testing"

	"github.com/kvselect/kvselect/radix"
)

// TestEvBufPoolBound: an event buffer that grew past maxPooledEvBytes (a
// batch copied from a huge message) would not be pooled; ordinary ones
// would. (The predicate is tested: sync.Pool drops items at random under
// the race detector.)
func TestEvBufPoolBound(t *testing.T) {
	small := &evBuf{blocks: make([]radix.Block, 0, 256), hashes: make([]uint64, 0, 64)}
	if small.retained() > maxPooledEvBytes {
		t.Fatalf("an ordinary buffer (%d bytes) would not be pooled", small.retained())
	}
	huge := &evBuf{blocks: make([]radix.Block, 0, maxPooledEvBytes/16+1)}
	if huge.retained() <= maxPooledEvBytes {
		t.Fatalf("a buffer retaining %d bytes would be pooled", huge.retained())
	}
}
