package peers

import "container/heap"

// prefixTable is AIBrix's PrefixHashTable as the policy uses it: blocks of
// one token, keyed by their prefix, each with the pods it was written for,
// in an LRU of bounded size with an idle TTL.
type prefixTable interface {
	// match visits the text's leading blocks that are present, in order:
	// visit(end, pods) says blocks up to end (exclusive) list pods; it
	// returns false to stop. Consecutive blocks with the same pods may be
	// visited once, at the last of them.
	match(text []uint32, visit func(end int, pods uint64) bool)
	// add writes every block of text for pod w at now (AddPrefix).
	add(text []uint32, w int, now float64)
	// expire drops the blocks last written before cutoff.
	expire(cutoff float64)
}

// blockTable is the table block by block, as AIBrix stores it: one LRU
// entry per block hash. It is the reference runTable is tested against.
type blockTable struct {
	l      *lru
	hashes []uint64
}

func (t *blockTable) match(text []uint32, visit func(int, uint64) bool) {
	t.hashes = appendChain(t.hashes[:0], 0x61696272, text, 1, 0, false)
	for i, h := range t.hashes {
		pods, ok := t.l.get(h)
		if !ok || pods == 0 || !visit(i+1, pods) {
			return
		}
	}
}

func (t *blockTable) add(text []uint32, w int, now float64) {
	t.hashes = appendChain(t.hashes[:0], 0x61696272, text, 1, 0, false)
	for _, h := range t.hashes {
		t.l.put(h, 1<<w, now)
	}
}

func (t *blockTable) expire(cutoff float64) { t.l.expire(cutoff) }

// runTable is the same table in runs: a radix tree of the written texts
// whose node holds an edge of blocks (tokens) written together by every
// write that reached them, so they share one pod set, one write time and
// consecutive LRU sequence numbers. A write splits nodes where it ends or
// diverges, and where a node's evicted head ends, so the invariant holds;
// the LRU evicts a node's present blocks from its head, which is exactly
// the block order of the per-block LRU (a write stamps its blocks in order,
// the first oldest). Why: block by block, AIBrix's table costs one LRU
// put per token, 10,000 per mooncake request; BenchmarkAIBrixPick took
// 2.7 to 4.2 ms a pick that way (with a Go map, then an open-addressing
// table: probing and cache misses) and 20 to 110 µs with runs (load
// average 5), and a
// 12,000-request trace spent 60 of its 140 s in AIBrix's table.
// TestRunTableMatchesBlocks checks it against blockTable.
//
// Invariants: edge position j of node x is block x.depth+j of its path,
// absent for j < x.gone, else present with pods x.mask, written at x.at,
// sequence number x.base+j; present is the sum of len(edge)-gone; a node
// with a present block is in the heap at x.hi, keyed by x.base+x.gone,
// and present ranges of distinct nodes are disjoint; a node with no
// present block has children.
type runTable struct {
	capacity int
	root     *rnode
	heap     runHeap
	seq      uint64
	present  int
}

type rnode struct {
	edge     []uint32
	children map[uint32]*rnode
	parent   *rnode
	depth    int
	mask     uint64
	gone     int
	base     uint64
	at       float64
	hi       int
}

func newRunTable(capacity int) *runTable {
	return &runTable{capacity: capacity, root: &rnode{hi: -1}}
}

func (x *rnode) child(t uint32) *rnode {
	if x.children == nil {
		return nil
	}
	return x.children[t]
}

func (x *rnode) setChild(c *rnode) {
	if x.children == nil {
		x.children = make(map[uint32]*rnode, 2)
	}
	x.children[c.edge[0]] = c
}

func (t *runTable) match(text []uint32, visit func(int, uint64) bool) {
	x, pos := t.root, 0
	for pos < len(text) {
		c := x.child(text[pos])
		if c == nil || c.gone > 0 {
			return
		}
		k := shared(text[pos:], c.edge)
		if !visit(pos+k, c.mask) || k < len(c.edge) {
			return
		}
		x, pos = c, pos+k
	}
}

