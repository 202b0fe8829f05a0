package radix

import (
	"math/rand/v2"
	"testing"
)

// TestExtMapAgainstMap checks the table against Go's map over random
// operations on a small key space (dense collisions), a wide one, and keys
// whose hash bits all collide. The table keeps no keys, so the test plays
// the tree's part: every key has a distinct place, a candidate is
// confirmed by the key at its place resolved, blocks move (as splits move
// them: the table's entry goes stale until a lookup repairs it), and a
// table that outgrew its hash bits is rekeyed, which repairs every entry.
// Places are mostly small, sometimes of any width, so the fields widen
// and the hash bits shrink and grow back.
func TestExtMapAgainstMap(t *testing.T) {
	// inv is the inverse of the hash's multiplier mod 2^64: x*inv has
	// hash bits x's top bits.
	inv := uint64(1)
	for range 6 {
		inv *= 2 - 0x9E3779B97F4A7C15*inv
	}
	for _, space := range []string{"dense", "wide", "colliding"} {
		r := rand.New(rand.NewPCG(uint64(len(space)), 3))
		key := func() uint64 {
			switch space {
			case "dense":
				return r.Uint64N(64)
			case "colliding": // 64 distinct hash bits, many keys each
				return (r.Uint64N(64)<<58 | r.Uint64N(1<<20)) * inv
			}
			if r.IntN(2) == 0 {
				return uint64(r.IntN(512)) << 20 // structured keys
			}
			return r.Uint64()
		}
		m := newExtMap()
		type place struct{ id, off uint32 }
		want := map[uint64]place{}
		keyAt := map[place]uint64{}
		moved := map[place]place{} // a block's old place to its next
		resolve := func(l place) place {
			for {
				next, ok := moved[l]
				if !ok {
					return l
				}
				l = next
			}
		}
		nextID := uint32(1)
		wide, rekeys := 0, 0 // times the fields widened, rekeys
		var find func(k uint64, repair bool) int
		find = func(k uint64, repair bool) int {
			i, run := m.seek(k)
			for ; ; i++ {
				id, off, ok := m.candidate(i, run)
				if !ok {
					return -1
				}
				if l := resolve(place{id, off}); keyAt[l] == k {
					if repair && l != (place{id, off}) {
						ib, ob := m.ib, m.ob
						m.setPlace(i, l.id, l.off)
						if m.ib != ib || m.ob != ob {
							wide++
						}
						return find(k, false)
					}
					return i
				}
			}
		}
		step := 0
		newPlace := func() place {
			nextID++
			if step > 80000 && r.IntN(2000) == 0 { // wide offsets, late

				return place{nextID, r.Uint32N(1 << 31)}
			}
			return place{nextID, r.Uint32N(128)}
		}
		for ; step < 100000; step++ {
			k := key()
			_, present := want[k]
			if i := find(k, r.IntN(2) == 0); (i >= 0) != present {
				t.Fatalf("%s step %d: presence of %d: table %v, map %v", space, step, k, i >= 0, present)
			}
			del := func(k uint64) {
				m.deleteAt(find(k, false))
				delete(keyAt, want[k])
				delete(want, k)
			}
			switch op := r.IntN(5000); {
			case op == 0: // churn: drop most keys (the table shrinks)
				for k := range want {
					if r.IntN(4) > 0 {
						del(k)
					}
				}
			case op < 300 && len(want) > 0: // move a block (a split)
				for k := range want {
					l := newPlace()
					moved[want[k]] = l
					delete(keyAt, want[k])
					want[k], keyAt[l] = l, k
					break
				}
			case present:
				del(k)
			case op < 1500 && len(want) > 0:
				for k := range want {
					del(k)
					break
				}
			default:
				l := newPlace()
				ib, ob := m.ib, m.ob
				m.insert(k, l.id, l.off)
				if m.count > 1 && (m.ib != ib || m.ob != ob) {
					wide++
				}
				want[k], keyAt[l] = l, k
				if m.wantsRekey() {
					rekeys++
					m.rekey(func(id, off uint32) (uint32, uint32) {
						l := resolve(place{id, off})
						return l.id, l.off
					}, func(id, off uint32) uint64 {
						k, ok := keyAt[place{id, off}]
						if !ok {
							t.Fatalf("%s step %d: rekey of an entry at %d/%d, which no key has", space, step, id, off)
						}
						return k
					})
					m.each(func(id, off uint32) {
						if _, stale := moved[place{id, off}]; stale {
							t.Fatalf("%s step %d: rekey left an entry at %d/%d, which moved", space, step, id, off)
						}
					})
				}
			}
			if m.Len() != len(want) {
				t.Fatalf("%s step %d: len %d, want %d", space, step, m.Len(), len(want))
			}
			if step%997 == 0 {
				if err := checkExtMap(&m); err != nil {
					t.Fatalf("%s step %d: %v", space, step, err)
				}
				for k, l := range want {
					i := find(k, false)
					if i < 0 {
						t.Fatalf("%s step %d: %d not found", space, step, k)
					}
					if v := m.at(i); resolve(place{m.idAt(v), m.offAt(v)}) != l || m.hashAt(v) != m.hashOf(k) {
						t.Fatalf("%s step %d: %d not at its place", space, step, k)
					}
				}
				n := 0
				m.each(func(id, off uint32) {
					n++
					l := resolve(place{id, off})
					if k, ok := keyAt[l]; !ok || want[k] != l {
						t.Fatalf("%s: each: place %+v, which no key has", space, l)
					}
				})
				if n != len(want) {
					t.Fatalf("%s: each visited %d, want %d", space, n, len(want))
				}
			}
		}
		if wide < 3 || rekeys < 1 && space != "dense" {
			t.Fatalf("%s: the fields widened %d times, %d rekeys", space, wide, rekeys)
		}
		t.Logf("%s: %d-byte slots of %d/%d/%d bits, widened %d times, %d rekeys", space, m.w, m.hb, m.ib, m.ob, wide, rekeys)
	}
}

