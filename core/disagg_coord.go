package core

import (
	"slices"
	"sync"
	"sync/atomic"

	"github.com/kvselect/kvselect/sched"
)

// plan is one coordinated request: its request, its state machine and its
// legs. The legs are not copies of bookings: each is a handle on the
// ledger's record of an ordinary reservation, and the record carries the
// leg as its Lease, so the record names the plan it belongs to.
type plan struct {
	// id and created (UnixNano) are immutable.
	id      string
	created int64
	legIDs  [numPools]string

	// mu serializes the coordinator's steps on this plan (planning,
	// plan_decode, prefill_complete, release, expiry). It is held across
	// in-process Service calls only, and the ledger never takes it: a
	// leg's Release is an atomic store.
	mu sync.Mutex

	// Under mu:
	// live: registered in the Service's plan registry (false while the
	// plan is being made and once removed).
	live    bool
	req     DisaggRequest // the plan's own copy; the prompt is dropped once no step needs it
	order   DisaggOrder
	failure PrefillFailurePolicy
	// legs[pool] is the booking the plan holds in pool (the reference's
	// Option<PoolBooking>): set when booked, cleared when the coordinator
	// takes it to free it. A held leg whose record the ledger ended
	// (expiry, worker removal, a direct free) stays until taken, as in
	// the reference; views omit it.
	legs [numPools]*legLease
	// decision and signals: decode-anchored only.
	decision *BypassDecision
	signals  *DecodeSignals
	// prefillWorker is the prefill leg's worker, remembered by
	// prefill_complete so that a later plan_decode is still constrained
	// to its KV-transfer domain.
	prefillWorker    uint64
	hasPrefillWorker bool
	state            PlanState
	transitions      []PlanState
}

// legLease is one leg of a plan: the Lease of the leg's ledger record.
type legLease struct {
	plan *plan
	pool Pool
	// rec and endpoint are written once, under plan.mu, after the booking.
	rec      *reservation
	endpoint string
	// ended is set by Release: the ledger ended the record (free, expiry,
	// worker removal), whoever asked.
	ended atomic.Bool
}

// Release implements Lease. It runs without the ledger's locks and takes
// none (the coordinator may hold plan.mu while it frees the leg).
func (l *legLease) Release() { l.ended.Store(true) }

func (p *plan) transition(st PlanState) {
	p.state = st
	p.transitions = append(p.transitions, st)
}

// take clears and returns the leg held in pool, nil if none.
func (p *plan) take(pool Pool) *legLease {
	l := p.legs[pool]
	p.legs[pool] = nil
	return l
}

// canPlanDecode: plan_decode's precondition (a prefill booking, held or
// completed, and no decode booking).
func (p *plan) canPlanDecode() bool {
	return (p.state == PlanPrefillCommitted || p.state == PlanPrefillReleased) && p.legs[DecodePool] == nil
}

// group returns the routing group of pool.
func (p *plan) group(pool Pool) string {
	if pool == PrefillPool {
		return p.req.PrefillRoutingGroup
	}
	return p.req.DecodeRoutingGroup
}

// selectReq returns the fields every call of the plan to pool shares: the
// model, the pool's routing group, the prompt, the session (its id only:
// no policy reads the rest of a session context yet), the allow-set,
// the base routing constraints and the expected output tokens. Its slices
// alias the plan's request; a call that changes one copies it first.
func (p *plan) selectReq(pool Pool) SelectRequest {
	r := &p.req
	return SelectRequest{
		ModelName: r.ModelName, RoutingGroup: p.group(pool), Prompt: r.Prompt,
		SessionContext: SessionContext{SessionID: r.SessionID}, HasSessionContext: r.SessionID != "",
		AllowedWorkerIDs: r.AllowedWorkerIDs, HasAllowedWorkerIDs: r.HasAllowedWorkerIDs,
		RequiredTaints: r.RequiredTaints, PreferredTaints: r.PreferredTaints,
		ExpectedOutputTokens: r.ExpectedOutputTokens, HasExpectedOutputTokens: r.HasExpectedOutputTokens,
	}
}

