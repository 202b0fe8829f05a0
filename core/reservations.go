package core

import (
	"cmp"
	"context"
	"encoding/binary"
	"math"
	"strings"
	"time"

	"github.com/kvselect/kvselect/radix"
	"github.com/kvselect/kvselect/sched"
	"github.com/zeebo/xxh3"
)

// booking is what book needs to claim, book and announce one reservation.
type booking struct {
	p      *partition
	id     string
	worker WorkerKey
	load   *sched.WorkerLoad
	seq    []uint64
	// local, when non-empty, is the prompt's local block hashes: recorded
	// into p's approximate indexes once the booking lands (index.go).
	local       []uint64
	effective   int64
	track       bool
	reuse       bool
	lora        string
	expected    uint32
	hasExpected bool
	// replayed, when set, is the pending entry a replay books: it is
	// consumed after the slot is booked and before the record turns live.
	replayed *pendingEntry
	// lease, when set, is installed on the record at its claim (before
	// any other goroutine can see it) and released when the record ends.
	lease Lease
	// commit, when set, runs once the slot is booked and before the
	// record turns live (the session commit): its lease becomes the
	// record's; its error undoes the booking.
	commit func() (Lease, error)
	// rec is set by a successful book: the record it made live.
	rec *reservation
}

// book claims b.id in the ledger, books the record's slot, turns it live
// and publishes the admission to replica peers. On failure the claim is
// abandoned and nothing of the booking remains.
//
// A replayed pending entry is removed before the record turns live, so no
// lifecycle call can free the booking while the entry is still there: a
// second replay of the entry either meets the claim (a conflict) or finds
// the entry gone (not found), and a cached selection books at most once.
func (s *Service) book(b *booking) error {
	now := s.clock().UnixNano()
	s.maybeExpire(now)
	r := &reservation{
		id: strings.Clone(b.id), p: b.p, admitted: now, bytes: recordBytes(b.id, b.seq), lease: b.lease,
		lora: strings.Clone(b.lora), expected: b.expected, hasExpected: b.hasExpected, track: b.track, reuse: b.reuse, blocks: int32(min(len(b.seq), math.MaxInt32)),
	}
	if err := s.ledger.claim(r); err != nil {
		if err == errClaimed {
			s.stats.bookConflict.Add(1)
			return errorf(ErrConflict, "selection %s is already reserved or being reserved", b.id)
		}
		s.stats.bookRefused.Add(1)
		return err
	}
	if e := b.replayed; e != nil && !s.pending.has(e.key, e.gen) {
		// Another replay booked the entry (and the booking may since
		// have been freed, which let this claim through) between the
		// peek and the claim: the claim now keeps any other replay out,
		// so the entry's absence is final. Single use.
		s.ledger.remove(r)
		s.stats.replayMiss.Add(1)
		return errorf(ErrNotFound, "no pending selection %s for model=%s routing_group=%s (expired, already used, or never selected)", b.id, b.p.model, b.p.group)
	}
	var prefill int64
	if b.track {
		prefill = b.effective
	}
	if err := r.slot.Book(b.load, &sched.Booking{SequenceHashes: b.seq, PrefillTokens: prefill, AssumeKVReuse: b.reuse, BlockSize: s.progressBlockSize(b.p.snap.Load())}); err != nil {
		s.ledger.remove(r)
		s.stats.bookFailed.Add(1)
		return errorf(ErrNotFound, "Worker %s not found", b.worker)
	}
	if b.commit != nil {
		l, err := b.commit()
		if err != nil {
			r.slot.Release()
			s.ledger.remove(r)
			s.stats.bookFailed.Add(1)
			b.p.kick()
			return err
		}
		switch {
		case l == nil:
		case r.lease == nil:
			r.lease = l
		default: // a plan's leg that bound its session
			r.lease = leasePair{r.lease, l}
		}
	}
	if e := b.replayed; e != nil {
		s.pending.removeGen(e.key, e.gen)
	}
	// The admission is published before the record turns live, so it is
	// queued before any completion or free of it: peers see them in order.
	if s.publishing {
		s.publishAdd(r, b.worker, b.seq, b.effective)
	}
	r.state.Store(stateLive)
	if b.load.Retired() {
		// The rank left after the pick and its removal's release may have
		// ranged the ledger before this record turned live: release it
		// here (one of the two releases wins).
		s.release(r, releasedBookingUndone)
		s.stats.bookFailed.Add(1)
		return errorf(ErrNotFound, "Worker %s not found", b.worker)
	}
	s.stats.bookOK.Add(1)
	if p := b.p; p.records() {
		p.record(b.worker, b.local, time.Unix(0, now))
	}
	b.rec = r
	return nil
}

