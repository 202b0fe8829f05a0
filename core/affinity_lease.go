package core

import (
	"errors"
	"sync/atomic"
)

// affinityLease is one booking's use of a bound session; its record
// releases it once, when the record ends. Release refreshes the idle
// deadline and re-publishes the binding so that peers refresh theirs.
type affinityLease struct {
	t        *affinityTable
	id       string
	revision uint64
	version  affinityVersion
	active   atomic.Bool
}

// Release releases the use (Lease): the last one starts the idle TTL.
func (l *affinityLease) Release() {
	if !l.active.CompareAndSwap(true, false) {
		return
	}
	t := l.t
	sh := t.shard(l.id)
	sh.mu.Lock()
	e := sh.m[l.id]
	if e == nil || !e.bound || e.revision != l.revision || e.leases == 0 {
		sh.mu.Unlock()
		return
	}
	e.leases--
	if e.version != l.version {
		// Re-bound by a newer version (a soft re-bind, a peer): that one
		// refreshes the deadline.
		sh.mu.Unlock()
		return
	}
	e.deadline = t.now() + t.ttl
	target, v := e.target, e.version
	sh.mu.Unlock()
	t.send(l.id, target, v)
}

// invalidate drops the binding this lease holds (its worker left, or a
// hard-mode mismatch). A binding that changed since is left alone and the
// use released.
func (l *affinityLease) invalidate() {
	if !l.active.Load() {
		return
	}
	t := l.t
	sh := t.shard(l.id)
	sh.mu.Lock()
	e := sh.m[l.id]
	if e != nil && e.bound && e.revision == l.revision && e.version == l.version {
		delete(sh.m, l.id)
		sh.mu.Unlock()
		t.count.Add(-1)
		l.active.Store(false)
		t.st.invalidated.Add(1)
		return
	}
	sh.mu.Unlock()
	l.Release()
}

// rebind moves the binding from expected to target if nothing changed it
// since this lease was taken.
func (l *affinityLease) rebind(expected, target AffinityTarget) bool {
	t := l.t
	sh := t.shard(l.id)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	e := sh.m[l.id]
	if e == nil || !e.bound || e.revision != l.revision || e.version != l.version || e.target != expected {
		return false
	}
	v := t.nextVersion()
	e.target, e.version = target, v
	l.version = v
	return true
}

// reboundTarget is where a soft binding follows a dispatch: a worker-only
// binding stays worker-only; a ranked one follows the dispatched rank.
func reboundTarget(bound, dispatched AffinityTarget) AffinityTarget {
	if !bound.HasDPRank {
		return AffinityTarget{WorkerID: dispatched.WorkerID}
	}
	if !dispatched.HasDPRank {
		return bound
	}
	return dispatched
}

// validateBoundTarget checks a binding against the target a request
// explicitly asked for (the reference's texts).
func validateBoundTarget(id string, bound AffinityTarget, requested *AffinityTarget) error {
	if requested == nil {
		return nil
	}
	if bound.WorkerID != requested.WorkerID {
		return errorf(ErrBadRequest, "session %s is bound to worker %d, not %d", id, bound.WorkerID, requested.WorkerID)
	}
	switch {
	case bound.HasDPRank && requested.HasDPRank && bound.DPRank != requested.DPRank:
		return errorf(ErrBadRequest, "session %s is bound to DP rank %d, not %d", id, bound.DPRank, requested.DPRank)
	case !bound.HasDPRank && requested.HasDPRank:
		return errorf(ErrBadRequest, "session %s has worker-only affinity and cannot add DP rank %d", id, requested.DPRank)
	}
	return nil
}

// validateDispatchTarget is hard mode's check that a bound session was
// dispatched where it is bound (the reference's texts).
func validateDispatchTarget(id string, bound, dispatched AffinityTarget) error {
	if bound.WorkerID != dispatched.WorkerID {
		return errorf(ErrBadRequest, "session %s is bound to worker %d, not %d", id, bound.WorkerID, dispatched.WorkerID)
	}
	if bound.HasDPRank {
		if !dispatched.HasDPRank {
			return errorf(ErrBadRequest, "session %s is bound to DP rank %d, but dispatch did not select a DP rank", id, bound.DPRank)
		}
		if dispatched.DPRank != bound.DPRank {
			return errorf(ErrBadRequest, "session %s is bound to DP rank %d, not %d", id, bound.DPRank, dispatched.DPRank)
		}
	}
	return nil
}

// isAffinityFull reports a full table (route without affinity).
func isAffinityFull(err error) bool { return errors.Is(err, errAffinityFull) }
