package zmqin

import (
	"bytes"
	"encoding/binary"
	"strings"
	"sync"
	"testing"

	"github.com/kvselect/kvselect/core"
	"github.com/kvselect/kvselect/radix"
	"github.com/kvselect/kvselect/zmqin/zmtp"
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
	in.Sync(1, testBlockSize, []core.RankSource{{Endpoint: peer.Endpoint()}}, sink)
	c := peer.Next(t)
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
	if err := c.Send(stream); err != nil {
		t.Fatal(err)
	}
	// The writer counts a batch applied just after the index shows it:
	// wait for both.
	waitFor(t, "the valid batch", func() bool {
		return sink.Depth(radix.WorkerKey{WorkerID: 1}, toks) == 1 && in.Stats().BatchesApplied == 1
	})
	s := in.Stats()
	if s.DecodeErrors != n+1 || s.MissedBatches != 6 || s.Gaps != 2 || s.BatchesApplied != 1 || s.Stale != 0 {
		t.Fatalf("stats %+v", s)
	}
	st := status(in, 1)[0]
	if st.LastSeq != n+7 || st.Gaps != 2 || !strings.Contains(st.LastError, "malformed") {
		t.Fatalf("status %+v", st)
	}
}

// TestMessageLimits: a publisher that breaks a message limit loses its
// connection at the header of the offending frame, before its body is
// sent (the peer never sends it, so a listener that waited for it would
// keep the connection): an unterminated message (past the hard budget of
// DefaultHardFrames frames; a flood of empty frames), a message whose
// frames together exceed MaxMessageSize (frames past the third count,
// though discarded), a frame over MaxFrameSize. The drop is counted by reason, its reason is
// the rank's LastError, and the listener redials and goes on. (zmq4's
// RecvMsg kept every frame of an unterminated message: forty 60 MiB frames
// flagged MORE took the process from 137 MB to 2.4 GB, the listener still
// live and no counter moving.)
func TestMessageLimits(t *testing.T) {
	const kib = 1 << 10
	more := func(body []byte) []byte { return rawFrame(true, body) }
	seq0 := make([]byte, SeqLen)
	for _, tc := range []struct {
		name   string
		abuse  []byte
		want   func(Stats) uint64
		errSub string
	}{
		{"frame past the hard budget", cat(more([]byte("kv")), more(seq0), bytes.Repeat(more([]byte{0x90}), zmtp.DefaultHardFrames-2), rawFrameHeader(false, 32*kib)),
			func(s Stats) uint64 { return s.TooManyFrames }, "too many frames"},
		{"discarded frames too large", cat(more([]byte("kv")), more(seq0), more([]byte{0x90}), more(make([]byte, 40*kib)), rawFrameHeader(true, 40*kib)),
			func(s Stats) uint64 { return s.MessageTooLarge }, "message too large"},
		{"empty frame flood", bytes.Repeat(rawFrameHeader(true, 0), 100000),
			func(s Stats) uint64 { return s.TooManyFrames }, "too many frames"},
		{"message too large", cat(more(make([]byte, 40*kib)), rawFrameHeader(true, 40*kib)),
			func(s Stats) uint64 { return s.MessageTooLarge }, "message too large"},
		{"frame too large", rawFrameHeader(false, 48*kib+1),
			func(s Stats) uint64 { return s.FrameTooLarge }, "frame too large"},
		{"huge frame", rawFrameHeader(true, 1<<62),
			func(s Stats) uint64 { return s.FrameTooLarge }, "frame too large"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			checkNoLeak(t)
			peer := newRawPeer(t)
			cfg := testConfig()
			cfg.MaxFrameSize, cfg.MaxMessageSize = 48*kib, 64*kib
			in := newIngress(t, cfg)
			sink := newIndexSink(t)
			in.Sync(1, testBlockSize, []core.RankSource{{Endpoint: peer.Endpoint()}}, sink)
			c := peer.Next(t)
			_ = c.Send(tc.abuse) // the listener may close before all is written
			c.AwaitClosed(t)
			waitFor(t, "the drop counted", func() bool { return tc.want(in.Stats()) == 1 })
			s := in.Stats()
			if s.RecvErrors != 1 || s.TooManyFrames+s.MessageTooLarge+s.FrameTooLarge != 1 || s.BadFrames != 0 {
				t.Fatalf("stats %+v", s)
			}
			if st := status(in, 1)[0]; !strings.Contains(st.LastError, tc.errSub) {
				t.Fatalf("status %+v", st)
			}
			// Redialed: a good batch on the new connection is applied.
			c = peer.Next(t)
			toks := tokens(1, 1)
			if err := c.Send(rawLive(0, Encoder{}.AppendBatch(nil, stored(0, []uint64{1}, toks)))); err != nil {
				t.Fatal(err)
			}
			waitFor(t, "a batch after the redial", func() bool { return sink.Depth(radix.WorkerKey{WorkerID: 1}, toks) == 1 })
			if st := status(in, 1)[0]; st.State != "live" {
				t.Fatalf("status %+v", st)
			}
		})
	}
}