// prefillBooking turns sr into the prefill booking's request: the prefill
// override, expected_output_tokens 1, the prefill pin.
func (p *plan) prefillBooking(sr *SelectRequest) {
	sr.Override = p.req.PrefillOverride
	sr.ExpectedOutputTokens, sr.HasExpectedOutputTokens = 1, true
	sr.PinnedWorker = p.req.PinnedPrefillWorker
}

// decodeOverride is the override of a decode call: the base with
// assume_kv_reuse and track_prefill_tokens forced off (decode never books
// prompt-side load, even on a bypass) and, unless keepCredit, zero overlap
// credit (load-only routing).
func decodeOverride(base *Override, keepCredit bool) *Override {
	var o Override
	if base != nil {
		o = *base
	}
	no, zero := false, 0.0
	o.AssumeKVReuse, o.TrackPrefillTokens = &no, &no
	if !keepCredit {
		o.OverlapScoreCredit = &zero
	}
	return &o
}

// promptTokens is the prompt length the policy reads: token_ids' length,
// else isl_tokens, else 0. Multimodal routing tokens are not counted.
func promptTokens(pr *Prompt) uint64 {
	switch {
	case pr.HasTokenIDs:
		return uint64(len(pr.TokenIDs))
	case pr.HasISLTokens:
		return pr.ISLTokens
	}
	return 0
}

// bookLeg books the leg of pool for p with sr (the leg's selection id is
// set here) and returns it; its record carries the leg as its lease.
func (s *Service) bookLeg(p *plan, pool Pool, sr *SelectRequest) (*legLease, error) {
	sr.SelectionID, sr.HasSelectionID = p.legIDs[pool], true
	leg := &legLease{plan: p, pool: pool}
	var out Selection
	rec, err := s.reserveWithLease(sr, &out, leg)
	if err != nil {
		return nil, err
	}
	leg.rec, leg.endpoint = rec, out.Endpoint
	return leg, nil
}

// freeLeg frees exactly leg's booking; not found when it already ended.
// A compensating or releasing free that fails is counted: the booking, if
// any is left, ends at its expiry.
func (s *Service) freeLeg(leg *legLease) {
	if err := s.freeRecord(leg.rec); err != nil {
		s.stats.planFreeFailed.Add(1)
	}
}

// planDecodeAnchored runs the decode-anchored order on a new plan.
func (s *Service) planDecodeAnchored(p *plan) error {
	pol := s.disaggPolicy
	// 1. Decode preview: advisory, no booking, keeps the overlap credit.
	sr := p.selectReq(DecodePool)
	sr.Override = decodeOverride(p.req.DecodeOverride, true)
	sr.Advisory = true
	sr.AffinityTarget = p.req.AffinityTarget
	var prev Selection
	if err := s.Select(&sr, &prev); err != nil {
		return &CoordinatorError{Failure: DecodePreviewFailed, Err: err}
	}
	p.transition(PlanDecodePreviewed)
	prompt := promptTokens(&p.req.Prompt)
	sig := &DecodeSignals{
		CachedTokens:          prompt - min(uint64(max(prev.EffectivePrefillTokens, 0)), prompt),
		PotentialDecodeBlocks: prev.PotentialDecodeBlocks,
		DecodeBusy:            optBool(prev.DecodeBusy, prev.DecodeBusyKnown),
	}
	previewed := WorkerKey{WorkerID: prev.WorkerID, DPRank: prev.DPRank}
	p.signals = sig

	// 2. Prefill-busy probe, only for a policy that reads it.
	var prefillBusy *bool
	if pol.IsEnabled() && pol.NeedsPrefillBusy() {
		prefillBusy = s.prefillBusy(p)
	}

	// 3. Decision: the policy, then the decode busy gate on the previewed
	// worker. With a gate configured an unknown verdict vetoes a bypass.
	in := sched.DisaggInput{PromptTokens: prompt, CachedTokens: sig.CachedTokens}
	if prefillBusy != nil {
		in.PrefillBusy, in.PrefillBusyKnown = *prefillBusy, true
	}
	d := &BypassDecision{PrefillBusy: prefillBusy}
	d.PolicySaysBypass = pol.IsEnabled() && pol.ShouldBypass(in)
	if d.PolicySaysBypass {
		d.DecodeBusy = sig.DecodeBusy
	}
	gate := s.cfg.Sched.DecodeBusyThreshold != nil
	d.Bypass = d.PolicySaysBypass && (!gate || (d.DecodeBusy != nil && !*d.DecodeBusy))
	p.decision = d

	// 4. Decode commit, pinned to the previewed worker; a bypass keeps
	// the credit. A pin wins over any session binding.
	sr = p.selectReq(DecodePool)
	sr.Override = decodeOverride(p.req.DecodeOverride, d.Bypass)
	sr.PinnedWorker = &previewed
	dec, err := s.bookLeg(p, DecodePool, &sr)
	if err != nil {
		return &CoordinatorError{Failure: DecodeCommitFailed, Err: err}
	}
	p.legs[DecodePool] = dec
	p.transition(PlanDecodeCommitted)
	if d.Bypass {
		p.transition(PlanBypass)
		return nil
	}

	// 5. Prefill commit inside the decode worker's KV-transfer domain.
	sr = p.selectReq(PrefillPool)
	if err := s.addKVTransferConstraint(&sr, dec.rec.worker().WorkerID); err != nil {
		return s.prefillFailed(p, err)
	}
	p.prefillBooking(&sr)
	pre, err := s.bookLeg(p, PrefillPool, &sr)
	if err != nil {
		return s.prefillFailed(p, &CoordinatorError{Failure: PrefillCommitFailed, Err: err})
	}
	p.legs[PrefillPool] = pre
	p.transition(PlanLinked)
	return nil
}

