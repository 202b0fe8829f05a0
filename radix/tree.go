package radix

import "math"

// The device tree's writer side, in three parts: the Tree and the
// bookkeeping that stores and removals share (node ids; each worker's
// lookup from external hash to block, through splits); Stored events
// (Store and the edge operations it uses); Removed and Cleared events
// (cut, and publish and unlink, which keep the tree trim). The reader side
// (match, PrefixHashes, dump) is in match.go.

// ref locates one block a worker covers: offset off of node n. Entries made
// before a split may point past the end of n's edge; follow walks
// node.moved to the block's current home.
type ref struct {
	n   *node
	off uint32
}

// follow returns the current place of r, following splits.
func follow(r ref) ref {
	for {
		st := r.n.state.Load()
		if int(r.off) < len(st.edge) || r.n.moved == nil {
			return r
		}
		r.off -= uint32(len(st.edge))
		r.n = r.n.moved
	}
}

// workerBlocks is the writer-side reverse lookup of one worker rank: its
// external block hash to the block's place in the tree.
//
// Invariant: lookup has an entry for e, placed by e's hash bits, whose
// place follows to (n, off) exactly when n's owner entry for this worker
// has ext[off] == e. So a worker's block count is lookup.Len().
type workerBlocks struct {
	lookup extMap
}

// Tree is the device-tier compressed radix tree of one partition (or of one
// shard of it). Every mutating method must be called by one goroutine at a
// time (Index holds the shard's writer lock); Match, PrefixHashes and Dump
// may run concurrently with them and never block.
type Tree struct {
	root    node
	workers map[WorkerKey]*workerBlocks
	blocks  int64     // sum of lookup.Len() over workers; writer-only
	dup     []dupSlot // scratch of hasDuplicates; writer-only

	// nodes[id] is the live node with that id, nil for a free id; free
	// lists the free ids. Lookup entries name nodes by id: 4 bytes instead
	// of an 8-byte pointer, and no pointer for the collector to scan (a
	// full GC with 2 M pairs indexed, BenchmarkMemory: 44 ms with pointers
	// in the slots, 4.5 ms without; medians). Writer-only.
	nodes []*node
	free  []uint32

	// While cover or extend builds w's new external hashes of pendNode,
	// pendExt holds them (nil until cover's first change): lookups made
	// meanwhile, and the rekey of w's table that an entry may trigger
	// (index), must read them rather than the published ones. Writer-only.
	pendNode *node
	pendExt  []uint64

	// seen caches extAt's owner search: seenExt is seenW's external hashes
	// in the published state seenSt (states are immutable, and holding
	// seenSt keeps its address from being reused). The hashes an engine
	// removes in one event sit on one node, so confirming each of them
	// otherwise binary-searched the same owners again (a fifth of the apply
	// profile, BenchmarkApplyStored, before this cache). Writer-only.
	seenSt  *nodeState
	seenW   WorkerKey
	seenExt []uint64

	// checks counts mutations for the invariants build's checks (see
	// checkBudget); unchecked exempts the tree from them, for a test that
	// builds a tree too big to check as it grows (TestMemoryPerBlock
	// checks it once, built).
	checks    uint64
	unchecked bool
}

// NewTree returns an empty tree.
func NewTree() *Tree {
	t := &Tree{workers: make(map[WorkerKey]*workerBlocks)}
	t.root.state.Store(&nodeState{})
	t.nodes = []*node{&t.root}
	return t
}

// register gives n an id, making it nameable by lookup entries.
func (t *Tree) register(n *node) {
	if k := len(t.free); k > 0 {
		n.id = t.free[k-1]
		t.free = t.free[:k-1]
		t.nodes[n.id] = n
		return
	}
	if uint64(len(t.nodes)) > math.MaxUint32 {
		panic("radix: more than 2^32 nodes in one tree")
	}
	n.id = uint32(len(t.nodes))
	t.nodes = append(t.nodes, n)
}

// release frees the id of n, which left the tree (no lookup entry names
// it: it has no owners).
func (t *Tree) release(n *node) {
	if t.nodes[n.id] != n {
		panic("BUG: radix: releasing a node that is not registered")
	}
	t.nodes[n.id] = nil
	t.free = append(t.free, n.id)
}

