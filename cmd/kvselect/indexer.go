package main

import (
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/kvselect/kvselect/core"
	"github.com/kvselect/kvselect/httpapi"
	"github.com/kvselect/kvselect/radix"
	"github.com/kvselect/kvselect/zmqin"
)

// indexerOptions is everything `kvselect indexer` reads: the flags of
// `python -m dynamo.indexer` (KvIndexerCli in
// ai-dynamo/dynamo:lib/bindings/python/rust/llm/kv.rs) and its environment.
type indexerOptions struct {
	host          string
	port          uint16
	blockSize     uint32
	workers       []indexerWorker
	model, group  string
	peers         []string
	minWorkers    int
	core          core.IndexerConfig
	http          httpapi.Config
	inactive      []string
	hasBlockSize  bool
	workersString string
	// debugAddr is where /debug/pprof is served, "" with --pprof=false;
	// debugExplicit is whether --debug-addr was given (startDebug).
	debugAddr     string
	debugExplicit bool
	// writers is the KV-event writer count (--threads; 0: zmqin's).
	writers int
	// accessLog is the --access-log path ("" none), traceHeader its
	// trace-id header, accessLocal its local-time switch.
	accessLog, traceHeader string
	accessLocal            bool
	// modelPaths are the --model-path entries (serve's flag).
	modelPaths []modelPath
}

// indexerWorker is one --workers entry.
type indexerWorker struct {
	id       uint64
	rank     uint32
	endpoint string
}

