package zmqin_test

import (
	"errors"
	"testing"

	"github.com/kvselect/kvselect/core"
	"github.com/kvselect/kvselect/radix"
	"github.com/kvselect/kvselect/zmqin"
	"github.com/kvselect/kvselect/zmqin/zmqpub"
)

// TestPauseResume: a paused listener drops its connection and misses what
// the publisher sends; resumed, it reconnects with its watermark kept, so
// the missed batch is a gap that the replay endpoint fills. Pausing a
// paused listener, resuming a live one and either on an unknown rank
// fail as the reference's listener-control routes need.
func TestPauseResume(t *testing.T) {
	checkNoLeak(t)
	p := newPublisher(t, zmqpub.Config{ReplayEndpoint: "tcp://127.0.0.1:0"})
	in := newIngress(t, testConfig())
	sink := newIndexSink(t)
	in.Sync(1, testBlockSize, []core.RankSource{{Endpoint: p.Endpoint(), ReplayEndpoint: p.ReplayEndpoint()}}, sink)
	w := radix.WorkerKey{WorkerID: 1}
	waitSubscribed(t, p, 1)
	p.Publish(stored(0, []uint64{1}, tokens(1, 1)))
	waitFor(t, "the first batch", func() bool { return sink.Depth(w, tokens(1, 1)) == 1 })

	if err := in.Pause(1, 0); err != nil {
		t.Fatal(err)
	}
	var se *zmqin.ListenerStateError
	if err := in.Pause(1, 0); !errors.As(err, &se) || se.State != "paused" {
		t.Fatalf("second pause: %v", err)
	}
	if st := status(in, 1)[0]; st.State != "paused" {
		t.Fatalf("status %+v", st)
	}
	waitFor(t, "the subscriber gone", func() bool { return p.Stats().Subscribers == 0 })
	p.Publish(stored(0, []uint64{2}, tokens(2, 1))) // missed while paused
	if err := in.Resume(1, 0); err != nil {
		t.Fatal(err)
	}
	waitSubscribed(t, p, 1)
	p.Publish(stored(0, []uint64{3}, tokens(3, 1)))
	waitFor(t, "the missed batch replayed and the next applied", func() bool {
		return sink.Depth(w, tokens(2, 1)) == 1 && sink.Depth(w, tokens(3, 1)) == 1
	})
	// The gap is counted once the replay has answered (a replay that finds
	// a restarted publisher is no gap), after its batches are applied.
	waitFor(t, "the gap counted", func() bool {
		s := in.Stats()
		return s.Gaps == 1 && s.Replays == 1 && s.ReplayedBatches >= 1 && s.Connects == 2
	})
	if err := in.Resume(1, 0); !errors.As(err, &se) || se.State != "live" {
		t.Fatalf("resume of a live listener: %v", err)
	}
	if err := in.Pause(1, 5); !errors.Is(err, zmqin.ErrNoListener) {
		t.Fatalf("unknown rank: %v", err)
	}
	// A paused listener stops with its worker.
	if err := in.Pause(1, 0); err != nil {
		t.Fatal(err)
	}
	in.Detach(1)
}
