package radix

import (
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
)

// Config configures an Index.
type Config struct {
	// Shards is the number of independent trees workers are spread over, by
	// worker id (all ranks of a worker share a shard). Each shard has its
	// own writer lock, so writers of different shards never contend; a
	// match walks every shard. 0 picks DefaultShards().
	Shards int
	// MaxBlocksPerRank bounds the blocks one worker rank holds over all
	// tiers; 0 picks DefaultMaxBlocksPerRank. A store that takes a rank
	// past it clears the rank (DropRankOverCapacity): an engine frees
	// blocks as it stores new ones, so a rank that keeps growing has lost
	// its removes (gaps without replay) or misbehaves, and its stale
	// blocks would otherwise grow the index for as long as it lives. The
	// rank is rebuilt from its next events.
	MaxBlocksPerRank int
}

// DefaultMaxBlocksPerRank is 8 Mi blocks, 128 Mi tokens at block size 16:
// an order of magnitude above the largest GPU pool plus CPU and disk
// offload tiers a rank reports today, and about 250 MiB of index.
const DefaultMaxBlocksPerRank = 1 << 23

// DefaultShards is the shard count used when Config.Shards is 0: one.
//
// Measured with BenchmarkMixed on 2 cores (matches on every core, one or two
// writer goroutines; block ops/s, one run, 2026-11-29):
//
//	writers=1: shards=1 205 M, shards=2 156 M, shards=4 145 M
//	writers=2: shards=1  93 M, shards=2  95 M, shards=4  79 M
//
// Every match walks every shard, so shards cost reads; they pay only when
// several writer goroutines contend for one writer lock on more cores than
// this machine has. Set Config.Shards to measure that on a bigger machine.
func DefaultShards() int { return 1 }

// ErrConfig marks an invalid Config.
var ErrConfig = errors.New("radix: invalid config")

// Validate reports a Config that cannot work.
func (c Config) Validate() error {
	if c.Shards < 0 || c.Shards > 1024 {
		return fmt.Errorf("%w: shards %d outside [0, 1024]", ErrConfig, c.Shards)
	}
	if c.MaxBlocksPerRank < 0 {
		return fmt.Errorf("%w: max blocks per rank %d is negative", ErrConfig, c.MaxBlocksPerRank)
	}
	return nil
}

// Index is the concurrent KV prefix index of one partition (one block size):
// a device-tier tree plus lower tiers, sharded by worker.
//
// Apply and ApplyBatch may be called from any number of goroutines; events of
// one worker must come from one goroutine at a time, in order (the host's
// sticky writer does that). Match, PrefixHashes, Dump and Stats never wait
// for writers.
type Index struct {
	shards           []*shard
	maxBlocksPerRank int
}

// MaxBlocksPerRank is the bound Config.MaxBlocksPerRank set (its default
// applied), for metrics.
func (ix *Index) MaxBlocksPerRank() int { return ix.maxBlocksPerRank }

type shard struct {
	mu    sync.Mutex // serialises writers; readers never take it
	tree  *Tree
	lower [numTiers]*lowerTier // index TierDevice unused
	// held counts the blocks of each worker rank over all tiers; a rank with
	// a count is a "worker" in Stats. Guarded by mu.
	held map[WorkerKey]int64
	// maxHeld is Config.MaxBlocksPerRank (its default applied).
	maxHeld int64
	stats   counters
	checks  uint64 // mutations, for the invariants build (see checkBudget)
}

// counters are written under the shard lock and read by Stats without it.
type counters struct {
	blocks  [numTiers]atomic.Int64
	workers atomic.Int64
	applied atomic.Uint64
	dropped [numDropReasons]atomic.Uint64
}

// New returns an empty index.
func New(cfg Config) (*Index, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	n := cfg.Shards
	if n == 0 {
		n = DefaultShards()
	}
	maxHeld := int64(cfg.MaxBlocksPerRank)
	if maxHeld == 0 {
		maxHeld = DefaultMaxBlocksPerRank
	}
	ix := &Index{shards: make([]*shard, n), maxBlocksPerRank: int(maxHeld)}
	for i := range ix.shards {
		s := &shard{tree: NewTree(), held: make(map[WorkerKey]int64), maxHeld: maxHeld}
		for t := TierHostPinned; t < numTiers; t++ {
			s.lower[t] = newLowerTier()
		}
		ix.shards[i] = s
	}
	return ix, nil
}