func parseIndexer(args []string, env func(string) (string, bool), stderr io.Writer) (*indexerOptions, error) {
	o := &indexerOptions{core: core.DefaultIndexerConfig(), http: httpapi.DefaultConfig()}
	fs := flag.NewFlagSet("kvselect indexer", flag.ContinueOnError)
	fs.SetOutput(stderr)
	port := fs.Uint("port", 8090, "HTTP port")
	fs.StringVar(&o.host, "host", "0.0.0.0", "HTTP bind address")
	blockSize := fs.Uint("block-size", 0, "KV block size of the --workers (required with --workers)")
	threads := fs.Int("threads", 4, "KV indexer threads: when given, N goroutines apply KV events over N index shards; not given, kvselect's own sizing (see serve --threads)")
	fs.IntVar(&o.core.IndexMaxBlocksPerRank, "index-max-blocks-per-rank", 0, "blocks one worker rank may hold in the index, all tiers together; a store past it clears the rank (0: 8 Mi)")
	fs.StringVar(&o.workersString, "workers", "", `initial workers: "id[:dp_rank]=zmq_endpoint,..." (with --event-plane nats an empty endpoint, "id[:dp_rank]=", is a rank fed by its kv-events subject)`)
	fs.StringVar(&o.model, "model-name", "default", "model name of the --workers")
	fs.StringVar(&o.group, "routing-group", "default", "routing group of the --workers")
	fs.String("tenant-id", "", "legacy, ignored")
	peers := fs.String("peers", "", "comma-separated HTTP base URLs of indexers or selectors to recover the index from at start-up (GET {url}/dump); also the initial /peers")
	fs.StringVar(&o.accessLog, "access-log", "", "access log file: one JSON line per request (ts, trace_id, method, path, model, status, duration_ms), appended; POST /reopen_logs reopens it after a rotation")
	fs.StringVar(&o.traceHeader, "trace-id-header", "x-trace-id", "header whose value is the access log's trace_id")
	fs.BoolVar(&o.accessLocal, "access-log-local-time", false, "access log timestamps in local time (default UTC)")
	pprofOn := fs.Bool("pprof", true, "serve /debug/pprof/* on --debug-addr (false: no debug listener)")
	fs.StringVar(&o.debugAddr, "debug-addr", "127.0.0.1:6061", "host:port of the debug listener serving /debug/pprof/*, apart from the API's port (serve's default is 6060, so both fit on one host)")
	fs.IntVar(&o.core.MaxListeners, "max-kv-listeners", o.core.MaxListeners, "registered ranks (one KV-event listener each) at most; past it /register answers 409")
	fs.IntVar(&o.core.MaxPeers, "max-peers", o.core.MaxPeers, "registered peer URLs at most; past it /register_peer answers 503")
	networks := fs.String("kv-endpoint-networks", "", "comma-separated CIDRs the registered ZMQ endpoints must be inside (empty: any, as the reference)")
	addModelPathFlag(fs, &o.modelPaths, "POST /tokenize and /detokenize, and prompt in place of token_ids on POST /query")
	maxConns := fs.Int("max-connections", -1, "cap on open HTTP connections (0 = no cap); default as serve's")
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("unexpected arguments: %q", fs.Args())
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	if *port > math.MaxUint16 {
		return nil, fmt.Errorf("--port %d out of range", *port)
	}
	o.port = uint16(*port)
	if *blockSize > math.MaxUint32 {
		return nil, fmt.Errorf("--block-size %d out of range", *blockSize)
	}
	o.blockSize, o.hasBlockSize = uint32(*blockSize), set["block-size"]
	if *threads < 1 || *threads > 1024 {
		return nil, fmt.Errorf("--threads must be in [1, 1024], got %d", *threads)
	}
	if set["threads"] {
		o.core.IndexShards, o.writers = *threads, *threads // as serve's --threads
	}
	if o.workersString != "" {
		if !o.hasBlockSize {
			return nil, errors.New("--block-size is required when --workers is specified")
		}
		ws, err := parseIndexerWorkers(o.workersString)
		if err != nil {
			return nil, err
		}
		o.workers = ws
	}
	for _, p := range splitList(*peers) {
		if u, err := url.Parse(p); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return nil, fmt.Errorf("--peers: %q is not an http(s) base URL", p)
		}
		o.peers = append(o.peers, p)
	}
	if *networks != "" {
		o.core.KVEndpointNetworks = []netip.Prefix{}
		for _, n := range splitList(*networks) {
			p, err := netip.ParsePrefix(n)
			if err != nil {
				return nil, fmt.Errorf("--kv-endpoint-networks: %q is not a CIDR: %v", n, err)
			}
			o.core.KVEndpointNetworks = append(o.core.KVEndpointNetworks, p.Masked())
		}
	}
	switch {
	case !set["max-connections"]:
		o.http.MaxConnections = defaultMaxConnections(openFileLimit())
	case *maxConns < 0:
		return nil, fmt.Errorf("--max-connections must be >= 0, got %d", *maxConns)
	default:
		o.http.MaxConnections = *maxConns
	}
	if o.accessLog == "" && (set["trace-id-header"] || set["access-log-local-time"]) {
		// The reference ignores them too; said once at start-up.
		o.inactive = append(o.inactive, "--trace-id-header/--access-log-local-time (no --access-log: there is no access log)")
	}
	if s, ok := env("DYN_ROUTER_MIN_INITIAL_WORKERS"); ok {
		n, err := strconv.ParseUint(strings.TrimSpace(s), 10, 31)
		if err != nil {
			return nil, fmt.Errorf("DYN_ROUTER_MIN_INITIAL_WORKERS must be a non-negative integer, got %q", s)
		}
		o.minWorkers = int(n)
	}
	if s, ok := env("DYN_KV_INDEXER_TEST_ENDPOINTS"); ok && strings.TrimSpace(s) != "" {
		b, err := parseBool(s)
		if err != nil {
			return nil, fmt.Errorf("DYN_KV_INDEXER_TEST_ENDPOINTS: %v", err)
		}
		o.http.IndexerTestEndpoints = b
	}
	o.debugExplicit = set["debug-addr"]
	if !*pprofOn {
		o.debugAddr = ""
	} else if _, _, err := net.SplitHostPort(o.debugAddr); err != nil {
		return nil, fmt.Errorf("--debug-addr %q: want host:port (e.g. 127.0.0.1:6061): %v", o.debugAddr, err)
	}
	if err := o.core.Validate(); err != nil {
		return nil, err
	}
	if err := o.http.Validate(); err != nil {
		return nil, err
	}
	return o, nil
}

