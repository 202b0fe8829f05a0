package sched

import (
	"slices"
	"sync/atomic"
)

// fullWeight is the fixed-point weight 1.0 of one active block. Block weights
// (decay fractions) are kept as integers in units of 1/fullWeight so that
// adding and then removing the same weights returns every total to exactly
// zero, which float sums would not.
const fullWeight int64 = 1 << 20

// toFixed converts a decay fraction in [0, 1] to fixed point.
func toFixed(f float64) int64 { return int64(f*float64(fullWeight) + 0.5) }

// roundBlocks converts a fixed-point total to whole blocks, rounding half up
// (active_blocks = round(prompt_total + output_total), as Dynamo's
// lib/kv-router/src/sequences/block_tracker.rs). A transient
// negative total (a lifecycle call racing its booking) reads as 0.
func roundBlocks(fixed int64) int64 {
	if fixed <= 0 {
		return 0
	}
	return (fixed + fullWeight/2) / fullWeight
}

// pnode is one node of a promptTrie: a compressed edge of consecutive
// sequence hashes.
//
// A node has two kinds of fields. The reader fields (chain, chainAt, kids)
// are what the lock-free walk of promptTrie.sharedDepth reads: chain and
// chainAt are immutable once the node is linked into the trie, and kids is
// only ever replaced by an atomic pointer store. The writer fields are read
// and written only under the owning WorkerLoad's mutex.
//
// A node's end is chainAt+len(chain): the depth after its edge's last
// block. Invariants: len(hashes) > 0 except for the root; hashes aliases
// the tail of chain (hashes == chain[len(chain)-len(hashes):], same backing
// array); the parent's end is the node's end minus len(hashes), and at
// least chainAt; refs > 0 for every node reachable from the root except
// the root; refs >= the sum of the children's refs (the difference is the
// number of requests whose prompt ends here); parent.child(hashes[0]) == n.
type pnode struct {
	// chain is the prompt of the request that created the node, from the
	// depth where the node's edge started then (chainAt) to the end of
	// its edge: chain[d-chainAt] is the sequence hash of prompt block d.
	// It aliases that request's owned copy (which holds no block before
	// chainAt: the blocks it shared with other live prompts are theirs)
	// and is never written; a split gives the new upper node a shorter
	// chain and leaves this one alone.
	chain   []uint64
	chainAt int
	// kids are the children, keyed by the first hash of the child's edge
	// (the hash at the node's end). The kidSet behind the pointer is
	// immutable except for its big table's slots, which are atomics.
	kids atomic.Pointer[kidSet]

	// Writer fields (under the WorkerLoad's mutex):

	// hashes is the edge: entry i is the sequence hash of prompt block
	// depth(parent)+i. A split shortens it (from the front).
	hashes []uint64
	// refs counts the live requests whose prompt path covers this node.
	refs int32
	// weight is the fixed-point weight of each block of the edge.
	weight int64
	parent *pnode
}

// kidSet is an immutable snapshot of a node's children: up to smallKids in
// kids, or (big != nil, kids unused) any number in a kidTable
// (kidtable.go), which the writer then updates in place until it rebuilds
// it into a new kidSet. Every other change replaces the whole kidSet (copy
// on write: one 144-byte allocation per change).
type kidSet struct {
	n    int
	kids [smallKids]childRef // the first n are set; pairs, so a probe reads one cache line
	big  *kidTable
}

type childRef struct {
	first uint64
	n     *pnode
}

// smallKids is the most children a node keeps in kidSet.kids. Almost every
// node of a prompt trie has one or two children; a linear scan of a few
// hashes costs a couple of nanoseconds where a map probe costs 10 to 20.
// Measured with BenchmarkNewBlocks64Workers/mixed (up to 8 branch points
// per lookup) when children were plain slices and maps: 8.5 µs with maps
// only, 7.3 to 7.9 µs with slices on a busier machine (load average 5 on 2
// cores), so a modest gain. Roots and hot branch points with many children
// switch to a kidTable.
const smallKids = 8