// prefillFailed compensates a decode-anchored prefill failure (its
// constraint or its booking) under the plan's policy: BypassOnDecode keeps
// decode and succeeds; FreeDecode frees decode and returns err.
func (s *Service) prefillFailed(p *plan, err error) error {
	if p.failure == BypassOnDecode {
		p.transition(PlanBypassAfterPrefillFailure)
		return nil
	}
	s.compensate(p, DecodePool)
	return err
}

// compensate frees the first booking (held in pool, if still held) after
// the second failed.
func (s *Service) compensate(p *plan, held Pool) {
	if leg := p.take(held); leg != nil {
		s.freeLeg(leg)
	}
	p.transition(PlanCompensated)
}

// prefillBusy probes the prefill pool (advisory, neither pinned nor
// domain-constrained) and returns the busy verdict, nil when unknown: no
// threshold configured, no worker_load, or a failed probe, which never
// fails the plan.
func (s *Service) prefillBusy(p *plan) *bool {
	th := s.cfg.Sched.PrefillBusyThreshold
	if th == nil {
		return nil
	}
	sr := p.selectReq(PrefillPool)
	sr.Override = p.req.PrefillOverride
	sr.Advisory = true
	var out Selection
	if err := s.Select(&sr, &out); err != nil {
		s.stats.planProbeFailed.Add(1)
		return nil
	}
	if !out.HasWorkerLoad {
		return nil
	}
	wl := &out.WorkerLoad
	busy := wl.PrefillBusy
	if !wl.PrefillBusyKnown {
		busy = float64(wl.ActivePrefillTokens) > *th*float64(wl.PrefillTokenCapacity)
	}
	return &busy
}

// planPrefill is the prefill-anchored first step: prefill booked KV-aware
// on the prompt, honouring the pin and the allow-set.
func (s *Service) planPrefill(p *plan) error {
	sr := p.selectReq(PrefillPool)
	p.prefillBooking(&sr)
	sr.AffinityTarget = p.req.AffinityTarget
	pre, err := s.bookLeg(p, PrefillPool, &sr)
	if err != nil {
		return &CoordinatorError{Failure: PrefillCommitFailed, Err: err}
	}
	p.legs[PrefillPool] = pre
	p.transition(PlanPrefillCommitted)
	return nil
}

