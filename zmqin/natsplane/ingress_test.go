package natsplane

import (
	"sync"
	"testing"

	"github.com/kvselect/kvselect/core"
	"github.com/kvselect/kvselect/radix"
	"github.com/kvselect/kvselect/zmqin/mesh"
)

// recSink records what reaches a partition sink.
type recSink struct {
	mu      sync.Mutex
	applied []radix.Event
	cleared []radix.WorkerKey
}

func (s *recSink) ApplyBatch(evs []radix.Event) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, e := range evs {
		e.Blocks = append([]radix.Block(nil), e.Blocks...)
		e.Hashes = append([]uint64(nil), e.Hashes...)
		s.applied = append(s.applied, e)
	}
}

func (s *recSink) ClearRank(w radix.WorkerKey) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.cleared = append(s.cleared, w)
}

// recIngress records the ranks handed to the inner (ZMQ) ingress.
type recIngress struct {
	core.NopIngress
	synced map[uint64][]core.RankSource
}

func (r *recIngress) Sync(id uint64, _ int, ranks []core.RankSource, _ core.EventSink) {
	r.synced[id] = ranks
}

func kvBody(pub, seq uint64, evs ...radix.Event) []byte {
	return AppendEnvelope(nil, pub, seq, 0, TopicKVEvents, AppendRouterEvents(nil, evs))
}

func cleared(id uint64, rank uint32, eventID uint64) radix.Event {
	return radix.Event{Worker: radix.WorkerKey{WorkerID: id, DPRank: rank}, EventID: eventID, Kind: radix.Cleared}
}

// TestRankOwnership: ranks with a ZMQ endpoint go to the inner ingress and
// their bus events are dropped; ranks without one take bus events; a rank
// that leaves the bus is cleared; after Detach nothing of the worker is
// applied.
func TestRankOwnership(t *testing.T) {
	inner := &recIngress{synced: map[uint64][]core.RankSource{}}
	in, err := NewIngress(IngressConfig{Scope: testScope, Inner: inner})
	if err != nil {
		t.Fatal(err)
	}
	sink := &recSink{}
	in.Sync(1, 4, []core.RankSource{{DPRank: 0}, {DPRank: 1, Endpoint: "tcp://127.0.0.1:5557"}}, sink)
	if got := inner.synced[1]; len(got) != 1 || got[0].DPRank != 1 {
		t.Fatalf("inner got %+v, want rank 1 only", got)
	}
	in.Handle(TopicKVEvents, kvBody(1, 0, cleared(1, 0, 1), cleared(1, 1, 1), cleared(1, 2, 1), cleared(7, 0, 1)))
	st := in.Stats()
	if len(sink.applied) != 1 || st.Dropped[DropZMQRank] != 1 || st.Dropped[DropUnknownRank] != 1 || st.Dropped[DropUnknownWorker] != 1 {
		t.Fatalf("applied %+v, stats %+v", sink.applied, st)
	}
	// Rank 0 gets an endpoint: it leaves the bus and is cleared.
	in.Sync(1, 4, []core.RankSource{{DPRank: 0, Endpoint: "tcp://127.0.0.1:5556"}, {DPRank: 1, Endpoint: "tcp://127.0.0.1:5557"}}, sink)
	if len(sink.cleared) != 1 || sink.cleared[0] != (radix.WorkerKey{WorkerID: 1}) || in.Stats().Ranks != 0 {
		t.Fatalf("cleared %+v, ranks %d", sink.cleared, in.Stats().Ranks)
	}
	in.Sync(1, 4, []core.RankSource{{DPRank: 0}}, sink)
	in.Detach(1)
	in.Handle(TopicKVEvents, kvBody(1, 1, cleared(1, 0, 2)))
	if len(sink.applied) != 1 || in.Stats().Dropped[DropUnknownWorker] != 2 {
		t.Fatalf("an event after Detach reached the sink: %+v", sink.applied)
	}
}

// TestSyncKeepsCursor: re-registering a rank unchanged keeps its cursor
// (a repeat stays stale); a new sink starts it afresh.
func TestSyncKeepsCursor(t *testing.T) {
	in, err := NewIngress(IngressConfig{Scope: testScope})
	if err != nil {
		t.Fatal(err)
	}
	sink := &recSink{}
	in.Sync(1, 4, []core.RankSource{{DPRank: 0}}, sink)
	in.Handle(TopicKVEvents, kvBody(1, 0, cleared(1, 0, 5)))
	in.Sync(1, 4, []core.RankSource{{DPRank: 0}}, sink)
	in.Handle(TopicKVEvents, kvBody(1, 1, cleared(1, 0, 5)))
	if in.Stats().Dropped[DropStale] != 1 {
		t.Fatalf("stats %+v", in.Stats())
	}
	other := &recSink{}
	in.Sync(1, 4, []core.RankSource{{DPRank: 0}}, other)
	in.Handle(TopicKVEvents, kvBody(1, 2, cleared(1, 0, 5)))
	if len(other.applied) != 1 || len(sink.cleared) != 1 {
		t.Fatalf("new sink applied %d, old cleared %d", len(other.applied), len(sink.cleared))
	}
}

// TestMalformedBookings: bad booking messages are counted drops; a later
// good one applies.
func TestMalformedBookings(t *testing.T) {
	srv, router := bus(t)
	n := newNode(t, srv.ClientURL(), 0)
	subject := testScope.Subject(TopicActiveSequences)
	good := core.ReplicaEvent{Kind: core.ReplicaAdd, RequestID: "d-1", Worker: radix.WorkerKey{WorkerID: 1}, SequenceHashes: []uint64{9}}
	unknown := good
	unknown.Worker.WorkerID = 99
	for _, body := range [][]byte{
		{0xc1},
		AppendEnvelope(nil, 1, 0, 0, TopicKVEvents, mesh.AppendSequenceEvent(nil, &good, 5)),
		AppendEnvelope(nil, 1, 1, 0, TopicActiveSequences, []byte{0x80}),
		AppendEnvelope(nil, 1, 2, 0, TopicActiveSequences, mesh.AppendSequenceEvent(nil, &unknown, 5)),
		AppendEnvelope(nil, 1, 3, 0, TopicActiveSequences, mesh.AppendSequenceEvent(nil, &good, 5)),
	} {
		if err := router.Publish(subject, body); err != nil {
			t.Fatal(err)
		}
	}
	eventually(t, "the good booking", func() bool { return n.bk.Stats().Applied == 1 })
	st := n.bk.Stats()
	want := map[BookingDrop]uint64{BookingMalformedEnvelope: 1, BookingWrongTopic: 1, BookingMalformedEvent: 1, BookingUnknownWorker: 1}
	for d, v := range want {
		if st.Dropped[d] != v {
			t.Errorf("%s drops %d, want %d (%+v)", d, st.Dropped[d], v, st)
		}
	}
	if r, ok := n.svc.Reservation("d-1"); !ok || r.Worker.WorkerID != 1 {
		t.Errorf("the good booking is not mirrored: %+v %v", r, ok)
	}
}
