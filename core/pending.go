package core

import (
	"container/list"
	"hash/maphash"
	"runtime"
	"sync"
	"sync/atomic"
	"time"
)

// pendingKey keys a cached selection: a replay with another model or group
// misses and does not consume the entry.
type pendingKey struct{ model, group, id string }

// pendingEntry is what a /select with a selection_id captured for a later
// POST /reservations replay. Immutable once inserted (peek hands out the
// pointer), except elem, which is under its shard's mutex.
type pendingEntry struct {
	key                  pendingKey
	worker               WorkerKey
	seq                  []uint64
	local                []uint64 // set when the partition records bookings
	isl                  int64
	effective            int64
	expectedOutputTokens *uint32
	trackPrefill         bool
	assumeKVReuse        bool
	lora                 string
	// session is the session id of a select its session steered: the
	// replay holds and binds it (hasSession).
	session    string
	hasSession bool

	inserted time.Time
	// gen orders entries inserted at the same instant and tells a
	// replaced entry from its replacement.
	gen   uint64
	bytes int64
	elem  *list.Element // in its shard's order
}

// older reports whether e sorts before f in eviction order: (insert
// instant, generation).
func (e *pendingEntry) older(f *pendingEntry) bool {
	if !e.inserted.Equal(f.inserted) {
		return e.inserted.Before(f.inserted)
	}
	return e.gen < f.gen
}

// pendingCache is the bounded pending-selection cache, with the reference's
// rules (ai-dynamo/dynamo:lib/kv-router/src/services/selection/pending.rs):
// a TTL, an entry cap and a byte budget, evicting oldest first; latest wins
// (a new select of an id replaces its entry with a new generation); a
// replay peeks, books, then removes only the generation it peeked.
//
// It is sharded by selection id, so concurrent selects with ids take
// different locks: no global lock on the selection path. The caps are
// global (atomic totals); an insert that takes a total over a cap evicts
// the globally oldest entries, finding them by comparing the shards'
// oldest entries. While concurrent inserts race, the totals may exceed a
// cap by one entry per racing insert, each of which then evicts until the
// totals are back under it.
//
// Invariant, per shard: order holds exactly the entries of byKey, oldest
// first (by older). entries and bytes are the sums over the shards.
type pendingCache struct {
	ttl        time.Duration
	maxEntries int64
	maxBytes   int64
	seed       maphash.Seed

	entries, bytes atomic.Int64
	gen            atomic.Uint64
	shards         []pendingShard
}

type pendingShard struct {
	mu    sync.Mutex
	byKey map[pendingKey]*pendingEntry
	order list.List // of *pendingEntry
	// pad keeps two shards' mutexes off one cache line pair.
	_ [64]byte
}

// pendingShards returns the shard count: four per P, at least 8, at most
// 64 (eviction scans every shard's oldest entry).
func pendingShards() int { return min(64, max(8, 4*runtime.GOMAXPROCS(0))) }

func newPendingCache(ttl time.Duration, maxEntries int, maxBytes int64) *pendingCache {
	c := &pendingCache{ttl: ttl, maxEntries: int64(maxEntries), maxBytes: maxBytes, seed: maphash.MakeSeed(), shards: make([]pendingShard, pendingShards())}
	for i := range c.shards {
		c.shards[i].byKey = map[pendingKey]*pendingEntry{}
	}
	return c
}

func (c *pendingCache) shard(k pendingKey) *pendingShard {
	return &c.shards[maphash.String(c.seed, k.id)%uint64(len(c.shards))]
}

// entrySize is the reference's approximate size of one entry.
func entrySize(e *pendingEntry) int64 {
	return int64(8*len(e.seq) + 8*len(e.local) + len(e.key.id) + len(e.key.model) + len(e.key.group) + len(e.lora))
}

