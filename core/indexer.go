package core

import (
	"cmp"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/kvselect/kvselect/radix"
)

// Indexer is Dynamo's standalone KV indexer (`python -m dynamo.indexer`,
// ai-dynamo/dynamo:lib/kv-router/src/services/indexer/registry.rs) as a
// library: a registry of worker ranks, each listened to through the same
// Ingress the selection service uses, feeding one radix index per
// partition (model_name, routing_group), queried by token ids or local
// block hashes. It shares the index, the ingress seam, the hashing and the
// /dump format with Service; it has no catalog, no loads and no
// reservations.
//
// # The host's contract
//
//  1. NewIndexer(cfg, ingress). Restore peers' dumps (startup recovery)
//     and Register the --workers ranks before serving.
//  2. Serve Register, Unregister, Workers, Query, QueryByHash, Dump and the
//     peer routes from any number of goroutines.
//  3. At shutdown stop serving, then close the Ingress (the host owns it).
//
// # Concurrency
//
// Registrations are serialized by change, held across the ingress calls
// (rare, and an Ingress may block in Sync and Detach); mu guards the
// registry maps and is never held across an ingress call. Queries load the
// copy-on-write partition map and match without a lock.
type Indexer struct {
	cfg     IndexerConfig
	ingress Ingress

	change sync.Mutex // serializes Register and Unregister, ingress calls included

	mu struct {
		sync.Mutex
		workers   map[uint64]*ixWorker
		listeners int
		peers     map[string]struct{}
	}
	// parts is copy-on-write: written under mu, read lock-free.
	parts atomic.Pointer[map[partKey]*ixPartition]

	scratch sync.Pool // *ixScratch
}

// IndexerConfig configures an Indexer.
type IndexerConfig struct {
	// IndexShards is radix.Config.Shards of every partition's index.
	IndexShards int
	// IndexMaxBlocksPerRank is radix.Config.MaxBlocksPerRank of every
	// partition's index; 0 picks radix.DefaultMaxBlocksPerRank.
	IndexMaxBlocksPerRank int
	// MaxListeners bounds the registered ranks (one listener each); a
	// registration past it is a conflict. > 0.
	MaxListeners int
	// MaxPeers bounds the registered recovery peer URLs; a registration
	// past it is refused (at capacity). > 0.
	MaxPeers int
	// KVEndpointNetworks, when non-nil, are the only networks a registered
	// endpoint may name (as Config.KVEndpointNetworks).
	KVEndpointNetworks []netip.Prefix
	// KVEndpointsOptional makes a rank registered with no endpoint legal
	// (as Config.KVEndpointsOptional): the host's Ingress feeds such a
	// rank by (instance id, dp_rank) from an event plane (Dynamo's NATS
	// subjects, zmqin/natsplane.Ingress), and Sync hands it over with
	// Endpoint "". Invariant: an endpointless rank is registered only
	// when this is set, so every registered rank has a source; it still
	// takes one of MaxListeners, and it cannot have a replay endpoint
	// (replay is ZMQ's). Without it an empty endpoint is a bad request,
	// as the reference's.
	KVEndpointsOptional bool
}

// DefaultMaxPeers bounds an indexer's registered recovery peers.
const DefaultMaxPeers = 1024

// DefaultIndexerConfig returns the defaults.
func DefaultIndexerConfig() IndexerConfig {
	return IndexerConfig{MaxListeners: DefaultMaxListeners, MaxPeers: DefaultMaxPeers}
}

// Validate reports the first invalid field.
func (c *IndexerConfig) Validate() error {
	if c.MaxListeners <= 0 || c.MaxPeers <= 0 {
		return fmt.Errorf("%w: listener and peer limits must be > 0, got %d listeners, %d peers", ErrConfig, c.MaxListeners, c.MaxPeers)
	}
	if c.IndexShards < 0 || c.IndexShards > 1024 {
		return fmt.Errorf("%w: index shards %d outside [0, 1024]", ErrConfig, c.IndexShards)
	}
	if c.IndexMaxBlocksPerRank < 0 {
		return fmt.Errorf("%w: index max blocks per rank %d is negative", ErrConfig, c.IndexMaxBlocksPerRank)
	}
	return nil
}

