package core

import (
	"cmp"
	"errors"
	"slices"
	"strings"
	"sync/atomic"

	"github.com/kvselect/kvselect/sched"
	"github.com/puzpuzpuz/xsync/v3"
)

// The plan registry is kvselect's (Dynamo's EPP keeps its plans in one map
// behind one async mutex): plan id -> plan in a concurrent map (one bucket
// locked per write), each plan behind its own mutex. It is local to this
// process, like the pending-selection cache; the legs underneath replicate
// as ordinary bookings.

// Default routing groups of the two pools (kvselect's; Dynamo has none).
const (
	DefaultPrefillRoutingGroup = "prefill"
	DefaultDecodeRoutingGroup  = "decode"
)

// bypassPolicy is what the coordinator asks of the conditional
// disaggregation policy: sched.DisaggPolicy (from Config.Sched), or a
// test's.
type bypassPolicy interface {
	IsEnabled() bool
	NeedsPrefillBusy() bool
	ShouldBypass(sched.DisaggInput) bool
}

// planRegistry holds the live plans, bounded by max.
type planRegistry struct {
	m *xsync.MapOf[string, *plan]
	// count is the plans in m, claims included.
	count atomic.Int64
	max   int64
}

func newPlanRegistry(max int) *planRegistry {
	return &planRegistry{m: xsync.NewMapOf[string, *plan](), max: int64(max)}
}

// claim inserts p under its id; p.mu is held by the caller, so lifecycle
// calls that find it wait for the planning to end.
func (r *planRegistry) claim(p *plan) error {
	if r.count.Add(1) > r.max {
		r.count.Add(-1)
		return errorf(ErrCapacity, "live disaggregated plan limit reached (%d); release plans or raise the limit", r.max)
	}
	if _, loaded := r.m.LoadOrStore(p.id, p); loaded {
		r.count.Add(-1)
		return errPlanExists(p.id)
	}
	return nil
}

// remove unregisters p (under p.mu) if it is still its id's plan.
func (r *planRegistry) remove(p *plan) {
	p.live = false
	removed := false
	r.m.Compute(p.id, func(old *plan, loaded bool) (*plan, bool) {
		removed = loaded && old == p
		return old, !loaded || old == p
	})
	if removed {
		r.count.Add(-1)
	}
}

// newPlan validates req, fills its defaults and returns an unregistered
// plan holding a copy of it.
func (s *Service) newPlan(req *DisaggRequest) (*plan, error) {
	id := req.SelectionID
	if id == "" {
		id = newUUID()
	} else if strings.Contains(id, "/") {
		return nil, errorf(ErrBadRequest, "selection_id must not contain '/'")
	}
	order := cmp.Or(req.Order, s.cfg.Disagg.Order, DecodeAnchored)
	failure := cmp.Or(req.PrefillFailure, s.cfg.Disagg.PrefillFailure, FreeDecode)
	if order > PrefillAnchored || failure > BypassOnDecode {
		return nil, errorf(ErrBadRequest, "order %d or prefill_failure %d is not a known value", req.Order, req.PrefillFailure)
	}
	if req.DeferDecode && order != PrefillAnchored {
		return nil, errorf(ErrBadRequest, "defer_decode requires order prefill_anchored")
	}
	// Both overrides are checked before any pool call: a bad prefill
	// override would otherwise surface only after decode was booked (and
	// freed again) in the decode-anchored order.
	for _, o := range [...]struct {
		name string
		ov   *Override
	}{{"prefill_router_config_override", req.PrefillOverride}, {"decode_router_config_override", req.DecodeOverride}} {
		if o.ov != nil {
			if err := o.ov.Validate(); err != nil {
				return nil, &Error{Class: ErrBadRequest, Msg: o.name + ": " + err.Error(), Cause: err}
			}
		}
	}
	p := &plan{id: strings.Clone(id), created: s.clock().UnixNano(), order: order, failure: failure, transitions: []PlanState{PlanIdle}}
	p.legIDs = [numPools]string{p.id + legSuffix[PrefillPool], p.id + legSuffix[DecodePool]}
	p.req = cloneDisaggRequest(req)
	r := &p.req
	r.PrefillOverride = withPolicy(r.PrefillOverride, s.cfg.Disagg.PrefillPolicy)
	r.DecodeOverride = withPolicy(r.DecodeOverride, s.cfg.Disagg.DecodePolicy)
	r.SelectionID = p.id
	r.ModelName = cmp.Or(r.ModelName, DefaultPartition)
	r.PrefillRoutingGroup = cmp.Or(r.PrefillRoutingGroup, DefaultPrefillRoutingGroup)
	r.DecodeRoutingGroup = cmp.Or(r.DecodeRoutingGroup, DefaultDecodeRoutingGroup)
	if r.PrefillRoutingGroup == r.DecodeRoutingGroup {
		return nil, errorf(ErrBadRequest, "prefill_routing_group and decode_routing_group must differ")
	}
	return p, nil
}

