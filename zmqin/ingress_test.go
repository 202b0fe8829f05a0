package zmqin_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/kvselect/kvselect/core"
	"github.com/kvselect/kvselect/radix"
	"github.com/kvselect/kvselect/zmqin"
	"github.com/kvselect/kvselect/zmqin/zmqpub"
)

// TestPublisherToIndex: a Publisher's batches reach the index through a
// listener, and Match shows the overlap; removals shrink it.
func TestPublisherToIndex(t *testing.T) {
	for _, enc := range []zmqin.Encoder{{Encoding: zmqin.EncodingArray}, {Encoding: zmqin.EncodingMap}, {Encoding: zmqin.EncodingMap, Hashes: zmqin.HashBytes}, {LegacyBatch: true, Hashes: zmqin.HashSigned}} {
		t.Run(fmt.Sprintf("%d/%d/%v", enc.Encoding, enc.Hashes, enc.LegacyBatch), func(t *testing.T) {
			checkNoLeak(t)
			p := newPublisher(t, zmqpub.Config{Encoder: enc, Topic: "kv-events"})
			in := newIngress(t, testConfig())
			sink := newIndexSink(t)
			in.Sync(7, testBlockSize, []core.RankSource{{DPRank: 0, Endpoint: p.Endpoint()}}, sink)
			waitSubscribed(t, p, 1)

			w := radix.WorkerKey{WorkerID: 7}
			toks := tokens(1, 3)
			p.Publish(stored(0, []uint64{0xa1, 0xf000000000000002, 0xa3}, toks))
			waitFor(t, "3 blocks matched", func() bool { return sink.Depth(w, toks) == 3 })
			p.Publish(removed(0xa3))
			// The writer counts a batch applied just after the index shows it.
			waitFor(t, "2 blocks matched", func() bool {
				s := in.Stats()
				return sink.Depth(w, toks) == 2 && s.BatchesApplied == 2 && s.EventsApplied == 2
			})

			st := status(in, 7)
			if len(st) != 1 || st[0].State != "live" || !st[0].HasSeq || st[0].LastSeq != 1 || st[0].Batches != 2 || st[0].Gaps != 0 {
				t.Fatalf("status %+v", st)
			}
			s := in.Stats()
			if s.BatchesApplied != 2 || s.EventsApplied != 2 || s.Ranks != 1 || s.Connects != 1 || s.QueueLimit != 1024 {
				t.Fatalf("stats %+v", s)
			}
			in.Detach(7)
			if st := status(in, 7); len(st) != 0 {
				t.Fatalf("status after Detach %+v", st)
			}
		})
	}
}

// TestGapHealedByReplay: a batch lost on the way is fetched from the
// replay socket, in both reply framings, and the index ends complete.
func TestGapHealedByReplay(t *testing.T) {
	for _, legacy := range []bool{false, true} {
		t.Run(fmt.Sprintf("legacy=%v", legacy), func(t *testing.T) {
			checkNoLeak(t)
			p := newPublisher(t, zmqpub.Config{ReplayEndpoint: "tcp://127.0.0.1:0", LegacyReplay: legacy, Topic: "t"})
			in := newIngress(t, testConfig())
			sink := newIndexSink(t)
			in.Sync(3, testBlockSize, []core.RankSource{{Endpoint: p.Endpoint(), ReplayEndpoint: p.ReplayEndpoint()}}, sink)
			waitSubscribed(t, p, 1)
			w := radix.WorkerKey{WorkerID: 3}
			toks := tokens(100, 3)
			p.Publish(stored(0, []uint64{1}, toks[:4]))
			p.PublishLost(stored(1, []uint64{2}, toks[4:8])) // lost live
			p.Publish(stored(2, []uint64{3}, toks[8:]))
			waitFor(t, "3 blocks after replay", func() bool { return sink.Depth(w, toks) == 3 })
			s := in.Stats()
			if s.Gaps != 1 || s.MissedBatches != 1 || s.Replays != 1 || s.ReplayedBatches != 2 || s.ReplayFailures != 0 || s.Stale != 0 {
				// Replay answers seq 1 and 2; the live seq 2 then counts
				// as applied by replay, not stale (it is dropped before
				// apply only if it was applied already).
				t.Logf("stats %+v", s)
			}
			if s.Gaps != 1 || s.Replays != 1 || s.ReplayedBatches < 1 || s.ReplayFailures != 0 {
				t.Fatalf("stats %+v", s)
			}
			waitFor(t, "replay over", func() bool { return status(in, 3)[0].State == "live" })
			st := status(in, 3)[0]
			if st.LastSeq != 2 || st.Gaps != 1 || st.Replays != 1 {
				t.Fatalf("status %+v", st)
			}
		})
	}
}

