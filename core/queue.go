package core

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/kvselect/kvselect/sched"
)

// The router queue (Dynamo's SchedulerQueueActor and PolicyQueue,
// ai-dynamo/dynamo:lib/kv-router/src/scheduling/queue.rs and
// policy_queue.rs), without an actor: selections run on their callers'
// goroutines, and a selection that must wait parks on a channel of its
// own. Nothing spins and no lock is held while waiting.
//
//  1. Decision. After its candidates are filled, a non-advisory selection
//     of a partition whose profile queues picks its class (the requested
//     policy class, then its uncached tokens) and waits when the class has
//     a backlog or every eligible rank is busy (sched.PolicyClass.
//     ShouldQueue). A pinned request looks at its own rank.
//  2. Enqueue under the queue's mutex: a class at a cap refuses it (a
//     *sched.QueueRejection, class ErrOverloaded, whose host answer
//     carries its details).
//  3. Wake-ups: a prefill completion, a release (free, expiry, worker
//     removal, a peer's free), a catalog change of the partition and the
//     periodic Sweep call kick: under the mutex, if no popped request is
//     still selecting, the best dispatchable head is popped (its eligible
//     ranks are not all busy, by current loads) and its channel closed.
//     One dispatch at a time: the popped request selects and books with
//     the loads the previous booking left, then calls done, which pops the
//     next. With queueing off a partition has no queue, and the lifecycle
//     path pays one nil check; with it on and nothing waiting, one atomic
//     load.
//  4. The woken request rebuilds its candidates from the current snapshot
//     and loads; if it waited at least Config.OverlapRefreshAfter, it
//     matches its prompt in the index again (the dequeue-time overlap
//     refresh), so the response reports the overlap it was booked with.
//  5. Cancellation: when the caller's context ends while waiting, the
//     request leaves the queue (or, popped meanwhile, hands the dispatch
//     on) and fails with errCancelled; nothing was booked.

// DefaultOverlapRefreshAfter is the reference's default overlap refresh
// interval: a request that waited this long matches its prompt again.
const DefaultOverlapRefreshAfter = 10 * time.Second

// routerQueue is one partition's queue.
type routerQueue struct {
	profile *sched.PolicyProfile
	epoch   time.Time // arrival offsets count from here
	st      *queueCounters
	// waiting mirrors q.Len() for the lock-free check of kick.
	waiting atomic.Int64
	// onEnqueue, when set (tests only), runs after a request enqueued.
	onEnqueue func()
	// rejected[c][k] counts class c's enqueues refused at limit kind k
	// (the service-wide counts are st.rejected).
	rejected [][sched.NumQueueLimitKinds]atomic.Uint64

	mu struct {
		sync.Mutex
		q *sched.PolicyQueue[*waiter]
		// dispatching: a popped request has not called done yet.
		dispatching bool
	}
}

// waiter is one parked selection: what the busy check of its entry reads
// (the loads and capacities of its eligible ranks, captured at enqueue)
// and the channel the pop closes.
type waiter struct {
	ready chan struct{}
	class *sched.PolicyClass
	loads []*sched.WorkerLoad
	caps  []int64
}

// queueCounters are the queues' counters (Service-wide).
type queueCounters struct {
	enqueued, dispatched, cancelled atomic.Uint64
	rejected                        [sched.NumQueueLimitKinds]atomic.Uint64
	waitNanos                       atomic.Uint64
	waitBuckets                     [len(QueueWaitBounds) + 1]atomic.Uint64
	refreshed                       atomic.Uint64
}

// QueueWaitBounds are the upper bounds of the queue wait histogram
// (Stats.QueueWaitBuckets; the last bucket is +Inf).
var QueueWaitBounds = [...]time.Duration{time.Millisecond, 10 * time.Millisecond, 100 * time.Millisecond, time.Second, 10 * time.Second, 60 * time.Second}

func (c *queueCounters) observeWait(d time.Duration) {
	c.waitNanos.Add(uint64(max(d, 0)))
	i := 0
	for i < len(QueueWaitBounds) && d > QueueWaitBounds[i] {
		i++
	}
	c.waitBuckets[i].Add(1)
}

func newRouterQueue(p *sched.PolicyProfile, now time.Time, st *queueCounters) *routerQueue {
	q := &routerQueue{profile: p, epoch: now, st: st, rejected: make([][sched.NumQueueLimitKinds]atomic.Uint64, len(p.Classes))}
	q.mu.q = sched.NewPolicyQueue[*waiter](p)
	return q
}

// dispatchable reports whether an entry's eligible ranks are not all busy
// (by its class's line and the current loads). A retired rank counts as
// not busy: its request is dispatched and selects from the current
// workers.
func dispatchable(e *sched.QueueEntry[*waiter]) bool {
	w := e.Payload
	busy := 0
	for i, wl := range w.loads {
		if !wl.Retired() && w.class.WorkerBusy(wl.Loads().PrefillTokens, w.caps[i]) {
			busy++
		}
	}
	return !w.class.PoolBusy(busy, len(w.loads))
}

