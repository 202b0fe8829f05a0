package zmqin

import (
	"sync"
	"testing"

	"github.com/kvselect/kvselect/core"
	"github.com/kvselect/kvselect/radix"
)

// manyRemoved is a batch of k BlockRemoved events of one hash each: about
// 15 bytes an event on the wire, over 100 decoded.
func manyRemoved(first uint64, k int) *WireBatch {
	b := &WireBatch{Timestamp: 2.5}
	for i := range k {
		b.Events = append(b.Events, WireEvent{Kind: radix.Removed, BlockHashes: []uint64{first + uint64(i)}, Medium: "GPU"})
	}
	return b
}

// TestWriterQueueBytesBound: with a stuck sink, a writer whose batch count
// limit is far away holds decoded batches only up to its byte bound; the
// rest wait in the rank's queue (payload bytes, bounded by MaxQueueBytes)
// and nothing is lost. Without the bound all of them would sit decoded in
// the writer's queue, several times their wire size, and the rank queue
// would be empty.
func TestWriterQueueBytesBound(t *testing.T) {
	checkNoLeak(t)
	cfg := testConfig()
	cfg.Writers, cfg.WriterQueue, cfg.MaxWriterQueueBytes = 1, 1000, 256<<10
	in := newIngress(t, cfg)
	sink := newIndexSink(t)
	sink.Gate = make(chan struct{})
	openGate := sync.OnceFunc(func() { close(sink.Gate) })
	t.Cleanup(openGate) // before the ingress closes (cleanups run in reverse)
	peer := newRawPeer(t)
	in.Sync(1, testBlockSize, []core.RankSource{{Endpoint: peer.Endpoint()}}, sink)
	const n, k = 40, 500
	var stream []byte
	for seq := range uint64(n) {
		stream = append(stream, rawLive(seq, Encoder{}.AppendBatch(nil, manyRemoved(seq<<20, k)))...)
	}
	if err := peer.Next(t).Send(stream); err != nil {
		t.Fatal(err)
	}
	check := func() Stats {
		t.Helper()
		s := in.Stats()
		if s.WriterQueueBytes < 0 || s.WriterQueueBytes > s.WriterQueueBytesLimit {
			t.Fatalf("writer holds %d bytes, limit %d", s.WriterQueueBytes, s.WriterQueueBytesLimit)
		}
		return s
	}
	// Each batch decodes to about 60 KiB (k events of some 120 bytes), so
	// the writer fills up to its 256 KiB with 4 of them and the listener
	// waits with the fifth: the other 35 stay queued as payload, the
	// waiting one counted too.
	waitFor(t, "the writer full and the rank queue backed up", func() bool {
		s := check()
		return s.WriterQueueBytes > s.WriterQueueBytesLimit-k*130 && s.QueueDepth >= n-4
	})
	if s := check(); s.Overflow != 0 || s.BatchesApplied != 0 {
		t.Fatalf("stats %+v", s)
	}
	openGate()
	waitFor(t, "drained", func() bool {
		s := check()
		return s.BatchesApplied == n && s.QueueDepth == 0 && s.WriterQueueBytes == 0
	})
	if s := in.Stats(); s.Overflow != 0 || s.Gaps != 0 || s.EventsApplied != n*k || s.WriterQueueBytesLimit != 256<<10 {
		t.Fatalf("stats %+v", s)
	}
}
