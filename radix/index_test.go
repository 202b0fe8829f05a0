package radix

import (
	"bytes"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
)

// TestDumpRestoreRoundTrip builds random indexes, dumps them through the
// /dump JSON format, restores into an empty index and checks that every
// query matches identically and that the sizes agree.
func TestDumpRestoreRoundTrip(t *testing.T) {
	for seed := uint64(1); seed <= 20; seed++ {
		ix, _ := New(Config{Shards: 2})
		m := newModel()
		g := &gen{r: rand.New(rand.NewPCG(seed, 2)), m: m}
		for range 300 {
			ev := g.event()
			ix.Apply(&ev)
			m.apply(&ev)
		}
		var buf []byte
		restored, _ := New(Config{Shards: 1})
		for i, ev := range ix.Dump() {
			if ev.EventID != uint64(i) {
				t.Fatalf("event_id %d at position %d", ev.EventID, i)
			}
			buf = AppendEventJSON(buf[:0], &ev)
			back, err := ParseEventJSON(buf)
			if err != nil {
				t.Fatalf("seed %d: %s: %v", seed, buf, err)
			}
			if !restored.Apply(&back) {
				t.Fatalf("seed %d: restoring %s was rejected (parents must come first)", seed, buf)
			}
		}
		if err := checkIndex(restored); err != nil {
			t.Fatal(err)
		}
		if a, b := ix.Stats().Blocks, restored.Stats().Blocks; a != b {
			t.Fatalf("seed %d: blocks %v, restored %v", seed, a, b)
		}
		var r Result
		for range 500 {
			if err := compareMatch(restored, m, g.query(), &r); err != nil {
				t.Fatalf("seed %d: restored index: %v", seed, err)
			}
		}
	}
}

func TestParseEventJSON(t *testing.T) {
	good := []struct {
		in   string
		want Event
	}{
		{`{"worker_id":7,"storage_tier":"device","residency_domain":"worker","event":{"event_id":3,"data":{"stored":{"parent_hash":null,"start_position":null,"blocks":[{"block_hash":11,"tokens_hash":14643705804678351452,"mm_extra_info":null}]}},"dp_rank":1}}`,
			Event{Worker: WorkerKey{7, 1}, Kind: Stored, EventID: 3, Blocks: []Block{{11, 14643705804678351452}}}},
		{`{"worker_id":7,"event":{"event_id":0,"data":{"stored":{"parent_hash":5,"start_position":2,"blocks":[]}}}}`,
			Event{Worker: WorkerKey{7, 0}, Kind: Stored, HasParent: true, ParentHash: 5, HasStartPosition: true, StartPosition: 2, Blocks: []Block{}}},
		{`{"worker_id":1,"storage_tier":"disk","event":{"event_id":0,"data":{"removed":{"block_hashes":[1,18446744073709551615]}},"dp_rank":0}}`,
			Event{Worker: WorkerKey{1, 0}, Tier: TierDisk, Kind: Removed, Hashes: []uint64{1, 18446744073709551615}}},
		{`{"worker_id":1,"storage_tier":"host_pinned","event":{"event_id":9,"data":"cleared","dp_rank":2},"unknown":true}`,
			Event{Worker: WorkerKey{1, 2}, Tier: TierHostPinned, Kind: Cleared, EventID: 9}},
	}
	for _, c := range good {
		got, err := ParseEventJSON([]byte(c.in))
		if err != nil {
			t.Fatalf("%s: %v", c.in, err)
		}
		if fmt.Sprint(got) != fmt.Sprint(c.want) {
			t.Errorf("%s:\n got %+v\nwant %+v", c.in, got, c.want)
		}
	}
	bad := []string{
		`{`,
		`{"worker_id":-1,"event":{"data":"cleared"}}`,
		`{"worker_id":1,"storage_tier":"gpu","event":{"data":"cleared"}}`,
		`{"worker_id":1,"residency_domain":null,"event":{"data":"cleared"}}`,
		`{"worker_id":1,"residency_domain":"cache_owner","event":{"data":"cleared"}}`,
		`{"worker_id":1,"event":{"data":"wiped"}}`,
		`{"worker_id":1,"event":{"data":{}}}`,
		`{"worker_id":1,"event":{"data":{"stored":{"blocks":[]},"removed":{"block_hashes":[]}}}}`,
	}
	for _, in := range bad {
		if _, err := ParseEventJSON([]byte(in)); !errors.Is(err, ErrBadEvent) {
			t.Errorf("%s: want ErrBadEvent, got %v", in, err)
		}
	}
	// The writer and the reader agree byte for byte on a dump event as
	// Dynamo serialises it.
	example := `{"worker_id":7,"storage_tier":"device","residency_domain":"worker","event":{"event_id":0,"data":{"stored":{"parent_hash":null,"start_position":null,"blocks":[{"block_hash":11,"tokens_hash":14643705804678351452,"mm_extra_info":null}]}},"dp_rank":0}}`
	ev, err := ParseEventJSON([]byte(example))
	if err != nil {
		t.Fatal(err)
	}
	if got := AppendEventJSON(nil, &ev); !bytes.Equal(got, []byte(example)) {
		t.Fatalf("re-encoded:\n%s\nwant\n%s", got, example)
	}
}

