package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/kvselect/kvselect/core"
	"github.com/kvselect/kvselect/httpapi"
	"github.com/kvselect/kvselect/httpapi/epp"
	"github.com/kvselect/kvselect/httpapi/kube"
	"github.com/kvselect/kvselect/perf"
	"github.com/kvselect/kvselect/zmqin"
	"github.com/kvselect/kvselect/zmqin/mesh"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/health"
)

// `kvselect epp`: the Gateway API Inference Extension's endpoint picker
// (httpapi/epp) over the same core as serve. GIE's flag names and ports
// (llm-d/llm-d-router:pkg/epp/server/options.go: --grpc-port 9002,
// --grpc-health-port 9003, --metrics-port 9090, --pool-name,
// --pool-namespace) and the environment of Dynamo's standalone EPP
// (ai-dynamo/dynamo:deploy/inference-gateway/ext-proc/src/epp_standalone_config.rs),
// a flag beating its variable. Workers come from Kubernetes (an
// InferencePool, a second one for prefill, or --endpoint-selector;
// httpapi/kube), each pod's KV-event and replay endpoints derived from
// its IP and the pod-derivation settings (KV-event port and stride,
// replay port, data-parallel size, totals), or from --workers-file off
// a cluster, where those settings are reported as without effect.

// eppOptions is everything `kvselect epp` reads.
type eppOptions struct {
	host                              string
	grpcPort, healthPort, metricsPort uint16
	prefillPool                       string
	core                              core.Config
	epp                               epp.Config
	modelPaths                        []modelPath
	workersFile                       string
	// replicaPort and replicaPeers are the replica mesh (serve's flags):
	// EPP replicas share their bookings, so any of them can take any
	// stream.
	replicaPort  int
	replicaPeers []string
	// secure, certPath and certReload are GIE's --secure-serving,
	// --cert-path and --enable-cert-reload: TLS on the ext_proc port
	// (epptls.go).
	secure        bool
	certPath      string
	certReload    bool
	engineMetrics time.Duration
	debugAddr     string
	debugExplicit bool
	// kube is Kubernetes discovery's configuration (httpapi/kube): on
	// when it names a pool or an endpoint selector.
	kube     kube.Config
	kubeOn   bool
	kvTopic  string
	inactive []string
	// demo is --demo: N simulated engines registered as the workers.
	demo, demoBlockSize int
}

// eppHealthPoll is how often gRPC health re-reads Kubernetes discovery's
// readiness.
const eppHealthPoll = 250 * time.Millisecond

// eppEnv names the environment variable behind each flag of the EPP's
// own (Dynamo's); Kubernetes discovery's (pool, namespace, selector, KV
// event and replay ports, data-parallel size) are httpapi/kube's, with
// their variables.
var eppEnv = map[string][]string{
	"prefill-pool-name":         {"DYN_EPP_PREFILL_INFERENCE_POOL_NAME"},
	"model-name":                {"DYN_MODEL_NAME"},
	"block-size":                {"DYN_KV_CACHE_BLOCK_SIZE"},
	"kv-event-topic":            {"DYN_EPP_KV_EVENT_TOPIC"},
	"total-kv-blocks":           {"DYN_EPP_TOTAL_KV_BLOCKS"},
	"max-num-batched-tokens":    {"DYN_EPP_MAX_NUM_BATCHED_TOKENS"},
	"session-affinity-ttl-secs": {"DYN_EPP_SESSION_AFFINITY_TTL_SECS"},
	"session-affinity-mode":     {"DYN_EPP_SESSION_AFFINITY_MODE"},
	"metrics-port":              {"DYN_EPP_METRICS_PORT"},
}

