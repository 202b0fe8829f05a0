package peers

import (
	"container/heap"
	"math/bits"
)

// tree is SMG's approximate radix tree of routed text (lightseekorg/smg:
// crates/kv_index/src/string_tree.rs, Tree), over tokens instead of
// characters: one tree for the model, whose nodes hold an edge and the
// tenants (workers) that routed a request through it, each with the epoch
// of its last access.
//
// Invariants: a tenant present on a node is present on the node's parent
// (so a node with children has tenants); size[w] is the sum of the edge
// lengths of the nodes w is present on; children[t].edge[0] == t.
type tree struct {
	root *tnode
	size []int
	// epoch is SMG's global epoch counter (get_epoch: fetch_add from 0).
	epoch uint64
	path  []*tnode
}

type tnode struct {
	edge     []uint32
	children map[uint32]*tnode
	parent   *tnode
	// present has bit w set when tenant w is on the node; then
	// stamp[w] is its last-access epoch (0: attached in passing).
	present uint64
	stamp   []uint64
	// last is SMG's last_tenant cache (-1: none).
	last int
}

func newTree(n int) *tree {
	t := &tree{size: make([]int, n)}
	t.root = t.newNode(nil, nil)
	// The policy inserts "" for every worker when it is added: each is a
	// tenant of the root at epoch 0, with size 0.
	t.root.present = allMask(n)
	return t
}

func (t *tree) newNode(edge []uint32, parent *tnode) *tnode {
	return &tnode{edge: edge, parent: parent, stamp: make([]uint64, len(t.size)), last: -1}
}

func (t *tree) nextEpoch() uint64 {
	e := t.epoch
	t.epoch++
	return e
}

func (n *tnode) has(w int) bool { return n.present&(1<<w) != 0 }

func (n *tnode) set(w int, epoch uint64) {
	n.present |= 1 << w
	n.stamp[w] = epoch
}

// attach puts tenant w on n in passing (epoch 0) if it is not there.
func (t *tree) attach(n *tnode, w int) {
	if !n.has(w) {
		n.set(w, 0)
		t.size[w] += len(n.edge)
	}
}

func (n *tnode) child(tok uint32) *tnode {
	if n.children == nil {
		return nil
	}
	return n.children[tok]
}

func (n *tnode) setChild(c *tnode) {
	if n.children == nil {
		n.children = make(map[uint32]*tnode, 2)
	}
	n.children[c.edge[0]] = c
}

func shared(a, b []uint32) int {
	n := min(len(a), len(b))
	for i := range n {
		if a[i] != b[i] {
			return i
		}
	}
	return n
}

// match is a prefix match's outcome: the tokens matched (a partly matched
// edge counts its shared tokens) and the tenant of the node where the
// match ended (-1: none, SMG's "empty").
type match struct {
	matched, total, tenant int
}

// matchAndInsert is SMG's match_and_insert_with: one descent matches text,
// resolves the tenant of the node where the match ended (its last_tenant
// if still present, else the first tenant; SMG takes DashMap's first,
// here the lowest index), restamps that node with a 1-in-8 chance of the
// epoch counter, asks choose for the worker to insert for (-1: none), and
// inserts text for it: tenants attached to the matched path at epoch 0,
// the rest inserted below the last fully matched node, the leaf stamped.
func (t *tree) matchAndInsert(text []uint32, choose func(match) int) int {
	cur, at := t.root, t.root
	path := t.path[:0]
	rem := text
	m := match{total: len(text)}
	for len(rem) > 0 {
		c := cur.child(rem[0])
		if c == nil {
			break
		}
		k := shared(rem, c.edge)
		m.matched += k
		at = c
		if k < len(c.edge) {
			break
		}
		path = append(path, c)
		rem = rem[k:]
		cur = c
	}
	t.path = path
	m.tenant = at.last
	if m.tenant < 0 || !at.has(m.tenant) {
		m.tenant = -1
		if at.present != 0 {
			m.tenant = bits.TrailingZeros64(at.present)
		}
		at.last = m.tenant
	}
	if e := t.nextEpoch(); e&7 == 0 && m.tenant >= 0 {
		at.set(m.tenant, e)
	}
	w := choose(m)
	if w < 0 {
		return w
	}
	for _, n := range path {
		t.attach(n, w)
	}
	if len(rem) == 0 {
		cur.set(w, t.nextEpoch())
	} else {
		t.insertFrom(cur, rem, w)
	}
	return w
}

