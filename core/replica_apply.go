package core

import (
	"math"
	"strings"
	"time"

	"github.com/kvselect/kvselect/sched"
)

// ReplicaDrop is why ApplyReplica skipped an event.
type ReplicaDrop uint8

const (
	// DropUnknownPartition: no local partition (model, group); replicas
	// never create one.
	DropUnknownPartition ReplicaDrop = iota
	// DropBlockSize: the envelope's block_size differs from the local
	// partition's.
	DropBlockSize
	// DropUnknownWorker: an admission names a (worker, rank) not
	// schedulable here; replicas never create workers.
	DropUnknownWorker
	// DropUnknownRequest: a completion or free names no live request of
	// the partition.
	DropUnknownRequest
	// DropConflict: an admission names an id booked here in another
	// partition, or being booked here right now.
	DropConflict
	// DropCapacity: the ledger is at a reservation limit.
	DropCapacity
	NumReplicaDrops
)

var replicaDropNames = [NumReplicaDrops]string{"unknown_partition", "block_size_mismatch", "unknown_worker", "unknown_request", "conflict", "capacity"}

// String is the drop's metric label.
func (d ReplicaDrop) String() string { return replicaDropNames[d] }

// ApplyReplica applies peers' lifecycle events in order (the reference's
// replica receive path, ai-dynamo/dynamo:
// lib/kv-router/src/services/common/replica_sync.rs): an admission books a
// mirrored reservation (Origin = the sender) on the local worker rank; a
// completion or free acts on the live reservation of the id in the same
// partition, whatever its origin. It never creates a partition or a
// worker, publishes nothing, counts every skipped event by reason
// (Stats.ReplicaDropped) and records each event's outcome in its Dropped
// and Drop fields. The sender's own events must be filtered by the
// caller (it knows its process id).
//
// A peer admission of an id already live here in the same partition
// replaces that record (a stale row: ids are unique across replicas, so
// the local one expired on the peer or was freed there), as the reference
// does.
func (s *Service) ApplyReplica(evs []ReplicaEvent) {
	now := s.clock().UnixNano()
	for i := range evs {
		ev := &evs[i]
		d, ok := s.applyReplica(ev, now)
		ev.Dropped, ev.Drop = !ok, d
		if !ok {
			s.stats.replicaDropped[d].Add(1)
		} else {
			s.stats.replicaApplied.Add(1)
		}
	}
}

// CatalogVersion changes whenever a partition's schedulable workers change
// (it counts snapshot publications). A replica mesh uses it to ask peers
// again for the bookings it could not apply before its workers were
// registered.
func (s *Service) CatalogVersion() uint64 { return s.stats.publishes.Load() }

func (s *Service) applyReplica(ev *ReplicaEvent, now int64) (ReplicaDrop, bool) {
	p := s.lookup(ev.ModelName, ev.RoutingGroup)
	if p == nil {
		return DropUnknownPartition, false
	}
	sn := p.snap.Load()
	if sn.blockSize == 0 {
		// No worker is schedulable here yet: the event is for a worker
		// this replica does not know (a mesh asks again once it does).
		return DropUnknownWorker, false
	}
	if sn.blockSize != ev.BlockSize {
		return DropBlockSize, false
	}
	if ev.Kind == ReplicaAdd {
		return s.applyAdd(p, sn, ev, now)
	}
	r := s.ledger.live(ev.RequestID)
	if r == nil || r.p != p {
		return DropUnknownRequest, false
	}
	switch ev.Kind {
	case ReplicaPrefillCompleted:
		r.slot.CompletePrefill()
		p.kick()
	case ReplicaFree:
		if !s.release(r, releasedReplica) {
			return DropUnknownRequest, false
		}
	}
	return 0, true
}