func parseEpp(args []string, env func(string) (string, bool), stderr io.Writer) (*eppOptions, error) {
	if m, ok := env("DYN_EPP_MODE"); ok && strings.TrimSpace(m) != "" && strings.TrimSpace(m) != "standalone" {
		return nil, fmt.Errorf("DYN_EPP_MODE=%q: kvselect epp is the standalone mode (standalone or unset)", m)
	}
	o := &eppOptions{core: core.DefaultConfig()}
	fs := flag.NewFlagSet("kvselect epp", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&o.host, "host", "0.0.0.0", "bind address of the gRPC and metrics ports")
	grpcPort := fs.Uint("grpc-port", 9002, "ext_proc gRPC port (GIE's)")
	healthPort := fs.Uint("grpc-health-port", 9003, "grpc.health.v1 port (GIE's)")
	metricsPort := fs.Uint("metrics-port", 9090, "HTTP port of /metrics and the selector's read-only routes (/health, /ready, /loads, GET /workers, /overlap_scores, /openapi.json); no write route")
	fs.StringVar(&o.prefillPool, "prefill-pool-name", "", "InferencePool of the prefill workers (DYN_EPP_PREFILL_INFERENCE_POOL_NAME): disaggregated; with Kubernetes discovery --pool-name is then the decode pool, and each pool's workers get its routing group (prefill, decode); with --workers-file the records' routing groups say it")
	fs.StringVar(&o.epp.ModelName, "model-name", "", "the model every pick targets (DYN_MODEL_NAME); empty: the body's model")
	blockSize := fs.Uint("block-size", 16, "KV block size: output blocks of bookings whose worker reports none (DYN_KV_CACHE_BLOCK_SIZE)")
	o.kube = kube.DefaultConfig()
	if err := kube.RegisterFlags(fs, env, &o.kube); err != nil {
		return nil, err
	}
	fs.StringVar(&o.kvTopic, "kv-event-topic", "", "KV-event topic (DYN_EPP_KV_EVENT_TOPIC): accepted; the engines' ZMQ topic is not filtered on")
	fs.Uint64Var(&o.kube.TotalKVBlocks, "total-kv-blocks", 0, "KV blocks of every discovered worker, 0 unknown (DYN_EPP_TOTAL_KV_BLOCKS; Kubernetes discovery)")
	fs.Uint64Var(&o.kube.MaxNumBatchedTokens, "max-num-batched-tokens", 0, "max batched tokens of every discovered worker, 0 unknown (DYN_EPP_MAX_NUM_BATCHED_TOKENS; Kubernetes discovery)")
	fs.BoolVar(&o.secure, "secure-serving", true, "serve ext_proc over TLS, as GIE's EPP does by default (false: plaintext h2c); the health port stays plaintext")
	fs.StringVar(&o.certPath, "cert-path", "", "directory of the ext_proc port's tls.crt and tls.key (default: a self-signed certificate made at start-up)")
	fs.BoolVar(&o.certReload, "enable-cert-reload", false, "reload --cert-path's tls.crt and tls.key when they change (read every second): new TLS handshakes use the new pair without a restart; a pair that does not load is logged and counted, and the previous one keeps serving")
	replicaPort := fs.Int("replica-sync-port", 0, "ZMQ PUB port of the replica mesh, as serve's: EPP replicas share their bookings (and session bindings) and catch up on join")
	replicaPeers := fs.String("replica-sync-peers", "", "comma-separated ZMQ endpoints of the other EPP replicas' --replica-sync-port; requires --replica-sync-port")
	ttl := fs.Float64("session-affinity-ttl-secs", 0, "x-dynamo-session-id affinity TTL in seconds, 0 off (DYN_EPP_SESSION_AFFINITY_TTL_SECS)")
	mode := fs.String("session-affinity-mode", "hard", "session affinity mode: hard or soft (DYN_EPP_SESSION_AFFINITY_MODE)")
	fs.IntVar(&o.epp.Fallbacks, "fallback-endpoints", 0, "endpoints listed after the booked one in x-gateway-destination-endpoint, for the gateway's retries (unbooked)")
	fs.IntVar(&o.epp.MaxBodyBytes, "max-body-bytes", epp.DefaultMaxBodyBytes, "largest request body accumulated; larger gets 413")
	kvEvents := fs.Bool("kv-events", true, "listen to the workers' ZMQ KV events (false: the approximate index)")
	fs.IntVar(&o.demo, "demo", 0, "start N built-in simulated vLLM engines on loopback (real ZMQ KV events; OpenAI completions and chat answered at their endpoints), registered as workers 1..N at http://127.0.0.N:8000 (a free port when that one is taken) of --model-name (default \"default\"): the EPP in one command, without a cluster")
	fs.IntVar(&o.demoBlockSize, "demo-block-size", 16, "KV block size of the --demo engines")
	fs.StringVar(&o.workersFile, "workers-file", "", "JSON file of the worker membership ({\"workers\": [POST /workers bodies]}), polled every second (the off-cluster source)")
	fs.DurationVar(&o.engineMetrics, "engine-metrics-interval", 0, "scrape each worker's {endpoint}/metrics (vLLM's or SGLang's) this often: its LoRA adapters narrow requests naming one, its waiting/running requests and KV usage show in /loads and the GIE pool gauges, and a worker that stops answering is out of selection until it answers again (0: never)")
	addModelPathFlag(fs, &o.modelPaths, "tokenizing the bodies")
	pprofOn := fs.Bool("pprof", true, "serve /debug/pprof/* on --debug-addr")
	fs.StringVar(&o.debugAddr, "debug-addr", "127.0.0.1:6060", "host:port of the debug listener (a taken default falls back to a free port)")
	// Variables first, so that a flag beats its variable.
	for name, vars := range eppEnv {
		for _, v := range vars {
			if val, ok := env(v); ok && strings.TrimSpace(val) != "" {
				if err := fs.Set(name, strings.TrimSpace(val)); err != nil {
					return nil, fmt.Errorf("%s: %w", v, err)
				}
				break
			}
		}
	}
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("unexpected arguments: %q", fs.Args())
	}
	for _, p := range []struct {
		v   uint
		dst *uint16
		f   string
	}{{*grpcPort, &o.grpcPort, "grpc-port"}, {*healthPort, &o.healthPort, "grpc-health-port"}, {*metricsPort, &o.metricsPort, "metrics-port"}} {
		if p.v > math.MaxUint16 {
			return nil, fmt.Errorf("--%s %d out of range", p.f, p.v)
		}
		*p.dst = uint16(p.v)
	}
	if *blockSize < 1 || *blockSize > math.MaxUint32 {
		return nil, fmt.Errorf("--block-size %d: want >= 1", *blockSize)
	}
	o.epp.BlockSize = uint32(*blockSize)
	o.core.UseKVEvents = *kvEvents
	if *ttl != 0 {
		if !(*ttl >= 1 && *ttl <= 31_536_000) {
			return nil, fmt.Errorf("--session-affinity-ttl-secs %v: between 1 and 31536000", *ttl)
		}
		o.core.SessionAffinity.TTL = time.Duration(*ttl * float64(time.Second))
	}
	m, err := core.ParseAffinityMode(*mode)
	if err != nil {
		return nil, fmt.Errorf("--session-affinity-mode: %w", err)
	}
	o.core.SessionAffinity.Mode = m
	o.epp.Disaggregated = o.prefillPool != ""
	if !*pprofOn {
		o.debugAddr = ""
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	o.debugExplicit = set["debug-addr"]
	if o.replicaPort, o.replicaPeers, err = parseReplicaSync(set["replica-sync-port"], *replicaPort, *replicaPeers); err != nil {
		return nil, err
	}
	// Discovery: Kubernetes (a pool or an endpoint selector) or the
	// workers file, one of them.
	o.kubeOn = o.kube.PoolName != "" || o.kube.Selector != ""
	switch {
	case o.demo < 0 || o.demo > 250 || o.demoBlockSize < 1:
		return nil, fmt.Errorf("--demo %d, --demo-block-size %d: want 0..250 engines of blocks >= 1", o.demo, o.demoBlockSize)
	case o.demo > 0 && (o.kubeOn || o.workersFile != ""):
		return nil, errors.New("--demo registers its own workers: no --workers-file, --pool-name or --endpoint-selector with it")
	case o.demo > 0 && !o.core.UseKVEvents:
		return nil, errors.New("--demo needs --kv-events: its engines publish real KV events")
	case o.demo > 0:
		if o.epp.ModelName == "" {
			o.epp.ModelName = "default"
		}
	case o.kubeOn && o.workersFile != "":
		return nil, errors.New("--workers-file and Kubernetes discovery (--pool-name, --endpoint-selector) exclude each other")
	case o.kubeOn:
		if o.epp.ModelName == "" {
			return nil, errors.New("Kubernetes discovery needs --model-name (DYN_MODEL_NAME): the model the pool's workers serve")
		}
		o.kube.ModelName, o.kube.BlockSize = o.epp.ModelName, o.epp.BlockSize
		// A prefill pool: a second InferencePool, watched as the first,
		// whose workers form the prefill routing group; --pool-name's are
		// then the decode group (httpapi/kube, Config.PrefillPoolName).
		o.kube.PrefillPoolName = o.prefillPool
		o.kube.PrefillRoutingGroup, o.kube.DecodeRoutingGroup = o.epp.PrefillRoutingGroup, o.epp.DecodeRoutingGroup
		if err := o.kube.Validate(); err != nil {
			return nil, err
		}
	default:
		o.inactive = append(o.inactive, "no --workers-file, --pool-name or --endpoint-selector: the catalog stays empty and every pick answers 503")
		for _, f := range []string{"total-kv-blocks", "max-num-batched-tokens", "kv-events-port", "kv-events-replay-port", "data-parallel-size"} {
			if set[f] {
				o.inactive = append(o.inactive, "--"+f+" (Kubernetes discovery derives workers with it; with --workers-file the file's records say it)")
			}
		}
	}
	if o.kvTopic != "" {
		o.inactive = append(o.inactive, "--kv-event-topic (the engines' ZMQ messages are read whatever their topic)")
	}
	if o.certReload && (!o.secure || o.certPath == "") {
		o.inactive = append(o.inactive, "--enable-cert-reload without --cert-path, or with --secure-serving=false (there are no files to reload)")
	}
	o.epp.Disaggregated = o.epp.Disaggregated || o.kubeOn && o.kube.RoleLabel != ""
	if o.epp.Disaggregated {
		// A request whose prefill cannot be placed (no prefill worker,
		// or none admits it) is served by the decode pool alone, as the
		// standalone EPP's plan_request falls back to the decode pool
		// (ai-dynamo/dynamo:deploy/inference-gateway/ext-proc/src/
		// epp_router.rs, falls_back_to_aggregated): the coordinator's
		// bypass_on_decode keeps the decode booking and answers no
		// prefill headers.
		o.core.Disagg.PrefillFailure = core.BypassOnDecode
	}
	if err := o.core.Validate(); err != nil {
		return nil, err
	}
	return o, o.epp.Validate()
}