// TestReplayLimits: a replay ROUTER that answers with a message of more
// frames than a replay reply has fails the replay (counted, as an
// extra-frames drop too) and live processing goes on.
func TestReplayLimits(t *testing.T) {
	checkNoLeak(t)
	pub := newRawPeer(t)
	router := newRawPeerType(t, "ROUTER")
	in := newIngress(t, testConfig())
	sink := newIndexSink(t)
	in.Sync(1, testBlockSize, []core.RankSource{{Endpoint: pub.Endpoint(), ReplayEndpoint: router.Endpoint()}}, sink)
	c := pub.Next(t)
	enc := Encoder{}
	toks := tokens(500, 1)
	if err := c.Send(cat(rawLive(0, enc.AppendBatch(nil, stored(0, []uint64{1}, tokens(1, 1)))),
		rawLive(2, enc.AppendBatch(nil, stored(0, []uint64{3}, toks))))); err != nil {
		t.Fatal(err)
	}
	r := router.Accept(t)
	req, err := r.ReadMsg()
	if err != nil || len(req) != 2 || len(req[0]) != 0 || string(req[1]) != string([]byte{0, 0, 0, 0, 0, 0, 0, 1}) {
		t.Fatalf("replay request %q %v", req, err)
	}
	seq1 := []byte{0, 0, 0, 0, 0, 0, 0, 1}
	_ = r.Send(cat(rawFrame(true, nil), rawFrame(true, []byte("kv")), rawFrame(true, seq1), rawFrame(true, []byte{0x90}), rawFrame(false, make([]byte, 100))))
	r.AwaitClosed(t)
	w := radix.WorkerKey{WorkerID: 1}
	waitFor(t, "the live batch after the failed replay", func() bool { return sink.Depth(w, toks) == 1 })
	s := in.Stats()
	if s.Replays != 1 || s.ReplayFailures != 1 || s.ExtraFrames != 1 || s.TooManyFrames != 0 || s.Gaps != 1 || s.MissedBatches != 1 || s.RecvErrors != 0 {
		t.Fatalf("stats %+v", s)
	}
	if st := status(in, 1)[0]; !strings.Contains(st.LastError, "extra frames") {
		t.Fatalf("status %+v", st)
	}
}

// paddedBatch is a valid batch of one BlockStored of hash h over toks,
// made pad bytes longer by a trailing bin element (the decoder ignores
// elements past the rank).
func paddedBatch(t testing.TB, h uint64, toks []uint32, pad int) []byte {
	b := Encoder{}.AppendBatch(nil, stored(0, []uint64{h}, toks))
	if b[0] != 0x93 {
		t.Fatalf("batch header %#x", b[0])
	}
	b[0] = 0x94
	b = append(b, 0xc6)
	b = binary.BigEndian.AppendUint32(b, uint32(pad))
	return append(b, make([]byte, pad)...)
}

