package radix

import (
	"encoding/binary"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/zeebo/xxh3"
)

// model is the deliberately naive reference of the index: per worker rank, a
// set of paths (prefixes of local hashes) with one external hash each, and
// per lower tier a plain map of continuation edges. The index must agree with
// it after every operation.
type model struct {
	dev   map[WorkerKey]*devModel
	low   [numTiers]map[WorkerKey]*lowModel
	drops [numDropReasons]uint64
}

type devModel struct {
	byExt  map[uint64]string // external hash -> path
	byPath map[string]uint64 // path -> external hash
}

type lowModel struct {
	edges   map[lowerKey]uint64 // edge -> child hash
	byChild map[uint64]lowerKey
}

func newModel() *model {
	m := &model{dev: map[WorkerKey]*devModel{}}
	for t := range m.low {
		m.low[t] = map[WorkerKey]*lowModel{}
	}
	return m
}

func pathKey(p string, local uint64) string {
	var b [8]byte
	binary.LittleEndian.PutUint64(b[:], local)
	return p + string(b[:])
}

func (m *model) apply(ev *Event) {
	w := ev.Worker
	if ev.Tier >= numTiers || ev.Kind < Stored || ev.Kind > Cleared {
		m.drops[DropUnknownKind]++
		return
	}
	switch ev.Kind {
	case Stored:
		if (&Tree{}).hasDuplicates(ev) {
			m.drops[DropInvalidSequence]++
			return
		}
		if ev.Tier != TierDevice {
			lm := m.low[ev.Tier][w]
			if lm == nil {
				lm = &lowModel{edges: map[lowerKey]uint64{}, byChild: map[uint64]lowerKey{}}
				m.low[ev.Tier][w] = lm
			}
			k := lowerKey{parent: ev.ParentHash, hasParent: ev.HasParent}
			for _, b := range ev.Blocks {
				k.local = b.Local
				_, childHeld := lm.byChild[b.Hash]
				_, edgeHeld := lm.edges[k]
				if !childHeld && !edgeHeld {
					lm.edges[k] = b.Hash
					lm.byChild[b.Hash] = k
				}
				k = lowerKey{parent: b.Hash, hasParent: true}
			}
			if len(lm.byChild) == 0 {
				delete(m.low[ev.Tier], w)
			}
			return
		}
		if len(ev.Blocks) == 0 {
			return
		}
		dm := m.dev[w]
		p := ""
		if ev.HasParent {
			var ok bool
			if dm != nil {
				p, ok = dm.byExt[ev.ParentHash]
			}
			if !ok {
				m.drops[DropParentNotFound]++
				return
			}
		} else if ev.HasStartPosition && ev.StartPosition > 0 {
			m.drops[DropParentNotFound]++
			return
		}
		if dm == nil {
			dm = &devModel{byExt: map[uint64]string{}, byPath: map[string]uint64{}}
			m.dev[w] = dm
		}
		for _, b := range ev.Blocks {
			path := pathKey(p, b.Local)
			if q, held := dm.byExt[b.Hash]; held {
				if q != path {
					m.drops[DropHashConflict]++
					break
				}
			} else {
				if old, ok := dm.byPath[path]; ok {
					delete(dm.byExt, old)
				}
				dm.byExt[b.Hash] = path
				dm.byPath[path] = b.Hash
			}
			p = path
		}
		if len(dm.byExt) == 0 {
			delete(m.dev, w)
		}
	case Removed:
		for _, h := range ev.Hashes {
			if ev.Tier != TierDevice {
				lm := m.low[ev.Tier][w]
				k, ok := lowerKey{}, false
				if lm != nil {
					k, ok = lm.byChild[h]
				}
				if !ok {
					m.drops[DropUnknownBlock]++
					continue
				}
				delete(lm.byChild, h)
				delete(lm.edges, k)
				if len(lm.byChild) == 0 {
					delete(m.low[ev.Tier], w)
				}
				continue
			}
			dm := m.dev[w]
			p, ok := "", false
			if dm != nil {
				p, ok = dm.byExt[h]
			}
			if !ok {
				m.drops[DropUnknownBlock]++
				continue
			}
			for path, e := range dm.byPath {
				if strings.HasPrefix(path, p) {
					delete(dm.byPath, path)
					delete(dm.byExt, e)
				}
			}
			if len(dm.byExt) == 0 {
				delete(m.dev, w)
			}
		}
	case Cleared:
		m.clear(w)
	}
}

func (m *model) clear(w WorkerKey) {
	delete(m.dev, w)
	for t := range m.low {
		delete(m.low[t], w)
	}
}

