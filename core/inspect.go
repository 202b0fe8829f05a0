package core

import (
	"cmp"
	"slices"

	"github.com/kvselect/kvselect/radix"
	"github.com/kvselect/kvselect/sched"
)

// PotentialLoad is one row of /loads and /potential_loads.
type PotentialLoad struct {
	WorkerID               uint64 `json:"worker_id"`
	DPRank                 uint32 `json:"dp_rank"`
	PotentialPrefillTokens int64  `json:"potential_prefill_tokens"`
	PotentialDecodeBlocks  int64  `json:"potential_decode_blocks"`
	ActiveRequests         int64  `json:"active_requests"`
	// EngineDown: the worker is out of selection because its engine
	// stopped answering the host's scrape (SetEngineAvailable); its
	// booked load is still shown. Not on the wire (the host reports it).
	EngineDown bool `json:"-"`
}

// PartitionLoads is one element of GET /loads.
type PartitionLoads struct {
	ModelName        string          `json:"model_name"`
	RoutingGroup     string          `json:"routing_group"`
	Loads            []PotentialLoad `json:"loads"`
	PendingCount     int64           `json:"pending_count"`
	PendingISLTokens int64           `json:"pending_isl_tokens"`
}

// Loads returns the current load of every schedulable (worker, rank) of
// every partition, sorted by (model_name, routing_group) then (worker,
// rank), filtered by model and group when non-empty. pending_count and
// pending_isl_tokens are the requests waiting in the partition's router
// queue and their raw ISL tokens.
func (s *Service) Loads(model, group string) []PartitionLoads {
	out := []PartitionLoads{}
	for _, p := range *s.parts.Load() {
		if (model != "" && p.model != model) || (group != "" && p.group != group) {
			continue
		}
		sn := p.snap.Load()
		pl := PartitionLoads{ModelName: p.model, RoutingGroup: p.group, Loads: make([]PotentialLoad, 0, sn.ranks)}
		for i, w := range sn.workers {
			for j, wl := range sn.views[i].loads {
				l := wl.Loads()
				pl.Loads = append(pl.Loads, PotentialLoad{WorkerID: w.ID, DPRank: w.DPStart + uint32(j), PotentialPrefillTokens: l.PrefillTokens, PotentialDecodeBlocks: l.Blocks, ActiveRequests: l.Requests})
			}
		}
		// The held workers' booked load too (engine down: not selectable,
		// still loaded), in (worker, rank) order with the rest.
		for i, id := range sn.held {
			v := &sn.heldViews[i]
			for j, wl := range v.loads {
				l := wl.Loads()
				pl.Loads = append(pl.Loads, PotentialLoad{WorkerID: id, DPRank: v.dpStart + uint32(j), PotentialPrefillTokens: l.PrefillTokens, PotentialDecodeBlocks: l.Blocks, ActiveRequests: l.Requests, EngineDown: true})
			}
		}
		if len(sn.held) > 0 {
			slices.SortFunc(pl.Loads, func(a, b PotentialLoad) int {
				return cmp.Or(cmp.Compare(a.WorkerID, b.WorkerID), cmp.Compare(a.DPRank, b.DPRank))
			})
		}
		if q := p.queue; q != nil {
			q.mu.Lock()
			for c := range q.profile.Classes {
				u := q.mu.q.Stats(c)
				pl.PendingCount += u.Requests
				pl.PendingISLTokens += u.RawISLTokens
			}
			q.mu.Unlock()
		}
		out = append(out, pl)
	}
	slices.SortFunc(out, func(a, b PartitionLoads) int {
		return cmp.Or(cmp.Compare(a.ModelName, b.ModelName), cmp.Compare(a.RoutingGroup, b.RoutingGroup))
	})
	return out
}

// LiveReservation is one live request as Reservation reports it.
type LiveReservation struct {
	ModelName, RoutingGroup string
	Worker                  WorkerKey
	// Origin is OriginLocal for a booking made here, else the process id
	// of the replica peer whose admission it mirrors.
	Origin Origin
}

