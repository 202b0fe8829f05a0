package core

import (
	"cmp"
	"errors"
	"math"
	"strings"
	"sync/atomic"

	"github.com/kvselect/kvselect/radix"
	"github.com/kvselect/kvselect/sched"
)

// reservation is one row of the reservation index: the partition that holds
// the booking of a selection id, and the tracker's handle of that booking.
// A row is claimed (installed false) before booking and installed after;
// lifecycle calls see only installed rows.
//
// Lifecycle calls act through h, never by id: between a call's row lookup
// and its tracker call, the id may be freed and booked again (a new row, a
// new booking), and the call must not act on that newer booking. Through
// h it finds its own booking freed and answers 404, as if it had run just
// after the free (TestLifecycleCallSparesANewerBooking).
type reservation struct {
	// id is the row's own copy of the selection id (the map key): dropRow
	// passes it to Compute, which stores the key it is given.
	id string
	p  *partition
	// h is the booking's handle; written before installed is set, read
	// only after installed is seen true.
	h         sched.Handle
	installed atomic.Bool
}

// booking is what book needs to claim, book and announce one reservation.
type booking struct {
	p           *partition
	id          string
	worker      radix.WorkerKey
	seq         []uint64
	effective   int64
	track       bool
	reuse       bool
	lora        string
	expected    uint32
	hasExpected bool
}

// book claims b.id, books it on the tracker, installs the row and publishes
// the admission to replica peers. On failure the claim is released.
func (s *Service) book(b *booking) error {
	id := strings.Clone(b.id)
	row := &reservation{id: id, p: b.p}
	if _, loaded := s.claims.LoadOrStore(id, row); loaded {
		s.stats.bookConflict.Add(1)
		return errorf(ErrConflict, "selection %s is already reserved or being reserved", b.id)
	}
	var prefill int64
	if b.track {
		prefill = b.effective
	}
	h, err := b.p.tracker.BookHandle(&sched.Booking{RequestID: id, Worker: b.worker, SequenceHashes: b.seq, PrefillTokens: prefill, AssumeKVReuse: b.reuse}, s.clock())
	if err != nil {
		s.dropRow(row)
		switch {
		case errors.Is(err, sched.ErrDuplicateRequest):
			s.stats.bookConflict.Add(1)
			w, _ := b.p.tracker.Lookup(b.id)
			return errorf(ErrConflict, "Request %s already exists (assigned to worker %s)", b.id, w)
		case errors.Is(err, sched.ErrWorkerNotFound):
			s.stats.bookFailed.Add(1)
			return errorf(ErrNotFound, "Worker %s not found", b.worker)
		}
		s.stats.bookFailed.Add(1)
		return err
	}
	row.h = h
	row.installed.Store(true)
	s.stats.bookOK.Add(1)
	if !s.publishing {
		return nil
	}
	// Built only when a sink listens: the event escapes through the
	// interface call, so building it unconditionally costs an allocation
	// per booking.
	ev := ReplicaEvent{
		Kind: ReplicaAdd, ModelName: b.p.model, RoutingGroup: b.p.group, BlockSize: b.p.snap.Load().blockSize,
		RequestID: id, Worker: b.worker, LoraName: b.lora, SequenceHashes: b.seq,
		TrackPrefillTokens: b.track, EffectivePrefillTokens: b.effective,
	}
	if b.hasExpected {
		ev.ExpectedOutputTokens = &b.expected
	}
	s.replica.Publish(&ev)
	return nil
}

// dropRow removes row from the index if it is still the row of its id (a
// newer claim survives). Compute is given the row's own key: xsync stores
// the key it is passed when it keeps an entry, so a caller's string (which
// may alias a request buffer) must never reach it.
func (s *Service) dropRow(row *reservation) {
	s.claims.Compute(row.id, func(old *reservation, loaded bool) (*reservation, bool) {
		return old, !loaded || old == row
	})
}

// ReservationRequest is the input of Reserve (POST /reservations).
// Without WorkerID it replays the cached selection of SelectionID; with it,
// it books the given worker and prompt (the explicit form).
type ReservationRequest struct {
	ModelName, RoutingGroup string
	SelectionID             string
	WorkerID                uint64
	HasWorkerID             bool
	DPRank                  uint32
	Prompt
	Override                  *sched.Override
	ExpectedOutputTokens      uint32
	HasExpectedOutputTokens   bool
	EffectivePrefillTokens    uint64
	HasEffectivePrefillTokens bool
	TrackPrefillTokens        *bool
}