// planDecode is the prefill-anchored second step, before or after
// prefill_complete: decode booked load-only inside the prefill worker's
// KV-transfer domain (the credit is kept when the policy is enabled). On
// failure the prefill booking, if still held, is freed (compensated).
func (s *Service) planDecode(p *plan) error {
	if !p.canPlanDecode() {
		return &CoordinatorError{Failure: InvalidPlanState, Operation: "plan_decode", Expected: "a prefill booking and no decode booking", State: p.state}
	}
	anchor, hasAnchor := p.prefillWorker, p.hasPrefillWorker
	if pre := p.legs[PrefillPool]; pre != nil {
		anchor, hasAnchor = pre.rec.worker().WorkerID, true
	}
	sr := p.selectReq(DecodePool)
	if hasAnchor {
		if err := s.addKVTransferConstraint(&sr, anchor); err != nil {
			s.compensate(p, PrefillPool)
			return err
		}
	}
	sr.Override = decodeOverride(p.req.DecodeOverride, s.disaggPolicy.IsEnabled())
	sr.AffinityTarget = p.req.AffinityTarget
	dec, err := s.bookLeg(p, DecodePool, &sr)
	if err != nil {
		s.compensate(p, PrefillPool)
		return &CoordinatorError{Failure: DecodeCommitFailed, Err: err}
	}
	p.legs[DecodePool] = dec
	if p.legs[PrefillPool] != nil {
		p.transition(PlanLinked)
	}
	// After prefill_complete no transition is recorded: the state stays
	// prefill_released, as in the reference.
	return nil
}

// prefillComplete frees the prefill booking (the whole booking: it exists
// only for prefill) and remembers its worker. Without a prefill booking it
// is a no-op; otherwise it records prefill_released whether or not the
// free found the booking, and returns the free's result.
func (s *Service) prefillComplete(p *plan) error {
	pre := p.take(PrefillPool)
	if pre == nil {
		return nil
	}
	p.prefillWorker, p.hasPrefillWorker = pre.rec.worker().WorkerID, true
	err := s.freeRecord(pre.rec)
	p.transition(PlanPrefillReleased)
	return err
}

// releasePlan frees every booking the plan still holds, prefill first,
// ignoring frees that find nothing, and records released (every time).
func (s *Service) releasePlan(p *plan) {
	for pool := range numPools {
		if leg := p.take(pool); leg != nil {
			s.freeLeg(leg)
		}
	}
	p.transition(PlanReleased)
}

// topologyTaintPrefix is the reserved prefix of topology taints
// ("dynamo.topology/<domain>=<value>").
const topologyTaintPrefix = "dynamo.topology/"

// addKVTransferConstraint adds the KV-transfer constraint of the anchor
// worker's catalog record to sr's routing constraints (copies of the
// plan's). No record, or a record naming no kv_transfer_domain, adds
// nothing. A record naming a domain it cannot turn into a constraint fails
// closed with a metadata error; an enforcement other than "required" or
// "preferred" counts as missing.
func (s *Service) addKVTransferConstraint(sr *SelectRequest, anchor uint64) error {
	s.mu.Lock()
	e, ok := s.catalog[anchor]
	var domain, value, enforcement string
	var hasDomain, hasValue bool
	var weight *float64
	if ok && e.rec.KVTransferDomain != nil {
		f := &e.rec.WorkerFields
		domain, hasDomain = *f.KVTransferDomain, true
		value, hasValue = f.TopologyDomains[domain]
		enforcement = deref(f.KVTransferEnforcement, "")
		weight = clonePtr(f.KVTransferPreferredWeight)
	}
	s.mu.Unlock()
	if !hasDomain {
		return nil
	}
	if !hasValue {
		return &CoordinatorError{Failure: MissingTopologyDomain, WorkerID: anchor, Domain: domain}
	}
	taint := topologyTaintPrefix + domain + "=" + value
	switch enforcement {
	case "required":
		if !slices.Contains(sr.RequiredTaints, taint) {
			sr.RequiredTaints = append(slices.Clone(sr.RequiredTaints), taint)
		}
	case "preferred":
		if weight == nil {
			return &CoordinatorError{Failure: MissingPreferredWeight, WorkerID: anchor}
		}
		// The anchor's weight replaces any the caller gave the taint.
		pts := slices.DeleteFunc(slices.Clone(sr.PreferredTaints), func(t PreferredTaint) bool { return t.Taint == taint })
		sr.PreferredTaints = append(pts, PreferredTaint{Taint: taint, Weight: *weight})
	default:
		return &CoordinatorError{Failure: MissingEnforcement, WorkerID: anchor, Domain: domain}
	}
	return nil
}

func optBool(v, known bool) *bool {
	if !known {
		return nil
	}
	return &v
}
