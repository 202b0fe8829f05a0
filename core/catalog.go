package core

import (
	"fmt"
	"maps"
	"math"
	"slices"
)

// Lifecycle is a worker record's state, as the reference's catalog names
// it (ai-dynamo/dynamo:lib/kv-router/src/services/selection/catalog.rs).
type Lifecycle string

const (
	Incomplete    Lifecycle = "incomplete"
	Schedulable   Lifecycle = "schedulable"
	Draining      Lifecycle = "draining"
	Unschedulable Lifecycle = "unschedulable"
)

// DefaultPartition is the default model_name and routing_group.
const DefaultPartition = "default"

// WorkerFields are the catalog fields a POST replaces and a PATCH updates.
// A nil pointer (or nil map/slice) is "unset"; in a record it is emitted as
// JSON null (pointers) or omitted (the omitempty maps).
type WorkerFields struct {
	Endpoint                         *string           `json:"endpoint"`
	KVEventsEndpoint                 *string           `json:"kv_events_endpoint"`
	KVEventsEndpoints                map[uint32]string `json:"kv_events_endpoints,omitempty"`
	ReplayEndpoint                   *string           `json:"replay_endpoint"`
	BlockSize                        *uint32           `json:"block_size"`
	DataParallelStartRank            *uint32           `json:"data_parallel_start_rank"`
	DataParallelSize                 *uint32           `json:"data_parallel_size"`
	MaxNumBatchedTokens              *uint64           `json:"max_num_batched_tokens"`
	TotalKVBlocks                    *uint64           `json:"total_kv_blocks"`
	StableRoutingID                  *string           `json:"stable_routing_id"`
	IsEagle                          *bool             `json:"is_eagle"`
	Taints                           []string          `json:"taints"`
	TopologyDomains                  map[string]string `json:"topology_domains"`
	KVTransferDomain                 *string           `json:"kv_transfer_domain"`
	KVTransferEnforcement            *string           `json:"kv_transfer_enforcement"`
	KVTransferPreferredWeight        *float64          `json:"kv_transfer_preferred_weight"`
	RouterHintWorkerType             *string           `json:"router_hint_worker_type,omitempty"`
	RouterHintSourceControlEndpoints map[uint32]string `json:"router_hint_source_control_endpoints,omitempty"`
	KVEventSourceMode                *string           `json:"kv_event_source_mode,omitempty"`
	// LoraAdapters is a kvselect extension, not a field of the reference's
	// WorkerRequest (a reference caller never sends it, and a record
	// without it omits it): the LoRA adapters the worker serves, which
	// narrow the candidates of a request naming one (lora.go). A set:
	// sorted and deduplicated.
	LoraAdapters []string `json:"lora_adapters,omitempty"`
}

// WorkerSpec is the body of POST /workers: a whole record.
type WorkerSpec struct {
	WorkerID     uint64 `json:"worker_id"`
	ModelName    string `json:"model_name"`
	RoutingGroup string `json:"routing_group"`
	WorkerFields
}

// WorkerPatch is the body of PATCH /workers/{id}: a present field replaces
// the stored value (maps and sets wholesale).
type WorkerPatch = WorkerFields

// WorkerRecord is a catalog entry as GET /workers shows it. Records handed
// out by the Service are copies: the caller may keep and change them.
type WorkerRecord struct {
	WorkerID     uint64    `json:"worker_id"`
	ModelName    string    `json:"model_name"`
	RoutingGroup string    `json:"routing_group"`
	Lifecycle    Lifecycle `json:"lifecycle"`
	WorkerFields
	NotSchedulableReasons []string `json:"not_schedulable_reasons,omitempty"`
	// Listeners is the state of the rank listeners (Ingress.Status), when
	// the ingress reports any.
	Listeners []RankStatus `json:"-"`
}