// Reset empties r, keeping slice capacity.
func (r *ReservationRequest) Reset() {
	pr := r.Prompt
	pr.Reset()
	*r = ReservationRequest{Prompt: pr}
}

// Reservation is the ReservationResponse (201).
type Reservation struct {
	SelectionID  string `json:"selection_id"`
	ModelName    string `json:"model_name"`
	RoutingGroup string `json:"routing_group"`
	WorkerID     uint64 `json:"worker_id"`
	DPRank       uint32 `json:"dp_rank"`
	Endpoint     string `json:"endpoint"`
}

// Reserve books a reservation (POST /reservations), explicit or replayed.
func (s *Service) Reserve(req *ReservationRequest) (Reservation, error) {
	model := cmp.Or(req.ModelName, DefaultPartition)
	group := cmp.Or(req.RoutingGroup, DefaultPartition)
	if req.HasWorkerID {
		return s.reserveExplicit(req, model, group)
	}
	return s.replay(req.SelectionID, model, group)
}

// replay books exactly what the cached select captured. Every failure before
// the booking lands leaves the entry in place; success removes the
// generation it took. The entry is taken for the length of the booking, so
// a concurrent replay of it is a 409 (as its claim would be) even if the
// first booking is freed before the entry is removed: single use.
func (s *Service) replay(id, model, group string) (Reservation, error) {
	k := pendingKey{model, group, id}
	e, busy := s.pending.take(k, s.clock())
	if busy {
		s.stats.bookConflict.Add(1)
		return Reservation{}, errorf(ErrConflict, "selection %s is already reserved or being reserved", id)
	}
	if e == nil {
		s.stats.replayMiss.Add(1)
		return Reservation{}, errorf(ErrNotFound, "no pending selection %s for model=%s routing_group=%s (expired, already used, or never selected)", id, model, group)
	}
	s.stats.replayHit.Add(1)
	booked := false
	defer func() {
		if booked {
			s.pending.removeGen(k, e.gen)
		} else {
			s.pending.untake(k, e.gen)
		}
	}()
	p, sn, err := s.readyPartition(model, group)
	if err != nil {
		return Reservation{}, err
	}
	v, wl := sn.load(e.worker)
	if wl == nil {
		return Reservation{}, errorf(ErrNotFound, "schedulable worker %d not found for model=%s routing_group=%s", e.worker.WorkerID, model, group)
	}
	b := booking{p: p, id: id, worker: e.worker, seq: e.seq, effective: e.effective, track: e.trackPrefill, reuse: e.assumeKVReuse, lora: e.lora}
	if e.expectedOutputTokens != nil {
		b.expected, b.hasExpected = *e.expectedOutputTokens, true
	}
	if err := s.book(&b); err != nil {
		return Reservation{}, err
	}
	booked = true
	return Reservation{SelectionID: id, ModelName: p.model, RoutingGroup: p.group, WorkerID: e.worker.WorkerID, DPRank: e.worker.DPRank, Endpoint: v.endpoint}, nil
}

// reserveExplicit books the given worker and prompt, after discarding any
// cached selection of the id in the partition.
func (s *Service) reserveExplicit(req *ReservationRequest, model, group string) (Reservation, error) {
	s.pending.discard(pendingKey{model, group, req.SelectionID})
	p, sn, err := s.readyPartition(model, group)
	if err != nil {
		return Reservation{}, err
	}
	params, err := s.cfg.Sched.Resolve(req.Override)
	if err != nil {
		return Reservation{}, fromSched(err)
	}
	sc := s.getScratch()
	defer s.putScratch(sc)
	local, seq, isl, err := normalize(&req.Prompt, sn, sc, false)
	if err != nil {
		return Reservation{}, err
	}
	if req.HasEffectivePrefillTokens && req.EffectivePrefillTokens > uint64(isl) {
		return Reservation{}, errorf(ErrBadRequest, "effective_prefill_tokens (%d) must not exceed isl_tokens (%d)", req.EffectivePrefillTokens, isl)
	}
	w := radix.WorkerKey{WorkerID: req.WorkerID, DPRank: req.DPRank}
	v, wl := sn.load(w)
	if wl == nil {
		return Reservation{}, errorf(ErrNotFound, "schedulable worker %d not found for model=%s routing_group=%s", req.WorkerID, model, group)
	}
	track := params.TrackPrefillTokens
	if req.HasEffectivePrefillTokens {
		track = true
	}
	if req.TrackPrefillTokens != nil {
		track = *req.TrackPrefillTokens
	}
	eff := isl
	if req.HasEffectivePrefillTokens {
		eff = int64(min(req.EffectivePrefillTokens, math.MaxInt64))
	} else if len(local) > 0 {
		// No caller value: the cache credit of the booked rank, from the
		// index, as a select would compute it.
		p.index.Match(local, &sc.res)
		c := sched.Candidate{Worker: w}
		for _, m := range sc.res.Matches {
			if m.Worker == w {
				c.DeviceBlocks, c.HostBlocks, c.DiskBlocks = int64(m.Device), int64(m.Host), int64(m.Disk+m.External)
			}
		}
		eff = sched.EffectivePrefillTokens(isl, sched.CachedTokens(&params, int64(sn.blockSize), &c))
	}
	b := booking{
		p: p, id: req.SelectionID, worker: w, seq: seq, effective: eff, track: track, reuse: params.AssumeKVReuse,
		lora: req.LoraName, expected: req.ExpectedOutputTokens, hasExpected: req.HasExpectedOutputTokens,
	}
	if err := s.book(&b); err != nil {
		return Reservation{}, err
	}
	return Reservation{SelectionID: req.SelectionID, ModelName: p.model, RoutingGroup: p.group, WorkerID: w.WorkerID, DPRank: w.DPRank, Endpoint: v.endpoint}, nil
}

