package core

import (
	"bytes"
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/kvselect/kvselect/radix"
)

func keyed(key byte, id string) *keyedHasher {
	return newKeyedHasher(&TrackingHash{Keyed: true, Key: bytes.Repeat([]byte{key}, TrackingKeySize), KeyID: id})
}

func iota32(n int) []uint32 {
	out := make([]uint32, n)
	for i := range out {
		out[i] = uint32(i)
	}
	return out
}

// TestKeyedTrackingVectors reproduces every known answer of Dynamo's
// tracking-hash unit tests (ai-dynamo/dynamo:lib/kv-router/src/
// tracking_hash.rs: keyed_hash_vector_pins_scope_and_chain_framing and
// keyed_vectors_pin_multimodal_eagle_and_partial_block_rules).
func TestKeyedTrackingVectors(t *testing.T) {
	var buf []byte
	k := keyed(0x5a, "2026-01")
	got := k.keyedSequence(nil, &trackingScope{model: "model-a", group: "tenant-a", blockSize: 4, salt: "cache-a", lora: "adapter-a"}, iota32(12), nil, &buf)
	if want := []uint64{4_363_769_719_052_127_296, 14_998_523_962_162_619_427, 13_920_914_207_884_994_756}; !slices.Equal(got, want) {
		t.Errorf("scope and chain framing: %v, want %v", got, want)
	}

	k = keyed(0x41, "2026-01")
	base := trackingScope{model: "model", group: "default", blockSize: 4}
	toks := iota32(10) // two full blocks and a partial one, dropped
	without := k.keyedSequence(nil, &base, toks, nil, &buf)
	withMM := k.keyedSequence(nil, &base, toks, [][]uint64{{42}, nil}, &buf)
	eagle := base
	eagle.eagle = true
	withEagle := k.keyedSequence(nil, &eagle, toks, nil, &buf)
	if len(without) != 2 {
		t.Errorf("partial block: %d hashes, want 2", len(without))
	}
	if want := []uint64{13_077_030_603_177_067_515, 12_131_634_976_806_651_614}; !slices.Equal(withMM, want) {
		t.Errorf("multimodal: %v, want %v", withMM, want)
	}
	if want := []uint64{18_351_479_723_295_049_348, 8_577_555_336_206_814_019}; !slices.Equal(withEagle, want) {
		t.Errorf("eagle: %v, want %v", withEagle, want)
	}
	if slices.Equal(without, withMM) {
		t.Error("multimodal content does not change the keyed hashes")
	}
}

// TestKeyedTrackingScopeSensitive mirrors keyed_contexts_are_stable_and_
// scope_sensitive: the same context is stable; model, group, block size,
// key epoch, cache salt, LoRA and eagle each change the hashes.
func TestKeyedTrackingScopeSensitive(t *testing.T) {
	var buf []byte
	first, second, next := keyed(0x23, "2026-01"), keyed(0x23, "2026-01"), keyed(0x23, "2026-02")
	toks := iota32(12)
	sc := trackingScope{model: "model-a", group: "group-a", blockSize: 4}
	base := first.keyedSequence(nil, &sc, toks, nil, &buf)
	if got := second.keyedSequence(nil, &sc, toks, nil, &buf); !slices.Equal(got, base) {
		t.Error("not stable across contexts")
	}
	variants := map[string]trackingScope{}
	for name, f := range map[string]func(*trackingScope){
		"model": func(s *trackingScope) { s.model = "model-b" }, "group": func(s *trackingScope) { s.group = "group-b" },
		"block size": func(s *trackingScope) { s.blockSize = 3 }, "salt": func(s *trackingScope) { s.salt = "cache-a" },
		"lora": func(s *trackingScope) { s.lora = "adapter-a" }, "eagle": func(s *trackingScope) { s.eagle = true },
	} {
		v := sc
		f(&v)
		variants[name] = v
	}
	for name, v := range variants {
		if got := first.keyedSequence(nil, &v, toks, nil, &buf); slices.Equal(got, base) {
			t.Errorf("%s does not change the hashes", name)
		}
	}
	if got := next.keyedSequence(nil, &sc, toks, nil, &buf); slices.Equal(got, base) {
		t.Error("the key epoch does not change the hashes")
	}
}