// parseIndexerWorkers reads --workers as the reference's parse_workers
// (ai-dynamo/dynamo:lib/kv-router/src/services/indexer/mod.rs), texts
// included.
func parseIndexerWorkers(s string) ([]indexerWorker, error) {
	var out []indexerWorker
	for _, entry := range strings.Split(s, ",") {
		if strings.TrimSpace(entry) == "" {
			continue
		}
		idPart, addr, ok := strings.Cut(entry, "=")
		if !ok {
			return nil, fmt.Errorf("invalid worker entry `%s`; expected worker_id[:dp_rank]=endpoint", entry)
		}
		idPart = strings.TrimSpace(idPart)
		idStr, rankStr, hasRank := strings.Cut(idPart, ":")
		id, err := strconv.ParseUint(idStr, 10, 64)
		if err != nil {
			return nil, fmt.Errorf("invalid worker id in `%s`: %v", entry, err)
		}
		var rank uint64
		if hasRank {
			if rank, err = strconv.ParseUint(rankStr, 10, 32); err != nil {
				return nil, fmt.Errorf("invalid dp_rank in `%s`: %v", entry, err)
			}
		}
		ep := strings.TrimSpace(addr)
		// An empty endpoint is a rank fed by the event plane; without
		// --event-plane nats core.Indexer.Register refuses it.
		if _, err := core.ParseZMQEndpoint(ep); err != nil && ep != "" {
			return nil, fmt.Errorf("invalid ZMQ endpoint `%s`: %v", ep, err)
		}
		out = append(out, indexerWorker{id: id, rank: uint32(rank), endpoint: ep})
	}
	return out, nil
}