// ixPartition is one indexed partition. Immutable but for its index.
type ixPartition struct {
	model, group string
	blockSize    uint32
	index        *radix.Index
	sink         *ixSink
}

// ixSink is a partition's EventSink: a comparable pointer, as Ingress.Sync
// wants.
type ixSink struct{ ix *radix.Index }

func (s *ixSink) ApplyBatch(evs []radix.Event) { s.ix.ApplyBatch(evs) }
func (s *ixSink) ClearRank(w radix.WorkerKey) {
	s.ix.Apply(&radix.Event{Worker: w, Kind: radix.Cleared})
}

// ixWorker is a registered instance: one partition, its ranks.
type ixWorker struct {
	key   partKey
	ranks map[uint32]RankSource
}

type ixScratch struct {
	local []uint64
	res   radix.Result
}

// NewIndexer returns an empty indexer listening through ingress (nil:
// NopIngress).
func NewIndexer(cfg IndexerConfig, ingress Ingress) (*Indexer, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if ingress == nil {
		ingress = NopIngress{}
	}
	ix := &Indexer{cfg: cfg, ingress: ingress}
	ix.mu.workers = map[uint64]*ixWorker{}
	ix.mu.peers = map[string]struct{}{}
	m := map[partKey]*ixPartition{}
	ix.parts.Store(&m)
	ix.scratch.New = func() any { return new(ixScratch) }
	return ix, nil
}

// partitionLocked returns partition key, creating it with blockSize.
func (ix *Indexer) partitionLocked(key partKey, blockSize uint32) *ixPartition {
	if p := (*ix.parts.Load())[key]; p != nil {
		return p
	}
	r, err := radix.New(radix.Config{Shards: ix.cfg.IndexShards, MaxBlocksPerRank: ix.cfg.IndexMaxBlocksPerRank})
	if err != nil {
		panic("BUG: radix config validated by IndexerConfig.Validate: " + err.Error())
	}
	p := &ixPartition{model: key.model, group: key.group, blockSize: blockSize, index: r, sink: &ixSink{r}}
	m := make(map[partKey]*ixPartition, len(*ix.parts.Load())+1)
	for k, v := range *ix.parts.Load() {
		m[k] = v
	}
	m[key] = p
	ix.parts.Store(&m)
	return p
}

// removePartitionLocked drops partition key when no worker is registered
// in it, as the reference's maybe_remove_indexer.
func (ix *Indexer) removePartitionLocked(key partKey) {
	for _, w := range ix.mu.workers {
		if w.key == key {
			return
		}
	}
	old := *ix.parts.Load()
	if _, ok := old[key]; !ok {
		return
	}
	m := make(map[partKey]*ixPartition, len(old))
	for k, v := range old {
		if k != key {
			m[k] = v
		}
	}
	ix.parts.Store(&m)
}

// IndexerRegistration is the body of POST /register.
type IndexerRegistration struct {
	InstanceID     uint64
	Endpoint       string
	ModelName      string
	RoutingGroup   string
	BlockSize      uint32
	DPRank         uint32
	ReplayEndpoint string // empty: none
}

