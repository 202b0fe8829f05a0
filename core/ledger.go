package core

import (
	"sync/atomic"

	"github.com/kvselect/kvselect/sched"
	"github.com/puzpuzpuz/xsync/v3"
)

// Origin says where a live request was booked: OriginLocal for a booking
// made through this service's own routes; otherwise the process id of the
// replica peer whose admission this record mirrors. Lifecycle calls act on
// (and publish for) a record whatever its origin, as the reference lets a
// mirrored booking be completed or freed on any replica; a snapshot for a
// joining peer carries only local records.
type Origin uint64

// OriginLocal is the Origin of a booking made by this process.
const OriginLocal Origin = 0

// Lease is a resource held for exactly as long as a live request: a session
// affinity binding, a disaggregated plan's leg. The ledger calls Release once
// when the record ends (free, expiry, worker removal), without locks held.
type Lease interface {
	Release()
}

// leasePair is the lease of a record that holds two: a disaggregated
// plan's leg whose booking also bound its session. Both are non-nil.
type leasePair [2]Lease

func (p leasePair) Release() {
	p[0].Release()
	p[1].Release()
}

// Record states. A record is created claimed, becomes live once its slot
// is booked (and the pending entry it replays, if any, is consumed), and
// ends released. Transitions are CASes, so exactly one caller moves a
// record out of each state.
const (
	stateClaimed  uint32 = iota // in the ledger, invisible to lifecycle calls
	stateLive                   // booked: lifecycle calls act on it
	stateReleased               // its load is released; leaving or gone from the ledger
)

// reservation is the one record of one live request, keyed by its selection
// id in the ledger: the only place a live request is indexed. Its slot is
// its load on the worker rank it is booked on; its lease and origin are
// what later features hang off it.
//
// Invariant: a record is in the ledger from its claim until it is released
// (or its claim abandoned), and a selection id names at most one record, so
// an id cannot be booked twice while a booking of it is live or in flight
// — a duplicate is a conflict whatever the worker.
type reservation struct {
	// id is the record's own copy of the selection id (the map key).
	id string
	p  *partition
	// admitted is the UnixNano of the booking; expiry counts from it.
	admitted int64
	// bytes is what the record counts against Config.MaxReservationBytes.
	bytes  int64
	origin Origin
	// lease, when non-nil, is released when the record is.
	lease Lease
	// The booking facts a replica snapshot re-announces (immutable): the
	// LoRA, the expected output tokens, whether prefill was tracked and KV
	// reuse assumed, and the number of tracking hashes.
	lora        string
	expected    uint32
	hasExpected bool
	track       bool
	reuse       bool
	blocks      int32
	state       atomic.Uint32
	// slot is written by Book before the record turns live, and read by
	// lifecycle calls only after they see it live.
	slot sched.Slot
}

// worker returns the worker rank the record is booked on.
func (r *reservation) worker() WorkerKey { return r.slot.Worker() }

// ledger is the table of live requests: selection id -> record, with the
// caps that bound it. Every method is safe for concurrent use; none takes a
// global lock (xsync's map locks one bucket per write).
type ledger struct {
	m *xsync.MapOf[string, *reservation]
	// count and bytes are the records in m and their bytes, claims
	// included; a claim adds before it inserts and a removal subtracts
	// after it deletes, so a cap is never exceeded.
	count, bytes       atomic.Int64
	maxCount, maxBytes int64
	// nextExpiry is the UnixNano after which a booking runs lazy expiry.
	nextExpiry atomic.Int64
}

func newLedger(maxCount int, maxBytes int64) *ledger {
	return &ledger{m: xsync.NewMapOf[string, *reservation](), maxCount: int64(maxCount), maxBytes: maxBytes}
}

// recordBytes is what a booking counts against the byte cap: the tracking
// hashes its slot copies and its id.
func recordBytes(id string, seq []uint64) int64 { return int64(len(id) + 8*len(seq)) }

// claim inserts r (state claimed) under its id. It fails with the capacity
// error when a cap would be exceeded and with errClaimed when the id is
// already claimed or live.
func (l *ledger) claim(r *reservation) error {
	if l.count.Add(1) > l.maxCount {
		l.count.Add(-1)
		return errorf(ErrCapacity, "live reservation limit reached (%d); free reservations or raise the limit", l.maxCount)
	}
	if b := l.bytes.Add(r.bytes); b > l.maxBytes {
		l.bytes.Add(-r.bytes)
		l.count.Add(-1)
		return errorf(ErrCapacity, "reservation byte limit reached (%d bytes; %d held, this booking needs %d); free reservations or raise the limit", l.maxBytes, b-r.bytes, r.bytes)
	}
	if _, loaded := l.m.LoadOrStore(r.id, r); loaded {
		l.bytes.Add(-r.bytes)
		l.count.Add(-1)
		return errClaimed
	}
	return nil
}