// TestQueueBytesBound: with a stuck sink, big valid batches fill the
// rank queues by bytes long before their message count limit: each rank
// holds at most MaxQueueBytes, all ranks together at most
// MaxTotalQueueBytes; the excess is counted as Overflow and shows as gaps
// once the sink moves. (The queues used to be bounded by count only: 1,024
// messages of up to 64 MiB per rank; forty 53 MiB batches took the process
// to 4.7 GB with no overflow counted.)
func TestQueueBytesBound(t *testing.T) {
	checkNoLeak(t)
	const kib = 1 << 10
	cfg := testConfig()
	cfg.Writers, cfg.WriterQueue = 1, 1
	cfg.MaxMessageSize, cfg.MaxQueueBytes, cfg.MaxTotalQueueBytes = 64*kib, 128*kib, 192*kib
	in := newIngress(t, cfg)
	sink := newIndexSink(t)
	sink.Gate = make(chan struct{})
	// Cleanups run last-in first-out: the gate opens before the ingress
	// closes, so a failure below ends the test instead of hanging Close.
	openGate := sync.OnceFunc(func() { close(sink.Gate) })
	t.Cleanup(openGate)
	peers := []*rawPeer{newRawPeer(t), newRawPeer(t)}
	for i, p := range peers {
		in.Sync(uint64(i+1), testBlockSize, []core.RankSource{{Endpoint: p.Endpoint()}}, sink)
	}
	const n = 20 // per rank
	const pad = 60 * kib
	conns := make([]*rawConn, len(peers))
	sent := make(chan error, len(peers))
	for i, p := range peers {
		var stream []byte
		for seq := range uint64(n) {
			stream = append(stream, rawLive(seq, paddedBatch(t, uint64(i)<<32|seq+1, tokens(uint32(100*seq), 1), pad))...)
		}
		conns[i] = p.Next(t)
		go func() { sent <- conns[i].Send(stream) }() // blocks while the listener's socket buffer is full
	}
	var last Stats // for the failure message
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("last stats %+v", last)
		}
	})
	check := func() Stats {
		s := in.Stats()
		if s.QueueBytes > s.QueueBytesLimitTotal || s.QueueBytes < 0 {
			t.Fatalf("queued bytes %d outside [0, %d]", s.QueueBytes, s.QueueBytesLimitTotal)
		}
		return s
	}
	// At most 7 batches held: 2 with the writer (applying, queued), one in
	// each rank's processor, and 3 queued (2 per rank by the 128 KiB rank
	// limit, 3 in all by the 192 KiB total): the rest overflows.
	waitFor(t, "overflow by bytes", func() bool {
		s := check()
		if s.Overflow < 2*n-7 {
			last = s
			return false
		}
		return true
	})
	if s := check(); s.QueueDepth > 4 || s.QueueBytes > 3*(pad+kib) {
		t.Fatalf("stats %+v", s)
	}
	openGate()
	waitFor(t, "drained", func() bool {
		s := check()
		return s.BatchesApplied+s.Overflow == 2*n && s.QueueBytes == 0 && s.QueueDepth == 0
	})
	for range conns {
		if err := <-sent; err != nil {
			t.Fatal(err)
		}
	}
	// One more batch per rank shows a trailing overflow as a gap.
	for i, c := range conns {
		if err := c.Send(rawLive(n, paddedBatch(t, uint64(i)<<32|1<<31, tokens(1<<20, 1), 0))); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, "all accounted", func() bool {
		s := in.Stats()
		return s.BatchesApplied+s.Overflow == 2*n+2 && s.QueueBytes == 0
	})
	s := in.Stats()
	if s.MissedBatches != s.Overflow || s.Gaps == 0 || s.QueueBytesLimit != 128*kib || s.QueueBytesLimitTotal != 192*kib {
		t.Fatalf("overflow not seen as gaps: %+v", s)
	}
}