// Register adds one rank of an instance and starts its listener. An
// instance lives in one partition; its ranks are registered one by one
// and each only once (unregister first to change one). Endpoint errors are
// bad requests, the reference's registration conflicts (and the listener
// limit) conflicts. An empty Endpoint is legal only with
// IndexerConfig.KVEndpointsOptional: the rank's events then come from the
// Ingress's event plane.
func (ix *Indexer) Register(r *IndexerRegistration) error {
	group := cmp.Or(r.RoutingGroup, DefaultPartition)
	bus := r.Endpoint == "" && ix.cfg.KVEndpointsOptional
	switch {
	case bus && r.ReplayEndpoint != "":
		return errorf(ErrBadRequest, "replay_endpoint `%s` needs a ZMQ endpoint: a rank fed by the event plane has no replay", r.ReplayEndpoint)
	case bus:
	default:
		if _, err := checkDialable(r.Endpoint); err != nil {
			return errorf(ErrBadRequest, "invalid ZMQ endpoint `%s`: %v", r.Endpoint, err)
		}
	}
	if r.ReplayEndpoint != "" {
		if _, err := checkDialable(r.ReplayEndpoint); err != nil {
			return errorf(ErrBadRequest, "invalid replay endpoint `%s`: %v", r.ReplayEndpoint, err)
		}
	}
	if ix.cfg.KVEndpointNetworks != nil {
		for _, ep := range []string{r.Endpoint, r.ReplayEndpoint} {
			if z, err := checkDialable(ep); err == nil {
				if err := z.allowedBy(ix.cfg.KVEndpointNetworks); err != nil {
					return errorf(ErrBadRequest, "endpoint `%s` refused: %v", ep, err)
				}
			}
		}
	}
	if r.BlockSize == 0 {
		// The reference would index with block size 0 (every query
		// empty); a partition needs a real one.
		return errorf(ErrBadRequest, "block_size must be greater than 0")
	}
	ix.change.Lock()
	defer ix.change.Unlock()
	key := partKey{strings0(r.ModelName), strings0(group)}
	ix.mu.Lock()
	w := ix.mu.workers[r.InstanceID]
	if w != nil {
		if w.key != key {
			ix.mu.Unlock()
			return errorf(ErrConflict, "instance %d is already registered for model=%s routing_group=%s", r.InstanceID, w.key.model, w.key.group)
		}
		if _, ok := w.ranks[r.DPRank]; ok {
			ix.mu.Unlock()
			return errorf(ErrConflict, "instance %d dp_rank %d already registered", r.InstanceID, r.DPRank)
		}
	}
	if p := (*ix.parts.Load())[key]; p != nil && p.blockSize != r.BlockSize {
		ix.mu.Unlock()
		return errorf(ErrConflict, "block_size mismatch for model=%s routing_group=%s: existing=%d, requested=%d", key.model, key.group, p.blockSize, r.BlockSize)
	}
	if ix.mu.listeners >= ix.cfg.MaxListeners {
		ix.mu.Unlock()
		return errorf(ErrConflict, "instance %d dp_rank %d needs a KV-event listener but all %d are in use", r.InstanceID, r.DPRank, ix.cfg.MaxListeners)
	}
	p := ix.partitionLocked(key, r.BlockSize)
	if w == nil {
		w = &ixWorker{key: key, ranks: map[uint32]RankSource{}}
		ix.mu.workers[r.InstanceID] = w
	}
	w.ranks[r.DPRank] = RankSource{DPRank: r.DPRank, Endpoint: strings0(r.Endpoint), ReplayEndpoint: strings0(r.ReplayEndpoint)}
	ix.mu.listeners++
	ranks := w.rankList()
	ix.mu.Unlock()
	ix.ingress.Sync(r.InstanceID, int(p.blockSize), ranks, p.sink)
	return nil
}

// rankList returns w's ranks sorted by rank.
func (w *ixWorker) rankList() []RankSource {
	out := make([]RankSource, 0, len(w.ranks))
	for _, rs := range w.ranks {
		out = append(out, rs)
	}
	slices.SortFunc(out, func(a, b RankSource) int { return cmp.Compare(a.DPRank, b.DPRank) })
	return out
}

// strings0 copies s (it may alias a request buffer).
func strings0(s string) string { return cloneString(s) }

