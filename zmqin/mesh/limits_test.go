package mesh

import (
	"bytes"
	"testing"

	"github.com/kvselect/kvselect/zmqin/zmtp"
)

// TestMeshLimitDrop: a replica peer whose message goes past the hard
// frame budget loses its connection, counted by reason; one with a
// message of three frames does not (TestMeshInteropLibzmq).
func TestMeshLimitDrop(t *testing.T) {
	checkNoLeak(t)
	peer := newRawPeer(t)
	r := newReplica(t, Config{})
	if _, err := r.mesh.Register(peer.Endpoint()); err != nil {
		t.Fatal(err)
	}
	c := peer.Next(t)
	_ = c.Send(bytes.Repeat(rawFrameHeader(true, 0), zmtp.DefaultHardFrames+1))
	c.AwaitClosed(t)
	// The receive loop counts the drop, closes the connection, then counts
	// the disconnect: wait for both.
	waitFor(t, "the drop counted", func() bool {
		st := r.mesh.Stats()
		return st.LimitDrops[zmtp.LimitTooManyFrames] == 1 && st.Disconnects == 1
	})
	if st := r.mesh.Stats(); st.Dropped[DropExtraFrames] != 0 || st.Disconnects != 1 {
		t.Fatalf("stats %+v", st)
	}
}
