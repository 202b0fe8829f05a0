package radix

// The removing side of a Tree: Removed and Cleared events, and the
// publication and unlinking of the nodes they change.

// RemoveMany removes each hash in order, with every block w holds below it,
// and returns how many w did not hold at their turn. Runs of hashes on one node
// at decreasing offsets (an engine evicting a chain leaf first) are cut
// once, at the lowest offset, instead of republishing the node per block.
func (t *Tree) RemoveMany(w WorkerKey, hashes []uint64) (unknown int) {
	wb := t.workers[w]
	if wb == nil {
		return len(hashes)
	}
	for i := 0; i < len(hashes); {
		r, ok := t.locate(wb, w, hashes[i])
		if !ok {
			unknown++
			i++
			continue
		}
		j := i + 1
		for ; j < len(hashes); j++ {
			r2, ok := t.locate(wb, w, hashes[j])
			if !ok {
				break
			}
			if r2.n != r.n || r2.off >= r.off {
				break // removed by the cut so far, or elsewhere: not part of the run
			}
			r.off = r2.off
		}
		t.cut(wb, w, r.n, int(r.off))
		i = j
	}
	if wb.lookup.Len() == 0 {
		delete(t.workers, w)
	}
	return unknown
}

// Clear drops every block of w.
func (t *Tree) Clear(w WorkerKey) {
	wb := t.workers[w]
	if wb == nil {
		return
	}
	nodes := make([]*node, 0, 16)
	seen := make(map[*node]struct{})
	wb.lookup.each(func(s *extSlot) {
		res := follow(t.placeOf(s))
		if _, dup := seen[res.n]; !dup {
			seen[res.n] = struct{}{}
			nodes = append(nodes, res.n)
		}
	})
	for _, n := range nodes {
		t.cut(wb, w, n, 0) // a no-op for nodes already cut below an ancestor
	}
	if wb.lookup.Len() != 0 {
		panic("BUG: radix: Clear left lookup entries behind")
	}
	delete(t.workers, w)
}

// cut makes w cover only edge[:k] of n (nothing when k == 0) and drops w
// from n's subtree.
func (t *Tree) cut(wb *workerBlocks, w WorkerKey, n *node, k int) {
	st := n.state.Load()
	i, found := st.find(w)
	if !found {
		return
	}
	ext := st.owners[i].ext
	if k >= len(ext) {
		return
	}
	if len(ext) == len(st.edge) {
		// Only a full owner can own children.
		st.children.each(func(_ uint64, c *node) { t.cut(wb, w, c, 0) })
		st = n.state.Load() // children may have been unlinked
	}
	for i, e := range ext[k:] {
		t.unindex(wb, e, ref{n, uint32(k + i)})
	}
	var kept []uint64
	if k > 0 {
		kept = ext[:k:k]
	}
	t.publish(n, st.withOwner(w, kept))
}

// publish stores ns as n's state after an owner left or shrank, keeping the
// tree trim: a node nobody covers is unlinked, and an edge tail nobody
// covers is cut off (a node nobody covers fully has no owned children, so
// its children go too).
func (t *Tree) publish(n *node, ns *nodeState) {
	if n == &t.root {
		n.state.Store(ns)
		return
	}
	if len(ns.owners) == 0 {
		t.unlink(n)
		n.state.Store(ns)
		t.release(n)
		return
	}
	maxCov := 0
	for _, o := range ns.owners {
		maxCov = max(maxCov, len(o.ext))
	}
	if maxCov < len(ns.edge) {
		ns.edge = ns.edge[:maxCov:maxCov]
		ns.children = children{}
		n.moved = nil
	}
	n.state.Store(ns)
}

// unlink removes n from its parent's children.
func (t *Tree) unlink(n *node) {
	p := n.parent
	if p == nil {
		return
	}
	key := n.state.Load().edge[0]
	pst := p.state.Load()
	if pst.children.get(key) != n {
		return // already replaced (the parent's tail was cut)
	}
	ch := pst.children.without(key)
	if ch.big == nil {
		p.state.Store(&nodeState{edge: pst.edge, owners: pst.owners, children: ch})
	}
	if p.moved == n {
		p.moved = nil
	}
}
