package radix

import (
	"cmp"
	"slices"

	"github.com/puzpuzpuz/xsync/v3"
)

// lowerKey is a continuation edge of a lower tier: from the block with
// external hash parent (or from the root when !hasParent) through the block
// whose local hash is local.
type lowerKey struct {
	parent    uint64
	local     uint64
	hasParent bool
}

// lowerEdge lists the worker ranks holding one continuation edge, sorted by
// key, each with its own external hash of the child block. Immutable once
// published.
type lowerEdge struct {
	owners []lowerOwner
}

type lowerOwner struct {
	key   WorkerKey
	child uint64
}

func (e *lowerEdge) find(w WorkerKey) (int, bool) {
	return slices.BinarySearchFunc(e.owners, w, func(o lowerOwner, w WorkerKey) int { return cmpKey(o.key, w) })
}

// lowerTier indexes one storage tier below the device, as Dynamo's
// LowerTierIndexer does
// (ai-dynamo/dynamo:lib/kv-router/src/indexer/lower_tier.rs): a set of
// continuation edges, each with its owners. Writes come from one goroutine
// at a time (the shard's writer); reads are lock-free map loads of
// immutable edges. On a duplicate or conflicting store, the existing
// mapping wins.
type lowerTier struct {
	edges *xsync.MapOf[lowerKey, *lowerEdge]
	// byWorker maps a worker's child external hash to its edge (writer-only).
	// Invariant: byWorker[w][h] == k exactly when edges[k] has owner w with
	// child h.
	byWorker map[WorkerKey]map[uint64]lowerKey
	blocks   int64 // writer-only
}

func newLowerTier() *lowerTier {
	return &lowerTier{
		edges:    xsync.NewMapOf[lowerKey, *lowerEdge](),
		byWorker: make(map[WorkerKey]map[uint64]lowerKey),
	}
}

// store adds the chain of ev's blocks for its worker; it returns how many
// blocks took effect.
func (lt *lowerTier) store(ev *Event) int {
	w := ev.Worker
	mine := lt.byWorker[w]
	if mine == nil {
		mine = make(map[uint64]lowerKey)
		lt.byWorker[w] = mine
	}
	k := lowerKey{parent: ev.ParentHash, hasParent: ev.HasParent}
	applied := 0
	for _, b := range ev.Blocks {
		k.local = b.Local
		if _, held := mine[b.Hash]; !held {
			if lt.addOwner(k, w, b.Hash) {
				mine[b.Hash] = k
				applied++
			}
		}
		k = lowerKey{parent: b.Hash, hasParent: true}
	}
	lt.blocks += int64(applied)
	if len(mine) == 0 {
		delete(lt.byWorker, w)
	}
	return applied
}

// addOwner adds w with child h to edge k unless w already owns k.
func (lt *lowerTier) addOwner(k lowerKey, w WorkerKey, h uint64) bool {
	old, _ := lt.edges.Load(k)
	var owners []lowerOwner
	if old != nil {
		i, found := old.find(w)
		if found {
			return false // the existing mapping wins
		}
		owners = make([]lowerOwner, 0, len(old.owners)+1)
		owners = append(append(append(owners, old.owners[:i]...), lowerOwner{w, h}), old.owners[i:]...)
	} else {
		owners = []lowerOwner{{w, h}}
	}
	lt.edges.Store(k, &lowerEdge{owners: owners})
	return true
}

// remove drops w's block with external hash h; it reports whether w held it.
func (lt *lowerTier) remove(w WorkerKey, h uint64) bool {
	mine := lt.byWorker[w]
	k, ok := mine[h]
	if !ok {
		return false
	}
	delete(mine, h)
	if len(mine) == 0 {
		delete(lt.byWorker, w)
	}
	lt.dropOwner(k, w)
	lt.blocks--
	return true
}

func (lt *lowerTier) dropOwner(k lowerKey, w WorkerKey) {
	old, _ := lt.edges.Load(k)
	if old == nil {
		return
	}
	i, found := old.find(w)
	if !found {
		return
	}
	if len(old.owners) == 1 {
		lt.edges.Delete(k)
		return
	}
	lt.edges.Store(k, &lowerEdge{owners: slices.Concat(old.owners[:i], old.owners[i+1:])})
}

// clear drops every block of w.
func (lt *lowerTier) clear(w WorkerKey) {
	mine := lt.byWorker[w]
	for _, k := range mine {
		lt.dropOwner(k, w)
	}
	lt.blocks -= int64(len(mine))
	delete(lt.byWorker, w)
}

// extend walks each match forward through this tier's edges and records the
// extension with set. Matches with no walk so far that own a root edge for
// q[0] are appended (start 0, no parent). A match's walk stands at the sum
// of its depths so far.
func (lt *lowerTier) extend(q []uint64, r *Result, tier Tier) {
	if lt.edges.Size() == 0 {
		return
	}
	if root, ok := lt.edges.Load(lowerKey{local: q[0]}); ok {
		for _, o := range root.owners {
			if !hasMatch(r.Matches, o.key) {
				r.Matches = append(r.Matches, Match{Worker: o.key})
			}
		}
	}
	for i := range r.Matches {
		m := &r.Matches[i]
		pos := int(m.Device + m.Host + m.Disk + m.External)
		k := lowerKey{parent: m.last, hasParent: m.hasLast}
		var n uint32
		for pos < len(q) {
			k.local = q[pos]
			e, ok := lt.edges.Load(k)
			if !ok {
				break
			}
			j, found := e.find(m.Worker)
			if !found {
				break
			}
			k = lowerKey{parent: e.owners[j].child, hasParent: true}
			pos++
			n++
		}
		if n > 0 {
			switch tier {
			case TierHostPinned:
				m.Host = n
			case TierDisk:
				m.Disk = n
			default:
				m.External = n
			}
			m.last, m.hasLast = k.parent, true
		}
	}
}

func hasMatch(ms []Match, w WorkerKey) bool {
	for i := range ms {
		if ms[i].Worker == w {
			return true
		}
	}
	return false
}

// dump emits one single-block Stored event per owned edge, sorted by
// worker, then root edges first, then by parent and local hash, so that a
// dump is deterministic.
func (lt *lowerTier) dump(tier Tier, emit func(ev *Event)) {
	var evs []Event
	lt.edges.Range(func(k lowerKey, e *lowerEdge) bool {
		for _, o := range e.owners {
			evs = append(evs, Event{Worker: o.key, Tier: tier, Kind: Stored, HasParent: k.hasParent, ParentHash: k.parent,
				Blocks: []Block{{Hash: o.child, Local: k.local}}})
		}
		return true
	})
	slices.SortFunc(evs, func(a, b Event) int {
		if c := cmpKey(a.Worker, b.Worker); c != 0 {
			return c
		}
		if a.HasParent != b.HasParent {
			if a.HasParent {
				return 1
			}
			return -1
		}
		if c := cmp.Compare(a.ParentHash, b.ParentHash); c != 0 {
			return c
		}
		return cmp.Compare(a.Blocks[0].Local, b.Blocks[0].Local)
	})
	for i := range evs {
		emit(&evs[i])
	}
}
