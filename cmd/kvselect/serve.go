package main

import (
	"context"
	"io"
	"log"
	"net"
	"os"
	"os/signal"
	"strconv"
	"syscall"
	"time"

	"github.com/kvselect/kvselect/core"
	"github.com/kvselect/kvselect/httpapi"
	"github.com/kvselect/kvselect/perf"
	"github.com/kvselect/kvselect/zmqin"
)

// shutdownGrace bounds how long in-flight requests may take after a signal.
const shutdownGrace = 30 * time.Second

// serveMain runs `kvselect serve` until SIGINT or SIGTERM.
func serveMain(args []string) int {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	return serve(ctx, args, os.LookupEnv, os.Stderr, nil)
}

// serve is the whole life of the service: parse, build configs, construct,
// start, wait for ctx, stop in reverse order. It returns the exit code.
// ready, when non-nil, receives the bound HTTP address once serving.
func serve(ctx context.Context, args []string, env func(string) (string, bool), stderr io.Writer, ready chan<- string) int {
	logger := log.New(stderr, "kvselect: ", log.LstdFlags|log.Lmsgprefix)

	// 1. Flags and environment.
	opts, err := parseServe(args, env, stderr)
	if err != nil {
		logger.Printf("serve: %v", err)
		return 2
	}
	for _, s := range opts.inactive {
		logger.Printf("accepted but not yet active: %s", s)
	}
	for _, s := range opts.warnings {
		logger.Printf("warning: %s", s)
	}
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
			logger.Printf("serve: %v", err)
			return 2
		}
		defer remote.Close()
		logger.Printf("primary index: the standalone indexer at %s (deadline %v per call, at most %d connections); no KV-event listeners", opts.remote.URL, opts.remote.Timeout, opts.remote.MaxConns)
	case opts.core.UseKVEvents:
		zing, err = zmqin.New(zmqin.Config{})
		if err != nil {
			logger.Printf("serve: %v", err)
			return 2
		}
		ingress = zing
	default:
		logger.Printf("KV events off: approximate index (bookings predict each worker's cache for %v); workers need no kv_events endpoint", opts.core.ApproxTTL)
	}
	var primary core.PrimaryIndex
	if remote != nil {
		primary = remote
	}
	var mesh *zmqin.Mesh
	var replica core.ReplicaSink = core.NopReplicaSink{}
	if opts.replicaPort > 0 {
		mesh, err = zmqin.NewMesh(zmqin.MeshConfig{Bind: "tcp://*:" + strconv.Itoa(opts.replicaPort), Peers: opts.replicaPeers, NoSnapshot: opts.noReplicaSnapshot})
		if err != nil {
			logger.Printf("serve: replica sync: %v", err)
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
	copts := core.Options{Ingress: ingress, Replica: replica, Primary: primary, Logf: logger.Printf}
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
		logger.Printf("serve: %v", err)
		closeMesh()
		_ = ingress.Close()
		return 2
	}
	opts.http.Logf = logger.Printf
	if mesh != nil {
		opts.http.Peers = mesh
	}
	srv, err := httpapi.New(svc, opts.http)
	if err != nil {
		logger.Printf("serve: %v", err)
		closeMesh()
		_ = ingress.Close()
		return 2
	}
	if zing != nil {
		srv.Registry().OnScrape(func(w io.Writer) { writeIngressMetrics(w, zing.Stats()) })
	}
	if remote != nil {
		srv.Registry().OnScrape(func(w io.Writer) { writeRemoteIndexMetrics(w, remote.Stats()) })
	}
	if opts.http.Pprof {
		perf.SetContentionProfiling(opts.pprofMutexFraction, opts.pprofBlockRate)
	}
	if len(opts.indexerPeers) > 0 {
		if !recoverIndex(ctx, svc, opts.indexerPeers, logger.Printf) {
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
		members, err = openMembership(svc, opts.workersFile, logger.Printf)
		if err != nil {
			logger.Printf("serve: %v", err)
			closeMesh()
			_ = ingress.Close()
			return 2
		}
		srv.Registry().OnScrape(func(w io.Writer) { writeMembershipMetrics(w, members.file.stats(), members.rec.Stats()) })
	}
	if mesh != nil {
		srv.Registry().OnScrape(func(w io.Writer) { writeMeshMetrics(w, mesh.Stats()) })
		if copts.Affinity != nil {
			mesh.HandleAffinity(svc)
		}
		if err := mesh.Start(svc); err != nil {
			logger.Printf("serve: replica sync: %v", err)
			if members != nil {
				members.stop()
			}
			closeMesh()
			_ = ingress.Close()
			return 1
		}
		logger.Printf("replica sync: publishing on %s as process %d; peers %v", mesh.Endpoint(), mesh.ProcessID(), opts.replicaPeers)
	}

	// 3. Start: listener, HTTP server, periodic sweep, workers file.
	ln, err := net.Listen("tcp", net.JoinHostPort(opts.host, strconv.Itoa(int(opts.port))))
	if err != nil {
		logger.Printf("serve: %v", err)
		if members != nil {
			members.stop()
		}
		closeMesh()
		_ = ingress.Close()
		return 1
	}
	scheme, auth := "http", ""
	if opts.http.TLS != nil {
		scheme = "https"
	}
	if len(opts.http.AuthToken) > 0 {
		auth = "; bearer token required"
	}
	logger.Printf("listening on %s://%s (at most %d connections; RLIMIT_NOFILE %d%s)", scheme, ln.Addr(), opts.http.MaxConnections, openFileLimit(), auth)
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
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
		demo, err = startDemo(svc, opts.demo, opts.demoBlockSize, logger.Printf)
		if err != nil {
			logger.Printf("demo: %v", err)
			svc.Close()
			_ = srv.Shutdown(context.Background())
			stopSweep()
			<-sweepDone
			closeMesh()
			_ = ingress.Close()
			return 1
		}
		logger.Printf("demo: %d simulated engines registered as workers 1..%d; try: curl -s localhost:%d/ready", opts.demo, opts.demo, opts.port)
	}
	if ready != nil {
		ready <- ln.Addr().String()
	}

	// 4. Wait for a signal (or the server failing).
	code := 0
	select {
	case <-ctx.Done():
		logger.Printf("shutting down")
	case err := <-served:
		logger.Printf("serve: %v", err)
		code = 1
	}

	// 5. Stop in reverse order: drain HTTP (requests already in the
	// handler finish against a live service, new ones get 503), refuse
	// work that does not come over HTTP, stop the workers file (the
	// catalog stays as it is) and the sweep, close the listeners of the
	// ingress, then the demo engines.
	shCtx, cancel := context.WithTimeout(context.Background(), shutdownGrace)
	defer cancel()
	// Requests waiting in a router queue (or on a session another booking
	// initializes) end now, as shutting down, rather than hold the drain.
	svc.CancelWaits()
	if err := srv.Shutdown(shCtx); err != nil {
		logger.Printf("shutdown: %v", err)
		code = 1
	}
	svc.Close()
	if code == 0 {
		if err := <-served; err != nil {
			logger.Printf("serve: %v", err)
			code = 1
		}
	}
	if members != nil {
		poll.Stop()
		members.stop()
	}
	stopSweep()
	<-sweepDone
	<-reapDone
	closeMesh()
	if err := ingress.Close(); err != nil {
		logger.Printf("ingress: %v", err)
		code = 1
	}
	if demo != nil {
		demo.Close()
	}
	logger.Printf("stopped")
	return code
}

// recoveryDelay is the reference's slow-joiner bias: a selector started with
// its peers gives them a second to come up before it asks for their dumps.
var recoveryDelay = time.Second

// recoverIndex rebuilds the KV index from the first peer whose /dump
// answers, before the service registers workers or serves; every peer
// failing starts empty with a warning (as the reference). It reports false
// only when ctx ended meanwhile.
func recoverIndex(ctx context.Context, svc *core.Service, peers []string, logf func(string, ...any)) bool {
	select {
	case <-ctx.Done():
		return false
	case <-time.After(recoveryDelay):
	}
	rec, err := httpapi.Recover(ctx, svc, peers, httpapi.DefaultRecoveryConfig())
	for _, f := range rec.Failures {
		logf("recovery: peer failed: %s", f)
	}
	svc.SetRecovery(core.Recovery{Peer: rec.Peer, Partitions: rec.Partitions, Events: rec.Events, FailedPeers: len(rec.Failures)})
	if err != nil {
		logf("recovery: every peer failed; starting with an empty index")
		return ctx.Err() == nil
	}
	logf("recovery: %d partitions, %d events from %s", rec.Partitions, rec.Events, rec.Peer)
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
