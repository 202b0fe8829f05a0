// Command kvselect is the KV-cache-aware worker selector: one binary with the
// subcommands serve (default), bench and mocker.
//
// Only this package reads flags and the environment; every other package
// takes a Config with defaults and a Validate method. main reads top to
// bottom: parse, build configs, construct, start, wait for a signal, stop in
// reverse order (serve.go).
//
// # kvselect serve
//
// Flags keep the names and defaults of `python -m dynamo.select_service`
// (--port 8092, --threads 4 (index shards, only when given), --indexer-peers, --replica-sync-port,
// --replica-sync-peers, --selection-cache-ttl-secs 120,
// --selection-cache-max-entries 4096, --selection-cache-max-bytes 268435456,
// --session-affinity-ttl-secs, --router-assume-kv-reuse /
// --no-router-assume-kv-reuse) plus --host (0.0.0.0), --pprof,
// --max-connections (default (soft RLIMIT_NOFILE - 128) * 3/4, see
// defaultMaxConnections), --auth-token-file (bearer token on every route
// but /health, /ready and /metrics) and --tls-cert/--tls-key (HTTPS),
// --disagg-order and --disagg-prefill-failure (the defaults of the /disagg
// routes' plans) and --workers-file (the catalog's only source: a JSON file
// of POST /workers bodies, polled every second; workersfile.go). The
// router configuration comes from the DYN_ROUTER_* variables named by the
// `env` tags of sched.Config, and DYN_USE_KV_EVENTS. Settings that belong to
// features not built yet (peer recovery, replica sync, session affinity,
// keyed tracking hashes, remote indexer, queue policies) are validated and
// logged as "accepted but not yet active", never silently ignored.
//
// SIGINT or SIGTERM: the HTTP server drains (httpapi.Server.Shutdown): it
// stops accepting, requests already in the handler finish against the live
// service, requests that start later get 503 "selection service is
// shutting down", every response carries Connection: close, and idle
// connections are closed once nothing is waiting in them; after 30 s the
// rest are cut (exit 1). Then the service turns not-ready, the sweep
// stops, the ingress closes, exit 0.
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
//     reservations, reservation-index cleanup, pending-cache TTL); owns
//     nothing; stopped by cancelling its context after the HTTP drain.
//   - --workers-file (two, when given): the poll loop (workersFile.watch),
//     fed by a 1 s ticker, owns the file's last state and is the only
//     sender on the source's channel (one snapshot slot, a newer snapshot
//     replacing one not yet taken); the reconciler (core.CatalogReconciler.Run)
//     receives the snapshots and applies them to the catalog, retrying a
//     failed pass 5 s later. Both stop when serve cancels their context
//     after the HTTP drain, keeping the catalog; if the poll loop stops on
//     its own it sends an empty membership and closes the channel, and the
//     reconciler deletes the file's workers and returns.
//   - CPU profile / trace requests run net/http/pprof through fasthttp's
//     adaptor on their own goroutine for the profile's duration.
//   - KV-event ingress (zmqin.Ingress, unless DYN_USE_KV_EVENTS=false): per
//     worker rank one goroutine (dial with backoff; decode, sequence
//     checks, replay) and, while connected, a reader (frames into a
//     bounded queue), plus
//     the writer goroutines that apply decoded batches to the partitions'
//     indexes (a worker always maps to the same writer). Started by
//     Ingress.Sync on registration, stopped by Detach or by Ingress.Close at
//     the end of the shutdown. zmqin/doc.go has the details.
//   - --demo engines: each simulated engine's publisher runs an accept loop
//     and one goroutine per subscriber (zmqpub.Publisher); closed last.
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
// zmqin.Mesh (its publisher, drainer and one receive loop per peer, plus
// its PUB socket's; zmqin.Mesh lists them), all stopped when the bench
// run ends with it. bench --simulate (package
// bench/sim) runs the
// in-process serve without idle engines: the simulation creates its own,
// one set per policy (each engine's publisher goroutines live until its
// policy ends), and drives everything from the calling goroutine. mocker
// runs simulated engines and one prompt driver goroutine per engine until a
// signal.
package main