// runIndexer is the standalone indexer's whole life, in serve's order:
// parse, construct, recover from --peers, register --workers, wait for
// DYN_ROUTER_MIN_INITIAL_WORKERS, serve until ctx ends, drain, close the
// ingress. Logs go to stderr as serve's (logging.go). ready, when non-nil,
// receives the bound addresses.
func runIndexer(ctx context.Context, args []string, env func(string) (string, bool), stderr io.Writer, ready chan<- bound) int {
	lcfg := parseLogEnv(env)
	logs := newLogs(stderr, lcfg)
	log := logs.logger("kvselect")
	args, plane, err := parseEventPlane(args, env, stderr)
	if err == nil {
		err = plane.forIndexer()
	}
	if err != nil {
		log.Error("indexer: invalid event-plane configuration", "err", err)
		return 2
	}
	opts, err := parseIndexer(args, env, stderr)
	if errors.Is(err, flag.ErrHelp) {
		writeEventPlaneUsage(stderr, env) // after the indexer's own usage
		return 0
	}
	if err != nil {
		log.Error("indexer: invalid configuration", "err", err)
		return 2
	}
	build := readBuildInfo()
	log.Info("starting the indexer", "version", build.version, "go_version", build.goVersion, "host", opts.host, "port", opts.port,
		"debug_addr", opts.debugAddr, "block_size", opts.blockSize, "workers", len(opts.workers), "model_name", opts.model,
		"routing_group", opts.group, "peers", opts.peers, "min_initial_workers", opts.minWorkers, "index_shards", cmp.Or(opts.core.IndexShards, radix.DefaultShards()), "kv_writers", cmp.Or(opts.writers, zmqin.DefaultWriters()),
		"max_kv_listeners", opts.core.MaxListeners, "max_peers", opts.core.MaxPeers, "max_connections", opts.http.MaxConnections)
	warnStartup(log, lcfg, opts.inactive)
	n := newNode("indexer", log)
	fail := func(code int, what string, err error) int {
		log.Error("indexer: "+what, "err", err)
		return n.stop(code)
	}
	zing, err := zmqin.New(zmqin.Config{Logger: logs.logger("kvselect::zmqin"), Writers: opts.writers})
	if err != nil {
		return fail(2, "KV-event ingress", err)
	}
	n.onStop("KV-event ingress", zing.Close)
	// The NATS event plane (indexer_eventplane.go), around the ZMQ ingress.
	ep, ingress, err := startIndexerPlane(n, plane, logs, &opts.core, zing)
	if err != nil {
		return fail(1, "event plane", err)
	}
	ix, err := core.NewIndexer(opts.core, ingress)
	if err != nil {
		return fail(2, "invalid configuration", err)
	}
	opts.http.Logger = logs.logger("kvselect::httpapi")
	if opts.accessLog != "" {
		al, err := httpapi.NewAccessLog(opts.accessLog, opts.traceHeader, opts.accessLocal)
		if err != nil {
			return fail(2, "--access-log", err)
		}
		n.onStop("access log", al.Close) // after the drain: the last requests are logged
		opts.http.AccessLog = al
	}
	if opts.http.Tokenizers, err = startTokenizers(log, opts.modelPaths); err != nil {
		return fail(2, "invalid configuration", err)
	}
	if opts.http.IndexerTestEndpoints {
		log.Warn("Mounting listener-control test endpoints (/test/pause_listener, /test/resume_listener). These manipulate worker listener state and must never be enabled in production.")
	}
	srv, err := httpapi.NewIndexer(ix, opts.http)
	if err != nil {
		return fail(2, "invalid configuration", err)
	}
	reg := srv.Registry()
	reg.Describe(buildDesc)
	reg.OnScrape(func(w io.Writer) { writeBuildInfo(w, build) })
	reg.Describe(ingressDescs...)
	reg.OnScrape(func(w io.Writer) { writeIngressMetrics(w, zing.Stats()) })

	// Recovery before the first listener, so that live events follow the
	// recovered state (the reference gates its listeners on recovery).
	if len(opts.peers) > 0 && !recoverIndexer(ctx, ix, opts.peers, logs.logger("kvselect::recovery")) {
		return n.stop(1)
	}
	if err := ep.attachIndexer(reg); err != nil {
		return fail(1, "event plane", err)
	}
	for _, p := range opts.peers {
		if err := ix.RegisterPeer(p); err != nil {
			log.Warn("--peers: peer not registered", "err", err)
		}
	}
	for _, w := range opts.workers {
		log.Info("registering an initial worker", "worker_id", w.id, "dp_rank", w.rank, "endpoint", w.endpoint)
		if err := ix.Register(&core.IndexerRegistration{InstanceID: w.id, DPRank: w.rank, Endpoint: w.endpoint, ModelName: opts.model, RoutingGroup: opts.group, BlockSize: opts.blockSize}); err != nil {
			return fail(2, "--workers", err)
		}
	}
	if want := opts.minWorkers; want > 0 && ix.Stats().Workers < want {
		// Only --workers register before HTTP is bound: the reference
		// waits here until shut down.
		log.Warn("waiting for indexer workers (DYN_ROUTER_MIN_INITIAL_WORKERS); only --workers can satisfy it", "want", want)
		<-ctx.Done()
		log.Error("shutdown triggered before enough indexer workers appeared", "want", want)
		return n.stop(1)
	}

	debug, err := n.serveDebug(opts.debugAddr, opts.debugExplicit)
	if err != nil {
		return fail(1, "--debug-addr (use --pprof=false to serve no profiles)", err)
	}
	addr, err := n.serveHTTP(srv, opts.host, opts.port)
	if err != nil {
		return fail(1, "listen", err)
	}
	log.Info("listening", "url", "http://"+addr.String(), "workers", ix.Stats().Workers, "peers", len(opts.peers))
	if ready != nil {
		ready <- bound{http: addr.String(), debug: debug.addr()}
	}
	code := n.stop(n.wait(ctx))
	log.Info("stopped", "exit_code", code)
	return code
}

// recoverIndexer is recoverIndex for the indexer: the same delay and the
// same recovery client (httpapi.Recover). It reports false only when ctx
// ended meanwhile.
func recoverIndexer(ctx context.Context, ix *core.Indexer, peers []string, log *slog.Logger) bool {
	select {
	case <-ctx.Done():
		return false
	case <-time.After(recoveryDelay):
	}
	rec, err := httpapi.Recover(ctx, ix, peers, httpapi.DefaultRecoveryConfig())
	for _, f := range rec.Failures {
		log.Warn("recovery: peer failed", "failure", f)
	}
	if err != nil {
		log.Warn("recovery: no reachable peers, starting with empty state")
		return ctx.Err() == nil
	}
	log.Info("recovery: index restored", "partitions", rec.Partitions, "events", rec.Events, "peer", rec.Peer)
	return true
}
