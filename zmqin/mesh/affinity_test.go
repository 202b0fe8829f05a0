package mesh

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/kvselect/kvselect/core"
)

// msgStr is a msgpack fixstr (the keys and short values here).
func msgStr(s string) []byte { return append([]byte{0xa0 | byte(len(s))}, s...) }

// TestAffinityWireGolden: the binding event byte for byte as
// rmp_serde::to_vec_named writes the reference's AffinityBindingEvent
// (partition flattened, fields in declaration order, smallest integers,
// None as nil).
func TestAffinityWireGolden(t *testing.T) {
	ev := core.AffinityEvent{ModelName: "m", RoutingGroup: "default", SessionID: "s-1", WorkerID: 7, DPRank: 300, HasDPRank: true, Sequence: 1_700_000_000_000_000_005, WriterID: 42}
	var want []byte
	want = append(want, 0x87)
	want = append(append(want, msgStr("model_name")...), msgStr("m")...)
	want = append(append(want, msgStr("routing_group")...), msgStr("default")...)
	want = append(append(want, msgStr("session_id")...), msgStr("s-1")...)
	want = append(append(want, msgStr("worker_id")...), 0x07)
	want = append(append(want, msgStr("dp_rank")...), 0xcd, 0x01, 0x2c)
	want = append(append(want, msgStr("sequence")...), 0xcf)
	want = binary.BigEndian.AppendUint64(want, ev.Sequence)
	want = append(append(want, msgStr("writer_id")...), 0x2a)
	got := AppendAffinity(nil, &ev)
	if !bytes.Equal(got, want) {
		t.Fatalf("encoded\n% x\nwant\n% x", got, want)
	}
	var back core.AffinityEvent
	if err := DecodeAffinity(got, &back); err != nil || back != ev {
		t.Fatalf("round trip: %v %+v", err, back)
	}
	// A worker-only binding: dp_rank nil.
	ev.HasDPRank, ev.DPRank = false, 0
	got = AppendAffinity(nil, &ev)
	if !bytes.Contains(got, append(msgStr("dp_rank"), 0xc0)) {
		t.Fatalf("dp_rank not nil: % x", got)
	}
	if err := DecodeAffinity(got, &back); err != nil || back != ev {
		t.Fatalf("round trip without rank: %v %+v", err, back)
	}
}

// TestAffinityDecodeForms: what rmp_serde accepts: keys in any order with
// unknown ones skipped, a missing dp_rank, a positional array; and what it
// refuses.
func TestAffinityDecodeForms(t *testing.T) {
	var b []byte
	b = append(b, 0x88)
	b = append(append(b, msgStr("writer_id")...), 0x09)
	b = append(append(b, msgStr("extra")...), 0x90)
	b = append(append(b, msgStr("sequence")...), 0x05)
	b = append(append(b, msgStr("worker_id")...), 0x01)
	b = append(append(b, msgStr("session_id")...), msgStr("s")...)
	b = append(append(b, msgStr("routing_group")...), msgStr("g")...)
	b = append(append(b, msgStr("model_name")...), msgStr("m")...)
	b = append(append(b, msgStr("v2_field")...), 0xc3)
	var ev core.AffinityEvent
	want := core.AffinityEvent{ModelName: "m", RoutingGroup: "g", SessionID: "s", WorkerID: 1, Sequence: 5, WriterID: 9}
	if err := DecodeAffinity(b, &ev); err != nil || ev != want {
		t.Fatalf("reordered map: %v %+v", err, ev)
	}
	arr := append([]byte{0x97}, msgStr("m")...)
	arr = append(append(append(arr, msgStr("g")...), msgStr("s")...), 0x01, 0x02, 0x05, 0x09)
	want.DPRank, want.HasDPRank = 2, true
	if err := DecodeAffinity(arr, &ev); err != nil || ev != want {
		t.Fatalf("array: %v %+v", err, ev)
	}
	for name, bad := range map[string][]byte{
		"missing writer":  append(append([]byte{0x81}, msgStr("model_name")...), msgStr("m")...),
		"negative worker": append(append(append([]byte{0x97}, msgStr("m")...), append(msgStr("g"), msgStr("s")...)...), 0xff, 0x02, 0x05, 0x09),
		"trailing bytes":  append(append([]byte(nil), arr...), 0x00),
		"not a map":       {0xc0},
	} {
		if err := DecodeAffinity(bad, &ev); !errors.Is(err, ErrAffinityEvent) {
			t.Errorf("%s: %v", name, err)
		}
	}
}