// errClaimed is claim's conflict; callers turn it into the reference's text.
var errClaimed = &Error{Class: ErrConflict, Msg: "claimed"}

// remove deletes r from the ledger if it is still the record of its id (a
// newer claim of the id survives) and gives back its share of the caps.
// Compute is given the record's own key: xsync stores the key it is passed
// when it keeps an entry, so a caller's string (which may alias a request
// buffer) never reaches it.
func (l *ledger) remove(r *reservation) {
	removed := false
	l.m.Compute(r.id, func(old *reservation, loaded bool) (*reservation, bool) {
		removed = loaded && old == r
		// delete must be true when nothing is loaded too: Compute stores
		// the returned (nil) value otherwise.
		return old, !loaded || old == r
	})
	if removed {
		l.bytes.Add(-r.bytes)
		l.count.Add(-1)
	}
}

// live returns the live record of id, or nil.
func (l *ledger) live(id string) *reservation {
	r, ok := l.m.Load(id)
	if !ok || r.state.Load() != stateLive {
		return nil
	}
	return r
}

// releaseReason says why a record ended, for Stats.
type releaseReason uint8

const (
	releasedFree          releaseReason = iota // DELETE
	releasedExpired                            // the expiry guard
	releasedWorkerGone                         // its worker rank left
	releasedReplica                            // a peer's Free
	releasedReplaced                           // a peer's admission of the same id
	releasedBookingUndone                      // its rank left while it was booked (counted as worker gone)
	numReleaseReasons
)

// release ends r if it is live: its slot's load is released, it leaves the
// ledger and its lease is released. It reports whether this call ended it;
// of any number of concurrent calls (free, expiry, worker removal) exactly
// one does.
func (s *Service) release(r *reservation, why releaseReason) bool {
	if !r.state.CompareAndSwap(stateLive, stateReleased) {
		return false
	}
	r.slot.Release()
	if why == releasedFree || why == releasedBookingUndone {
		// Published while the id is still held in the ledger: a booking
		// of the same id cannot claim it, and so publish its admission,
		// before peers have this free (they would apply add, add, free
		// and drop the newer booking).
		s.publish(ReplicaFree, r)
	}
	s.ledger.remove(r)
	if r.lease != nil {
		r.lease.Release()
	}
	if why == releasedBookingUndone {
		why = releasedWorkerGone
	}
	s.stats.released[why].Add(1)
	r.p.kick()
	return true
}

// expire releases every live record admitted more than the expiry guard
// before nowNs (strictly), and returns how many it released. Output
// progress does not refresh a record (Dynamo: the guard counts from
// admission, ai-dynamo/dynamo:lib/kv-router/src/sequences/single.rs).
func (s *Service) expire(nowNs int64) int {
	cutoff := nowNs - int64(s.cfg.Sched.ActiveRequestExpiry)
	n := 0
	s.ledger.m.Range(func(_ string, r *reservation) bool {
		if r.admitted < cutoff && r.state.Load() == stateLive && s.release(r, releasedExpired) {
			n++
		}
		return true
	})
	return n
}

// maybeExpire runs expire when the check interval has passed since the
// last run (Dynamo runs it lazily on add, at most every 30 s). One caller
// wins the CAS; the others go on.
func (s *Service) maybeExpire(nowNs int64) {
	next := s.ledger.nextExpiry.Load()
	if nowNs >= next && s.ledger.nextExpiry.CompareAndSwap(next, nowNs+int64(s.cfg.Sched.ExpiryCheckInterval)) {
		s.expire(nowNs)
	}
}

// releaseRetired releases every live record booked on a retired worker
// rank of partition p, and returns how many it released. A booking that
// raced the retirement either failed (its Book saw the rank retired) or
// was live before this range started, or releases itself after installing
// (book checks Retired after install).
func (s *Service) releaseRetired(p *partition) int {
	n := 0
	s.ledger.m.Range(func(_ string, r *reservation) bool {
		if r.p == p && r.state.Load() == stateLive && r.slot.Retired() && s.release(r, releasedWorkerGone) {
			n++
		}
		return true
	})
	return n
}
