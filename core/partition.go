package core

import (
	"cmp"
	"slices"
	"sync/atomic"

	"github.com/kvselect/kvselect/radix"
	"github.com/kvselect/kvselect/sched"
)

// partKey names a routing partition.
type partKey struct{ model, group string }

// partition is one (model_name, routing_group): its KV index, the loads of
// its schedulable worker ranks and the schedulable view of its workers.
// Partitions are created on first use and never removed, so the block size
// fixed by the first schedulable worker stays (as Dynamo's indexer registry
// does).
type partition struct {
	model, group string
	// index is the local primary index: event-driven, or approx's index
	// (written only through approx) when the primary is approximate. With
	// a remote primary it stays empty.
	index *radix.Index
	// approx is the approximate primary (no KV events), else nil; side is
	// the predicted-TTL side index, else nil (index.go).
	approx, side *radix.Approx
	// primary is what selections match against: localIndex{index} or the
	// service's remote index.
	primary PrimaryIndex
	sink    *partitionSink
	// affinity is the session table (nil: session affinity off), queue
	// the router queue (nil: the model's profile never queues).
	// Immutable after creation.
	affinity *affinityTable
	queue    *routerQueue
	// policy is the partition's selection policy (Config.policyFor).
	policy *sched.SelectionPolicy

	// credit counts creditStored's outcomes: tokens credited to bookings,
	// device-tier Stored events that credited some, and those that
	// credited none.
	credit struct{ tokens, events, none atomic.Uint64 }

	// snap is the immutable schedulable view the selection paths read
	// without a lock; rebuilt from m by publish on every catalog change.
	snap atomic.Pointer[snapshot]

	// m is the schedulable membership, behind its own lock (members.go).
	m members
}

// snapshot is the schedulable view of a partition. Immutable once
// published.
type snapshot struct {
	blockSize uint32
	isEagle   bool
	// workers are the eligibility rows, sorted by worker id.
	workers []sched.Worker
	// views[i] is workers[i]'s routing data.
	views []workerView
	// ranks is the number of (worker, rank) rows.
	ranks int
	// hintCapable: some worker advertises a router_hint_worker_type, so
	// bookings look for a kv hint source.
	hintCapable bool
	// anyAdapters: some worker serves a LoRA adapter, so a request naming
	// one is narrowed (lora.go).
	anyAdapters bool
	// held are the members whose engine is down (SetEngineAvailable),
	// sorted by worker id, heldViews[i] held[i]'s routing data: not
	// eligibility rows (no selection sees them), but load still finds
	// them, so their bookings' credits and replica mirrors apply and
	// /loads shows their booked load. A worker is in workers or held,
	// never both.
	held      []uint64
	heldViews []workerView
}

// workerView is the routing data of one schedulable worker.
type workerView struct {
	endpoint      string
	totalKVBlocks int64
	maxBatched    int64
	dpStart       uint32
	// loads[r-dpStart] is rank r's load handle.
	loads []*sched.WorkerLoad
	// hintType is router_hint_worker_type ("" none); hintEndpoints its
	// router_hint_source_control_endpoints by global DP rank;
	// stateAgent: kv_event_source_mode is state_agent_v2, never a hint
	// source.
	hintType      string
	hintEndpoints map[uint32]string
	stateAgent    bool
	// adapters are the LoRA adapters the worker serves: its record's
	// lora_adapters and its engine's report.
	adapters adapterSet
}

// find returns the index of worker id in the snapshot, or -1. A binary
// search by hand: with slices.BinarySearchFunc's call of its comparison
// per step, the 9 finds of a selection over 8 workers (one per
// candidate's load, one for the pick) took 230 to 260 ns, by hand 28 to
// 50 (go test -bench, both in one binary, 3 runs).
func (sn *snapshot) find(id uint64) int {
	ws := sn.workers
	lo, hi := 0, len(ws)
	for lo < hi {
		mid := int(uint(lo+hi) >> 1)
		if ws[mid].ID < id {
			lo = mid + 1
		} else {
			hi = mid
		}
	}
	if lo < len(ws) && ws[lo].ID == id {
		return lo
	}
	return -1
}

// load returns the load handle of a schedulable (worker, rank), or nil.
func (sn *snapshot) load(k radix.WorkerKey) (*workerView, *sched.WorkerLoad) {
	var v *workerView
	if i := sn.find(k.WorkerID); i >= 0 {
		v = &sn.views[i]
	} else if i, ok := slices.BinarySearch(sn.held, k.WorkerID); ok {
		v = &sn.heldViews[i]
	} else {
		return nil, nil
	}
	if k.DPRank < v.dpStart || int(k.DPRank-v.dpStart) >= len(v.loads) {
		return v, nil
	}
	return v, v.loads[k.DPRank-v.dpStart]
}

