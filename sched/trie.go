package sched

// fullWeight is the fixed-point weight 1.0 of one active block. Block weights
// (decay fractions) are kept as integers in units of 1/fullWeight so that
// adding and then removing the same weights returns every total to exactly
// zero, which float sums would not.
const fullWeight int64 = 1 << 20

// toFixed converts a decay fraction in [0, 1] to fixed point.
func toFixed(f float64) int64 { return int64(f*float64(fullWeight) + 0.5) }

// roundBlocks converts a fixed-point total to whole blocks, rounding half up
// (active_blocks = round(prompt_total + output_total), spec 8.3). A transient
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
// Invariants: len(hashes) > 0 except for the root; refs > 0 for every node
// reachable from the root except the root; refs >= the sum of the children's
// refs (the difference is the number of requests whose prompt ends here);
// parent.child(hashes[0]) == n.
type pnode struct {
	// hashes is the edge: entry i is the sequence hash of prompt block
	// depth(parent)+i. It aliases the first owner's copy of its prompt and is
	// never written.
	hashes []uint64
	// refs counts the live requests whose prompt path covers this node.
	refs int32
	// weight is the fixed-point weight of each block of the edge.
	weight int64
	parent *pnode
	// The children, keyed by the first hash of the child's edge: in kids
	// while there are at most smallKids of them, in big (and kids nil)
	// after that. See child for why.
	kids []childRef
	big  map[uint64]*pnode
}

type childRef struct {
	first uint64
	n     *pnode
}

// smallKids is the most children a node keeps in a slice. Almost every node
// of a prompt trie has one or two children; a linear scan of a few
// (first hash, pointer) pairs costs a couple of nanoseconds where a Go map
// probe costs 10 to 20. Measured with BenchmarkNewBlocks64Workers/mixed (up
// to 8 branch points per lookup): 8.5 µs with maps only, 7.3 to 7.9 µs with
// slices on a busier machine (load average 5 on 2 cores), so a modest gain;
// booking is unchanged (one small allocation either way). Roots and hot
// branch points with many children switch to a map.
const smallKids = 8

// child returns the child whose edge starts with h, or nil.
func (n *pnode) child(h uint64) *pnode {
	if n.big != nil {
		return n.big[h]
	}
	for i := range n.kids {
		if n.kids[i].first == h {
			return n.kids[i].n
		}
	}
	return nil
}

// setChild adds or replaces the child keyed h.
func (n *pnode) setChild(h uint64, c *pnode) {
	if n.big != nil {
		n.big[h] = c
		return
	}
	for i := range n.kids {
		if n.kids[i].first == h {
			n.kids[i].n = c
			return
		}
	}
	if len(n.kids) < smallKids {
		n.kids = append(n.kids, childRef{h, c})
		return
	}
	n.big = make(map[uint64]*pnode, 2*smallKids)
	for _, k := range n.kids {
		n.big[k.first] = k.n
	}
	n.kids = nil
	n.big[h] = c
}

// deleteChild removes the child keyed h. A map does not shrink back to a
// slice.
func (n *pnode) deleteChild(h uint64) {
	if n.big != nil {
		delete(n.big, h)
		return
	}
	for i := range n.kids {
		if n.kids[i].first == h {
			last := len(n.kids) - 1
			n.kids[i] = n.kids[last]
			n.kids[last] = childRef{}
			n.kids = n.kids[:last]
			return
		}
	}
}

// numChildren returns the number of children.
func (n *pnode) numChildren() int {
	if n.big != nil {
		return len(n.big)
	}
	return len(n.kids)
}

// promptTrie is the active-prompt membership of one (worker, dp_rank): the
// union of the sequence-hash chains of its live requests, each distinct chain
// prefix stored once (the prefix dedup of spec 8.3). It is single-threaded;
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
// Precondition: the hashes are rolling sequence hashes (spec 1 and 10: each
// hash identifies its whole prefix), so a[k] == b[k] implies a[j] == b[j]
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

// prefixDepth returns how many leading hashes of path are present: the
// length of the longest prefix of path that is a path of the trie.
func (t *promptTrie) prefixDepth(path []uint64) int {
	n, i := &t.root, 0
	for i < len(path) {
		child := n.child(path[i])
		if child == nil {
			return i
		}
		m := commonPrefix(child.hashes, path[i:])
		i += m
		if m < len(child.hashes) {
			return i
		}
		n = child
	}
	return i
}

// acquire adds one owner of path, which the trie may retain and must not be
// modified afterwards. It returns the terminal node (nil for an empty path),
// to pass to release, and the change of fixed. A node that gains an owner
// gets its full weight back (a block another request needs is not decaying).
func (t *promptTrie) acquire(path []uint64) (term *pnode, delta int64) {
	if len(path) == 0 {
		return nil, 0
	}
	n, i := &t.root, 0
	for i < len(path) {
		child := n.child(path[i])
		if child == nil {
			child = &pnode{hashes: path[i:len(path):len(path)], refs: 1, weight: fullWeight, parent: n}
			n.setChild(path[i], child)
			t.blocks += len(child.hashes)
			d := int64(len(child.hashes)) * fullWeight
			t.fixed += d
			return child, delta + d
		}
		m := commonPrefix(child.hashes, path[i:])
		if m < len(child.hashes) {
			child = t.split(child, m)
		}
		child.refs++
		if child.weight != fullWeight {
			d := int64(len(child.hashes)) * (fullWeight - child.weight)
			child.weight = fullWeight
			t.fixed += d
			delta += d
		}
		i += m
		n = child
	}
	return n, delta
}

// split cuts n after its first m hashes (0 < m < len(n.hashes)) and returns
// the new upper node, which takes n's place under n's parent.
func (t *promptTrie) split(n *pnode, m int) *pnode {
	upper := &pnode{
		hashes: n.hashes[:m:m],
		refs:   n.refs,
		weight: n.weight,
		parent: n.parent,
	}
	n.parent.setChild(upper.hashes[0], upper)
	n.hashes = n.hashes[m:]
	n.parent = upper
	upper.setChild(n.hashes[0], n)
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
// (refs == 1), walking from term toward the root (spec 8.4,
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
	if n.big != nil && n.kids != nil {
		panic("BUG: sched: prompt trie node has both a child slice and a child map")
	}
	var childRefs int32
	visit := func(c *pnode) {
		if c.parent != n || n.child(c.hashes[0]) != c {
			panic("BUG: sched: prompt trie child not linked to its parent")
		}
		if c.refs <= 0 || len(c.hashes) == 0 {
			panic("BUG: sched: prompt trie node without owners or hashes")
		}
		childRefs += c.refs
		b, f := checkNode(c)
		blocks += b + len(c.hashes)
		fixed += f + int64(len(c.hashes))*c.weight
	}
	for _, k := range n.kids {
		visit(k.n)
	}
	for _, c := range n.big {
		visit(c)
	}
	if n.parent != nil && childRefs > n.refs {
		panic("BUG: sched: prompt trie children hold more refs than their parent")
	}
	return blocks, fixed
}
