package sched

import (
	"errors"
	"fmt"
)

// The selection-policy seam: how a host turns the filled candidate rows of
// one request (step 3 of the package contract) into one pick, with filters,
// scorers and a picker that an embedder may supply, as Dynamo's custom
// worker-selection policies do (ai-dynamo/dynamo:
// lib/kv-router/src/scheduling/selector/policy.rs, WorkerFilter,
// WorkerScorer and WorkerPicker; documented as "Write Custom Routing
// Strategies"). The host keeps eligibility, bookings, affinity and
// replication; a policy only ranks the eligible rows.
//
// A policy runs on the selection hot path: its components must not
// allocate, block or keep the slices they are given. They may be called
// from many goroutines at once (selections are not serialized), so a
// component with state of its own must synchronize it.

// SelectionContext is what a policy's components know of the request
// beyond the candidate rows. Read-only for them.
type SelectionContext struct {
	// Params are the request's resolved weights (Config.Resolve).
	Params *Params
	// Request is the prompt's size and block size, and its session
	// context (Request.Session, nil when the request has none).
	Request *Request
	// Rand is the host's random source (tie-breaks, sampling).
	Rand Rand
}

// Filter removes eligible rows before scoring.
type Filter interface {
	// Keep reports whether c stays a candidate. Filters run in
	// declaration order; a row one filter drops is not shown to the next.
	Keep(ctx *SelectionContext, c *Candidate) bool
}

// Scorer gives every remaining row a cost contribution; the host sums the
// contributions of all scorers (lower is better).
type Scorer interface {
	// Score writes the contribution of cands[i] into out[i] for every i;
	// out is exactly len(cands) long. Contributions should be finite: a
	// NaN never wins an argmin.
	Score(ctx *SelectionContext, cands []Candidate, out []float64)
}

// Picker chooses one row from the scored rows.
type Picker interface {
	// Pick returns an index into cands (and costs, its summed costs, of
	// the same length, at least 1).
	Pick(ctx *SelectionContext, cands []Candidate, costs []float64) int
}

// SelectionPolicy is one selection policy: Filters (may be empty), at
// least one Scorer, and a Picker. Immutable once in use. (Not the router
// queue's policies: PolicyClass, PolicyProfile.)
type SelectionPolicy struct {
	// Name identifies the policy in configuration, the per-request
	// routing_policy override and reports.
	Name    string
	Filters []Filter
	Scorers []Scorer
	Picker  Picker
}

// ErrAllFiltered: the policy's filters dropped every eligible row
// (Dynamo's KvSchedulerError::AllEligibleWorkersFiltered). The host treats
// it like ErrNoEndpoints.
var ErrAllFiltered = errors.New("all eligible workers were filtered out by the selection policy")

// errBadPick is the error of a picker that returned an index out of range.
var errBadPick = errors.New("selection policy picked no candidate")

// Validate reports a policy that cannot run: no name, no scorer, no picker
// or a nil component.
func (pol *SelectionPolicy) Validate() error {
	switch {
	case pol == nil:
		return fmt.Errorf("%w: nil selection policy", ErrInvalidConfig)
	case pol.Name == "":
		return fmt.Errorf("%w: selection policy without a name", ErrInvalidConfig)
	case len(pol.Scorers) == 0 || pol.Picker == nil:
		return fmt.Errorf("%w: selection policy %q needs at least one scorer and a picker", ErrInvalidConfig, pol.Name)
	}
	for _, f := range pol.Filters {
		if f == nil {
			return fmt.Errorf("%w: selection policy %q has a nil filter", ErrInvalidConfig, pol.Name)
		}
	}
	for _, s := range pol.Scorers {
		if s == nil {
			return fmt.Errorf("%w: selection policy %q has a nil scorer", ErrInvalidConfig, pol.Name)
		}
	}
	return nil
}

// Choose runs the policy over the filled rows cands: the filters compact
// cands in place (order kept), the scorers' contributions are summed into
// costs, and the picker picks. It returns the kept rows (a prefix of
// cands) and the index of the pick in them. costs and part must each hold
// at least len(cands) values; part is scratch for the second and later
// scorers and may be nil with a single scorer. Allocation-free when the
// components are.
//
// With one scorer its costs are the summed costs exactly, so a policy of
// one scorer and one picker decides as the two functions do on their own
// (DefaultPolicy decides bit for bit as Score then Pick).
func (pol *SelectionPolicy) Choose(ctx *SelectionContext, cands []Candidate, costs, part []float64) ([]Candidate, int, error) {
	if len(pol.Filters) > 0 {
		kept := cands[:0]
		for i := range cands {
			if pol.keep(ctx, &cands[i]) {
				kept = append(kept, cands[i])
			}
		}
		if len(kept) == 0 {
			return kept, -1, ErrAllFiltered
		}
		cands = kept
	}
	n := len(cands)
	costs = costs[:n]
	pol.Scorers[0].Score(ctx, cands, costs)
	for _, s := range pol.Scorers[1:] {
		part := part[:n]
		s.Score(ctx, cands, part)
		for i, v := range part {
			costs[i] += v
		}
	}
	i := pol.Picker.Pick(ctx, cands, costs)
	if i < 0 || i >= n {
		return cands, -1, fmt.Errorf("%w: %s picked row %d of %d", errBadPick, pol.Name, i, n)
	}
	return cands, i, nil
}

func (pol *SelectionPolicy) keep(ctx *SelectionContext, c *Candidate) bool {
	for _, f := range pol.Filters {
		if !f.Keep(ctx, c) {
			return false
		}
	}
	return true
}

// DefaultScorer is the reference's cost function (Score) as a Scorer.
type DefaultScorer struct{}

func (DefaultScorer) Score(ctx *SelectionContext, cands []Candidate, out []float64) {
	Score(ctx.Params, ctx.Request, cands, out)
}

// DefaultPicker is the reference's picker (Pick at the request's
// temperature) as a Picker.
type DefaultPicker struct{}

func (DefaultPicker) Pick(ctx *SelectionContext, _ []Candidate, costs []float64) int {
	return Pick(costs, ctx.Params.Temperature, ctx.Rand)
}

// Names of the built-in policies.
const (
	// SelectionDefault is the reference's selection: DefaultScorer and
	// DefaultPicker, the decisions of Dynamo's default selector.
	SelectionDefault = "default"
	// SelectionCacheBalance is kvselect's own policy (CacheBalancePolicy).
	SelectionCacheBalance = "cache_balance"
)

var defaultPolicy = &SelectionPolicy{Name: SelectionDefault, Scorers: []Scorer{DefaultScorer{}}, Picker: DefaultPicker{}}

// DefaultPolicy returns the reference's policy. The same value every call.
func DefaultSelectionPolicy() *SelectionPolicy { return defaultPolicy }

// BuiltinSelectionPolicy returns the built-in policy named name, or nil.
func BuiltinSelectionPolicy(name string) *SelectionPolicy {
	switch name {
	case SelectionDefault:
		return defaultPolicy
	case SelectionCacheBalance:
		return cacheBalancePolicy
	}
	return nil
}
