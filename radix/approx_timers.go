package radix

import "slices"

// approxEntry is one recorded (worker rank, block): the block's external
// hash h (its sequence hash), its position in the recorded prefix, and
// its expiry at (ns since the Unix epoch).
type approxEntry struct {
	w   WorkerKey
	h   uint64
	pos uint32
	at  int64
}

// timers holds every recorded entry in expiry buckets, as Dynamo's
// PruneManager does with a map and a BTreeMap of bucket sets
// (ai-dynamo/dynamo:lib/kv-router/src/indexer/pruning.rs); here a bucket
// is an intrusive list over a slab, so moving an entry to a later bucket
// is O(1) and no stale entry is left behind.
//
// Invariants: ranks[w][h] == i exactly when slots[i] is live with entry
// (w, h); slots[i] is on the list of the one bucket whose at equals its
// at; buckets are sorted by at, ascending, and none is empty; live is the
// number of live slots, and the sum of the buckets' n.
type timers struct {
	ranks   map[WorkerKey]map[uint64]int32
	slots   []tslot
	free    []int32
	buckets []tbucket
	live    int
}

type tslot struct {
	approxEntry
	prev, next int32 // within the bucket's list; -1 ends it
}

type tbucket struct {
	at         int64
	head, tail int32
	n          int
}

func (t *timers) init() { t.ranks = make(map[WorkerKey]map[uint64]int32) }

// find returns the index of the bucket expiring at at, or where it would
// be inserted.
func (t *timers) find(at int64) (int, bool) {
	if k := len(t.buckets); k > 0 && t.buckets[k-1].at <= at {
		// Recordings mostly expire at or after the latest bucket.
		return k - 1 + boolInt(t.buckets[k-1].at < at), t.buckets[k-1].at == at
	}
	return slices.BinarySearchFunc(t.buckets, at, func(b tbucket, at int64) int {
		switch {
		case b.at < at:
			return -1
		case b.at > at:
			return 1
		}
		return 0
	})
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

// link appends slot i to the tail of its bucket, creating the bucket.
func (t *timers) link(i int32) {
	s := &t.slots[i]
	k, ok := t.find(s.at)
	if !ok {
		t.buckets = slices.Insert(t.buckets, k, tbucket{at: s.at, head: -1, tail: -1})
	}
	b := &t.buckets[k]
	s.prev, s.next = b.tail, -1
	if b.tail >= 0 {
		t.slots[b.tail].next = i
	} else {
		b.head = i
	}
	b.tail = i
	b.n++
}

// unlink takes slot i off its bucket's list, dropping the bucket when it
// empties.
func (t *timers) unlink(i int32) {
	s := &t.slots[i]
	k, ok := t.find(s.at)
	if !ok {
		panic("BUG: radix: approximate entry in no bucket")
	}
	b := &t.buckets[k]
	if s.prev >= 0 {
		t.slots[s.prev].next = s.next
	} else {
		b.head = s.next
	}
	if s.next >= 0 {
		t.slots[s.next].prev = s.prev
	} else {
		b.tail = s.prev
	}
	b.n--
	if b.n == 0 {
		t.buckets = slices.Delete(t.buckets, k, k+1)
	}
}

// upsert times (w, h) to expire at at, moving it if it was timed
// differently.
func (t *timers) upsert(w WorkerKey, h uint64, pos uint32, at int64) {
	m := t.ranks[w]
	if m == nil {
		m = make(map[uint64]int32)
		t.ranks[w] = m
	}
	if i, ok := m[h]; ok {
		s := &t.slots[i]
		s.pos = pos
		if s.at != at {
			t.unlink(i)
			s.at = at
			t.link(i)
		}
		return
	}
	var i int32
	if k := len(t.free); k > 0 {
		i = t.free[k-1]
		t.free = t.free[:k-1]
	} else {
		i = int32(len(t.slots))
		t.slots = append(t.slots, tslot{})
	}
	t.slots[i] = tslot{approxEntry: approxEntry{w: w, h: h, pos: pos, at: at}}
	m[h] = i
	t.link(i)
	t.live++
}

// release frees slot i, already unlinked.
func (t *timers) release(i int32) {
	t.slots[i] = tslot{}
	t.free = append(t.free, i)
	t.live--
}

// remove untimes (w, h).
func (t *timers) remove(w WorkerKey, h uint64) {
	m := t.ranks[w]
	i, ok := m[h]
	if !ok {
		return
	}
	t.unlink(i)
	delete(m, h)
	if len(m) == 0 {
		delete(t.ranks, w)
	}
	t.release(i)
}

// bucketEntries appends the entries of bucket k to dst.
func (t *timers) bucketEntries(k int, dst []approxEntry) []approxEntry {
	for i := t.buckets[k].head; i >= 0; i = t.slots[i].next {
		dst = append(dst, t.slots[i].approxEntry)
	}
	return dst
}

// popBucket untimes every entry of the earliest bucket and appends them to
// dst.
func (t *timers) popBucket(dst []approxEntry) []approxEntry {
	b := t.buckets[0]
	for i := b.head; i >= 0; {
		s := t.slots[i]
		dst = append(dst, s.approxEntry)
		m := t.ranks[s.w]
		delete(m, s.h)
		if len(m) == 0 {
			delete(t.ranks, s.w)
		}
		next := s.next
		t.release(i)
		i = next
	}
	t.buckets = slices.Delete(t.buckets, 0, 1)
	return dst
}

// dropRank untimes every entry of w.
func (t *timers) dropRank(w WorkerKey) {
	for _, i := range t.ranks[w] {
		t.unlink(i)
		t.release(i)
	}
	delete(t.ranks, w)
}
