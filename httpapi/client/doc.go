// Package client is a Go client of kvselect's selection API (and of
// Dynamo's standalone selection service, whose routes and bodies it
// shares): workers, select, select_and_reserve, reservations and their
// lifecycle, readiness and inspection. It depends on the standard library
// only.
//
// # Use
//
//  1. New(baseURL, Options{...}) once per selector; a Client is safe for
//     concurrent use and keeps a pool of keep-alive connections
//     (Options.MaxConnsPerHost, 64 by default), so share it.
//  2. A gateway runs the select-then-reserve flow (Example_selectThenReserve):
//     Select with a SelectionID, send the request to Selection.Endpoint and
//     DPRank, then Reserve the cached selection by its id (falling back to
//     the explicit form, with the worker and the prompt, when the cached
//     selection is gone: ErrNotFound), report PrefillComplete and
//     OutputBlock as the request runs, and Free it at the end. Or
//     SelectAndReserve to select and book at once.
//  3. Every failure that the server answered is an *Error carrying the
//     HTTP status and the server's message (the reference's text); match
//     its class with errors.Is(err, ErrNotFound) (ErrBadRequest,
//     ErrUnauthorized, ErrNotFound, ErrConflict, ErrOverloaded,
//     ErrNotReady, ErrInternal). Transport failures are returned as they
//     are (wrapped with the call's method and path).
//
// ray_select_then_reserve.py, beside this package, is the same flow in
// Python with the standard library only, as Ray runs it (cmd/kvselect's
// TestRayPythonExample runs it against `kvselect serve --demo`).
//
// Every response body is read to its end and closed, so connections go
// back to the pool; bodies larger than Options.MaxResponseBytes (64 MiB by
// default, a /dump of a large index) fail the call.
package client