// TestGapWithoutReplay: without a replay endpoint a gap is counted and
// the later batches still apply.
func TestGapWithoutReplay(t *testing.T) {
	checkNoLeak(t)
	p := newPublisher(t, zmqpub.Config{})
	in := newIngress(t, testConfig())
	sink := newIndexSink(t)
	in.Sync(3, testBlockSize, []core.RankSource{{Endpoint: p.Endpoint()}}, sink)
	waitSubscribed(t, p, 1)
	w := radix.WorkerKey{WorkerID: 3}
	p.Publish(stored(0, []uint64{1}, tokens(1, 1)))
	p.PublishLost(stored(0, []uint64{2}, tokens(50, 1)))
	p.Publish(stored(0, []uint64{3}, tokens(90, 1)))
	waitFor(t, "third batch", func() bool { return sink.Depth(w, tokens(90, 1)) == 1 })
	if sink.Depth(w, tokens(50, 1)) != 0 {
		t.Fatal("lost batch applied")
	}
	if s := in.Stats(); s.Gaps != 1 || s.MissedBatches != 1 || s.Replays != 0 {
		t.Fatalf("stats %+v", s)
	}
}

// TestPublisherRestartDetected: a publisher restarted at the same address
// starts again from seq 0 on a new connection; the rank is cleared, the
// watermark reset and the new incarnation's batches applied.
func TestPublisherRestartDetected(t *testing.T) {
	checkNoLeak(t)
	p1 := newPublisher(t, zmqpub.Config{})
	ep := p1.Endpoint()
	in := newIngress(t, testConfig())
	sink := newIndexSink(t)
	in.Sync(9, testBlockSize, []core.RankSource{{Endpoint: ep}}, sink)
	waitSubscribed(t, p1, 1)
	w := radix.WorkerKey{WorkerID: 9}
	old := tokens(1, 3)
	p1.Publish(stored(0, []uint64{1}, old[:4]))
	p1.Publish(stored(1, []uint64{2}, old[4:8]))
	p1.Publish(stored(2, []uint64{3}, old[8:]))
	waitFor(t, "old blocks", func() bool { return sink.Depth(w, old) == 3 })
	_ = p1.Close()

	var p2 *zmqpub.Publisher
	waitFor(t, "rebind", func() bool {
		p, err := zmqpub.New(zmqpub.Config{Endpoint: ep})
		p2 = p
		return err == nil
	})
	t.Cleanup(func() { _ = p2.Close() })
	waitSubscribed(t, p2, 1)
	fresh := tokens(500, 1)
	if seq := p2.Publish(stored(0, []uint64{77}, fresh)); seq != 0 {
		t.Fatalf("new incarnation's first seq %d", seq)
	}
	waitFor(t, "fresh block", func() bool { return sink.Depth(w, fresh) == 1 })
	if d := sink.Depth(w, old); d != 0 {
		t.Fatalf("old blocks survive the restart: depth %d", d)
	}
	st := status(in, 9)[0]
	if st.Restarts != 1 || st.LastSeq != 0 || !st.HasSeq || !strings.Contains(st.LastError, "restart") {
		t.Fatalf("status %+v", st)
	}
	if s := in.Stats(); s.Restarts != 1 || s.Stale != 0 || s.Connects != 2 || s.RecvErrors != 1 {
		t.Fatalf("stats %+v", s)
	}
}

