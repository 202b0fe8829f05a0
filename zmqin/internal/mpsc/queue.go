package mpsc

import "sync"

// Queue holds at most its limit of items not yet done with: those queued
// and those the reader took and has not released. Put is safe from any
// goroutine; Ready, Take and Release are for the one reader. Its memory is
// the slice of queued items and each slice the reader holds from a Take,
// together at most limit items in use; a slice passed back to Take that
// is mostly unused after a burst is dropped, not kept.
type Queue[T any] struct {
	limit int
	ready chan struct{} // holds a token once items goes from empty to not

	mu    sync.Mutex
	items []T // guarded by mu
	held  int // taken and not released; guarded by mu
}

// New returns an empty queue of at most limit items (limit > 0).
func New[T any](limit int) *Queue[T] {
	if limit <= 0 {
		panic("BUG: mpsc: a queue's limit must be positive")
	}
	return &Queue[T]{limit: limit, ready: make(chan struct{}, 1)}
}

// Put queues v, or reports false when the queue holds its limit.
func (q *Queue[T]) Put(v T) bool {
	q.mu.Lock()
	if len(q.items)+q.held >= q.limit {
		q.mu.Unlock()
		return false
	}
	q.items = append(q.items, v)
	first := len(q.items) == 1
	q.mu.Unlock()
	if first {
		select {
		case q.ready <- struct{}{}:
		default: // a token is pending already
		}
	}
	return true
}

// Ready receives after a Put into an empty queue. A receive promises
// nothing: a Take since then may have taken the items (it returns none).
// Every item is taken by a Take after some receive.
func (q *Queue[T]) Ready() <-chan struct{} { return q.ready }

// keepCap is the capacity up to which a slice passed back to Take is
// always reused; a larger one is reused only while a quarter of it was in
// use, so that one burst does not pin its slices for good.
const keepCap = 1024

// Take returns every queued item, in order, and counts them as held until
// Release. Pass in the slice the previous Take returned once done with
// its items (nil the first time): the queue reuses it, cleared.
func (q *Queue[T]) Take(last []T) []T {
	if cap(last) > keepCap && len(last) < cap(last)/4 {
		last = nil
	} else {
		clear(last)
		last = last[:0]
	}
	q.mu.Lock()
	q.items, last = last, q.items
	q.held += len(last)
	q.mu.Unlock()
	return last
}

// Release ends the hold of n taken items (the reader is done with them).
func (q *Queue[T]) Release(n int) {
	q.mu.Lock()
	q.held -= n
	if q.held < 0 {
		q.mu.Unlock()
		panic("BUG: mpsc: released more than taken")
	}
	q.mu.Unlock()
}

// Len is the number of items queued or taken and not released.
func (q *Queue[T]) Len() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return len(q.items) + q.held
}

// Queued is the number of items queued and not yet taken.
func (q *Queue[T]) Queued() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return len(q.items)
}

// Limit is the queue's bound.
func (q *Queue[T]) Limit() int { return q.limit }
