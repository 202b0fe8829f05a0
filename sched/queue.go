package sched

import (
	"container/heap"
	"fmt"

	"github.com/kvselect/kvselect/radix"
)

// PolicyQueue is the router queue's order: per policy class a heap of
// waiting requests that may go to any worker, and per pinned worker rank a
// lane of its own (a busy worker blocks only its lane); classes share
// dispatches by deficit round robin with each request's scheduling cost
// (Dynamo's PolicyQueue, ai-dynamo/dynamo:
// lib/kv-router/src/scheduling/policy_queue.rs). It is a plain structure:
// not safe for concurrent use, no clock; the host serializes it and owns
// the waiting.
//
// Order within a lane (higher first): strict_priority, then the policy
// score, then the earlier enqueue:
//
//	FCFS  max(0, priority_jump) − arrival_secs
//	LCFS  max(0, priority_jump) + arrival_secs
//	WSPT  (1 + max(0, priority_jump)) / scheduling_cost_tokens
//
// where arrival_secs is the enqueue instant relative to the host's epoch
// and scheduling_cost_tokens = max(1, isl − cached).
type PolicyQueue[T any] struct {
	classes []classQueue[T]
	cursor  int
	carry   int // class whose leftover credit is spent first; -1 none
	nextSeq uint64
	pending int
	cands   []dispatch
}

type classQueue[T any] struct {
	cfg     *PolicyClass
	shared  entryHeap[T]
	lanes   map[radix.WorkerKey]*entryHeap[T]
	stats   QueueStats
	deficit int64
}

// QueueStats are one class's waiting requests and their tokens.
type QueueStats struct {
	Requests, RawISLTokens, CachedTokens int64
}

// QueueCost is what one waiting request counts against its class's caps
// and costs in the round robin.
type QueueCost struct {
	RawISL, Cached, Uncached int64
	// Sched is max(1, uncached): WSPT's denominator and the DRR cost.
	Sched int64
}

// NewQueueCost is the cost of a request of isl tokens with cached of them
// cached on its best worker (cached is clamped to isl).
func NewQueueCost(isl, cached int64) QueueCost {
	cached = min(max(cached, 0), isl)
	return QueueCost{RawISL: isl, Cached: cached, Uncached: isl - cached, Sched: max(1, isl-cached)}
}

// QueueEntry is one waiting request. Its fields are the queue's; the
// host keeps the pointer to Remove it.
type QueueEntry[T any] struct {
	Payload T
	// Class is the entry's class index.
	Class  int
	strict uint32
	score  float64
	seq    uint64
	cost   QueueCost
	pinned bool
	worker radix.WorkerKey
	index  int // in its heap; -1 once out
}

// Cost returns the entry's cost.
func (e *QueueEntry[T]) Cost() QueueCost { return e.cost }

// Pinned returns the worker rank of a pinned entry's lane.
func (e *QueueEntry[T]) Pinned() (radix.WorkerKey, bool) { return e.worker, e.pinned }

// higher reports whether a pops before b.
func (a *QueueEntry[T]) higher(b *QueueEntry[T]) bool {
	if a.strict != b.strict {
		return a.strict > b.strict
	}
	if a.score != b.score {
		return a.score > b.score
	}
	return a.seq < b.seq
}

// QueueLimitKind names a class cap.
type QueueLimitKind uint8

const (
	LimitRequests QueueLimitKind = iota
	LimitRawISLTokens
	LimitCachedTokens
	NumQueueLimitKinds
)

var limitNames = [NumQueueLimitKinds]string{"requests", "raw_isl_tokens", "cached_tokens"}

// String is the limit_kind of a rejection.
func (k QueueLimitKind) String() string { return limitNames[k] }

// QueueRejection is a refused enqueue: the class's usage was already at a
// cap (the request that first crosses a cap is accepted).
type QueueRejection struct {
	Class   string
	Kind    QueueLimitKind
	Current int64
	Limit   int64
}

func (r *QueueRejection) Error() string {
	return fmt.Sprintf("router policy class %q queue %s limit reached (current=%d, limit=%d)", r.Class, r.Kind, r.Current, r.Limit)
}

// Unwrap makes a rejection match ErrQueueRejected.
func (r *QueueRejection) Unwrap() error { return ErrQueueRejected }

// NewPolicyQueue returns an empty queue over p's classes.
func NewPolicyQueue[T any](p *PolicyProfile) *PolicyQueue[T] {
	q := &PolicyQueue[T]{carry: -1, cands: make([]dispatch, len(p.Classes))}
	q.classes = make([]classQueue[T], len(p.Classes))
	for i := range p.Classes {
		q.classes[i] = classQueue[T]{cfg: &p.Classes[i], lanes: map[radix.WorkerKey]*entryHeap[T]{}}
	}
	return q
}