// clone deep-copies the fields so a stored record shares nothing with the
// caller's.
func (f WorkerFields) clone() WorkerFields {
	c := f
	c.Endpoint = clonePtr(f.Endpoint)
	c.KVEventsEndpoint = clonePtr(f.KVEventsEndpoint)
	c.KVEventsEndpoints = maps.Clone(f.KVEventsEndpoints)
	c.ReplayEndpoint = clonePtr(f.ReplayEndpoint)
	c.BlockSize = clonePtr(f.BlockSize)
	c.DataParallelStartRank = clonePtr(f.DataParallelStartRank)
	c.DataParallelSize = clonePtr(f.DataParallelSize)
	c.MaxNumBatchedTokens = clonePtr(f.MaxNumBatchedTokens)
	c.TotalKVBlocks = clonePtr(f.TotalKVBlocks)
	c.StableRoutingID = clonePtr(f.StableRoutingID)
	c.IsEagle = clonePtr(f.IsEagle)
	// taints are a set: sorted, deduplicated, never nil.
	c.Taints = slices.Compact(slices.Sorted(slices.Values(f.Taints)))
	if c.Taints == nil {
		c.Taints = []string{}
	}
	c.TopologyDomains = maps.Clone(f.TopologyDomains)
	if c.TopologyDomains == nil {
		c.TopologyDomains = map[string]string{}
	}
	c.KVTransferDomain = clonePtr(f.KVTransferDomain)
	c.KVTransferEnforcement = clonePtr(f.KVTransferEnforcement)
	c.KVTransferPreferredWeight = clonePtr(f.KVTransferPreferredWeight)
	c.RouterHintWorkerType = clonePtr(f.RouterHintWorkerType)
	if c.RouterHintWorkerType != nil && *c.RouterHintWorkerType == "" {
		c.RouterHintWorkerType = nil
	}
	c.RouterHintSourceControlEndpoints = maps.Clone(f.RouterHintSourceControlEndpoints)
	c.KVEventSourceMode = clonePtr(f.KVEventSourceMode)
	if len(f.LoraAdapters) > 0 {
		c.LoraAdapters = newAdapterSet(f.LoraAdapters)
	} else {
		c.LoraAdapters = nil
	}
	return c
}

// patch returns f with every field p sets replaced.
func (f WorkerFields) patch(p *WorkerPatch) WorkerFields {
	set := func(dst **string, src *string) {
		if src != nil {
			*dst = src
		}
	}
	set(&f.Endpoint, p.Endpoint)
	set(&f.KVEventsEndpoint, p.KVEventsEndpoint)
	set(&f.ReplayEndpoint, p.ReplayEndpoint)
	set(&f.StableRoutingID, p.StableRoutingID)
	set(&f.KVTransferDomain, p.KVTransferDomain)
	set(&f.KVTransferEnforcement, p.KVTransferEnforcement)
	set(&f.RouterHintWorkerType, p.RouterHintWorkerType)
	set(&f.KVEventSourceMode, p.KVEventSourceMode)
	if p.KVEventsEndpoints != nil {
		f.KVEventsEndpoints = p.KVEventsEndpoints
	}
	if p.BlockSize != nil {
		f.BlockSize = p.BlockSize
	}
	if p.DataParallelStartRank != nil {
		f.DataParallelStartRank = p.DataParallelStartRank
	}
	if p.DataParallelSize != nil {
		f.DataParallelSize = p.DataParallelSize
	}
	if p.MaxNumBatchedTokens != nil {
		f.MaxNumBatchedTokens = p.MaxNumBatchedTokens
	}
	if p.TotalKVBlocks != nil {
		f.TotalKVBlocks = p.TotalKVBlocks
	}
	if p.IsEagle != nil {
		f.IsEagle = p.IsEagle
	}
	if p.Taints != nil {
		f.Taints = p.Taints
	}
	if p.LoraAdapters != nil {
		f.LoraAdapters = p.LoraAdapters
	}
	if p.TopologyDomains != nil {
		f.TopologyDomains = p.TopologyDomains
	}
	if p.KVTransferPreferredWeight != nil {
		f.KVTransferPreferredWeight = p.KVTransferPreferredWeight
	}
	if p.RouterHintSourceControlEndpoints != nil {
		f.RouterHintSourceControlEndpoints = p.RouterHintSourceControlEndpoints
	}
	return f.clone()
}

func clonePtr[T any](p *T) *T {
	if p == nil {
		return nil
	}
	v := *p
	return &v
}

func deref[T any](p *T, def T) T {
	if p == nil {
		return def
	}
	return *p
}

// MaxDataParallelSize bounds data_parallel_size: every rank costs a
// candidate row, a WorkerLoad and a listener, so one registration naming
// billions of ranks would exhaust memory under the catalog lock. A worker
// above it stays incomplete, with the reason.
const MaxDataParallelSize = 1024

// dpRange returns the worker's ranks [start, start+size).
func (f *WorkerFields) dpRange() (start, size uint32) {
	return deref(f.DataParallelStartRank, 0), deref(f.DataParallelSize, 1)
}

// rankSources returns the kv_events endpoint of every rank (empty when
// missing). The single-rank shorthand kv_events_endpoint applies only when
// kv_events_endpoints is empty and the size is 1.
func (f *WorkerFields) rankSources() []RankSource {
	start, size := f.dpRange()
	out := make([]RankSource, 0, size)
	replay := ""
	if size == 1 {
		replay = deref(f.ReplayEndpoint, "")
	}
	for r := start; r < start+size; r++ {
		ep := f.KVEventsEndpoints[r]
		if len(f.KVEventsEndpoints) == 0 && size == 1 {
			ep = deref(f.KVEventsEndpoint, "")
		}
		out = append(out, RankSource{DPRank: r, Endpoint: ep, ReplayEndpoint: replay})
	}
	return out
}

