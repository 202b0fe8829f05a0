package main

import (
	"cmp"
	"context"
	"errors"
	"flag"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"strconv"
	"syscall"
	"time"

	"github.com/kvselect/kvselect/core"
	"github.com/kvselect/kvselect/httpapi"
	"github.com/kvselect/kvselect/perf"
	"github.com/kvselect/kvselect/radix"
	"github.com/kvselect/kvselect/zmqin"
	"github.com/kvselect/kvselect/zmqin/mesh"
)

// bound is where a serve listens, sent on its ready channel: the API's
// address and the debug listener's ("" without one).
type bound struct {
	http, debug string
}

// host is the life of a long-running subcommand (serve, indexer): it runs
// until ctx ends and returns the exit code; ready, when non-nil, receives
// the bound addresses once serving.
type host func(ctx context.Context, args []string, env func(string) (string, bool), stderr io.Writer, ready chan<- bound) int

// untilSignal runs h on the process's environment and stderr until SIGINT
// or SIGTERM.
func untilSignal(h host, args []string) int {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	return h(ctx, args, os.LookupEnv, os.Stderr, nil)
}

// serve is the whole life of the selection service: parse, then add the
// node's parts in their start order (each undone, in reverse, by the
// node's stop), serve until ctx ends, stop. It returns the exit code (2:
// a configuration that cannot work; 1: a part that could not start or
// failed). Logs go to stderr (logging.go).
func serve(ctx context.Context, args []string, env func(string) (string, bool), stderr io.Writer, ready chan<- bound) int {
	// Logging, flags and environment.
	lcfg := parseLogEnv(env)
	logs := newLogs(stderr, lcfg)
	log := logs.logger("kvselect")
	args, plane, err := parseEventPlane(args, env, stderr)
	if err != nil {
		log.Error("serve: invalid event-plane configuration", "err", err)
		return 2
	}
	opts, err := parseServe(args, env, stderr)
	if errors.Is(err, flag.ErrHelp) {
		writeEventPlaneUsage(stderr, env)
		return 0
	}
	if err != nil {
		log.Error("serve: invalid configuration", "err", err)
		return 2
	}
	build := readBuildInfo()
	log.Info("starting", startAttrs(opts, build)...)
	warnStartup(log, lcfg, opts.inactive)
	for _, s := range opts.warnings {
		log.Warn(s)
	}
	n := newNode("serve", log)
	// The demo engines (--demo) are the workers' side: they close last,
	// after the ingress stopped listening to them, so that neither the
	// drain nor /ready sees them go.
	var demo *demoEngines
	n.onStopDo("demo engines", func() {
		if demo != nil {
			demo.Close()
		}
	})
	fail := func(code int, what string, err error) int {
		log.Error("serve: "+what, "err", err)
		return n.stop(code)
	}

	// The primary index's source: the workers' KV events (the ingress),
	// a standalone indexer, or nothing (approximate).
	var ingress core.Ingress = core.NopIngress{}
	var zing *zmqin.Ingress
	var remote *httpapi.RemoteIndex
	switch {
	case opts.remote.URL != "":
		if remote, err = httpapi.NewRemoteIndex(opts.remote); err != nil {
			return fail(2, "--remote-indexer-url", err)
		}
		n.onStopDo("remote indexer client", remote.Close)
		log.Info("primary index: the standalone indexer; no KV-event listeners", "url", opts.remote.URL, "timeout", opts.remote.Timeout.String(), "max_conns", opts.remote.MaxConns)
	case opts.core.UseKVEvents:
		if zing, err = zmqin.New(zmqin.Config{Logger: logs.logger("kvselect::zmqin"), Writers: opts.writers}); err != nil {
			return fail(2, "KV-event ingress", err)
		}
		ingress = zing
		n.onStop("KV-event ingress", zing.Close)
	default:
		log.Info("KV events off: approximate index (bookings predict each worker's cache); workers need no kv_events endpoint", "ttl", opts.core.ApproxTTL.String())
	}

	// The replica mesh (constructed; started once the catalog is in).
	var zmesh *mesh.Mesh
	var replica core.ReplicaSink = core.NopReplicaSink{}
	if opts.replicaPort > 0 {
		zmesh, err = mesh.New(mesh.Config{
			Bind: "tcp://*:" + strconv.Itoa(opts.replicaPort), Peers: opts.replicaPeers, NoSnapshot: opts.noReplicaSnapshot,
			Logger: logs.logger("kvselect::mesh"),
		})
		if err != nil {
			return fail(1, "replica sync", err)
		}
		replica = zmesh
		n.onStop("replica mesh", zmesh.Close)
	}

	// The NATS event plane (eventplane.go), around the ingress and mesh.
	plane.noSnapshot = opts.noReplicaSnapshot
	ep, ingress, replica, err := startEventPlane(n, plane, logs, &opts.core, ingress, replica)
	if err != nil {
		return fail(1, "event plane", err)
	}

	// The service and its HTTP front end.
	copts := core.Options{Ingress: ingress, Replica: replica, Logf: printf(logs.logger("kvselect::core"), slog.LevelWarn)}
	if remote != nil {
		copts.Primary = remote
	}
	if opts.randSeed != 0 {
		copts.Rand = newLockedRand(opts.randSeed)
	}
	if zmesh != nil && opts.core.SessionAffinity.TTL > 0 {
		// Session bindings replicate on the mesh, versioned with its
		// process id; peers' bindings are applied once Start runs.
		copts.Affinity, copts.WriterID = zmesh, zmesh.ProcessID()
	}
	if opts.core.SessionAffinity.TTL > 0 {
		ep.withAffinity(&copts) // and on the NATS plane
	}
	svc, err := core.New(opts.core, copts)
	if err != nil {
		return fail(2, "invalid configuration", err)
	}
	// Closed after the HTTP drain (pushed before it): requests already in
	// a handler finish against a live service.
	n.onStopDo("service", svc.Close)
	opts.http.Logger = logs.logger("kvselect::httpapi")
	if opts.http.Tokenizers, err = startTokenizers(log, opts.modelPaths); err != nil {
		return fail(2, "invalid configuration", err)
	}
	if zmesh != nil {
		opts.http.Peers = zmesh
	}
	var scrape *engineScrape // set below with --engine-metrics-interval, before the port is served
	if opts.engineMetrics > 0 {
		opts.http.EngineLoads = func(id uint64) (httpapi.EngineLoad, bool) { return scrape.load(id) }
	}
	srv, err := httpapi.New(svc, opts.http)
	if err != nil {
		return fail(2, "invalid configuration", err)
	}
	reg := srv.Registry()
	reg.Describe(buildDesc)
	reg.OnScrape(func(w io.Writer) { writeBuildInfo(w, build) })
	if zing != nil {
		reg.Describe(ingressDescs...)
		reg.OnScrape(func(w io.Writer) { writeIngressMetrics(w, zing.Stats()) })
	}
	if remote != nil {
		reg.Describe(remoteIndexDescs...)
		reg.OnScrape(func(w io.Writer) { writeRemoteIndexMetrics(w, remote.Stats()) })
	}

	// Recovery of the index from peers, before any worker registers.
	if len(opts.indexerPeers) > 0 && !recoverIndex(ctx, svc, opts.indexerPeers, logs.logger("kvselect::recovery")) {
		return n.stop(1)
	}
	// The workers file, when given, owns the catalog; its first version
	// is applied before serving (and before the mesh applies peers'
	// events, which need the workers).
	var members *membership
	if opts.workersFile != "" {
		if members, err = openMembership(svc, opts.workersFile, logs.logger("kvselect::workers_file")); err != nil {
			return fail(2, "--workers-file", err)
		}
		n.onStopDo("workers file", members.stop)
		reg.Describe(membershipDescs...)
		reg.OnScrape(func(w io.Writer) { writeMembershipMetrics(w, members.file.stats(), members.rec.Stats()) })
	}
	// The catalog bucket (--nats-catalog): mirrored from the workers
	// file, or the catalog's source.
	if err := ep.runCatalog(n, svc, members != nil); err != nil {
		return fail(2, "--nats-catalog", err)
	}
	if opts.engineMetrics > 0 {
		scrape = startEngineScrape(svc, opts.engineMetrics, false, logs.logger("kvselect::engines"))
		n.onStopDo("engine metrics", scrape.stop)
		reg.Describe(engineScrapeDescs...)
		reg.OnScrape(func(w io.Writer) { writeEngineScrapeMetrics(w, scrape) })
	}
	if zmesh != nil {
		reg.Describe(meshDescs...)
		reg.OnScrape(func(w io.Writer) { writeMeshMetrics(w, zmesh.Stats()) })
		if copts.Affinity != nil {
			zmesh.HandleAffinity(svc)
		}
		if err := zmesh.Start(svc); err != nil {
			return fail(1, "replica sync", err)
		}
		log.Info("replica sync publishing", "endpoint", zmesh.Endpoint(), "process_id", zmesh.ProcessID(), "peers", opts.replicaPeers)
	}

	if err := ep.attach(svc, reg); err != nil {
		return fail(1, "event plane", err)
	}

	// Background work, stopped after the HTTP drain (pushed before it):
	// the periodic sweep, affinity reaping, the workers file's polling.
	n.loop("sweep", func(ctx context.Context) { sweep(ctx, svc, core.DefaultSweepInterval) })
	if d := opts.core.SessionAffinity.ReapInterval(); d > 0 {
		n.every("affinity reaping", d, func(now time.Time) { svc.ReapAffinity(now) })
	}
	if members != nil {
		poll := time.NewTicker(workersFilePoll)
		n.onStopDo("workers file poll", poll.Stop)
		members.start(poll.C)
	}

	// Listeners: profiles, then the API.
	debug, err := n.serveDebug(opts.debugAddr, opts.debugExplicit)
	if err != nil {
		return fail(1, "--debug-addr (use --pprof=false to serve no profiles)", err)
	}
	if debug != nil {
		perf.SetContentionProfiling(opts.pprofMutexFraction, opts.pprofBlockRate)
	}
	addr, err := n.serveHTTP(srv, opts.host, opts.port)
	if err != nil {
		return fail(1, "listen", err)
	}
	scheme := "http"
	if opts.http.TLS != nil {
		scheme = "https"
	}
	log.Info("listening", "url", scheme+"://"+addr.String(), "max_connections", opts.http.MaxConnections, "rlimit_nofile", openFileLimit())
	// Popped just before the drain: requests waiting in a router queue
	// (or on a session another booking initializes) end now, as
	// shutting down, rather than hold it.
	n.onStopDo("router queue waits", svc.CancelWaits)

	if opts.demo > 0 {
		d, err := startDemo(svc, opts.demo, opts.demoBlockSize, "default", func(i int) string { return "demo://engine-" + strconv.Itoa(i+1) }, logs.logger("kvselect::demo"))
		if err != nil {
			return fail(1, "--demo", err)
		}
		demo = d
		log.Info("demo: simulated engines registered as workers 1..N; try: curl -s localhost:"+strconv.Itoa(int(opts.port))+"/ready", "engines", opts.demo)
	}
	if ready != nil {
		ready <- bound{http: addr.String(), debug: debug.addr()}
	}

	code := n.stop(n.wait(ctx))
	log.Info("stopped", "exit_code", code)
	return code
}

