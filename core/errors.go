package core

import (
	"errors"
	"fmt"

	"github.com/kvselect/kvselect/sched"
)

// Error classes. Every error a Service method returns wraps exactly one of
// these (errors.Is works), and its Error() text is the exact message the
// reference puts in its error body. The domain names the class; the host
// (httpapi) owns the one table that turns a class into its answer.
var (
	// ErrBadRequest: the request is invalid (hash-path validation,
	// effective_prefill_tokens above isl, decay_fraction, a pinned worker
	// outside allowed_worker_ids, a bad router_config_override).
	ErrBadRequest = errors.New("core: bad request")
	// ErrNotFound: unknown worker, reservation or pending selection.
	ErrNotFound = errors.New("core: not found")
	// ErrConflict: the selection id is already reserved or being reserved.
	ErrConflict = errors.New("core: conflict")
	// ErrNotReady: nothing schedulable (no eligible worker included), or
	// the service is shutting down.
	ErrNotReady = errors.New("core: not ready")
	// ErrOverloaded: every eligible worker (or the pinned one) is flagged
	// overloaded.
	ErrOverloaded = errors.New("core: overloaded")
	// ErrCapacity: a bounded table of the service is full (live
	// reservations, their bytes): retry later or on another replica.
	ErrCapacity = errors.New("core: at capacity")
	// ErrInternal: a broken invariant surfaced to the caller.
	ErrInternal = errors.New("core: internal error")
	// ErrConfig: an invalid Config (a start-up error, never a request's).
	ErrConfig = errors.New("core: invalid config")
)

// Classes lists the request error classes, in the order ClassOf tests them.
var Classes = [...]error{ErrBadRequest, ErrNotFound, ErrConflict, ErrNotReady, ErrOverloaded, ErrCapacity, ErrInternal}

// ClassOf returns the class err wraps, ErrInternal when it wraps none.
func ClassOf(err error) error {
	for _, c := range Classes {
		if errors.Is(err, c) {
			return c
		}
	}
	return ErrInternal
}

// Error is an error of one class with the reference's exact message. Cause,
// when set, is the lower-level error it classifies (a sched sentinel), so
// errors.Is matches both.
type Error struct {
	Class error
	Msg   string
	Cause error
}

func (e *Error) Error() string { return e.Msg }

// Unwrap returns the class and, when set, the cause.
func (e *Error) Unwrap() []error {
	if e.Cause == nil {
		return []error{e.Class}
	}
	return []error{e.Class, e.Cause}
}

func errorf(class error, format string, args ...any) error {
	return &Error{Class: class, Msg: fmt.Sprintf(format, args...)}
}

// schedClasses classifies sched's sentinels (the reference's scheduler
// errors, ai-dynamo/dynamo:lib/kv-router/src/services/selection/error.rs:
// no endpoints is not-ready, overload is overloaded, a pin outside the
// allowed set and invalid weights are bad requests).
var schedClasses = [...]struct{ err, class error }{
	{sched.ErrNoEndpoints, ErrNotReady},
	{sched.ErrAllFiltered, ErrNotReady},
	{sched.ErrAllOverloaded, ErrOverloaded},
	{sched.ErrPinnedOverloaded, ErrOverloaded},
	{sched.ErrPinnedNotAllowed, ErrBadRequest},
	{sched.ErrInvalidConfig, ErrBadRequest},
	{sched.ErrInvalidRequest, ErrBadRequest},
}

// fromSched classifies an error of sched, keeping its text.
func fromSched(err error) error {
	for _, c := range schedClasses {
		if errors.Is(err, c.err) {
			return &Error{Class: c.class, Msg: err.Error(), Cause: err}
		}
	}
	return &Error{Class: ErrInternal, Msg: err.Error(), Cause: err}
}

// Fixed messages and allocation-free errors of the hot path.
var (
	errShuttingDown = &Error{Class: ErrNotReady, Msg: "selection service is shutting down"}
	errNoWorkers    = &Error{Class: ErrNotReady, Msg: "no schedulable workers are available"}
)
