package core

import (
	"fmt"
	"hash/maphash"
	"runtime"
	"sync"
	"sync/atomic"
	"time"
)

// Session affinity: one table per partition binds a session id to the
// worker (and optionally the DP rank) that served it, for as long as
// requests keep arriving within the TTL (the reference's SessionAffinity,
// ai-dynamo/dynamo:lib/kv-router/src/services/selection/affinity.rs).
//
// An entry is Initializing (a booking is choosing the worker; other
// bookings of the session wait on it) or Bound{target, version, leases,
// idle deadline}. A booking holds the session before it books, then
// commits: a new session binds to where it was booked and the booking's
// record takes a lease; a bound session's hold takes the lease at once.
// The idle deadline counts from the release of the last lease; a bound
// entry with leases never expires. Reap removes the idle, expired ones.
//
// Versions (sequence, writer) order replicated bindings: the sequence
// starts at the table's creation instant in Unix nanoseconds, increases
// with every new version and moves past every sequence a peer sent (a
// Lamport clock), so two replicas never mint the same version.

// Bounds of session affinity (the reference's constants).
const (
	// MaxSessionAffinityTTL bounds --session-affinity-ttl-secs.
	MaxSessionAffinityTTL = 31_536_000 * time.Second
	// MaxSessionAffinityEntries bounds one partition's table.
	MaxSessionAffinityEntries = 65_536
	// MaxSessionIDBytes bounds a session id.
	MaxSessionIDBytes = 256
	// MaxAffinityReapInterval caps the reaper's period: it runs every
	// min(TTL, 30 s).
	MaxAffinityReapInterval = 30 * time.Second
)

// AffinityMode is how a bound session treats a booking that landed
// elsewhere: Hard rejects it (and drops the binding), Soft re-binds the
// session to where it ran.
type AffinityMode uint8

const (
	AffinityHard AffinityMode = iota
	AffinitySoft
)

// String is the mode's lowercase name, as the reference serializes it.
func (m AffinityMode) String() string {
	if m == AffinitySoft {
		return "soft"
	}
	return "hard"
}

// ParseAffinityMode parses "hard" or "soft" with the reference's error text.
func ParseAffinityMode(s string) (AffinityMode, error) {
	switch s {
	case "hard":
		return AffinityHard, nil
	case "soft":
		return AffinitySoft, nil
	}
	return 0, fmt.Errorf("invalid session affinity mode %q; expected 'hard' or 'soft'", s)
}

// AffinityConfig enables session affinity: TTL 0 is off; otherwise it must
// be within [1 s, MaxSessionAffinityTTL].
type AffinityConfig struct {
	TTL  time.Duration
	Mode AffinityMode
}

func (c *AffinityConfig) validate() error {
	if c.TTL != 0 && (c.TTL < time.Second || c.TTL > MaxSessionAffinityTTL) {
		return fmt.Errorf("%w: session affinity TTL must be between 1 and %d seconds", ErrConfig, int64(MaxSessionAffinityTTL/time.Second))
	}
	if c.Mode > AffinitySoft {
		return fmt.Errorf("%w: session affinity mode %d", ErrConfig, c.Mode)
	}
	return nil
}

// ReapInterval is how often the host should call Service.ReapAffinity:
// min(TTL, 30 s); 0 when affinity is off.
func (c *AffinityConfig) ReapInterval() time.Duration {
	return min(c.TTL, MaxAffinityReapInterval)
}

// AffinityTarget is a binding's target: a worker, with or without a DP
// rank (the reference's WorkerAffinityTarget). Also the request's explicit
// affinity_target.
type AffinityTarget struct {
	WorkerID  uint64
	DPRank    uint32
	HasDPRank bool
}

func (t AffinityTarget) String() string {
	if t.HasDPRank {
		return fmt.Sprintf("%d/%d", t.WorkerID, t.DPRank)
	}
	return fmt.Sprintf("%d/-", t.WorkerID)
}

// matches reports whether worker rank w is inside t.
func (t AffinityTarget) matches(w WorkerKey) bool {
	return w.WorkerID == t.WorkerID && (!t.HasDPRank || w.DPRank == t.DPRank)
}

