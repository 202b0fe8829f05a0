package httpapi

import (
	"strings"
	"testing"
)

// TestPoolsDropHugeRequests: a request that grew past maxPooledBytes is not
// returned to its pool, so one 8 MiB body does not pin 8 MiB per P for the
// process's life, while ordinary requests are. (The predicate is tested, not
// sync.Pool, which drops items at random under the race detector.)
func TestPoolsDropHugeRequests(t *testing.T) {
	var small, huge selectReq
	// 4 KiB of escapes grow the scanner's unescape buffer to 4 KiB.
	if err := decodeSelect([]byte(`{"model_name":"`+strings.Repeat(`\n`, 4096)+`"}`), &small); err != nil {
		t.Fatal(err)
	}
	if small.sc.Retained() < 4096 {
		t.Fatalf("the scanner retains %d bytes, want >= 4096", small.sc.Retained())
	}
	small.req.TokenIDs = make([]uint32, 0, 8192)
	huge.req.BlockHashes = make([]uint64, 0, maxPooledBytes/8+1)
	if small.retained() > maxPooledBytes {
		t.Fatalf("an ordinary request (%d bytes) would not be pooled", small.retained())
	}
	if huge.retained() <= maxPooledBytes {
		t.Fatalf("a request retaining %d bytes would be pooled", huge.retained())
	}
	var r reserveReq
	r.req.SequenceHashes = make([]uint64, 0, maxPooledBytes/8+1)
	if r.retained() <= maxPooledBytes {
		t.Fatal("a huge reservation request would be pooled")
	}
}
