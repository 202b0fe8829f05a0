package radix

import "fmt"

// WorkerKey identifies one data-parallel rank of one worker. Everything the
// index stores is keyed by it: Cleared drops one rank, RemoveWorker all ranks.
type WorkerKey struct {
	WorkerID uint64
	DPRank   uint32
}

func (k WorkerKey) String() string { return fmt.Sprintf("%d/%d", k.WorkerID, k.DPRank) }

// Tier is a storage tier of the KV cache. Device events feed the primary
// tree; lower tiers continue from a worker's matched device prefix.
type Tier uint8

const (
	TierDevice Tier = iota
	TierHostPinned
	TierDisk
	TierExternal
	numTiers
)

var tierNames = [numTiers]string{"device", "host_pinned", "disk", "external"}

// String returns the tier's JSON name, the storage_tier of Dynamo's
// RouterEvent (ai-dynamo/dynamo:lib/kv-router/src/protocols.rs).
func (t Tier) String() string {
	if t < numTiers {
		return tierNames[t]
	}
	return fmt.Sprintf("tier(%d)", uint8(t))
}

// ParseTier maps a JSON storage_tier name to a Tier. An empty name is the
// device tier (the serde default).
func ParseTier(s string) (Tier, bool) {
	if s == "" {
		return TierDevice, true
	}
	for i, n := range tierNames {
		if n == s {
			return Tier(i), true
		}
	}
	return 0, false
}

// EventKind says which of the three KV cache events an Event is.
type EventKind uint8

const (
	// Stored adds Blocks, chained after ParentHash when HasParent.
	Stored EventKind = iota + 1
	// Removed drops the blocks named by Hashes (external hashes).
	Removed
	// Cleared drops everything the worker rank holds, in every tier.
	Cleared
)

func (k EventKind) String() string {
	switch k {
	case Stored:
		return "stored"
	case Removed:
		return "removed"
	case Cleared:
		return "cleared"
	}
	return fmt.Sprintf("kind(%d)", uint8(k))
}

// Block is one full KV block of a Stored event.
type Block struct {
	// Hash is the engine's external block hash: opaque, used for identity,
	// parent links and removal. i64 values on the wire are reinterpreted
	// bitwise.
	Hash uint64
	// Local is the router-computed local block hash of the block's tokens
	// (see LocalHashes); the tree is navigated by it.
	Local uint64
}

// Event is one KV cache event for one worker rank, already decoded from the
// wire (ZMQ msgpack or /dump JSON). Slices are owned by the caller: Apply does
// not retain them.
type Event struct {
	Worker  WorkerKey
	Tier    Tier
	Kind    EventKind
	EventID uint64

	// Stored only.
	ParentHash       uint64
	HasParent        bool
	StartPosition    uint32
	HasStartPosition bool
	Blocks           []Block

	// Removed only: external block hashes.
	Hashes []uint64
}

// DropReason says why an event, or part of one, was not applied.
type DropReason uint8

const (
	// DropParentNotFound: a Stored event whose parent hash is not held by
	// that worker rank (or a root-less store with a start position > 0). The
	// whole event is dropped.
	DropParentNotFound DropReason = iota
	// DropInvalidSequence: a Stored event that repeats one of its own hashes
	// or its parent's. The whole event is a no-op.
	DropInvalidSequence
	// DropHashConflict: a Stored block whose external hash the worker
	// already holds at another position. The store stops before it.
	DropHashConflict
	// DropUnknownBlock: a Removed hash the worker does not hold (counted per
	// hash; the rest of the event is applied).
	DropUnknownBlock
	// DropUnknownKind: an event of no known kind or tier.
	DropUnknownKind
	// DropRankOverCapacity: a Stored event took its worker rank past
	// Config.MaxBlocksPerRank; the rank was cleared (counted per clear).
	DropRankOverCapacity
	numDropReasons
)

var dropNames = [numDropReasons]string{"parent_not_found", "invalid_block_sequence", "hash_conflict", "block_not_found", "unknown_event", "rank_over_capacity"}

// String returns the reason's metric label.
func (r DropReason) String() string { return dropNames[r] }
