package peers

// lru is a bounded map from a key to a bit mask, ordered by last write:
// put moves its entry to the head, get leaves the order alone, and an
// insertion beyond capacity drops the tail (the least recently written).
// It is the store under AIBrix's prefix table (lrustore.LRUStore) and
// llm-d's per-pod block LRUs (hashicorp/golang-lru), which both have
// these semantics.
//
// Representation: entries live in slots 1..len(e)-1; slot 0 is the list's
// sentinel; next runs from the head (most recent) to the tail.
// Invariant: idx maps e[s].key to s for every slot s in the list, and
// len(idx) <= capacity.
type lru struct {
	capacity int
	idx      map[uint64]int32
	e        []lruEntry
	free     []int32
	// onEvict, if set, is called for every entry dropped for capacity.
	onEvict func(key, mask uint64)
}

type lruEntry struct {
	key, mask  uint64
	at         float64 // time of the entry's last put
	prev, next int32
}

func newLRU(capacity int) *lru {
	return &lru{capacity: capacity, idx: make(map[uint64]int32), e: make([]lruEntry, 1, min(capacity, 1<<16)+1)}
}

func (l *lru) len() int { return len(l.idx) }

// get returns key's mask, and whether key is present.
func (l *lru) get(key uint64) (uint64, bool) {
	s, ok := l.idx[key]
	if !ok {
		return 0, false
	}
	return l.e[s].mask, true
}

func (l *lru) unlink(s int32) {
	p, n := l.e[s].prev, l.e[s].next
	l.e[p].next = n
	l.e[n].prev = p
}

func (l *lru) pushHead(s int32) {
	h := l.e[0].next
	l.e[s].prev, l.e[s].next = 0, h
	l.e[h].prev = s
	l.e[0].next = s
}

// put ORs bits into key's mask (a new entry starts at 0), stamps it with
// now and moves it to the head; a new entry beyond capacity evicts the
// tail.
func (l *lru) put(key, bits uint64, now float64) {
	if s, ok := l.idx[key]; ok {
		l.e[s].mask |= bits
		l.e[s].at = now
		if l.e[0].next != s {
			l.unlink(s)
			l.pushHead(s)
		}
		return
	}
	var s int32
	if n := len(l.free); n > 0 {
		s, l.free = l.free[n-1], l.free[:n-1]
	} else {
		s = int32(len(l.e))
		l.e = append(l.e, lruEntry{})
	}
	l.idx[key] = s
	l.e[s].key, l.e[s].mask, l.e[s].at = key, bits, now
	l.pushHead(s)
	if len(l.idx) > l.capacity {
		t := l.e[0].prev
		k, m := l.e[t].key, l.e[t].mask
		l.drop(t)
		if l.onEvict != nil {
			l.onEvict(k, m)
		}
	}
}

func (l *lru) drop(s int32) {
	l.unlink(s)
	delete(l.idx, l.e[s].key)
	l.free = append(l.free, s)
}

// expire drops every entry last written before cutoff. Entries are in
// write order, so they leave from the tail.
func (l *lru) expire(cutoff float64) {
	for t := l.e[0].prev; t != 0 && l.e[t].at < cutoff; t = l.e[0].prev {
		l.drop(t)
	}
}
