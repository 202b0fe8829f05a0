package sched

import (
	"fmt"
	"math"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/kvselect/kvselect/radix"
	"github.com/puzpuzpuz/xsync/v3"
)

// cacheLinePad separates hot counters of different workers. 128 bytes, not
// 64: x86 prefetches cache lines in adjacent pairs, so two workers' counters
// 64 bytes apart still false-share (the same choice as Go's runtime padding
// and VictoriaMetrics' lib/atomicutil).
const cacheLinePad = 128

// MaxActivePrefillTokens bounds a worker rank's booked prefill (A_p).
// Booking saturates there instead of wrapping: prefill token counts come from
// clients (isl_tokens, which core clamps to 2^62, and an explicit
// reservation's effective_prefill_tokens, at most that), so two such bookings
// would
// otherwise overflow the int64 counter to a negative A_p and make the worker
// look idle until they are freed. A booking adds min(PrefillTokens,
// MaxActivePrefillTokens − A_p) and remembers what it added, so completing
// or freeing it subtracts exactly that: A_p stays in [0,
// MaxActivePrefillTokens] at every read and returns to zero once every
// booking is completed or freed. A saturated worker looks as busy as a
// worker can (the right direction for a request that big). Saturating
// rather than rejecting keeps booking total, as Dynamo's (no new error for
// a select that already picked the worker), and bounds every path,
// including callers that skip HTTP validation.
//
// 2^60 tokens is far above any real load (a million requests of a billion
// tokens each) and leaves scoring's sums in range: A_p plus a request's
// isl (≤ 2^62 after core's clamp) plus its cached tokens stays below
// 2^63.
const MaxActivePrefillTokens = 1 << 60

// counters are the loads scoring reads. They are written with atomic adds by
// booking and lifecycle calls and read without any lock. Torn reads across
// the three are accepted (spec 8.1: the read model is eventually consistent).
type counters struct {
	// prefillTokens (A_p) = Σ prefill still booked of live requests (and of
	// a booking between its add and its publication or rollback). Written
	// only by addPrefill and by subtracting what it returned: always in
	// [0, MaxActivePrefillTokens].
	prefillTokens atomic.Int64
	// blocksFixed is the fixed-point active block total.
	// Invariant: blocksFixed == trie.fixed + Σ over live booked requests of
	// (private·privateWeight + outputFixed), once no call is in flight.
	blocksFixed atomic.Int64
	// requests (N) = number of live booked requests.
	requests atomic.Int64
}

// WorkerLoad is the load accounting of one (worker, dp_rank). The host may
// keep the pointer (Tracker.Worker) beside its catalog entry and read it for
// every candidate.
type WorkerLoad struct {
	_   [cacheLinePad]byte
	c   counters
	_   [cacheLinePad - 24]byte
	key radix.WorkerKey
	// trackBlocks is Config.TrackActiveBlocks.
	trackBlocks bool
	// removed is set once by Tracker.RemoveWorker, under mu.
	removed atomic.Bool

	// mu serializes the writers of the prompt trie and guards the
	// worker-side state of the requests booked here (the request fields
	// marked "under w.mu"): Book, Free, OutputBlock and RemoveWorker take
	// it. No reader takes it: NewBlocks walks the trie lock-free, and the
	// counters above are atomics.
	mu   sync.Mutex
	trie promptTrie
}

// Loads is a snapshot of one worker rank's booked load.
type Loads struct {
	// PrefillTokens is A_p: booked effective prefill tokens not yet complete.
	PrefillTokens int64
	// Blocks is A_d: unique active blocks (prefix-deduplicated) plus output
	// blocks, weights applied and rounded.
	Blocks int64
	// Requests is N: live requests.
	Requests int64
}

// Key returns the worker rank w accounts for.
func (w *WorkerLoad) Key() radix.WorkerKey { return w.key }

// Loads reads the counters: three atomic loads, no lock.
func (w *WorkerLoad) Loads() Loads {
	return Loads{
		PrefillTokens: max(0, w.c.prefillTokens.Load()),
		Blocks:        roundBlocks(w.c.blocksFixed.Load()),
		Requests:      max(0, w.c.requests.Load()),
	}
}

