package radix

import (
	"cmp"
	"fmt"
	"math"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// Approximate indexing: without KV events, the router predicts what each
// worker rank caches from its own routing decisions, as Dynamo's
// approximate mode does (ai-dynamo/dynamo:lib/kv-router/src/indexer/
// thread_pool.rs, record_routing_decision_hashes, and pruning.rs):
//
//   - A recorded decision is a Stored event from the root: the request's
//     local block hashes, each block's external hash being the public
//     sequence hash of the prefix ending there.
//   - Every recorded (worker rank, block) expires TTL after its last
//     recording, rounded up to ApproxBucket; an expired block is removed
//     with a Removed event. A block is routable up to one bucket longer
//     than the TTL.
//   - The recorded blocks are capped (Dynamo's PruneConfig before #8893:
//     max_tree_size 2^20, pruned to 0.8 of it): a recording that takes the
//     count above MaxBlocks removes the blocks closest to expiry until the
//     count is PruneTarget of MaxBlocks.
const (
	// ApproxBucket is the expiry rounding (Dynamo's EXPIRY_BUCKET).
	ApproxBucket = 100 * time.Millisecond
	// DefaultApproxTTL is router_ttl_secs' default.
	DefaultApproxTTL = 120 * time.Second
	// DefaultApproxMaxBlocks is the cap on recorded (worker rank, block)
	// pairs of one index.
	DefaultApproxMaxBlocks = 1 << 20
	// ApproxPruneTarget is the fraction of MaxBlocks a prune leaves.
	ApproxPruneTarget = 0.8
)

// ApproxConfig configures an Approx.
type ApproxConfig struct {
	// TTL is how long a recorded block stays after its last recording;
	// 0 expires it at the next Expire.
	TTL time.Duration
	// MaxBlocks caps the recorded (worker rank, block) pairs; 0 picks
	// DefaultApproxMaxBlocks.
	MaxBlocks int
	// Shards is the underlying index's Config.Shards.
	Shards int
}

// Validate reports a config that cannot work.
func (c ApproxConfig) Validate() error {
	if c.TTL < 0 {
		return fmt.Errorf("%w: approximate TTL %v is negative", ErrConfig, c.TTL)
	}
	if c.MaxBlocks < 0 {
		return fmt.Errorf("%w: approximate max blocks %d is negative", ErrConfig, c.MaxBlocks)
	}
	return Config{Shards: c.Shards}.Validate()
}

// Approx is an approximate index: an Index written only by Record, whose
// blocks expire. Record, Expire, ClearRank and RemoveWorker serialize on
// one mutex (they are the index's only writers); Match and Dump read the
// index without it and never wait.
//
// Invariant: the timers hold exactly the (worker rank, block) pairs the
// index holds. It is kept because a recording stores a whole prefix from
// the root and refreshes every block of it, so a block never expires
// after its ancestors (its expiry is at most theirs); removals are applied
// deepest first, so each Removed event drops exactly its block.
type Approx struct {
	ix        *Index
	ttl       int64 // ns
	maxBlocks int
	target    int

	mu struct {
		sync.Mutex
		t timers
		// scratch, reused across calls
		seq    []uint64
		ev     Event
		doomed []approxEntry
		evs    []Event
		checks uint64 // mutations, for the invariants build (see checkBudget)
	}
	stats approxCounters
}

type approxCounters struct {
	recorded, expired, pruned, prunes atomic.Uint64
}

// NewApprox returns an empty approximate index.
func NewApprox(cfg ApproxConfig) (*Approx, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	// No per-rank bound: MaxBlocks bounds the recorded blocks, and a
	// rank cleared behind Approx's back would leave its timers stale.
	ix, err := New(Config{Shards: cfg.Shards, MaxBlocksPerRank: math.MaxInt})
	if err != nil {
		return nil, err
	}
	maxBlocks := cfg.MaxBlocks
	if maxBlocks == 0 {
		maxBlocks = DefaultApproxMaxBlocks
	}
	a := &Approx{ix: ix, ttl: int64(cfg.TTL), maxBlocks: maxBlocks, target: int(float64(maxBlocks) * ApproxPruneTarget)}
	a.mu.t.init()
	return a, nil
}

// Index returns the underlying index, for Match, PrefixHashes, Dump and
// Stats. Writing it other than through a is a broken caller protocol.
func (a *Approx) Index() *Index { return a.ix }

// Match is a.Index().Match.
func (a *Approx) Match(q []uint64, r *Result) { a.ix.Match(q, r) }

// expiryOf rounds now+ttl up to the next bucket boundary (boundaries are
// multiples of ApproxBucket since the Unix epoch). A zero TTL expires at
// now, unrounded, as Dynamo's PruneManager does.
func (a *Approx) expiryOf(now int64) int64 {
	if a.ttl == 0 {
		return now
	}
	t := now + a.ttl
	b := int64(ApproxBucket)
	if r := t % b; r != 0 {
		t += b - r
	}
	return t
}

// Record records a routing decision: worker rank w now holds the prefix
// whose local block hashes are local. It first expires what is due at now,
// and prunes to the cap after. Empty local records nothing.
func (a *Approx) Record(w WorkerKey, local []uint64, now time.Time) {
	if len(local) == 0 {
		return
	}
	n := now.UnixNano()
	a.mu.Lock()
	defer a.mu.Unlock()
	if invariants {
		defer a.afterMutationLocked()
	}
	a.expireLocked(n)
	a.mu.seq = SequenceHashes(a.mu.seq[:0], local)
	ev := &a.mu.ev
	*ev = Event{Worker: w, Kind: Stored, Blocks: ev.Blocks[:0]}
	for i, l := range local {
		ev.Blocks = append(ev.Blocks, Block{Hash: a.mu.seq[i], Local: l})
	}
	held := len(local)
	if !a.ix.Apply(ev) {
		// Dropped in part (a sequence-hash collision with another path of
		// the worker): time only the prefix the worker holds.
		held = len(a.ix.PrefixHashes(nil, w, local, len(local)))
	}
	exp := a.expiryOf(n)
	for i := range held {
		a.mu.t.upsert(w, a.mu.seq[i], uint32(i), exp)
	}
	a.stats.recorded.Add(1)
	if a.mu.t.live > a.maxBlocks {
		a.pruneLocked()
	}
}

// Expire removes every block whose expiry is at or before now and returns
// how many it removed. The host calls it every ApproxBucket or so (Record
// also expires); a reader sees an expired block until then.
func (a *Approx) Expire(now time.Time) int {
	n := now.UnixNano()
	a.mu.Lock()
	defer a.mu.Unlock()
	if invariants {
		defer a.afterMutationLocked()
	}
	return a.expireLocked(n)
}

func (a *Approx) expireLocked(now int64) int {
	doomed := a.mu.doomed[:0]
	for len(a.mu.t.buckets) > 0 && a.mu.t.buckets[0].at <= now {
		doomed = a.mu.t.popBucket(doomed)
	}
	a.mu.doomed = doomed
	a.removeLocked(doomed)
	a.stats.expired.Add(uint64(len(doomed)))
	return len(doomed)
}

// pruneLocked removes the blocks closest to expiry until the count is at
// most the prune target.
func (a *Approx) pruneLocked() {
	t := &a.mu.t
	doomed := a.mu.doomed[:0]
	for t.live > a.target && len(t.buckets) > 0 {
		// Within the earliest bucket, deepest blocks first: each one's
		// descendants are in this bucket or an earlier one, hence removed
		// before it.
		start := len(doomed)
		doomed = t.bucketEntries(0, doomed)
		part := doomed[start:]
		slices.SortFunc(part, func(x, y approxEntry) int { return cmp.Compare(y.pos, x.pos) })
		if over := t.live - a.target; over < len(part) {
			part = part[:over]
			doomed = doomed[:start+over]
		}
		for _, e := range part {
			t.remove(e.w, e.h)
		}
	}
	a.mu.doomed = doomed
	a.removeLocked(doomed)
	a.stats.pruned.Add(uint64(len(doomed)))
	a.stats.prunes.Add(1)
}

// removeLocked applies Removed events for entries (already out of the
// timers): one event per worker rank, deepest blocks first.
func (a *Approx) removeLocked(entries []approxEntry) {
	if len(entries) == 0 {
		return
	}
	slices.SortFunc(entries, func(x, y approxEntry) int {
		return cmp.Or(cmpKey(x.w, y.w), cmp.Compare(y.pos, x.pos))
	})
	evs := a.mu.evs[:0]
	for i := 0; i < len(entries); {
		w := entries[i].w
		var hashes []uint64
		if len(evs) < cap(evs) {
			hashes = evs[:len(evs)+1][len(evs)].Hashes[:0]
		}
		for ; i < len(entries) && entries[i].w == w; i++ {
			hashes = append(hashes, entries[i].h)
		}
		evs = append(evs, Event{Worker: w, Kind: Removed, Hashes: hashes})
	}
	a.ix.ApplyBatch(evs)
	a.mu.evs = evs
}

// ClearRank drops everything worker rank w holds.
func (a *Approx) ClearRank(w WorkerKey) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if invariants {
		defer a.afterMutationLocked()
	}
	a.mu.t.dropRank(w)
	a.ix.Apply(&Event{Worker: w, Kind: Cleared})
}

