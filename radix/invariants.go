package radix

import (
	"fmt"
	"slices"
)

// The consistency checks of the index: full walks that verify what the
// comments of node.go, tree.go, extmap.go, lower.go, index.go and
// approx_timers.go state. Tests call them directly; built with -tags
// invariants (make test does), the mutations run them (the
// afterMutation methods below) and panic on the first violation. In
// other builds those calls are behind a false constant (invariants_off.go),
// so the compiler drops them and the linker the functions.

// checkBudget bounds what the invariants build's checks cost per
// mutation, amortized: a structure (a tree, a shard's lower tiers, an
// Approx's timers) of at most checkBudget blocks is checked after every
// mutation, a bigger one after one mutation in size/checkBudget. Every
// unit test's index stays under it; the simulations of bench and cmd grow
// trees of tens of thousands of blocks, which a check per event would
// make quadratic under the race detector (make test runs with -race and
// -tags invariants).
const checkBudget = 1 << 12

// due counts a mutation in *count and reports whether the invariants
// build checks a structure of size blocks after it.
func due(count *uint64, size int64) bool {
	*count++
	every := uint64(max(size, 0)) / checkBudget
	return every == 0 || *count%every == 0
}

// mustHold panics with err, a broken invariant, as a BUG.
func mustHold(err error) {
	if err != nil {
		panic("BUG: radix: invariant violated: " + err.Error())
	}
}

// afterMutation is the invariants build's check of t after each of its
// mutations (Store, RemoveMany, Clear).
func (t *Tree) afterMutation() {
	if !t.unchecked && due(&t.checks, t.blocks) {
		mustHold(checkTree(t))
	}
}

// afterMutationLocked is the invariants build's check of s after each
// event and each RemoveWorker: its counts every time, its lower tiers
// when due (its tree checks itself). The caller holds s.mu.
func (s *shard) afterMutationLocked() {
	var lower int64
	for t := TierHostPinned; t < numTiers; t++ {
		lower += s.lower[t].blocks
	}
	mustHold(s.checkLocked(due(&s.checks, lower)))
}

// afterMutationLocked is the invariants build's check of a's timers after
// each of its mutations. The caller holds a.mu.
func (a *Approx) afterMutationLocked() {
	if due(&a.mu.checks, int64(a.mu.t.live)) {
		mustHold(checkTimers(&a.mu.t))
	}
}

