// Package core is the selection service as an embeddable Go library: the
// partitions (model_name, routing_group), the worker catalog, selections,
// reservations, the pending-selection cache and expiry. It composes radix
// (the KV index) and sched (cost function, picker, load accounting) and has
// no sockets and no HTTP: a host (cmd/kvselect) wires an Ingress (zmqin's
// ZMQ listeners) and an HTTP front end (httpapi) around it. Every method of
// Service mirrors one route of Dynamo's standalone selection service (spec
// service-api 1 to 3).
//
// # The host's contract
//
//  1. Build a Config (DefaultConfig, then change fields) and call
//     New(cfg, Options{Ingress, Replica, Clock, Rand}). Zero options pick
//     NopIngress, NopReplicaSink, time.Now and a runtime RNG.
//  2. Register workers with UpsertWorker (whole-record upsert; a worker
//     that cannot be scheduled is recorded as incomplete with its reasons,
//     which is still a success), PatchWorker and DeleteWorker. The service
//     calls Ingress.Sync for a schedulable worker's ranks (when
//     Config.UseKVEvents), and Ingress.Detach, then drops the worker's
//     index blocks and bookings, when it leaves a partition. Sync and Detach
//     run under the catalog mutex (catalog mutations are serialized, as in
//     Dynamo, listener registration included), so an Ingress must not call
//     back into the catalog methods; Status is asked without it.
//  3. Serve requests with Select, SelectAndReserve, Reserve,
//     PrefillComplete, OutputBlock, Free, Loads, PotentialLoads,
//     OverlapScores, Dump, ListWorkers and Ready, from any number of
//     goroutines. Requests may alias the caller's buffers: the service
//     copies every string and slice it keeps, and a Selection must be
//     encoded before those buffers are reused.
//  4. Call Sweep(now) periodically (DefaultSweepInterval): it expires
//     bookings older than the expiry guard, drops reservation rows whose
//     booking vanished and expired pending selections. The service starts
//     no goroutine and reads time only through the Clock.
//  5. At shutdown call Close (readiness turns false, new work gets 503),
//     drain the front end, then close the Ingress (the host owns it).
//
// Errors carry the reference's exact message and wrap one class (ErrBadRequest,
// ErrNotReady, ErrNotFound, ErrConflict, ErrInternal, or a sched sentinel);
// Status maps an error to its HTTP status through the single ErrorStatus
// table.
//
// # Concurrency
//
// Catalog mutations are serialized by one mutex (Dynamo: one async mutex)
// and publish an immutable per-partition snapshot; selections read the
// snapshot, the index and the load counters without a lock. Selections are
// not serialized per partition (Dynamo runs one actor per partition): two
// concurrent selections may score the same stale load for the microseconds
// between scoring and booking. The reservation index (selection id to
// partition) is a concurrent map; a booking claims its id there first, so a
// duplicate id is a 409 whatever the worker.
//
// # Seams for later issues
//
// ReplicaSink receives admission, prefill-completion and free events
// (never output blocks); session affinity, kv hints, queueing and startup
// recovery (Dump's inverse) are not built yet: session_id and
// affinity_target are accepted and ignored.
package core