// Unregister removes an instance's rank (dpRank non-nil), or the whole
// instance, stops the listeners and drops their blocks. group nil matches
// the instance's partition whatever its group (the reference's
// deregister_all_routing_groups). A partition left without instances is
// removed. Unknown instances, ranks or partitions are not found.
func (ix *Indexer) Unregister(id uint64, model string, group *string, dpRank *uint32) error {
	ix.change.Lock()
	defer ix.change.Unlock()
	ix.mu.Lock()
	w := ix.mu.workers[id]
	if w == nil {
		ix.mu.Unlock()
		return errorf(ErrNotFound, "instance %d not found", id)
	}
	if w.key.model != model || (group != nil && w.key.group != *group) {
		ix.mu.Unlock()
		return errorf(ErrNotFound, "instance %d is registered for model=%s routing_group=%s", id, w.key.model, w.key.group)
	}
	if group != nil && dpRank != nil {
		if _, ok := w.ranks[*dpRank]; !ok {
			ix.mu.Unlock()
			return errorf(ErrNotFound, "instance %d dp_rank %d not found", id, *dpRank)
		}
	}
	p := (*ix.parts.Load())[w.key]
	whole := group == nil || dpRank == nil || len(w.ranks) == 1
	var ranks []RankSource
	if whole {
		ix.mu.listeners -= len(w.ranks)
		delete(ix.mu.workers, id)
	} else {
		delete(w.ranks, *dpRank)
		ix.mu.listeners--
		ranks = w.rankList()
	}
	ix.mu.Unlock()
	if whole {
		// Listeners first: once Detach returns no late batch can restore
		// the blocks removed next.
		ix.ingress.Detach(id)
		if p != nil {
			p.index.RemoveWorker(id)
		}
		ix.mu.Lock()
		ix.removePartitionLocked(w.key)
		ix.mu.Unlock()
		return nil
	}
	ix.ingress.Sync(id, int(p.blockSize), ranks, p.sink)
	p.sink.ClearRank(radix.WorkerKey{WorkerID: id, DPRank: *dpRank})
	return nil
}

// IndexerListener is one rank's listener in GET /workers.
type IndexerListener struct {
	Endpoint  string `json:"endpoint"`
	Status    string `json:"status"`
	LastError string `json:"last_error,omitempty"`
}

// IndexerWorker is one element of GET /workers.
type IndexerWorker struct {
	InstanceID   uint64                     `json:"instance_id"`
	Source       string                     `json:"source"`
	Status       string                     `json:"status"`
	ModelName    string                     `json:"model_name"`
	RoutingGroup string                     `json:"routing_group"`
	BlockSize    uint32                     `json:"block_size"`
	Endpoints    map[uint32]string          `json:"endpoints"`
	Listeners    map[uint32]IndexerListener `json:"listeners"`
}

// workerSource is an instance's "source" in /workers: "zmq", the
// reference's only value, unless every rank is fed by the NATS event
// plane (no ZMQ endpoint), then "nats".
func workerSource(ranks []RankSource) string {
	for _, rs := range ranks {
		if rs.Endpoint != "" {
			return "zmq"
		}
	}
	if len(ranks) == 0 {
		return "zmq"
	}
	return "nats"
}

// listenerStatus maps an ingress state to the reference's listener status:
// pending until connected, active while connected, failed once stopped.
func listenerStatus(state string) string {
	switch state {
	case "live", "replaying":
		return "active"
	case "stopped":
		return "failed"
	case "paused":
		return "paused"
	}
	return "pending"
}