// TestTrackingHashValidate pins the reference's configuration errors.
func TestTrackingHashValidate(t *testing.T) {
	key := make([]byte, TrackingKeySize)
	for _, tc := range []struct {
		th   TrackingHash
		want string
	}{
		{TrackingHash{}, ""},
		{TrackingHash{Keyed: true, Key: key, KeyID: "2026-01"}, ""},
		{TrackingHash{Key: key}, "router tracking key options require router_tracking_hash=keyed-xxh3-v1"},
		{TrackingHash{KeyID: "x"}, "router tracking key options require router_tracking_hash=keyed-xxh3-v1"},
		{TrackingHash{Keyed: true, KeyID: "x"}, "keyed-xxh3-v1 requires router_tracking_key_file"},
		{TrackingHash{Keyed: true, Key: key}, "keyed-xxh3-v1 requires a nonempty router_tracking_key_id"},
		{TrackingHash{Keyed: true, Key: key, KeyID: " 2026-01"}, "keyed-xxh3-v1 requires a nonempty router_tracking_key_id"},
		{TrackingHash{Keyed: true, Key: key[:31], KeyID: "x"}, "router tracking key file must contain exactly 32 raw bytes; found 31"},
	} {
		err := tc.th.Validate()
		if tc.want == "" {
			if err != nil {
				t.Errorf("%+v: %v", tc.th, err)
			}
			continue
		}
		if !errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: %v, want %q", tc.th, err, tc.want)
		}
	}
}

// TestKeyedSelection: with a keyed config, a token_ids select_and_reserve
// books keyed tracking hashes while the index is matched with the public
// local hashes (a worker's public KV events still count); precomputed
// hashes are booked as given.
func TestKeyedSelection(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Tracking = TrackingHash{Keyed: true, Key: bytes.Repeat([]byte{0x5a}, TrackingKeySize), KeyID: "2026-01"}
	s, err := New(cfg, Options{})
	if err != nil {
		t.Fatal(err)
	}
	bs := uint32(4)
	if _, err := s.UpsertWorker(&WorkerSpec{WorkerID: 1, ModelName: "model-a", RoutingGroup: "tenant-a", WorkerFields: WorkerFields{Endpoint: ptr("http://w"), BlockSize: &bs, KVEventsEndpoint: ptr("tcp://127.0.0.1:5557")}}); err != nil {
		t.Fatal(err)
	}
	toks := iota32(12)
	seed := radix.HashSeed("adapter-a", "cache-a")
	local := radix.LocalHashes(nil, toks, 4, seed)
	ev := radix.Event{Worker: radix.WorkerKey{WorkerID: 1}, Kind: radix.Stored}
	for i, l := range local[:2] {
		ev.Blocks = append(ev.Blocks, radix.Block{Hash: uint64(100 + i), Local: l})
	}
	s.EventSink("model-a", "tenant-a").ApplyBatch([]radix.Event{ev})

	req := SelectRequest{ModelName: "model-a", RoutingGroup: "tenant-a", SelectionID: "k", HasSelectionID: true,
		Prompt: Prompt{TokenIDs: toks, HasTokenIDs: true, LoraName: "adapter-a", CacheSalt: "cache-a"}}
	var out Selection
	if err := s.SelectAndReserve(&req, &out); err != nil {
		t.Fatal(err)
	}
	if want := []uint64{4_363_769_719_052_127_296, 14_998_523_962_162_619_427, 13_920_914_207_884_994_756}; !slices.Equal(out.SequenceHashes, want) {
		t.Errorf("booked %v, want the keyed vector %v", out.SequenceHashes, want)
	}
	if out.Overlap.GPU != 8 {
		t.Errorf("overlap %+v: the public local hashes did not match the worker's events", out.Overlap)
	}
	pre := SelectRequest{ModelName: "model-a", RoutingGroup: "tenant-a", Prompt: Prompt{
		BlockHashes: local, HasBlockHashes: true, SequenceHashes: []uint64{7, 8, 9}, HasSequenceHashes: true, ISLTokens: 12, HasISLTokens: true}}
	if err := s.SelectAndReserve(&pre, &out); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(out.SequenceHashes, []uint64{7, 8, 9}) {
		t.Errorf("precomputed hashes rewritten: %v", out.SequenceHashes)
	}
}

// TestKeyedSelectAllocs: keyed derivation adds no allocation to a
// warmed-up select.
func TestKeyedSelectAllocs(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector allocates")
	}
	cfg := DefaultConfig()
	cfg.UseKVEvents = false
	cfg.Tracking = TrackingHash{Keyed: true, Key: make([]byte, TrackingKeySize), KeyID: "e"}
	s, _ := New(cfg, Options{})
	bs := uint32(16)
	if _, err := s.UpsertWorker(&WorkerSpec{WorkerID: 1, WorkerFields: WorkerFields{Endpoint: ptr("http://w"), BlockSize: &bs}}); err != nil {
		t.Fatal(err)
	}
	req := SelectRequest{Prompt: Prompt{TokenIDs: iota32(256), HasTokenIDs: true, LoraName: "l", CacheSalt: "c"}}
	var out Selection
	if n := testing.AllocsPerRun(100, func() {
		if err := s.Select(&req, &out); err != nil {
			t.Fatal(err)
		}
	}); n != 0 {
		t.Errorf("%v allocations per keyed select", n)
	}
}