func (m *model) removeWorker(id uint64) {
	for _, w := range m.workers() {
		if w.WorkerID == id {
			m.clear(w)
		}
	}
}

func (m *model) workers() []WorkerKey {
	set := map[WorkerKey]bool{}
	for w := range m.dev {
		set[w] = true
	}
	for t := range m.low {
		for w := range m.low[t] {
			set[w] = true
		}
	}
	return slices.SortedFunc(maps.Keys(set), cmpKey)
}

// match is the tiered query, written the obvious way: the device prefix,
// then each lower tier (host, disk, external) walking its continuation
// edges from where the previous tier stopped.
func (m *model) match(q []uint64) map[WorkerKey]Match {
	out := map[WorkerKey]Match{}
	if len(q) == 0 {
		return out
	}
	type cont struct {
		pos     int
		last    uint64
		hasLast bool
	}
	conts := map[WorkerKey]*cont{}
	for w, dm := range m.dev {
		p, d, last := "", 0, uint64(0)
		for d < len(q) {
			np := pathKey(p, q[d])
			e, ok := dm.byPath[np]
			if !ok {
				break
			}
			p, d, last = np, d+1, e
		}
		if d > 0 {
			out[w] = Match{Worker: w, Device: uint32(d)}
			conts[w] = &cont{pos: d, last: last, hasLast: true}
		}
	}
	for t := TierHostPinned; t < numTiers; t++ {
		for w, lm := range m.low[t] {
			if _, ok := conts[w]; !ok {
				if _, root := lm.edges[lowerKey{local: q[0]}]; root {
					conts[w] = &cont{}
					out[w] = Match{Worker: w}
				}
			}
		}
		for w, c := range conts {
			lm := m.low[t][w]
			n := uint32(0)
			for lm != nil && c.pos < len(q) {
				child, ok := lm.edges[lowerKey{parent: c.last, hasParent: c.hasLast, local: q[c.pos]}]
				if !ok {
					break
				}
				c.pos, c.last, c.hasLast = c.pos+1, child, true
				n++
			}
			mt := out[w]
			switch t {
			case TierHostPinned:
				mt.Host = n
			case TierDisk:
				mt.Disk = n
			default:
				mt.External = n
			}
			out[w] = mt
		}
	}
	return out
}

func (m *model) blocks() (out [numTiers]int64) {
	for _, dm := range m.dev {
		out[TierDevice] += int64(len(dm.byExt))
	}
	for t := TierHostPinned; t < numTiers; t++ {
		for _, lm := range m.low[t] {
			out[t] += int64(len(lm.byChild))
		}
	}
	return out
}

// gen produces random but plausible event sequences: few workers, a small
// alphabet of local hashes (so prefixes collide and edges split), external
// hashes that are mostly a function of the path (as engines compute them)
// and sometimes worker-specific or random (conflicts).
type gen struct {
	r *rand.Rand
	m *model
}

func (g *gen) worker() WorkerKey {
	return WorkerKey{WorkerID: uint64(1 + g.r.IntN(4)), DPRank: uint32(g.r.IntN(2))}
}

func (g *gen) ext(path string, w WorkerKey) uint64 {
	switch x := g.r.IntN(20); {
	case x == 0:
		return uint64(g.r.IntN(8)) // small random: collides, conflicts
	case x < 4:
		return xxh3.HashString(path) ^ w.WorkerID*31 ^ uint64(w.DPRank)
	default:
		return xxh3.HashString(path)
	}
}

func (g *gen) tier() Tier {
	if g.r.IntN(10) < 7 {
		return TierDevice
	}
	return Tier(1 + g.r.IntN(3))
}