// child returns the child whose edge starts with h, or nil. Lock-free: one
// atomic load and a scan of an immutable array (or a kidTable probe).
// sharedDepth has its own copy of this.
func (n *pnode) child(h uint64) *pnode {
	s := n.kids.Load()
	if s == nil {
		return nil
	}
	if s.big == nil {
		for _, k := range s.kids[:s.n] {
			if k.first == h {
				return k.n
			}
		}
		return nil
	}
	return s.bigChild(h)
}

// bigChild is child's table case, kept out of line (sharedDepth's copy of
// child stays small).
//
//go:noinline
func (s *kidSet) bigChild(h uint64) *pnode { return s.big.get(h) }

// setChild adds or replaces the child keyed h and publishes the change.
// c must be complete (chain, hashes, kids) before the call: readers may
// reach it as soon as this stores. Writer only.
func (n *pnode) setChild(h uint64, c *pnode) {
	old := n.kids.Load()
	if old != nil && old.big != nil {
		if !old.big.put(h, c) {
			t := old.big.rebuilt()
			t.put(h, c)
			n.kids.Store(&kidSet{big: t})
		}
		return
	}
	s := &kidSet{}
	if old != nil {
		*s = *old
	}
	for i := range s.n {
		if s.kids[i].first == h {
			s.kids[i].n = c
			n.kids.Store(s)
			return
		}
	}
	if s.n < smallKids {
		s.kids[s.n] = childRef{h, c}
		s.n++
		n.kids.Store(s)
		return
	}
	t := newKidTable(s.n + 1)
	for _, k := range s.kids[:s.n] {
		t.put(k.first, k.n)
	}
	t.put(h, c)
	n.kids.Store(&kidSet{big: t})
}

// deleteChild removes the child keyed h and publishes the change. A table
// does not shrink back to kids. Writer only.
func (n *pnode) deleteChild(h uint64) {
	old := n.kids.Load()
	if old == nil {
		return
	}
	if old.big != nil {
		old.big.del(h)
		return
	}
	for i := range old.n {
		if old.kids[i].first != h {
			continue
		}
		if old.n == 1 {
			n.kids.Store(nil)
			return
		}
		s := &kidSet{}
		*s = *old
		last := s.n - 1
		s.kids[i] = s.kids[last]
		s.kids[last] = childRef{}
		s.n = last
		n.kids.Store(s)
		return
	}
}

// numChildren returns the number of children.
func (n *pnode) numChildren() int {
	s := n.kids.Load()
	switch {
	case s == nil:
		return 0
	case s.big != nil:
		return s.big.live
	}
	return s.n
}

// rangeChildren calls f for every child with its key.
func (n *pnode) rangeChildren(f func(h uint64, c *pnode)) {
	s := n.kids.Load()
	switch {
	case s == nil:
	case s.big != nil:
		s.big.each(f)
	default:
		for _, k := range s.kids[:s.n] {
			f(k.first, k.n)
		}
	}
}

// promptTrie is the active-prompt membership of one (worker, dp_rank): the
// union of the sequence-hash chains of its live requests, each distinct chain
// prefix stored once (the prefix dedup: a distinct sequence hash counts
// once per worker, however many requests share it). It is single-threaded;
// WorkerLoad adds the locking.
//
// Invariant: blocks == Σ len(n.hashes) and fixed == Σ len(n.hashes)·n.weight
// over all nodes.
type promptTrie struct {
	root   pnode
	blocks int
	fixed  int64
}

