package mesh

import (
	"bytes"
	"encoding/hex"
	"errors"
	"reflect"
	"testing"

	"github.com/kvselect/kvselect/core"
	"github.com/kvselect/kvselect/zmqin/internal/msgpack"
)

func u32p(v uint32) *uint32 { return &v }

func sampleEvents() []core.ReplicaEvent {
	w := core.WorkerKey{WorkerID: 7, DPRank: 1}
	return []core.ReplicaEvent{
		{Kind: core.ReplicaAdd, ModelName: "m", RoutingGroup: "g", BlockSize: 16, RequestID: "r-1", Worker: w, LoraName: "lora",
			SequenceHashes: []uint64{1, 300, 1 << 40, ^uint64(0)}, TrackPrefillTokens: true, ExpectedOutputTokens: u32p(128), EffectivePrefillTokens: 4096},
		{Kind: core.ReplicaAdd, ModelName: "m", RoutingGroup: "g", BlockSize: 16, RequestID: "r-2", Worker: w, SequenceHashes: []uint64{}},
		{Kind: core.ReplicaPrefillCompleted, ModelName: "m", RoutingGroup: "g", BlockSize: 16, RequestID: "r-1", Worker: w},
		{Kind: core.ReplicaFree, ModelName: "m", RoutingGroup: "g", BlockSize: 16, RequestID: "r-1", Worker: w},
	}
}

// TestEnvelopeRoundTrip: what AppendEnvelope writes decodes to the same
// event, with the router id as its origin.
func TestEnvelopeRoundTrip(t *testing.T) {
	for _, ev := range sampleEvents() {
		b := AppendEnvelope(nil, &ev, 42)
		var got core.ReplicaEvent
		if err := DecodeEnvelope(b, &got); err != nil {
			t.Fatalf("%v: %v", ev.Kind, err)
		}
		want := ev
		want.Origin = 42
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("round trip\n got %+v\nwant %+v", got, want)
		}
	}
}

// TestEnvelopeBound: envelopeBound covers the envelope of every kind, with
// every integer at its widest and long strings, so a publish never grows
// its payload.
func TestEnvelopeBound(t *testing.T) {
	long := string(bytes.Repeat([]byte("x"), 70000)) // a str32 header
	wide := ^uint64(0)
	evs := sampleEvents()
	for _, k := range []core.ReplicaEventKind{core.ReplicaAdd, core.ReplicaPrefillCompleted, core.ReplicaFree} {
		evs = append(evs, core.ReplicaEvent{Kind: k, ModelName: long, RoutingGroup: long, BlockSize: ^uint32(0), RequestID: long,
			Worker: core.WorkerKey{WorkerID: wide, DPRank: ^uint32(0)}, LoraName: long, SequenceHashes: []uint64{wide, wide, wide},
			TrackPrefillTokens: true, ExpectedOutputTokens: u32p(^uint32(0)), EffectivePrefillTokens: 1<<63 - 1})
	}
	for _, ev := range evs {
		n := envelopeBound(&ev)
		if b := AppendEnvelope(make([]byte, 0, n), &ev, wide); len(b) > n || cap(b) != n {
			t.Fatalf("%v: %d bytes, bound %d (cap %d)", ev.Kind, len(b), n, cap(b))
		}
	}
}

// TestEnvelopeBytes pins the bytes of a Free envelope, written by hand from
// rmp_serde's rules (maps of named fields in declaration order, fixstr
// keys, smallest integers, the unit variant as its name, None as nil).
func TestEnvelopeBytes(t *testing.T) {
	ev := core.ReplicaEvent{Kind: core.ReplicaFree, ModelName: "m", RoutingGroup: "g", BlockSize: 16, RequestID: "r", Worker: core.WorkerKey{WorkerID: 300, DPRank: 0}}
	var w bytes.Buffer
	w.WriteString("\x84")
	w.WriteString("\xaamodel_name\xa1m")
	w.WriteString("\xadrouting_group\xa1g")
	w.WriteString("\xaablock_size\x10")
	w.WriteString("\xa5event\x85")
	w.WriteString("\xaarequest_id\xa1r")
	w.WriteString("\xa6worker\x82\xa9worker_id\xcd\x01\x2c\xa7dp_rank\x00")
	w.WriteString("\xa4data\xa4Free")
	w.WriteString("\xa9router_id\xcf\x00\x00\x00\x01\x00\x00\x00\x00")
	w.WriteString("\xa9lora_name\xc0")
	if got := AppendEnvelope(nil, &ev, 1<<32); !bytes.Equal(got, w.Bytes()) {
		t.Fatalf("envelope\n got %s\nwant %s", hex.EncodeToString(got), hex.EncodeToString(w.Bytes()))
	}
}

// mp is a tiny msgpack writer for hand-built envelopes.
type mp []byte

func (b mp) m(n int) mp       { return append(b, 0x80|byte(n)) }
func (b mp) a(n int) mp       { return append(b, 0x90|byte(n)) }
func (b mp) s(s string) mp    { return msgpack.AppendStr(b, s) }
func (b mp) u(v uint64) mp    { return msgpack.AppendUint(b, v) }
func (b mp) raw(p ...byte) mp { return append(b, p...) }

