package core

import (
	"errors"
	"fmt"

	"github.com/kvselect/kvselect/sched"
)

// Error classes. Every error a Service method returns wraps exactly one of
// these or one of sched's sentinels (errors.Is works on all of them), and its
// Error() text is the exact message the reference puts in the HTTP body
// {"error": ...}. Status maps an error to its HTTP status with ErrorStatus.
var (
	// ErrBadRequest: the request is invalid (hash-path validation,
	// effective_prefill_tokens above isl, decay_fraction). 400.
	ErrBadRequest = errors.New("core: bad request")
	// ErrNotReady: nothing schedulable, or the service is shutting down. 503.
	ErrNotReady = errors.New("core: not ready")
	// ErrNotFound: unknown worker, reservation or pending selection. 404.
	ErrNotFound = errors.New("core: not found")
	// ErrConflict: the selection id is already reserved or being reserved. 409.
	ErrConflict = errors.New("core: conflict")
	// ErrInternal: a broken invariant surfaced as a 500.
	ErrInternal = errors.New("core: internal error")
	// ErrConfig: an invalid Config (a start-up error, never an HTTP status).
	ErrConfig = errors.New("core: invalid config")
)

// ErrorStatus maps each error class to its HTTP status (spec service-api
// 1.1). Match with errors.Is in order; the first hit wins. sched's own table
// follows core's.
var ErrorStatus = func() []struct {
	Err    error
	Status int
} {
	t := []struct {
		Err    error
		Status int
	}{
		{ErrBadRequest, 400},
		{ErrNotReady, 503},
		{ErrNotFound, 404},
		{ErrConflict, 409},
		{ErrInternal, 500},
	}
	for _, e := range sched.ErrorStatus {
		t = append(t, struct {
			Err    error
			Status int
		}{e.Err, e.Status})
	}
	return t
}()

// Status returns the HTTP status of err: the first ErrorStatus class it
// wraps, 500 otherwise.
func Status(err error) int {
	for _, e := range ErrorStatus {
		if errors.Is(err, e.Err) {
			return e.Status
		}
	}
	return 500
}

// Error is an error of one class with the reference's exact message.
type Error struct {
	Class error
	Msg   string
}

func (e *Error) Error() string { return e.Msg }
func (e *Error) Unwrap() error { return e.Class }

func errorf(class error, format string, args ...any) error {
	return &Error{Class: class, Msg: fmt.Sprintf(format, args...)}
}

// Fixed messages and allocation-free errors of the hot path.
var (
	errShuttingDown = &Error{ErrNotReady, "selection service is shutting down"}
	errNoWorkers    = &Error{ErrNotReady, "no schedulable workers are available"}
)