// TestConcurrentReaders churns the index from writer goroutines while
// readers match continuously. Stable workers store long chains before the
// readers start and never change; churn workers share their prefixes, so
// the stable workers' nodes are split and republished under the readers.
// Every read must see the stable workers at their exact depth.
func TestConcurrentReaders(t *testing.T) {
	ix, _ := New(Config{Shards: 2})
	const depth = 12
	q := make([]uint64, depth)
	for i := range q {
		q[i] = uint64(1 + i%4) // the generator's alphabet, so churn collides with it
	}
	stable := []WorkerKey{{100, 0}, {101, 0}, {102, 3}}
	for i, w := range stable {
		ev := Event{Worker: w, Kind: Stored}
		for j, l := range q[:depth-i] {
			ev.Blocks = append(ev.Blocks, Block{Hash: uint64(1000*(i+1) + j), Local: l})
		}
		ix.Apply(&ev)
	}
	var stop atomic.Bool
	var wg, writers sync.WaitGroup
	models := make([]*model, 2)
	for wi := range models {
		models[wi] = newModel()
		writers.Add(1)
		go func() {
			defer writers.Done()
			g := &gen{r: rand.New(rand.NewPCG(uint64(wi), 9)), m: models[wi]}
			for range 3000 {
				ev := g.event()
				// Writer wi owns worker ids 1..4 shifted apart, keeping one
				// writer per worker as the Index requires.
				ev.Worker.WorkerID += uint64(10 * wi)
				ix.Apply(&ev)
				ev.Worker.WorkerID -= uint64(10 * wi)
				models[wi].apply(&ev)
			}
		}()
	}
	var reads atomic.Int64
	for range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var r Result
			for !stop.Load() {
				ix.Match(q, &r)
				seen := map[WorkerKey]bool{}
				for _, m := range r.Matches {
					if seen[m.Worker] {
						t.Errorf("worker %v twice", m.Worker)
					}
					seen[m.Worker] = true
					if _, _, d := m.Cumulative(); d > depth {
						t.Errorf("worker %v matched %d > %d blocks", m.Worker, d, depth)
					}
					for i, w := range stable {
						if m.Worker == w && m.Device != uint32(depth-i) {
							t.Errorf("stable worker %v seen at depth %d, want %d", w, m.Device, depth-i)
						}
					}
				}
				for _, w := range stable {
					if !seen[w] {
						t.Errorf("stable worker %v missing", w)
					}
				}
				reads.Add(1)
			}
		}()
	}
	// Writers finish, then readers stop.
	writers.Wait()
	stop.Store(true)
	wg.Wait()
	if reads.Load() == 0 {
		t.Fatal("readers never ran")
	}
	if err := checkIndex(ix); err != nil {
		t.Fatal(err)
	}
	// After the churn, each writer's workers agree with its model.
	var r Result
	for wi, m := range models {
		g := &gen{r: rand.New(rand.NewPCG(uint64(wi), 10)), m: m}
		for range 300 {
			q := g.query()
			ix.Match(q, &r)
			got := map[WorkerKey]Match{}
			for _, mt := range r.Matches {
				if mt.Worker.WorkerID >= uint64(1+10*wi) && mt.Worker.WorkerID <= uint64(4+10*wi) {
					mt.Worker.WorkerID -= uint64(10 * wi)
					mt.last, mt.hasLast = 0, false
					got[mt.Worker] = mt
				}
			}
			if want := m.match(q); !maps.Equal(got, want) {
				t.Fatalf("writer %d, query %v:\n got %v\nwant %v", wi, q, got, want)
			}
		}
	}
}

func TestMatchAllocatesNothing(t *testing.T) {
	ix, _ := New(Config{})
	q := chain(512, 512, 0)
	for w := range 64 {
		storeChain(ix, WorkerKey{uint64(w), 0}, q, uint64(w))
	}
	storeChain(ix, WorkerKey{99, 0}, q[:100], 99)
	ix.Apply(&Event{Worker: WorkerKey{5, 0}, Tier: TierHostPinned, Kind: Stored, HasParent: true, ParentHash: 5<<40 | 512,
		Blocks: []Block{{Hash: 1, Local: 7}}})
	var r Result
	ix.Match(q, &r)
	if len(r.Matches) != 65 {
		t.Fatalf("%d matches, want 65", len(r.Matches))
	}
	if allocs := testing.AllocsPerRun(100, func() { ix.Match(q, &r) }); allocs != 0 {
		t.Fatalf("Match allocated %.1f times with a reused Result", allocs)
	}
}