// TestEnvelopeAcceptedForms: keys in any order (the previous schema written
// through a sorted JSON map), unknown keys, positional arrays, a missing
// lora_name and track_prefill_tokens (its default is true), a unit variant
// as {"Free": nil}.
func TestEnvelopeAcceptedForms(t *testing.T) {
	worker := mp{}.m(2).s("dp_rank").u(3).s("worker_id").u(9)
	add := mp{}.m(1).s("AddRequest").m(2).s("token_sequence").a(2).u(5).u(6).s("extra").u(1)
	sorted := mp{}.m(5).s("block_size").u(16).s("event").m(4).
		s("data").raw(add...).s("request_id").s("x").s("router_id").u(77).s("worker").raw(worker...).
		s("model_name").s("m").s("routing_group").s("g").s("unknown").a(0)
	var ev core.ReplicaEvent
	if err := DecodeEnvelope(sorted, &ev); err != nil {
		t.Fatal(err)
	}
	want := core.ReplicaEvent{Kind: core.ReplicaAdd, ModelName: "m", RoutingGroup: "g", BlockSize: 16, RequestID: "x",
		Worker: core.WorkerKey{WorkerID: 9, DPRank: 3}, Origin: 77, SequenceHashes: []uint64{5, 6}, TrackPrefillTokens: true}
	if !reflect.DeepEqual(ev, want) {
		t.Fatalf("sorted map\n got %+v\nwant %+v", ev, want)
	}

	arr := mp{}.a(4).s("m").s("g").u(16).a(5).s("x").a(2).u(9).u(3).m(1).s("Free").raw(0xc0).u(77).raw(0xc0)
	if err := DecodeEnvelope(arr, &ev); err != nil || ev.Kind != core.ReplicaFree || ev.Worker.DPRank != 3 || ev.Origin != 77 {
		t.Fatalf("array form: %+v %v", ev, err)
	}
}

// TestEnvelopeRejected: the legacy tenant_id schema, missing fields, a
// duplicate field, wrong types, trailing bytes, unknown variants, and every
// truncation of a valid envelope are errors, never panics.
func TestEnvelopeRejected(t *testing.T) {
	legacy := mp{}.m(4).s("model_name").s("m").s("tenant_id").s("t").s("block_size").u(16).s("event").
		m(4).s("request_id").s("x").s("worker").m(1).s("worker_id").u(1).s("data").s("Free").s("router_id").u(1)
	var ev core.ReplicaEvent
	if err := DecodeEnvelope(legacy, &ev); !errors.Is(err, ErrLegacyEnvelope) {
		t.Fatalf("legacy envelope: %v", err)
	}
	good := AppendEnvelope(nil, &sampleEvents()[0], 5)
	for _, bad := range []mp{
		mp{}.m(1).s("model_name").s("m"),
		mp{}.m(2).s("model_name").s("m").s("model_name").s("n"),
		mp{}.m(4).s("model_name").u(1).s("routing_group").s("g").s("block_size").u(16).s("event").m(0),
		append(append(mp{}, good...), 0xc0),
		mp{}.m(4).s("model_name").s("m").s("routing_group").s("g").s("block_size").u(16).s("event").
			m(4).s("request_id").s("x").s("worker").m(1).s("worker_id").u(1).s("data").s("Grow").s("router_id").u(1),
		mp{}.raw(0xc1),
	} {
		if err := DecodeEnvelope(bad, &ev); !errors.Is(err, ErrEnvelope) {
			t.Errorf("%x: %v, want ErrEnvelope", []byte(bad), err)
		}
	}
	for i := range len(good) {
		if err := DecodeEnvelope(good[:i], &ev); err == nil {
			t.Fatalf("truncated at %d of %d decoded", i, len(good))
		}
	}
}

// FuzzDecodeEnvelope: any payload decodes or errors without panicking, and
// what decodes re-encodes to an envelope that decodes to the same event.
func FuzzDecodeEnvelope(f *testing.F) {
	for _, ev := range sampleEvents() {
		f.Add(AppendEnvelope(nil, &ev, 3))
	}
	f.Add([]byte(mp{}.a(4).s("m").s("g").u(16).a(5).s("x").a(2).u(9).u(3).s("Free").u(77).raw(0xc0)))
	f.Fuzz(func(t *testing.T, b []byte) {
		var ev core.ReplicaEvent
		if DecodeEnvelope(b, &ev) != nil {
			return
		}
		if ev.Kind != core.ReplicaAdd {
			ev.SequenceHashes, ev.TrackPrefillTokens, ev.ExpectedOutputTokens, ev.EffectivePrefillTokens = nil, false, nil, 0
		}
		if !ev.TrackPrefillTokens {
			ev.EffectivePrefillTokens = 0
		}
		var again core.ReplicaEvent
		if err := DecodeEnvelope(AppendEnvelope(nil, &ev, uint64(ev.Origin)), &again); err != nil {
			t.Fatalf("re-encoded envelope does not decode: %v", err)
		}
		if ev.Kind == core.ReplicaAdd && ev.SequenceHashes == nil {
			ev.SequenceHashes = []uint64{}
		}
		if !reflect.DeepEqual(ev, again) {
			t.Fatalf("re-encoding changed the event\n%+v\n%+v", ev, again)
		}
	})
}