// startAttrs is the start-up line's effective configuration: every
// setting that decides behaviour, never a secret (with --auth-token-file
// only the fact that a token is required).
func startAttrs(o *serveOptions, b buildInfo) []any {
	c := o.core
	attrs := []any{
		"version", b.version, "go_version", b.goVersion,
		"host", o.host, "port", o.port, "tls", o.http.TLS != nil, "bearer_token_required", len(o.http.AuthToken) > 0,
		"debug_addr", o.debugAddr, "max_connections", o.http.MaxConnections, "max_request_body_bytes", o.http.MaxRequestBodySize,
		"kv_events", c.UseKVEvents, "index_shards", cmp.Or(c.IndexShards, radix.DefaultShards()), "kv_writers", cmp.Or(o.writers, zmqin.DefaultWriters()), "max_kv_listeners", c.MaxListeners,
		"selection_cache_ttl", c.SelectionCacheTTL.String(), "selection_cache_max_entries", c.SelectionCacheMaxEntries,
		"selection_cache_max_bytes", c.SelectionCacheMaxBytes,
		"max_reservations", c.MaxReservations, "max_reservation_bytes", c.MaxReservationBytes,
		"replica_sync_port", o.replicaPort, "replica_sync_peers", o.replicaPeers, "replica_snapshot", !o.noReplicaSnapshot,
		"indexer_peers", o.indexerPeers, "workers_file", o.workersFile, "demo_engines", o.demo,
		"disagg_order", c.Disagg.Order.String(), "disagg_prefill_failure", c.Disagg.PrefillFailure.String(),
		slog.Any("router", c.Sched),
	}
	if len(c.KVEndpointNetworks) > 0 {
		attrs = append(attrs, "kv_endpoint_networks", c.KVEndpointNetworks)
	}
	if o.remote.URL != "" {
		attrs = append(attrs, "remote_indexer_url", o.remote.URL, "remote_indexer_timeout", o.remote.Timeout.String(), "remote_indexer_max_conns", o.remote.MaxConns)
	}
	return attrs
}