// placeOf returns the place an entry names (before following splits).
func (t *Tree) placeOf(id, off uint32) ref { return ref{t.nodes[id], off} }

// extAt returns w's external hash of the block at r (which follow has
// resolved), seeing cover's pending changes; ok is false if w holds none.
func (t *Tree) extAt(w WorkerKey, r ref) (uint64, bool) {
	var ext []uint64
	if r.n == t.pendNode && t.pendExt != nil {
		ext = t.pendExt
	} else {
		st := r.n.state.Load()
		if st != t.seenSt || w != t.seenW {
			i, ok := st.find(w)
			if !ok {
				return 0, false
			}
			t.seenSt, t.seenW, t.seenExt = st, w, st.owners[i].ext
		}
		ext = t.seenExt
	}
	if int(r.off) >= len(ext) {
		return 0, false
	}
	return ext[r.off], true
}

// locate returns the current place of w's block with external hash e. The
// lookup keeps only hash bits, so each entry with e's bits is confirmed by
// reading w's hash at its place (one entry in nearly every case: 32 bits
// rarely collide among one worker's blocks). An entry made before a split
// is repaired to the block's current place.
func (t *Tree) locate(wb *workerBlocks, w WorkerKey, e uint64) (ref, bool) {
	m := &wb.lookup
	i, run := m.seek(e)
	for ; ; i++ {
		id, off, ok := m.candidate(i, run)
		if !ok {
			return ref{}, false
		}
		r := follow(t.placeOf(id, off))
		if x, ok := t.extAt(w, r); ok && x == e {
			if r.n.id != id || r.off != off {
				m.setPlace(i, r.n.id, r.off) // repaired: it moved
			}
			return r, true
		}
	}
}

// index adds w's entry for e, which w does not hold, at r. extAt must read
// every entry of w, this one included: the table may reread its keys.
func (t *Tree) index(wb *workerBlocks, w WorkerKey, e uint64, r ref) {
	wb.lookup.insert(e, r.n.id, r.off)
	t.blocks++
	if wb.lookup.wantsRekey() {
		wb.lookup.rekey(func(id, off uint32) (uint32, uint32) {
			r := follow(t.placeOf(id, off))
			return r.n.id, r.off
		}, func(id, off uint32) uint64 {
			x, ok := t.extAt(w, t.placeOf(id, off))
			if !ok {
				panic("BUG: radix: a lookup entry names no block of its worker")
			}
			return x
		})
	}
}

// unindex drops the entry for e, which w holds at r: the entry with e's
// bits whose place follows to r (a place holds one block per worker, so
// this needs no hash read).
func (t *Tree) unindex(wb *workerBlocks, e uint64, r ref) {
	m := &wb.lookup
	i, run := m.seek(e)
	for ; ; i++ {
		id, off, ok := m.candidate(i, run)
		if !ok {
			panic("BUG: radix: a covered block has no lookup entry")
		}
		if id == r.n.id && off == r.off || follow(t.placeOf(id, off)) == r {
			m.deleteAt(i)
			t.blocks--
			return
		}
	}
}

// Stored events.

// hasDuplicates reports whether a store names one external hash twice, or
// names its own parent. It uses t.dup, a scratch open-addressing set reused
// across calls (a map per event was 13% of the apply profile).
func (t *Tree) hasDuplicates(ev *Event) bool {
	n := len(ev.Blocks) + 1
	size := 16
	for size < 2*n {
		size *= 2
	}
	if cap(t.dup) < size {
		t.dup = make([]dupSlot, size)
	}
	set := t.dup[:size]
	clear(set)
	mask := uint64(size - 1)
	insert := func(h uint64) bool {
		for i := (h * 0x9E3779B97F4A7C15) >> 40 & mask; ; i = (i + 1) & mask {
			if !set[i].used {
				set[i] = dupSlot{h, true}
				return true
			}
			if set[i].key == h {
				return false
			}
		}
	}
	if ev.HasParent {
		insert(ev.ParentHash)
	}
	for _, b := range ev.Blocks {
		if !insert(b.Hash) {
			return true
		}
	}
	return false
}

