// Package core is the selection service as an embeddable Go library: the
// partitions (model_name, routing_group), the worker catalog, selections,
// reservations and their ledger, the pending-selection cache and expiry. It
// composes radix (the KV index) and sched (cost function, picker, load
// accounting) and has no sockets and no HTTP: a host (cmd/kvselect) wires an
// Ingress (zmqin's ZMQ listeners) and a front end (httpapi) around it. Every
// method of Service mirrors one route of Dynamo's standalone selection
// service (ai-dynamo/dynamo:lib/kv-router/src/services/selection/).
//
// # State and its owners
//
// Each piece of state has one owner; anything else is derived from it.
//
//	state                                   owner (file)                          guarded by
//	catalog records, engine-reported LoRA   Service.catalog (catalog.go)          Service.mu
//	partitions                              Service.parts (partition.go)          copy-on-write map, written under Service.mu
//	a partition's members, their rank
//	  ranges, rank loads, block size, eagle partition.m (members.go)              members.mu (taken under Service.mu)
//	a partition's schedulable view          partition.snap (partition.go)         atomic pointer; built only by partition.publish
//	schedulable and listener counts         derived: snapshots, members           (none kept)
//	a partition's KV index                  partition.index / approx / side       radix's own locks (index.go)
//	live requests and their loads           Service.ledger (ledger.go)            concurrent map (xsync); a record's state by CAS; its slot's counters in sched
//	pending selections                      Service.pending (pending.go)          its shards' mutexes
//	disaggregated plans                     Service.plans (disagg_plans.go)       concurrent map (xsync); legs are ledger records
//	session bindings                        partition.affinity (affinity.go)      its shards' mutexes
//	router queue                            partition.queue (queue.go)            its mutex
//	per-worker catalog changes in flight    Service.workerLocks (workers.go)      its mutex
//
// A partition (partition.go) is one (model_name, routing_group): its KV
// index, its members and their loads, its snapshot, its session table and
// router queue. Partitions are created on first use and never removed.
//
// # The host's contract
//
//  1. Build a Config (DefaultConfig, then change fields) and call
//     New(cfg, Options{Ingress, Replica, Clock, Rand, Primary}). Zero
//     options pick NopIngress, NopReplicaSink, time.Now, a runtime RNG and
//     each partition's own radix index as the primary index (Primary is a
//     standalone indexer's client; see index.go for the index shapes).
//  2. Register workers with UpsertWorker (whole-record upsert; a worker
//     that cannot be scheduled is recorded as incomplete with its reasons,
//     which is still a success), PatchWorker and DeleteWorker. The service
//     calls Ingress.Sync for a schedulable worker's ranks (when
//     Config.UseKVEvents), and Ingress.Detach, then drops the worker's
//     index blocks and releases its bookings, when it leaves a partition.
//     Those calls run without the catalog lock, one change of a worker at a
//     time; an Ingress may block in them, but must not call back into the
//     catalog methods for the same worker.
//  3. Serve requests with Select, SelectAndReserve, Reserve,
//     PrefillComplete, OutputBlock, Free, Loads, PotentialLoads,
//     OverlapScores, Dump, ListWorkers and Ready, from any number of
//     goroutines. Requests may alias the caller's buffers: the service
//     copies every string and slice it keeps, and a Selection must be
//     encoded before those buffers are reused.
//  4. Call Sweep(now) periodically (DefaultSweepInterval): it releases
//     reservations older than the expiry guard and removes expired pending
//     selections. When ExpiresIndex (approximate primary or predicted-TTL
//     side index), also call ExpireIndex(now) every ApproxExpiryInterval.
//     The service starts no goroutine and reads time only through the
//     Clock.
//  5. At shutdown call Close (readiness turns false, new work fails as not
//     ready), drain the front end, then close the Ingress (the host owns
//     it).
//
// # Disaggregated plans
//
// A plan books one request in two pools, the partitions (model_name,
// prefill routing group) and (model_name, decode routing group) of the
// same Service (disagg*.go; Dynamo's DisaggCoordinator). A host:
//
//  1. Configures Config.Disagg (the order and prefill-failure policy of
//     requests that name none) and the router's conditional-disaggregation
//     fields in Config.Sched (policy, thresholds).
//  2. Calls PlanDisagg(&DisaggRequest{...}) and routes by the returned
//     DisaggPlanView: the decode leg's worker always, the prefill leg's
//     when present, aggregated when Bypass. The plan is registered under
//     its selection id only on success. With DeferDecode (prefill-anchored
//     only) it books prefill alone and calls PlanDecode(id) later, before
//     or after the hand-off.
//  3. Calls DisaggPrefillComplete(id) when the first decode token or the
//     hand-off is seen (it frees the prefill leg; idempotent), then
//     ReleaseDisagg(id) when the request ends (frees what is left, removes
//     the plan).
//  4. Maps errors by class like every other: a *CoordinatorError wraps the
//     pool's error for booking failures, ErrConflict for a plan_decode in
//     the wrong state, ErrNotReady for a worker whose KV-transfer metadata
//     is incomplete (fail closed); unknown ids are ErrNotFound.
//
// Each leg is an ordinary reservation under "<id>/prefill" or
// "<id>/decode": it shows in Loads, replicates, and expires or ends with
// its worker like any booking; its record carries the plan's leg as its
// Lease, and the plan holds the record, not a copy of it. Sweep removes
// plans older than the expiry guard. Plans live in this process only.
//
// # Membership from a discovery source
//
// A host with a discovery source (a workers file, a Kubernetes reflector)
// implements CatalogSource (a channel of complete snapshots), builds
// NewCatalogReconciler(s, ReconcilerConfig{Name, Exclusive, Observer}) and
// runs Run(ctx, source) on a goroutine of its own:
//
//  1. The first snapshot is applied as soon as the source sends it (apply
//     it before serving). Every snapshot is one pass: duplicates rejected
//     first, one batch upsert, stale workers deleted; a pass that fails
//     is applied again 5 s later unless a newer snapshot arrives.
//  2. While an Exclusive reconciler is open, UpsertWorker, PatchWorker and
//     DeleteWorker answer ErrConflict, "worker catalog is managed by
//     <Name>".
//  3. When the source closes its channel, Run deletes every worker the
//     reconciler introduced (fail closed) and returns; a cancelled ctx
//     returns at once and keeps the catalog. Close gives the ownership
//     back.
//
// Errors carry the reference's exact message and wrap one class
// (ErrBadRequest, ErrNotFound, ErrConflict, ErrNotReady, ErrOverloaded,
// ErrCapacity, ErrInternal; ClassOf finds it). The host maps classes to its
// own answers; core names no transport's codes.
//
// # One ledger for live requests
//
// Every live request has exactly one record (reservation, ledger.go), in
// one concurrent map keyed by selection id across all partitions. The
// record owns the request's load: it embeds the sched.Slot booked on the
// worker rank, so a lifecycle call (prefill_complete, output_block, DELETE)
// is one map lookup plus the slot's updates (an atomic swap for
// prefill_complete; the worker rank's mutex for output_block and free).
// Expiry, worker removal and the pending cache act on the same record; a
// replica origin and a lease (session affinity, a disaggregated plan's
// leg) hang off it and end with it.
//
// A record moves claimed → live → released:
//
//   - A booking claims the id (inserts a claimed record), books the slot,
//     consumes the pending entry it replays, then turns the record live.
//     Claimed records are invisible to lifecycle calls.
//   - Free, expiry and worker removal release a live record by one CAS
//     (live → released); only the winner releases the slot, removes the
//     record and releases its lease.
//
// Why a double booking is impossible: a selection id names at most one
// record in the ledger (LoadOrStore), and a record stays in the ledger from
// its claim until it is released or its claim abandoned. A booking of an
// id therefore succeeds only when no booking of the id is live or in
// flight, whatever the partition or worker; otherwise it is a conflict. A
// cached selection books at most once because the replay consumes its
// entry before its record turns live: no free can end the booking while
// the entry still exists.
//
// Worker removal retires the rank's sched.WorkerLoad first (no booking
// lands on it after), then releases every live record on a retired rank; a
// booking that raced the retirement re-checks the rank after turning live
// and releases itself.
//
// # Concurrency
//
// Catalog changes are in-memory under Service.mu (held briefly; a
// partition's membership under its own lock inside it) and publish an
// immutable per-partition snapshot; the ingress calls they imply run
// after the mutex is released, serialized per worker (workers.go). Selections read the snapshot, the index and the load
// counters without a lock. Selections are not serialized per partition
// (Dynamo runs one actor per partition): two concurrent selections may score
// the same stale load for the microseconds between scoring and booking.
// The ledger and the pending-selection cache (sharded by id) take no global
// lock.
//
// # Selection policies
//
// Every selection ranks the eligible rows with a sched.SelectionPolicy: the
// partition's (Config.PartitionSelectionPolicies, else
// Config.SelectionPolicy, else sched.DefaultSelectionPolicy, the
// reference's decisions), or the one a request
// names in router_config_override.routing_policy (any built-in policy or
// one of Config.SelectionPolicy, PartitionSelectionPolicies and
// SelectionPolicies; an unknown name is
// a bad request). The service keeps eligibility, bookings, the ledger and
// replication whatever the policy; a policy whose filters drop every row
// fails the request as not ready.
// # Session affinity
//
// With Config.SessionAffinity.TTL set, every partition has a session table
// (affinity.go; Dynamo's SessionAffinity): a booking of a session holds it
// before it books and binds it when it commits, and the binding's lease
// hangs off the reservation record (released with it: free, expiry,
// worker removal); /select only reads it. The host:
//
//  1. Calls ReapAffinity(now) every SessionAffinity.ReapInterval()
//     (min(TTL, 30 s)).
//  2. To replicate bindings, passes Options.Affinity (an AffinitySink that
//     must not block) and Options.WriterID (its process id on the mesh),
//     and feeds peers' events to ApplyAffinity.
//
// # The router queue
//
// When the model's router policy profile queues (Config.Sched.
// QueueThreshold, or a class of Config.Sched.Policy with a busy line), a
// partition has a router queue (queue.go): a selection that must wait
// parks on its own channel and is dispatched, one at a time, when a
// prefill completion, a release, a catalog change or Sweep frees
// capacity. Pass a context that ends when the caller goes away
// (SelectContext, SelectAndReserveContext): a waiting selection then
// leaves the queue. A class at a cap refuses with ErrOverloaded carrying
// a *QueueRejection (AsQueueRejection). Advisory selects, explicit and
// replayed reservations never wait.
//
// # kv hints
//
// A booking response of a partition where some worker has a
// router_hint_worker_type carries a kv_hint (Selection.KVHint) when a
// source of the target's type holds a longer prefix (hint.go). The index
// must be the local event-driven one (no approximate primary, no
// predicted side index, no remote primary); otherwise the service warns
// once through Options.Logf.
//
// # The standalone indexer
//
// Indexer (indexer.go) is Dynamo's standalone indexer as a library: a
// registry of worker ranks over the same Ingress, radix index, hashing and
// dump format as Service, without catalog, loads or reservations. Its
// host contract is on the type.
//
// # Replication and LoRA
//
// ReplicaSink receives admission, prefill-completion and free events
// (never output blocks) for the replica mesh, each with the booking's
// LoRA name; ApplyReplica applies peers' (replica_apply.go). A request
// naming a LoRA adapter is narrowed to the workers that serve it
// (lora.go: Options.LoraFilter, else the records' lora_adapters and
// SetEngineAdapters). session_context is carried whole on the scoring
// request (sched.Request.Session) for custom policies.
package core