// NewBlocks returns add: how many of the request's sequence hashes (full
// blocks) are not in this worker's active prompt set, i.e. len(seq) minus the
// longest prefix of seq present. It is 0 when active blocks are not tracked
// and len(seq) when KV reuse is not assumed (a request's blocks are then
// never shared).
//
// It takes no lock: scoring never waits for a booking, output block or free
// (TestNewBlocksDoesNotWaitForWriters holds the worker's mutex while it
// runs). The walk reads only the trie's reader fields, which writers keep
// valid for a concurrent reader (see pnode): node chains never change, and
// child sets are replaced by atomic stores (copy on write) after the new
// node is complete. So:
//
//   - The result is always in [0, len(seq)]: the depth only grows, by at
//     most the part of seq left.
//   - A prefix that stays present (or absent) during the call is found (or
//     not) exactly; only blocks that a concurrent Book adds or a concurrent
//     Free removes may be seen either way, as for any eventually consistent
//     read model (spec 8.1). TestNewBlocksDuringChurn checks both under
//     -race.
//   - Why comparing hashes is enough: sequence hashes are a rolling chain
//     (hash d identifies blocks 0..d), so the active set of a worker is
//     prefix-closed along any request's chain and one equal hash at depth d
//     proves the whole prefix up to d equal (commonPrefix binary-searches
//     each edge on that basis). Caller-supplied hashes that are not a chain
//     can make the result overstate sharing; they cannot corrupt the trie
//     (readers write nothing) nor leave [0, len(seq)].
//
// Measured against the read-locked walk it replaces (base commit 0fee6c2),
// with the two alternately, 6 rounds each, twice, on 2 cores shared with
// other builds (load average 1 to 6):
//
//	go test -run '^$' -bench 'NewBlocks64|FillWhileBooking|BookFree512' \
//	        -benchmem -benchtime=200ms -count=1 ./sched/
//
// median (min) in µs per op, first run / second run; targets: 10 µs for
// NewBlocks64Workers, 5 µs for BookFree512:
//
//	                          read lock                 lock-free
//	NewBlocks64Workers/mixed   6.2 (5.3) / 7.5 (6.7)     8.2 (6.2) / 6.3 (5.7)
//	NewBlocks64Workers/full    1.4 (1.0) / 1.7 (1.0)     1.5 (0.9) / 1.0 (0.8)
//	NewBlocks64Workers/none    1.3 (1.0) / 1.8 (1.3)     1.7 (1.2) / 1.1 (0.8)
//	FillWhileBooking          11.2 (6.6) / 10.0 (6.3)   10.5 (6.7) / 9.8 (7.3)
//	BookFree512                2.2 (1.5) / 4.0 (2.4)     2.3 (1.5) / 4.4 (2.1)
//	BookFree512Shared          2.2 (1.6) / 4.3 (3.4)     2.7 (1.5) / 3.7 (2.1)
//
// Allocations per op: none for the lookups either way; BookFree512 5 → 6,
// BookFree512Shared 5 → 7 (the copy-on-write child sets). The costs are
// the same within this machine's noise; what changes is that a scorer no
// longer waits behind a writer, nor bounces the lock's cache line.
//
// Chosen by measurement over a reader-side presence set of every active
// hash (lookup: last hash, first hash, then binary search), which makes
// Book and Free pay one set update per new or released block. Adding then
// removing 512 hashes on a set holding 8,192 cost 14.7 to 18.6 µs with a
// single-writer open-addressing table of atomic slots (each atomic store is
// a locked XCHG on amd64; 3.7 µs even with plain stores) and 65 to 80 µs,
// with 512 allocations, in an xsync.MapOf: against the 5 µs budget of a
// whole Book plus Free (prototypes, measured with go test -bench
// -benchtime=200ms -count=3 on the same machine, not kept). An immutable
// snapshot published per Book would copy the worker's whole set each time.
// The copy-on-write child sets cost Book and Free one 144-byte allocation
// per changed child set instead.
func (w *WorkerLoad) NewBlocks(seq []uint64, assumeReuse bool) int64 {
	if !w.trackBlocks {
		return 0
	}
	if !assumeReuse {
		return int64(len(seq))
	}
	return int64(len(seq) - w.trie.sharedDepth(seq))
}

// addPrefill adds min(p, MaxActivePrefillTokens − A_p) to A_p and returns
// the amount added (0 when saturated or p <= 0).
func (c *counters) addPrefill(p int64) int64 {
	for {
		cur := c.prefillTokens.Load()
		a := min(p, MaxActivePrefillTokens-cur)
		if a <= 0 {
			return 0
		}
		if c.prefillTokens.CompareAndSwap(cur, cur+a) {
			return a
		}
	}
}