// RemoveWorker drops every rank of a worker.
func (a *Approx) RemoveWorker(workerID uint64) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if invariants {
		defer a.afterMutationLocked()
	}
	for w := range a.mu.t.ranks {
		if w.WorkerID == workerID {
			a.mu.t.dropRank(w)
		}
	}
	a.ix.RemoveWorker(workerID)
}

// ApproxStats is a cheap snapshot for metrics.
type ApproxStats struct {
	// Blocks is the recorded (worker rank, block) pairs now; MaxBlocks the
	// cap.
	Blocks, MaxBlocks int64
	// Recorded counts Record calls; Expired and Pruned the pairs removed
	// by expiry and by the cap; Prunes the prunes.
	Recorded, Expired, Pruned, Prunes uint64
}

// Stats returns the counters; Blocks takes the mutex.
func (a *Approx) Stats() ApproxStats {
	a.mu.Lock()
	live := a.mu.t.live
	a.mu.Unlock()
	return ApproxStats{
		Blocks: int64(live), MaxBlocks: int64(a.maxBlocks),
		Recorded: a.stats.recorded.Load(), Expired: a.stats.expired.Load(),
		Pruned: a.stats.pruned.Load(), Prunes: a.stats.prunes.Load(),
	}
}

// Restore applies one event of a peer's dump (startup recovery) and times
// the device blocks it stores as if recorded at now, each no later than its
// parent (so a block still never outlives its ancestors). It reports
// whether the event took effect whole. Only Stored events can be restored:
// a dump holds nothing else. Lower-tier blocks are stored untimed, as the
// reference's approximate mode keeps them.
func (a *Approx) Restore(ev *Event, now time.Time) bool {
	if ev.Kind != Stored {
		return false
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if invariants {
		defer a.afterMutationLocked()
	}
	if ev.Tier != TierDevice {
		return a.ix.Apply(ev)
	}
	t := &a.mu.t
	pos, at := uint32(0), a.expiryOf(now.UnixNano())
	if ev.HasParent {
		i, ok := t.ranks[ev.Worker][ev.ParentHash]
		if !ok {
			a.ix.shardFor(ev.Worker.WorkerID).drop(DropParentNotFound)
			return false
		}
		pos, at = t.slots[i].pos+1, min(at, t.slots[i].at)
	}
	ok := a.ix.Apply(ev)
	s := a.ix.shardFor(ev.Worker.WorkerID)
	wb := s.tree.workers[ev.Worker]
	for i, b := range ev.Blocks {
		if wb == nil {
			break
		}
		if _, held := s.tree.locate(wb, ev.Worker, b.Hash); !held {
			break
		}
		t.upsert(ev.Worker, b.Hash, pos+uint32(i), at)
	}
	if t.live > a.maxBlocks {
		a.pruneLocked()
	}
	return ok
}