// TestBadFramesSkipped: messages that are not [topic, seq(8), payload]
// are counted and skipped, an undecodable payload is counted, and the
// stream goes on without a gap.
func TestBadFramesSkipped(t *testing.T) {
	checkNoLeak(t)
	peer := newRawPeer(t)
	in := newIngress(t, testConfig())
	sink := newIndexSink(t)
	in.Sync(1, testBlockSize, []core.RankSource{{Endpoint: peer.Endpoint()}}, sink)
	c := peer.Next(t)
	toks := tokens(1, 1)
	if err := c.Send(cat(
		rawMsg([]byte("only-one-frame")),
		rawMsg(nil, []byte{1, 2, 3}, []byte{0x90}),  // 3-byte seq
		rawMsg(nil, []byte{0, 0, 0, 0, 0, 0, 0, 0}), // 2 frames
		rawLive(0, []byte{0xc1}),                    // undecodable payload
		rawLive(1, Encoder{}.AppendBatch(nil, stored(0, []uint64{1}, toks))),
	)); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "good batch", func() bool { return sink.Depth(radix.WorkerKey{WorkerID: 1}, toks) == 1 })
	if s := in.Stats(); s.BadFrames != 3 || s.DecodeErrors != 1 || s.Gaps != 0 || s.RecvErrors != 0 {
		t.Fatalf("stats %+v", s)
	}
}

// TestGapCountedOnceAfterShortReplay: after a reconnection, rule 2
// replays from the watermark, confirms the incarnation and counts the gap
// up to the first live seq; a replay that ends short of that seq leaves
// the rest missing, counted once, and does not replay again.
func TestGapCountedOnceAfterShortReplay(t *testing.T) {
	checkNoLeak(t)
	pub := newRawPeer(t)
	router := newRawPeerType(t, "ROUTER")
	in := newIngress(t, testConfig())
	sink := newIndexSink(t)
	in.Sync(1, testBlockSize, []core.RankSource{{Endpoint: pub.Endpoint(), ReplayEndpoint: router.Endpoint()}}, sink)
	w := radix.WorkerKey{WorkerID: 1}
	batch := func(i uint64) []byte {
		return Encoder{}.AppendBatch(nil, stored(0, []uint64{i + 1}, tokens(uint32(100*i), 1)))
	}
	c := pub.Next(t)
	if err := c.Send(rawLive(0, batch(0))); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "seq 0", func() bool { return sink.Depth(w, tokens(0, 1)) == 1 })
	_ = c.Close()
	c = pub.Next(t)
	if err := c.Send(rawLive(5, batch(5))); err != nil {
		t.Fatal(err)
	}
	r := router.Accept(t)
	req, err := r.ReadMsg()
	if err != nil || len(req) != 2 || string(req[1]) != string(make([]byte, 8)) {
		t.Fatalf("replay request %q %v", req, err)
	}
	reply := func(seq uint64, payload []byte) []byte {
		return rawMsg(nil, []byte("kv"), binary.BigEndian.AppendUint64(nil, seq), payload)
	}
	end := rawMsg(nil, nil, []byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff}, nil)
	if err := r.Send(cat(reply(0, batch(0)), reply(1, batch(1)), reply(2, batch(2)), end)); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "seq 5", func() bool { return sink.Depth(w, tokens(500, 1)) == 1 })
	s := in.Stats()
	if s.Gaps != 1 || s.MissedBatches != 4 || s.Replays != 1 || s.ReplayedBatches != 2 || s.Restarts != 0 || s.ReplayFailures != 0 {
		t.Fatalf("stats %+v", s)
	}
	if sink.Depth(w, tokens(200, 1)) != 1 || sink.Depth(w, tokens(300, 1)) != 0 {
		t.Fatal("replayed batches not applied as answered")
	}
}
