package core

import (
	"cmp"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/kvselect/kvselect/radix"
	"github.com/kvselect/kvselect/sched"
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
	// Affinity receives the session bindings to replicate (nil: none);
	// WriterID is this replica's id in their versions (the mesh's process
	// id), and ApplyAffinity drops events that carry it.
	Affinity AffinitySink
	WriterID uint64
	// Logf receives the service's rare warnings (nil: discarded).
	Logf func(format string, args ...any)
	// LoraFilter, when set, is the host's source of the workers that serve
	// a LoRA adapter (lora.go); nil narrows by the built-in sources, the
	// records' lora_adapters and SetEngineAdapters.
	LoraFilter LoraWorkerFilter
	// Primary, when set, is the primary index of every partition, served
	// by another process (a standalone indexer): the service then listens
	// to no KV events (Ingress is not called; workers need no kv_events
	// endpoint) and its own primary indexes stay empty, so Dump has no
	// primary events. Requires Config.UseKVEvents.
	Primary PrimaryIndex
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
	// remote is Options.Primary; listening is UseKVEvents without it: the
	// service attaches KV-event listeners and requires kv_events
	// endpoints.
	remote    PrimaryIndex
	listening bool
	clock     func() time.Time
	rng       sched.Rand
	logf      func(format string, args ...any)
	// loraFilter is Options.LoraFilter (nil: the built-in sources).
	loraFilter LoraWorkerFilter

	// affinitySink and writerID replicate session bindings (nil: no
	// replication); affinityStats count every table's outcomes.
	affinitySink  AffinitySink
	writerID      uint64
	affinityStats affinityCounters
	queueStats    queueCounters
	// hintWarned makes the no-index kv hint warning once-only.
	hintWarned sync.Once

	// parts is a copy-on-write map (written under mu, read lock-free).
	parts atomic.Pointer[map[partKey]*partition]

	// workerLocks serialize each worker's catalog changes from start to
	// end, ingress calls included (see workers.go); taken before mu.
	workerLocks workerLocks

	// mu guards catalog (and deferred). It is held only for in-memory
	// changes, never across an ingress call; a partition's membership
	// has its own lock, taken under it (members.go).
	mu      sync.Mutex
	catalog map[uint64]*catalogEntry
	// deferred, non-nil during a batch of catalog changes, collects the
	// partitions to publish once at its end (publishLocked).
	deferred map[*partition]struct{}

	closed atomic.Bool
	// closing is closed by Close: selections waiting (in a router queue,
	// for a session's initialization) end as shutting down.
	closing   chan struct{}
	closeOnce sync.Once
	// mayWait: the configuration lets a selection wait (queueing or
	// session affinity), so a host should pass a caller context.
	mayWait bool
	// recovery is what the host's startup recovery restored (SetRecovery).
	recovery atomic.Pointer[Recovery]
	// eventPlane is the host's event-plane probe (SetEventPlaneProbe).
	eventPlane atomic.Pointer[func() any]
	// owner, when set, names the source that owns the catalog: the public
	// catalog mutations are refused (reconciler.go).
	owner atomic.Pointer[string]

	// ledger is the one table of live requests (ledger.go).
	ledger  *ledger
	pending *pendingCache
	// plans are the live disaggregated plans (disagg_plans.go); their
	// legs are records of the ledger.
	plans *planRegistry
	// disaggPolicy is the conditional-disaggregation policy
	// (cfg.Sched.DisaggPolicy(); tests replace it before use).
	disaggPolicy bypassPolicy
	// policies are the selection policies a request may name
	// (Config.policyRegistry); read-only after New.
	policies map[string]*sched.SelectionPolicy

	scratch sync.Pool // *scratch

	// afterLookup, when set (tests only), runs in every lifecycle call
	// between its ledger lookup and its use of the record.
	afterLookup func(id string)
	// failUpsert, when set (tests only), fails a batch upsert of a worker
	// with the error it returns.
	failUpsert func(id uint64) error

	stats counters
}

// counters are the outcome counters Stats reports.
type counters struct {
	selectOK, selectFailed    atomic.Uint64
	bookOK, bookConflict      atomic.Uint64
	bookFailed, bookRefused   atomic.Uint64
	replayHit, replayMiss     atomic.Uint64
	lifecycleOK, lifecycle404 atomic.Uint64
	released                  [numReleaseReasons]atomic.Uint64
	replicaApplied            atomic.Uint64
	replicaDropped            [NumReplicaDrops]atomic.Uint64
	publishes                 atomic.Uint64
	planOK, planFailed        atomic.Uint64
	planExpired               atomic.Uint64
	planProbeFailed           atomic.Uint64
	planFreeFailed            atomic.Uint64
	hints, hintsNoIndex       atomic.Uint64
}