// TestIndexCollidingHashBits runs the model test with every external hash
// replaced by one of few hash bits (4 patterns), so nearly every lookup
// meets several entries it must reject by reading the tree, and deletions
// shift long runs.
func TestIndexCollidingHashBits(t *testing.T) {
	inv := uint64(1)
	for range 6 {
		inv *= 2 - 0x9E3779B97F4A7C15*inv
	}
	for seed := range uint64(8) {
		ix, _ := New(Config{Shards: 1})
		m := newModel()
		g := &gen{r: rand.New(rand.NewPCG(seed, 5)), m: m}
		// The generator takes parents and removals from the model, which
		// holds mapped hashes already: those map to themselves.
		mapped := map[uint64]uint64{}
		remap := func(e uint64) uint64 {
			x, ok := mapped[e]
			if !ok {
				n := uint64(len(mapped)) // injective: a fresh counter per hash
				x = (n%4<<62 | n) * inv  // hash bits: one of 4 patterns
				mapped[e], mapped[x] = x, x
			}
			return x
		}
		removed := 0
		var r Result
		for step := range 400 {
			ev := g.event()
			ev.ParentHash = remap(ev.ParentHash)
			for i := range ev.Blocks {
				ev.Blocks[i].Hash = remap(ev.Blocks[i].Hash)
			}
			for i := range ev.Hashes {
				ev.Hashes[i] = remap(ev.Hashes[i])
			}
			before := ix.Stats().Blocks[TierDevice]
			ix.Apply(&ev)
			m.apply(&ev)
			if ev.Kind == Removed && ix.Stats().Blocks[TierDevice] < before {
				removed++
			}
			if err := checkIndex(ix); err != nil {
				t.Fatalf("seed %d step %d: invariant: %v", seed, step, err)
			}
			for range 3 {
				if err := compareMatch(ix, m, g.query(), &r); err != nil {
					t.Fatalf("seed %d step %d: %v", seed, step, err)
				}
			}
			if st := ix.Stats(); st.Blocks != m.blocks() || st.Dropped != m.drops {
				t.Fatalf("seed %d step %d: stats %+v, model blocks %v drops %v", seed, step, st, m.blocks(), m.drops)
			}
		}
		if removed < 20 {
			t.Fatalf("seed %d: only %d device removals took effect", seed, removed)
		}
		t.Logf("seed %d: %d removals, %d hashes", seed, removed, len(mapped))
	}
}

