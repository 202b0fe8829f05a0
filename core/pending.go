package core

import (
	"container/list"
	"sync"
	"time"

	"github.com/kvselect/kvselect/radix"
)

// pendingKey keys a cached selection: a replay with another model or group
// misses and does not consume the entry.
type pendingKey struct{ model, group, id string }

// pendingEntry is what a /select with a selection_id captured for a later
// POST /reservations replay. Immutable once inserted (take hands out the
// pointer), except taken, which is under pendingCache.mu.
type pendingEntry struct {
	key                  pendingKey
	worker               radix.WorkerKey
	seq                  []uint64
	isl                  int64
	effective            int64
	expectedOutputTokens *uint32
	trackPrefill         bool
	assumeKVReuse        bool
	lora                 string

	inserted time.Time
	gen      uint64
	bytes    int64
	elem     *list.Element // in pendingCache.order
	// taken: a replay is booking this entry (between take and removeGen or
	// untake). Under pendingCache.mu.
	taken bool
}

// pendingCache is the bounded pending-selection cache (spec 3.4): TTL,
// entry cap and byte budget, evicting oldest first; latest wins; a replay
// takes the entry (Dynamo's peek, exclusive while the replay books), books,
// then removes only the generation it took, or untakes it on failure.
//
// Invariant: order holds exactly the entries of byKey, oldest at the front
// (insert instants are non-decreasing when the clock is), and bytes is the
// sum of their sizes.
type pendingCache struct {
	ttl        time.Duration
	maxEntries int
	maxBytes   int64

	mu    sync.Mutex
	byKey map[pendingKey]*pendingEntry
	order list.List // of *pendingEntry
	bytes int64
	gen   uint64
}

func newPendingCache(ttl time.Duration, maxEntries int, maxBytes int64) *pendingCache {
	return &pendingCache{ttl: ttl, maxEntries: maxEntries, maxBytes: maxBytes, byKey: map[pendingKey]*pendingEntry{}}
}

// entrySize is the reference's approximate size of one entry.
func entrySize(e *pendingEntry) int64 {
	return int64(8*len(e.seq) + len(e.key.id) + len(e.key.model) + len(e.key.group) + len(e.lora))
}

// insert stores e (latest wins), first sweeping expired entries from the
// front, then evicting oldest first while over the entry cap or the byte
// budget. An entry larger than the whole budget evicts itself.
func (c *pendingCache) insert(e *pendingEntry, now time.Time) {
	e.inserted = now
	e.bytes = entrySize(e)
	c.mu.Lock()
	defer c.mu.Unlock()
	c.sweepLocked(now)
	if old, ok := c.byKey[e.key]; ok {
		c.removeLocked(old)
	}
	c.gen++
	e.gen = c.gen
	e.elem = c.order.PushBack(e)
	c.byKey[e.key] = e
	c.bytes += e.bytes
	for c.order.Len() > c.maxEntries || c.bytes > c.maxBytes {
		c.removeLocked(c.order.Front().Value.(*pendingEntry))
	}
}

// take returns the live entry for k without removing it, marked taken so
// that no other replay books it meanwhile (busy reports such a replay); an
// entry older than the TTL is absent. The taker ends with removeGen (the
// booking landed) or untake (it failed: the entry is usable again).
func (c *pendingCache) take(k pendingKey, now time.Time) (e *pendingEntry, busy bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.byKey[k]
	if !ok || now.Sub(e.inserted) > c.ttl {
		return nil, false
	}
	if e.taken {
		return nil, true
	}
	e.taken = true
	return e, false
}

// untake makes k's entry usable again after a failed booking, if it is
// still generation gen.
func (c *pendingCache) untake(k pendingKey, gen uint64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if e, ok := c.byKey[k]; ok && e.gen == gen {
		e.taken = false
	}
}

// removeGen removes k's entry if it is still generation gen (a newer
// select survives a replay of the older one).
func (c *pendingCache) removeGen(k pendingKey, gen uint64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if e, ok := c.byKey[k]; ok && e.gen == gen {
		c.removeLocked(e)
	}
}

// discard removes k's entry whatever its generation (an explicit booking).
func (c *pendingCache) discard(k pendingKey) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if e, ok := c.byKey[k]; ok {
		c.removeLocked(e)
	}
}

func (c *pendingCache) sweep(now time.Time) {
	c.mu.Lock()
	c.sweepLocked(now)
	c.mu.Unlock()
}

func (c *pendingCache) sweepLocked(now time.Time) {
	for f := c.order.Front(); f != nil; f = c.order.Front() {
		e := f.Value.(*pendingEntry)
		if now.Sub(e.inserted) <= c.ttl {
			return
		}
		c.removeLocked(e)
	}
}

func (c *pendingCache) removeLocked(e *pendingEntry) {
	c.order.Remove(e.elem)
	delete(c.byKey, e.key)
	c.bytes -= e.bytes
}

func (c *pendingCache) size() (int, int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.byKey), c.bytes
}