// insert is SMG's insert_text: text inserted for w, no match side effects.
func (t *tree) insert(text []uint32, w int) { t.insertFrom(t.root, text, w) }

// insertFrom inserts rem for w below prev (insert_from): full matches
// attach w in passing, a partial match splits the edge (the upper half
// keeps the node's tenants, stamps and last_tenant), the rest becomes a
// new leaf for w; the node where the text ends is stamped.
func (t *tree) insertFrom(prev *tnode, rem []uint32, w int) {
	for len(rem) > 0 {
		c := prev.child(rem[0])
		if c == nil {
			leaf := t.newNode(append([]uint32(nil), rem...), prev)
			leaf.last = w
			leaf.set(w, t.nextEpoch())
			t.size[w] += len(rem)
			prev.setChild(leaf)
			return
		}
		k := shared(rem, c.edge)
		if k < len(c.edge) {
			up := t.newNode(c.edge[:k:k], prev)
			up.present, up.last = c.present, c.last
			copy(up.stamp, c.stamp)
			c.edge, c.parent = c.edge[k:], up
			up.setChild(c)
			prev.setChild(up)
			c = up
		}
		t.attach(c, w)
		prev, rem = c, rem[k:]
	}
	prev.set(w, t.nextEpoch())
}

// smallest is the tenant with the least text (the lowest index on ties):
// the old sgl-router's get_smallest_tenant.
func (t *tree) smallest() int { return minIndex(t.size) }

// evict is evict_tenant_by_size: for every tenant over maxSize, its
// leaves (nodes none of whose children it is on) leave in epoch order,
// parents becoming leaves joining the queue, until it is within bound;
// nodes left without tenants and children are deleted. The root is never
// evicted.
func (t *tree) evict(maxSize int) {
	over := false
	for _, s := range t.size {
		over = over || s > maxSize
	}
	if !over {
		return
	}
	var q leafQueue
	var walk func(n *tnode)
	walk = func(n *tnode) {
		var below uint64
		for _, c := range n.children {
			below |= c.present
			walk(c)
		}
		if n == t.root {
			return
		}
		for m := n.present &^ below; m != 0; m &= m - 1 {
			w := bits.TrailingZeros64(m)
			q = append(q, leafEntry{n.stamp[w], w, n})
		}
	}
	walk(t.root)
	heap.Init(&q)
	for q.Len() > 0 {
		e := heap.Pop(&q).(leafEntry)
		n, w := e.node, e.tenant
		if t.size[w] <= maxSize || !n.has(w) || childrenHave(n, w) {
			continue
		}
		t.size[w] -= len(n.edge)
		n.present &^= 1 << w
		p := n.parent
		if len(n.children) == 0 && n.present == 0 {
			delete(p.children, n.edge[0])
		}
		if p != t.root && p.has(w) && !childrenHave(p, w) {
			heap.Push(&q, leafEntry{p.stamp[w], w, p})
		}
	}
}

func childrenHave(n *tnode, w int) bool {
	for _, c := range n.children {
		if c.has(w) {
			return true
		}
	}
	return false
}

type leafEntry struct {
	stamp  uint64
	tenant int
	node   *tnode
}

// leafQueue orders leaves by epoch, then tenant.
type leafQueue []leafEntry

func (h leafQueue) Len() int { return len(h) }
func (h leafQueue) Less(i, j int) bool {
	if h[i].stamp != h[j].stamp {
		return h[i].stamp < h[j].stamp
	}
	return h[i].tenant < h[j].tenant
}
func (h leafQueue) Swap(i, j int) { h[i], h[j] = h[j], h[i] }
func (h *leafQueue) Push(x any)   { *h = append(*h, x.(leafEntry)) }
func (h *leafQueue) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}
