package core

import (
	"errors"
	"reflect"
	"testing"

	"github.com/kvselect/kvselect/radix"
)

// TestRestoreFromDump: a service restored from another's dump has the same
// index (its dump is equal, and so are its overlap scores for a prompt),
// with the partitions' block sizes; a model name with ':' keeps its name
// (the dump carries model and group); a conflicting block size applies
// nothing.
func TestRestoreFromDump(t *testing.T) {
	a := servingEnv(t, 2, 1)
	toks := make([]uint32, 64)
	for i := range toks {
		toks[i] = uint32(i + 1)
	}
	for w, n := range map[uint64]int{0: 64, 1: 32} {
		var ev radix.Event
		ev.Worker, ev.Kind = radix.WorkerKey{WorkerID: w}, radix.Stored
		for _, l := range radix.LocalHashes(nil, toks[:n], 16, radix.HashSeed("", "")) {
			ev.Blocks = append(ev.Blocks, radix.Block{Hash: l ^ 0x55, Local: l})
		}
		a.EventSink(DefaultPartition, DefaultPartition).ApplyBatch([]radix.Event{ev})
	}
	// A partition whose model name has a ':' in it.
	ep, bs := "http://w9", uint32(8)
	if _, err := a.UpsertWorker(&WorkerSpec{WorkerID: 9, ModelName: "llama:8b", RoutingGroup: "g", WorkerFields: WorkerFields{Endpoint: &ep, BlockSize: &bs}}); err != nil {
		t.Fatal(err)
	}
	a.EventSink("llama:8b", "g").ApplyBatch([]radix.Event{{Worker: radix.WorkerKey{WorkerID: 9}, Kind: radix.Stored, Blocks: []radix.Block{{Hash: 1, Local: 2}}}})

	b := servingEnv(t, 2, 1)
	for _, d := range a.Dump() {
		n, err := b.Restore(d.ModelName, d.RoutingGroup, d.BlockSize, d.Events)
		if err != nil || n != len(d.Events) {
			t.Fatalf("restore %s: %d of %d events, %v", d.Key, n, len(d.Events), err)
		}
	}
	if da, db := a.Dump(), b.Dump(); !reflect.DeepEqual(da, db) {
		t.Fatalf("dumps differ:\n%+v\n%+v", da, db)
	}
	q := &QueryRequest{Prompt: Prompt{TokenIDs: toks, HasTokenIDs: true}}
	oa, err := a.OverlapScores(q)
	if err != nil {
		t.Fatal(err)
	}
	ob, err := b.OverlapScores(q)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(oa, ob) || oa.Workers[0].DeviceBlocks != 4 || oa.Workers[1].DeviceBlocks != 2 {
		t.Fatalf("overlap differs or is empty:\n%+v\n%+v", oa, ob)
	}
	if got := b.Dump(); got[1].ModelName != "llama:8b" || got[1].RoutingGroup != "g" || got[1].BlockSize != 8 {
		t.Fatalf("partition with ':' restored as %+v", got[1])
	}
	if _, err := b.Restore(DefaultPartition, DefaultPartition, 32, nil); !errors.Is(err, ErrConflict) {
		t.Fatalf("block size mismatch: %v, want a conflict", err)
	}
}
