package core

import (
	"cmp"
	"slices"
	"sync"

	"github.com/kvselect/kvselect/sched"
)

// Catalog changes happen in two phases, so that no lock is held across the
// ingress's blocking calls (Sync and Detach wait for listener goroutines):
//
//  1. Under Service.mu (short, no I/O): the catalog entry changes, and
//     the partitions' memberships (members.go, behind their own locks),
//     snapshots and loads with it; the change's effects on the ingress
//     and the index are recorded.
//  2. With Service.mu released: the effects run, in order (detach the old
//     placement, then sync the new one).
//
// Changes of one worker are serialized from start to end by its entry in
// workerLocks, so a worker's phase 2 never interleaves with another change
// of the same worker; changes of different workers run their ingress calls
// concurrently. /ready, GET /workers and selections take at most Service.mu
// (briefly) and never wait for an ingress.

// workerLocks serializes catalog changes per worker id. It holds an entry
// only for the workers with a change in progress or waiting, so its size
// is bounded by the concurrent catalog requests.
type workerLocks struct {
	mu      sync.Mutex
	workers map[uint64]*workerLock
}

type workerLock struct {
	sync.Mutex
	// users counts the holder and the waiters; under workerLocks.mu.
	users int
}

// lock takes worker id's lock and returns its unlock.
func (l *workerLocks) lock(id uint64) func() {
	l.mu.Lock()
	if l.workers == nil {
		l.workers = map[uint64]*workerLock{}
	}
	wl := l.workers[id]
	if wl == nil {
		wl = &workerLock{}
		l.workers[id] = wl
	}
	wl.users++
	l.mu.Unlock()
	wl.Lock()
	return func() {
		wl.Unlock()
		l.mu.Lock()
		if wl.users--; wl.users == 0 {
			delete(l.workers, id)
		}
		l.mu.Unlock()
	}
}

// effects are what phase 2 of a catalog change does.
type effects struct {
	// detach: the worker left partition detach (moved, became incomplete,
	// or was deleted): stop its listeners, drop its index blocks, release
	// the bookings on its retired ranks.
	detach *partition
	// release: ranks of the worker in partition release were retired while
	// it stays attached (its DP range shrank or moved): release their
	// bookings (Sync stops and clears their listeners).
	release *partition
	// sync: the worker is schedulable in syncPart; make its listeners
	// match its ranks.
	sync      bool
	syncPart  *partition
	blockSize int
	ranks     []RankSource
}

// run performs the effects of a change of worker id.
func (s *Service) run(id uint64, eff *effects) {
	if p := eff.detach; p != nil {
		if s.listening {
			// Listeners first: once Detach returns no late batch can
			// restore the blocks removed next.
			s.ingress.Detach(id)
		}
		p.removeWorker(id)
		s.releaseRetired(p)
	}
	if p := eff.release; p != nil && p != eff.detach {
		s.releaseRetired(p)
	}
	if eff.sync {
		s.ingress.Sync(id, eff.blockSize, eff.ranks, eff.syncPart.sink)
	}
}

// UpsertWorker registers or replaces worker spec.WorkerID (POST /workers).
// The whole record is replaced; a worker whose partition changes leaves its
// old partition first. It returns the new record: incomplete with reasons
// when the worker cannot be scheduled (still a success), schedulable
// otherwise. A record naming an endpoint outside Config.KVEndpointNetworks
// is a bad request; one that would take the KV-event listeners past
// Config.MaxListeners is a conflict; both leave the catalog unchanged.
func (s *Service) UpsertWorker(spec *WorkerSpec) (WorkerRecord, error) {
	if s.closed.Load() {
		return WorkerRecord{}, errShuttingDown
	}
	if err := s.checkOwner(); err != nil {
		return WorkerRecord{}, err
	}
	model := cmp.Or(spec.ModelName, DefaultPartition)
	group := cmp.Or(spec.RoutingGroup, DefaultPartition)
	if err := s.checkNetworks(spec.WorkerID, &spec.WorkerFields); err != nil {
		return WorkerRecord{}, err
	}
	f := spec.WorkerFields.clone()
	defer s.workerLocks.lock(spec.WorkerID)()
	var eff effects
	s.mu.Lock()
	rec, err := s.applyLocked(spec.WorkerID, model, group, f, &eff)
	s.mu.Unlock()
	if err != nil {
		return WorkerRecord{}, err
	}
	s.run(spec.WorkerID, &eff)
	return rec, nil
}

