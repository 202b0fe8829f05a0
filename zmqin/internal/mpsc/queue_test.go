package mpsc

import (
	"sync"
	"testing"
)

// TestQueueBoundAndOrder: Put refuses past the limit, Take returns the
// items in order and empties the queue, and a Put into an empty queue
// leaves one token on Ready.
func TestQueueBoundAndOrder(t *testing.T) {
	q := New[int](3)
	for i := range 3 {
		if !q.Put(i) {
			t.Fatalf("put %d refused under the limit", i)
		}
	}
	if q.Put(3) || q.Len() != 3 || q.Limit() != 3 {
		t.Fatalf("put past the limit taken, or len %d", q.Len())
	}
	if len(q.Ready()) != 1 {
		t.Fatalf("%d tokens, want 1", len(q.Ready()))
	}
	<-q.Ready()
	got := q.Take(nil)
	if len(got) != 3 || got[0] != 0 || got[2] != 2 || q.Len() != 3 || q.Queued() != 0 {
		t.Fatalf("took %v, %d counted", got, q.Len())
	}
	if q.Put(3) {
		t.Fatal("a put taken while the taken items are held")
	}
	q.Release(3)
	if q.Len() != 0 {
		t.Fatalf("%d counted after the release", q.Len())
	}
	if !q.Put(7) || len(q.Ready()) != 1 {
		t.Fatal("a put into the emptied queue left no token")
	}
	again := q.Take(got)
	q.Release(len(again))
	if len(again) != 1 || again[0] != 7 {
		t.Fatalf("second take %v", again)
	}
	if got := q.Take(again); len(got) != 0 {
		t.Fatalf("take of an empty queue: %v", got)
	}
}

// TestQueueManyWriters: with writers racing the reader, every item is
// taken exactly once, each writer's in its order, and the reader never
// misses an item it was woken for (run with -race).
func TestQueueManyWriters(t *testing.T) {
	const writers, each = 8, 5000
	q := New[[2]int](writers * each)
	var wg sync.WaitGroup
	for w := range writers {
		wg.Go(func() {
			for i := range each {
				if !q.Put([2]int{w, i}) {
					t.Errorf("writer %d: put %d refused", w, i)
					return
				}
			}
		})
	}
	next := make([]int, writers)
	seen := 0
	var batch [][2]int
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	for seen < writers*each {
		select {
		case <-q.Ready():
		case <-done:
		}
		batch = q.Take(batch)
		q.Release(len(batch))
		for _, it := range batch {
			if it[1] != next[it[0]] {
				t.Fatalf("writer %d: item %d after %d", it[0], it[1], next[it[0]]-1)
			}
			next[it[0]]++
			seen++
		}
	}
	if q.Len() != 0 {
		t.Fatalf("%d left", q.Len())
	}
}

// TestQueueDropsBurstSlices: a slice of a burst passed back mostly unused
// is not kept as the queue's buffer.
func TestQueueDropsBurstSlices(t *testing.T) {
	q := New[int](100_000)
	for i := range 50_000 {
		q.Put(i)
	}
	big := q.Take(nil)
	q.Release(len(big))
	q.Put(1)
	small := q.Take(big[:1]) // mostly unused: dropped
	q.Release(len(small))
	q.Put(2)
	q.mu.Lock()
	c := cap(q.items)
	q.mu.Unlock()
	if c > keepCap {
		t.Fatalf("the queue kept a %d-item buffer after the burst", c)
	}
}
