package mpsc

import "sync"

// Queue holds at most its limit of items, in the order Put queued them.
// Put is safe from any goroutine; Ready and Take are for the one reader.
// Its memory is the slice of queued items and each slice the reader holds
// from a Take, each at most limit items, grown as bursts need.
type Queue[T any] struct {
	limit int
	ready chan struct{} // holds a token once items goes from empty to not

	mu    sync.Mutex
	items []T // guarded by mu
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
	if len(q.items) >= q.limit {
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

// Take returns every queued item, in order, in the slice the previous
// Take returned (pass it back; nil the first time), which the queue then
// no longer holds. The items of the slice passed in are cleared.
func (q *Queue[T]) Take(last []T) []T {
	clear(last)
	last = last[:0]
	q.mu.Lock()
	q.items, last = last, q.items
	q.mu.Unlock()
	return last
}

// Len is the number of items queued.
func (q *Queue[T]) Len() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return len(q.items)
}

// Limit is the queue's bound.
func (q *Queue[T]) Limit() int { return q.limit }