// TestLookupRekeysInOneStore stores long events into fresh tables, so the
// lookups outgrow their hash bits while one Store indexes them: rekeys
// that read hashes of a child not yet linked (addChild), of a leaf's
// extension not yet published (extend) and of an owner's pending coverage
// (cover). A split then moves most blocks to a new node, whose id widens
// the entries' id field as lookups repair them. Every block must be found
// by its removal, and the model must agree.
func TestLookupRekeysInOneStore(t *testing.T) {
	ix, _ := New(Config{Shards: 1})
	m := newModel()
	var r Result
	const n = 1200
	ext := func(w, i int) uint64 { return uint64(w)<<32 | uint64(i+1) }
	local := func(i int) uint64 { return uint64(i+1) * 0x9E3779B97F4A7C15 }
	apply := func(ev *Event, check bool) {
		t.Helper()
		ix.Apply(ev)
		m.apply(ev)
		if !check {
			return
		}
		if err := checkIndex(ix); err != nil {
			t.Fatal(err)
		}
		q := make([]uint64, 2*n)
		for i := range q {
			q[i] = local(i)
		}
		if err := compareMatch(ix, m, q, &r); err != nil {
			t.Fatal(err)
		}
	}
	store := func(w, from, to int) {
		ev := Event{Worker: WorkerKey{WorkerID: uint64(w)}, Kind: Stored}
		if from > 0 {
			ev.HasParent, ev.ParentHash = true, ext(w, from-1)
		}
		for i := from; i < to; i++ {
			l := local(i)
			if w == 3 && i >= 7 || w == 5 {
				l++ // diverges: splits the edge at 7, or a chain of its own
			}
			ev.Blocks = append(ev.Blocks, Block{Hash: ext(w, i), Local: l})
		}
		apply(&ev, true)
	}
	store(1, 0, 8)   // a leaf of 8 blocks
	store(1, 8, 2*n) // extend: the leaf grows by 2n-8
	store(2, 0, 2*n) // cover: a second owner of the whole edge
	store(5, 0, n)   // addChild: a new leaf of n blocks
	store(3, 0, 9)   // the split
	store(4, 0, n/2)
	for w := 1; w <= 5; w++ {
		wb := ix.shards[0].tree.workers[WorkerKey{WorkerID: uint64(w)}]
		t.Logf("worker %d: %d entries, %d-byte slots of %d/%d/%d bits", w, wb.lookup.Len(), wb.lookup.w, wb.lookup.hb, wb.lookup.ib, wb.lookup.ob)
		if w != 3 && wb.lookup.hb < 14 {
			t.Errorf("worker %d: %d hash bits for %d entries: not rekeyed", w, wb.lookup.hb, wb.lookup.Len())
		}
	}
	if wb := ix.shards[0].tree.workers[WorkerKey{WorkerID: 4}]; wb.lookup.ib < 2 {
		t.Errorf("worker 4's entries name node ids of %d bit after the split", wb.lookup.ib)
	}
	// Remove every block of worker 1, leaf first, one event per block of
	// the first and the last hundred, the rest in one event.
	rm := func(w int, hashes ...uint64) {
		apply(&Event{Worker: WorkerKey{WorkerID: uint64(w)}, Kind: Removed, Hashes: hashes}, len(hashes) > 1 || hashes[0]%32 == 0)
	}
	for i := 2*n - 1; i >= 2*n-100; i-- {
		rm(1, ext(1, i))
	}
	var rest []uint64
	for i := 2*n - 101; i >= 100; i-- {
		rest = append(rest, ext(1, i))
	}
	rm(1, rest...)
	for i := 99; i >= 0; i-- {
		rm(1, ext(1, i))
	}
	apply(&Event{Worker: WorkerKey{WorkerID: 4}, Kind: Removed, Hashes: []uint64{ext(4, 8)}}, true)
	if st := ix.Stats(); st.Dropped[DropUnknownBlock] != 0 || st.Blocks[TierDevice] != int64(2*n+9+8+n) {
		t.Fatalf("after removing worker 1: %+v", st)
	}
}