// applyAdd books a mirrored reservation; see ApplyReplica.
func (s *Service) applyAdd(p *partition, sn *snapshot, ev *ReplicaEvent, now int64) (ReplicaDrop, bool) {
	_, wl := sn.load(ev.Worker)
	if wl == nil {
		return DropUnknownWorker, false
	}
	if old, ok := s.ledger.m.Load(ev.RequestID); ok {
		if old.p != p || old.state.Load() != stateLive {
			return DropConflict, false
		}
		s.release(old, releasedReplaced)
	}
	r := &reservation{
		id: strings.Clone(ev.RequestID), p: p, admitted: now, bytes: recordBytes(ev.RequestID, ev.SequenceHashes), origin: ev.Origin,
		lora: strings.Clone(ev.LoraName), track: ev.TrackPrefillTokens, reuse: s.cfg.Sched.AssumeKVReuse,
		blocks: int32(min(len(ev.SequenceHashes), math.MaxInt32)),
	}
	if ev.ExpectedOutputTokens != nil {
		r.expected, r.hasExpected = *ev.ExpectedOutputTokens, true
	}
	if err := s.ledger.claim(r); err != nil {
		if err == errClaimed {
			return DropConflict, false
		}
		return DropCapacity, false
	}
	var prefill int64
	if ev.TrackPrefillTokens {
		prefill = max(0, ev.EffectivePrefillTokens)
	}
	if err := r.slot.Book(wl, &sched.Booking{SequenceHashes: ev.SequenceHashes, PrefillTokens: prefill, AssumeKVReuse: r.reuse, BlockSize: s.progressBlockSize(sn)}); err != nil {
		s.ledger.remove(r)
		return DropUnknownWorker, false
	}
	r.state.Store(stateLive)
	if wl.Retired() {
		s.release(r, releasedWorkerGone)
	}
	return 0, true
}

// AppendLocalBookings appends an admission for every live reservation booked
// by this process (Origin local), with what it still holds: its tracking
// hashes (private ones without KV reuse), the prefill not yet completed
// (TrackPrefillTokens is false once it is), its LoRA and expected output
// tokens. A replica that joins a mesh applies them to catch up with this
// one's load, which the reference's mesh cannot do (it has no resync). The
// events alias nothing of the ledger.
func (s *Service) AppendLocalBookings(dst []ReplicaEvent) []ReplicaEvent {
	s.ledger.m.Range(func(_ string, r *reservation) bool {
		if r.origin != OriginLocal || r.state.Load() != stateLive {
			return true
		}
		ev := ReplicaEvent{
			Kind: ReplicaAdd, ModelName: r.p.model, RoutingGroup: r.p.group, BlockSize: r.p.snap.Load().blockSize,
			RequestID: r.id, Worker: r.worker(), LoraName: r.lora,
		}
		if r.reuse {
			ev.SequenceHashes = r.slot.AppendHashes(nil)
		} else {
			ev.SequenceHashes = privateHashes(nil, r.id, int(r.blocks))
		}
		if p := r.slot.Prefill(); r.track && p > 0 {
			ev.TrackPrefillTokens, ev.EffectivePrefillTokens = true, p
		}
		if r.hasExpected {
			e := r.expected
			ev.ExpectedOutputTokens = &e
		}
		dst = append(dst, ev)
		return true
	})
	return dst
}

// WorkerPartition returns the partition (model, routing group) and block
// size of worker id while it is schedulable here; ok is false otherwise.
// It is for a replica bus whose events name a worker but no partition
// (Dynamo's ActiveSequenceEvent on its event plane,
// ai-dynamo/dynamo:lib/kv-router/src/protocols.rs): the host fills the
// ReplicaEvent's partition fields from it before ApplyReplica. It takes
// the catalog lock briefly; selections never wait for it.
func (s *Service) WorkerPartition(id uint64) (model, group string, blockSize uint32, ok bool) {
	s.mu.Lock()
	e := s.catalog[id]
	if e == nil || e.rec.Lifecycle != Schedulable {
		s.mu.Unlock()
		return "", "", 0, false
	}
	p := e.part
	s.mu.Unlock()
	return p.model, p.group, p.blockSize(), true
}

// ReleaseMirrors reconciles this process's mirrors of one peer with that
// peer's catch-up snapshot: every live mirror of origin admitted before
// before (on the service's clock) whose id keep rejects is released, as
// by the peer's free (counted as ReplicaFreed). A replica that was cut
// off from its peers missed their frees; the mirrors those frees would
// have ended would otherwise hold load until the expiry guard. Mirrors
// admitted from before on came from live events after the snapshot was
// asked for, and are kept. It returns how many it released.
func (s *Service) ReleaseMirrors(origin Origin, before time.Time, keep func(id string) bool) int {
	if origin == OriginLocal {
		panic("BUG: ReleaseMirrors of the local origin")
	}
	cut, n := before.UnixNano(), 0
	s.ledger.m.Range(func(id string, r *reservation) bool {
		if r.origin == origin && r.admitted < cut && r.state.Load() == stateLive && !keep(id) && s.release(r, releasedReplica) {
			n++
		}
		return true
	})
	return n
}