// publishAdd announces r's admission. Built only when a sink listens: the
// event escapes through the interface call, so building it
// unconditionally costs an allocation per booking.
func (s *Service) publishAdd(r *reservation, w WorkerKey, seq []uint64, effective int64) {
	ev := ReplicaEvent{
		Kind: ReplicaAdd, ModelName: r.p.model, RoutingGroup: r.p.group, BlockSize: r.p.snap.Load().blockSize,
		RequestID: r.id, Worker: w, LoraName: r.lora, SequenceHashes: seq,
		TrackPrefillTokens: r.track, EffectivePrefillTokens: effective,
	}
	if !r.reuse {
		ev.SequenceHashes = privateHashes(nil, r.id, len(seq))
	}
	if r.hasExpected {
		ev.ExpectedOutputTokens = &r.expected
	}
	s.replica.Publish(&ev)
}

// publish announces a lifecycle event of r (prefill completion, free).
// The booking's LoRA travels on every event of it, as the reference writes
// them (ai-dynamo/dynamo:lib/kv-router/src/sequences/multi_worker.rs reads
// request_index.lora_for before publishing MarkPrefillCompleted and Free);
// a receiver finds the booking by request id and need not read it.
func (s *Service) publish(kind ReplicaEventKind, r *reservation) {
	if !s.publishing {
		return
	}
	s.replica.Publish(&ReplicaEvent{Kind: kind, ModelName: r.p.model, RoutingGroup: r.p.group, BlockSize: r.p.snap.Load().blockSize, RequestID: r.id, Worker: r.worker(), LoraName: r.lora})
}

// privateHashes appends n tracking hashes that belong to request id alone,
// for a booking that assumes no KV reuse: a peer that books them shares no
// block with another request, as Dynamo's random tracking hashes ensure.
// They are derived from the id, so a snapshot repeats them.
func privateHashes(dst []uint64, id string, n int) []uint64 {
	seed := xxh3.HashString(id)
	var b [8]byte
	for i := range n {
		binary.LittleEndian.PutUint64(b[:], uint64(i))
		dst = append(dst, xxh3.HashSeed(b[:], seed))
	}
	return dst
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

// replay books exactly what the cached select captured: it peeks the entry,
// books it, and the booking consumes the entry (book). Every failure
// before the booking lands leaves the entry in place for a retry; a newer
// select of the id (a new generation) survives the replay of an older one.
func (s *Service) replay(id, model, group string) (Reservation, error) {
	e := s.pending.peek(pendingKey{model, group, id}, s.clock())
	if e == nil {
		s.stats.replayMiss.Add(1)
		return Reservation{}, errorf(ErrNotFound, "no pending selection %s for model=%s routing_group=%s (expired, already used, or never selected)", id, model, group)
	}
	s.stats.replayHit.Add(1)
	p, sn, err := s.readyPartition(model, group)
	if err != nil {
		return Reservation{}, err
	}
	v, wl := sn.load(e.worker)
	if wl == nil {
		return Reservation{}, errorf(ErrNotFound, "schedulable worker %d (dp_rank %d) not found for model=%s routing_group=%s", e.worker.WorkerID, e.worker.DPRank, model, group)
	}
	b := booking{p: p, id: id, worker: e.worker, load: wl, seq: e.seq, local: e.local, effective: e.effective, track: e.trackPrefill, reuse: e.assumeKVReuse, lora: e.lora, replayed: e}
	if e.expectedOutputTokens != nil {
		b.expected, b.hasExpected = *e.expectedOutputTokens, true
	}
	if e.hasSession && p.affinity != nil {
		// The cached select's session binds to the replayed worker, as
		// select_and_reserve binds it: held before booking, committed
		// before the record turns live.
		h, err := s.holdSession(context.Background(), p, e.session)
		if err != nil {
			if ClassOf(err) == ErrBadRequest {
				s.pending.removeGen(e.key, e.gen)
			}
			return Reservation{}, err
		}
		if h != nil {
			defer h.drop()
			b.commit = func() (Lease, error) { return s.commitSession(p, h, e.worker) }
		}
	}
	if err := s.book(&b); err != nil {
		// A session that moved away from the cached worker (hard mode):
		// that worker can never be booked for it; the entry goes.
		if ClassOf(err) == ErrBadRequest {
			s.pending.removeGen(e.key, e.gen)
		}
		return Reservation{}, err
	}
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
	local, seq, isl, err := normalize(&req.Prompt, p, sn, sc, false)
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
		if err := s.match(p, local, sc); err != nil {
			return Reservation{}, err
		}
		c := sched.Candidate{Worker: w}
		for _, m := range sc.res.Matches {
			if m.Worker == w {
				c.DeviceBlocks, c.HostBlocks, c.DiskBlocks = int64(m.Device), int64(m.Host), int64(m.Disk+m.External)
			}
		}
		eff = sched.EffectivePrefillTokens(isl, sched.CachedTokens(&params, int64(sn.blockSize), &c))
	}
	b := booking{
		p: p, id: req.SelectionID, worker: w, load: wl, seq: seq, local: local, effective: eff, track: track, reuse: params.AssumeKVReuse,
		lora: req.LoraName, expected: req.ExpectedOutputTokens, hasExpected: req.HasExpectedOutputTokens,
	}
	if err := s.book(&b); err != nil {
		return Reservation{}, err
	}
	return Reservation{SelectionID: req.SelectionID, ModelName: p.model, RoutingGroup: p.group, WorkerID: w.WorkerID, DPRank: w.DPRank, Endpoint: v.endpoint}, nil
}