// Fill sets c's load fields (HasLoad, A_p, A_d, N, add) from w for a request
// with sequence hashes seq.
func (w *WorkerLoad) Fill(c *Candidate, seq []uint64, assumeReuse bool) {
	l := w.Loads()
	c.HasLoad = true
	c.ActivePrefillTokens = l.PrefillTokens
	c.ActiveBlocks = l.Blocks
	c.ActiveRequests = l.Requests
	c.NewBlocks = w.NewBlocks(seq, assumeReuse)
}

// request is one live booking.
type request struct {
	id       string
	w        *WorkerLoad
	admitted int64 // UnixNano of admission; immutable
	// prefill is the part of the booked prefill still counted in
	// w.c.prefillTokens (what addPrefill added, which is less than
	// Booking.PrefillTokens when A_p saturated); swapped to 0 exactly once.
	prefill atomic.Int64

	// Under w.mu:
	hashes        []uint64 // owned copy of the sequence hashes; the trie aliases it (never written)
	term          *pnode   // terminal node in w.trie; nil when not in the trie
	private       int64    // blocks counted outside the trie (AssumeKVReuse false)
	privateWeight int64    // fixed-point weight of each private block
	outputs       int64    // output blocks added
	outputFixed   int64    // fixed-point total weight of the output blocks
	booked        bool     // counted in w's counters
	freed         bool     // released; a late Book must not count it
}

// Booking is the input of Tracker.Book.
type Booking struct {
	// RequestID is globally unique among live requests. Book copies it.
	RequestID string
	// Worker is the selected (worker, dp_rank); it must have been added.
	Worker radix.WorkerKey
	// SequenceHashes are the request's tracking hashes (full blocks). Book
	// copies them; the caller may reuse the slice.
	SequenceHashes []uint64
	// PrefillTokens is the effective prefill to book (EffectivePrefillTokens
	// of the selected worker). 0 books none; pass 0 when
	// track_prefill_tokens is off. A_p saturates at MaxActivePrefillTokens.
	PrefillTokens int64
	// AssumeKVReuse is the request's resolved assume_kv_reuse: false counts
	// every block as the request's own (no prefix sharing).
	AssumeKVReuse bool
}

// Handle identifies one booking, not its request id: a lifecycle call
// through a handle acts only on the booking that returned it. Once that
// booking is freed (Free, Expire, RemoveWorker), the handle's calls report
// "not live" even if the id has been booked again since, where the id-based
// calls would act on the newer booking. A host that looks a booking up in
// its own index and acts on it later keeps the handle there, so a call that
// raced a free and re-booking of the same id cannot touch the new booking.
// The zero Handle is no booking. Handles are comparable and cost nothing to
// copy (one pointer).
type Handle struct{ r *request }

// Worker returns the worker rank the booking is on (the zero key for the
// zero Handle).
func (h Handle) Worker() radix.WorkerKey {
	if h.r == nil {
		return radix.WorkerKey{}
	}
	return h.r.w.key
}

// Tracker is the load accounting of one partition: a WorkerLoad per
// (worker, dp_rank) and a global index of live requests (spec 8). All
// methods are safe for concurrent use; none blocks on another worker's
// bookings. It starts no goroutines and reads no clock: every method that
// needs time takes now.
type Tracker struct {
	expiry        int64 // Config.ActiveRequestExpiry, ns
	checkInterval int64 // Config.ExpiryCheckInterval, ns
	trackBlocks   bool
	trackOutput   bool

	workers *xsync.MapOf[radix.WorkerKey, *WorkerLoad]
	reqs    *xsync.MapOf[string, *request]

	// beforeExpireFree, when set (tests only), runs in Expire between
	// finding an expired request and freeing it.
	beforeExpireFree func(id string)

	_ [cacheLinePad]byte
	// nextExpiry is the UnixNano after which Book runs lazy expiry.
	nextExpiry atomic.Int64
	booked     atomic.Uint64
	freed      atomic.Uint64
	expired    atomic.Uint64
	duplicates atomic.Uint64
}

// NewTracker returns an empty tracker. cfg must be valid.
func NewTracker(cfg Config) (*Tracker, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return &Tracker{
		expiry:        int64(cfg.ActiveRequestExpiry),
		checkInterval: int64(cfg.ExpiryCheckInterval),
		trackBlocks:   cfg.TrackActiveBlocks,
		trackOutput:   cfg.TrackOutputBlocks,
		workers:       xsync.NewMapOf[radix.WorkerKey, *WorkerLoad](),
		reqs:          xsync.NewMapOf[string, *request](),
	}, nil
}