// affinityVersion orders replicated bindings: higher wins, lexicographic.
type affinityVersion struct{ seq, writer uint64 }

func (v affinityVersion) less(o affinityVersion) bool {
	return v.seq < o.seq || (v.seq == o.seq && v.writer < o.writer)
}

// affinityEntry is one session. Under its shard's mutex.
type affinityEntry struct {
	bound bool
	// revision names one initialization (and the binding it became):
	// leases and holds of an older revision do not touch a newer entry.
	revision uint64
	// wake, while initializing, is closed when the initialization ends
	// (commit, cancel or a joining booking); waiters block on it.
	wake     chan struct{}
	target   AffinityTarget
	version  affinityVersion
	leases   int
	deadline int64 // UnixNano; the idle deadline once leases reach 0
}

// endInit closes the entry's wake once.
func (e *affinityEntry) endInit() {
	if e.wake != nil {
		close(e.wake)
		e.wake = nil
	}
}

type affinityShard struct {
	mu sync.Mutex
	m  map[string]*affinityEntry
	_  [64]byte
}

// affinityTable is one partition's session table. Safe for concurrent
// use; no call holds a shard lock across a publish.
type affinityTable struct {
	ttl        int64 // ns
	mode       AffinityMode
	maxEntries int64
	clock      func() time.Time
	seed       maphash.Seed
	shards     []affinityShard
	count      atomic.Int64
	revision   atomic.Uint64
	seq        atomic.Uint64
	writer     uint64
	// publish, when set, sends a binding to the replica peers.
	publish func(id string, t AffinityTarget, v affinityVersion)
	st      *affinityCounters
}

// affinityCounters are the tables' outcome counters (Service-wide).
type affinityCounters struct {
	binds, rebinds, invalidated, rejected atomic.Uint64
	fullTable, reaped, published          atomic.Uint64
	applied                               [numAffinityApply]atomic.Uint64
}

func newAffinityTable(cfg AffinityConfig, maxEntries int, clock func() time.Time, writer uint64, st *affinityCounters) *affinityTable {
	t := &affinityTable{
		ttl: int64(cfg.TTL), mode: cfg.Mode, maxEntries: int64(maxEntries), clock: clock, seed: maphash.MakeSeed(),
		shards: make([]affinityShard, min(64, max(8, 4*runtime.GOMAXPROCS(0)))), writer: writer, st: st,
	}
	for i := range t.shards {
		t.shards[i].m = map[string]*affinityEntry{}
	}
	t.revision.Store(1)
	t.seq.Store(uint64(clock().UnixNano()))
	return t
}

func (t *affinityTable) shard(id string) *affinityShard {
	return &t.shards[maphash.String(t.seed, id)%uint64(len(t.shards))]
}

func (t *affinityTable) now() int64 { return t.clock().UnixNano() }

// nextVersion mints a version of this replica.
func (t *affinityTable) nextVersion() affinityVersion {
	return affinityVersion{t.seq.Add(1) - 1, t.writer}
}

// observe moves the sequence past a peer's (Lamport).
func (t *affinityTable) observe(seq uint64) {
	next := seq + 1
	if next == 0 {
		next = seq
	}
	for {
		cur := t.seq.Load()
		if cur >= next || t.seq.CompareAndSwap(cur, next) {
			return
		}
	}
}

// reserve takes one entry of the cap; false when the table is full.
func (t *affinityTable) reserve() bool {
	if t.count.Add(1) > t.maxEntries {
		t.count.Add(-1)
		return false
	}
	return true
}

// Affinity errors with the reference's texts.
var (
	errSessionIDTooLong = &Error{Class: ErrBadRequest, Msg: fmt.Sprintf("session affinity ID must not exceed %d bytes", MaxSessionIDBytes)}
	// errAffinityFull is ResourceExhausted; a booking that meets it
	// routes without affinity.
	errAffinityFull      = &Error{Class: ErrNotReady, Msg: "session affinity entry limit reached"}
	errAffinityCancelled = &Error{Class: ErrBadRequest, Msg: "session affinity initialization was cancelled"}
	errAffinityChanged   = &Error{Class: ErrBadRequest, Msg: "session affinity initialization changed"}
)