func (g *gen) event() Event {
	w := g.worker()
	ev := Event{Worker: w, Tier: g.tier()}
	switch x := g.r.IntN(100); {
	case x < 60:
		ev.Kind = Stored
		p := ""
		if dm := g.m.dev[w]; dm != nil && g.r.IntN(3) > 0 && ev.Tier == TierDevice {
			hs := slices.Sorted(maps.Keys(dm.byExt))
			ev.ParentHash, ev.HasParent = hs[g.r.IntN(len(hs))], true
			p = dm.byExt[ev.ParentHash]
		} else if lm := g.m.low[ev.Tier][w]; ev.Tier != TierDevice && lm != nil && g.r.IntN(2) == 0 {
			hs := slices.Sorted(maps.Keys(lm.byChild))
			ev.ParentHash, ev.HasParent = hs[g.r.IntN(len(hs))], true
		} else if ev.Tier != TierDevice {
			if dm := g.m.dev[w]; dm != nil && g.r.IntN(2) == 0 {
				// A lower tier continuing a device chain.
				hs := slices.Sorted(maps.Keys(dm.byExt))
				ev.ParentHash, ev.HasParent = hs[g.r.IntN(len(hs))], true
				p = dm.byExt[ev.ParentHash]
			}
		} else if g.r.IntN(30) == 0 {
			ev.ParentHash, ev.HasParent = uint64(g.r.IntN(1000)), true // likely unknown
		}
		if g.r.IntN(40) == 0 {
			ev.HasStartPosition, ev.StartPosition = true, uint32(g.r.IntN(2))
		}
		n := 1 + g.r.IntN(6)
		for range n {
			l := uint64(1 + g.r.IntN(4))
			p = pathKey(p, l)
			ev.Blocks = append(ev.Blocks, Block{Hash: g.ext(p, w), Local: l})
		}
		if g.r.IntN(50) == 0 && len(ev.Blocks) > 1 {
			ev.Blocks[1].Hash = ev.Blocks[0].Hash // invalid sequence
		}
	case x < 92:
		ev.Kind = Removed
		var hs []uint64
		if ev.Tier == TierDevice {
			if dm := g.m.dev[w]; dm != nil {
				hs = slices.Sorted(maps.Keys(dm.byExt))
			}
		} else if lm := g.m.low[ev.Tier][w]; lm != nil {
			hs = slices.Sorted(maps.Keys(lm.byChild))
		}
		for range 1 + g.r.IntN(3) {
			if len(hs) > 0 && g.r.IntN(8) > 0 {
				ev.Hashes = append(ev.Hashes, hs[g.r.IntN(len(hs))])
			} else {
				ev.Hashes = append(ev.Hashes, uint64(g.r.Uint32()))
			}
		}
	default:
		ev.Kind = Cleared
	}
	return ev
}

func (g *gen) query() []uint64 {
	var q []uint64
	ws := g.m.workers()
	if len(ws) > 0 && g.r.IntN(4) > 0 {
		if dm := g.m.dev[ws[g.r.IntN(len(ws))]]; dm != nil {
			ps := slices.Sorted(maps.Keys(dm.byPath))
			p := ps[g.r.IntN(len(ps))]
			for i := 0; i < len(p); i += 8 {
				q = append(q, binary.LittleEndian.Uint64([]byte(p[i:i+8])))
			}
		}
	}
	for range g.r.IntN(6) {
		q = append(q, uint64(1+g.r.IntN(4)))
	}
	return q
}

func compareMatch(ix *Index, m *model, q []uint64, r *Result) error {
	ix.Match(q, r)
	want := m.match(q)
	got := map[WorkerKey]Match{}
	for _, mt := range r.Matches {
		if _, dup := got[mt.Worker]; dup {
			return fmt.Errorf("worker %v matched twice", mt.Worker)
		}
		mt.last, mt.hasLast = 0, false
		got[mt.Worker] = mt
	}
	if !maps.Equal(got, want) {
		return fmt.Errorf("query %v:\n got %v\nwant %v", q, got, want)
	}
	return nil
}

func TestIndexAgainstModel(t *testing.T) {
	for _, shards := range []int{1, 3} {
		for run := range 40 {
			seed := uint64(run)*7919 + uint64(shards)
			t.Run(fmt.Sprintf("shards=%d/seed=%d", shards, seed), func(t *testing.T) {
				ix, _ := New(Config{Shards: shards})
				m := newModel()
				g := &gen{r: rand.New(rand.NewPCG(seed, 1)), m: m}
				var r Result
				for step := range 400 {
					if g.r.IntN(60) == 0 {
						id := uint64(1 + g.r.IntN(4))
						ix.RemoveWorker(id)
						m.removeWorker(id)
					} else {
						ev := g.event()
						ix.Apply(&ev)
						m.apply(&ev)
					}
					if err := checkIndex(ix); err != nil {
						t.Fatalf("seed %d step %d: invariant: %v", seed, step, err)
					}
					for range 3 {
						if err := compareMatch(ix, m, g.query(), &r); err != nil {
							t.Fatalf("seed %d step %d: %v", seed, step, err)
						}
					}
					st := ix.Stats()
					if st.Blocks != m.blocks() {
						t.Fatalf("seed %d step %d: blocks %v, model %v", seed, step, st.Blocks, m.blocks())
					}
					if st.Workers != int64(len(m.workers())) {
						t.Fatalf("seed %d step %d: workers %d, model %d", seed, step, st.Workers, len(m.workers()))
					}
					if st.Dropped != m.drops {
						t.Fatalf("seed %d step %d: drops %v, model %v", seed, step, st.Dropped, m.drops)
					}
				}
			})
		}
	}
}