// runEpp is the endpoint picker's life, composed on the node like serve:
// the ingress, the service, the tokenizers, the workers file, background
// loops, the debug listener, the metrics port, then the two gRPC ports;
// stopped in reverse.
func runEpp(ctx context.Context, args []string, env func(string) (string, bool), stderr io.Writer, ready chan<- bound) int {
	logs := newLogs(stderr, parseLogEnv(env))
	log := logs.logger("kvselect::epp")
	opts, err := parseEpp(args, env, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return 0 // the usage is written
	}
	if err != nil {
		log.Error("epp: invalid configuration", "err", err)
		return 2
	}
	build := readBuildInfo()
	log.Info("starting", "version", build.version, "grpc_port", opts.grpcPort, "grpc_health_port", opts.healthPort, "metrics_port", opts.metricsPort,
		"pool_name", opts.kube.PoolName, "pool_namespace", opts.kube.Namespace, "endpoint_selector", opts.kube.Selector, "prefill_pool_name", opts.prefillPool, "model_name", opts.epp.ModelName,
		"block_size", opts.epp.BlockSize, "kv_events", opts.core.UseKVEvents, "workers_file", opts.workersFile, "fallback_endpoints", opts.epp.Fallbacks)
	for _, s := range opts.inactive {
		log.Warn("accepted without effect: " + s)
	}
	n := newNode("epp", log)
	fail := func(code int, what string, err error) int {
		log.Error("epp: "+what, "err", err)
		return n.stop(code)
	}
	var ingress core.Ingress = core.NopIngress{}
	var zing *zmqin.Ingress
	if opts.core.UseKVEvents {
		if zing, err = zmqin.New(zmqin.Config{Logger: logs.logger("kvselect::zmqin")}); err != nil {
			return fail(2, "KV-event ingress", err)
		}
		ingress = zing
		n.onStop("KV-event ingress", zing.Close)
	}
	// The replica mesh (constructed here, started once the catalog
	// source is running), as serve's.
	var zmesh *mesh.Mesh
	copts := core.Options{Ingress: ingress, Replica: core.NopReplicaSink{}, Logf: printf(logs.logger("kvselect::core"), slog.LevelWarn)}
	if opts.replicaPort > 0 {
		if zmesh, err = mesh.New(mesh.Config{Bind: "tcp://*:" + strconv.Itoa(opts.replicaPort), Peers: opts.replicaPeers, Logger: logs.logger("kvselect::mesh")}); err != nil {
			return fail(1, "replica sync", err)
		}
		n.onStop("replica mesh", zmesh.Close)
		copts.Replica = zmesh
		if opts.core.SessionAffinity.TTL > 0 {
			copts.Affinity, copts.WriterID = zmesh, zmesh.ProcessID()
		}
	}
	svc, err := core.New(opts.core, copts)
	if err != nil {
		return fail(2, "invalid configuration", err)
	}
	// The demo engines (--demo) close after the service, as serve's.
	var demo *demoEngines
	n.onStopDo("demo engines", func() {
		if demo != nil {
			demo.Close()
		}
	})
	n.onStopDo("service", svc.Close)
	hcfg := httpapi.DefaultConfig()
	hcfg.Logger = logs.logger("kvselect::httpapi")
	if hcfg.Tokenizers, err = startTokenizers(log, opts.modelPaths); err != nil {
		return fail(2, "invalid configuration", err)
	}
	opts.epp.Tokenizers, opts.epp.Logger = hcfg.Tokenizers, log
	// GIE's per-request histograms, from every stream's observation.
	gieRequests := newGIERequests(gieLabelLimit)
	opts.epp.Observer = gieRequests
	picker, err := epp.New(svc, opts.epp)
	if err != nil {
		return fail(2, "invalid configuration", err)
	}
	// The HTTP port is read-only (httpapi.NewEPP): discovery owns the
	// catalog, the streams own the bookings. Its /ready is the service's
	// and, with Kubernetes discovery, the informers' sync.
	var src *kube.Source // set below with Kubernetes discovery, before the port is served
	hcfg.ReadyCheck = func() error {
		if src != nil && !src.Ready() {
			return errKubeNotReady
		}
		return nil
	}
	var scrape *engineScrape // set below with --engine-metrics-interval, before the port is served
	if opts.engineMetrics > 0 {
		hcfg.EngineLoads = func(id uint64) (httpapi.EngineLoad, bool) { return scrape.load(id) }
	}
	srv, err := httpapi.NewEPP(svc, hcfg)
	if err != nil {
		return fail(2, "invalid configuration", err)
	}
	reg := srv.Registry()
	reg.Describe(buildDesc)
	reg.OnScrape(func(w io.Writer) { writeBuildInfo(w, build) })
	reg.Describe(eppDescs...)
	reg.OnScrape(func(w io.Writer) { writeEppMetrics(w, picker.Stats()) })
	gie := newGIELabels(opts.epp.ModelName, opts.kube.PoolName, build)
	reg.Describe(gieDescs...)
	reg.OnScrape(func(w io.Writer) { writeGIEMetrics(w, gie, picker.Stats(), svc.Ready().SchedulableWorkers, scrape) })
	reg.Describe(gieRequestDescs...)
	reg.OnScrape(gieRequests.write)
	if zing != nil {
		reg.Describe(ingressDescs...)
		reg.OnScrape(func(w io.Writer) { writeIngressMetrics(w, zing.Stats()) })
	}
	if opts.workersFile != "" {
		members, err := openMembership(svc, opts.workersFile, logs.logger("kvselect::workers_file"))
		if err != nil {
			return fail(2, "--workers-file", err)
		}
		n.onStopDo("workers file", members.stop)
		reg.Describe(membershipDescs...)
		reg.OnScrape(func(w io.Writer) { writeMembershipMetrics(w, members.file.stats(), members.rec.Stats()) })
		poll := time.NewTicker(workersFilePoll)
		n.onStopDo("workers file poll", poll.Stop)
		members.start(poll.C)
	}
	if opts.kubeOn {
		rec, err := core.NewCatalogReconciler(svc, core.ReconcilerConfig{Name: "Kubernetes discovery", Exclusive: true})
		if err != nil {
			return fail(2, "Kubernetes discovery", err)
		}
		src, err = kube.New(opts.kube, rec, logs.logger("kvselect::kube"))
		if err != nil {
			return fail(2, "Kubernetes discovery", err)
		}
		n.onStopDo("catalog reconciler", rec.Close)
		src.RegisterMetrics(reg)
		n.loop("Kubernetes discovery", func(ctx context.Context) {
			if err := src.Run(ctx); err != nil {
				n.fail("Kubernetes discovery", err)
			}
		})
	}
	if opts.engineMetrics > 0 {
		// A pod that stops answering is out of selection until it
		// answers again (exclude).
		scrape = startEngineScrape(svc, opts.engineMetrics, true, logs.logger("kvselect::engines"))
		n.onStopDo("engine metrics", scrape.stop)
		reg.Describe(engineScrapeDescs...)
		reg.OnScrape(func(w io.Writer) { writeEngineScrapeMetrics(w, scrape) })
	}
	if opts.demo > 0 {
		d, err := startDemo(svc, opts.demo, opts.demoBlockSize, opts.epp.ModelName, func(i int) string { return fmt.Sprintf("http://127.0.0.%d:8000", i+1) }, logs.logger("kvselect::demo"))
		if err != nil {
			return fail(1, "--demo", err)
		}
		demo = d
		log.Info("demo: simulated engines registered as workers 1..N; try: curl -s localhost:"+strconv.Itoa(int(opts.metricsPort))+"/loads", "engines", opts.demo, "model_name", opts.epp.ModelName)
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
	n.loop("sweep", func(ctx context.Context) { sweep(ctx, svc, core.DefaultSweepInterval) })
	if d := opts.core.SessionAffinity.ReapInterval(); d > 0 {
		n.every("affinity reaping", d, func(now time.Time) { svc.ReapAffinity(now) })
	}
	debug, err := n.serveDebug(opts.debugAddr, opts.debugExplicit)
	if err != nil {
		return fail(1, "--debug-addr (use --pprof=false to serve no profiles)", err)
	}
	// The gRPC ports: ext_proc (with the health service too, which Envoy's
	// cluster check asks there) and health on its own port.
	gopts := epp.ServerOptions()
	if opts.secure {
		tcfg, err := eppTLS(opts.certPath)
		if err != nil {
			return fail(2, "--cert-path", err)
		}
		if opts.certReload && opts.certPath != "" {
			rl, err := newCertReloader(opts.certPath, logs.logger("kvselect::tls"))
			if err != nil {
				return fail(2, "--cert-path", err)
			}
			tcfg = rl.tlsConfig(tcfg)
			reg.Describe(certReloadDescs...)
			reg.OnScrape(rl.write)
			n.every("TLS certificate reload", certReloadPoll, rl.poll)
		}
		gopts = append(gopts, grpc.Creds(credentials.NewTLS(tcfg)))
	}
	extproc, hsrv := grpc.NewServer(gopts...), grpc.NewServer()
	picker.Register(extproc)
	hs := []*health.Server{epp.RegisterHealth(extproc), epp.RegisterHealth(hsrv)}
	// Both gRPC ports are bound before the HTTP port, so that once /health
	// answers there they accept connections (a probe or a test that
	// waits on /health may dial ext_proc next); they are served after it,
	// so that their drains, pushed later, run first at the stop, with
	// /metrics and /health still up meanwhile.
	gln, err := n.listenTCP(opts.host, opts.grpcPort)
	if err != nil {
		return fail(1, "--grpc-port", err)
	}
	hln, err := n.listenTCP(opts.host, opts.healthPort)
	if err != nil {
		return fail(1, "--grpc-health-port", err)
	}
	maddr, err := n.serveHTTP(srv, opts.host, opts.metricsPort)
	if err != nil {
		return fail(1, "--metrics-port", err)
	}
	gaddr := n.serveGRPC("ext_proc", extproc, gln)
	haddr := n.serveGRPC("health", hsrv, hln)
	// Popped first at the stop: not serving, then the drain.
	n.onStopDo("health: not serving", func() {
		for _, h := range hs {
			h.Shutdown()
		}
	})
	n.onStopDo("router queue waits", svc.CancelWaits)
	// Ready: at once with a workers file; with Kubernetes discovery, the
	// health services follow its readiness (the informers synced, the
	// pool resolved), as /ready does, so that a readiness probe on gRPC
	// health keeps the pod out of its Service until then.
	servingNow := func() bool { return src == nil || src.Ready() }
	serving := servingNow()
	for _, h := range hs {
		epp.SetServing(h, serving)
	}
	if src != nil {
		n.every("gRPC health follows discovery", eppHealthPoll, func(time.Time) {
			if now := servingNow(); now != serving {
				serving = now
				for _, h := range hs {
					epp.SetServing(h, now)
				}
				log.Info("gRPC health", "serving", now)
			}
		})
	}
	log.Info("listening", "ext_proc", gaddr.String(), "tls", opts.secure, "grpc_health", haddr.String(), "metrics", "http://"+maddr.String()+"/metrics", "workers", len(svc.ListWorkers("", "")))
	if ready != nil {
		ready <- bound{http: maddr.String(), debug: debug.addr()}
	}
	code := n.stop(n.wait(ctx))
	log.Info("stopped", "exit_code", code)
	return code
}

// serveGRPC serves g on ln until the node stops: the stop drains
// (streams in progress end on their own within shutdownGrace, then the
// rest are cancelled, which frees their bookings), then reads Serve's
// result. A Serve that fails before that fails the node.
func (n *node) serveGRPC(what string, g *grpc.Server, ln net.Listener) net.Addr {
	var mu sync.Mutex // guards stopping
	stopping := false
	served := make(chan error, 1)
	go func() {
		err := g.Serve(ln)
		mu.Lock()
		if !stopping && err != nil {
			n.fail("the "+what+" gRPC server stopped", err)
		}
		mu.Unlock()
		served <- err
	}()
	n.onStopDo(what+" drain", func() {
		mu.Lock()
		stopping = true
		mu.Unlock()
		done := make(chan struct{})
		go func() { g.GracefulStop(); close(done) }()
		select {
		case <-done:
		case <-time.After(shutdownGrace):
			g.Stop()
			<-done
		}
		<-served
	})
	return ln.Addr()
}

// errKubeNotReady is the EPP's /ready reason while Kubernetes discovery
// has not synced its informers or resolved its InferencePool.
var errKubeNotReady = errors.New("Kubernetes discovery has not synced (or an InferencePool it watches is absent or unusable)")

var eppDescs = []perf.Desc{
	{Name: "kvselect_epp_requests_total", Kind: perf.Counter, Help: "EPP requests by outcome: routed, routed_unbooked (no body), bad_request (400), too_large (413), overloaded (429), unavailable (503), internal (500), abandoned (the stream ended before a pick)."},
	{Name: "kvselect_epp_picks_total", Kind: perf.Counter, Help: "Destinations answered to the gateway."},
	{Name: "kvselect_epp_subset_picks_total", Kind: perf.Counter, Help: "Picks restricted by the gateway's subset hint."},
	{Name: "kvselect_epp_frees_total", Kind: perf.Counter, Help: "Bookings the EPP freed, by reason: complete (the response ended), closed (the gateway closed the stream first), cancelled (reset or dropped), send_failed, rejected."},
	{Name: "kvselect_epp_streams_total", Kind: perf.Counter, Help: "ext_proc streams opened."},
	{Name: "kvselect_epp_active_streams", Kind: perf.Gauge, Help: "ext_proc streams open now."},
	{Name: "kvselect_epp_prefill_complete_total", Kind: perf.Counter, Help: "Prefill completions seen on the response stream (its first body chunk)."},
	{Name: "kvselect_epp_output_blocks_total", Kind: perf.Counter, Help: "Output blocks reported from the response stream."},
	{Name: "kvselect_epp_served_elsewhere_total", Kind: perf.Counter, Help: "Responses the gateway reports served by an endpoint other than the booked one (x-gateway-destination-endpoint-served)."},
	{Name: "kvselect_epp_served_moves_total", Kind: perf.Counter, Help: "Responses served elsewhere, by result: moved (the booking moved to the served worker), unknown (no worker of the pool has the served endpoint), unmoved (a disaggregated plan, or booking the served worker failed)."},
}

func writeEppMetrics(w io.Writer, st epp.Stats) {
	for i, name := range epp.OutcomeNames {
		perf.WriteCounter(w, perf.Label("kvselect_epp_requests_total", "outcome", name), st.Requests[i])
	}
	for i, name := range epp.FreeReasonNames {
		if name != "" {
			perf.WriteCounter(w, perf.Label("kvselect_epp_frees_total", "reason", name), st.Freed[i])
		}
	}
	perf.WriteCounter(w, "kvselect_epp_picks_total", st.Picks)
	perf.WriteCounter(w, "kvselect_epp_subset_picks_total", st.SubsetPicks)
	perf.WriteCounter(w, "kvselect_epp_streams_total", st.Streams)
	perf.WriteGauge(w, "kvselect_epp_active_streams", float64(st.Active))
	perf.WriteCounter(w, "kvselect_epp_prefill_complete_total", st.PrefillComplete)
	perf.WriteCounter(w, "kvselect_epp_output_blocks_total", st.OutputBlocks)
	perf.WriteCounter(w, "kvselect_epp_served_elsewhere_total", st.ServedElsewhere)
	for _, r := range []struct {
		result string
		n      uint64
	}{{"moved", st.ServedMoved}, {"unknown", st.ServedUnknown}, {"unmoved", st.ServedUnmoved}} {
		perf.WriteCounter(w, perf.Label("kvselect_epp_served_moves_total", "result", r.result), r.n)
	}
}
