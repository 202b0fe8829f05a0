package core

import (
	"fmt"
	"sync"
	"testing"
	"time"
)

func pendingE(id string, seq int) *pendingEntry {
	return &pendingEntry{key: pendingKey{"m", "g", id}, seq: make([]uint64, seq)}
}

// checkPending recounts the shards against the totals and each shard's
// order against its map and the eviction order.
func checkPending(t *testing.T, c *pendingCache) (ids map[string]bool) {
	t.Helper()
	ids = map[string]bool{}
	var n, b int64
	for i := range c.shards {
		sh := &c.shards[i]
		sh.mu.Lock()
		if sh.order.Len() != len(sh.byKey) {
			t.Errorf("shard %d: %d in order, %d in map", i, sh.order.Len(), len(sh.byKey))
		}
		var prev *pendingEntry
		for el := sh.order.Front(); el != nil; el = el.Next() {
			e := el.Value.(*pendingEntry)
			if sh.byKey[e.key] != e {
				t.Errorf("shard %d: %s in order but not in the map", i, e.key.id)
			}
			if prev != nil && e.older(prev) {
				t.Errorf("shard %d: %s before %s out of order", i, prev.key.id, e.key.id)
			}
			prev = e
			n++
			b += e.bytes
			ids[e.key.id] = true
		}
		sh.mu.Unlock()
	}
	if en, eb := c.size(); int64(en) != n || eb != b {
		t.Errorf("totals %d entries %d bytes, recount %d %d", en, eb, n, b)
	}
	return ids
}

// TestPendingEvictsGloballyOldest: entries spread over every shard; past
// the entry cap the survivors are exactly the newest, whatever shard the
// oldest sat in.
func TestPendingEvictsGloballyOldest(t *testing.T) {
	c := newPendingCache(time.Hour, 16, 1<<30)
	t0 := time.Unix(1_700_000_000, 0)
	for i := range 200 {
		c.insert(pendingE(fmt.Sprint("s", i), 1), t0.Add(time.Duration(i)*time.Millisecond))
	}
	ids := checkPending(t, c)
	if len(ids) != 16 {
		t.Fatalf("%d entries, want 16", len(ids))
	}
	for i := 184; i < 200; i++ {
		if !ids[fmt.Sprint("s", i)] {
			t.Fatalf("s%d (one of the 16 newest) was evicted; kept %v", i, ids)
		}
	}
}

// TestPendingCapsUnderConcurrency: concurrent inserts, replays and
// discards on many shards end within both caps with consistent totals.
func TestPendingCapsUnderConcurrency(t *testing.T) {
	c := newPendingCache(time.Hour, 64, 64*(8*4+8))
	t0 := time.Unix(1_700_000_000, 0)
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 2000 {
				id := fmt.Sprintf("g%d-%d", g, i%300)
				now := t0.Add(time.Duration(i) * time.Microsecond)
				switch i % 5 {
				case 3:
					if e := c.peek(pendingKey{"m", "g", id}, now); e != nil {
						c.removeGen(e.key, e.gen)
					}
				case 4:
					c.discard(pendingKey{"m", "g", id})
				default:
					c.insert(pendingE(id, 4), now)
				}
			}
		}()
	}
	wg.Wait()
	checkPending(t, c)
	if n, b := c.size(); n > 64 || b > c.maxBytes {
		t.Fatalf("%d entries, %d bytes: over the caps 64 and %d", n, b, c.maxBytes)
	}
}