// AddWorker registers a worker rank and returns its load handle; adding a
// known rank returns the existing handle.
func (t *Tracker) AddWorker(key radix.WorkerKey) *WorkerLoad {
	w, _ := t.workers.LoadOrCompute(key, func() *WorkerLoad {
		return &WorkerLoad{key: key, trackBlocks: t.trackBlocks}
	})
	return w
}

// Worker returns the load handle of a registered worker rank.
func (t *Tracker) Worker(key radix.WorkerKey) (*WorkerLoad, bool) {
	return t.workers.Load(key)
}

// RemoveWorker drops every rank of workerID and frees the requests booked
// on them. It returns the number of requests freed. A booking racing the
// removal fails with ErrWorkerNotFound.
func (t *Tracker) RemoveWorker(workerID uint64) int {
	t.workers.Range(func(k radix.WorkerKey, w *WorkerLoad) bool {
		if k.WorkerID == workerID {
			t.workers.Delete(k)
			w.mu.Lock()
			w.removed.Store(true)
			w.mu.Unlock()
		}
		return true
	})
	n := 0
	t.reqs.Range(func(_ string, r *request) bool {
		if r.w.removed.Load() && t.freeReq(r) {
			n++
		}
		return true
	})
	return n
}

// Book records a request on its selected worker rank (add_request, spec
// 8.4): A_p += PrefillTokens (saturating at MaxActivePrefillTokens), the prompt path joins the worker's prompt set
// (blocks shared with live requests on that worker are not counted again),
// N += 1. It first runs lazy expiry when the check interval has passed.
//
// Errors: ErrWorkerNotFound (booking never creates a worker),
// ErrDuplicateRequest when the id is live on any worker.
func (t *Tracker) Book(b *Booking, now time.Time) error {
	_, err := t.BookHandle(b, now)
	return err
}

// BookHandle is Book, also returning the booking's Handle (the zero Handle
// on error).
func (t *Tracker) BookHandle(b *Booking, now time.Time) (Handle, error) {
	nowNs := now.UnixNano()
	if next := t.nextExpiry.Load(); nowNs >= next && t.nextExpiry.CompareAndSwap(next, nowNs+t.checkInterval) {
		t.Expire(now)
	}
	w, ok := t.workers.Load(b.Worker)
	if !ok {
		return Handle{}, fmt.Errorf("%w: %v", ErrWorkerNotFound, b.Worker)
	}
	r := &request{id: strings.Clone(b.RequestID), w: w, admitted: nowNs}
	reuse := b.AssumeKVReuse && t.trackBlocks
	if reuse && len(b.SequenceHashes) > 0 {
		r.hashes = slices.Clone(b.SequenceHashes)
	}
	// The prefill is counted before r is published, so that the amount
	// addPrefill actually added (saturation) is what r records before any
	// PrefillComplete or Free can swap it out: A_p never goes negative. A
	// duplicate rolls it back, so it is seen for a moment only.
	if b.PrefillTokens > 0 {
		r.prefill.Store(w.c.addPrefill(b.PrefillTokens))
	}
	if prev, loaded := t.reqs.LoadOrStore(r.id, r); loaded {
		if p := r.prefill.Load(); p != 0 {
			w.c.prefillTokens.Add(-p)
		}
		t.duplicates.Add(1)
		return Handle{}, fmt.Errorf("%w: request %s (assigned to worker %v)", ErrDuplicateRequest, b.RequestID, prev.w.key)
	}

	w.mu.Lock()
	if w.removed.Load() {
		w.mu.Unlock()
		// Delete r if it is still there. delete must be true when nothing
		// is loaded too: xsync's Compute stores the returned (nil) value
		// otherwise, which a concurrent Free of r makes possible.
		t.reqs.Compute(r.id, func(old *request, loaded bool) (*request, bool) {
			return old, !loaded || old == r
		})
		if p := r.prefill.Swap(0); p != 0 {
			w.c.prefillTokens.Add(-p)
		}
		return Handle{}, fmt.Errorf("%w: %v", ErrWorkerNotFound, b.Worker)
	}
	if r.freed {
		// Freed between publication and here: nothing to count.
		w.mu.Unlock()
		return Handle{r}, nil
	}
	var delta int64
	if t.trackBlocks {
		if reuse {
			r.term, delta = w.trie.acquire(r.hashes)
		} else {
			r.private = int64(len(b.SequenceHashes))
			r.privateWeight = fullWeight
			delta = r.private * fullWeight
		}
	}
	if invariants {
		w.trie.check()
	}
	r.booked = true
	w.c.blocksFixed.Add(delta)
	w.c.requests.Add(1)
	w.mu.Unlock()
	t.booked.Add(1)
	return Handle{r}, nil
}