// insert stores e (latest wins), first sweeping its shard's expired
// entries, then evicting oldest first while over the entry cap or the byte
// budget. An entry larger than the whole budget evicts itself.
func (c *pendingCache) insert(e *pendingEntry, now time.Time) {
	e.inserted = now
	e.bytes = entrySize(e)
	sh := c.shard(e.key)
	sh.mu.Lock()
	c.sweepLocked(sh, now)
	if old, ok := sh.byKey[e.key]; ok {
		c.removeLocked(sh, old)
	}
	e.gen = c.gen.Add(1)
	// Insert in order: the clock is read before the lock, so a racing
	// insert of the same shard may be newer; walk back past it.
	at := sh.order.Back()
	for at != nil && e.older(at.Value.(*pendingEntry)) {
		at = at.Prev()
	}
	if at == nil {
		e.elem = sh.order.PushFront(e)
	} else {
		e.elem = sh.order.InsertAfter(e, at)
	}
	sh.byKey[e.key] = e
	c.entries.Add(1)
	c.bytes.Add(e.bytes)
	sh.mu.Unlock()
	for c.entries.Load() > c.maxEntries || c.bytes.Load() > c.maxBytes {
		if !c.evictOldest() {
			return
		}
	}
}

// evictOldest removes the oldest entry of all shards. It reports false
// when the cache is empty.
func (c *pendingCache) evictOldest() bool {
	for {
		var oldest *pendingEntry
		var from *pendingShard
		for i := range c.shards {
			sh := &c.shards[i]
			sh.mu.Lock()
			if f := sh.order.Front(); f != nil {
				if e := f.Value.(*pendingEntry); oldest == nil || e.older(oldest) {
					oldest, from = e, sh
				}
			}
			sh.mu.Unlock()
		}
		if oldest == nil {
			return false
		}
		from.mu.Lock()
		// It may have been replaced, replayed or evicted meanwhile: only
		// the entry still at the front goes, else look again.
		if f := from.order.Front(); f != nil && f.Value.(*pendingEntry) == oldest {
			c.removeLocked(from, oldest)
			from.mu.Unlock()
			return true
		}
		from.mu.Unlock()
	}
}

// peek returns the live entry for k without removing it; an entry older than
// the TTL is absent.
func (c *pendingCache) peek(k pendingKey, now time.Time) *pendingEntry {
	sh := c.shard(k)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	e, ok := sh.byKey[k]
	if !ok || now.Sub(e.inserted) > c.ttl {
		return nil
	}
	return e
}

// has reports whether k's entry is still generation gen.
func (c *pendingCache) has(k pendingKey, gen uint64) bool {
	sh := c.shard(k)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	e, ok := sh.byKey[k]
	return ok && e.gen == gen
}

// removeGen removes k's entry if it is still generation gen (a newer
// select survives a replay of the older one).
func (c *pendingCache) removeGen(k pendingKey, gen uint64) {
	sh := c.shard(k)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if e, ok := sh.byKey[k]; ok && e.gen == gen {
		c.removeLocked(sh, e)
	}
}

// discard removes k's entry whatever its generation (an explicit booking).
func (c *pendingCache) discard(k pendingKey) {
	sh := c.shard(k)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if e, ok := sh.byKey[k]; ok {
		c.removeLocked(sh, e)
	}
}

// sweep removes every expired entry.
func (c *pendingCache) sweep(now time.Time) {
	for i := range c.shards {
		sh := &c.shards[i]
		sh.mu.Lock()
		c.sweepLocked(sh, now)
		sh.mu.Unlock()
	}
}

func (c *pendingCache) sweepLocked(sh *pendingShard, now time.Time) {
	for f := sh.order.Front(); f != nil; f = sh.order.Front() {
		e := f.Value.(*pendingEntry)
		if now.Sub(e.inserted) <= c.ttl {
			return
		}
		c.removeLocked(sh, e)
	}
}

func (c *pendingCache) removeLocked(sh *pendingShard, e *pendingEntry) {
	sh.order.Remove(e.elem)
	delete(sh.byKey, e.key)
	c.entries.Add(-1)
	c.bytes.Add(-e.bytes)
}

func (c *pendingCache) size() (int, int64) {
	return int(c.entries.Load()), c.bytes.Load()
}