// TestReconnectSamePublisher: a dropped connection to the same publisher
// (not a restart) resumes without clearing: later seqs are a gap, never a
// restart.
func TestReconnectSamePublisher(t *testing.T) {
	checkNoLeak(t)
	p := newPublisher(t, zmqpub.Config{})
	in := newIngress(t, testConfig())
	sink := newIndexSink(t)
	in.Sync(4, testBlockSize, []core.RankSource{{Endpoint: p.Endpoint()}}, sink)
	waitSubscribed(t, p, 1)
	w := radix.WorkerKey{WorkerID: 4}
	p.Publish(stored(0, []uint64{1}, tokens(1, 1)))
	waitFor(t, "first", func() bool { return sink.Depth(w, tokens(1, 1)) == 1 })
	// Cut every subscriber connection from the publisher side.
	p.DropSubscribers()
	waitFor(t, "resubscribed", func() bool { return in.Stats().Connects == 2 && p.Stats().Subscribers == 1 })
	p.Publish(stored(0, []uint64{2}, tokens(50, 1)))
	waitFor(t, "second", func() bool { return sink.Depth(w, tokens(50, 1)) == 1 })
	if sink.Depth(w, tokens(1, 1)) != 1 || in.Stats().Restarts != 0 || sink.Cleared.Load() != 0 {
		t.Fatalf("reconnect treated as restart: %+v", in.Stats())
	}
}

// TestResync: re-registration keeps an unchanged rank (watermark and
// blocks), replaces a changed one (blocks cleared, fresh watermark) and
// stops and clears a removed one.
func TestResync(t *testing.T) {
	checkNoLeak(t)
	pa := newPublisher(t, zmqpub.Config{})
	pb := newPublisher(t, zmqpub.Config{})
	pc := newPublisher(t, zmqpub.Config{})
	in := newIngress(t, testConfig())
	sink := newIndexSink(t)
	ranks := []core.RankSource{{DPRank: 0, Endpoint: pa.Endpoint()}, {DPRank: 1, Endpoint: pb.Endpoint()}}
	in.Sync(5, testBlockSize, ranks, sink)
	waitSubscribed(t, pa, 1)
	waitSubscribed(t, pb, 1)
	r0, r1 := radix.WorkerKey{WorkerID: 5, DPRank: 0}, radix.WorkerKey{WorkerID: 5, DPRank: 1}
	ta, tb := tokens(1, 2), tokens(100, 2)
	pa.Publish(stored(0, []uint64{1, 2}, ta))
	pb.Publish(stored(0, []uint64{1, 2}, tb))
	pb.Publish(removed(2))
	waitFor(t, "both ranks", func() bool { return sink.Depth(r0, ta) == 2 && sink.Depth(r1, tb) == 1 })

	// Unchanged: the same listeners keep their state.
	in.Sync(5, testBlockSize, ranks, sink)
	st := status(in, 5)
	if len(st) != 2 || st[0].LastSeq != 0 || st[1].LastSeq != 1 || st[1].Batches != 2 || sink.Cleared.Load() != 0 {
		t.Fatalf("unchanged resync lost state: %+v cleared %d", st, sink.Cleared.Load())
	}
	if sink.Depth(r0, ta) != 2 || sink.Depth(r1, tb) != 1 {
		t.Fatal("unchanged resync lost blocks")
	}

	// Rank 1 moves to publisher c; rank 0 unchanged.
	ranks[1].Endpoint = pc.Endpoint()
	in.Sync(5, testBlockSize, ranks, sink)
	waitFor(t, "rank 1 cleared", func() bool { return sink.Depth(r1, tb) == 0 })
	st = status(in, 5)
	if st[1].Endpoint != pc.Endpoint() || st[1].HasSeq || st[1].Batches != 0 || st[0].Batches != 1 {
		t.Fatalf("changed rank not fresh: %+v", st)
	}
	waitSubscribed(t, pc, 1)
	waitFor(t, "b unsubscribed", func() bool { return pb.Stats().Subscribers == 0 })
	tc := tokens(300, 1)
	pc.Publish(stored(0, []uint64{9}, tc))
	waitFor(t, "rank 1 from c", func() bool { return sink.Depth(r1, tc) == 1 })

	// Rank 0 removed.
	in.Sync(5, testBlockSize, ranks[1:], sink)
	waitFor(t, "rank 0 cleared", func() bool { return sink.Depth(r0, ta) == 0 })
	if st := status(in, 5); len(st) != 1 || st[0].DPRank != 1 {
		t.Fatalf("status %+v", st)
	}
	waitFor(t, "a unsubscribed", func() bool { return pa.Stats().Subscribers == 0 })

	// A new sink (the worker moved partitions) restarts every rank and
	// clears the old sink.
	sink2 := newIndexSink(t)
	in.Sync(5, testBlockSize, ranks[1:], sink2)
	in.Detach(5) // flushes the writer: the clear has reached the old sink
	if sink.Depth(r1, tc) != 0 {
		t.Fatal("old sink not cleared on move")
	}
}