// commonPrefix returns the length of the longest common prefix of an edge a
// and a request's remaining path b, both starting at the same depth.
//
// Precondition: the hashes are rolling sequence hashes (each hash is the
// XXH3 of its parent's hash and the block's local hash, so it identifies its
// whole prefix), so a[k] == b[k] implies a[j] == b[j]
// for every j < k. The common prefix is then found by checking the last
// overlapping position (the usual case: the whole edge matches) and
// otherwise binary-searching for the first mismatch, O(log n) compares
// instead of n. Measured (BenchmarkNewBlocks64Workers, 512-block prompt,
// 64 ranks, 2 shared cores): the linear compare took 20 µs ("full") and
// 31 µs ("mixed"); this search takes 1.3 µs and 8.5 µs. Caller-supplied
// hashes that are not a chain still give a valid prefix (every position up
// to the returned length is checked by the chain property only), so a
// non-chain input can overstate sharing, never corrupt the trie.
func commonPrefix(a, b []uint64) int {
	n := min(len(a), len(b))
	if n == 0 {
		return 0
	}
	if a[n-1] == b[n-1] {
		return n
	}
	// Invariant: a[lo-1] == b[lo-1] (or lo == 0), a[hi] != b[hi].
	lo, hi := 0, n-1
	for lo < hi {
		mid := int(uint(lo+hi) >> 1)
		if a[mid] == b[mid] {
			lo = mid + 1
		} else {
			hi = mid
		}
	}
	return lo
}

// sharedDepth returns how many leading hashes of path are present: the
// length of the longest prefix of path that is a path of the trie. It takes
// no lock and may run concurrently with the writer (acquire, split,
// release, setExclusiveWeight): it reads only the reader fields of the
// nodes (chain, kids), see WorkerLoad.NewBlocks for what a concurrent
// change can do to the answer.
//
// At depth i it compares path with the child's chain from depth i, not
// with the child's edge: a split that ran since the child was found moves
// the start of its edge past i, but chain still holds the hashes of every
// depth from chainAt (at most i) to the edge's end.
func (t *promptTrie) sharedDepth(path []uint64) int {
	n, i := &t.root, 0
	for i < len(path) {
		// n.child(path[i]) by hand: child does not fit the inlining
		// budget, and a call per branch point on each of 64 ranks was
		// measurable (BenchmarkNewBlocks64Workers/mixed).
		s := n.kids.Load()
		if s == nil {
			return i
		}
		var c *pnode
		if s.big == nil {
			h := path[i]
			for _, k := range s.kids[:s.n] {
				if k.first == h {
					c = k.n
					break
				}
			}
		} else {
			c = s.bigChild(path[i])
		}
		if c == nil {
			return i
		}
		// c was linked under n when its edge started at n's end == i,
		// and a split only moves that start deeper, so c.chainAt <= i <
		// c's end.
		end := c.chainAt + len(c.chain)
		i += commonPrefix(c.chain[i-c.chainAt:], path[i:])
		if i < end {
			return i
		}
		n = c
	}
	return i
}

// acquire adds one owner of path. own is the caller's copy of path[at:],
// which a new node may retain (its chain) and which must not be modified
// afterwards (lock-free readers may read it at any time). When the path
// leaves the trie before at (a release since the caller estimated the
// shared depth), acquire copies path from there itself and returns that
// copy and its depth in place of own and at. It returns the terminal node
// (nil for an empty path), to pass to release, the change of fixed (the
// weight of the new blocks), and exact: whether the hashes the path shares
// with the trie are path's, compared one by one (commonPrefix trusts the
// chain property, which a caller's hashes may not have), so that the
// trie's edges along the path give back path[:at]. A node that gains an
// owner keeps its weight: like Dynamo's block tracker, a decay fraction
// stays with its node until the node is removed (a split keeps it on both
// halves).
func (t *promptTrie) acquire(path, own []uint64, at int) (term *pnode, delta int64, _ []uint64, _ int, exact bool) {
	if len(path) == 0 {
		return nil, 0, own, at, true
	}
	n, i := &t.root, 0
	exact = true
	for i < len(path) {
		child := n.child(path[i])
		if child == nil {
			if i < at { // under the lock, but only after a racing release
				own, at = slices.Clone(path[i:]), i
			}
			tail := own[i-at : len(own) : len(own)]
			child = &pnode{chain: tail, chainAt: i, hashes: tail, refs: 1, weight: fullWeight, parent: n}
			n.setChild(path[i], child)
			t.blocks += len(child.hashes)
			d := int64(len(child.hashes)) * fullWeight
			t.fixed += d
			return child, delta + d, own, at, exact
		}
		m := commonPrefix(child.hashes, path[i:])
		exact = exact && slices.Equal(child.hashes[:m], path[i:i+m])
		if m < len(child.hashes) {
			child = t.split(child, m)
		}
		child.refs++
		i += m
		n = child
	}
	return n, delta, own, at, exact
}