func checkSessionID(id string) error {
	if len(id) > MaxSessionIDBytes {
		return errSessionIDTooLong
	}
	return nil
}

// affinityHold is a session held for one booking: a new (or expired)
// session to initialize (init), or a bound one with its lease taken.
type affinityHold struct {
	t         *affinityTable
	id        string
	revision  uint64
	init      bool
	requested *AffinityTarget // init: the request's explicit target
	target    AffinityTarget  // bound: the binding's target
	lease     *affinityLease  // bound: the use this hold took
	done      bool            // committed or dropped
}

// tryAcquire holds session id for a booking. When another booking is
// initializing the session it returns the channel to wait on (closed when
// that initialization ends), and the caller tries again. requested is an
// explicit target the binding must agree with (nil: none).
func (t *affinityTable) tryAcquire(id string, requested *AffinityTarget) (*affinityHold, <-chan struct{}, error) {
	if err := checkSessionID(id); err != nil {
		return nil, nil, err
	}
	now := t.now()
	sh := t.shard(id)
	sh.mu.Lock()
	e := sh.m[id]
	switch {
	case e == nil:
		if !t.reserve() {
			sh.mu.Unlock()
			return nil, nil, errAffinityFull
		}
		id = cloneString(id)
		e = &affinityEntry{revision: t.revision.Add(1), wake: make(chan struct{})}
		sh.m[id] = e
		sh.mu.Unlock()
		return &affinityHold{t: t, id: id, revision: e.revision, init: true, requested: requested}, nil, nil
	case !e.bound:
		w := e.wake
		sh.mu.Unlock()
		return nil, w, nil
	case e.leases == 0 && e.deadline <= now:
		// Idle past its TTL: re-selected as a new session.
		*e = affinityEntry{revision: t.revision.Add(1), wake: make(chan struct{})}
		sh.mu.Unlock()
		return &affinityHold{t: t, id: cloneString(id), revision: e.revision, init: true, requested: requested}, nil, nil
	}
	if err := validateBoundTarget(id, e.target, requested); err != nil {
		sh.mu.Unlock()
		return nil, nil, err
	}
	e.leases++
	h := &affinityHold{t: t, id: cloneString(id), revision: e.revision, target: e.target}
	h.lease = &affinityLease{t: t, id: h.id, revision: e.revision, version: e.version}
	h.lease.active.Store(true)
	sh.mu.Unlock()
	return h, nil, nil
}

// drop ends a hold that is not committed: an initialization is cancelled
// (waiters wake and one of them initializes), a bound hold's use is
// released. Idempotent.
func (h *affinityHold) drop() {
	if h == nil || h.done {
		return
	}
	h.done = true
	if !h.init {
		h.lease.Release()
		return
	}
	t := h.t
	sh := t.shard(h.id)
	sh.mu.Lock()
	e := sh.m[h.id]
	if e != nil && e.revision == h.revision {
		if !e.bound {
			delete(sh.m, h.id)
			t.count.Add(-1)
			e.endInit()
		} else if e.leases > 0 {
			// A joining booking reserved this initializer's use; the
			// cancellation neither drops nor refreshes its binding.
			e.leases--
		}
	}
	sh.mu.Unlock()
}