// Len is the number of waiting requests.
func (q *PolicyQueue[T]) Len() int { return q.pending }

// Stats returns class c's usage.
func (q *PolicyQueue[T]) Stats(c int) QueueStats { return q.classes[c].stats }

// Backlog reports whether class c has a waiting request.
func (q *PolicyQueue[T]) Backlog(c int) bool { return q.classes[c].stats.Requests > 0 }

// Enqueue adds a request of class c: workers is the partition's number of
// registered workers (the caps scale with it), arrivalSecs its enqueue
// instant, pin its worker rank when pinned (nil: any worker). It fails
// with a *QueueRejection when the class is at a cap, before adding.
func (q *PolicyQueue[T]) Enqueue(c, workers int, cost QueueCost, arrivalSecs, priorityJump float64, strict uint32, pin *radix.WorkerKey, payload T) (*QueueEntry[T], error) {
	cq := &q.classes[c]
	if r := cq.rejection(workers); r != nil {
		return nil, r
	}
	jump := max(0, priorityJump)
	var score float64
	switch cq.cfg.Policy {
	case FCFS:
		score = jump - max(0, arrivalSecs)
	case LCFS:
		score = jump + max(0, arrivalSecs)
	case WSPT:
		score = (1 + jump) / float64(cost.Sched)
	}
	e := &QueueEntry[T]{Payload: payload, Class: c, strict: strict, score: score, seq: q.nextSeq, cost: cost}
	q.nextSeq++
	h := &cq.shared
	if pin != nil {
		e.pinned, e.worker = true, *pin
		if h = cq.lanes[*pin]; h == nil {
			h = &entryHeap[T]{}
			cq.lanes[*pin] = h
		}
	}
	heap.Push(h, e)
	cq.stats.add(cost, 1)
	q.pending++
	return e, nil
}

// rejection checks the caps against the class's usage before the add.
func (cq *classQueue[T]) rejection(workers int) *QueueRejection {
	for _, l := range [...]struct {
		kind    QueueLimitKind
		cur     int64
		perWork *int64
	}{
		{LimitRequests, cq.stats.Requests, cq.cfg.RequestLimitPerWorker},
		{LimitRawISLTokens, cq.stats.RawISLTokens, cq.cfg.RawISLLimitPerWorker},
		{LimitCachedTokens, cq.stats.CachedTokens, cq.cfg.CachedTokLimitPerWorker},
	} {
		if l.perWork == nil {
			continue
		}
		limit := satMul(*l.perWork, int64(workers))
		if l.cur >= limit {
			return &QueueRejection{Class: cq.cfg.Name, Kind: l.kind, Current: l.cur, Limit: limit}
		}
	}
	return nil
}

func satMul(a, b int64) int64 {
	if a != 0 && b > (1<<63-1)/a {
		return 1<<63 - 1
	}
	return a * b
}

func (s *QueueStats) add(c QueueCost, sign int64) {
	s.Requests += sign
	s.RawISLTokens += sign * c.RawISL
	s.CachedTokens += sign * c.Cached
}

// Remove takes a waiting entry out (its caller went away). It reports
// false when e already left the queue (popped or removed).
func (q *PolicyQueue[T]) Remove(e *QueueEntry[T]) bool {
	if e.index < 0 {
		return false
	}
	cq := &q.classes[e.Class]
	h := &cq.shared
	if e.pinned {
		h = cq.lanes[e.worker]
	}
	heap.Remove(h, e.index)
	if e.pinned && h.Len() == 0 {
		delete(cq.lanes, e.worker)
	}
	q.left(cq, e)
	return true
}

func (q *PolicyQueue[T]) left(cq *classQueue[T], e *QueueEntry[T]) {
	cq.stats.add(e.cost, -1)
	q.pending--
	if cq.stats.Requests == 0 {
		cq.deficit = 0
	}
}

// dispatch is a class's next dispatchable head: the shared heap's or a
// pinned lane's.
type dispatch struct {
	ok     bool
	lane   radix.WorkerKey
	pinned bool
	cost   int64
}

