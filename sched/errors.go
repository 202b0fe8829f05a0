package sched

import "errors"

// Error sentinels. Every error this package returns is one of these, or wraps
// exactly one of them with %w (errors.Is works on all). The status in each
// comment is the HTTP status the standalone selection service answers with
// (spec 2.6 and service-api 1.1); ErrorStatus restates it as a table so
// httpapi maps classes to codes in one place.
//
// The messages are Dynamo's own texts (service-api 1.1) without a "sched:"
// prefix, so an error body can carry err.Error() unchanged and callers that
// compare bodies with Dynamo's see the same words; details (ids) are appended
// after a colon by the wrapping call site.
var (
	// ErrNoEndpoints: no (worker, dp_rank) is eligible, or the pinned one
	// is unknown, out of range or lacks a required taint. 503.
	ErrNoEndpoints = errors.New("no endpoints available to route work")
	// ErrAllOverloaded: candidates exist if overload is ignored, but every
	// one is flagged overloaded. 429.
	ErrAllOverloaded = errors.New("all eligible workers are overloaded")
	// ErrPinnedOverloaded: the pinned worker is flagged overloaded. 429.
	ErrPinnedOverloaded = errors.New("pinned worker is overloaded")
	// ErrPinnedNotAllowed: the pinned worker is outside
	// allowed_worker_ids. 400.
	ErrPinnedNotAllowed = errors.New("pinned worker is not in allowed worker set")
	// ErrDuplicateRequest: a booking reuses a live request id, whatever the
	// worker. 409.
	ErrDuplicateRequest = errors.New("request already exists")
	// ErrRequestNotFound: a lifecycle call names no live request. 404.
	ErrRequestNotFound = errors.New("request not found")
	// ErrWorkerNotFound: a booking names a (worker, dp_rank) the tracker does
	// not know; booking never creates a worker. 404.
	ErrWorkerNotFound = errors.New("worker not found")
	// ErrInvalidDecayFraction: an output-block decay fraction outside [0, 1]
	// or not finite. 400.
	ErrInvalidDecayFraction = errors.New("decay_fraction must be in [0, 1]")
	// ErrInvalidConfig: a Config or a per-request Override has an invalid
	// value. 400 for an override; a startup error for a Config.
	ErrInvalidConfig = errors.New("invalid router config")
	// ErrInvalidRequest: a request the scorer cannot score (isl_tokens <= 0,
	// block_size <= 0). 400.
	ErrInvalidRequest = errors.New("invalid scheduling request")
)

// ErrorStatus maps each sentinel to its HTTP status (spec 2.6). Match with
// errors.Is in order; the first hit wins.
var ErrorStatus = [...]struct {
	Err    error
	Status int
}{
	{ErrNoEndpoints, 503},
	{ErrAllOverloaded, 429},
	{ErrPinnedOverloaded, 429},
	{ErrPinnedNotAllowed, 400},
	{ErrDuplicateRequest, 409},
	{ErrRequestNotFound, 404},
	{ErrWorkerNotFound, 404},
	{ErrInvalidDecayFraction, 400},
	{ErrInvalidConfig, 400},
	{ErrInvalidRequest, 400},
}
