package sched

import (
	"math/bits"
	"math/rand/v2"
	"sync/atomic"
)

// kidTable is the child set of a node with more than smallKids children
// (a trie's root, a family prompt's branch point): an open-addressing hash
// table keyed by the children's first hashes, written by the WorkerLoad's
// writer only, read lock-free.
//
// Why not a concurrent map (xsync.MapOf, which it replaces): a lookup
// there is the map, its table, a bucket and an entry behind a pointer,
// each a likely cache miss in a selector that touches every candidate's
// root per request; here it is the table and one slot, which holds the key
// and the child side by side. In kvselect bench's C1024 lifecycle profile
// the map's Load was most of sharedDepth (0.10 of 0.17 s).
//
// Concurrency: the slots array never changes size (a rebuild publishes a
// new table, in a new kidSet); a slot's key is written once, before its
// node, and never changes after (a deleted child leaves a tombstone that
// only the same key reuses), so a reader that loads a non-nil node and
// then the key sees the key that node was stored under. A reader may miss
// a child being added or find one being deleted, as with the copy-on-write
// kidSet: the trie's readers accept either (WorkerLoad.NewBlocks).
//
// Invariant: fewer than half the slots are used (live or tombstone), so
// every probe sequence reaches an empty slot.
type kidTable struct {
	slots []kidSlot
	seed  uint64 // odd; the slot of h is the top bits of h·seed
	shift uint   // 64 - log2(len(slots))
	// Writer only (under the WorkerLoad's mutex):
	live, used int
}

type kidSlot struct {
	key  atomic.Uint64
	node atomic.Pointer[pnode] // nil: empty; deleted: a tombstone
}

// deleted marks a slot whose child was removed.
var deleted = &pnode{}

// minKidSlots is the smallest table: room for twice smallKids children.
const minKidSlots = 4 * smallKids

// newKidTable returns an empty table with room for n children before it
// needs a rebuild (n < slots/4; a power of two of at least minKidSlots).
// The seed is random so that hashes a client chooses cannot crowd one
// probe sequence.
func newKidTable(n int) *kidTable {
	size := max(minKidSlots, 1<<bits.Len(uint(4*n)))
	return &kidTable{slots: make([]kidSlot, size), seed: rand.Uint64() | 1, shift: uint(64 - bits.TrailingZeros(uint(size)))}
}

// get returns the child keyed h, or nil. Lock-free.
func (t *kidTable) get(h uint64) *pnode {
	mask := uint64(len(t.slots) - 1)
	for i := (h * t.seed) >> t.shift; ; i = (i + 1) & mask {
		sl := &t.slots[i]
		c := sl.node.Load()
		if c == nil {
			return nil
		}
		if sl.key.Load() == h {
			if c == deleted {
				return nil
			}
			return c
		}
	}
}

// put stores c under h, in the slot h already has (live or deleted) or the
// first empty one of its probe sequence, and reports false when h is new
// and the table is full (the caller rebuilds it first). Writer only.
func (t *kidTable) put(h uint64, c *pnode) bool {
	mask := uint64(len(t.slots) - 1)
	for i := (h * t.seed) >> t.shift; ; i = (i + 1) & mask {
		sl := &t.slots[i]
		old := sl.node.Load()
		if old == nil {
			if 2*(t.used+1) >= len(t.slots) {
				return false
			}
			sl.key.Store(h)
			sl.node.Store(c)
			t.used++
			t.live++
			return true
		}
		if sl.key.Load() == h {
			if old == deleted {
				t.live++
			}
			sl.node.Store(c)
			return true
		}
	}
}

// del removes the child keyed h, if any. Writer only.
func (t *kidTable) del(h uint64) {
	mask := uint64(len(t.slots) - 1)
	for i := (h * t.seed) >> t.shift; ; i = (i + 1) & mask {
		sl := &t.slots[i]
		c := sl.node.Load()
		if c == nil {
			return
		}
		if sl.key.Load() == h {
			if c != deleted {
				sl.node.Store(deleted)
				t.live--
			}
			return
		}
	}
}

// each calls f for every child with its key. Writer only.
func (t *kidTable) each(f func(h uint64, c *pnode)) {
	for i := range t.slots {
		sl := &t.slots[i]
		if c := sl.node.Load(); c != nil && c != deleted {
			f(sl.key.Load(), c)
		}
	}
}

// rebuilt returns a new table holding t's children with room for one
// more: sized for its live children, tombstones dropped.
func (t *kidTable) rebuilt() *kidTable {
	nt := newKidTable(t.live + 1)
	t.each(func(h uint64, c *pnode) { nt.put(h, c) })
	return nt
}