func (ix *Index) shardFor(worker uint64) *shard {
	if len(ix.shards) == 1 {
		return ix.shards[0]
	}
	// Fibonacci hashing spreads sequential worker ids.
	return ix.shards[(worker*0x9E3779B97F4A7C15)>>32%uint64(len(ix.shards))]
}

// Apply applies one event. It reports whether the event took effect as a
// whole; partial effects and drops are counted in Stats.
func (ix *Index) Apply(ev *Event) bool {
	s := ix.shardFor(ev.Worker.WorkerID)
	s.mu.Lock()
	ok := s.applyLocked(ev)
	if invariants {
		s.afterMutationLocked()
	}
	s.mu.Unlock()
	return ok
}

// ApplyBatch applies events in order, taking each shard's lock once per run
// of consecutive events for that shard.
func (ix *Index) ApplyBatch(evs []Event) {
	for i := 0; i < len(evs); {
		s := ix.shardFor(evs[i].Worker.WorkerID)
		s.mu.Lock()
		for ; i < len(evs) && ix.shardFor(evs[i].Worker.WorkerID) == s; i++ {
			s.applyLocked(&evs[i])
			if invariants {
				s.afterMutationLocked()
			}
		}
		s.mu.Unlock()
	}
}

// Restore applies a dump's events (Dump's order: parents first) and
// returns how many the index applied. A rank whose stored blocks in the
// dump pass MaxBlocksPerRank is skipped whole, counted once as
// DropRankOverCapacity, rather than cut at an arbitrary point of the
// breadth-first replay (a peer with a larger bound dumped it).
func (ix *Index) Restore(evs []Event) int {
	held := map[WorkerKey]int64{}
	for i := range evs {
		if evs[i].Kind == Stored {
			held[evs[i].Worker] += int64(len(evs[i].Blocks))
		}
	}
	keep := evs
	for w, n := range held {
		if n > int64(ix.maxBlocksPerRank) {
			ix.shardFor(w.WorkerID).drop(DropRankOverCapacity)
			keep = slices.DeleteFunc(slices.Clone(keep), func(ev Event) bool { return ev.Worker == w })
		}
	}
	before := ix.Stats().EventsApplied
	ix.ApplyBatch(keep)
	return int(ix.Stats().EventsApplied - before)
}

// RemoveWorker drops every rank of a worker in every tier.
func (ix *Index) RemoveWorker(workerID uint64) {
	s := ix.shardFor(workerID)
	s.mu.Lock()
	defer s.mu.Unlock()
	var ranks []WorkerKey
	for w := range s.held {
		if w.WorkerID == workerID {
			ranks = append(ranks, w)
		}
	}
	for _, w := range ranks {
		s.clearLocked(w)
	}
	if invariants {
		s.afterMutationLocked()
	}
}

func (s *shard) drop(r DropReason) { s.stats.dropped[r].Add(1) }

func (s *shard) applyLocked(ev *Event) bool {
	if ev.Tier >= numTiers {
		s.drop(DropUnknownKind)
		return false
	}
	ok := true
	switch ev.Kind {
	case Stored:
		if ev.Tier == TierDevice {
			_, reason, dropped := s.tree.Store(ev)
			if dropped {
				s.drop(reason)
				if reason != DropHashConflict {
					return false // dropped whole
				}
				ok = false // applied up to the conflict
			}
		} else {
			if s.tree.hasDuplicates(ev) {
				s.drop(DropInvalidSequence)
				return false
			}
			s.lower[ev.Tier].store(ev)
		}
	case Removed:
		unknown := 0
		if ev.Tier == TierDevice {
			unknown = s.tree.RemoveMany(ev.Worker, ev.Hashes)
		} else {
			for _, h := range ev.Hashes {
				if !s.lower[ev.Tier].remove(ev.Worker, h) {
					unknown++
				}
			}
		}
		s.stats.dropped[DropUnknownBlock].Add(uint64(unknown))
	case Cleared:
		s.clearLocked(ev.Worker)
	default:
		s.drop(DropUnknownKind)
		return false
	}
	s.stats.applied.Add(1)
	if held := s.refreshLocked(ev.Worker); ev.Kind == Stored && held > s.maxHeld {
		s.clearLocked(ev.Worker)
		s.drop(DropRankOverCapacity)
		s.refreshLocked(ev.Worker)
		return false
	}
	return ok
}