// affinityReplica is a replica of the affinity mesh tests: a service with
// session affinity whose bindings go to its mesh, and which applies its
// peers' when handle is set.
func affinityReplica(t *testing.T, handle bool) *replica {
	t.Helper()
	return affinityReplicaWith(t, handle, Config{})
}

// affinityReplicaWith is affinityReplica with cfg (Bind is set here).
func affinityReplicaWith(t *testing.T, handle bool, cfg Config) *replica {
	t.Helper()
	cfg.Bind = "tcp://127.0.0.1:0"
	m, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ccfg := core.DefaultConfig()
	ccfg.UseKVEvents = false
	ccfg.SessionAffinity = core.AffinityConfig{TTL: time.Minute}
	svc, err := core.New(ccfg, core.Options{Replica: m, Affinity: m, WriterID: m.ProcessID()})
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range []uint64{1, 2} {
		ep, bs := fmt.Sprintf("http://w%d", id), uint32(4)
		if _, err := svc.UpsertWorker(&core.WorkerSpec{WorkerID: id, WorkerFields: core.WorkerFields{Endpoint: &ep, BlockSize: &bs}}); err != nil {
			t.Fatal(err)
		}
	}
	if handle {
		m.HandleAffinity(svc)
	}
	if err := m.Start(svc); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = m.Close() })
	return &replica{svc: svc, mesh: m}
}