// recoveryDelay is the reference's slow-joiner bias: a selector started with
// its peers gives them a second to come up before it asks for their dumps.
var recoveryDelay = time.Second

// recoverIndex rebuilds the KV index from the first peer whose /dump
// answers, before the service registers workers or serves; every peer
// failing starts empty with a warning (as the reference). It reports false
// only when ctx ended meanwhile.
func recoverIndex(ctx context.Context, svc *core.Service, peers []string, log *slog.Logger) bool {
	select {
	case <-ctx.Done():
		return false
	case <-time.After(recoveryDelay):
	}
	rec, err := httpapi.Recover(ctx, svc, peers, httpapi.DefaultRecoveryConfig())
	for _, f := range rec.Failures {
		log.Warn("recovery: peer failed", "failure", f)
	}
	svc.SetRecovery(core.Recovery{Peer: rec.Peer, Partitions: rec.Partitions, Events: rec.Events, FailedPeers: len(rec.Failures)})
	if err != nil {
		log.Warn("recovery: every peer failed; starting with an empty index")
		return ctx.Err() == nil
	}
	log.Info("recovery: index restored", "partitions", rec.Partitions, "events", rec.Events, "peer", rec.Peer)
	return true
}

// sweep calls svc.Sweep every interval, and svc.ExpireIndex every
// core.ApproxExpiryInterval when the service has expiring index entries,
// until ctx ends.
func sweep(ctx context.Context, svc *core.Service, interval time.Duration) {
	t := time.NewTicker(interval)
	defer t.Stop()
	var expire <-chan time.Time
	if svc.ExpiresIndex() {
		et := time.NewTicker(core.ApproxExpiryInterval)
		defer et.Stop()
		expire = et.C
	}
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-t.C:
			svc.Sweep(now)
		case now := <-expire:
			svc.ExpireIndex(now)
		}
	}
}