// PrefillComplete clears the request's booked prefill from A_p
// (mark_prefill_completed). It reports whether the request is live; a second
// call, or one for an unknown id, changes nothing.
func (t *Tracker) PrefillComplete(id string) bool {
	r, ok := t.reqs.Load(id)
	if !ok {
		return false
	}
	r.completePrefill()
	return true
}

// PrefillCompleteHandle is PrefillComplete of h's booking only: false once
// that booking is freed, even if its id is live again.
func (t *Tracker) PrefillCompleteHandle(h Handle) bool {
	if !t.Live(h) {
		return false
	}
	h.r.completePrefill()
	return true
}

// completePrefill removes r's booked prefill from A_p, once: freeID swaps
// the same field, so a free racing the call subtracts nothing twice.
func (r *request) completePrefill() {
	if p := r.prefill.Swap(0); p != 0 {
		r.w.c.prefillTokens.Add(-p)
	}
}

// Live reports whether h's booking is live (booked and not freed). The zero
// Handle is not.
func (t *Tracker) Live(h Handle) bool {
	if h.r == nil {
		return false
	}
	cur, ok := t.reqs.Load(h.r.id)
	return ok && cur == h.r
}

// OutputBlock records one output block of the request (add_output_block,
// spec 8.4), a no-op unless Config.TrackOutputBlocks. With decayFraction f,
// every output block of the request and every prompt block only this request
// holds on its worker get weight f.
//
// Errors: ErrInvalidDecayFraction (f outside [0, 1]), ErrRequestNotFound.
func (t *Tracker) OutputBlock(id string, decayFraction *float64) error {
	wf, err := decayWeight(decayFraction)
	if err != nil {
		return err
	}
	r, ok := t.reqs.Load(id)
	if !ok {
		return fmt.Errorf("%w: request %s", ErrRequestNotFound, id)
	}
	return t.outputBlock(r, decayFraction, wf)
}

// OutputBlockHandle is OutputBlock of h's booking only: ErrRequestNotFound
// once that booking is freed, even if its id is live again.
func (t *Tracker) OutputBlockHandle(h Handle, decayFraction *float64) error {
	wf, err := decayWeight(decayFraction)
	if err != nil {
		return err
	}
	if !t.Live(h) {
		if h.r == nil {
			return ErrRequestNotFound
		}
		return fmt.Errorf("%w: request %s", ErrRequestNotFound, h.r.id)
	}
	return t.outputBlock(h.r, decayFraction, wf)
}

// decayWeight validates a decay_fraction (nil: none) and returns it in
// fixed point.
func decayWeight(decayFraction *float64) (int64, error) {
	if decayFraction == nil {
		return 0, nil
	}
	f := *decayFraction
	if math.IsNaN(f) || f < 0 || f > 1 {
		return 0, fmt.Errorf("%w: got %v", ErrInvalidDecayFraction, f)
	}
	return toFixed(f), nil
}

// outputBlock adds one output block to r (wf is the fixed-point
// decayFraction when that is non-nil). A free racing it is seen under w.mu.
func (t *Tracker) outputBlock(r *request, decayFraction *float64, wf int64) error {
	if !t.trackOutput {
		return nil
	}
	w := r.w
	w.mu.Lock()
	defer w.mu.Unlock()
	if !r.booked || r.freed {
		return nil
	}
	old := r.outputFixed
	r.outputs++
	if decayFraction == nil {
		r.outputFixed += fullWeight
	} else {
		r.outputFixed = r.outputs * wf
	}
	delta := r.outputFixed - old
	if decayFraction != nil {
		delta += w.trie.setExclusiveWeight(r.term, wf)
		delta += r.private * (wf - r.privateWeight)
		r.privateWeight = wf
		if invariants {
			w.trie.check()
		}
	}
	w.c.blocksFixed.Add(delta)
	return nil
}

