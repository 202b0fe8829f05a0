package radix

import (
	"math/rand/v2"
	"testing"
)

// TestExtMapAgainstMap checks the table against Go's map over random
// operations on a small key space (dense collisions), a wide one, and keys
// whose hash bits all collide. The table keeps no keys, so the test plays
// the tree's part: every key has a distinct place, and a candidate is
// confirmed by the place's key.
func TestExtMapAgainstMap(t *testing.T) {
	// inv is the inverse of hashBits' multiplier mod 2^64: x*inv has
	// hash bits x's top 32 bits (with the low bit set).
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
		var m extMap
		type place struct{ id, off uint32 }
		want := map[uint64]place{}
		keyAt := map[place]uint64{}
		nextID := uint32(1)
		find := func(k uint64) int {
			i, h := m.seek(k)
			for ; i < len(m.slots) && m.slots[i].hash == h; i++ {
				if keyAt[place{m.slots[i].id, m.slots[i].off}] == k {
					return i
				}
			}
			return -1
		}
		for step := range 100000 {
			k := key()
			_, present := want[k]
			if i := find(k); (i >= 0) != present {
				t.Fatalf("%s step %d: presence of %d: table %v, map %v", space, step, k, i >= 0, present)
			}
			del := func(k uint64) {
				m.deleteAt(find(k))
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
			case present:
				del(k)
			case op < 1500 && len(want) > 0:
				for k := range want {
					del(k)
					break
				}
			default:
				l := place{nextID, r.Uint32()}
				nextID++
				m.insert(k, l.id, l.off)
				want[k], keyAt[l] = l, k
			}
			if m.Len() != len(want) {
				t.Fatalf("%s step %d: len %d, want %d", space, step, m.Len(), len(want))
			}
			if step%997 == 0 {
				if err := checkExtMap(&m); err != nil {
					t.Fatalf("%s step %d: %v", space, step, err)
				}
				for k, l := range want {
					if i := find(k); i < 0 || (place{m.slots[i].id, m.slots[i].off}) != l {
						t.Fatalf("%s step %d: %d not at its place", space, step, k)
					}
				}
				n := 0
				m.each(func(s *extSlot) {
					n++
					l := place{s.id, s.off}
					if k, ok := keyAt[l]; !ok || want[k] != l || hashBits(k) != s.hash {
						t.Fatalf("%s: each: slot %+v has a place no key has", space, *s)
					}
				})
				if n != len(want) {
					t.Fatalf("%s: each visited %d, want %d", space, n, len(want))
				}
			}
		}
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