type dupSlot struct {
	key  uint64
	used bool
}

// Store applies a Stored event of the device tier. It returns the number of
// blocks that took effect and, when some did not, why.
func (t *Tree) Store(ev *Event) (applied int, reason DropReason, dropped bool) {
	if invariants {
		defer t.afterMutation()
	}
	w := ev.Worker
	if len(ev.Blocks) == 0 {
		return 0, 0, false
	}
	if t.hasDuplicates(ev) {
		return 0, DropInvalidSequence, true
	}
	wb := t.workers[w]
	n, o := &t.root, 0
	if ev.HasParent {
		if wb == nil {
			return 0, DropParentNotFound, true
		}
		r, ok := t.locate(wb, w, ev.ParentHash)
		if !ok {
			return 0, DropParentNotFound, true
		}
		n, o = r.n, int(r.off)+1
	} else if ev.HasStartPosition && ev.StartPosition > 0 {
		// A block at depth > 0 with no parent cannot be placed in a prefix
		// tree (only Dynamo's positional indexer accepts it).
		return 0, DropParentNotFound, true
	}
	if wb == nil {
		wb = &workerBlocks{lookup: newExtMap()}
		t.workers[w] = wb
	}

	blocks := ev.Blocks
	for len(blocks) > 0 {
		st := n.state.Load()
		if o < len(st.edge) {
			// Consume the run of blocks that follow this edge.
			r := 0
			for r < len(blocks) && o+r < len(st.edge) && st.edge[o+r] == blocks[r].Local {
				r++
			}
			if r > 0 {
				took, conflict := t.cover(wb, w, n, st, o, blocks[:r])
				applied += took
				if conflict {
					return applied, DropHashConflict, true
				}
				blocks, o = blocks[r:], o+r
				continue
			}
			// Divergence inside the edge: split so that o is the end of n.
			t.split(n, o)
			st = n.state.Load()
		}
		// o == len(edge): continue in a child, extend a leaf, or add a child.
		if c := st.children.get(blocks[0].Local); c != nil {
			n, o = c, 0
			continue
		}
		if n != &t.root && st.children.len() == 0 && st.cov(w) == len(st.edge) {
			took, conflict := t.extend(wb, w, n, st, blocks)
			return applied + took, DropHashConflict, conflict
		}
		took, conflict := t.addChild(wb, w, n, st, blocks)
		return applied + took, DropHashConflict, conflict
	}
	return applied, 0, false
}

// conflictAt returns how many leading blocks can be placed at consecutive
// offsets from (n, o) without rebinding an external hash the worker already
// holds elsewhere.
func (t *Tree) conflictAt(wb *workerBlocks, w WorkerKey, n *node, o int, blocks []Block) int {
	for i, b := range blocks {
		if r, ok := t.locate(wb, w, b.Hash); ok {
			if r.n != n || int(r.off) != o+i {
				return i
			}
		}
	}
	return len(blocks)
}

// cover makes w cover blocks at offsets o.. of n, whose local hashes already
// equal edge[o:o+len(blocks)]. Precondition: w covers edge[:o]. Blocks are
// taken in order, as the naive model does: a block whose position w holds
// under another hash rebinds it (releasing the old hash, which a later
// block of the same event may then use), and a block whose hash w holds at
// another position stops the store. It returns how many blocks it placed
// and whether it stopped at such a conflict.
func (t *Tree) cover(wb *workerBlocks, w WorkerKey, n *node, st *nodeState, o int, blocks []Block) (int, bool) {
	var old []uint64
	if i, found := st.find(w); found {
		old = st.owners[i].ext
	}
	var ext []uint64 // copy of old with the changes; nil while nothing changed
	t.pendNode = n
	placed, conflict := 0, false
	for j, b := range blocks {
		pos := o + j
		if r, held := t.locate(wb, w, b.Hash); held {
			if r.n != n || int(r.off) != pos {
				conflict = true
				break
			}
			placed++ // already there
			continue
		}
		if ext == nil {
			ext = make([]uint64, max(len(old), o+len(blocks)))
			copy(ext, old)
			t.pendExt = ext
		}
		if pos < len(old) {
			t.unindex(wb, ext[pos], ref{n, uint32(pos)}) // rebind this position to the new hash
		}
		ext[pos] = b.Hash
		t.index(wb, w, b.Hash, ref{n, uint32(pos)})
		placed++
	}
	t.pendNode, t.pendExt = nil, nil
	if ext != nil {
		ext = ext[:max(len(old), o+placed)]
		n.state.Store(st.withOwner(w, ext))
	}
	return placed, conflict
}