// split cuts n after its first m hashes (0 < m < len(n.hashes)) and returns
// the new upper node, which takes n's place under n's parent. The upper node
// is complete, with n as its only child, before it is published, so a
// concurrent reader sees either n or the upper node under the parent, and
// n's reader fields do not change.
func (t *promptTrie) split(n *pnode, m int) *pnode {
	cut := len(n.chain) - len(n.hashes) + m // the upper node's end, in n.chain
	upper := &pnode{
		chain:   n.chain[:cut:cut],
		chainAt: n.chainAt,
		hashes:  n.hashes[:m:m],
		refs:    n.refs,
		weight:  n.weight,
		parent:  n.parent,
	}
	upper.setChild(n.hashes[m], n)
	n.hashes = n.hashes[m:]
	n.parent.setChild(upper.hashes[0], upper)
	n.parent = upper
	return upper
}

// release drops one owner of the path ending at term (from acquire) and
// returns the change of fixed. Nodes left without owners are removed; they
// have no children by the refs invariant.
func (t *promptTrie) release(term *pnode) (delta int64) {
	for n := term; n != nil && n != &t.root; n = n.parent {
		n.refs--
		if n.refs == 0 {
			if n.numChildren() != 0 {
				panic("BUG: sched: prompt trie node without owners has children")
			}
			n.parent.deleteChild(n.hashes[0])
			t.blocks -= len(n.hashes)
			d := int64(len(n.hashes)) * n.weight
			t.fixed -= d
			delta -= d
		} else if n.refs < 0 {
			panic("BUG: sched: prompt trie refcount below zero")
		}
	}
	return delta
}

// setExclusiveWeight sets weight w on the nodes only the owner of term holds
// (refs == 1), walking from term toward the root (Dynamo's
// add_output_block with decay_fraction), and returns the change of fixed.
func (t *promptTrie) setExclusiveWeight(term *pnode, w int64) (delta int64) {
	for n := term; n != nil && n != &t.root && n.refs == 1; n = n.parent {
		d := int64(len(n.hashes)) * (w - n.weight)
		n.weight = w
		delta += d
	}
	t.fixed += delta
	return delta
}

// check verifies the trie's invariants (totals, refs, parent links) by a full
// walk and panics with a BUG message on the first violation. It runs after
// every mutation when built with -tags invariants.
func (t *promptTrie) check() {
	blocks, fixed := checkNode(&t.root)
	if blocks != t.blocks || fixed != t.fixed {
		panic("BUG: sched: prompt trie totals differ from a recount")
	}
}

func checkNode(n *pnode) (blocks int, fixed int64) {
	if s := n.kids.Load(); s != nil && s.big == nil && s.n == 0 {
		panic("BUG: sched: prompt trie node has an empty child set")
	}
	var childRefs int32
	n.rangeChildren(func(h uint64, c *pnode) {
		if c.parent != n || n.child(h) != c || len(c.hashes) == 0 || c.hashes[0] != h {
			panic("BUG: sched: prompt trie child not linked to its parent")
		}
		start := len(c.chain) - len(c.hashes) // the edge's start, in c.chain
		if c.chainAt+start != n.chainAt+len(n.chain) || &c.chain[start] != &c.hashes[0] || len(c.chain) != cap(c.chain) {
			panic("BUG: sched: prompt trie node's chain does not end with its edge")
		}
		if c.refs <= 0 {
			panic("BUG: sched: prompt trie node without owners")
		}
		childRefs += c.refs
		b, f := checkNode(c)
		blocks += b + len(c.hashes)
		fixed += f + int64(len(c.hashes))*c.weight
	})
	if n.parent != nil && childRefs > n.refs {
		panic("BUG: sched: prompt trie children hold more refs than their parent")
	}
	return blocks, fixed
}