// checkTree verifies every structural invariant of t: node shapes and
// owners (node.go), parent and child links and the split links (moved),
// the node-id registry (Tree.nodes), and each worker's lookup, which must
// hold exactly one entry per block the worker covers, resolving to it
// (workerBlocks). It reads writer-only state, so the writer calls it (or
// a caller holding the writer's lock), and it changes nothing: no lookup
// entry is repaired, no cache filled.
func checkTree(t *Tree) error {
	if len(t.nodes) == 0 || t.nodes[0] != &t.root || t.root.id != 0 || t.root.parent != nil {
		return fmt.Errorf("the root is not node 0")
	}
	if t.pendNode != nil || t.pendExt != nil {
		return fmt.Errorf("cover's pending hashes left set")
	}
	// Every lookup entry first, so that the walk below can follow entries.
	var total int64
	for w, wb := range t.workers {
		m := &wb.lookup
		if m.Len() == 0 {
			return fmt.Errorf("worker %v kept with an empty lookup", w)
		}
		if err := checkExtMap(m); err != nil {
			return fmt.Errorf("worker %v: %v", w, err)
		}
		for i := 0; i < m.n; i++ {
			v := m.at(i)
			if v == 0 {
				continue
			}
			id, off := m.idAt(v), m.offAt(v)
			if int(id) >= len(t.nodes) || t.nodes[id] == nil {
				return fmt.Errorf("worker %v: entry names node id %d, which is not live", w, id)
			}
			e, ok := publishedExt(w, follow(t.placeOf(id, off)))
			if !ok || m.hashOf(e) != m.hashAt(v) {
				return fmt.Errorf("worker %v: entry %#x (node %d, offset %d) does not point at a block of its hash", w, v, id, off)
			}
		}
		total += int64(m.Len())
	}
	if total != t.blocks {
		return fmt.Errorf("block counter %d, lookups hold %d", t.blocks, total)
	}

	covered := make(map[WorkerKey]int, len(t.workers))
	reachable := 1 // the root
	var walk func(n *node, depth int) error
	walk = func(n *node, depth int) error {
		st := n.state.Load()
		if n != &t.root {
			if len(st.edge) == 0 {
				return fmt.Errorf("node at depth %d has an empty edge", depth)
			}
			if len(st.owners) == 0 {
				return fmt.Errorf("reachable node at depth %d has no owners", depth)
			}
			if int(n.id) >= len(t.nodes) || t.nodes[n.id] != n {
				return fmt.Errorf("node at depth %d is not registered under its id %d", depth, n.id)
			}
		}
		maxCov := 0
		for j, o := range st.owners {
			if j > 0 && cmpKey(st.owners[j-1].key, o.key) >= 0 {
				return fmt.Errorf("owners at depth %d not sorted or duplicated: %v then %v", depth, st.owners[j-1].key, o.key)
			}
			if len(o.ext) < 1 || len(o.ext) > len(st.edge) {
				return fmt.Errorf("owner %v covers %d of %d blocks", o.key, len(o.ext), len(st.edge))
			}
			maxCov = max(maxCov, len(o.ext))
			covered[o.key] += len(o.ext)
			wb := t.workers[o.key]
			if wb == nil {
				return fmt.Errorf("worker %v owns nodes but has no lookup", o.key)
			}
			for i, e := range o.ext {
				if !t.hasEntry(&wb.lookup, e, ref{n, uint32(i)}) {
					return fmt.Errorf("worker %v: lookup of %d does not point at its block", o.key, e)
				}
			}
		}
		if n != &t.root && maxCov != len(st.edge) {
			return fmt.Errorf("edge of %d blocks but max coverage %d", len(st.edge), maxCov)
		}
		if m := n.moved; m != nil {
			if mst := m.state.Load(); m.parent != n || len(mst.edge) == 0 || st.children.get(mst.edge[0]) != m {
				return fmt.Errorf("node at depth %d moved its tail to a node that is not its child", depth)
			}
		}
		var err error
		st.children.each(func(h uint64, c *node) {
			if err != nil {
				return
			}
			cst := c.state.Load()
			if len(cst.edge) == 0 || cst.edge[0] != h {
				err = fmt.Errorf("child keyed %d starts with another hash", h)
				return
			}
			if c.parent != n {
				err = fmt.Errorf("child's parent pointer is stale")
				return
			}
			for _, o := range cst.owners {
				if n != &t.root && st.cov(o.key) != len(st.edge) {
					err = fmt.Errorf("owner %v of a child does not cover its parent fully", o.key)
					return
				}
			}
			reachable++
			err = walk(c, depth+len(st.edge))
		})
		return err
	}
	if err := walk(&t.root, 0); err != nil {
		return err
	}
	for w, wb := range t.workers {
		if covered[w] != wb.lookup.Len() {
			return fmt.Errorf("worker %v: lookup has %d entries, tree coverage %d", w, wb.lookup.Len(), covered[w])
		}
	}
	return checkNodeIDs(t, reachable)
}

// publishedExt returns w's external hash of the block at r in n's
// published state, as extAt does but without its cache.
func publishedExt(w WorkerKey, r ref) (uint64, bool) {
	st := r.n.state.Load()
	i, ok := st.find(w)
	if !ok || int(r.off) >= len(st.owners[i].ext) {
		return 0, false
	}
	return st.owners[i].ext[r.off], true
}

// hasEntry reports whether m has an entry for e whose place follows to
// r, as locate finds one but without repairing it.
func (t *Tree) hasEntry(m *extMap, e uint64, r ref) bool {
	i, run := m.seek(e)
	for ; ; i++ {
		id, off, ok := m.candidate(i, run)
		if !ok {
			return false
		}
		if follow(t.placeOf(id, off)) == r {
			return true
		}
	}
}