// Free releases the request (free, spec 8.4): its prefill, prompt blocks no
// other request holds, output blocks and its request count. It reports
// whether the request was live; freeing twice is a no-op.
func (t *Tracker) Free(id string) bool {
	if t.freeID(id) {
		t.freed.Add(1)
		return true
	}
	return false
}

// FreeHandle is Free of h's booking only: false once that booking is
// freed, even if its id is live again (the newer booking stays).
func (t *Tracker) FreeHandle(h Handle) bool {
	if h.r != nil && t.freeReq(h.r) {
		t.freed.Add(1)
		return true
	}
	return false
}

func (t *Tracker) freeID(id string) bool {
	r, ok := t.reqs.LoadAndDelete(id)
	if !ok {
		return false
	}
	t.release(r)
	return true
}

// freeReq removes r from the index if it is still the request of its id,
// and releases it. It reports whether this call removed it (at most one
// call does: Compute runs under the entry's lock).
func (t *Tracker) freeReq(r *request) bool {
	removed := false
	t.reqs.Compute(r.id, func(old *request, loaded bool) (*request, bool) {
		removed = loaded && old == r
		// delete must be true when nothing is loaded: xsync's Compute
		// stores the returned (nil) value otherwise.
		return old, !loaded || old == r
	})
	if removed {
		t.release(r)
	}
	return removed
}

// release takes a request removed from the index out of its worker's
// counters and trie.
func (t *Tracker) release(r *request) {
	w := r.w
	if p := r.prefill.Swap(0); p != 0 {
		w.c.prefillTokens.Add(-p)
	}
	w.mu.Lock()
	if r.booked && !r.freed {
		delta := -(r.outputFixed + r.private*r.privateWeight)
		if r.term != nil {
			delta += w.trie.release(r.term)
			if invariants {
				w.trie.check()
			}
		}
		w.c.blocksFixed.Add(delta)
		w.c.requests.Add(-1)
	}
	r.freed = true
	r.term, r.hashes = nil, nil
	w.mu.Unlock()
}

// Expire frees every request admitted more than Config.ActiveRequestExpiry
// before now (strictly) and returns how many it freed. Output progress does
// not refresh a request. Book calls it lazily; the host should also call it
// periodically (Dynamo: every 60 s).
func (t *Tracker) Expire(now time.Time) int {
	cutoff := now.UnixNano() - t.expiry
	n := 0
	t.reqs.Range(func(id string, r *request) bool {
		if r.admitted >= cutoff {
			return true
		}
		if t.beforeExpireFree != nil {
			t.beforeExpireFree(id)
		}
		// By request, not id: a newer booking of the same id made since
		// the range read r is not expired with it.
		if t.freeReq(r) {
			n++
		}
		return true
	})
	t.expired.Add(uint64(n))
	return n
}

// Lookup returns the worker rank a live request is booked on.
func (t *Tracker) Lookup(id string) (radix.WorkerKey, bool) {
	r, ok := t.reqs.Load(id)
	if !ok {
		return radix.WorkerKey{}, false
	}
	return r.w.key, true
}

// Stats is a cheap snapshot of a Tracker for metrics export.
type Stats struct {
	Workers        int    // registered worker ranks
	ActiveRequests int    // live requests in the index
	Booked         uint64 // successful Book calls
	Freed          uint64 // requests released by Free
	Expired        uint64 // requests released by Expire
	Duplicates     uint64 // Book calls rejected as duplicates
}

// Stats returns the tracker's counters. Constant time.
func (t *Tracker) Stats() Stats {
	return Stats{
		Workers:        t.workers.Size(),
		ActiveRequests: t.reqs.Size(),
		Booked:         t.booked.Load(),
		Freed:          t.freed.Load(),
		Expired:        t.expired.Load(),
		Duplicates:     t.duplicates.Load(),
	}
}

// WorkerStats is one worker rank's row of AppendWorkerStats.
type WorkerStats struct {
	Worker radix.WorkerKey
	Loads
}

// AppendWorkerStats appends the current loads of every worker rank to dst,
// in no particular order (the rows of GET /loads).
func (t *Tracker) AppendWorkerStats(dst []WorkerStats) []WorkerStats {
	t.workers.Range(func(k radix.WorkerKey, w *WorkerLoad) bool {
		dst = append(dst, WorkerStats{Worker: k, Loads: w.Loads()})
		return true
	})
	return dst
}