// PatchWorker updates the fields p sets (PATCH /workers/{id}) and
// reconciles again. A patch cannot move a worker to another partition.
func (s *Service) PatchWorker(id uint64, p *WorkerPatch) (WorkerRecord, error) {
	if s.closed.Load() {
		return WorkerRecord{}, errShuttingDown
	}
	if err := s.checkOwner(); err != nil {
		return WorkerRecord{}, err
	}
	defer s.workerLocks.lock(id)()
	s.mu.Lock()
	e, ok := s.catalog[id]
	if !ok {
		s.mu.Unlock()
		return WorkerRecord{}, errorf(ErrNotFound, "worker %d not found", id)
	}
	f := e.rec.WorkerFields.patch(p)
	model, group := e.rec.ModelName, e.rec.RoutingGroup
	s.mu.Unlock()
	// The worker's stripe is held: no other change of it runs meanwhile.
	if err := s.checkNetworks(id, &f); err != nil {
		return WorkerRecord{}, err
	}
	var eff effects
	s.mu.Lock()
	rec, err := s.applyLocked(id, model, group, f, &eff)
	s.mu.Unlock()
	if err != nil {
		return WorkerRecord{}, err
	}
	s.run(id, &eff)
	return rec, nil
}

// DeleteWorker removes worker id from the catalog (DELETE /workers/{id}):
// listeners stopped, blocks dropped, bookings released. It returns the
// final record, lifecycle unschedulable.
func (s *Service) DeleteWorker(id uint64) (WorkerRecord, error) {
	if err := s.checkOwner(); err != nil {
		return WorkerRecord{}, err
	}
	return s.deleteWorker(id)
}

// checkOwner refuses a public catalog mutation while a source owns the
// catalog (an exclusive CatalogReconciler): a conflict, "worker catalog is
// managed by <source name>".
func (s *Service) checkOwner() error {
	if o := s.owner.Load(); o != nil {
		return errorf(ErrConflict, "worker catalog is managed by %s", *o)
	}
	return nil
}

// upsertResult is one record's outcome in a batch.
type upsertResult struct {
	rec WorkerRecord
	err error
}

// upsertWorkers upserts a batch of records (a membership snapshot) with
// UpsertWorker's semantics for each, positionally: one failure does not
// stop the others. The in-memory changes happen under one hold of
// Service.mu and each affected partition publishes its snapshot once, at
// the end (Dynamo's batch upsert publishes a partition move at once; here
// every effect that could block runs after the publishes anyway). The
// workers' locks are taken in ascending id order, so batches and single
// changes never wait on each other in a cycle. Ids should be unique.
func (s *Service) upsertWorkers(specs []WorkerSpec) []upsertResult {
	res := make([]upsertResult, len(specs))
	type prepared struct {
		i            int
		model, group string
		f            WorkerFields
	}
	ok := make([]prepared, 0, len(specs))
	for i := range specs {
		sp := &specs[i]
		if s.closed.Load() {
			res[i].err = errShuttingDown
			continue
		}
		if h := s.failUpsert; h != nil {
			if err := h(sp.WorkerID); err != nil {
				res[i].err = err
				continue
			}
		}
		if err := s.checkNetworks(sp.WorkerID, &sp.WorkerFields); err != nil {
			res[i].err = err
			continue
		}
		ok = append(ok, prepared{i, cmp.Or(sp.ModelName, DefaultPartition), cmp.Or(sp.RoutingGroup, DefaultPartition), sp.WorkerFields.clone()})
	}
	ids := make([]uint64, len(ok))
	for j, p := range ok {
		ids[j] = specs[p.i].WorkerID
	}
	slices.Sort(ids)
	for _, id := range slices.Compact(ids) {
		defer s.workerLocks.lock(id)()
	}
	effs := make([]effects, len(ok))
	s.mu.Lock()
	s.deferred = map[*partition]struct{}{}
	for j, p := range ok {
		res[p.i].rec, res[p.i].err = s.applyLocked(specs[p.i].WorkerID, p.model, p.group, p.f, &effs[j])
	}
	for p := range s.deferred {
		p.publish()
		s.stats.publishes.Add(1)
		p.kick()
	}
	s.deferred = nil
	s.mu.Unlock()
	for j, p := range ok {
		if res[p.i].err == nil {
			s.run(specs[p.i].WorkerID, &effs[j])
		}
	}
	return res
}