// TestMeshReplicatesAffinity: a binding made on A is applied on B (which
// installed a handler and so subscribed), steering B's selections; C,
// without a handler, never subscribes to the topic and receives nothing;
// A's lease release re-publishes the binding, which B refreshes.
func TestMeshReplicatesAffinity(t *testing.T) {
	checkNoLeak(t)
	a := affinityReplica(t, true)
	b := affinityReplica(t, true)
	c := affinityReplica(t, false)
	for _, p := range []*replica{b, c} {
		if _, err := p.mesh.Register(a.mesh.Endpoint()); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := a.mesh.Register(b.mesh.Endpoint()); err != nil {
		t.Fatal(err)
	}
	// A peer subscribes to its topics one message at a time, the
	// affinity topic last: wait for that one.
	waitFor(t, "subscriptions", func() bool {
		return a.mesh.Stats().Subscribers == 2 && b.mesh.Stats().Subscribers == 1 && a.mesh.Stats().AffinitySubscribers == 1
	})
	req := func(id, session string) *core.SelectRequest {
		r := &core.SelectRequest{SelectionID: id, HasSelectionID: id != "", SessionID: session, HasSessionID: true}
		r.TokenIDs, r.HasTokenIDs = []uint32{1, 2, 3, 4}, true
		return r
	}
	var out core.Selection
	if err := a.svc.SelectAndReserve(req("r1", "s"), &out); err != nil {
		t.Fatal(err)
	}
	bound := out.WorkerID
	waitFor(t, "the binding on B", func() bool { return b.svc.AffinityStats().Applied[core.AffinityInserted] == 1 })
	// B steers the session to the bound worker even when it is the loaded
	// one (the booking mirrored from A loads it on B too).
	for range 3 {
		if err := b.svc.Select(req("", "s"), &out); err != nil || out.WorkerID != bound {
			t.Fatalf("B's select: %v on %d, bound %d", err, out.WorkerID, bound)
		}
	}
	if err := a.svc.Free("r1"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the release on B", func() bool { return b.svc.AffinityStats().Applied[core.AffinityRefreshed] >= 1 })
	if st := c.svc.AffinityStats(); st.Applied != [core.NumAffinityApply]uint64{} {
		t.Fatalf("C applied %v without a handler", st.Applied)
	}
	if st := c.mesh.Stats(); st.Dropped[DropTopic] != 0 {
		t.Fatalf("C received affinity messages: %+v", st.Dropped)
	}
	st := a.mesh.Stats()
	if st.AffinityPublished < 2 || st.AffinityOutboundLimit != DefaultAffinityOutbound || st.AffinityOutboundDropped != 0 {
		t.Fatalf("A's affinity stats: %+v", st)
	}
}

// TestAffinityNotHeldByBookingBatch: a binding goes out while the
// publisher holds a booking batch open (here for an hour): B applies it,
// and has not seen the booking.
func TestAffinityNotHeldByBookingBatch(t *testing.T) {
	checkNoLeak(t)
	a := affinityReplicaWith(t, true, Config{PublishWait: time.Hour})
	b := affinityReplica(t, true)
	if _, err := b.mesh.Register(a.mesh.Endpoint()); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "B subscribed", func() bool { return a.mesh.Stats().AffinitySubscribers == 1 })
	r := &core.SelectRequest{SelectionID: "held", HasSelectionID: true}
	r.TokenIDs, r.HasTokenIDs = []uint32{1, 2, 3, 4}, true
	var out core.Selection
	if err := a.svc.SelectAndReserve(r, &out); err != nil {
		t.Fatal(err)
	}
	// The publisher has taken the booking and waits for more.
	waitFor(t, "the booking taken", func() bool { return a.mesh.out.Queued() == 0 && a.mesh.Stats().OutboundDepth == 1 })
	r = &core.SelectRequest{SelectionID: "bound", HasSelectionID: true, SessionID: "s", HasSessionID: true}
	r.TokenIDs, r.HasTokenIDs = []uint32{5, 6, 7, 8}, true
	if err := a.svc.SelectAndReserve(r, &out); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the binding on B", func() bool { return b.svc.AffinityStats().Applied[core.AffinityInserted] == 1 })
	if n := b.svc.Stats().ReplicaApplied; n != 0 {
		t.Fatalf("B applied %d booking events, want 0 (the batch is held)", n)
	}
}

// FuzzAffinityEvent: DecodeAffinity reads untrusted peer bytes: it never
// panics, and what it accepts encodes back to an event it decodes to the
// same value.
func FuzzAffinityEvent(f *testing.F) {
	f.Add(AppendAffinity(nil, &core.AffinityEvent{ModelName: "m", RoutingGroup: "g", SessionID: "s", WorkerID: 1, DPRank: 2, HasDPRank: true, Sequence: 3, WriterID: 4}))
	f.Add(AppendAffinity(nil, &core.AffinityEvent{SessionID: "x", WorkerID: 1 << 63, Sequence: 1 << 62}))
	f.Add([]byte{0x97, 0xa1, 'm', 0xa1, 'g', 0xa1, 's', 0x01, 0xc0, 0x05, 0x09})
	f.Add([]byte{0x81, 0xa7, 'd', 'p', '_', 'r', 'a', 'n', 'k', 0xdd, 0xff, 0xff, 0xff, 0xff})
	f.Fuzz(func(t *testing.T, b []byte) {
		var ev core.AffinityEvent
		if DecodeAffinity(b, &ev) != nil {
			return
		}
		var back core.AffinityEvent
		if err := DecodeAffinity(AppendAffinity(nil, &ev), &back); err != nil || back != ev {
			t.Fatalf("re-encoded %+v: %v %+v", ev, err, back)
		}
	})
}
