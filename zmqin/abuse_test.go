package zmqin

import (
	"strings"
	"testing"

	"github.com/kvselect/kvselect/core"
	"github.com/kvselect/kvselect/radix"
)

// Tests of hostile publishers, each a raw ZMTP peer on loopback TCP that
// writes the exact bytes of the abuse.

// TestUndecodableBatchesCountedOnce: a publisher that sends undecodable
// payloads under consecutive seqs loses nothing (no gap, no missed batch):
// each is received and counted as a decode error once. Missing seqs around
// them are counted once each. (The watermark used to stay put on a decode
// error, so the n-th garbage batch counted the n-1 before it as missing
// again: 1,000 garbage batches made MissedBatches 499,500.)
func TestUndecodableBatchesCountedOnce(t *testing.T) {
	checkNoLeak(t)
	peer := newRawPeer(t)
	in := newIngress(t, testConfig())
	sink := newIndexSink(t)
	in.Sync(1, testBlockSize, []core.RankSource{{Endpoint: peer.endpoint()}}, sink)
	c := peer.next(t)
	garbage := []byte{0xc1} // a msgpack lead byte that is never valid
	enc := Encoder{}
	var stream []byte
	const n = 1000
	for seq := range uint64(n) {
		stream = append(stream, rawLive(seq, garbage)...)
	}
	// Then: seqs 1000..1003 missing, 1004 garbage, 1005..1006 missing,
	// 1007 valid.
	stream = append(stream, rawLive(n+4, garbage)...)
	toks := tokens(1, 1)
	stream = append(stream, rawLive(n+7, enc.AppendBatch(nil, stored(0, []uint64{1}, toks)))...)
	if err := c.send(stream); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the valid batch", func() bool { return sink.depth(radix.WorkerKey{WorkerID: 1}, toks) == 1 })
	s := in.Stats()
	if s.DecodeErrors != n+1 || s.MissedBatches != 6 || s.Gaps != 2 || s.BatchesApplied != 1 || s.Stale != 0 {
		t.Fatalf("stats %+v", s)
	}
	st := status(in, 1)[0]
	if st.LastSeq != n+7 || st.Gaps != 2 || !strings.Contains(st.LastError, "malformed") {
		t.Fatalf("status %+v", st)
	}
}
