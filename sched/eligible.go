package sched

import (
	"fmt"
	"math"

	"github.com/kvselect/kvselect/radix"
)

// Worker is the eligibility view of one registered, schedulable worker: its
// DP ranks, its taints, and the host's overload verdict (the availability and
// overload providers of Dynamo's scheduler, lib/kv-router/src/scheduling/;
// the standalone service flags nothing).
type Worker struct {
	ID uint64
	// DPStart and DPSize give the ranks [DPStart, DPStart+DPSize); DPSize
	// must be > 0.
	DPStart, DPSize uint32
	// Taints is the worker's taint set.
	Taints []string
	// Overloaded excludes the worker; when every otherwise eligible worker
	// is overloaded the request fails with ErrAllOverloaded.
	Overloaded bool
}

// PreferredTaint is one entry of routing_constraints.preferred_taints.
type PreferredTaint struct {
	Taint  string
	Weight float64
}

// Constraints are a request's eligibility inputs.
type Constraints struct {
	// AllowedWorkerIDs restricts candidates when non-nil.
	AllowedWorkerIDs []uint64
	// RequiredTaints must all be present on a worker.
	RequiredTaints []string
	// PreferredTaints scale the logit by exp(−tanh(Σ matched weights)).
	PreferredTaints []PreferredTaint
	// Pinned, when set, is validated (see AppendCandidates) and becomes the
	// only candidate, scored without the preferred-taint multiplier.
	Pinned *radix.WorkerKey
}

// AppendCandidates appends one Candidate (Worker and TaintMultiplier set)
// per eligible (worker, dp_rank) to dst and returns it. Eligibility
// (Dynamo's lib/kv-router/src/scheduling/selector.rs): every rank in [DPStart, DPStart+DPSize), workers filtered by
// AllowedWorkerIDs, RequiredTaints and Overloaded.
//
// Errors: ErrNoEndpoints when nothing passes the filters; ErrAllOverloaded
// when something would but every such worker is overloaded. With a pin, in
// Dynamo's order (scheduling/filter.rs validate_pinned_worker_allowed, then
// validate_worker_rank): ErrPinnedNotAllowed when the pinned worker is
// outside AllowedWorkerIDs (known or not); ErrNoEndpoints when it is
// unknown, its rank is out of range or it lacks a required taint (Dynamo
// maps every other rank-validation failure of a pin to NoEndpoints);
// ErrPinnedOverloaded when it is overloaded. Allocation-free except for
// error values.
func AppendCandidates(dst []Candidate, workers []Worker, c *Constraints) ([]Candidate, error) {
	if c.Pinned != nil {
		return appendPinned(dst, workers, c)
	}
	eligible, overloaded := 0, 0
	for i := range workers {
		w := &workers[i]
		if !c.admits(w) {
			continue
		}
		if w.Overloaded {
			overloaded++
			continue
		}
		mult := c.taintMultiplier(w)
		for r := w.DPStart; r < w.DPStart+w.DPSize; r++ {
			dst = append(dst, Candidate{Worker: radix.WorkerKey{WorkerID: w.ID, DPRank: r}, TaintMultiplier: mult})
			eligible++
		}
	}
	if eligible == 0 {
		if overloaded > 0 {
			return dst, ErrAllOverloaded
		}
		return dst, ErrNoEndpoints
	}
	return dst, nil
}

func appendPinned(dst []Candidate, workers []Worker, c *Constraints) ([]Candidate, error) {
	pin := *c.Pinned
	if c.AllowedWorkerIDs != nil && !containsID(c.AllowedWorkerIDs, pin.WorkerID) {
		return dst, &pinnedError{ErrPinnedNotAllowed, pin.WorkerID, "is not in allowed worker set"}
	}
	for i := range workers {
		w := &workers[i]
		if w.ID != pin.WorkerID {
			continue
		}
		if pin.DPRank < w.DPStart || pin.DPRank-w.DPStart >= w.DPSize {
			return dst, fmt.Errorf("%w: pinned worker %d has no dp_rank %d", ErrNoEndpoints, pin.WorkerID, pin.DPRank)
		}
		if !c.admits(w) {
			return dst, fmt.Errorf("%w: pinned worker %d does not satisfy routing constraints", ErrNoEndpoints, pin.WorkerID)
		}
		if w.Overloaded {
			return dst, &pinnedError{ErrPinnedOverloaded, pin.WorkerID, "is overloaded"}
		}
		return append(dst, Candidate{Worker: pin, TaintMultiplier: 1}), nil
	}
	return dst, fmt.Errorf("%w: pinned worker %d is unavailable", ErrNoEndpoints, pin.WorkerID)
}

// admits applies the allow-set and required taints.
func (c *Constraints) admits(w *Worker) bool {
	if c.AllowedWorkerIDs != nil && !containsID(c.AllowedWorkerIDs, w.ID) {
		return false
	}
	for _, t := range c.RequiredTaints {
		if !containsTaint(w.Taints, t) {
			return false
		}
	}
	return true
}

// taintMultiplier is exp(−tanh(Σ weights of the preferred taints w has)),
// in [1/e, e]; 1 without preferred taints.
func (c *Constraints) taintMultiplier(w *Worker) float64 {
	if len(c.PreferredTaints) == 0 {
		return 1
	}
	var sum float64
	for _, p := range c.PreferredTaints {
		if containsTaint(w.Taints, p.Taint) {
			sum += p.Weight
		}
	}
	return TaintMultiplier(sum)
}

// TaintMultiplier is exp(−tanh(sum)): the logit multiplier of a worker whose
// matched preferred taints weigh sum in total.
func TaintMultiplier(sum float64) float64 { return math.Exp(-math.Tanh(sum)) }

func containsID(ids []uint64, id uint64) bool {
	for _, x := range ids {
		if x == id {
			return true
		}
	}
	return false
}

func containsTaint(taints []string, t string) bool {
	for _, x := range taints {
		if x == t {
			return true
		}
	}
	return false
}

// pinnedError words a pinned-worker error as Dynamo does ("pinned worker 7
// is overloaded") while matching its sentinel with errors.Is.
type pinnedError struct {
	sentinel error
	id       uint64
	what     string
}

func (e *pinnedError) Error() string { return fmt.Sprintf("pinned worker %d %s", e.id, e.what) }
func (e *pinnedError) Unwrap() error { return e.sentinel }