// catalogEntry is one worker of the catalog. Guarded by Service.mu.
type catalogEntry struct {
	rec  WorkerRecord
	part *partition // the partition the record names
	// engineAdapters are the adapters the worker's engine reported
	// (SetEngineAdapters); with rec.LoraAdapters they make the snapshot's
	// workerView.adapters.
	engineAdapters adapterSet
	// engineDown: the host's engine scrape reports the worker not
	// answering (SetEngineAvailable). It stays a member (its loads,
	// bookings and KV listeners are kept) but the snapshot holds it
	// apart from the eligibility rows, so no selection picks it.
	engineDown bool
}

// reconcileLocked computes the lifecycle of f in partition p: the reasons that
// keep it incomplete, in the reference's order and words. Called with s.mu
// held.
func (s *Service) reconcileLocked(id uint64, f *WorkerFields, p *partition, movingIn bool) []string {
	var reasons []string
	if deref(f.Endpoint, "") == "" {
		reasons = append(reasons, "endpoint is required")
	}
	if deref(f.BlockSize, 0) == 0 {
		reasons = append(reasons, "block_size must be greater than 0")
	}
	start, size := f.dpRange()
	switch {
	case size == 0:
		reasons = append(reasons, "data_parallel_size must be greater than 0")
	case size > MaxDataParallelSize:
		reasons = append(reasons, fmt.Sprintf("data_parallel_size %d exceeds kvselect's limit of %d", size, MaxDataParallelSize))
		size = 0 // nothing below may loop over the ranks
	case uint64(start)+uint64(size) > math.MaxUint32:
		// The ranks are [start, start+size) in uint32 arithmetic: a range
		// ending at 2^32 would wrap every loop over it to nothing.
		reasons = append(reasons, fmt.Sprintf("data_parallel_start_rank %d + data_parallel_size %d exceeds the u32 rank space", start, size))
		size = 0
	}
	if s.cfg.queueing(p.model) && f.MaxNumBatchedTokens == nil {
		reasons = append(reasons, "max_num_batched_tokens is required while queueing is enabled")
	}
	if s.listening && size > 0 {
		for _, rs := range f.rankSources() {
			if rs.Endpoint == "" && !s.cfg.KVEndpointsOptional {
				reasons = append(reasons, fmt.Sprintf("kv_events endpoint is required for dp_rank %d", rs.DPRank))
			}
		}
	}
	if f.ReplayEndpoint != nil && size != 1 {
		reasons = append(reasons, "replay_endpoint is supported only for data_parallel_size 1")
	}
	if len(reasons) > 0 {
		return reasons
	}
	// Reconciliation proper: partition compatibility and endpoints.
	if r := p.conflict(id, f, movingIn); r != "" {
		return []string{r}
	}
	if s.listening {
		for _, rs := range f.rankSources() {
			if rs.Endpoint == "" && s.cfg.KVEndpointsOptional {
				continue
			}
			if _, err := checkDialable(rs.Endpoint); err != nil {
				return []string{fmt.Sprintf("reconciliation failed: invalid kv_events endpoint for worker %d dp_rank %d: invalid ZMQ endpoint `%s`: %v", id, rs.DPRank, rs.Endpoint, err)}
			}
		}
		if f.ReplayEndpoint != nil {
			if _, err := checkDialable(*f.ReplayEndpoint); err != nil {
				return []string{fmt.Sprintf("reconciliation failed: invalid replay endpoint for worker %d dp_rank %d: invalid ZMQ endpoint `%s`: %v", id, start, *f.ReplayEndpoint, err)}
			}
		}
	}
	return nil
}

// checkNetworks refuses a record whose KV-event or replay endpoints the
// service may not dial (Config.KVEndpointNetworks), so that an
// unauthenticated caller cannot make it connect to arbitrary hosts. An
// endpoint that does not parse is left to reconciliation (the worker stays
// incomplete, as in the reference).
func (s *Service) checkNetworks(id uint64, f *WorkerFields) error {
	if s.cfg.KVEndpointNetworks == nil {
		return nil
	}
	check := func(kind, ep string) error {
		z, err := ParseZMQEndpoint(ep)
		if err != nil {
			return nil
		}
		if err := z.allowedBy(s.cfg.KVEndpointNetworks); err != nil {
			return errorf(ErrBadRequest, "%s endpoint `%s` of worker %d refused: %v", kind, ep, id, err)
		}
		return nil
	}
	eps := make([]string, 0, len(f.KVEventsEndpoints)+1)
	if f.KVEventsEndpoint != nil {
		eps = append(eps, *f.KVEventsEndpoint)
	}
	for _, r := range slices.Sorted(maps.Keys(f.KVEventsEndpoints)) {
		eps = append(eps, f.KVEventsEndpoints[r])
	}
	for _, ep := range eps {
		if err := check("kv_events", ep); err != nil {
			return err
		}
	}
	if f.ReplayEndpoint != nil {
		return check("replay", *f.ReplayEndpoint)
	}
	return nil
}
