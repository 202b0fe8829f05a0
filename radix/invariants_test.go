package radix

import (
	"fmt"
	"slices"
)

// checkTree verifies every structural invariant of t that the comments in
// node.go and tree.go state. Tests call it after every operation.
func checkTree(t *Tree) error {
	perWorker := make(map[WorkerKey]int)
	held := make(map[WorkerKey][]heldBlock)
	live := map[*node]bool{&t.root: true}
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
		}
		if !slices.IsSortedFunc(st.owners, func(a, b owner) int { return cmpKey(a.key, b.key) }) {
			return fmt.Errorf("owners not sorted at depth %d", depth)
		}
		for i := 1; i < len(st.owners); i++ {
			if st.owners[i].key == st.owners[i-1].key {
				return fmt.Errorf("duplicate owner %v", st.owners[i].key)
			}
		}
		maxCov := 0
		for _, o := range st.owners {
			if len(o.ext) < 1 || len(o.ext) > len(st.edge) {
				return fmt.Errorf("owner %v covers %d of %d blocks", o.key, len(o.ext), len(st.edge))
			}
			maxCov = max(maxCov, len(o.ext))
			perWorker[o.key] += len(o.ext)
			for i, e := range o.ext {
				held[o.key] = append(held[o.key], heldBlock{ref{n, uint32(i)}, e})
			}
		}
		if n != &t.root && maxCov != len(st.edge) {
			return fmt.Errorf("edge of %d blocks but max coverage %d", len(st.edge), maxCov)
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
			live[c] = true
			for _, o := range cst.owners {
				if n != &t.root && st.cov(o.key) != len(st.edge) {
					err = fmt.Errorf("owner %v of a child does not cover its parent fully", o.key)
					return
				}
			}
			err = walk(c, depth+len(st.edge))
		})
		return err
	}
	if err := walk(&t.root, 0); err != nil {
		return err
	}
	var total int64
	for w, wb := range t.workers {
		if wb.lookup.Len() == 0 {
			return fmt.Errorf("worker %v kept with an empty lookup", w)
		}
		if perWorker[w] != wb.lookup.Len() {
			return fmt.Errorf("worker %v: lookup has %d entries, tree coverage %d", w, wb.lookup.Len(), perWorker[w])
		}
		if err := checkLookup(t, w, &wb.lookup, held[w]); err != nil {
			return err
		}
		total += int64(wb.lookup.Len())
	}
	for w := range perWorker {
		if _, ok := t.workers[w]; !ok {
			return fmt.Errorf("worker %v owns nodes but has no lookup", w)
		}
	}
	if total != t.blocks {
		return fmt.Errorf("block counter %d, lookups hold %d", t.blocks, total)
	}
	return checkNodeIDs(t, live)
}

type heldBlock struct {
	at  ref
	ext uint64
}

// checkLookup verifies w's lookup against the blocks w holds: the table's
// layout, every entry's place holding a block of w whose hash has the
// entry's bits, and every held block found at its place (with the count
// check of checkTree, entries and blocks correspond one to one). It reads
// the table without repairing entries.
func checkLookup(t *Tree, w WorkerKey, m *extMap, held []heldBlock) error {
	if err := checkExtMap(m); err != nil {
		return fmt.Errorf("worker %v: %v", w, err)
	}
	var bad error
	m.each(func(s *extSlot) {
		n := t.nodes[s.id]
		if bad != nil {
			return
		}
		if n == nil || n == &t.root {
			bad = fmt.Errorf("worker %v: entry names node id %d, which is not live", w, s.id)
			return
		}
		e, ok := t.extAt(w, follow(ref{n, s.off}))
		if !ok || hashBits(e) != s.hash {
			bad = fmt.Errorf("worker %v: entry %+v does not point at a block of its hash", w, *s)
		}
	})
	if bad != nil {
		return bad
	}
	for _, b := range held {
		i, h := m.seek(b.ext)
		found := false
		for ; i < len(m.slots) && m.slots[i].hash == h; i++ {
			if follow(t.placeOf(&m.slots[i])) == b.at {
				found = true
			}
		}
		if !found {
			return fmt.Errorf("worker %v: lookup of %d does not point at its block", w, b.ext)
		}
	}
	return nil
}

// checkExtMap verifies the layout extMap's comment states.
func checkExtMap(m *extMap) error {
	if m.size == 0 {
		if m.count != 0 || len(m.slots) != 0 {
			return fmt.Errorf("unsized table with %d entries", m.count)
		}
		return nil
	}
	if uint64(len(m.slots)) <= m.size || m.slots[len(m.slots)-1].hash != 0 {
		return fmt.Errorf("table of %d home slots has %d slots, the last not empty", m.size, len(m.slots))
	}
	if uint64(m.count)*8 > m.size*7 {
		return fmt.Errorf("%d entries in %d home slots", m.count, m.size)
	}
	n, last := 0, uint32(0)
	for i, s := range m.slots {
		h := s.hash
		if h == 0 {
			continue
		}
		n++
		if h&1 == 0 || h < last {
			return fmt.Errorf("slot %d: hash bits %#x after %#x", i, h, last)
		}
		last = h
		home := m.home(h)
		if home > i {
			return fmt.Errorf("slot %d holds an entry whose home is %d", i, home)
		}
		for j := home; j < i; j++ {
			if m.slots[j].hash == 0 {
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
// ids (the root as 0) and that free ids are free.
func checkNodeIDs(t *Tree, live map[*node]bool) error {
	if len(t.nodes) == 0 || t.nodes[0] != &t.root || t.root.id != 0 {
		return fmt.Errorf("the root is not node 0")
	}
	n := 0
	for id, nd := range t.nodes {
		if nd == nil {
			continue
		}
		n++
		if nd.id != uint32(id) || !live[nd] {
			return fmt.Errorf("node id %d is registered but its node (id %d) is not in the tree", id, nd.id)
		}
	}
	if n != len(live) {
		return fmt.Errorf("%d registered nodes, %d in the tree", n, len(live))
	}
	for _, id := range t.free {
		if t.nodes[id] != nil {
			return fmt.Errorf("free id %d is in use", id)
		}
	}
	if n+len(t.free) != len(t.nodes) {
		return fmt.Errorf("%d registered and %d free ids of %d", n, len(t.free), len(t.nodes))
	}
	return nil
}

// checkLower verifies the lower tier's two-way mapping.
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
	lt.edges.Range(func(k lowerKey, e *lowerEdge) bool {
		owned += int64(len(e.owners))
		return true
	})
	if owned != n || n != lt.blocks {
		return fmt.Errorf("lower tier: %d owners on edges, %d in reverse maps, counter %d", owned, n, lt.blocks)
	}
	return nil
}

func checkIndex(ix *Index) error {
	for _, s := range ix.shards {
		s.mu.Lock()
		err := checkTree(s.tree)
		for t := TierHostPinned; err == nil && t < numTiers; t++ {
			err = checkLower(s.lower[t])
		}
		s.mu.Unlock()
		if err != nil {
			return err
		}
	}
	return nil
}