// TestWorkerBeforePublisher: a worker registered before its publisher
// exists keeps dialing and attaches when the publisher appears.
func TestWorkerBeforePublisher(t *testing.T) {
	checkNoLeak(t)
	ep := freeEndpoint(t)
	in := newIngress(t, testConfig())
	sink := newIndexSink(t)
	in.Sync(11, testBlockSize, []core.RankSource{{Endpoint: ep}}, sink)
	waitFor(t, "dial errors", func() bool { return in.Stats().DialErrors >= 3 })
	st := status(in, 11)[0]
	if st.State != "connecting" || !strings.Contains(st.LastError, "dial") {
		t.Fatalf("status %+v", st)
	}
	var p *zmqpub.Publisher
	waitFor(t, "bind", func() bool {
		var err error
		p, err = zmqpub.New(zmqpub.Config{Endpoint: ep})
		return err == nil
	})
	t.Cleanup(func() { _ = p.Close() })
	waitSubscribed(t, p, 1)
	toks := tokens(7, 2)
	p.Publish(stored(0, []uint64{1, 2}, toks))
	waitFor(t, "blocks", func() bool { return sink.Depth(radix.WorkerKey{WorkerID: 11}, toks) == 2 })
	if st := status(in, 11)[0]; st.State != "live" {
		t.Fatalf("status %+v", st)
	}
}

// TestQueueOverflow: with a stuck sink, a rank's queue never exceeds its
// limit, the excess is counted, and it shows as a gap once the sink moves.
func TestQueueOverflow(t *testing.T) {
	checkNoLeak(t)
	p := newPublisher(t, zmqpub.Config{})
	cfg := testConfig()
	cfg.QueueLimit, cfg.WriterQueue, cfg.Writers = 4, 1, 1
	in := newIngress(t, cfg)
	sink := newIndexSink(t)
	sink.Gate = make(chan struct{})
	in.Sync(2, testBlockSize, []core.RankSource{{Endpoint: p.Endpoint()}}, sink)
	waitSubscribed(t, p, 1)
	const n = 200
	for i := range n {
		p.Publish(stored(0, []uint64{uint64(i + 1)}, tokens(uint32(10*i), 1)))
		if d := in.Stats().QueueDepth; d > cfg.QueueLimit {
			t.Fatalf("queue depth %d > limit %d", d, cfg.QueueLimit)
		}
	}
	waitFor(t, "overflow", func() bool { return in.Stats().Overflow > 0 })
	if d := in.Stats().QueueDepth; d > cfg.QueueLimit {
		t.Fatalf("queue depth %d > limit %d", d, cfg.QueueLimit)
	}
	close(sink.Gate)
	// One more batch after the backlog reveals a trailing overflow as a
	// gap. Everything sent is either applied or counted as overflow.
	waitFor(t, "drained", func() bool {
		s := in.Stats()
		return s.BatchesApplied+s.Overflow == n && s.QueueDepth == 0
	})
	p.Publish(stored(0, []uint64{1 << 40}, tokens(1<<20, 1)))
	waitFor(t, "all accounted", func() bool {
		s := in.Stats()
		return s.BatchesApplied+s.Overflow == n+1 && s.QueueDepth == 0
	})
	s := in.Stats()
	if s.Gaps == 0 || s.MissedBatches != s.Overflow {
		t.Fatalf("overflow not seen as gaps: %+v", s)
	}
}

