package main

import (
	"cmp"
	"context"
	"io"
	"log/slog"
	"net"
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
)

// shutdownGrace bounds how long in-flight requests may take after a signal.
const shutdownGrace = 30 * time.Second

// bound is where a serve listens, sent on its ready channel: the API's
// address and the debug listener's ("" without one).
type bound struct {
	http, debug string
}

// httpLife is a host's HTTP server from Serve to the end of its drain.
type httpLife struct {
	srv    interface{ Shutdown(context.Context) error }
	served chan error // Serve's result
	log    *slog.Logger
	what   string // the host's name in log messages
}

// serveHTTP starts srv.Serve(ln) in a goroutine.
func serveHTTP(srv interface {
	Serve(net.Listener) error
	Shutdown(context.Context) error
}, ln net.Listener, log *slog.Logger, what string) *httpLife {
	h := &httpLife{srv: srv, served: make(chan error, 1), log: log, what: what}
	go func() { h.served <- srv.Serve(ln) }()
	return h
}

// wait blocks until ctx ends (exit code 0) or the server stops on its own
// (1, logged).
func (h *httpLife) wait(ctx context.Context) int {
	select {
	case <-ctx.Done():
		h.log.Info("shutting down")
		return 0
	case err := <-h.served:
		h.log.Error(h.what+": the HTTP server stopped", "err", err)
		return 1
	}
}

