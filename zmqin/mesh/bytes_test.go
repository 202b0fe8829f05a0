package mesh

import (
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/kvselect/kvselect/core"
)

// bigAdd is an admission of a 1,000-block prompt: an envelope of about
// 9 KB (hashes above 2^56 take 9 bytes each), 8 KB more decoded.
func bigAdd(i int) *core.ReplicaEvent {
	ev := &core.ReplicaEvent{Kind: core.ReplicaAdd, ModelName: "m", RoutingGroup: "default", BlockSize: 16, RequestID: "big-" + strconv.Itoa(i)}
	for k := range 1000 {
		ev.SequenceHashes = append(ev.SequenceHashes, 1<<63|uint64(i)<<20|uint64(k))
	}
	return ev
}

// TestMeshOutboundBytesBound: with the publisher holding its batch (a
// PublishWait of an hour), admissions of long prompts fill the outbound
// queue up to MaxQueueBytes, not to its 100,000-event count, and the rest
// are dropped and counted.
func TestMeshOutboundBytesBound(t *testing.T) {
	checkNoLeak(t)
	const limit = 64 << 10
	m, err := New(Config{Bind: "tcp://127.0.0.1:0", PublishWait: time.Hour, MaxQueueBytes: limit, MaxMessage: limit})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	for i := range 20 {
		m.Publish(bigAdd(i))
		if st := m.Stats(); st.OutboundBytes > limit || st.OutboundBytes < 0 {
			t.Fatalf("outbound holds %d bytes, limit %d", st.OutboundBytes, limit)
		}
	}
	st := m.Stats()
	if st.Published+st.OutboundDropped != 20 || st.Published > limit/9000 || st.OutboundDropped == 0 || st.QueueBytesLimit != limit {
		t.Fatalf("published %d, dropped %d of 20 (%d bytes queued)", st.Published, st.OutboundDropped, st.OutboundBytes)
	}
}

// gatedApplier applies peer events to a real service once its gate opens.
type gatedApplier struct {
	*core.Service
	gate chan struct{}
}

func (g gatedApplier) ApplyReplica(evs []core.ReplicaEvent) {
	<-g.gate
	g.Service.ApplyReplica(evs)
}

// TestMeshInboundBytesBound: with the drainer stuck in the service, the
// events of a peer fill the inbound queue up to MaxQueueBytes (envelope and
// decoded hashes), not to its 100,000-event count; the rest are dropped as
// inbound_full, and the queue empties once the service applies again.
func TestMeshInboundBytesBound(t *testing.T) {
	checkNoLeak(t)
	const limit = 256 << 10
	a := newReplica(t, Config{})
	b := newBareReplica(t, Config{MaxQueueBytes: limit, MaxMessage: limit})
	gate := make(chan struct{})
	openGate := sync.OnceFunc(func() { close(gate) })
	t.Cleanup(openGate) // before the meshes close (cleanups run in reverse)
	if err := b.mesh.Start(gatedApplier{b.svc, gate}); err != nil {
		t.Fatal(err)
	}
	if _, err := b.mesh.Register(a.mesh.Endpoint()); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "subscribed", func() bool { return a.mesh.Stats().Subscribers == 1 })
	const n = 100
	for i := range n {
		a.mesh.Publish(bigAdd(i))
	}
	waitFor(t, "every event received", func() bool { return b.mesh.Stats().Received == n })
	st := b.mesh.Stats()
	if st.InboundBytes > limit || st.InboundBytes < 0 || st.Dropped[DropFull] == 0 || st.InboundDepth > limit/17000 {
		t.Fatalf("inbound %d bytes (limit %d), depth %d, dropped full %d", st.InboundBytes, limit, st.InboundDepth, st.Dropped[DropFull])
	}
	openGate()
	waitFor(t, "applied", func() bool { st := b.mesh.Stats(); return st.InboundBytes == 0 && st.InboundDepth == 0 })
}