// commit binds the held session to the worker rank the booking landed on
// and returns the booking's lease. A bound hold dispatched elsewhere
// follows the dispatch in soft mode and, in hard mode, fails and drops
// the binding (its next booking re-initializes). The hold is consumed
// either way.
func (t *affinityTable) commit(h *affinityHold, dispatched AffinityTarget) (*affinityLease, error) {
	if h.done {
		panic("BUG: core: affinity hold committed twice")
	}
	if !h.init {
		h.done = true
		return t.commitBound(h.id, h.target, h.lease, dispatched)
	}
	if err := validateBoundTarget(h.id, dispatched, h.requested); err != nil {
		h.drop()
		return nil, err
	}
	sh := t.shard(h.id)
	sh.mu.Lock()
	e := sh.m[h.id]
	switch {
	case e == nil:
		sh.mu.Unlock()
		h.done = true
		return nil, errAffinityCancelled
	case e.bound && e.revision == h.revision:
		// A booking joined this initialization and owns the binding; it
		// reserved this initializer's use (leases counts it).
		target, version := e.target, e.version
		if t.mode == AffinityHard {
			if err := validateDispatchTarget(h.id, target, dispatched); err != nil {
				sh.mu.Unlock()
				h.drop()
				return nil, err
			}
		}
		sh.mu.Unlock()
		h.done = true
		l := &affinityLease{t: t, id: h.id, revision: h.revision, version: version}
		l.active.Store(true)
		return t.commitBound(h.id, target, l, dispatched)
	case e.bound || e.revision != h.revision:
		sh.mu.Unlock()
		h.done = true
		return nil, errAffinityChanged
	}
	v := t.nextVersion()
	e.bound, e.target, e.version, e.leases, e.deadline = true, dispatched, v, 1, t.now()+t.ttl
	e.endInit()
	sh.mu.Unlock()
	h.done = true
	t.st.binds.Add(1)
	l := &affinityLease{t: t, id: h.id, revision: h.revision, version: v}
	l.active.Store(true)
	t.send(h.id, dispatched, v)
	return l, nil
}

// commitBound finishes a bound hold's commit.
func (t *affinityTable) commitBound(id string, bound AffinityTarget, l *affinityLease, dispatched AffinityTarget) (*affinityLease, error) {
	if t.mode == AffinitySoft {
		re := reboundTarget(bound, dispatched)
		if re == bound {
			t.send(id, bound, l.version)
		} else if l.rebind(bound, re) {
			t.st.rebinds.Add(1)
			t.send(id, re, l.version)
		}
		return l, nil
	}
	if err := validateDispatchTarget(id, bound, dispatched); err != nil {
		t.st.rejected.Add(1)
		l.invalidate()
		return nil, err
	}
	t.send(id, bound, l.version)
	return l, nil
}

// joinInitializing finishes another booking's initialization of session id
// with target: the binding is made now, this booking takes a lease, and
// the initializer's use stays reserved until it commits or cancels. nil
// when the session is not initializing.
func (t *affinityTable) joinInitializing(id string, target AffinityTarget) *affinityLease {
	sh := t.shard(id)
	sh.mu.Lock()
	e := sh.m[id]
	if e == nil || e.bound {
		sh.mu.Unlock()
		return nil
	}
	v := t.nextVersion()
	e.bound, e.target, e.version, e.leases, e.deadline = true, target, v, 2, t.now()+t.ttl
	e.endInit()
	rev := e.revision
	sh.mu.Unlock()
	t.st.binds.Add(1)
	l := &affinityLease{t: t, id: cloneString(id), revision: rev, version: v}
	l.active.Store(true)
	t.send(l.id, target, v)
	return l
}

// query returns the session's live binding without taking a lease (a
// /select); ok is false when there is none.
func (t *affinityTable) query(id string, requested *AffinityTarget) (AffinityTarget, bool, error) {
	if err := checkSessionID(id); err != nil {
		return AffinityTarget{}, false, err
	}
	now := t.now()
	sh := t.shard(id)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	e := sh.m[id]
	if e == nil || !e.bound || (e.leases == 0 && e.deadline <= now) {
		return AffinityTarget{}, false, nil
	}
	if err := validateBoundTarget(id, e.target, requested); err != nil {
		return AffinityTarget{}, false, err
	}
	return e.target, true, nil
}

// reap removes the bound entries without leases whose idle deadline has
// passed, and returns how many.
func (t *affinityTable) reap(now int64) int {
	n := 0
	for i := range t.shards {
		sh := &t.shards[i]
		sh.mu.Lock()
		for id, e := range sh.m {
			if e.bound && e.leases == 0 && e.deadline <= now {
				delete(sh.m, id)
				n++
			}
		}
		sh.mu.Unlock()
	}
	t.count.Add(int64(-n))
	t.st.reaped.Add(uint64(n))
	return n
}

// send publishes a binding to the replica peers, when replicating.
func (t *affinityTable) send(id string, target AffinityTarget, v affinityVersion) {
	if t.publish != nil {
		t.st.published.Add(1)
		t.publish(id, target, v)
	}
}