// Reservation reports the live reservation of selection id: one ledger
// lookup, no lock, nothing counted. ok is false when no booking of id is
// live (never booked, released, or a claim still in flight), exactly when
// a lifecycle call for id would answer not found. It lets a host check
// what a replica holds without changing it (kvselect bench's replica
// probe); no route serves it.
func (s *Service) Reservation(id string) (LiveReservation, bool) {
	r, ok := s.ledger.m.Load(id)
	if !ok || r.state.Load() != stateLive {
		return LiveReservation{}, false
	}
	return LiveReservation{ModelName: r.p.model, RoutingGroup: r.p.group, Worker: r.worker(), Origin: r.origin}, true
}

// QueryRequest is the body of /potential_loads and /overlap_scores: a
// partition, a prompt and router_config_override.
type QueryRequest struct {
	ModelName, RoutingGroup string
	Prompt
	Override *sched.Override
}

// query prepares a query over every schedulable (worker, rank), without
// constraints. The caller owns sc.
func (s *Service) query(req *QueryRequest, sc *scratch) (scored, error) {
	model := cmp.Or(req.ModelName, DefaultPartition)
	group := cmp.Or(req.RoutingGroup, DefaultPartition)
	p, sn, err := s.readyPartition(model, group)
	if err != nil {
		return scored{}, err
	}
	return s.prepare(p, sn, &req.Prompt, req.Override, &sched.Constraints{}, sc)
}

// PotentialLoads returns the load every schedulable (worker, rank) would
// have with this prompt added, sorted by (worker, rank).
func (s *Service) PotentialLoads(req *QueryRequest) ([]PotentialLoad, error) {
	sc := s.getScratch()
	defer s.putScratch(sc)
	q, err := s.query(req, sc)
	if err != nil {
		return nil, err
	}
	sc.loads = slices.Grow(sc.loads[:0], len(sc.cands))[:len(sc.cands)]
	sched.PotentialLoads(&q.params, &q.req, sc.cands, sc.loads)
	out := make([]PotentialLoad, len(sc.loads))
	for i, l := range sc.loads {
		out[i] = PotentialLoad{WorkerID: l.Worker.WorkerID, DPRank: l.Worker.DPRank, PotentialPrefillTokens: l.PrefillTokens, PotentialDecodeBlocks: l.DecodeBlocks, ActiveRequests: l.ActiveRequests}
	}
	return out, nil
}

// OverlapRow is one (worker, rank) row of /overlap_scores. Counts are
// cumulative: host_pinned = device + host extension; disk = host_pinned +
// disk and external extensions.
type OverlapRow struct {
	WorkerID                  uint64  `json:"worker_id"`
	DPRank                    uint32  `json:"dp_rank"`
	DeviceBlocks              int64   `json:"device_blocks"`
	HostPinnedBlocks          int64   `json:"host_pinned_blocks"`
	DiskBlocks                int64   `json:"disk_blocks"`
	HostPinnedExtensionBlocks int64   `json:"host_pinned_extension_blocks"`
	DiskExtensionBlocks       int64   `json:"disk_extension_blocks"`
	SharedBeyondDeviceBlocks  *int64  `json:"shared_beyond_device_blocks"`
	RouterCreditBlocks        float64 `json:"router_credit_blocks"`
}

// SharedCache is /overlap_scores' shared_cache object; kvselect has no
// shared cache, so it is always disabled.
type SharedCache struct {
	Enabled        bool       `json:"enabled"`
	TotalHitBlocks int64      `json:"total_hit_blocks"`
	Ranges         [][2]int64 `json:"ranges"`
	Error          *string    `json:"error"`
}

// OverlapScores is the /overlap_scores response.
type OverlapScores struct {
	BlockSize   uint32       `json:"block_size"`
	NumBlocks   int          `json:"num_blocks"`
	Workers     []OverlapRow `json:"workers"`
	SharedCache SharedCache  `json:"shared_cache"`
}

