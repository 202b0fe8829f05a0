package zmqin

import (
	"fmt"
	"strings"
	"testing"

	"github.com/kvselect/kvselect/core"
	"github.com/kvselect/kvselect/radix"
)

// TestInteropLibzmq: a vLLM-shaped publisher on libzmq (pyzmq), encoding
// events in msgspec's array and map forms, a legacy [ts, events] batch and
// SGLang's 7-field array with a signed hash, is read by our listener; the
// batch it withholds from the live stream is replayed from its libzmq
// ROUTER by our DEALER.
func TestInteropLibzmq(t *testing.T) {
	requireDebianPyzmq(t)
	checkNoLeak(t)
	_, stdout := pyScript(t, "testdata/vllm_pub.py")
	line, err := stdout.ReadString('\n')
	if err != nil {
		t.Fatalf("reading the script's ports: %v", err)
	}
	var pubPort, replayPort int
	if _, err := fmt.Sscanf(line, "ports %d %d", &pubPort, &replayPort); err != nil {
		t.Fatalf("script said %q: %v", line, err)
	}

	in := newIngress(t, testConfig())
	sink := newIndexSink(t)
	in.Sync(42, testBlockSize, []core.RankSource{{
		Endpoint:       fmt.Sprintf("tcp://127.0.0.1:%d", pubPort),
		ReplayEndpoint: fmt.Sprintf("tcp://127.0.0.1:%d", replayPort),
	}}, sink)
	w := radix.WorkerKey{WorkerID: 42}
	seqToks := make([]uint32, 12)
	for i := range seqToks {
		seqToks[i] = uint32(i + 1)
	}
	waitFor(t, "last batch", func() bool { return sink.Depth(w, []uint32{200, 201, 202, 203}) == 1 })
	if d := sink.Depth(w, seqToks); d != 3 {
		t.Fatalf("depth %d of the array+replayed map chain, want 3", d)
	}
	if d := sink.Depth(w, []uint32{100, 101, 102, 103}); d != 0 {
		t.Fatalf("SGLang-style block not removed: depth %d", d)
	}
	waitFor(t, "replay over", func() bool { return status(in, 42)[0].State == "live" })
	st := status(in, 42)[0]
	if st.LastSeq != 4 || st.Gaps != 1 || st.Replays != 1 {
		t.Fatalf("status %+v", st)
	}
	s := in.Stats()
	if s.DecodeErrors != 0 || s.BadFrames != 0 || s.Events.Total() != 0 || s.ReplayFailures != 0 || s.ReplayedBatches < 1 {
		t.Fatalf("stats %+v", s)
	}
	in.Detach(42)
}

// TestInteropExtraFrames: a libzmq publisher sends a KV-event message of
// more frames than [topic, seq, payload], then valid ones. The odd
// message is dropped and counted (too_many_frames) and the connection
// stays up: the valid batches behind it are applied with no reconnect
// (closing it lost them, as a PUB drops what it sends while its subscriber
// is away). A message of 40 frames is dropped the same way.
func TestInteropExtraFrames(t *testing.T) {
	requireDebianPyzmq(t)
	checkNoLeak(t)
	stdin, stdout := pyScript(t, "testdata/frames_pub.py")
	line, err := stdout.ReadString('\n')
	if err != nil {
		t.Fatalf("reading the script's port: %v", err)
	}
	var port int
	if _, err := fmt.Sscanf(line, "port %d", &port); err != nil {
		t.Fatalf("script said %q: %v", line, err)
	}
	in := newIngress(t, testConfig())
	sink := newIndexSink(t)
	in.Sync(7, testBlockSize, []core.RankSource{{Endpoint: fmt.Sprintf("tcp://127.0.0.1:%d", port)}}, sink)
	send := func(seq, frames int) {
		t.Helper()
		if _, err := fmt.Fprintf(stdin, "kv %d %d %d\n", seq, 1000+seq, frames); err != nil {
			t.Fatal(err)
		}
		if ans, err := stdout.ReadString('\n'); err != nil || ans != "sent\n" {
			t.Fatalf("script answered %q, %v", ans, err)
		}
	}
	w := radix.WorkerKey{WorkerID: 7}
	send(0, 3)
	waitFor(t, "the first batch", func() bool { return sink.Depth(w, tokens(1, 1)) == 1 })
	send(1, 4)
	send(2, 3)
	send(3, 40)
	send(4, 3)
	waitFor(t, "the batches behind the odd messages", func() bool {
		return sink.Depth(w, tokens(9, 1)) == 1 && sink.Depth(w, tokens(17, 1)) == 1
	})
	if sink.Depth(w, tokens(5, 1)) != 0 || sink.Depth(w, tokens(13, 1)) != 0 {
		t.Fatal("a message with extra frames was applied")
	}
	s := in.Stats()
	if s.ExtraFrames != 2 || s.Connects != 1 || s.RecvErrors != 0 || s.TooManyFrames != 0 || s.BadFrames != 0 || s.BatchesApplied != 3 {
		t.Fatalf("stats %+v", s)
	}
	if st := status(in, 7)[0]; st.State != "live" || !strings.Contains(st.LastError, "extra frames") {
		t.Fatalf("status %+v", st)
	}
}