// drain shuts the server down within shutdownGrace (requests already in
// a handler finish, new ones get 503), runs then (nil: nothing) once the
// drain is over, and, when code is still 0, reads Serve's own result. It
// returns code, or 1 when the drain or Serve failed.
func (h *httpLife) drain(code int, then func()) int {
	shCtx, cancel := context.WithTimeout(context.Background(), shutdownGrace)
	defer cancel()
	if err := h.srv.Shutdown(shCtx); err != nil {
		h.log.Error("shutdown: the HTTP drain did not finish", "err", err)
		code = 1
	}
	if then != nil {
		then()
	}
	if code == 0 {
		if err := <-h.served; err != nil {
			h.log.Error(h.what+": the HTTP server stopped", "err", err)
			code = 1
		}
	}
	return code
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

// serve is the whole life of the service: parse, build configs, construct,
// start, wait for ctx, stop in reverse order. It returns the exit code.
// Logs go to stderr (logging.go). ready, when non-nil, receives the bound
// addresses once serving.
func serve(ctx context.Context, args []string, env func(string) (string, bool), stderr io.Writer, ready chan<- bound) int {
	// 1. Logging, flags and environment.
	lcfg := parseLogEnv(env)
	logs := newLogs(stderr, lcfg)
	log := logs.logger("kvselect")
	opts, err := parseServe(args, env, stderr)
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
	opts.http.Logger = logs.logger("kvselect::httpapi")
	// 2. Construct: the KV-event ingress, the service, the HTTP front end.
	var ingress core.Ingress = core.NopIngress{}
	var zing *zmqin.Ingress
	var remote *httpapi.RemoteIndex
	switch {
	case opts.remote.URL != "":
		// The standalone indexer listens to the workers; this process
		// listens to nothing.
		remote, err = httpapi.NewRemoteIndex(opts.remote)
		if err != nil {
			log.Error("serve: --remote-indexer-url", "err", err)
			return 2
		}
		defer remote.Close()
		log.Info("primary index: the standalone indexer; no KV-event listeners", "url", opts.remote.URL, "timeout", opts.remote.Timeout.String(), "max_conns", opts.remote.MaxConns)
	case opts.core.UseKVEvents:
		zing, err = zmqin.New(zmqin.Config{Logger: logs.logger("kvselect::zmqin"), Writers: opts.writers})
		if err != nil {
			log.Error("serve: KV-event ingress", "err", err)
			return 2
		}
		ingress = zing
	default:
		log.Info("KV events off: approximate index (bookings predict each worker's cache); workers need no kv_events endpoint", "ttl", opts.core.ApproxTTL.String())
	}
	var primary core.PrimaryIndex
	if remote != nil {
		primary = remote
	}
	var mesh *zmqin.Mesh
	var replica core.ReplicaSink = core.NopReplicaSink{}
	if opts.replicaPort > 0 {
		mesh, err = zmqin.NewMesh(zmqin.MeshConfig{
			Bind: "tcp://*:" + strconv.Itoa(opts.replicaPort), Peers: opts.replicaPeers, NoSnapshot: opts.noReplicaSnapshot,
			Logger: logs.logger("kvselect::mesh"),
		})
		if err != nil {
			log.Error("serve: replica sync", "err", err)
			_ = ingress.Close()
			return 1
		}
		replica = mesh
	}
	closeMesh := func() {
		if mesh != nil {
			_ = mesh.Close()
		}
	}
	copts := core.Options{Ingress: ingress, Replica: replica, Primary: primary, Logf: printf(logs.logger("kvselect::core"), slog.LevelWarn)}
	if opts.randSeed != 0 {
		copts.Rand = newLockedRand(opts.randSeed)
	}
	if mesh != nil && opts.core.SessionAffinity.TTL > 0 {
		// Session bindings replicate on the mesh, versioned with its
		// process id; peers' bindings are applied once Start runs.
		copts.Affinity, copts.WriterID = mesh, mesh.ProcessID()
	}
	svc, err := core.New(opts.core, copts)
	if err != nil {
		log.Error("serve: invalid configuration", "err", err)
		closeMesh()
		_ = ingress.Close()
		return 2
	}
	if mesh != nil {
		opts.http.Peers = mesh
	}
	srv, err := httpapi.New(svc, opts.http)
	if err != nil {
		log.Error("serve: invalid configuration", "err", err)
		closeMesh()
		_ = ingress.Close()
		return 2
	}
	srv.Registry().Describe(buildDesc)
	srv.Registry().OnScrape(func(w io.Writer) { writeBuildInfo(w, build) })
	if zing != nil {
		srv.Registry().Describe(ingressDescs...)
		srv.Registry().OnScrape(func(w io.Writer) { writeIngressMetrics(w, zing.Stats()) })
	}
	if remote != nil {
		srv.Registry().Describe(remoteIndexDescs...)
		srv.Registry().OnScrape(func(w io.Writer) { writeRemoteIndexMetrics(w, remote.Stats()) })
	}
	if len(opts.indexerPeers) > 0 {
		if !recoverIndex(ctx, svc, opts.indexerPeers, logs.logger("kvselect::recovery")) {
			closeMesh()
			_ = ingress.Close()
			return 1
		}
	}
	// The workers file, when given, owns the catalog; its first version
	// is applied before serving (and before the mesh applies peers'
	// events, which need the workers).
	var members *membership
	if opts.workersFile != "" {
		members, err = openMembership(svc, opts.workersFile, logs.logger("kvselect::workers_file"))
		if err != nil {
			log.Error("serve: --workers-file", "err", err)
			closeMesh()
			_ = ingress.Close()
			return 2
		}
		srv.Registry().Describe(membershipDescs...)
		srv.Registry().OnScrape(func(w io.Writer) { writeMembershipMetrics(w, members.file.stats(), members.rec.Stats()) })
	}
	if opts.engineMetrics > 0 {
		scrape := startEngineScrape(svc, opts.engineMetrics, logs.logger("kvselect::engines"))
		defer scrape.stop() // on every return: it only reads the catalog and sets adapters
		srv.Registry().Describe(engineScrapeDescs...)
		srv.Registry().OnScrape(func(w io.Writer) { writeEngineScrapeMetrics(w, scrape.sc.Stats()) })
	}
	if mesh != nil {
		srv.Registry().Describe(meshDescs...)
		srv.Registry().OnScrape(func(w io.Writer) { writeMeshMetrics(w, mesh.Stats()) })
		if copts.Affinity != nil {
			mesh.HandleAffinity(svc)
		}
		if err := mesh.Start(svc); err != nil {
			log.Error("serve: replica sync", "err", err)
			if members != nil {
				members.stop()
			}
			closeMesh()
			_ = ingress.Close()
			return 1
		}
		log.Info("replica sync publishing", "endpoint", mesh.Endpoint(), "process_id", mesh.ProcessID(), "peers", opts.replicaPeers)
	}

	// 3. Start: the debug listener, the API listener and server, the
	// periodic sweep, the workers file.
	var debug *debugListener
	if opts.debugAddr != "" {
		if debug, err = startDebug(opts.debugAddr, opts.debugExplicit, log); err != nil {
			log.Error("serve: --debug-addr (use --pprof=false to serve no profiles)", "err", err)
			if members != nil {
				members.stop()
			}
			closeMesh()
			_ = ingress.Close()
			return 1
		}
		perf.SetContentionProfiling(opts.pprofMutexFraction, opts.pprofBlockRate)
	}
	ln, err := net.Listen("tcp", net.JoinHostPort(opts.host, strconv.Itoa(int(opts.port))))
	if err != nil {
		log.Error("serve: listen", "err", err)
		debug.stop(log)
		if members != nil {
			members.stop()
		}
		closeMesh()
		_ = ingress.Close()
		return 1
	}
	scheme := "http"
	if opts.http.TLS != nil {
		scheme = "https"
	}
	log.Info("listening", "url", scheme+"://"+ln.Addr().String(), "max_connections", opts.http.MaxConnections, "rlimit_nofile", openFileLimit())
	life := serveHTTP(srv, ln, log, "serve")
	sweepDone := make(chan struct{})
	sweepCtx, stopSweep := context.WithCancel(context.Background())
	go func() {
		defer close(sweepDone)
		sweep(sweepCtx, svc, core.DefaultSweepInterval)
	}()
	reapDone := make(chan struct{})
	go func() {
		defer close(reapDone)
		if d := opts.core.SessionAffinity.ReapInterval(); d > 0 {
			reapAffinity(sweepCtx, svc, d)
		}
	}()
	var poll *time.Ticker
	if members != nil {
		poll = time.NewTicker(workersFilePoll)
		members.start(poll.C)
	}
	var demo *demoEngines
	if opts.demo > 0 {
		demo, err = startDemo(svc, opts.demo, opts.demoBlockSize, logs.logger("kvselect::demo"))
		if err != nil {
			log.Error("serve: --demo", "err", err)
			svc.Close()
			_ = srv.Shutdown(context.Background())
			debug.stop(log)
			stopSweep()
			<-sweepDone
			closeMesh()
			_ = ingress.Close()
			return 1
		}
		log.Info("demo: simulated engines registered as workers 1..N; try: curl -s localhost:"+strconv.Itoa(int(opts.port))+"/ready", "engines", opts.demo)
	}
	if ready != nil {
		ready <- bound{http: ln.Addr().String(), debug: debug.addr()}
	}

	// 4. Wait for a signal (or the server failing).
	code := life.wait(ctx)

	// 5. Stop in reverse order: drain HTTP (requests already in the
	// handler finish against a live service, new ones get 503), refuse
	// work that does not come over HTTP, stop the workers file (the
	// catalog stays as it is) and the sweep, close the listeners of the
	// ingress, then the demo engines and the debug listener.
	//
	// Requests waiting in a router queue (or on a session another booking
	// initializes) end now, as shutting down, rather than hold the drain.
	svc.CancelWaits()
	code = life.drain(code, svc.Close)
	if members != nil {
		poll.Stop()
		members.stop()
	}
	stopSweep()
	<-sweepDone
	<-reapDone
	closeMesh()
	if err := ingress.Close(); err != nil {
		log.Error("shutdown: KV-event ingress", "err", err)
		code = 1
	}
	if demo != nil {
		demo.Close()
	}
	debug.stop(log)
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

// debugListener is the --debug-addr listener and its server.
type debugListener struct {
	ln   net.Listener
	srv  *perf.DebugServer
	done chan error
}

// startDebug serves /debug/pprof on addr; a non-loopback address is
// logged as a warning. The listener is an extra, not the service: when
// addr is the flag's default (explicit false) and cannot be bound, as when
// a second kvselect runs on the host, it binds a free port on the same
// host instead and says so in one warning naming the flag. Only an address
// the user gave that cannot be bound is an error.
func startDebug(addr string, explicit bool, log *slog.Logger) (*debugListener, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil && !explicit {
		host, _, _ := net.SplitHostPort(addr)
		var err2 error
		if ln, err2 = net.Listen("tcp", net.JoinHostPort(host, "0")); err2 != nil {
			return nil, err
		}
		log.Warn("the default debug address is taken (another process on this host?); serving /debug/pprof on a free port instead (--debug-addr chooses one, --pprof=false serves none)",
			"default", addr, "addr", ln.Addr().String(), "err", err)
		err = nil
	}
	if err != nil {
		return nil, err
	}
	d := &debugListener{ln: ln, srv: perf.NewDebugServer(printf(log, slog.LevelWarn)), done: make(chan error, 1)}
	go func() { d.done <- d.srv.Serve(ln) }()
	if ip := ln.Addr().(*net.TCPAddr).IP; !ip.IsLoopback() {
		log.Warn("the debug listener is not on loopback: whoever reaches it can profile this process", "addr", ln.Addr().String())
	}
	log.Info("serving /debug/pprof", "url", "http://"+ln.Addr().String()+perf.PprofPrefix)
	return d, nil
}

// addr is the bound address, "" for none.
func (d *debugListener) addr() string {
	if d == nil {
		return ""
	}
	return d.ln.Addr().String()
}

// stop shuts the debug server down, waiting a few seconds at most for a
// profile in progress.
func (d *debugListener) stop(log *slog.Logger) {
	if d == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := d.srv.Shutdown(ctx); err != nil {
		log.Warn("shutdown: debug listener", "err", err)
	}
	<-d.done
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

// reapAffinity calls svc.ReapAffinity every interval until ctx ends.
func reapAffinity(ctx context.Context, svc *core.Service, interval time.Duration) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-t.C:
			svc.ReapAffinity(now)
		}
	}
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