// OverlapScores returns the tiered overlap of every schedulable (worker,
// rank), sorted by (worker, rank).
func (s *Service) OverlapScores(req *QueryRequest) (OverlapScores, error) {
	sc := s.getScratch()
	defer s.putScratch(sc)
	q, err := s.query(req, sc)
	if err != nil {
		return OverlapScores{}, err
	}
	params := &q.params
	out := OverlapScores{BlockSize: q.sn.blockSize, NumBlocks: len(q.local), Workers: make([]OverlapRow, len(sc.cands)), SharedCache: SharedCache{Ranges: [][2]int64{}}}
	for i := range sc.cands {
		c := &sc.cands[i]
		out.Workers[i] = OverlapRow{
			WorkerID: c.Worker.WorkerID, DPRank: c.Worker.DPRank,
			DeviceBlocks:              c.DeviceBlocks,
			HostPinnedBlocks:          c.DeviceBlocks + c.HostBlocks,
			DiskBlocks:                c.DeviceBlocks + c.HostBlocks + c.DiskBlocks,
			HostPinnedExtensionBlocks: c.HostBlocks,
			DiskExtensionBlocks:       c.DiskBlocks,
			RouterCreditBlocks: params.OverlapScoreCredit*float64(c.DeviceBlocks) + params.HostCacheHitWeight*float64(c.HostBlocks) +
				params.DiskCacheHitWeight*float64(c.DiskBlocks),
		}
	}
	return out, nil
}

// PartitionDump is one partition of GET /dump: key "model:group", the
// model and group it joins (for recovery: a model name may contain ':'),
// its block size and the Stored events that rebuild its index.
type PartitionDump struct {
	Key                     string
	ModelName, RoutingGroup string
	BlockSize               uint32
	Events                  []radix.Event
}

// Dump returns every partition with a fixed block size as Stored events
// that rebuild its index, sorted by key.
func (s *Service) Dump() []PartitionDump {
	var out []PartitionDump
	for _, p := range *s.parts.Load() {
		bs := s.partitionBlockSize(p)
		if bs == 0 {
			continue
		}
		out = append(out, PartitionDump{Key: p.model + ":" + p.group, ModelName: p.model, RoutingGroup: p.group, BlockSize: bs, Events: p.index.Dump()})
	}
	slices.SortFunc(out, func(a, b PartitionDump) int { return cmp.Compare(a.Key, b.Key) })
	return out
}

func (s *Service) partitionBlockSize(p *partition) uint32 { return p.blockSize() }

// Restore rebuilds a partition's index from a peer's dump (startup
// recovery, as the reference's lib/kv-router/src/services/indexer/
// recovery.rs): it creates partition (model, group) with blockSize when the
// partition has none yet, then applies events in order. It returns the
// number of events the index applied; a block size that differs from the
// partition's is a conflict and applies nothing.
//
// Precondition: no ingress feeds the partition yet (the host restores
// before it registers workers or serves), since an index takes one writer
// per worker at a time.
func (s *Service) Restore(model, group string, blockSize uint32, events []radix.Event) (int, error) {
	if blockSize == 0 {
		return 0, errorf(ErrBadRequest, "block_size must be greater than 0 for model=%s routing_group=%s", model, group)
	}
	s.mu.Lock()
	p := s.partitionLocked(model, group)
	if bs, ok := p.fixBlockSize(blockSize); !ok {
		s.mu.Unlock()
		return 0, errorf(ErrConflict, "block_size mismatch for model=%s routing_group=%s: existing=%d requested=%d", model, group, bs, blockSize)
	}
	p.publish()
	s.mu.Unlock()
	if p.approx != nil {
		// Approximate primary: the restored blocks expire like recorded
		// ones, counted from now.
		now, n := s.clock(), 0
		for i := range events {
			if p.approx.Restore(&events[i], now) {
				n++
			}
		}
		return n, nil
	}
	return p.index.Restore(events), nil
}
