package core

// AffinityEvent is one session binding exchanged with replica peers on
// dynamo.session-affinity.v1 (the reference's AffinityBindingEvent,
// ai-dynamo/dynamo:lib/kv-router/src/services/common/replica_sync.rs):
// the partition, the session, the target and its version. Published on a
// new bind, a soft re-bind, a bound booking's commit and every lease
// release; applied with ApplyAffinity. Fields are valid only during the
// call that receives the event: a sink that keeps it must copy it.
type AffinityEvent struct {
	ModelName, RoutingGroup string
	SessionID               string
	WorkerID                uint64
	DPRank                  uint32
	HasDPRank               bool // false: dp_rank nil (a worker-only binding)
	Sequence, WriterID      uint64
}

// AffinitySink receives the outbound affinity events. PublishAffinity
// must not block (drop when full) and is called without core locks held,
// from request goroutines, concurrently.
type AffinitySink interface {
	PublishAffinity(ev *AffinityEvent)
}

// AffinityApply is the outcome of one applied (or skipped) affinity event.
type AffinityApply uint8

const (
	// AffinityInserted: a new bound entry, no leases.
	AffinityInserted AffinityApply = iota
	// AffinityRefreshed: the same target at a version >= the local one:
	// version and idle deadline refreshed.
	AffinityRefreshed
	// AffinityReplacedExpired: the local entry had idled out.
	AffinityReplacedExpired
	// AffinityReplacedNewer: another target at a newer version.
	AffinityReplacedNewer
	// AffinityIgnoredInitializing: a local booking is choosing the worker.
	AffinityIgnoredInitializing
	// AffinityIgnoredConflict: another target at an older version.
	AffinityIgnoredConflict
	// AffinityRejectedSessionID: the id is over MaxSessionIDBytes.
	AffinityRejectedSessionID
	// AffinityRejectedCapacity: the table is full.
	AffinityRejectedCapacity
	// AffinityDroppedOwn: this replica's own event.
	AffinityDroppedOwn
	// AffinityDroppedPartition: no local partition with a table.
	AffinityDroppedPartition
	// AffinityDroppedWorker: the target is not schedulable here (replicas
	// never create workers).
	AffinityDroppedWorker
	numAffinityApply
)

var affinityApplyNames = [numAffinityApply]string{
	"inserted", "refreshed", "replaced_expired", "replaced_newer", "ignored_initializing", "ignored_conflict",
	"rejected_session_id", "rejected_capacity", "dropped_own", "dropped_partition", "dropped_worker",
}

// String is the outcome's metric label.
func (a AffinityApply) String() string { return affinityApplyNames[a] }

// NumAffinityApply is the length of AffinityStats.Applied.
const NumAffinityApply = int(numAffinityApply)

// ApplyAffinity applies peers' affinity events in order, with the
// reference's rules (ai-dynamo/dynamo:
// lib/kv-router/src/services/selection/affinity.rs, apply_replica_update,
// and affinity/replication.rs in the later tree): an event is skipped when
// its writer is this replica, when its partition has no table here, and
// when its target is not schedulable here; the table's sequence moves past
// the event's even then (a Lamport clock), except for its own events and
// other partitions'. Every outcome is counted (AffinityStats.Applied).
func (s *Service) ApplyAffinity(evs []AffinityEvent) {
	for i := range evs {
		s.affinityStats.applied[s.applyAffinity(&evs[i])].Add(1)
	}
}

func (s *Service) applyAffinity(ev *AffinityEvent) AffinityApply {
	if ev.WriterID == s.writerID {
		return AffinityDroppedOwn
	}
	p := s.lookup(ev.ModelName, ev.RoutingGroup)
	if p == nil || p.affinity == nil {
		return AffinityDroppedPartition
	}
	t := p.affinity
	target := AffinityTarget{WorkerID: ev.WorkerID, DPRank: ev.DPRank, HasDPRank: ev.HasDPRank}
	if len(ev.SessionID) > MaxSessionIDBytes {
		return AffinityRejectedSessionID
	}
	t.observe(ev.Sequence)
	if !p.snap.Load().schedulable(target) {
		return AffinityDroppedWorker
	}
	return t.apply(ev.SessionID, target, affinityVersion{ev.Sequence, ev.WriterID})
}

// apply is the table's half of ApplyAffinity (the session id is checked).
func (t *affinityTable) apply(id string, target AffinityTarget, v affinityVersion) AffinityApply {
	now := t.now()
	sh := t.shard(id)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	e := sh.m[id]
	switch {
	case e == nil:
		if !t.reserve() {
			return AffinityRejectedCapacity
		}
		sh.m[cloneString(id)] = &affinityEntry{bound: true, revision: t.revision.Add(1), target: target, version: v, deadline: now + t.ttl}
		return AffinityInserted
	case !e.bound:
		return AffinityIgnoredInitializing
	case e.leases == 0 && e.deadline <= now:
		*e = affinityEntry{bound: true, revision: t.revision.Add(1), target: target, version: v, deadline: now + t.ttl}
		return AffinityReplacedExpired
	case e.target == target && !v.less(e.version):
		e.version, e.deadline = v, now+t.ttl
		return AffinityRefreshed
	case e.version.less(v):
		e.target, e.version, e.deadline = target, v, now+t.ttl
		return AffinityReplacedNewer
	}
	return AffinityIgnoredConflict
}

// schedulable reports whether target is schedulable in the snapshot: its
// worker is, and so is its rank when it names one.
func (sn *snapshot) schedulable(t AffinityTarget) bool {
	i := sn.find(t.WorkerID)
	if i < 0 {
		return false
	}
	if !t.HasDPRank {
		return true
	}
	w := &sn.workers[i]
	return t.DPRank >= w.DPStart && t.DPRank-w.DPStart < w.DPSize
}
