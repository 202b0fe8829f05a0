package radix

import (
	"fmt"
	"slices"
)

// checkTree verifies every structural invariant of t that the comments in
// node.go and tree.go state. Tests call it after every operation.
func checkTree(t *Tree) error {
	perWorker := make(map[WorkerKey]int)
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
		var bad error
		wb.lookup.each(func(e uint64, rp *ref) {
			r := t.resolve(wb, e, *rp)
			st := r.n.state.Load()
			i, ok := st.find(w)
			if bad == nil && (!ok || int(r.off) >= len(st.owners[i].ext) || st.owners[i].ext[r.off] != e) {
				bad = fmt.Errorf("worker %v: lookup of %d does not point at its block", w, e)
			}
		})
		if bad != nil {
			return bad
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