func (s *shard) clearLocked(w WorkerKey) {
	s.tree.Clear(w)
	for t := TierHostPinned; t < numTiers; t++ {
		s.lower[t].clear(w)
	}
	s.refreshLocked(w)
}

// refreshLocked recomputes w's held count and the exported gauges, and
// returns the count.
func (s *shard) refreshLocked(w WorkerKey) int64 {
	var n int64
	if wb := s.tree.workers[w]; wb != nil {
		n += int64(wb.lookup.Len())
	}
	s.stats.blocks[TierDevice].Store(s.tree.blocks)
	for t := TierHostPinned; t < numTiers; t++ {
		n += int64(len(s.lower[t].byWorker[w]))
		s.stats.blocks[t].Store(s.lower[t].blocks)
	}
	if n == 0 {
		delete(s.held, w)
	} else {
		s.held[w] = n
	}
	s.stats.workers.Store(int64(len(s.held)))
	return n
}

// Match fills r with every worker rank holding a prefix of the request whose
// local block hashes are q: device depth, then host, disk and external
// extensions, each lower tier continuing from where the previous tier
// stopped. r is reset first; with a warmed-up r, Match does not allocate.
// Matches are in no particular order.
func (ix *Index) Match(q []uint64, r *Result) {
	r.Reset()
	if len(q) == 0 {
		return
	}
	for _, s := range ix.shards {
		s.tree.match(q, r)
	}
	for t := TierHostPinned; t < numTiers; t++ {
		for _, s := range ix.shards {
			s.lower[t].extend(q, r, t)
		}
	}
}

// PrefixHashes appends to dst w's external hashes of the first (at most
// limit) device blocks of q that w holds; entry i is request block i.
func (ix *Index) PrefixHashes(dst []uint64, w WorkerKey, q []uint64, limit int) []uint64 {
	return ix.shardFor(w.WorkerID).tree.PrefixHashes(dst, w, q, limit)
}

// Dump returns the index as Stored events that rebuild it when applied in
// order to an empty index: the device tree breadth first (parents before
// children), then each lower tier one block per event. EventID counts from
// 0. The snapshot is weakly consistent under concurrent writes.
func (ix *Index) Dump() []Event {
	var out []Event
	emit := func(ev *Event) {
		c := *ev
		c.Blocks = append([]Block(nil), ev.Blocks...)
		c.EventID = uint64(len(out))
		out = append(out, c)
	}
	for _, s := range ix.shards {
		s.tree.dump(emit)
	}
	for t := TierHostPinned; t < numTiers; t++ {
		for _, s := range ix.shards {
			s.lower[t].dump(t, emit)
		}
	}
	return out
}

// Stats is a cheap snapshot of the index's size and event counters.
type Stats struct {
	// Blocks counts (worker rank, block) pairs per tier.
	Blocks [numTiers]int64
	// Workers counts worker ranks holding at least one block.
	Workers int64
	// EventsApplied counts events that were processed (possibly with
	// per-hash drops); Dropped counts drops by reason.
	EventsApplied uint64
	Dropped       [numDropReasons]uint64
}

// NumTiers and NumDropReasons size the arrays of Stats.
const (
	NumTiers       = int(numTiers)
	NumDropReasons = int(numDropReasons)
)

// Stats sums the shards' counters. It takes no lock.
func (ix *Index) Stats() Stats {
	var st Stats
	for _, s := range ix.shards {
		for t := range st.Blocks {
			st.Blocks[t] += s.stats.blocks[t].Load()
		}
		st.Workers += s.stats.workers.Load()
		st.EventsApplied += s.stats.applied.Load()
		for r := range st.Dropped {
			st.Dropped[r] += s.stats.dropped[r].Load()
		}
	}
	return st
}
