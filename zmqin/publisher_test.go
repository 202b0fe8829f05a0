package zmqin

import (
	"context"
	"testing"

	"github.com/go-zeromq/zmq4"
)

// TestPublisherHWM: a subscriber that stops reading loses messages at its
// high-water mark, counted, while the Publisher never blocks.
func TestPublisherHWM(t *testing.T) {
	checkNoLeak(t)
	p := newPublisher(t, PublisherConfig{HWM: 8})
	zc, err := dialZMTP(context.Background(), p.Endpoint(), zmq4.Sub, Limits{MaxFrames: 3, MaxFrameSize: 1 << 20, MaxMessageSize: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	defer zc.Close()
	if err := zc.send([]byte{1}); err != nil {
		t.Fatal(err)
	}
	waitSubscribed(t, p, 1)
	payload := make([]byte, 64<<10)
	for range 200 { // ~13 MB: more than the socket buffers hold
		p.PublishPayload(payload)
	}
	waitFor(t, "drops", func() bool { return p.Stats().Dropped > 0 })
	if st := p.Stats(); st.Published != 200 {
		t.Fatalf("stats %+v", st)
	}
}

func TestPublisherConfigValidate(t *testing.T) {
	for _, c := range []PublisherConfig{{}, {Endpoint: "tcp://127.0.0.1:0", ReplayEndpoint: "x"}, {Endpoint: "tcp://127.0.0.1:0", HWM: -1}} {
		if c.Validate() == nil {
			t.Errorf("%+v accepted", c)
		}
	}
}