// deleteWorker is DeleteWorker without the ownership check.
func (s *Service) deleteWorker(id uint64) (WorkerRecord, error) {
	defer s.workerLocks.lock(id)()
	var eff effects
	s.mu.Lock()
	e, ok := s.catalog[id]
	if !ok {
		s.mu.Unlock()
		return WorkerRecord{}, errorf(ErrNotFound, "worker %d not found", id)
	}
	s.detachLocked(id, e, &eff)
	delete(s.catalog, id)
	e.rec.Lifecycle = Unschedulable
	rec := s.recordLocked(e)
	s.mu.Unlock()
	s.run(id, &eff)
	return rec, nil
}

// applyLocked installs the record (id, model, group, f), reconciles the
// worker's partitions and records the effects for phase 2. f is owned by
// the catalog. On error nothing changed.
func (s *Service) applyLocked(id uint64, model, group string, f WorkerFields, eff *effects) (WorkerRecord, error) {
	p := s.partitionLocked(model, group)
	old := s.catalog[id]
	moving := old != nil && old.part != p
	reasons := s.reconcileLocked(id, &f, p, moving || old == nil)
	if len(reasons) == 0 && s.listening {
		_, size := f.dpRange()
		inUse := s.listenerRanks()
		if old != nil {
			inUse -= old.part.memberRanks(id)
		}
		if inUse+int(size) > s.cfg.MaxListeners {
			return WorkerRecord{}, errorf(ErrConflict, "worker %d needs %d KV-event listeners but %d of the limit of %d are in use", id, size, inUse, s.cfg.MaxListeners)
		}
	}
	if moving {
		s.detachLocked(id, old, eff)
	}
	// A record replaced in place keeps the membership (and rank range) of
	// the one it replaces until it attaches its own: the partition holds
	// it, by worker id.
	e := &catalogEntry{part: p, rec: WorkerRecord{WorkerID: id, ModelName: p.model, RoutingGroup: p.group, WorkerFields: f}}
	if old != nil {
		e.engineAdapters, e.engineDown = old.engineAdapters, old.engineDown
	}
	if len(reasons) > 0 {
		s.detachLocked(id, e, eff)
		e.rec.Lifecycle = Incomplete
		e.rec.NotSchedulableReasons = reasons
	} else {
		s.attachLocked(id, e, eff)
		e.rec.Lifecycle = Schedulable
	}
	s.catalog[id] = e
	return s.recordLocked(e), nil
}

// attachLocked makes e schedulable in its partition (members.go: block
// size and eagle flag fixed on first use, a load per rank, ranks that left
// retired), publishes the snapshot; phase 2 syncs the listeners.
func (s *Service) attachLocked(id uint64, e *catalogEntry, eff *effects) {
	p := e.part
	if p.attach(id, e, &s.cfg.Sched) {
		eff.release = p
	}
	s.publishLocked(p)
	if s.listening {
		eff.sync, eff.syncPart, eff.blockSize, eff.ranks = true, p, int(p.blockSize()), e.rec.rankSources()
	}
}

// detachLocked removes e's worker from its partition if it is a member:
// out of the snapshot, every rank's load retired; phase 2 stops the
// listeners, drops the index blocks and releases the bookings.
func (s *Service) detachLocked(id uint64, e *catalogEntry, eff *effects) {
	p := e.part
	if !p.detach(id) {
		return
	}
	s.publishLocked(p)
	eff.detach = p
}