// TestDetachIsSynchronous: while a publisher streams, Detach returns only
// when nothing more of the worker reaches the sink.
func TestDetachIsSynchronous(t *testing.T) {
	checkNoLeak(t)
	p := newPublisher(t, zmqpub.Config{})
	in := newIngress(t, testConfig())
	sink := newIndexSink(t)
	in.Sync(6, testBlockSize, []core.RankSource{{Endpoint: p.Endpoint()}}, sink)
	waitSubscribed(t, p, 1)
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := uint64(1); ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			p.Publish(stored(0, []uint64{i}, tokens(uint32(i), 1)))
		}
	}()
	waitFor(t, "some events", func() bool { return sink.Applied.Load() > 100 })
	in.Detach(6)
	sink.Closed.Store(true)
	// Keep publishing for a while: any late event fails the test.
	n := p.Stats().Published
	waitFor(t, "more published", func() bool { return p.Stats().Published > n+500 })
	close(stop)
	<-done
}

// TestCloseStopsEverything: Close with live, connecting and replaying
// ranks returns, leaving no goroutine behind, and later calls are no-ops.
func TestCloseStopsEverything(t *testing.T) {
	checkNoLeak(t)
	p := newPublisher(t, zmqpub.Config{ReplayEndpoint: "tcp://127.0.0.1:0"})
	in, err := zmqin.New(testConfig())
	if err != nil {
		t.Fatal(err)
	}
	sink := newIndexSink(t)
	in.Sync(1, testBlockSize, []core.RankSource{{Endpoint: p.Endpoint(), ReplayEndpoint: p.ReplayEndpoint()}}, sink)
	in.Sync(2, testBlockSize, []core.RankSource{{Endpoint: refusedEndpoint}}, sink)
	waitSubscribed(t, p, 1)
	p.Publish(stored(0, []uint64{1}, tokens(1, 1)))
	if err := in.Close(); err != nil {
		t.Fatal(err)
	}
	in.Sync(3, testBlockSize, []core.RankSource{{Endpoint: p.Endpoint()}}, sink)
	in.Detach(1)
	if st := status(in, 1); len(st) != 0 {
		t.Fatalf("status after Close %+v", st)
	}
	_ = in.Close()
}

func TestConfigValidate(t *testing.T) {
	for _, c := range []zmqin.Config{{Writers: -1}, {QueueLimit: -1}, {DialBackoffMin: -1}, {DialBackoffMin: 2, DialBackoffMax: 1},
		{MaxMessageSize: -1}, {MaxQueueBytes: -1}, {MaxQueueBytes: 1 << 20}, {MaxMessageSize: 1 << 10, MaxQueueBytes: 1 << 30}} {
		if c.Validate() == nil {
			t.Errorf("%+v accepted", c)
		}
	}
	if (zmqin.Config{}).Validate() != nil {
		t.Fatal("zero config rejected")
	}
}

