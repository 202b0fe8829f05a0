package radix

import (
	"cmp"
	"slices"
	"sync/atomic"

	"github.com/puzpuzpuz/xsync/v3"
)

// node is one compressed edge of the device tree.
//
// Concurrency: readers (Match, Dump) see a node only through state, an
// atomic pointer to an immutable nodeState. The one writer of the tree (the
// caller of Tree's mutating methods; Index serialises writers per shard)
// builds a new nodeState and swaps it in, so a reader always sees a
// consistent (edge, owners, children) triple of one moment and never waits.
// Go's garbage collector reclaims replaced states once no reader holds them:
// it is the epoch reclamation that lock-free trees need elsewhere.
//
// The other fields are writer-only.
type node struct {
	state atomic.Pointer[nodeState]

	// parent is the node whose children hold this node; nil for the root.
	parent *node
	// moved is the node that took over this node's blocks at offsets
	// >= len(edge) when the node was split. A lookup entry made before the
	// split is resolved by following moved (see follow).
	moved *node
	// id names the node in lookup entries: Tree.nodes[id] == n while n is
	// in the tree (0 is the root, which no entry names).
	id uint32
}

// nodeState is an immutable snapshot of a node. Nothing in it is modified
// after it is published, except the contents of children.big (a concurrent
// map) and slice elements beyond the published lengths (see edge).
type nodeState struct {
	// edge[i] is the local hash of the block at offset i of this node, that
	// is at depth start+i of the tree. Writers may append in place beyond
	// len(edge) (readers never look past their len); every truncation caps
	// the capacity (edge[:k:k]) so an append after it reallocates.
	edge []uint64

	// owners holds every worker rank covering a prefix of edge, sorted by
	// WorkerKey. owners[j].ext[i] is that worker's external hash of the block
	// at offset i. Invariants: 1 <= len(ext) <= len(edge); a worker with
	// len(ext) == len(edge) covers the whole edge ("full"), otherwise edge[:len(ext)]
	// (a "cutoff"); a worker owning a child covers this node fully.
	owners []owner

	children children
}

type owner struct {
	key WorkerKey
	ext []uint64
}

func (st *nodeState) find(w WorkerKey) (int, bool) {
	return slices.BinarySearchFunc(st.owners, w, func(o owner, w WorkerKey) int { return cmpKey(o.key, w) })
}

// cov returns how many leading blocks of the edge w covers (0 if none).
func (st *nodeState) cov(w WorkerKey) int {
	if i, ok := st.find(w); ok {
		return len(st.owners[i].ext)
	}
	return 0
}

// withOwner returns a copy of st with w's ext set (inserted if absent, removed if nil).
func (st *nodeState) withOwner(w WorkerKey, ext []uint64) *nodeState {
	ns := &nodeState{edge: st.edge, children: st.children}
	i, found := st.find(w)
	switch {
	case ext == nil && found:
		ns.owners = slices.Concat(st.owners[:i], st.owners[i+1:])
	case ext == nil:
		ns.owners = st.owners
	case found:
		ns.owners = slices.Clone(st.owners)
		ns.owners[i].ext = ext
	default:
		ns.owners = make([]owner, 0, len(st.owners)+1)
		ns.owners = append(append(append(ns.owners, st.owners[:i]...), owner{w, ext}), st.owners[i:]...)
	}
	return ns
}

func cmpKey(a, b WorkerKey) int {
	if c := cmp.Compare(a.WorkerID, b.WorkerID); c != 0 {
		return c
	}
	return cmp.Compare(a.DPRank, b.DPRank)
}

// smallChildren is the fan-out kept as an immutable sorted slice; above it a
// node switches to a concurrent map. Most internal nodes of a prefix tree
// have two or three children; a map per node would cost about 1 KiB each.
const smallChildren = 8

// children maps the first local hash of a child's edge to the child. Small
// fan-outs live in keys/nodes (immutable, copied on change, published with a
// new nodeState); large ones in big (shared by successive states of the
// node and mutated in place).
type children struct {
	keys  []uint64 // sorted
	nodes []*node
	big   *xsync.MapOf[uint64, *node]
}

func (c *children) get(h uint64) *node {
	if c.big != nil {
		n, _ := c.big.Load(h)
		return n
	}
	for i, k := range c.keys {
		if k == h {
			return c.nodes[i]
		}
	}
	return nil
}

func (c *children) len() int {
	if c.big != nil {
		return c.big.Size()
	}
	return len(c.keys)
}

// each calls f for every child, in unspecified order for big maps.
func (c *children) each(f func(h uint64, n *node)) {
	if c.big != nil {
		c.big.Range(func(h uint64, n *node) bool { f(h, n); return true })
		return
	}
	for i, k := range c.keys {
		f(k, c.nodes[i])
	}
}

// with returns children plus (h, n). The receiver is not modified unless it
// is big, in which case the map is updated in place and returned as is.
func (c children) with(h uint64, n *node) children {
	if c.big != nil {
		c.big.Store(h, n)
		return c
	}
	if len(c.keys) >= smallChildren {
		m := xsync.NewMapOfPresized[uint64, *node](2 * smallChildren)
		for i, k := range c.keys {
			m.Store(k, c.nodes[i])
		}
		m.Store(h, n)
		return children{big: m}
	}
	i, found := slices.BinarySearch(c.keys, h)
	keys := make([]uint64, 0, len(c.keys)+1)
	nodes := make([]*node, 0, len(c.keys)+1)
	keys = append(append(keys, c.keys[:i]...), h)
	nodes = append(append(nodes, c.nodes[:i]...), n)
	if found {
		i++ // replace
	}
	keys = append(keys, c.keys[i:]...)
	nodes = append(nodes, c.nodes[i:]...)
	return children{keys: keys, nodes: nodes}
}

// without returns children minus h (see with for the big case).
func (c children) without(h uint64) children {
	if c.big != nil {
		c.big.Delete(h)
		return c
	}
	i, found := slices.BinarySearch(c.keys, h)
	if !found {
		return c
	}
	keys := slices.Concat(c.keys[:i], c.keys[i+1:])
	nodes := slices.Concat(c.nodes[:i], c.nodes[i+1:])
	return children{keys: keys, nodes: nodes}
}
