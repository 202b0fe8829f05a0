package core

import (
	"cmp"
	"slices"

	"github.com/kvselect/kvselect/radix"
)

// IndexerMatch is the tiered match of one query: every worker rank that
// holds a prefix of it, by (worker, rank). Block counts; the host scales
// them by BlockSize for the token counts the reference reports.
type IndexerMatch struct {
	BlockSize uint32
	Matches   []radix.Match
}

// partitionOrNotFound returns partition (model, group), or the reference's
// not-found error.
func (ix *Indexer) partitionOrNotFound(model, group string) (*ixPartition, error) {
	p := (*ix.parts.Load())[partKey{model, cmp.Or(group, DefaultPartition)}]
	if p == nil {
		return nil, errorf(ErrNotFound, "no indexer for model=%s routing_group=%s", model, cmp.Or(group, DefaultPartition))
	}
	return p, nil
}

// Query matches token ids (POST /query): local block hashes with the
// partition's block size, salted by the LoRA name and the cache salt
// (empty is absent). dst's Matches are reused.
func (ix *Indexer) Query(model, group string, tokens []uint32, lora, salt string, dst *IndexerMatch) error {
	p, err := ix.partitionOrNotFound(model, group)
	if err != nil {
		return err
	}
	sc := ix.scratch.Get().(*ixScratch)
	defer ix.scratch.Put(sc)
	sc.local = radix.LocalHashes(sc.local[:0], tokens, int(p.blockSize), radix.HashSeed(lora, salt))
	ix.match(p, sc.local, sc, dst)
	return nil
}

// QueryByHash matches local block hashes (POST /query_by_hash and
// /query_tiered_by_hash).
func (ix *Indexer) QueryByHash(model, group string, hashes []uint64, dst *IndexerMatch) error {
	p, err := ix.partitionOrNotFound(model, group)
	if err != nil {
		return err
	}
	sc := ix.scratch.Get().(*ixScratch)
	defer ix.scratch.Put(sc)
	ix.match(p, hashes, sc, dst)
	return nil
}

func (ix *Indexer) match(p *ixPartition, q []uint64, sc *ixScratch, dst *IndexerMatch) {
	p.index.Match(q, &sc.res)
	dst.BlockSize = p.blockSize
	dst.Matches = append(dst.Matches[:0], sc.res.Matches...)
	slices.SortFunc(dst.Matches, func(a, b radix.Match) int {
		return cmp.Or(cmp.Compare(a.Worker.WorkerID, b.Worker.WorkerID), cmp.Compare(a.Worker.DPRank, b.Worker.DPRank))
	})
}

// Dump returns every partition's index as Stored events, sorted by key,
// in the /dump format of the selection service.
func (ix *Indexer) Dump() []PartitionDump {
	parts := *ix.parts.Load()
	out := make([]PartitionDump, 0, len(parts))
	for _, p := range parts {
		out = append(out, PartitionDump{Key: p.model + ":" + p.group, ModelName: p.model, RoutingGroup: p.group, BlockSize: p.blockSize, Events: p.index.Dump()})
	}
	slices.SortFunc(out, func(a, b PartitionDump) int { return cmp.Compare(a.Key, b.Key) })
	return out
}

// Restore applies a peer's dump of one partition (startup recovery),
// creating the partition with blockSize; an existing partition keeps its
// block size (the reference's get_or_create_indexer only warns). It
// returns how many events the index applied.
func (ix *Indexer) Restore(model, group string, blockSize uint32, events []radix.Event) (int, error) {
	if blockSize == 0 {
		return 0, errorf(ErrBadRequest, "block_size must be greater than 0 for model=%s routing_group=%s", model, group)
	}
	ix.mu.Lock()
	p := ix.partitionLocked(partKey{cloneString(model), cloneString(cmp.Or(group, DefaultPartition))}, blockSize)
	ix.mu.Unlock()
	return p.index.Restore(events), nil
}

// RegisterPeer adds a recovery peer URL (POST /register_peer); adding a
// known one is a no-op. Past MaxPeers it is refused.
func (ix *Indexer) RegisterPeer(url string) error {
	ix.mu.Lock()
	defer ix.mu.Unlock()
	if _, ok := ix.mu.peers[url]; ok {
		return nil
	}
	if len(ix.mu.peers) >= ix.cfg.MaxPeers {
		return errorf(ErrCapacity, "peer limit reached (%d)", ix.cfg.MaxPeers)
	}
	ix.mu.peers[cloneString(url)] = struct{}{}
	return nil
}

// DeregisterPeer removes a peer URL (POST /deregister_peer).
func (ix *Indexer) DeregisterPeer(url string) error {
	ix.mu.Lock()
	defer ix.mu.Unlock()
	if _, ok := ix.mu.peers[url]; !ok {
		return errorf(ErrNotFound, "peer not found")
	}
	delete(ix.mu.peers, url)
	return nil
}

// Peers lists the peer URLs, sorted.
func (ix *Indexer) Peers() []string {
	ix.mu.Lock()
	out := make([]string, 0, len(ix.mu.peers))
	for p := range ix.mu.peers {
		out = append(out, p)
	}
	ix.mu.Unlock()
	slices.Sort(out)
	return out
}

// IndexerStats is a cheap snapshot for metrics.
type IndexerStats struct {
	Partitions, Workers     int
	Listeners, MaxListeners int
	Peers, MaxPeers         int
	IndexBlocks             [radix.NumTiers]int64
	// IndexMaxBlocksPerRank: see Stats.
	IndexMaxBlocksPerRank int
	EventsApplied         uint64
	// EventsDropped counts the events (or removal hashes) the indexes
	// did not apply, by radix.DropReason.
	EventsDropped [radix.NumDropReasons]uint64
}

// Stats sums the partitions' index counters.
func (ix *Indexer) Stats() IndexerStats {
	ix.mu.Lock()
	st := IndexerStats{Workers: len(ix.mu.workers), Listeners: ix.mu.listeners, MaxListeners: ix.cfg.MaxListeners, Peers: len(ix.mu.peers), MaxPeers: ix.cfg.MaxPeers,
		IndexMaxBlocksPerRank: cmp.Or(ix.cfg.IndexMaxBlocksPerRank, radix.DefaultMaxBlocksPerRank)}
	ix.mu.Unlock()
	parts := *ix.parts.Load()
	st.Partitions = len(parts)
	for _, p := range parts {
		is := p.index.Stats()
		for t := range is.Blocks {
			st.IndexBlocks[t] += is.Blocks[t]
		}
		st.EventsApplied += is.EventsApplied
		for r, d := range is.Dropped {
			st.EventsDropped[r] += d
		}
	}
	return st
}

// EventSink returns partition (model, group)'s event sink, creating the
// partition with blockSize: the entry point for hosts and tests that feed
// events themselves.
func (ix *Indexer) EventSink(model, group string, blockSize uint32) EventSink {
	ix.mu.Lock()
	defer ix.mu.Unlock()
	return ix.partitionLocked(partKey{cloneString(model), cloneString(cmp.Or(group, DefaultPartition))}, blockSize).sink
}