// installedRow returns id's installed row or the 404.
func (s *Service) installedRow(id string) (*reservation, error) {
	r, ok := s.claims.Load(id)
	if !ok || !r.installed.Load() {
		s.stats.lifecycle404.Add(1)
		return nil, errorf(ErrNotFound, "reservation %s not found", id)
	}
	if s.afterRowLookup != nil {
		s.afterRowLookup(id)
	}
	return r, nil
}

// PrefillComplete clears the reservation's active prefill load (POST
// /reservations/{id}/prefill_complete). Completing twice is a 200.
func (s *Service) PrefillComplete(id string) error {
	r, err := s.installedRow(id)
	if err != nil {
		return err
	}
	if !r.p.tracker.PrefillCompleteHandle(r.h) {
		s.dropRow(r)
		s.stats.lifecycle404.Add(1)
		return errorf(ErrNotFound, "reservation %s not found", id)
	}
	s.stats.lifecycleOK.Add(1)
	if !s.publishing {
		return nil
	}
	s.replica.Publish(&ReplicaEvent{Kind: ReplicaPrefillCompleted, ModelName: r.p.model, RoutingGroup: r.p.group, BlockSize: r.p.snap.Load().blockSize, RequestID: id, Worker: r.h.Worker()})
	return nil
}

// errDecayFraction is the output_block validation error (400).
var errDecayFraction = &Error{Class: ErrBadRequest, Msg: "decay_fraction must be between 0.0 and 1.0"}

// OutputBlock adds one decode block to the reservation's local accounting
// (POST /reservations/{id}/output_block); decayFraction, when non-nil, must
// be in [0, 1]. Never replicated.
func (s *Service) OutputBlock(id string, decayFraction *float64) error {
	if f := decayFraction; f != nil && (math.IsNaN(*f) || *f < 0 || *f > 1) {
		return errDecayFraction
	}
	r, err := s.installedRow(id)
	if err != nil {
		return err
	}
	if err := r.p.tracker.OutputBlockHandle(r.h, decayFraction); err != nil {
		if errors.Is(err, sched.ErrRequestNotFound) {
			s.dropRow(r)
			s.stats.lifecycle404.Add(1)
			return errorf(ErrNotFound, "reservation %s not found", id)
		}
		return err
	}
	s.stats.lifecycleOK.Add(1)
	return nil
}

// Free releases the reservation and removes its row (DELETE
// /reservations/{id}).
func (s *Service) Free(id string) error {
	r, err := s.installedRow(id)
	if err != nil {
		return err
	}
	ok := r.p.tracker.FreeHandle(r.h)
	s.dropRow(r)
	if !ok {
		s.stats.lifecycle404.Add(1)
		return errorf(ErrNotFound, "reservation %s not found", id)
	}
	s.stats.lifecycleOK.Add(1)
	if !s.publishing {
		return nil
	}
	s.replica.Publish(&ReplicaEvent{Kind: ReplicaFree, ModelName: r.p.model, RoutingGroup: r.p.group, BlockSize: r.p.snap.Load().blockSize, RequestID: id, Worker: r.h.Worker()})
	return nil
}
