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
	if len(got) != 3 || got[0] != 0 || got[2] != 2 || q.Len() != 0 {
		t.Fatalf("took %v, %d left", got, q.Len())
	}
	if !q.Put(7) || len(q.Ready()) != 1 {
		t.Fatal("a put into the emptied queue left no token")
	}
	again := q.Take(got)
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