// checkExtMap verifies the layout extMap's comment states.
func checkExtMap(m *extMap) error {
	if m.size == 0 {
		if m.count != 0 || m.n != 0 {
			return fmt.Errorf("unsized table with %d entries", m.count)
		}
		return nil
	}
	if m.w < 1 || m.w > 8 || m.ib < 1 || m.hb+m.ib+m.ob > 8*m.w || m.mask != ^uint64(0)>>(64-8*m.w) {
		return fmt.Errorf("fields of %d, %d and %d bits in %d-byte slots (mask %#x)", m.hb, m.ib, m.ob, m.w, m.mask)
	}
	if len(m.b) < m.n*int(m.w)+8 || uint64(m.n) <= m.size || m.at(m.n-1) != 0 {
		return fmt.Errorf("table of %d home slots has %d slots in %d bytes, the last not empty", m.size, m.n, len(m.b))
	}
	if m.overfull(m.count) {
		return fmt.Errorf("%d entries in %d home slots", m.count, m.size)
	}
	n, last := 0, uint64(0)
	for i := 0; i < m.n; i++ {
		v := m.at(i)
		if v == 0 {
			continue
		}
		n++
		h := m.hashAt(v)
		if m.idAt(v) == 0 || h < last || h >= 1<<m.hb && m.hb < 64 {
			return fmt.Errorf("slot %d: value %#x (hash bits %#x after %#x)", i, v, h, last)
		}
		last = h
		home := m.home(h)
		if home > i {
			return fmt.Errorf("slot %d holds an entry whose home is %d", i, home)
		}
		for j := home; j < i; j++ {
			if m.at(j) == 0 {
				return fmt.Errorf("slot %d: empty slot %d between the entry and its home", i, j)
			}
		}
	}
	if n != m.count {
		return fmt.Errorf("count %d, %d slots occupied", m.count, n)
	}
	return nil
}

// checkNodeIDs verifies that exactly the reachable nodes have registered
// ids (checkTree's walk found each of its reachable nodes under its id)
// and that the free ids are the unused ones, each once.
func checkNodeIDs(t *Tree, reachable int) error {
	n := 0
	for id, nd := range t.nodes {
		if nd == nil {
			continue
		}
		n++
		if nd.id != uint32(id) {
			return fmt.Errorf("node id %d is registered to a node with id %d", id, nd.id)
		}
	}
	if n != reachable {
		return fmt.Errorf("%d registered nodes, %d in the tree", n, reachable)
	}
	free := make([]bool, len(t.nodes))
	for _, id := range t.free {
		if int(id) >= len(t.nodes) || t.nodes[id] != nil || free[id] {
			return fmt.Errorf("free id %d is in use, out of range or listed twice", id)
		}
		free[id] = true
	}
	if n+len(t.free) != len(t.nodes) {
		return fmt.Errorf("%d registered and %d free ids of %d", n, len(t.free), len(t.nodes))
	}
	return nil
}

// checkLower verifies the lower tier's two-way mapping (lowerTier.byWorker)
// and its block counter.
func checkLower(lt *lowerTier) error {
	var n int64
	for w, mine := range lt.byWorker {
		if len(mine) == 0 {
			return fmt.Errorf("lower tier keeps an empty worker %v", w)
		}
		for h, k := range mine {
			e, ok := lt.edges.Load(k)
			if !ok {
				return fmt.Errorf("lower edge of %v/%d missing", w, h)
			}
			i, found := e.find(w)
			if !found || e.owners[i].child != h {
				return fmt.Errorf("lower edge of %v/%d does not name it", w, h)
			}
		}
		n += int64(len(mine))
	}
	var owned int64
	var bad error
	lt.edges.Range(func(k lowerKey, e *lowerEdge) bool {
		if len(e.owners) == 0 || !slices.IsSortedFunc(e.owners, func(a, b lowerOwner) int { return cmpKey(a.key, b.key) }) {
			bad = fmt.Errorf("lower edge %+v has no owners or unsorted ones", k)
			return false
		}
		for j := 1; j < len(e.owners); j++ {
			if e.owners[j].key == e.owners[j-1].key {
				bad = fmt.Errorf("lower edge %+v names %v twice", k, e.owners[j].key)
				return false
			}
		}
		owned += int64(len(e.owners))
		return true
	})
	if bad != nil {
		return bad
	}
	if owned != n || n != lt.blocks {
		return fmt.Errorf("lower tier: %d owners on edges, %d in reverse maps, counter %d", owned, n, lt.blocks)
	}
	return nil
}