// lookupLive returns id's live record or the not-found error. In-flight
// claims are invisible: a lifecycle call for an id whose booking has not
// landed finds nothing, as in the reference.
func (s *Service) lookupLive(id string) (*reservation, error) {
	r, ok := s.ledger.m.Load(id)
	if ok && s.afterLookup != nil {
		s.afterLookup(id)
	}
	if !ok || r.state.Load() != stateLive {
		s.stats.lifecycle404.Add(1)
		return nil, errorf(ErrNotFound, "reservation %s not found", id)
	}
	return r, nil
}

// PrefillComplete clears the reservation's active prefill load (POST
// /reservations/{id}/prefill_complete): one map lookup and one atomic swap.
// Completing twice is a 200 and publishes again, as the reference does.
func (s *Service) PrefillComplete(id string) error {
	r, err := s.lookupLive(id)
	if err != nil {
		return err
	}
	r.slot.CompletePrefill()
	s.stats.lifecycleOK.Add(1)
	s.publish(ReplicaPrefillCompleted, r)
	r.p.kick()
	return nil
}

// errDecayFraction is the output_block validation error (a bad request).
var errDecayFraction = &Error{Class: ErrBadRequest, Msg: "decay_fraction must be between 0.0 and 1.0"}

// OutputBlock adds one decode block to the reservation's local accounting
// (POST /reservations/{id}/output_block), whatever router_track_output_blocks
// says: that flag steers only the reference's frontend, and its selection
// service adds the block unconditionally (Dynamo's test
// output_block_endpoint_updates_reserved_load,
// ai-dynamo/dynamo:lib/kv-router/src/services/selection/tests.rs).
// decayFraction, when non-nil, must be in [0, 1]. Never replicated.
func (s *Service) OutputBlock(id string, decayFraction *float64) error {
	if f := decayFraction; f != nil && (math.IsNaN(*f) || *f < 0 || *f > 1) {
		return errDecayFraction
	}
	r, err := s.lookupLive(id)
	if err != nil {
		return err
	}
	if err := r.slot.OutputBlock(decayFraction); err != nil {
		return fromSched(err)
	}
	s.stats.lifecycleOK.Add(1)
	return nil
}

// Free releases the reservation and removes its record (DELETE
// /reservations/{id}). Of concurrent frees, expiries and worker removals of
// one record exactly one releases it; the others answer not found.
func (s *Service) Free(id string) error {
	r, ok := s.ledger.m.Load(id)
	if ok && s.afterLookup != nil {
		s.afterLookup(id)
	}
	if !ok {
		s.stats.lifecycle404.Add(1)
		return errorf(ErrNotFound, "reservation %s not found", id)
	}
	return s.freeRecord(r)
}

// freeRecord releases exactly the booking r (not whatever booking its id
// names now) and publishes the free; not found when r already ended.
func (s *Service) freeRecord(r *reservation) error {
	if !s.release(r, releasedFree) {
		s.stats.lifecycle404.Add(1)
		return errorf(ErrNotFound, "reservation %s not found", r.id)
	}
	s.stats.lifecycleOK.Add(1)
	return nil
}
