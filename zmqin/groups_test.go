package zmqin

import (
	"testing"

	"github.com/kvselect/kvselect/radix"
)

// TestGroupFilter is a hybrid-model scenario: group 0 is full attention,
// group 1 sliding window, group 2 MLA, group 3 an unknown kind, group 4
// never described. Only main-attention groups reach the index, and a group's
// kind is learned per (rank, group) from BlockStored events.
func TestGroupFilter(t *testing.T) {
	st := func(g uint32, kind string, h uint64) WireEvent {
		return WireEvent{Kind: radix.Stored, BlockHashes: []uint64{h}, TokenIDs: []uint32{1, 2, 3, 4},
			BlockSize: 4, GroupIdx: g, SpecKind: kind}
	}
	rm := func(g uint32, h uint64) WireEvent {
		return WireEvent{Kind: radix.Removed, BlockHashes: []uint64{h}, GroupIdx: g}
	}
	type kept struct {
		kind radix.EventKind
		hash uint64
	}
	steps := []struct {
		name  string
		rank  uint32
		reset bool
		evs   []WireEvent
		kept  []kept
		drops DropCounts
	}{
		{
			name: "learn on rank 0", rank: 0,
			evs: []WireEvent{
				rm(1, 10),                       // group 1 not learned yet
				st(0, "full_attention", 1),      // kept, teaches group 0
				st(1, "sliding_window", 2),      // dropped, teaches group 1
				rm(1, 2),                        // group 1 is sliding window
				rm(0, 1),                        // kept
				st(2, "mla_attention", 3),       // kept (MLA is main attention)
				st(3, "some_future_kind", 4),    // unknown kind
				rm(3, 4),                        // learned unknown
				st(4, "", 5),                    // group 4 without kind, never learned
				{Kind: radix.Cleared},           // no metadata: kept
				st(0, "sink_full_attention", 6), // kept
			},
			kept:  []kept{{radix.Stored, 1}, {radix.Removed, 1}, {radix.Stored, 3}, {radix.Cleared, 0}, {radix.Stored, 6}},
			drops: DropCounts{DropUnlearnedGroup: 2, DropNonMainAttention: 2, DropUnknownKind: 2},
		},
		{
			name: "groups are per rank", rank: 1,
			evs:   []WireEvent{rm(1, 2), rm(0, 1)},
			kept:  []kept{{radix.Removed, 1}},
			drops: DropCounts{DropUnlearnedGroup: 1},
		},
		{
			name: "rank 0 remembers across batches", rank: 0,
			evs:   []WireEvent{rm(1, 2), rm(2, 3)},
			kept:  []kept{{radix.Removed, 3}},
			drops: DropCounts{DropNonMainAttention: 1},
		},
		{
			name: "reset forgets", rank: 0, reset: true,
			evs:   []WireEvent{rm(1, 2), rm(2, 3)},
			drops: DropCounts{DropUnlearnedGroup: 2},
		},
	}
	for _, enc := range []Encoder{{Encoding: EncodingArray}, {Encoding: EncodingMap}} {
		d := NewDecoder(4)
		for _, s := range steps {
			if s.reset {
				d.Reset()
			}
			p := enc.AppendBatch(nil, &WireBatch{Events: s.evs, DPRank: s.rank, HasDPRank: true})
			b, err := d.Decode(p, radix.WorkerKey{WorkerID: 1})
			if err != nil {
				t.Fatalf("%v %s: %v", enc.Encoding, s.name, err)
			}
			var got []kept
			for _, e := range b.Events {
				k := kept{kind: e.Kind}
				if len(e.Blocks) > 0 {
					k.hash = e.Blocks[0].Hash
				}
				if len(e.Hashes) > 0 {
					k.hash = e.Hashes[0]
				}
				got = append(got, k)
			}
			if len(got) != len(s.kept) || b.Skipped != s.drops {
				t.Errorf("%v %s: kept %v skipped %v; want %v %v", enc.Encoding, s.name, got, b.Skipped, s.kept, s.drops)
				continue
			}
			for i := range got {
				if got[i] != s.kept[i] {
					t.Errorf("%v %s: kept %v, want %v", enc.Encoding, s.name, got, s.kept)
					break
				}
			}
		}
	}
}

// TestGroupTableBounded: a stream naming ever new groups cannot grow the
// learned table past maxGroups.
func TestGroupTableBounded(t *testing.T) {
	d := NewDecoder(4)
	var evs []WireEvent
	for g := range uint32(3 * maxGroups) {
		evs = append(evs, WireEvent{Kind: radix.Stored, BlockHashes: []uint64{1}, TokenIDs: []uint32{1, 2, 3, 4},
			BlockSize: 4, GroupIdx: g, SpecKind: "full_attention"})
	}
	p := Encoder{}.AppendBatch(nil, &WireBatch{Events: evs})
	if _, err := d.Decode(p, radix.WorkerKey{}); err != nil {
		t.Fatal(err)
	}
	if len(d.groups) != maxGroups {
		t.Errorf("learned %d groups, want the bound %d", len(d.groups), maxGroups)
	}
}
