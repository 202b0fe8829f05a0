package sched

import "errors"

// Error sentinels. Every error this package returns is one of these, or wraps
// exactly one of them with %w (errors.Is works on all). The host classifies
// them (core: not ready, overloaded, bad request, ...); sched knows nothing
// of transports.
//
// The messages are Dynamo's own texts (ai-dynamo/dynamo:
// lib/kv-router/src/scheduling/types.rs) without a "sched:" prefix, so an
// error body can carry err.Error() unchanged and callers that compare bodies
// with Dynamo's see the same words; details (ids) are appended after a colon
// by the wrapping call site.
var (
	// ErrNoEndpoints: no (worker, dp_rank) is eligible, or the pinned one
	// is unknown, out of range or lacks a required taint.
	ErrNoEndpoints = errors.New("no endpoints available to route work")
	// ErrAllOverloaded: candidates exist if overload is ignored, but every
	// one is flagged overloaded.
	ErrAllOverloaded = errors.New("all eligible workers are overloaded")
	// ErrPinnedOverloaded: the pinned worker is flagged overloaded.
	ErrPinnedOverloaded = errors.New("pinned worker is overloaded")
	// ErrPinnedNotAllowed: the pinned worker is outside
	// allowed_worker_ids.
	ErrPinnedNotAllowed = errors.New("pinned worker is not in allowed worker set")
	// ErrWorkerNotFound: a booking names a retired (worker, dp_rank);
	// booking never revives a worker.
	ErrWorkerNotFound = errors.New("worker not found")
	// ErrInvalidDecayFraction: an output-block decay fraction outside [0, 1]
	// or not finite.
	ErrInvalidDecayFraction = errors.New("decay_fraction must be in [0, 1]")
	// ErrInvalidConfig: a Config or a per-request Override has an invalid
	// value: a bad request for an override, a start-up error for a Config.
	ErrInvalidConfig = errors.New("invalid router config")
	// ErrInvalidRequest: a request the scorer cannot score (isl_tokens <= 0,
	// block_size <= 0).
	ErrInvalidRequest = errors.New("invalid scheduling request")
	// ErrQueueRejected: a policy class's queue is at one of its caps; the
	// error is a *QueueRejection.
	ErrQueueRejected = errors.New("router queue limit reached")
)
