package core

import "github.com/kvselect/kvselect/radix"

// ReplicaEventKind is the kind of an outbound active-sequence event (the
// reference's ActiveSequenceEvent,
// ai-dynamo/dynamo:lib/kv-router/src/services/common/replica_sync.rs):
// admission, prefill completion, free. Output blocks are
// never replicated.
type ReplicaEventKind uint8

const (
	ReplicaAdd ReplicaEventKind = iota + 1
	ReplicaPrefillCompleted
	ReplicaFree
)

// ReplicaEvent is one lifecycle event exchanged with replica peers: emitted
// by the booking and lifecycle paths (Publish), applied from peers
// (ApplyReplica). Every field is valid only during the call that receives
// it: a sink that keeps the event must copy it (strings included, they may
// alias request buffers).
type ReplicaEvent struct {
	Kind         ReplicaEventKind
	ModelName    string
	RoutingGroup string
	BlockSize    uint32
	RequestID    string
	Worker       radix.WorkerKey
	LoraName     string
	// Origin is the sending process's id (the envelope's router_id) on an
	// applied event; the sink stamps its own on a published one.
	Origin Origin
	// ReplicaAdd only. SequenceHashes are the request's tracking hashes;
	// for a booking that assumes no KV reuse they are hashes private to the
	// request (as Dynamo sends random ones), so no peer shares its blocks.
	SequenceHashes       []uint64
	TrackPrefillTokens   bool
	ExpectedOutputTokens *uint32
	// EffectivePrefillTokens is the prefill_load_hint's
	// initial_effective_prefill_tokens.
	EffectivePrefillTokens int64

	// Dropped and Drop are ApplyReplica's outcome for this event: whether
	// it was skipped, and why.
	Dropped bool
	Drop    ReplicaDrop
}

// ReplicaSink receives the outbound replica events of every booking path.
// zmqin/mesh's Mesh implements it; NopReplicaSink drops everything.
// Publish must not block (drop when full) and is called without core locks
// held, from request goroutines, concurrently.
type ReplicaSink interface {
	Publish(ev *ReplicaEvent)
}

// NopReplicaSink drops every event: a selector without replica sync.
type NopReplicaSink struct{}

func (NopReplicaSink) Publish(*ReplicaEvent) {}
