// Command kvselect is the KV-cache-aware worker selector: one binary with the
// subcommands serve (default), bench, mocker and health (one GET of
// /health or /ready, exit 0 on a 200: the container's HEALTHCHECK), and
// --version.
//
// Only this package reads flags and the environment; every other package
// takes a Config with defaults and a Validate method. Every subcommand that
// runs until a signal (serve, indexer, and bench's in-process replicas)
// is a composition of one node (node.go): it parses, then adds the parts
// in their start order, each pushing its stop onto the node's stack;
// node.wait blocks until the signal or a part failing on its own, and
// node.stop undoes the parts in reverse order, also when start-up stops
// half-way (nothing leaks: TestServeFailsHalfwayLeaksNothing).
//
// # kvselect serve
//
// Flags keep the names and defaults of `python -m dynamo.select_service`
// (--port 8092, --threads 4 (when given: KV-event writers and index
// shards), --indexer-peers, --replica-sync-port,
// --replica-sync-peers, --selection-cache-ttl-secs 120,
// --selection-cache-max-entries 4096, --selection-cache-max-bytes 268435456,
// --session-affinity-ttl-secs, --router-assume-kv-reuse /
// --no-router-assume-kv-reuse) plus --host (0.0.0.0), --debug-addr
// (127.0.0.1:6060: /debug/pprof on a listener of its own, never on the
// API's port; a free port when the default is taken; --pprof=false
// serves none),
// --max-connections (default (soft RLIMIT_NOFILE - 128) * 3/4, see
// defaultMaxConnections), --auth-token-file (bearer token on every route
// but /health, /ready and /metrics) and --tls-cert/--tls-key (HTTPS),
// --model-path NAME=DIR (a model's tokenizer files, read at start-up:
// tokenizers.go), --engine-metrics-interval (scrape the workers' engine
// metrics for their LoRA adapters: enginemetrics.go),
// --disagg-order and --disagg-prefill-failure (the defaults of the /disagg
// routes' plans) and --workers-file (the catalog's only source: a JSON file
// of POST /workers bodies, polled every second; workersfile.go). The
// router configuration comes from the DYN_ROUTER_* variables named by the
// `env` tags of sched.Config. The index shape (indexflags.go) comes from
// DYN_ROUTER_USE_KV_EVENTS (or DYN_USE_KV_EVENTS), DYN_ROUTER_TTL_SECS,
// DYN_ROUTER_PREDICTED_TTL_SECS and DYN_ROUTER_APPROXIMATE_CACHE_POLICY,
// which the frontend's flags (--router-kv-events/--no-router-kv-events,
// --router-ttl-secs, --router-predicted-ttl-secs,
// --router-approximate-cache-policy) override. Keyed tracking hashes:
// --router-tracking-hash keyed-xxh3-v1, --router-tracking-key-file (exactly
// 32 raw bytes) and --router-tracking-key-id, over DYN_ROUTER_TRACKING_*.
// Session affinity: --session-affinity-ttl-secs, --session-affinity-mode.
// The router queue: DYN_ROUTER_QUEUE_THRESHOLD, DYN_ROUTER_QUEUE_POLICY,
// DYN_ROUTER_POLICY_CONFIG and DYN_ROUTER_OVERLAP_REFRESH_AFTER_SECS, with
// the frontend's --router-queue-threshold, --router-queue-policy and
// --router-policy-config over them (flags_queue.go). The policies:
// --routing-policy (else DYN_ROUTER_WORKER_SELECTION_POLICY) for every
// partition, DYN_ROUTER_PREFILL_POLICY and DYN_ROUTER_DECODE_POLICY for a
// /disagg plan's pools. No setting is silently inert: one that acts on
// nothing in a given combination is logged as "accepted without effect",
// one kvselect cannot honour is refused at start-up (README lists them).
//
// Logs (logging.go) are log/slog lines on stderr, readable text by
// default and JSON lines with DYN_LOGGING_JSONL=1, filtered by DYN_LOG
// (Dynamo's variables and syntax); each component logs under its target
// (kvselect, kvselect::httpapi, kvselect::zmqin, kvselect::mesh,
// kvselect::core, kvselect::workers_file, kvselect::recovery,
// kvselect::demo, kvselect::mocker). Start-up
// logs one line with the effective configuration (no secret: only whether
// a bearer token is required); every catalog change is one line, from
// HTTP (httpapi), the workers file (its reconciler's observer) or --demo.
//
// SIGINT or SIGTERM: serve's stop stack runs. Waiting requests end as
// shutting down; then the HTTP server drains (httpapi.Server.Shutdown): it
// stops accepting, requests already in the handler finish against the live
// service, requests that start later get 503 "selection service is
// shutting down", every response carries Connection: close, and idle
// connections are closed once nothing is waiting in them; after 30 s the
// rest are cut (exit 1). Requests waiting in a router queue or on another
// booking's session end first, as shutting down (core.Service.CancelWaits),
// so that they do not hold the drain. Then the debug listener stops (up
// to 5 s for a profile in flight), the workers file's poll, the affinity
// reaper and the sweep stop (the catalog stays as it is), the engine
// scrape and the workers file's reconciler stop, the service turns
// not-ready, the mesh and the ingress close, the demo engines last, exit
// 0.
//
// # Goroutine inventory (serve)
//
//   - main: parses, constructs, then waits for the signal context or a
//     server error, and runs the shutdown sequence (the HTTP drain loop of
//     httpapi.Server.Shutdown included, a 50 ms ticker).
//   - HTTP serve loop (one): fasthttp's accept loop on the listener; started
//     by serve, returns when Server.Shutdown closes the listener.
//   - fasthttp connection workers (one per open connection, pooled by
//     fasthttp, at most --max-connections): each reads requests and runs
//     the handler inline; core work happens on these goroutines, with no
//     hand-off. They end when their connection closes; Shutdown waits for
//     every connection to close, closing the idle ones.
//   - connection rejecters (at most 16, httpapi): each answers one
//     connection over --max-connections with a 503, reads what the client
//     sent for up to 1 s, and closes it.
//   - sweep (one): a 60 s ticker calling core.Service.Sweep (expiry of stale
//     reservations and of the pending cache's entries) and, with an
//     approximate or predicted-TTL index, a 100 ms ticker calling
//     core.Service.ExpireIndex; owns nothing; stopped by cancelling its
//     context after the HTTP drain.
//   - affinity reaper (one, with --session-affinity-ttl-secs): a ticker of
//     min(TTL, 30 s) calling core.Service.ReapAffinity (idle bindings past
//     their TTL); owns nothing; stopped with the sweep.
//   - waiting selections: a selection parked in a router queue holds its
//     connection worker (blocked on its own channel, no lock) and one
//     watcher goroutine parked in the netpoller on its connection (httpapi
//     clientgone.go), both ended when it is dispatched, its client hangs up
//     or the service cancels waits.
//   - --workers-file (two, when given): the poll loop (workersFile.watch),
//     fed by a 1 s ticker, owns the file's last state and is the only
//     sender on the source's channel (one snapshot slot, a newer snapshot
//     replacing one not yet taken); the reconciler (core.CatalogReconciler.Run)
//     receives the snapshots and applies them to the catalog, retrying a
//     failed pass 5 s later. Both stop after the HTTP drain, keeping the
//     catalog; if the poll loop stops on
//     its own it sends an empty membership and closes the channel, and the
//     reconciler deletes the file's workers and returns.
//   - debug listener (one, with --debug-addr unless --pprof=false):
//     fasthttp's accept loop serving only /debug/pprof (perf.DebugServer),
//     and a goroutine per open connection; a CPU profile or trace runs
//     net/http/pprof through fasthttp's adaptor on its own goroutine for
//     the profile's duration. Stopped right after the HTTP drain, after up
//     to 5 s for a profile in flight.
//   - KV-event ingress (zmqin.Ingress, unless DYN_USE_KV_EVENTS=false): per
//     worker rank one goroutine (dial with backoff; decode, sequence
//     checks, replay) and, while connected, a reader (frames into a
//     bounded queue), plus
//     the writer goroutines that apply decoded batches to the partitions'
//     indexes (a worker always maps to the same writer). Started by
//     Ingress.Sync on registration, stopped by Detach or by Ingress.Close at
//     the end of the shutdown. zmqin/doc.go has the details.
//   - replica mesh (mesh.Mesh of zmqin/mesh, with --replica-sync-port): the PUB socket's
//     accept loop and, per subscribed peer, a reader and a writer; one
//     publisher draining the outbound queue; one drainer applying peers'
//     events to the service; one dial-and-receive loop per peer. Closed
//     after the HTTP drain and the service, before the ingress.
//   - NATS event plane (with --event-plane nats, eventplane.go and
//     zmqin/natsplane): the embedded nats-server's own goroutines (accept,
//     routes, one reader and writer per client and route; without
//     --nats-server), reached in process through a pipe; the client's
//     reader and flusher, and one delivery goroutine per subscription,
//     which run the KV ingress's and the bookings' handlers (KV events
//     under the registry's read lock; bookings, session bindings and
//     snapshot requests under the bookings' lock); the Link's reconnect
//     callback goroutine (which re-asks for snapshots); the bookings'
//     publisher (outbound bookings, bindings and snapshot answers, from
//     bounded queues), snapshotter (asks for and gathers catch-up
//     snapshots) and expirer (releases the mirrors of a peer
//     silent for --event-plane-peer-timeout, 10 s unless 0); with an embedded
//     server, a route watch every 250 ms (a new route asks again); with
//     --nats-catalog, the catalog bucket's binder-then-watcher and writer,
//     and either a mirror loop every second (with --workers-file) or a
//     core.CatalogReconciler fed by the bucket. Stopped after the HTTP
//     drain: the loops, then the bookings, the catalog, the KV ingress, the
//     connection, the server.
//   - engine metrics (with --engine-metrics-interval): one loop scraping
//     the workers' {endpoint}/metrics, at most 16 requests in flight
//     (httpapi/engines); stopped after the HTTP drain.
//   - --demo engines: each simulated engine's publisher runs an accept loop
//     and one goroutine per subscriber (zmqpub.Publisher); the EPP's also
//     serve OpenAI requests (bench.OpenAIServer: an accept loop, one
//     goroutine per connection); closed last.
//
// With --remote-indexer-url the primary index is a standalone indexer
// (httpapi.RemoteIndex, --remote-indexer-timeout, --remote-indexer-max-conns):
// no KV-event ingress is started and --indexer-peers is ignored.
//
// # kvselect indexer
//
// The standalone indexer of `python -m dynamo.indexer` (indexer.go): its
// flags (--block-size, --port 8090, --threads, --workers, --model-name,
// --routing-group, --peers) and DYN_ROUTER_MIN_INITIAL_WORKERS; a
// core.Indexer over a zmqin.Ingress, served by httpapi.NewIndexer. Order:
// parse, construct, recover from --peers (before any listener, so live
// events follow the recovered state), register the --workers, serve until
// SIGINT or SIGTERM, drain HTTP, close the ingress. Its goroutines: the
// HTTP serve loop and connection workers, and the ingress's listeners and
// writers, as serve's below. With --event-plane nats (DYN_EVENT_PLANE;
// indexer_eventplane.go) it also takes KV events from the workers' NATS
// kv-events subjects as serve does (the same embedded server or
// --nats-server link and natsplane.Ingress, subscribed after the
// recovery), and a rank may be registered without a ZMQ endpoint; serve's
// bookings and catalog flags are refused. Stopped after the HTTP drain:
// the NATS KV ingress, the connection, the server, then the ZMQ ingress.
//
// # kvselect bench and kvselect mocker
//
// bench runs, by default, a whole `serve` in this process (inprocess.go),
// one simulated engine per worker (bench.Run starts them; they publish
// while the fill routes the workload, before the load), its client
// goroutines, and the no-op baseline server; bench/doc.go lists them.
// bench --replicas N (replicas.go) instead runs one replica, then N meshed
// replicas, each a core.Service with its own KV-event ingress, sweep
// goroutine, HTTP server (serve's goroutines above) and, when meshed, a
// mesh.Mesh (its publisher, drainer and one receive loop per peer, plus
// its PUB socket's; mesh.Mesh lists them), all stopped when the bench
// run ends with it; with --event-plane nats, N more replicas each with an
// embedded NATS server and natsplane.Bookings (eventplane_bench.go; the
// goroutines of serve's event plane above). bench --simulate (package bench/sim) runs the
// in-process serve (with a seeded picker, --rand-seed) without idle
// engines: the simulation creates its own engine models, and for each run
// of a selector policy one KV event publisher per engine (its goroutines
// live until that run ends), and drives everything from the calling
// goroutine. mocker
// runs simulated engines, each with its OpenAI HTTP endpoint
// (bench.OpenAIServer: its accept loop and one goroutine per connection),
// and one prompt driver goroutine per engine until a signal.
package main