// PlanDisagg books a request in both pools in its order (the reference's
// plan) and registers the plan under its selection id; with DeferDecode it
// books prefill only (plan_prefill), leaving decode to PlanDecode. A plan
// registers only on success, which includes bypass_after_prefill_failure;
// a failed plan holds nothing. On error the view is the failed plan's
// final state, for audit. A live plan with the same id is a conflict.
// After Close it fails as not ready, before any pool call.
func (s *Service) PlanDisagg(req *DisaggRequest) (DisaggPlanView, error) {
	if s.closed.Load() {
		return DisaggPlanView{}, errShuttingDown
	}
	p, err := s.newPlan(req)
	if err != nil {
		return DisaggPlanView{}, err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if err := s.plans.claim(p); err != nil {
		return DisaggPlanView{}, err
	}
	if p.order == PrefillAnchored {
		err = s.planPrefill(p)
		if err == nil && !req.DeferDecode {
			err = s.planDecode(p)
		}
	} else {
		err = s.planDecodeAnchored(p)
	}
	v := p.view()
	if err != nil {
		if p.legs[PrefillPool] != nil || p.legs[DecodePool] != nil {
			panic("BUG: a failed plan holds a booking")
		}
		s.plans.remove(p)
		s.stats.planFailed.Add(1)
		return v, err
	}
	p.live = true
	p.trim()
	s.stats.planOK.Add(1)
	return v, nil
}

// lockPlan returns the live plan id with its mutex held, or not found.
func (s *Service) lockPlan(id string) (*plan, error) {
	p, ok := s.plans.m.Load(id)
	if !ok {
		return nil, errPlanNotFound(id)
	}
	p.mu.Lock()
	if !p.live {
		p.mu.Unlock()
		return nil, errPlanNotFound(id)
	}
	return p, nil
}

// PlanDecode books the decode leg of a prefill-anchored plan (the
// reference's plan_decode), before or after DisaggPrefillComplete. A plan
// in the wrong state is a conflict and stays as it is. A failed booking
// (or an anchor with incomplete KV-transfer metadata) leaves the plan
// compensated, holding nothing: the plan is removed and the error returned
// with its final view. After Close it fails as not ready and changes
// nothing (the plan is still released by ReleaseDisagg or expiry).
func (s *Service) PlanDecode(id string) (DisaggPlanView, error) {
	if s.closed.Load() {
		return DisaggPlanView{}, errShuttingDown
	}
	p, err := s.lockPlan(id)
	if err != nil {
		return DisaggPlanView{}, err
	}
	defer p.mu.Unlock()
	err = s.planDecode(p)
	v := p.view()
	var ce *CoordinatorError
	if err != nil && !(errors.As(err, &ce) && ce.Failure == InvalidPlanState) {
		s.plans.remove(p)
	}
	p.trim()
	return v, err
}

// DisaggPrefillComplete frees the plan's prefill booking (the reference's
// prefill_complete; call it once the first decode token or the hand-off is
// seen). Idempotent: without a prefill booking it does nothing. A prefill
// booking that already ended (expired, its worker gone) counts as done.
func (s *Service) DisaggPrefillComplete(id string) error {
	p, err := s.lockPlan(id)
	if err != nil {
		return err
	}
	defer p.mu.Unlock()
	err = s.prefillComplete(p)
	p.trim()
	if errors.Is(err, ErrNotFound) {
		return nil
	}
	return err
}

// ReleaseDisagg frees every booking the plan still holds (the reference's
// release, whose free errors are ignored), removes the plan and returns
// its final view.
func (s *Service) ReleaseDisagg(id string) (DisaggPlanView, error) {
	p, err := s.lockPlan(id)
	if err != nil {
		return DisaggPlanView{}, err
	}
	defer p.mu.Unlock()
	s.releasePlan(p)
	s.plans.remove(p)
	p.trim()
	return p.view(), nil
}

// DisaggPlan returns the view of a live plan.
func (s *Service) DisaggPlan(id string) (DisaggPlanView, error) {
	p, err := s.lockPlan(id)
	if err != nil {
		return DisaggPlanView{}, err
	}
	defer p.mu.Unlock()
	return p.view(), nil
}

// expirePlans releases and removes every plan created more than the
// reservation expiry before nowNs (strictly): by then its bookings have
// expired on their own. It returns how many it removed.
func (s *Service) expirePlans(nowNs int64) int {
	cutoff := nowNs - int64(s.cfg.Sched.ActiveRequestExpiry)
	n := 0
	s.plans.m.Range(func(_ string, p *plan) bool {
		if p.created >= cutoff {
			return true
		}
		p.mu.Lock()
		if p.live {
			s.releasePlan(p)
			s.plans.remove(p)
			p.trim()
			n++
		}
		p.mu.Unlock()
		return true
	})
	s.stats.planExpired.Add(uint64(n))
	return n
}

// trim drops what no later step of the plan reads: the prompt and the
// base constraints, once plan_decode can no longer run (the reference
// keeps them for the plan's life; a deferred plan keeps them until
// plan_decode).
func (p *plan) trim() {
	if p.live && p.canPlanDecode() {
		return
	}
	p.req.Prompt = Prompt{}
	p.req.AllowedWorkerIDs, p.req.RequiredTaints, p.req.PreferredTaints = nil, nil, nil
}

// view copies the plan's state for a host. Under p.mu.
func (p *plan) view() DisaggPlanView {
	v := DisaggPlanView{
		SelectionID: p.id, ModelName: p.req.ModelName, Order: p.order, State: p.state,
		Transitions: slices.Clone(p.transitions),
		Bypass:      p.state == PlanBypass || p.state == PlanBypassAfterPrefillFailure,
		Prefill:     p.legs[PrefillPool].view(), Decode: p.legs[DecodePool].view(),
	}
	if p.decision != nil {
		d := *p.decision
		v.Decision = &d
	}
	if p.signals != nil {
		sg := *p.signals
		v.DecodeSignals = &sg
	}
	return v
}

// view returns the leg as a host sees it, nil when not held or when the
// ledger ended its booking.
func (l *legLease) view() *PlanLeg {
	if l == nil || l.ended.Load() {
		return nil
	}
	w := l.rec.worker()
	return &PlanLeg{SelectionID: l.rec.id, RoutingGroup: l.rec.p.group, WorkerID: w.WorkerID, DPRank: w.DPRank, Endpoint: l.endpoint}
}

// cloneDisaggRequest deep-copies req so the plan shares nothing with the
// caller's buffers.
func cloneDisaggRequest(req *DisaggRequest) DisaggRequest {
	c := *req
	c.SelectionID, c.ModelName = strings.Clone(c.SelectionID), strings.Clone(c.ModelName)
	c.PrefillRoutingGroup, c.DecodeRoutingGroup = strings.Clone(c.PrefillRoutingGroup), strings.Clone(c.DecodeRoutingGroup)
	c.SessionID = strings.Clone(c.SessionID)
	pr := &c.Prompt
	pr.TokenIDs, pr.RoutingTokenIDs = slices.Clone(pr.TokenIDs), slices.Clone(pr.RoutingTokenIDs)
	pr.BlockHashes, pr.SequenceHashes = slices.Clone(pr.BlockHashes), slices.Clone(pr.SequenceHashes)
	pr.LoraName, pr.CacheSalt = strings.Clone(pr.LoraName), strings.Clone(pr.CacheSalt)
	pr.BlockMMHashes, pr.RoutingBlockMMHashes = cloneMM(pr.BlockMMHashes), cloneMM(pr.RoutingBlockMMHashes)
	c.AffinityTarget, c.PinnedPrefillWorker = clonePtr(c.AffinityTarget), clonePtr(c.PinnedPrefillWorker)
	c.AllowedWorkerIDs = slices.Clone(c.AllowedWorkerIDs)
	c.RequiredTaints = slices.Clone(c.RequiredTaints)
	for i, t := range c.RequiredTaints {
		c.RequiredTaints[i] = strings.Clone(t)
	}
	c.PreferredTaints = slices.Clone(c.PreferredTaints)
	for i := range c.PreferredTaints {
		c.PreferredTaints[i].Taint = strings.Clone(c.PreferredTaints[i].Taint)
	}
	c.PrefillOverride, c.DecodeOverride = cloneOverride(c.PrefillOverride), cloneOverride(c.DecodeOverride)
	return c
}

func cloneMM(m [][]uint64) [][]uint64 {
	if m == nil {
		return nil
	}
	out := make([][]uint64, len(m))
	for i, b := range m {
		out[i] = slices.Clone(b)
	}
	return out
}

// cloneOverride deep-copies an override (its fields are pointers).
func cloneOverride(o *Override) *Override {
	if o == nil {
		return nil
	}
	return &Override{
		OverlapScoreCredit: clonePtr(o.OverlapScoreCredit), PrefillLoadScale: clonePtr(o.PrefillLoadScale),
		OverlapScoreWeight: clonePtr(o.OverlapScoreWeight), RouterTemperature: clonePtr(o.RouterTemperature),
		AssumeKVReuse: clonePtr(o.AssumeKVReuse), TrackPrefillTokens: clonePtr(o.TrackPrefillTokens),
		SharedCacheMultiplier: clonePtr(o.SharedCacheMultiplier),
		RoutingPolicy:         strings.Clone(o.RoutingPolicy),
	}
}

// withPolicy is ov naming policy name when ov names none (a copy; ov
// itself when name is "" or ov names one).
func withPolicy(ov *Override, name string) *Override {
	if name == "" || (ov != nil && ov.RoutingPolicy != "") {
		return ov
	}
	var o Override
	if ov != nil {
		o = *ov
	}
	o.RoutingPolicy = name
	return &o
}