// TestReplayEdgeCases: replay is ignored for a multi-rank worker; history
// older than the replay buffer is reported lost; an unreachable replay
// endpoint fails the replay and live processing goes on.
func TestReplayEdgeCases(t *testing.T) {
	lose := func(p *zmqpub.Publisher, n int, from uint32) {
		for i := range n {
			p.PublishLost(stored(0, []uint64{uint64(from) + uint64(i)}, tokens(from+uint32(100*i), 1)))
		}
	}
	t.Run("multi-rank", func(t *testing.T) {
		checkNoLeak(t)
		p0 := newPublisher(t, zmqpub.Config{ReplayEndpoint: "tcp://127.0.0.1:0"})
		p1 := newPublisher(t, zmqpub.Config{})
		in := newIngress(t, testConfig())
		sink := newIndexSink(t)
		in.Sync(1, testBlockSize, []core.RankSource{
			{DPRank: 0, Endpoint: p0.Endpoint(), ReplayEndpoint: p0.ReplayEndpoint()},
			{DPRank: 1, Endpoint: p1.Endpoint()},
		}, sink)
		waitSubscribed(t, p0, 1)
		lose(p0, 2, 10)
		p0.Publish(stored(0, []uint64{99}, tokens(9000, 1)))
		waitFor(t, "live batch", func() bool { return sink.Depth(radix.WorkerKey{WorkerID: 1}, tokens(9000, 1)) == 1 })
		if s := in.Stats(); s.Gaps != 1 || s.Replays != 0 || p0.Stats().ReplayRequests != 0 {
			t.Fatalf("stats %+v", s)
		}
	})
	t.Run("history-lost", func(t *testing.T) {
		checkNoLeak(t)
		p := newPublisher(t, zmqpub.Config{ReplayEndpoint: "tcp://127.0.0.1:0", ReplayBuffer: 2})
		in := newIngress(t, testConfig())
		sink := newIndexSink(t)
		in.Sync(1, testBlockSize, []core.RankSource{{Endpoint: p.Endpoint(), ReplayEndpoint: p.ReplayEndpoint()}}, sink)
		waitSubscribed(t, p, 1)
		lose(p, 4, 10) // seqs 0..3 lost live; seq 4 is live; the buffer keeps 3 and 4
		p.Publish(stored(0, []uint64{99}, tokens(9000, 1)))
		w := radix.WorkerKey{WorkerID: 1}
		waitFor(t, "live batch", func() bool { return sink.Depth(w, tokens(9000, 1)) == 1 })
		s := in.Stats()
		if s.Gaps != 1 || s.Replays != 1 || s.ReplayLost != 1 || s.ReplayedBatches != 2 || s.Stale != 1 {
			t.Fatalf("stats %+v", s)
		}
		if sink.Depth(w, tokens(10+300, 1)) != 1 || sink.Depth(w, tokens(10, 1)) != 0 {
			t.Fatal("replayed batches not as buffered")
		}
	})
	t.Run("unreachable", func(t *testing.T) {
		checkNoLeak(t)
		p := newPublisher(t, zmqpub.Config{})
		cfg := testConfig()
		cfg.ReplayTimeout = 200 * time.Millisecond
		in := newIngress(t, cfg)
		sink := newIndexSink(t)
		in.Sync(1, testBlockSize, []core.RankSource{{Endpoint: p.Endpoint(), ReplayEndpoint: refusedEndpoint}}, sink)
		waitSubscribed(t, p, 1)
		lose(p, 1, 10)
		p.Publish(stored(0, []uint64{99}, tokens(9000, 1)))
		waitFor(t, "live batch", func() bool { return sink.Depth(radix.WorkerKey{WorkerID: 1}, tokens(9000, 1)) == 1 })
		st := status(in, 1)[0]
		if s := in.Stats(); s.ReplayFailures != 1 || st.State != "live" || !strings.Contains(st.LastError, "replay") {
			t.Fatalf("stats %+v status %+v", s, st)
		}
	})
}

// TestIPCEndpoint: ipc:// endpoints (unix sockets) work for live and replay.
func TestIPCEndpoint(t *testing.T) {
	checkNoLeak(t)
	dir := t.TempDir()
	p := newPublisher(t, zmqpub.Config{Endpoint: "ipc://" + dir + "/pub.sock", ReplayEndpoint: "ipc://" + dir + "/replay.sock"})
	if !strings.HasPrefix(p.Endpoint(), "ipc://") {
		t.Fatalf("endpoint %q", p.Endpoint())
	}
	in := newIngress(t, testConfig())
	sink := newIndexSink(t)
	in.Sync(1, testBlockSize, []core.RankSource{{Endpoint: p.Endpoint(), ReplayEndpoint: p.ReplayEndpoint()}}, sink)
	waitSubscribed(t, p, 1)
	p.PublishLost(stored(0, []uint64{1}, tokens(1, 1)))
	p.Publish(stored(1, []uint64{2}, tokens(5, 1)))
	waitFor(t, "both blocks", func() bool { return sink.Depth(radix.WorkerKey{WorkerID: 1}, tokens(1, 2)) == 2 })
	if s := in.Stats(); s.Replays != 1 {
		t.Fatalf("stats %+v", s)
	}
}

