package mesh

import (
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

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
// queue's byte count returns to 0 once they are applied.
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
			if i == 4 {
				// Held back until the events before it are applied and
				// back in the pool, so that it is decoded into a slice a
				// longer event returned.
				waitFor(t, "the earlier events applied", func() bool {
					return rec.len() == len(want)-1 && m.st.inBytes.Load() == 0
				})
			}
			m.handle([][]byte{[]byte(ReplicaTopic), AppendEnvelope(nil, &ev, 9)}, p)
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

// TestMeshEnqueueCountsOwnHashes: an event decoded into a pooled slice
// much longer than its hashes is queued with a slice of its own size and
// counted at the frame plus that, not the pooled slice's capacity; one
// whose slice fits keeps it.
func TestMeshEnqueueCountsOwnHashes(t *testing.T) {
	m, err := New(Config{Bind: "tcp://127.0.0.1:0"}) // not started: nothing drains
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	p := &meshPeer{}
	for _, c := range []struct {
		len, cap int
		kept     bool
	}{
		{2, 6000, false},   // a long pooled slice: cut to the event's own
		{0, 6000, false},   // a hashless event: no slice kept
		{274, 600, true},   // within 2·len+64: kept
		{274, 2000, false}, // beyond it: cut
	} {
		e := &inEvent{ev: core.ReplicaEvent{Kind: core.ReplicaAdd, SequenceHashes: make([]uint64, c.len, c.cap)}}
		for i := range e.ev.SequenceHashes {
			e.ev.SequenceHashes[i] = uint64(i + 1)
		}
		before := m.st.inBytes.Load()
		m.enqueue(e, 100, p, false)
		got := <-m.in
		gotCap := cap(got.ev.SequenceHashes)
		if got != e || len(got.ev.SequenceHashes) != c.len || c.kept != (gotCap == c.cap) || gotCap > max(c.cap*btoi(c.kept), 2*c.len+64) {
			t.Fatalf("%+v: queued len %d cap %d", c, len(got.ev.SequenceHashes), cap(got.ev.SequenceHashes))
		}
		for i, h := range got.ev.SequenceHashes {
			if h != uint64(i+1) {
				t.Fatalf("%+v: hash %d is %d", c, i, h)
			}
		}
		if want := int64(100 + 8*gotCap); got.size != want || m.st.inBytes.Load()-before != want {
			t.Fatalf("%+v: size %d, counted %d; want %d", c, got.size, m.st.inBytes.Load()-before, want)
		}
	}
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

// batchRecorder is a recorder that also keeps the size of each batch.
type batchRecorder struct {
	recorder
	sizes []int // under recorder.mu
}

func (r *batchRecorder) ApplyReplica(evs []core.ReplicaEvent) {
	r.recorder.ApplyReplica(evs)
	r.mu.Lock()
	r.sizes = append(r.sizes, len(evs))
	r.mu.Unlock()
}

// TestMeshDrainWait: a positive DrainWait holds a batch open after its
// first event, so events arriving within it are applied together.
func TestMeshDrainWait(t *testing.T) {
	m, err := New(Config{Bind: "tcp://127.0.0.1:0", DrainWait: 300 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	rec := &batchRecorder{}
	if err := m.Start(rec); err != nil {
		t.Fatal(err)
	}
	p := &meshPeer{}
	for i := range 5 {
		ev := core.ReplicaEvent{Kind: core.ReplicaAdd, ModelName: "m", RequestID: "r" + strconv.Itoa(i), BlockSize: 16, Origin: 9}
		m.handle([][]byte{[]byte(ReplicaTopic), AppendEnvelope(nil, &ev, 9)}, p)
		time.Sleep(5 * time.Millisecond)
	}
	waitFor(t, "every event applied", func() bool { return rec.len() == 5 })
	rec.mu.Lock()
	defer rec.mu.Unlock()
	if !slices.Equal(rec.sizes, []int{5}) {
		t.Fatalf("batches %v, want the five events in one", rec.sizes)
	}
}
