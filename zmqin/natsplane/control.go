package natsplane

import (
	"errors"

	"github.com/kvselect/kvselect/core"
)

// The indexer's listener test routes (core.ListenerControl) over bus
// ranks: a paused rank's events are dropped (DropPaused), its cursor left
// as it was.

// ListenerStateError is Pause's or Resume's answer for a bus rank
// already in the state asked for.
type ListenerStateError struct{ State string }

func (e *ListenerStateError) Error() string { return "natsplane: rank is " + e.State }

// ListenerState is the rank's state (for core's messages).
func (e *ListenerStateError) ListenerState() string { return e.State }

// Pause implements core.ListenerControl. A bus rank stops being applied:
// its events are dropped and counted (DropPaused) while its blocks stay,
// as a paused ZMQ listener's do; a ZMQ rank's listener is Inner's to
// pause.
func (in *Ingress) Pause(workerID uint64, rank uint32) error {
	return in.control(workerID, rank, true)
}

// Resume implements core.ListenerControl: a paused bus rank is applied
// again from the next event, whose gap over the cursor (what was
// published while paused) clears the rank by the gap rules, since NATS
// keeps nothing to replay.
func (in *Ingress) Resume(workerID uint64, rank uint32) error {
	return in.control(workerID, rank, false)
}

// errNoRank is control's answer for a worker or rank it does not have;
// core reports the registry's not-found instead.
var errNoRank = errors.New("natsplane: no such rank")

func (in *Ingress) control(workerID uint64, rank uint32, pause bool) error {
	in.syncMu.Lock()
	defer in.syncMu.Unlock()
	in.mu.RLock()
	w := in.mu.workers[workerID]
	var kr *kvRank
	ok := false
	if w != nil {
		kr, ok = w.ranks[rank]
	}
	in.mu.RUnlock()
	if !ok {
		return errNoRank
	}
	if kr == nil { // a ZMQ rank
		c, can := in.cfg.Inner.(core.ListenerControl)
		if !can {
			return errNoRank
		}
		if pause {
			return c.Pause(workerID, rank)
		}
		return c.Resume(workerID, rank)
	}
	if kr.paused.Load() == pause {
		if pause {
			return &ListenerStateError{State: "paused"}
		}
		return &ListenerStateError{State: "live"}
	}
	kr.paused.Store(pause)
	verb := "resumed"
	if pause {
		verb = "paused"
	}
	in.cfg.Logger.Info("KV event plane: rank "+verb, "worker", kr.key.String())
	return nil
}