// Workers lists the registered instances, filtered by model and group when
// non-empty, sorted by instance id. A worker's status aggregates its
// listeners': failed, else pending, else active.
func (ix *Indexer) Workers(model, group string) []IndexerWorker {
	type snap struct {
		id    uint64
		key   partKey
		ranks []RankSource
	}
	var ws []snap
	ix.mu.Lock()
	for id, w := range ix.mu.workers {
		if (model != "" && w.key.model != model) || (group != "" && w.key.group != group) {
			continue
		}
		ws = append(ws, snap{id, w.key, w.rankList()})
	}
	ix.mu.Unlock()
	slices.SortFunc(ws, func(a, b snap) int { return cmp.Compare(a.id, b.id) })
	out := make([]IndexerWorker, 0, len(ws))
	var st []RankStatus
	parts := *ix.parts.Load()
	for _, w := range ws {
		iw := IndexerWorker{InstanceID: w.id, Source: "zmq", ModelName: w.key.model, RoutingGroup: w.key.group,
			Endpoints: map[uint32]string{}, Listeners: map[uint32]IndexerListener{}}
		if p := parts[w.key]; p != nil {
			iw.BlockSize = p.blockSize
		}
		st = ix.ingress.Status(w.id, st[:0])
		for _, rs := range w.ranks {
			l := IndexerListener{Endpoint: rs.Endpoint, Status: "pending"}
			for _, s := range st {
				if s.DPRank == rs.DPRank {
					l.Status, l.LastError = listenerStatus(s.State), s.LastError
					if rs.Endpoint == "" {
						l.Endpoint = s.Endpoint // the event plane's name for its source ("nats")
					}
				}
			}
			iw.Endpoints[rs.DPRank] = rs.Endpoint
			iw.Listeners[rs.DPRank] = l
		}
		iw.Status = aggregateStatus(iw.Listeners)
		iw.Source = workerSource(w.ranks)
		out = append(out, iw)
	}
	return out
}

func aggregateStatus(ls map[uint32]IndexerListener) string {
	pending, active := false, false
	for _, l := range ls {
		switch l.Status {
		case "failed":
			return "failed"
		case "pending":
			pending = true
		case "active":
			active = true
		}
	}
	switch {
	case pending:
		return "pending"
	case active:
		return "active"
	}
	return "paused"
}

// ListenerControl is an Ingress that can pause and resume one rank's
// listener (zmqin.Ingress): the standalone indexer's listener-control test
// routes use it. Pause of a listener not running, and Resume of one not
// paused, fail with an error that has a ListenerState() string method
// naming the state it was in.
type ListenerControl interface {
	Pause(workerID uint64, rank uint32) error
	Resume(workerID uint64, rank uint32) error
}

// listenerState is implemented by the ingress's state errors.
type listenerState interface{ ListenerState() string }

// PauseListener pauses the listener of instance id's rank, as the
// reference's test route does
// (ai-dynamo/dynamo:lib/kv-router/src/services/indexer/registry.rs,
// pause_listener): not found for an unknown instance or rank, a conflict
// naming the status for a listener already paused. Its blocks stay; what
// the worker publishes meanwhile is missed until ResumeListener.
func (ix *Indexer) PauseListener(id uint64, rank uint32) error {
	return ix.controlListener(id, rank, "paused", func(c ListenerControl) error { return c.Pause(id, rank) })
}

// ResumeListener resumes a paused listener (a conflict for one not
// paused): it reconnects, and the gap left by the pause is replayed when
// the rank has a replay endpoint.
func (ix *Indexer) ResumeListener(id uint64, rank uint32) error {
	return ix.controlListener(id, rank, "resumed", func(c ListenerControl) error { return c.Resume(id, rank) })
}

func (ix *Indexer) controlListener(id uint64, rank uint32, verb string, do func(ListenerControl) error) error {
	ix.change.Lock()
	defer ix.change.Unlock()
	ix.mu.Lock()
	w := ix.mu.workers[id]
	var ok bool
	if w != nil {
		_, ok = w.ranks[rank]
	}
	ix.mu.Unlock()
	if w == nil {
		return errorf(ErrNotFound, "instance %d not found", id)
	}
	if !ok {
		return errorf(ErrNotFound, "instance %d dp_rank %d not found", id, rank)
	}
	c, can := ix.ingress.(ListenerControl)
	if !can {
		return errorf(ErrNotReady, "the KV-event ingress cannot pause listeners")
	}
	err := do(c)
	var st listenerState
	switch {
	case err == nil:
		return nil
	case errors.As(err, &st):
		return errorf(ErrConflict, "instance %d dp_rank %d cannot be %s from status %s", id, rank, verb, listenerStatus(st.ListenerState()))
	}
	// The rank is registered, so the ingress knows it: it is still
	// being started or was stopped by a concurrent change.
	return errorf(ErrNotFound, "instance %d dp_rank %d not found", id, rank)
}