// recordLocked returns a copy of e's record.
func (s *Service) recordLocked(e *catalogEntry) WorkerRecord {
	r := e.rec
	r.WorkerFields = r.WorkerFields.clone()
	r.NotSchedulableReasons = slices.Clone(r.NotSchedulableReasons)
	return r
}

// ListWorkers returns the catalog sorted by (model_name, routing_group,
// worker_id), filtered by model and group when non-empty, with the listener
// states of schedulable workers (Ingress.Status, asked after the catalog
// lock is released).
func (s *Service) ListWorkers(model, group string) []WorkerRecord {
	s.mu.Lock()
	out := make([]WorkerRecord, 0, len(s.catalog))
	for _, e := range s.catalog {
		if (model == "" || e.rec.ModelName == model) && (group == "" || e.rec.RoutingGroup == group) {
			out = append(out, s.recordLocked(e))
		}
	}
	s.mu.Unlock()
	if s.listening {
		for i := range out {
			if out[i].Lifecycle == Schedulable {
				out[i].Listeners = s.ingress.Status(out[i].WorkerID, nil)
			}
		}
	}
	slices.SortFunc(out, func(a, b WorkerRecord) int {
		return cmp.Or(cmp.Compare(a.ModelName, b.ModelName), cmp.Compare(a.RoutingGroup, b.RoutingGroup), cmp.Compare(a.WorkerID, b.WorkerID))
	})
	return out
}

// Readiness is the body of GET /ready.
type Readiness struct {
	Ready              bool           `json:"ready"`
	SchedulableWorkers int            `json:"schedulable_workers"`
	Workers            []WorkerRecord `json:"workers"`
	// Recovery is what startup recovery restored (kvselect's addition),
	// nil when the host ran none.
	Recovery *Recovery `json:"recovery,omitempty"`
	// EventPlane is the host's report of its event-plane link
	// (kvselect's addition; SetEventPlaneProbe), nil without one. It
	// never makes the service unready: a replica cut off from the bus
	// keeps selecting on its own view.
	EventPlane any `json:"event_plane,omitempty"`
}

// Recovery is what the host's startup index recovery restored, as it
// reported it with SetRecovery.
type Recovery struct {
	// Peer is the base URL whose dump was applied; empty when every peer
	// failed and the service started empty.
	Peer       string `json:"peer"`
	Partitions int    `json:"partitions"`
	Events     int    `json:"events"`
	// FailedPeers is how many peers were tried and failed.
	FailedPeers int `json:"failed_peers"`
}

// SetRecovery records what startup recovery restored, for Ready and Stats.
func (s *Service) SetRecovery(r Recovery) { s.recovery.Store(&r) }

// SetEventPlaneProbe installs what Ready reports as EventPlane: probe is
// called on every Ready, must not block, and returns a JSON-encodable
// value.
func (s *Service) SetEventPlaneProbe(probe func() any) { s.eventPlane.Store(&probe) }

// Ready reports whether the service is ready: not shutting down and at
// least one worker schedulable anywhere.
func (s *Service) Ready() Readiness {
	ws := s.ListWorkers("", "")
	n := 0
	for i := range ws {
		if ws[i].Lifecycle == Schedulable {
			n++
		}
	}
	// A schedulable record whose engine is down (SetEngineAvailable) is
	// not selectable: counted from the snapshots, which hold it apart.
	n = min(n, int(s.schedulableWorkers()))
	r := Readiness{Ready: !s.closed.Load() && n > 0, SchedulableWorkers: n, Workers: ws, Recovery: s.recovery.Load()}
	if p := s.eventPlane.Load(); p != nil {
		r.EventPlane = (*p)()
	}
	return r
}

// schedWorker builds the eligibility row of a schedulable record.
func schedWorker(r *WorkerRecord) sched.Worker {
	start, size := r.dpRange()
	return sched.Worker{ID: r.WorkerID, DPStart: start, DPSize: size, Taints: r.Taints}
}