// split cuts n's edge at offset k (0 < k < len(edge)): n keeps edge[:k] and a
// new child takes edge[k:], its owners' coverage beyond k and n's children.
// Lookup entries pointing at offsets >= k of n are repaired lazily through
// n.moved (see follow); the child is fully built before n's new state is
// published, so a reader sees either the old or the new shape.
func (t *Tree) split(n *node, k int) {
	st := n.state.Load()
	m := &node{parent: n, moved: n.moved}
	t.register(m)
	ms := &nodeState{edge: st.edge[k:], children: st.children}
	ns := &nodeState{edge: st.edge[:k:k], owners: make([]owner, 0, len(st.owners))}
	for _, o := range st.owners {
		if len(o.ext) > k {
			ms.owners = append(ms.owners, owner{o.key, o.ext[k:]})
		}
		c := min(len(o.ext), k)
		ns.owners = append(ns.owners, owner{o.key, o.ext[:c:c]})
	}
	st.children.each(func(_ uint64, c *node) { c.parent = m })
	m.state.Store(ms)
	ns.children = children{}.with(st.edge[k], m)
	n.moved = m
	n.state.Store(ns)
}

// extend appends blocks to the edge of leaf n, which w covers fully. Other
// owners keep their coverage, which becomes a cutoff.
func (t *Tree) extend(wb *workerBlocks, w WorkerKey, n *node, st *nodeState, blocks []Block) (int, bool) {
	base := len(st.edge)
	placed := t.conflictAt(wb, w, n, base, blocks)
	if placed == 0 {
		return 0, true
	}
	edge := st.edge
	i, _ := st.find(w)
	ext := st.owners[i].ext
	for _, b := range blocks[:placed] {
		// Appending in place is safe: readers of older states never look past
		// their own len, and every truncation capped the capacity.
		edge = append(edge, b.Local)
		ext = append(ext, b.Hash)
	}
	t.pendNode, t.pendExt = n, ext
	for j, b := range blocks[:placed] {
		t.index(wb, w, b.Hash, ref{n, uint32(base + j)})
	}
	t.pendNode, t.pendExt = nil, nil
	ns := st.withOwner(w, ext)
	ns.edge = edge
	n.state.Store(ns)
	return placed, placed < len(blocks)
}

// addChild hangs blocks under n as one new compressed node owned by w.
// Precondition: n is the root or w covers n fully.
func (t *Tree) addChild(wb *workerBlocks, w WorkerKey, n *node, st *nodeState, blocks []Block) (int, bool) {
	c := &node{parent: n}
	placed := t.conflictAt(wb, w, c, 0, blocks)
	if placed == 0 {
		return 0, true
	}
	t.register(c)
	edge := make([]uint64, placed)
	ext := make([]uint64, placed)
	for j, b := range blocks[:placed] {
		edge[j], ext[j] = b.Local, b.Hash
	}
	// c is published before it is indexed (index may read its hashes) and
	// linked after: no reader reaches it before it is complete.
	c.state.Store(&nodeState{edge: edge, owners: []owner{{w, ext}}})
	for j, b := range blocks[:placed] {
		t.index(wb, w, b.Hash, ref{c, uint32(j)})
	}
	ch := st.children.with(edge[0], c)
	if ch.big == nil || st.children.big == nil {
		n.state.Store(&nodeState{edge: st.edge, owners: st.owners, children: ch})
	}
	return placed, placed < len(blocks)
}

// Removed and Cleared events, and the publication and unlinking of the
// nodes they change.

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
	if invariants {
		t.afterMutation()
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
	wb.lookup.each(func(id, off uint32) {
		res := follow(t.placeOf(id, off))
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
	if invariants {
		t.afterMutation()
	}
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