// next finds class c's best dispatchable head: the shared heap's top when
// dispatchable, or a dispatchable pinned lane's top when it pops first.
// A blocked shared top blocks the shared heap (no skipping); a blocked
// lane blocks only itself.
func (q *PolicyQueue[T]) next(c int, ok func(*QueueEntry[T]) bool) dispatch {
	cq := &q.classes[c]
	var best *QueueEntry[T]
	var d dispatch
	if cq.shared.Len() > 0 && ok(cq.shared[0]) {
		best = cq.shared[0]
		d = dispatch{ok: true, cost: best.cost.Sched}
	}
	for w, h := range cq.lanes {
		// Enqueue sequences are unique: no two heads tie.
		top := (*h)[0]
		if (best == nil || top.higher(best)) && ok(top) {
			best = top
			d = dispatch{ok: true, lane: w, pinned: true, cost: top.cost.Sched}
		}
	}
	return d
}

// Pop removes and returns the next request to dispatch, or nil when no
// class has a dispatchable head. ok says whether an entry may be
// dispatched now (its eligible workers are not all busy, by its class's
// busy line). Classes take turns by deficit round robin: a class visited
// with a dispatchable head gains its quantum and dispatches while its
// credit covers the head's cost; when no head is affordable, the minimum
// number of whole rounds is granted at once.
func (q *PolicyQueue[T]) Pop(ok func(*QueueEntry[T]) bool) *QueueEntry[T] {
	if q.pending == 0 {
		q.carry = -1
		return nil
	}
	n := len(q.classes)
	clear(q.cands)
	carried := q.carry
	q.carry = -1
	if carried >= 0 {
		cq := &q.classes[carried]
		d := q.next(carried, ok)
		if d.ok && d.cost <= cq.deficit {
			return q.take(carried, d)
		}
		q.cands[carried] = d
		if cq.stats.Requests == 0 {
			cq.deficit = 0
		}
	}
	for off := range n {
		c := (q.cursor + off) % n
		cq := &q.classes[c]
		d := q.cands[c]
		if c != carried {
			d = q.next(c, ok)
		}
		if !d.ok {
			if cq.stats.Requests == 0 {
				cq.deficit = 0
			}
			continue
		}
		q.cands[c] = d
		if d.cost <= cq.deficit {
			return q.take(c, d)
		}
		cq.deficit = satAdd(cq.deficit, cq.cfg.Quantum)
		if d.cost <= cq.deficit {
			return q.take(c, d)
		}
	}
	rounds := int64(-1)
	for c, d := range q.cands {
		if !d.ok {
			continue
		}
		cq := &q.classes[c]
		missing := max(0, d.cost-cq.deficit)
		r := (missing + cq.cfg.Quantum - 1) / cq.cfg.Quantum
		if rounds < 0 || r < rounds {
			rounds = r
		}
	}
	if rounds < 0 {
		return nil
	}
	for c, d := range q.cands {
		if d.ok {
			cq := &q.classes[c]
			cq.deficit = satAdd(cq.deficit, satMul(cq.cfg.Quantum, rounds))
		}
	}
	for off := range n {
		c := (q.cursor + off) % n
		if d := q.cands[c]; d.ok && d.cost <= q.classes[c].deficit {
			return q.take(c, d)
		}
	}
	return nil
}

func satAdd(a, b int64) int64 {
	if a > 1<<63-1-b {
		return 1<<63 - 1
	}
	return a + b
}

// take pops class c's head d.
func (q *PolicyQueue[T]) take(c int, d dispatch) *QueueEntry[T] {
	q.cursor = (c + 1) % len(q.classes)
	cq := &q.classes[c]
	h := &cq.shared
	if d.pinned {
		h = cq.lanes[d.lane]
	}
	e := heap.Pop(h).(*QueueEntry[T])
	if d.pinned && h.Len() == 0 {
		delete(cq.lanes, d.lane)
	}
	cq.deficit = max(0, cq.deficit-e.cost.Sched)
	q.left(cq, e)
	if cq.stats.Requests > 0 && cq.deficit > 0 {
		q.carry = c
	}
	return e
}

// entryHeap is a max-heap of entries by (strict, score, earlier seq),
// tracking each entry's index for Remove.
type entryHeap[T any] []*QueueEntry[T]

func (h entryHeap[T]) Len() int           { return len(h) }
func (h entryHeap[T]) Less(i, j int) bool { return h[i].higher(h[j]) }
func (h entryHeap[T]) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].index, h[j].index = i, j
}
func (h *entryHeap[T]) Push(x any) {
	e := x.(*QueueEntry[T])
	e.index = len(*h)
	*h = append(*h, e)
}
func (h *entryHeap[T]) Pop() any {
	old := *h
	e := old[len(old)-1]
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	e.index = -1
	return e
}
