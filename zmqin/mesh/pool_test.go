package mesh

import (
	"slices"
	"sync"
	"testing"

	"github.com/kvselect/kvselect/core"
)

// recorder is an Applier that keeps a copy of every event it is given.
type recorder struct {
	mu  sync.Mutex
	evs []core.ReplicaEvent
}

func (r *recorder) ApplyReplica(evs []core.ReplicaEvent) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, ev := range evs {
		ev.SequenceHashes = slices.Clone(ev.SequenceHashes)
		ev.RequestID = string([]byte(ev.RequestID))
		r.evs = append(r.evs, ev)
	}
}

func (r *recorder) AppendLocalBookings(dst []core.ReplicaEvent) []core.ReplicaEvent { return dst }
func (r *recorder) CatalogVersion() uint64                                          { return 1 }

func (r *recorder) len() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.evs)
}

// TestMeshInboundPooledEvents: the inbound queue's pooled events (see
// inEvent) hand the applier each event's own hashes, whatever the lengths
// of the events decoded into the same pooled slices before it, and the
// queue's byte count returns to 0 once they are applied; an event decoded
// into a pooled slice much longer than its hashes is counted at its own
// size, not the slice's.
func TestMeshInboundPooledEvents(t *testing.T) {
	m, err := New(Config{Bind: "tcp://127.0.0.1:0"})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	rec := &recorder{}
	if err := m.Start(rec); err != nil {
		t.Fatal(err)
	}
	p := &meshPeer{}
	lengths := []int{5000, 3, 0, 700, 2, 6000, 1, 274}
	const rounds = 50
	var want [][]uint64
	for r := range rounds {
		for i, n := range lengths {
			ev := core.ReplicaEvent{Kind: core.ReplicaAdd, ModelName: "m", RequestID: "r", BlockSize: 16, Origin: 9}
			for j := range n {
				ev.SequenceHashes = append(ev.SequenceHashes, uint64(r*1_000_000+i*10_000+j+1))
			}
			want = append(want, ev.SequenceHashes)
			frame := AppendEnvelope(nil, &ev, 9)
			if n == 2 {
				// Held back until the events before it are applied, so
				// that it is decoded into a slice returned by a longer one.
				waitFor(t, "the earlier events applied", func() bool { return rec.len() == len(want)-1 })
				m.handle([][]byte{[]byte(ReplicaTopic), frame}, p)
				if got := m.st.inBytes.Load(); got > int64(len(frame))+8*(2*2+64) {
					t.Fatalf("a 2-hash event counted %d bytes (frame %d)", got, len(frame))
				}
				continue
			}
			m.handle([][]byte{[]byte(ReplicaTopic), frame}, p)
		}
	}
	waitFor(t, "every event applied", func() bool { return rec.len() == len(want) })
	rec.mu.Lock()
	defer rec.mu.Unlock()
	for i, ev := range rec.evs {
		if !slices.Equal(ev.SequenceHashes, want[i]) {
			t.Fatalf("event %d: %d hashes, first %v; want %d", i, len(ev.SequenceHashes), ev.SequenceHashes[:min(3, len(ev.SequenceHashes))], len(want[i]))
		}
	}
	waitFor(t, "the inbound bytes released", func() bool { return m.st.inBytes.Load() == 0 })
	if st := m.Stats(); st.InboundDepth != 0 {
		t.Fatalf("stats %+v", st)
	}
}
