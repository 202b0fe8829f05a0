package core

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/kvselect/kvselect/radix"
	"github.com/kvselect/kvselect/sched"
	"github.com/puzpuzpuz/xsync/v3"
)

// Options are the collaborators a host injects. Zero values pick the
// stand-ins: NopIngress, NopReplicaSink, time.Now and sched.RuntimeRand.
type Options struct {
	Ingress Ingress
	Replica ReplicaSink
	// Clock is the time source of bookings, the pending cache and expiry.
	Clock func() time.Time
	// Rand breaks ties and samples the softmax picker.
	Rand sched.Rand
}

// Service is the selection service. All methods are safe for concurrent
// use. It starts no goroutines: the host calls Sweep periodically
// (DefaultSweepInterval) and Close at shutdown.
type Service struct {
	cfg     Config
	ingress Ingress
	replica ReplicaSink
	// publishing is false when replica is NopReplicaSink.
	publishing bool
	clock      func() time.Time
	rng        sched.Rand

	// parts is a copy-on-write map (written under mu, read lock-free).
	parts atomic.Pointer[map[partKey]*partition]

	// mu serialises catalog mutations (Dynamo: one async mutex). Guards
	// catalog and the partitions' "under Service.mu" fields.
	mu      sync.Mutex
	catalog map[uint64]*catalogEntry

	// schedulable counts schedulable workers over all partitions.
	schedulable atomic.Int64
	closed      atomic.Bool

	// claims is the reservation index: selection id -> row (spec 3.1).
	claims  *xsync.MapOf[string, *reservation]
	pending *pendingCache

	scratch sync.Pool // *scratch

	// afterRowLookup, when set (tests only), runs in every lifecycle call
	// between its row lookup and its tracker call.
	afterRowLookup func(id string)

	stats counters
}

// counters are the outcome counters Stats reports.
type counters struct {
	selectOK, selectFailed    atomic.Uint64
	bookOK, bookConflict      atomic.Uint64
	bookFailed                atomic.Uint64
	replayHit, replayMiss     atomic.Uint64
	lifecycleOK, lifecycle404 atomic.Uint64
	swept                     atomic.Uint64
}

// New returns an empty service.
func New(cfg Config, opts Options) (*Service, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if _, err := radix.New(radix.Config{Shards: cfg.IndexShards}); err != nil {
		return nil, err
	}
	s := &Service{
		cfg:     cfg,
		ingress: opts.Ingress,
		replica: opts.Replica,
		clock:   opts.Clock,
		rng:     opts.Rand,
		catalog: map[uint64]*catalogEntry{},
		claims:  xsync.NewMapOf[string, *reservation](),
		pending: newPendingCache(cfg.SelectionCacheTTL, cfg.SelectionCacheMaxEntries, cfg.SelectionCacheMaxBytes),
	}
	if s.ingress == nil {
		s.ingress = NopIngress{}
	}
	if s.replica == nil {
		s.replica = NopReplicaSink{}
	}
	_, nop := s.replica.(NopReplicaSink)
	s.publishing = !nop
	if s.clock == nil {
		s.clock = time.Now
	}
	if s.rng == nil {
		s.rng = sched.RuntimeRand{}
	}
	m := map[partKey]*partition{}
	s.parts.Store(&m)
	s.scratch.New = func() any { return new(scratch) }
	return s, nil
}

// Config returns the service's configuration.
func (s *Service) Config() Config { return s.cfg }

// Close marks the service as shutting down: readiness turns false and every
// selection, booking and registration answers 503 "selection service is
// shutting down". Lifecycle calls keep working. Close does not close the
// Ingress (the host owns it).
func (s *Service) Close() { s.closed.Store(true) }

// Sweep runs the periodic maintenance at now: every partition's tracker
// expires bookings older than the expiry guard, reservation rows whose
// booking vanished are dropped (in-flight claims are kept), and expired
// pending selections are removed. It returns the number of bookings expired.
func (s *Service) Sweep(now time.Time) int {
	n := 0
	for _, p := range *s.parts.Load() {
		n += p.tracker.Expire(now)
	}
	s.claims.Range(func(id string, r *reservation) bool {
		if r.installed.Load() && !r.p.tracker.Live(r.h) {
			s.dropRow(r)
		}
		return true
	})
	s.pending.sweep(now)
	s.stats.swept.Add(uint64(n))
	return n
}

// EventSink returns the KV-event sink of partition (model, group), creating
// the partition: the entry point for hosts that feed events themselves
// (tests, startup recovery).
func (s *Service) EventSink(model, group string) EventSink {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.partitionLocked(model, group).sink
}

// Stats is a cheap snapshot for metrics export.
type Stats struct {
	// Outcome counters.
	SelectOK, SelectFailed           uint64
	BookOK, BookConflict, BookFailed uint64
	ReplayHit, ReplayMiss            uint64
	LifecycleOK, LifecycleNotFound   uint64
	Expired                          uint64
	Reservations                     int // rows in the reservation index
	PendingEntries                   int
	PendingBytes                     int64
	SchedulableWorkers               int64
	Partitions                       int
	IndexBlocks                      [radix.NumTiers]int64
	EventsApplied                    uint64
	EventsDropped                    uint64
	ActiveRequests                   int
}

// Stats sums the partitions' index and tracker stats and the service's
// counters. It takes no catalog lock.
func (s *Service) Stats() Stats {
	st := Stats{
		SelectOK:           s.stats.selectOK.Load(),
		SelectFailed:       s.stats.selectFailed.Load(),
		BookOK:             s.stats.bookOK.Load(),
		BookConflict:       s.stats.bookConflict.Load(),
		BookFailed:         s.stats.bookFailed.Load(),
		ReplayHit:          s.stats.replayHit.Load(),
		ReplayMiss:         s.stats.replayMiss.Load(),
		LifecycleOK:        s.stats.lifecycleOK.Load(),
		LifecycleNotFound:  s.stats.lifecycle404.Load(),
		Reservations:       s.claims.Size(),
		SchedulableWorkers: s.schedulable.Load(),
	}
	st.PendingEntries, st.PendingBytes = s.pending.size()
	parts := *s.parts.Load()
	st.Partitions = len(parts)
	for _, p := range parts {
		is := p.index.Stats()
		for t := range is.Blocks {
			st.IndexBlocks[t] += is.Blocks[t]
		}
		st.EventsApplied += is.EventsApplied
		for _, d := range is.Dropped {
			st.EventsDropped += d
		}
		ts := p.tracker.Stats()
		st.ActiveRequests += ts.ActiveRequests
		st.Expired += ts.Expired
	}
	return st
}