// partitionLocked returns the partition (model, group), creating it.
func (s *Service) partitionLocked(model, group string) *partition {
	k := partKey{model, group}
	if p, ok := (*s.parts.Load())[k]; ok {
		return p
	}
	p := &partition{model: model, group: group, policy: s.cfg.policyFor(model, group)}
	p.m.workers, p.m.loads = map[uint64]*member{}, map[radix.WorkerKey]*sched.WorkerLoad{}
	s.newIndexes(p)
	p.sink = &partitionSink{p: p}
	p.snap.Store(&snapshot{})
	if prof := s.cfg.profile(model); prof.Queues() {
		p.queue = newRouterQueue(prof, s.clock(), &s.queueStats)
	}
	if s.cfg.SessionAffinity.TTL > 0 {
		p.affinity = newAffinityTable(s.cfg.SessionAffinity, cmp.Or(s.cfg.MaxAffinityEntries, MaxSessionAffinityEntries), s.clock, s.writerID, &s.affinityStats)
		if sink := s.affinitySink; sink != nil {
			p.affinity.publish = func(id string, t AffinityTarget, v affinityVersion) {
				sink.PublishAffinity(&AffinityEvent{
					ModelName: model, RoutingGroup: group, SessionID: id,
					WorkerID: t.WorkerID, DPRank: t.DPRank, HasDPRank: t.HasDPRank, Sequence: v.seq, WriterID: v.writer,
				})
			}
		}
	}
	// Copy on write: readers load the map pointer without a lock.
	m := make(map[partKey]*partition, len(*s.parts.Load())+1)
	for k, v := range *s.parts.Load() {
		m[k] = v
	}
	m[k] = p
	s.parts.Store(&m)
	return p
}

// lookup returns the partition (model, group) or nil. Lock-free.
func (s *Service) lookup(model, group string) *partition {
	return (*s.parts.Load())[partKey{model, group}]
}

// publishLocked publishes p's snapshot, or, inside a batch of catalog
// changes (Service.deferred non-nil), records p for one publish at the
// batch's end. Under Service.mu.
func (s *Service) publishLocked(p *partition) {
	if s.deferred != nil {
		s.deferred[p] = struct{}{}
		return
	}
	p.publish()
	s.stats.publishes.Add(1)
	// Workers came or went: a waiting request may be dispatchable.
	p.kick()
}

// partitionSink is the EventSink of one partition: KV events of its
// workers land in its index, and the blocks a device-tier BlockStored
// reports are credited as computed prefill to the rank's bookings
// (sched.WorkerLoad.CreditStored: A_c).
type partitionSink struct{ p *partition }

// ApplyBatch credits the batch before the index applies it, so that a
// caller that sees a batch's blocks in the index (the simulation's sync
// block, a replica's overlap read) also sees their credit.
func (ps *partitionSink) ApplyBatch(evs []radix.Event) {
	ps.p.creditStored(evs)
	ps.p.index.ApplyBatch(evs)
}

// progressBlockSize is the Booking.BlockSize of a booking in sn: its block
// size, or 0 under keyed tracking hashes, whose sequence hashes are not
// the public chain KV events can be matched to (sched/progress.go).
func (s *Service) progressBlockSize(sn *snapshot) int64 {
	if s.cfg.Tracking.Keyed {
		return 0
	}
	return int64(sn.blockSize)
}

// creditStored credits every device-tier Stored event of evs to the
// booking on its rank it computes (sched.WorkerLoad.CreditStored) and
// counts the outcome. Ranks outside the schedulable view (not registered,
// or not yet) get nothing.
func (p *partition) creditStored(evs []radix.Event) {
	sn := p.snap.Load()
	if sn == nil {
		return
	}
	var tokens, credited, none uint64
	for i := range evs {
		ev := &evs[i]
		if ev.Kind != radix.Stored || ev.Tier != radix.TierDevice || len(ev.Blocks) == 0 {
			continue
		}
		var a int64
		if _, wl := sn.load(ev.Worker); wl != nil {
			a = wl.CreditStored(ev.Blocks)
		}
		if a > 0 {
			tokens += uint64(a)
			credited++
		} else {
			none++
		}
	}
	if credited > 0 {
		p.credit.tokens.Add(tokens)
		p.credit.events.Add(credited)
	}
	if none > 0 {
		p.credit.none.Add(none)
	}
}

func (ps *partitionSink) ClearRank(w radix.WorkerKey) {
	p := ps.p
	if p.approx != nil {
		p.approx.ClearRank(w)
	} else {
		p.index.Apply(&radix.Event{Worker: w, Kind: radix.Cleared})
	}
	if p.side != nil {
		p.side.ClearRank(w)
	}
}
