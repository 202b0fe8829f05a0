package core

import (
	"context"
	"time"

	"github.com/kvselect/kvselect/sched"
)

// A selection's use of its partition's session table (the reference's
// run_selection, ai-dynamo/dynamo:
// lib/kv-router/src/services/selection/core/run.rs):
//
//   - The session key is session_context.session_id, else session_id.
//   - An explicit affinity_target or pinned_worker takes the session out:
//     it is neither steered nor bound.
//   - /select only queries: a live binding steers the selection; nothing
//     is created. With a selection_id the session id is cached with the
//     pending selection, so that its replay binds it.
//   - A booking (select_and_reserve, a replayed /reservations) holds the
//     session before it books (holdSession), books, then commits
//     (commitSession) before its record turns live; the record owns the
//     lease and releases it when it ends. An explicit /reservations never
//     binds.
//   - A full table routes without affinity; no error.
//
// How a target steers (the reference's pin rule, affinity/README.md in
// the later tree): selection is limited to the target's ranks while one
// of them is eligible (both modes, for the built-in policy); otherwise it
// selects normally, and the commit re-binds the session if its worker
// departed, or, in hard mode, rejects the booking if the bound worker is
// live but the booking landed elsewhere.

// holdSession holds session id for a booking in partition p, waiting
// (without a lock) while another booking initializes it. A binding whose
// target p can no longer schedule is invalidated and the session
// re-initialized. A nil hold (no error) means the table is full: route
// without affinity.
func (s *Service) holdSession(ctx context.Context, p *partition, id string) (*affinityHold, error) {
	t := p.affinity
	for {
		h, wait, err := t.tryAcquire(id, nil)
		if err != nil {
			if isAffinityFull(err) {
				s.affinityStats.fullTable.Add(1)
				return nil, nil
			}
			return nil, err
		}
		if wait != nil {
			select {
			case <-wait:
				continue
			case <-ctx.Done():
				return nil, errCancelled
			case <-s.closing:
				return nil, errShuttingDown
			}
		}
		if !h.init && !p.snap.Load().schedulable(h.target) {
			h.done = true
			h.lease.invalidate()
			continue
		}
		return h, nil
	}
}

// joinAttempts bounds the tries of a failover commit that finds the
// session initialized by another booking (the reference's JOIN_ATTEMPTS).
const joinAttempts = 2

// commitSession binds the held session to the booked worker rank w and
// returns the record's lease (nil: none). A hard-mode rejection whose
// bound worker departed after the hold is not the client's fault: the
// session re-binds to w instead, joining another booking's initialization
// rather than waiting on it (a booking never waits on a request that may
// be queued behind it). The hold is consumed.
func (s *Service) commitSession(p *partition, h *affinityHold, w WorkerKey) (Lease, error) {
	t := p.affinity
	dispatched := AffinityTarget{WorkerID: w.WorkerID, DPRank: w.DPRank, HasDPRank: true}
	id, bound, wasBound := h.id, h.target, !h.init
	l, err := t.commit(h, dispatched)
	if err == nil {
		return l, nil
	}
	if !wasBound || p.snap.Load().schedulable(bound) {
		return nil, err
	}
	for range joinAttempts {
		h, wait, err := t.tryAcquire(id, nil)
		switch {
		case err != nil:
			if isAffinityFull(err) {
				s.affinityStats.fullTable.Add(1)
				return nil, nil
			}
			return nil, err
		case wait != nil:
			if l := t.joinInitializing(id, dispatched); l != nil {
				return l, nil
			}
			continue
		}
		if t.mode == AffinityHard && !h.init {
			if err := validateDispatchTarget(h.id, h.target, dispatched); err != nil {
				h.drop()
				return nil, err
			}
		}
		l, err := t.commit(h, dispatched)
		if err != nil {
			return nil, err
		}
		return l, nil
	}
	return nil, nil
}

// errCancelled ends a selection whose caller went away while it waited
// (for a session's initialization or in the router queue).
var errCancelled = &Error{Class: ErrNotReady, Msg: "request cancelled while waiting"}

// restrictToTarget keeps only the candidates inside target when one of
// them is eligible; otherwise every candidate stays (the target is not
// eligible: selection is normal).
func restrictToTarget(cands []sched.Candidate, target AffinityTarget) []sched.Candidate {
	n := 0
	for i := range cands {
		if target.matches(cands[i].Worker) {
			cands[n] = cands[i]
			n++
		}
	}
	if n == 0 {
		return cands
	}
	return cands[:n]
}

// ReapAffinity removes the idle session bindings whose TTL has passed, in
// every partition, and returns how many. The host calls it every
// Config.SessionAffinity.ReapInterval() (min(TTL, 30 s)); bookings and
// queries treat an expired binding as absent meanwhile.
func (s *Service) ReapAffinity(now time.Time) int {
	n := 0
	for _, p := range *s.parts.Load() {
		if p.affinity != nil {
			n += p.affinity.reap(now.UnixNano())
		}
	}
	return n
}