// kick pops the next dispatchable request, unless one is still selecting
// or nothing waits.
func (q *routerQueue) kick() {
	if q.waiting.Load() == 0 {
		return
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.mu.dispatching {
		return
	}
	if e := q.mu.q.Pop(dispatchable); e != nil {
		q.mu.dispatching = true
		q.waiting.Add(-1)
		close(e.Payload.ready)
	}
}

// done ends a popped request's turn and pops the next.
func (q *routerQueue) done() {
	q.mu.Lock()
	q.mu.dispatching = false
	q.mu.Unlock()
	q.kick()
}

// kick wakes p's queue, if it has one.
func (p *partition) kick() {
	if q := p.queue; q != nil {
		q.kick()
	}
}

// wait parks a selection of class c until it is popped (nil: the caller
// selects, then must call q.done) or ctx ends (errCancelled). A class at a
// cap refuses it at once (a *sched.QueueRejection of class ErrOverloaded).
// Close ends every wait (errShuttingDown).
func (q *routerQueue) wait(ctx context.Context, closing <-chan struct{}, now func() time.Time, c, workers int, cost sched.QueueCost, jump float64, strict uint32, pin *WorkerKey, w *waiter) error {
	start := now()
	w.ready = make(chan struct{})
	w.class = &q.profile.Classes[c]
	q.mu.Lock()
	e, err := q.mu.q.Enqueue(c, workers, cost, start.Sub(q.epoch).Seconds(), jump, strict, pin, w)
	if err != nil {
		q.mu.Unlock()
		var rej *sched.QueueRejection
		if errors.As(err, &rej) {
			q.st.rejected[rej.Kind].Add(1)
			q.rejected[c][rej.Kind].Add(1)
		}
		return &Error{Class: ErrOverloaded, Msg: err.Error(), Cause: err}
	}
	q.waiting.Add(1)
	q.mu.Unlock()
	q.st.enqueued.Add(1)
	if q.onEnqueue != nil {
		q.onEnqueue()
	}
	// Capacity may have freed between the decision and the enqueue, and
	// its kick found nothing waiting.
	q.kick()
	ended := errCancelled
	select {
	case <-w.ready:
		q.st.dispatched.Add(1)
		q.st.observeWait(now().Sub(start))
		return nil
	case <-ctx.Done():
	case <-closing:
		ended = errShuttingDown
	}
	q.mu.Lock()
	removed := q.mu.q.Remove(e)
	if removed {
		q.waiting.Add(-1)
	}
	q.mu.Unlock()
	q.st.cancelled.Add(1)
	if !removed {
		// Popped while the caller went away: pass the turn on.
		q.done()
	}
	return ended
}

// AsQueueRejection returns the queue rejection err carries (the details
// of an overloaded answer), or nil.
func AsQueueRejection(err error) *QueueRejection {
	var r *sched.QueueRejection
	if errors.As(err, &r) {
		return r
	}
	return nil
}

// admit runs the queue decision of a prepared selection and, when it must
// wait, parks it; once popped it rebuilds the candidates from the current
// snapshot and loads (refreshing the overlap after a long wait) into sc
// and q. dispatched reports a pop: the caller must call p.queue.done when
// its selection ends, error or not.
func (s *Service) admit(ctx context.Context, p *partition, q *scored, req *SelectRequest, cons *sched.Constraints, sc *scratch) (dispatched bool, err error) {
	rq := p.queue
	cands := sc.cands
	best := int64(0)
	for i := range cands {
		best = max(best, sched.CachedTokens(&q.params, q.req.BlockSize, &cands[i]))
	}
	cost := sched.NewQueueCost(q.req.ISLTokens, best)
	c := rq.profile.Classify(req.PolicyClass, cost.Uncached)
	cls := &rq.profile.Classes[c]
	if !cls.Queues() {
		return false, nil
	}
	w := &waiter{loads: make([]*sched.WorkerLoad, 0, len(cands)), caps: make([]int64, 0, len(cands))}
	busy := 0
	for i := range cands {
		v, wl := q.sn.load(cands[i].Worker)
		if wl == nil {
			continue
		}
		w.loads = append(w.loads, wl)
		w.caps = append(w.caps, v.maxBatched)
		if cls.WorkerBusy(cands[i].ActivePrefillTokens, v.maxBatched) {
			busy++
		}
	}
	rq.mu.Lock()
	backlog := rq.mu.q.Backlog(c)
	rq.mu.Unlock()
	if !cls.ShouldQueue(backlog, busy, len(w.loads)) {
		return false, nil
	}
	start := s.clock()
	if err := rq.wait(ctx, s.closing, s.clock, c, len(q.sn.workers), cost, req.PriorityJump, req.StrictPriority, req.PinnedWorker, w); err != nil {
		return false, err
	}
	sn := p.snap.Load()
	if len(sn.workers) == 0 {
		return true, errorf(ErrNotReady, "no schedulable workers for model=%s routing_group=%s", p.model, p.group)
	}
	if req.Prompt.LoraName != "" {
		// The workers may have changed while it waited: narrow again,
		// from the request's own allow-set, on the current snapshot.
		cons.AllowedWorkerIDs = s.allowedFor(sn, req, sc)
	}
	cands, err = sched.AppendCandidates(sc.cands[:0], sn.workers, cons)
	sc.cands = cands
	if err != nil {
		return true, fromSched(err)
	}
	if d := s.cfg.OverlapRefreshAfter; d > 0 && s.clock().Sub(start) >= d {
		// A failed refresh keeps the enqueue-time overlap, as the
		// reference's (non-fatal).
		if err := s.match(p, q.local, sc); err == nil {
			rq.st.refreshed.Add(1)
		}
	}
	fillOverlap(cands, sc.res.Matches)
	for i := range cands {
		if _, wl := sn.load(cands[i].Worker); wl != nil {
			wl.Fill(&cands[i], q.seq, q.params.AssumeKVReuse)
		}
	}
	q.sn = sn
	return true, nil
}
