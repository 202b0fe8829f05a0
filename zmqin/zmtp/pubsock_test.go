package zmtp

import (
	"context"
	"testing"
)

// TestPubPeerBytesBound: a subscriber that never reads holds at most
// MaxBytes of frames in its queue (beyond what the kernel buffers); the
// rest is dropped and counted, and a closed connection uncounts what its
// queue still held.
func TestPubPeerBytesBound(t *testing.T) {
	checkNoLeak(t)
	const limit = 1 << 20
	pub, err := ListenPub(PubConfig{Endpoint: "tcp://127.0.0.1:0", MaxBytes: limit})
	if err != nil {
		t.Fatal(err)
	}
	defer pub.Close()
	sub, err := Dial(context.Background(), pub.Endpoint(), Sub, Limits{MaxFrames: 2, MaxFrameSize: 1 << 20, MaxMessageSize: 2 << 20})
	if err != nil {
		t.Fatal(err)
	}
	if err := sub.Send([]byte{1}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "subscribed", func() bool { return pub.Subscribers() == 1 })
	frame := make([]byte, 64<<10)
	const n = 2000 // 125 MiB: more than loopback's socket buffers can take
	for range n {
		pub.Send("t", [][]byte{[]byte("t"), frame})
		if q := pub.QueuedBytes(); q > limit || q < 0 {
			t.Fatalf("queued %d bytes, limit %d", q, limit)
		}
	}
	if pub.Dropped() == 0 || pub.QueuedBytes() == 0 {
		t.Fatalf("dropped %d, queued %d", pub.Dropped(), pub.QueuedBytes())
	}
	_ = sub.Close()
	waitFor(t, "the queue uncounted", func() bool { return pub.QueuedBytes() == 0 })
}