// split cuts c after its first k blocks (0 < k < len) and returns the
// upper node, which takes c's place.
func (t *runTable) split(c *rnode, k int) *rnode {
	u := &rnode{edge: c.edge[:k:k], parent: c.parent, depth: c.depth, mask: c.mask, base: c.base, at: c.at, hi: -1}
	u.gone = min(c.gone, k)
	c.edge, c.depth, c.base, c.parent = c.edge[k:], c.depth+k, c.base+uint64(k), u
	c.gone = max(c.gone-k, 0)
	u.setChild(c)
	u.parent.setChild(u)
	t.place(c)
	t.place(u)
	return u
}

// place puts x in the heap, fixes it there or takes it out, as its
// present blocks say.
func (t *runTable) place(x *rnode) {
	switch {
	case x.gone < len(x.edge) && x.hi < 0:
		heap.Push(&t.heap, x)
	case x.gone < len(x.edge):
		heap.Fix(&t.heap, x.hi)
	case x.hi >= 0:
		heap.Remove(&t.heap, x.hi)
	}
}

func (t *runTable) add(text []uint32, w int, now float64) {
	s := t.seq
	t.seq += uint64(len(text))
	bit := uint64(1) << w
	x, pos := t.root, 0
	for pos < len(text) {
		c := x.child(text[pos])
		if c == nil {
			leaf := &rnode{edge: append([]uint32(nil), text[pos:]...), parent: x, depth: pos, mask: bit, base: s + uint64(pos), at: now, hi: -1}
			x.setChild(leaf)
			t.present += len(leaf.edge)
			t.place(leaf)
			t.evictOver()
			break
		}
		if k := shared(text[pos:], c.edge); k < len(c.edge) {
			c = t.split(c, k)
		}
		if 0 < c.gone && c.gone < len(c.edge) {
			// The evicted head is written anew with w alone; the
			// present tail keeps its pods and adds w.
			c = t.split(c, c.gone)
		}
		revived := c.gone == len(c.edge)
		if revived {
			c.mask = bit
			t.present += len(c.edge)
		} else {
			c.mask |= bit
		}
		c.gone, c.base, c.at = 0, s+uint64(c.depth), now
		t.place(c)
		if revived {
			// The per-block store evicts its tail at every new block,
			// before the write reaches the next one: the tail may be
			// this write's own later blocks, written long ago, which
			// then come back with w alone. Evicting the run's count now,
			// before the next node, gives the same blocks.
			t.evictOver()
		}
		x, pos = c, pos+len(c.edge)
	}
}

// evictOver evicts from the LRU's tail down to capacity.
func (t *runTable) evictOver() {
	for t.present > t.capacity {
		y := t.heap[0]
		t.drop(y, min(t.present-t.capacity, len(y.edge)-y.gone))
	}
}

// drop evicts y's first n present blocks, pruning nodes left with nothing.
func (t *runTable) drop(y *rnode, n int) {
	y.gone += n
	t.present -= n
	t.place(y)
	for y != t.root && y.gone == len(y.edge) && len(y.children) == 0 {
		p := y.parent
		delete(p.children, y.edge[0])
		y = p
	}
}

func (t *runTable) expire(cutoff float64) {
	for len(t.heap) > 0 && t.heap[0].at < cutoff {
		y := t.heap[0]
		t.drop(y, len(y.edge)-y.gone)
	}
}

// runHeap orders nodes by their first present block's sequence number.
type runHeap []*rnode

func (h runHeap) Len() int { return len(h) }
func (h runHeap) Less(i, j int) bool {
	return h[i].base+uint64(h[i].gone) < h[j].base+uint64(h[j].gone)
}
func (h runHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].hi, h[j].hi = i, j
}
func (h *runHeap) Push(x any) {
	n := x.(*rnode)
	n.hi = len(*h)
	*h = append(*h, n)
}
func (h *runHeap) Pop() any {
	old := *h
	n := old[len(old)-1]
	*h = old[:len(old)-1]
	n.hi = -1
	return n
}
