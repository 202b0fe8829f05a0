package core

import "fmt"

// DisaggFailure names the variant of a CoordinatorError (the reference's
// CoordinatorError variants).
type DisaggFailure uint8

const (
	// DecodePreviewFailed: the decode preview failed; nothing was booked.
	DecodePreviewFailed DisaggFailure = iota + 1
	// DecodeCommitFailed: the decode booking failed (decode-anchored
	// commit or plan_decode).
	DecodeCommitFailed
	// PrefillCommitFailed: the prefill booking failed (plan_prefill or the
	// decode-anchored prefill commit).
	PrefillCommitFailed
	// InvalidPlanState: plan_decode in a state that does not allow it.
	InvalidPlanState
	// MissingTopologyDomain, MissingEnforcement, MissingPreferredWeight:
	// the anchor worker names a KV-transfer domain but its record cannot
	// be turned into a constraint. The request fails closed.
	MissingTopologyDomain
	MissingEnforcement
	MissingPreferredWeight
)

// CoordinatorError is an error of the coordinator, with the reference's
// text. Its class is the inner booking error's for the three booking
// failures (the pool's answer passes through), ErrConflict for
// InvalidPlanState and ErrNotReady for the incomplete-metadata failures
// (the catalog cannot serve the request until the worker is registered
// again with complete metadata).
type CoordinatorError struct {
	Failure DisaggFailure
	// Err is the pool's error of a booking failure.
	Err error
	// WorkerID and Domain name the anchor of a metadata failure.
	WorkerID uint64
	Domain   string
	// Operation, Expected and State describe an InvalidPlanState.
	Operation, Expected string
	State               PlanState
}

func (e *CoordinatorError) Error() string {
	switch e.Failure {
	case DecodePreviewFailed:
		return "decode preview failed: " + e.Err.Error()
	case DecodeCommitFailed:
		return "decode booking failed: " + e.Err.Error()
	case PrefillCommitFailed:
		return "prefill booking failed: " + e.Err.Error()
	case InvalidPlanState:
		// The reference prints the Rust variant name (Linked); kvselect
		// prints the snake_case name its responses use (linked).
		return fmt.Sprintf("plan is in state %s; %s needs %s", e.State, e.Operation, e.Expected)
	case MissingTopologyDomain:
		return fmt.Sprintf("worker %d has kv_transfer_domain %q but no matching topology domain", e.WorkerID, e.Domain)
	case MissingEnforcement:
		return fmt.Sprintf("worker %d has kv_transfer_domain %q but no kv_transfer_enforcement", e.WorkerID, e.Domain)
	case MissingPreferredWeight:
		return fmt.Sprintf("worker %d has preferred KV transfer enforcement but no kv_transfer_preferred_weight", e.WorkerID)
	}
	return fmt.Sprintf("coordinator error %d", e.Failure)
}

// Unwrap returns the class and, for booking failures, the pool's error (so
// ClassOf finds its class).
func (e *CoordinatorError) Unwrap() []error {
	switch e.Failure {
	case DecodePreviewFailed, DecodeCommitFailed, PrefillCommitFailed:
		return []error{e.Err}
	case InvalidPlanState:
		return []error{ErrConflict}
	}
	return []error{ErrNotReady}
}

// Registry errors (kvselect's own texts).
func errPlanNotFound(id string) error { return errorf(ErrNotFound, "plan %s not found", id) }

func errPlanExists(id string) error { return errorf(ErrConflict, "plan %s already exists", id) }