// New returns an empty service.
func New(cfg Config, opts Options) (*Service, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if opts.Primary != nil && !cfg.UseKVEvents {
		return nil, fmt.Errorf("%w: a remote indexer requires use_kv_events=true; the standalone indexer does not record routing decisions", ErrConfig)
	}
	cfg.Tracking.Key = slices.Clone(cfg.Tracking.Key) // the caller may reuse it
	s := &Service{
		cfg:        cfg,
		ingress:    opts.Ingress,
		replica:    opts.Replica,
		clock:      opts.Clock,
		rng:        opts.Rand,
		remote:     opts.Primary,
		listening:  cfg.UseKVEvents && opts.Primary == nil,
		catalog:    map[uint64]*catalogEntry{},
		ledger:     newLedger(cfg.MaxReservations, cfg.MaxReservationBytes),
		pending:    newPendingCache(cfg.SelectionCacheTTL, cfg.SelectionCacheMaxEntries, cfg.SelectionCacheMaxBytes),
		plans:      newPlanRegistry(cfg.MaxReservations),
		logf:       opts.Logf,
		loraFilter: opts.LoraFilter,

		affinitySink: opts.Affinity,
		writerID:     opts.WriterID,
		closing:      make(chan struct{}),
		mayWait:      cfg.Sched.QueueThreshold != nil || cfg.Sched.Policy != nil || cfg.SessionAffinity.TTL > 0,

		disaggPolicy: cfg.Sched.DisaggPolicy(),
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
	s.policies, _ = cfg.policyRegistry() // validated above
	if s.logf == nil {
		s.logf = func(string, ...any) {}
	}
	m := map[partKey]*partition{}
	s.parts.Store(&m)
	s.scratch.New = func() any {
		sc := new(scratch)
		if cfg.Tracking.Keyed {
			sc.kh = newKeyedHasher(&cfg.Tracking)
		}
		return sc
	}
	return s, nil
}

// Config returns the service's configuration.
func (s *Service) Config() Config { return s.cfg }

// Close marks the service as shutting down: readiness turns false and every
// selection, booking and registration fails as not ready ("selection
// service is shutting down"), waiting selections included. Lifecycle calls
// keep working. Close does not close the Ingress (the host owns it).
func (s *Service) Close() {
	s.closed.Store(true)
	s.CancelWaits()
}

// CancelWaits ends every waiting selection (a router queue, a session's
// initialization) as shutting down, and every later wait at once, without
// refusing new work: a host calls it when it starts draining, so that
// waiters do not hold the drain. Close implies it.
func (s *Service) CancelWaits() { s.closeOnce.Do(func() { close(s.closing) }) }

// MayWait reports whether a selection can wait (a router queue, a session
// being initialized by another booking): a host then passes a context that
// ends when its caller goes away (SelectContext, SelectAndReserveContext).
func (s *Service) MayWait() bool { return s.mayWait }

// Sweep runs the periodic maintenance at now: live reservations older than
// the expiry guard are released (in-flight claims are kept), then
// disaggregated plans older than it, and expired pending selections are
// removed. It returns the number of reservations expired.
func (s *Service) Sweep(now time.Time) int {
	n := s.expire(now.UnixNano())
	s.expirePlans(now.UnixNano())
	s.pending.sweep(now)
	// The router queue's periodic recheck (Dynamo's runs every 60 s).
	for _, p := range *s.parts.Load() {
		p.kick()
	}
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
	// BookRefused counts bookings refused at a reservation limit.
	BookRefused                    uint64
	ReplayHit, ReplayMiss          uint64
	LifecycleOK, LifecycleNotFound uint64
	// Freed, Expired, WorkerGone, ReplicaFreed and ReplicaReplaced count
	// released reservations by cause: DELETE, the expiry guard, their
	// worker rank leaving, a peer's free, a peer's admission of the id.
	Freed, Expired, WorkerGone    uint64
	ReplicaFreed, ReplicaReplaced uint64
	// ReplicaApplied counts peer events applied; ReplicaDropped those
	// skipped, by ReplicaDrop.
	ReplicaApplied uint64
	ReplicaDropped [NumReplicaDrops]uint64
	// Recovery is what startup recovery restored (nil: none ran).
	Recovery *Recovery
	// Reservations are the live requests in the ledger (in-flight claims
	// included) and ReservationBytes what they count against the byte
	// limit; MaxReservations and MaxReservationBytes are the limits.
	Reservations, MaxReservations         int64
	ReservationBytes, MaxReservationBytes int64
	PendingEntries                        int
	PendingBytes                          int64
	SchedulableWorkers                    int64
	Listeners, MaxListeners               int
	Partitions                            int
	IndexBlocks                           [radix.NumTiers]int64
	// IndexMaxBlocksPerRank is the blocks one worker rank may hold in a
	// partition's index (radix.Config.MaxBlocksPerRank, default applied).
	IndexMaxBlocksPerRank int
	// EventsApplied counts the KV events the partitions' indexes
	// processed; EventsDropped what they did not apply, by
	// radix.DropReason (events, or single hashes of a removal), summed
	// over the partitions.
	EventsApplied uint64
	EventsDropped [radix.NumDropReasons]uint64
	// Approx and Predicted sum the approximate primary indexes and the
	// predicted-TTL side indexes over the partitions (zero when absent).
	Approx, Predicted radix.ApproxStats
	// CatalogPublishes counts the partition snapshots published by catalog
	// changes (one per affected partition for a reconciler's batch).
	CatalogPublishes uint64
	// Plans are the live disaggregated plans (in-flight included);
	// PlansOK and PlansFailed count PlanDisagg outcomes, PlansExpired the
	// plans Sweep removed. PlanProbeFailed counts prefill-busy probes that
	// failed (the signal is then unknown); PlanFreeFailed the compensating
	// or releasing frees that found the booking already ended.
	Plans                int64
	PlansOK, PlansFailed uint64
	PlansExpired         uint64
	PlanProbeFailed      uint64
	PlanFreeFailed       uint64
	// Hints counts booking responses that carried a kv_hint;
	// HintsNoIndex bookings of a hint-capable partition that could not
	// look for one (no local event-driven index).
	Hints, HintsNoIndex uint64
	// PrefillCreditTokens sums the booked prefill tokens the partitions'
	// KV events showed computed (sched.WorkerLoad.CreditStored);
	// StoredEventsCredited and StoredEventsUncredited count the
	// device-tier BlockStored events that credited a booking and those
	// that matched none (output blocks, requests booked elsewhere, or
	// bookings whose hashes are not the tracking chain).
	PrefillCreditTokens                          uint64
	StoredEventsCredited, StoredEventsUncredited uint64
}

// Stats sums the partitions' index stats and the service's counters. It
// takes the catalog lock only to read the listener count.
func (s *Service) Stats() Stats {
	st := Stats{
		SelectOK:            s.stats.selectOK.Load(),
		SelectFailed:        s.stats.selectFailed.Load(),
		BookOK:              s.stats.bookOK.Load(),
		BookConflict:        s.stats.bookConflict.Load(),
		BookFailed:          s.stats.bookFailed.Load(),
		BookRefused:         s.stats.bookRefused.Load(),
		ReplayHit:           s.stats.replayHit.Load(),
		ReplayMiss:          s.stats.replayMiss.Load(),
		LifecycleOK:         s.stats.lifecycleOK.Load(),
		LifecycleNotFound:   s.stats.lifecycle404.Load(),
		Freed:               s.stats.released[releasedFree].Load(),
		Expired:             s.stats.released[releasedExpired].Load(),
		WorkerGone:          s.stats.released[releasedWorkerGone].Load(),
		ReplicaFreed:        s.stats.released[releasedReplica].Load(),
		ReplicaReplaced:     s.stats.released[releasedReplaced].Load(),
		ReplicaApplied:      s.stats.replicaApplied.Load(),
		Reservations:        s.ledger.count.Load(),
		MaxReservations:     s.ledger.maxCount,
		ReservationBytes:    s.ledger.bytes.Load(),
		MaxReservationBytes: s.ledger.maxBytes,
		SchedulableWorkers:  s.schedulableWorkers(),
		MaxListeners:        s.cfg.MaxListeners,
		CatalogPublishes:    s.stats.publishes.Load(),
		Plans:               s.plans.count.Load(),
		PlansOK:             s.stats.planOK.Load(),
		PlansFailed:         s.stats.planFailed.Load(),
		PlansExpired:        s.stats.planExpired.Load(),
		PlanProbeFailed:     s.stats.planProbeFailed.Load(),
		PlanFreeFailed:      s.stats.planFreeFailed.Load(),
		Hints:               s.stats.hints.Load(),
		HintsNoIndex:        s.stats.hintsNoIndex.Load(),
	}
	st.Recovery = s.recovery.Load()
	for d := range st.ReplicaDropped {
		st.ReplicaDropped[d] = s.stats.replicaDropped[d].Load()
	}
	st.Listeners = s.listenerRanks()
	st.PendingEntries, st.PendingBytes = s.pending.size()
	st.IndexMaxBlocksPerRank = cmp.Or(s.cfg.IndexMaxBlocksPerRank, radix.DefaultMaxBlocksPerRank)
	parts := *s.parts.Load()
	st.Partitions = len(parts)
	for _, p := range parts {
		is := p.index.Stats()
		for t := range is.Blocks {
			st.IndexBlocks[t] += is.Blocks[t]
		}
		if p.approx == nil {
			// An approximate primary's events are the service's own
			// recordings, not KV events.
			st.EventsApplied += is.EventsApplied
			for r, d := range is.Dropped {
				st.EventsDropped[r] += d
			}
		}
		addApprox(&st.Approx, p.approx)
		addApprox(&st.Predicted, p.side)
		st.PrefillCreditTokens += p.credit.tokens.Load()
		st.StoredEventsCredited += p.credit.events.Load()
		st.StoredEventsUncredited += p.credit.none.Load()
	}
	return st
}

func addApprox(sum *radix.ApproxStats, a *radix.Approx) {
	if a == nil {
		return
	}
	st := a.Stats()
	sum.Blocks += st.Blocks
	sum.MaxBlocks += st.MaxBlocks
	sum.Recorded += st.Recorded
	sum.Expired += st.Expired
	sum.Pruned += st.Pruned
	sum.Prunes += st.Prunes
}
