package natsplane

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"testing"

	"github.com/kvselect/kvselect/core"
	"github.com/kvselect/kvselect/radix"
	"github.com/kvselect/kvselect/zmqin/mesh"
)

func fixture(t testing.TB, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", "wire", name))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestFixturesRegenerate reruns testdata/wire.py with Debian's python3 and
// python3-msgpack and compares every fixture byte for byte with the
// stored one, so the stored bytes are what that independent encoder
// writes.
func TestFixturesRegenerate(t *testing.T) {
	const py = "/usr/bin/python3"
	if _, err := os.Stat(py); err != nil {
		t.Skip("no /usr/bin/python3: the stored fixtures are checked by the golden tests only")
	}
	if err := exec.Command(py, "-c", "import msgpack").Run(); err != nil {
		t.Skip("no python3-msgpack (apt-get install python3-msgpack): the stored fixtures are checked by the golden tests only")
	}
	dir := t.TempDir()
	if out, err := exec.Command(py, filepath.Join("testdata", "wire.py"), dir).CombinedOutput(); err != nil {
		t.Fatalf("wire.py: %v\n%s", err, out)
	}
	want, err := os.ReadDir(filepath.Join("testdata", "wire"))
	if err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != len(want) {
		t.Fatalf("wire.py wrote %d files, testdata/wire holds %d", len(got), len(want))
	}
	for _, e := range want {
		g, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(g, fixture(t, e.Name())) {
			t.Errorf("%s: wire.py's bytes differ from the stored fixture (rerun: /usr/bin/python3 testdata/wire.py)", e.Name())
		}
	}
}

const (
	fxPub = 0x000A0B0C0D0E0F10
	fxT0  = 1767225600000
	fxW   = 523124044
)

func wk(rank uint32) radix.WorkerKey { return radix.WorkerKey{WorkerID: fxW, DPRank: rank} }

// goldenKV is what each KV fixture decodes to.
var goldenKV = map[string]struct {
	env     Envelope // zero for the legacy JSON body
	form    Form
	events  []radix.Event
	skipped [numKVDrops]uint64
}{
	"kv_batch_stored.bin": {
		env:  Envelope{PublisherID: fxPub, Sequence: 3, PublishedAt: fxT0, Topic: []byte("kv-events")},
		form: FormBatch,
		events: []radix.Event{{Worker: wk(0), EventID: 7, Kind: radix.Stored,
			Blocks: []radix.Block{{Hash: 0x8000000000000001, Local: 42}}}},
	},
	"kv_batch_mixed.bin": {
		env:  Envelope{PublisherID: fxPub, Sequence: 4, PublishedAt: fxT0 + 1, Topic: []byte("kv-events")},
		form: FormBatch,
		events: []radix.Event{
			{Worker: wk(0), EventID: 8, Kind: radix.Stored, Tier: radix.TierHostPinned, ParentHash: 0x8000000000000001, HasParent: true,
				StartPosition: 1, HasStartPosition: true, Blocks: []radix.Block{{Hash: 101, Local: 1001}, {Hash: 102, Local: 1002}}},
			{Worker: wk(0), EventID: 9, Kind: radix.Removed, Hashes: []uint64{5, 6}},
			{Worker: wk(1), EventID: 1, Kind: radix.Cleared},
		},
	},
	"kv_single.bin": {
		env:    Envelope{PublisherID: 77, Sequence: 0, PublishedAt: fxT0, Topic: []byte("kv-events")},
		form:   FormSingle,
		events: []radix.Event{{Worker: wk(0), EventID: 1, Kind: radix.Stored, Blocks: []radix.Block{{Hash: 11, Local: 111}}}},
	},
	"kv_legacy.json": {
		form: FormLegacyJSON,
		events: []radix.Event{{Worker: wk(0), EventID: 1, Kind: radix.Stored,
			Blocks: []radix.Block{{Hash: 21, Local: 211}, {Hash: 22, Local: 212}}}},
	},
	"kv_batch_drops.bin": {
		env:     Envelope{PublisherID: fxPub, Sequence: 5, PublishedAt: fxT0, Topic: []byte("kv-events")},
		form:    FormBatch,
		events:  []radix.Event{{Worker: wk(0), EventID: 12, Kind: radix.Removed, Hashes: []uint64{101}}},
		skipped: [numKVDrops]uint64{KVDropResidency: 1, KVDropCacheOwner: 1},
	},
}

// TestGoldenKV decodes every KV fixture.
func TestGoldenKV(t *testing.T) {
	var d KVDecoder
	for name, want := range goldenKV {
		body := fixture(t, name)
		var b KVBatch
		var err error
		switch classify(body) {
		case bodyJSON:
			b, err = d.DecodeLegacyJSON(body)
		case bodyEnvelope:
			var env Envelope
			if env, err = DecodeEnvelope(body); err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			payload := env.Payload
			env.Payload = nil
			if !reflect.DeepEqual(env, want.env) {
				t.Errorf("%s: envelope %+v, want %+v", name, env, want.env)
			}
			b, err = d.Decode(payload)
		default:
			t.Fatalf("%s: classified as neither", name)
		}
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if b.Form != want.form || !reflect.DeepEqual(b.Events, want.events) || b.Skipped != want.skipped {
			t.Errorf("%s: got form %v events %+v skipped %v\nwant form %v events %+v skipped %v", name, b.Form, b.Events, b.Skipped, want.form, want.events, want.skipped)
		}
	}
}

// TestEncodeKVMatchesFixtures: the current form, as kvselect publishes it,
// is byte for byte what wire.py (rmp_serde's rules) writes.
func TestEncodeKVMatchesFixtures(t *testing.T) {
	for _, name := range []string{"kv_batch_stored.bin", "kv_batch_mixed.bin"} {
		g := goldenKV[name]
		payload := AppendRouterEvents(nil, g.events)
		got := AppendEnvelope(nil, g.env.PublisherID, g.env.Sequence, g.env.PublishedAt, string(g.env.Topic), payload)
		if !bytes.Equal(got, fixture(t, name)) {
			t.Errorf("%s: encoded\n%x\nwant\n%x", name, got, fixture(t, name))
		}
	}
	// The envelope of one stored batch as rmp_serde writes it (named
	// maps, ai-dynamo/dynamo:lib/runtime/src/transports/event_plane/codec.rs):
	// 268 bytes in all, a 187-byte payload.
	if n := len(fixture(t, "kv_batch_stored.bin")); n != 268 {
		t.Errorf("kv_batch_stored.bin is %d bytes, the spec's example 268", n)
	}
}

// goldenSeq is what each booking fixture decodes to.
var goldenSeq = map[string]core.ReplicaEvent{
	"seq_add.bin": {Kind: core.ReplicaAdd, RequestID: "req-1", Worker: wk(0), Origin: 99, SequenceHashes: []uint64{11, 12},
		TrackPrefillTokens: true, EffectivePrefillTokens: 512},
	"seq_prefill.bin": {Kind: core.ReplicaPrefillCompleted, RequestID: "req-1", Worker: wk(0), Origin: 99},
	"seq_free.bin":    {Kind: core.ReplicaFree, RequestID: "req-1", Worker: wk(0), Origin: 99, LoraName: "adapter-a"},
	// Before #7617: isl and overlap ignored, no hint, tracking by default.
	"seq_add_old.bin": {Kind: core.ReplicaAdd, RequestID: "req-old", Worker: wk(0), Origin: 98, SequenceHashes: []uint64{7},
		TrackPrefillTokens: true, ExpectedOutputTokens: ptr(uint32(10))},
}

func ptr[T any](v T) *T { return &v }

func TestGoldenBookings(t *testing.T) {
	for name, want := range goldenSeq {
		env, err := DecodeEnvelope(fixture(t, name))
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if string(env.Topic) != TopicActiveSequences {
			t.Errorf("%s: topic %q", name, env.Topic)
		}
		var ev core.ReplicaEvent
		if err := mesh.DecodeSequenceEvent(env.Payload, &ev); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if !reflect.DeepEqual(ev, want) {
			t.Errorf("%s: got %+v, want %+v", name, ev, want)
		}
		if name == "seq_add_old.bin" {
			continue // kvselect publishes the current form only
		}
		payload := mesh.AppendSequenceEvent(nil, &want, uint64(want.Origin))
		if name == "seq_add.bin" && len(payload) != 237 {
			t.Errorf("seq_add payload is %d bytes, the spec's example 237", len(payload))
		}
		got := AppendEnvelope(nil, env.PublisherID, env.Sequence, env.PublishedAt, TopicActiveSequences, payload)
		if !bytes.Equal(got, fixture(t, name)) {
			t.Errorf("%s: encoded\n%x\nwant\n%x", name, got, fixture(t, name))
		}
	}
}

// TestEncodeSegment: Dynamo's encode_event_segment, case by case
// (ai-dynamo/dynamo:lib/runtime/src/discovery/mod.rs and spec examples).
func TestEncodeSegment(t *testing.T) {
	for in, want := range map[string]string{
		"dynamo": "dynamo", "vllm-agg": "vllm-agg", "kv-events": "kv-events", "active_sequences_events": "active_sequences_events",
		"my.ns": "my%2Ens", "a b": "a%20b", "é": "%C3%A9", "*": "%2A", ">": "%3E", "a/b%": "a%2Fb%25", "": "",
	} {
		if got := EncodeSegment(in); got != want {
			t.Errorf("EncodeSegment(%q) = %q, want %q", in, got, want)
		}
	}
	s := Scope{Namespace: "my.ns", Component: "backend", Endpoint: "generate"}
	if got, want := s.Subject(TopicKVEvents), "namespace.my%2Ens.component.backend.endpoint.generate.kv-events"; got != want {
		t.Errorf("subject %q, want %q", got, want)
	}
	if got, want := s.ComponentScope().Subject(TopicActiveSequences), "namespace.my%2Ens.component.backend.active_sequences_events"; got != want {
		t.Errorf("subject %q, want %q", got, want)
	}
	cfg := IngressConfig{Scope: s}
	want := []string{
		"namespace.my%2Ens.component.backend.endpoint.generate.kv-events", "namespace.my%2Ens.component.backend.endpoint.generate.kv_events",
		"namespace.my%2Ens.component.backend.kv-events", "namespace.my%2Ens.component.backend.kv_events",
	}
	if got := cfg.Subjects(); !reflect.DeepEqual(got, want) {
		t.Errorf("subjects %q, want %q", got, want)
	}
}

// TestEnvelopeForms: keys in another order, an unknown key, and the
// positional array decode like the named map; a missing field, trailing
// bytes and truncations do not.
func TestEnvelopeForms(t *testing.T) {
	good := fixture(t, "kv_batch_stored.bin")
	want, err := DecodeEnvelope(good)
	if err != nil {
		t.Fatal(err)
	}
	for i := range len(good) {
		if _, err := DecodeEnvelope(good[:i]); err == nil {
			t.Fatalf("truncated at %d decoded", i)
		}
	}
	if _, err := DecodeEnvelope(append(append([]byte{}, good...), 0)); err == nil {
		t.Error("trailing byte accepted")
	}
	// {topic, payload, sequence, published_at_ns, published_at, publisher_id}
	var m []byte
	m = append(m, 0x86)
	m = appendKV(m, "topic", []byte{0xa9, 'k', 'v', '-', 'e', 'v', 'e', 'n', 't', 's'})
	m = appendKV(m, "payload", append([]byte{0xc4, byte(len(want.Payload))}, want.Payload...))
	m = appendKV(m, "sequence", []byte{0x03})
	m = appendKV(m, "published_at_ns", []byte{0x00})
	m = appendKV(m, "published_at", []byte{0xcf, 0, 0, 1, 0x9b, 0x76, 0xda, 0xa8, 0})
	m = appendKV(m, "publisher_id", []byte{0xcf, 0, 0x0a, 0x0b, 0x0c, 0x0d, 0x0e, 0x0f, 0x10})
	got, err := DecodeEnvelope(m)
	if err != nil || !reflect.DeepEqual(got, want) {
		t.Errorf("reordered: %+v %v", got, err)
	}
	arr := []byte{0x95, 0xcf, 0, 0x0a, 0x0b, 0x0c, 0x0d, 0x0e, 0x0f, 0x10, 0x03, 0xcf, 0, 0, 1, 0x9b, 0x76, 0xda, 0xa8, 0,
		0xa9, 'k', 'v', '-', 'e', 'v', 'e', 'n', 't', 's', 0xc4, byte(len(want.Payload))}
	arr = append(arr, want.Payload...)
	if got, err := DecodeEnvelope(arr); err != nil || !reflect.DeepEqual(got, want) {
		t.Errorf("positional: %+v %v", got, err)
	}
	if _, err := DecodeEnvelope([]byte{0x81, 0xa8, 's', 'e', 'q', 'u', 'e', 'n', 'c', 'e', 0x01}); err == nil {
		t.Error("envelope with one field accepted")
	}
}

func appendKV(dst []byte, k string, v []byte) []byte {
	dst = append(dst, 0xa0|byte(len(k)))
	dst = append(dst, k...)
	return append(dst, v...)
}

// FuzzDecode: no body panics the envelope or KV decoders, and what decodes
// re-encodes into a body that decodes to the same events.
func FuzzDecode(f *testing.F) {
	for name := range goldenKV {
		f.Add(fixture(f, name))
	}
	var d KVDecoder
	f.Fuzz(func(t *testing.T, body []byte) {
		var b KVBatch
		var err error
		switch classify(body) {
		case bodyJSON:
			b, err = d.DecodeLegacyJSON(body)
		case bodyEnvelope:
			var env Envelope
			if env, err = DecodeEnvelope(body); err != nil {
				return
			}
			b, err = d.Decode(env.Payload)
		default:
			return
		}
		if err != nil {
			return
		}
		evs := append([]radix.Event(nil), b.Events...)
		again, err := d.Decode(AppendRouterEvents(nil, evs))
		if err != nil || len(again.Events) != len(evs) {
			t.Fatalf("re-encoded events do not decode: %v", err)
		}
	})
}