// TestRestartDetectedByReplay: a publisher restarted at the same address
// that published more batches than the watermark before the listener
// resubscribed (rule 1 cannot see it) is detected by replaying from the
// watermark: the batch it answers under that seq is not the one applied.
func TestRestartDetectedByReplay(t *testing.T) {
	checkNoLeak(t)
	p1 := newPublisher(t, zmqpub.Config{ReplayEndpoint: "tcp://127.0.0.1:0"})
	ep, rep := p1.Endpoint(), p1.ReplayEndpoint()
	in := newIngress(t, testConfig())
	sink := newIndexSink(t)
	in.Sync(9, testBlockSize, []core.RankSource{{Endpoint: ep, ReplayEndpoint: rep}}, sink)
	waitSubscribed(t, p1, 1)
	w := radix.WorkerKey{WorkerID: 9}
	old := tokens(1, 2)
	p1.Publish(stored(0, []uint64{1}, old[:4]))
	p1.Publish(stored(1, []uint64{2}, old[4:]))
	waitFor(t, "old blocks", func() bool { return sink.Depth(w, old) == 2 })
	_ = p1.Close()

	var p2 *zmqpub.Publisher
	waitFor(t, "rebind", func() bool {
		p, err := zmqpub.New(zmqpub.Config{Endpoint: ep, ReplayEndpoint: rep})
		p2 = p
		return err == nil
	})
	t.Cleanup(func() { _ = p2.Close() })
	// Seqs 0..3 published before the listener is back: never seen live.
	fresh := tokens(500, 5)
	for i := range 4 {
		parent := uint64(0)
		if i > 0 {
			parent = uint64(100 + i - 1)
		}
		p2.PublishLost(stored(parent, []uint64{uint64(100 + i)}, fresh[4*i:4*i+4]))
	}
	waitSubscribed(t, p2, 1)
	p2.Publish(stored(103, []uint64{104}, fresh[16:]))
	waitFor(t, "fresh chain", func() bool { return sink.Depth(w, fresh) == 5 })
	if d := sink.Depth(w, old); d != 0 {
		t.Fatalf("old blocks survive the restart: depth %d", d)
	}
	waitFor(t, "replay over", func() bool { return status(in, 9)[0].State == "live" })
	st := status(in, 9)[0]
	if st.Restarts != 1 || st.LastSeq != 4 || !strings.Contains(st.LastError, "differs") {
		t.Fatalf("status %+v", st)
	}
}

// TestReconnectVerifiedByReplay: after a lost connection to the same
// publisher, replay from the watermark confirms the incarnation and heals
// the batches lost meanwhile; nothing is cleared.
func TestReconnectVerifiedByReplay(t *testing.T) {
	checkNoLeak(t)
	p := newPublisher(t, zmqpub.Config{ReplayEndpoint: "tcp://127.0.0.1:0"})
	in := newIngress(t, testConfig())
	sink := newIndexSink(t)
	in.Sync(4, testBlockSize, []core.RankSource{{Endpoint: p.Endpoint(), ReplayEndpoint: p.ReplayEndpoint()}}, sink)
	waitSubscribed(t, p, 1)
	w := radix.WorkerKey{WorkerID: 4}
	toks := tokens(1, 4)
	p.Publish(stored(0, []uint64{1}, toks[:4]))
	waitFor(t, "first", func() bool { return sink.Depth(w, toks) == 1 })
	p.DropSubscribers()
	// Lost while the listener reconnects.
	p.PublishLost(stored(1, []uint64{2}, toks[4:8]))
	p.PublishLost(stored(2, []uint64{3}, toks[8:12]))
	waitSubscribed(t, p, 1)
	p.Publish(stored(3, []uint64{4}, toks[12:]))
	waitFor(t, "healed chain", func() bool { return sink.Depth(w, toks) == 4 })
	waitFor(t, "replay over", func() bool { return status(in, 4)[0].State == "live" })
	s := in.Stats()
	if s.Restarts != 0 || sink.Cleared.Load() != 0 || s.Gaps != 1 || s.MissedBatches != 2 || s.Replays != 1 {
		t.Fatalf("stats %+v", s)
	}
}