// checkLocked verifies s's accounting: held counts every rank's blocks
// over all tiers, no rank is past the bound, and the gauges Stats reads
// agree; with lower, its lower tiers too (checkLower). It does not check
// the tree (checkTree). The caller holds s.mu.
func (s *shard) checkLocked(lower bool) error {
	for t := TierHostPinned; lower && t < numTiers; t++ {
		if err := checkLower(s.lower[t]); err != nil {
			return fmt.Errorf("tier %v: %v", t, err)
		}
	}
	count := func(w WorkerKey) int64 {
		var n int64
		if wb := s.tree.workers[w]; wb != nil {
			n += int64(wb.lookup.Len())
		}
		for t := TierHostPinned; t < numTiers; t++ {
			n += int64(len(s.lower[t].byWorker[w]))
		}
		return n
	}
	for w, n := range s.held {
		if c := count(w); n != c || n <= 0 || n > s.maxHeld {
			return fmt.Errorf("rank %v: held %d, holds %d (bound %d)", w, n, c, s.maxHeld)
		}
	}
	for w := range s.tree.workers {
		if _, ok := s.held[w]; !ok {
			return fmt.Errorf("rank %v holds device blocks but no held count", w)
		}
	}
	for t := TierHostPinned; t < numTiers; t++ {
		for w := range s.lower[t].byWorker {
			if _, ok := s.held[w]; !ok {
				return fmt.Errorf("rank %v holds %v blocks but no held count", w, t)
			}
		}
	}
	if got := s.stats.blocks[TierDevice].Load(); got != s.tree.blocks {
		return fmt.Errorf("device gauge %d, tree %d", got, s.tree.blocks)
	}
	for t := TierHostPinned; t < numTiers; t++ {
		if got := s.stats.blocks[t].Load(); got != s.lower[t].blocks {
			return fmt.Errorf("%v gauge %d, tier %d", t, got, s.lower[t].blocks)
		}
	}
	if got := s.stats.workers.Load(); got != int64(len(s.held)) {
		return fmt.Errorf("workers gauge %d, %d ranks held", got, len(s.held))
	}
	return nil
}

// checkTimers verifies the timers' invariants (see timers): every live
// slot is listed once, in the bucket of its expiry, and named by ranks;
// buckets are sorted and not empty; live counts the live slots. That the
// timers hold exactly the pairs of the Approx's index (see Approx) is
// checked by tests only: core feeds KV events into an approximate primary
// index directly, and its timers do not know those blocks.
func checkTimers(t *timers) error {
	n := 0
	for k, b := range t.buckets {
		if b.n == 0 {
			return fmt.Errorf("empty bucket %d", k)
		}
		if k > 0 && t.buckets[k-1].at >= b.at {
			return fmt.Errorf("buckets out of order at %d", k)
		}
		c := 0
		for i, prev := b.head, int32(-1); i >= 0; prev, i = i, t.slots[i].next {
			s := t.slots[i]
			if s.at != b.at || s.prev != prev || t.ranks[s.w][s.h] != i {
				return fmt.Errorf("slot %d misfiled", i)
			}
			if s.next < 0 && b.tail != i {
				return fmt.Errorf("bucket %d ends at %d, tail %d", k, i, b.tail)
			}
			if c++; c > b.n {
				return fmt.Errorf("bucket %d lists more than its %d slots", k, b.n)
			}
		}
		if c != b.n {
			return fmt.Errorf("bucket %d counts %d, lists %d", k, b.n, c)
		}
		n += c
	}
	if n != t.live || len(t.slots) != t.live+len(t.free) {
		return fmt.Errorf("buckets hold %d, live %d, %d slots of which %d free", n, t.live, len(t.slots), len(t.free))
	}
	timed := 0
	for w, m := range t.ranks {
		if len(m) == 0 {
			return fmt.Errorf("timers keep an empty rank %v", w)
		}
		timed += len(m)
	}
	if timed != t.live {
		return fmt.Errorf("ranks time %d blocks, live %d", timed, t.live)
	}
	return nil
}
