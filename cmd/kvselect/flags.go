package main

import (
	"bytes"
	"crypto/tls"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"net"
	"net/netip"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/kvselect/kvselect/core"
	"github.com/kvselect/kvselect/httpapi"
	"github.com/kvselect/kvselect/sched"
	"github.com/kvselect/kvselect/zmqin/mesh"
)

// serveOptions is everything `kvselect serve` reads from flags and the
// environment, resolved into the packages' configs.
type serveOptions struct {
	host string
	port uint16
	core core.Config
	http httpapi.Config
	// inactive lists accepted, validated settings that act on nothing in
	// this combination (e.g. --demo-block-size without --demo); serve logs
	// each at start-up as "accepted without effect". warnings are logged
	// likewise.
	inactive, warnings []string
	// index holds the index-shape settings read from the environment
	// until the flags are resolved (indexflags.go).
	index indexFlags
	// pprofMutexFraction and pprofBlockRate are the contention-profile rates.
	pprofMutexFraction, pprofBlockRate int
	// remote configures the remote primary index (--remote-indexer-url).
	remote httpapi.RemoteIndexConfig
	// replicaPort is --replica-sync-port (0: no mesh); replicaPeers the
	// initial peers; noReplicaSnapshot turns the catch-up snapshot off.
	replicaPort       int
	replicaPeers      []string
	noReplicaSnapshot bool
	// indexerPeers are the base URLs to recover the KV index from at
	// start-up (--indexer-peers), in order.
	indexerPeers []string
	// demo is the number of built-in simulated engines (--demo); 0 is none.
	demo          int
	demoBlockSize int
	// workersFile is the --workers-file path: the catalog's only source
	// while set; "" is none (workers come from POST /workers).
	workersFile string
	// debugAddr is where /debug/pprof is served (--debug-addr), "" when
	// --pprof=false; debugExplicit is whether --debug-addr was given (only
	// then is an address that cannot be bound fatal: startDebug).
	debugAddr     string
	debugExplicit bool
	// randSeed seeds the picker's random source (--rand-seed); 0 is the
	// runtime's per-thread randomness.
	randSeed uint64
	// policyConfig is the router policy config file
	// (DYN_ROUTER_POLICY_CONFIG, --router-policy-config); "" is none.
	policyConfig string
	// writers is the KV-event writer count (--threads; 0: zmqin's default).
	writers int
	// modelPaths are the --model-path NAME=DIR entries: a model's
	// tokenizer files, read at start-up (tokenizers.go).
	modelPaths []modelPath
	// engineMetrics is --engine-metrics-interval: how often each worker's
	// {endpoint}/metrics is scraped for the LoRA adapters it serves (0:
	// never).
	engineMetrics time.Duration
	// envPolicy is DYN_ROUTER_WORKER_SELECTION_POLICY ("" unset), the
	// selection policy unless --routing-policy is given.
	envPolicy string
	// replicaSyncEnv is DYN_ROUTER_REPLICA_SYNC=true, which does nothing
	// without --replica-sync-port (reported).
	replicaSyncEnv bool
}

// parseServe parses the flags of `kvselect serve` (the reference's names
// and defaults) on top of the environment read through env.
func parseServe(args []string, env func(string) (string, bool), stderr io.Writer) (*serveOptions, error) {
	o := &serveOptions{core: core.DefaultConfig(), http: httpapi.DefaultConfig()}
	if err := applyEnv(o, env); err != nil {
		return nil, err
	}
	fs := flag.NewFlagSet("kvselect serve", flag.ContinueOnError)
	fs.SetOutput(stderr)
	port := fs.Uint("port", 8092, "HTTP port")
	fs.StringVar(&o.host, "host", "0.0.0.0", "HTTP bind address")
	threads := fs.Int("threads", 4, "KV indexer threads, as the reference's: when given, N goroutines apply KV events over N index shards per partition; not given, one shard per partition and one writer per two cores, which measured faster here because every match walks every shard (the start-up line shows index_shards and kv_writers)")
	fs.IntVar(&o.core.IndexMaxBlocksPerRank, "index-max-blocks-per-rank", 0, "blocks one worker rank may hold in the KV index, all tiers together; a store past it clears the rank (0: 8 Mi)")
	indexerPeers := fs.String("indexer-peers", "", "comma-separated HTTP base URLs of selectors/indexers to recover the KV index from at start-up (GET {url}/dump)")
	replicaPort := fs.Int("replica-sync-port", 0, "ZMQ PUB port of the replica-sync mesh (must be > 0 when set)")
	replicaPeers := fs.String("replica-sync-peers", "", "comma-separated ZMQ endpoints of replica-sync peers; requires --replica-sync-port")
	fs.BoolVar(&o.noReplicaSnapshot, "no-replica-snapshot", false, "do not serve or request kvselect's catch-up snapshot of live bookings on the replica mesh (Dynamo replicas never use it)")
	ttl := fs.Float64("selection-cache-ttl-secs", o.core.SelectionCacheTTL.Seconds(), "pending-selection cache TTL in seconds")
	fs.IntVar(&o.core.SelectionCacheMaxEntries, "selection-cache-max-entries", o.core.SelectionCacheMaxEntries, "pending-selection cache entry cap")
	maxBytes := fs.Int64("selection-cache-max-bytes", o.core.SelectionCacheMaxBytes, "pending-selection cache byte budget")
	affinityTTL := fs.Float64("session-affinity-ttl-secs", 0, "session affinity: the idle TTL of a session's binding to its worker, in seconds (1 to 31536000); unset: no session affinity")
	affinityMode := fs.String("session-affinity-mode", "hard", "session affinity mode: hard (a booking that lands off the bound worker is a 400) or soft (the session re-binds to where it ran)")
	queueThreshold := fs.Float64("router-queue-threshold", 0, "router queue: a worker is busy past this multiple of its max_num_batched_tokens of booked prefill; bookings wait while every eligible worker is busy (overrides DYN_ROUTER_QUEUE_THRESHOLD; unset: no queue)")
	queuePolicy := fs.String("router-queue-policy", "", "router queue order: fcfs, lcfs or wspt (overrides DYN_ROUTER_QUEUE_POLICY; default fcfs)")
	policyConfig := fs.String("router-policy-config", "", "router policy config YAML (policy classes, their busy lines and queue caps; overrides DYN_ROUTER_POLICY_CONFIG)")
	reuse := fs.Bool("router-assume-kv-reuse", false, "assume KV reuse across requests (overrides DYN_ROUTER_ASSUME_KV_REUSE)")
	noReuse := fs.Bool("no-router-assume-kv-reuse", false, "do not assume KV reuse (overrides DYN_ROUTER_ASSUME_KV_REUSE)")
	trackingHash := fs.String("router-tracking-hash", "public-xxh3-v1", "tracking hash: public-xxh3-v1 or keyed-xxh3-v1 (experimental)")
	keyFile := fs.String("router-tracking-key-file", "", "file of exactly 32 raw bytes for keyed-xxh3-v1")
	keyID := fs.String("router-tracking-key-id", "", "key epoch id for keyed-xxh3-v1")
	fs.StringVar(&o.remote.URL, "remote-indexer-url", "", "standalone indexer (kvselect indexer or python -m dynamo.indexer) used as the primary index through POST /query_tiered_by_hash: no KV-event listeners, --indexer-peers ignored, /dump without primary events")
	fs.DurationVar(&o.remote.Timeout, "remote-indexer-timeout", httpapi.DefaultRemoteIndexTimeout, "deadline of each call to the remote indexer; past it the selection answers 503")
	fs.IntVar(&o.remote.MaxConns, "remote-indexer-max-conns", httpapi.DefaultRemoteIndexConns, "pooled keep-alive connections to the remote indexer at most")
	fs.IntVar(&o.core.MaxReservations, "max-reservations", o.core.MaxReservations, "live reservations kept at most; a booking past it is refused with a 503 (kvselect_active_reservations_limit)")
	fs.Int64Var(&o.core.MaxReservationBytes, "max-reservation-bytes", o.core.MaxReservationBytes, "bytes of tracking hashes and ids the live reservations hold at most (8 per block); a booking past it is refused with a 503")
	fs.IntVar(&o.core.MaxListeners, "max-kv-listeners", o.core.MaxListeners, "KV-event listener ranks (one per dp rank of each schedulable worker) at most; a registration past it is refused with a 409")
	networks := fs.String("kv-endpoint-networks", "", "comma-separated CIDRs (e.g. 10.0.0.0/8,127.0.0.1/32): worker kv_events and replay endpoints must be IP addresses inside them, or registration is refused with a 400; empty allows any endpoint, as the reference")
	pprofOn := fs.Bool("pprof", true, "serve /debug/pprof/* on --debug-addr (false: no debug listener)")
	fs.StringVar(&o.debugAddr, "debug-addr", "127.0.0.1:6060", "host:port of the debug listener serving /debug/pprof/*, apart from the API's port; loopback by default, as it has no authentication (port 0 picks a free one)")
	authFile := fs.String("auth-token-file", "", "file holding a bearer token (one trailing newline is trimmed): every route but /health, /ready and /metrics then requires Authorization: Bearer <token>, else 401")
	tlsCert := fs.String("tls-cert", "", "PEM certificate (chain) file: serve HTTPS; requires --tls-key")
	tlsKey := fs.String("tls-key", "", "PEM private key file of --tls-cert")
	maxConns := fs.Int("max-connections", -1, "cap on open HTTP connections; more are answered 503 and closed (0 = no cap). Default: (soft RLIMIT_NOFILE - 128) * 3/4, at least 16, leaving descriptors for the ZMQ sockets and files")
	fs.IntVar(&o.demo, "demo", 0, "start N built-in simulated vLLM engines on loopback, publishing real ZMQ KV events, registered as workers 1..N (a working default for trying kvselect)")
	fs.IntVar(&o.demoBlockSize, "demo-block-size", 16, "KV block size of the --demo engines")
	ixf := addIndexFlags(fs)
	disaggOrder := fs.String("disagg-order", "decode-anchored", "order of a /disagg/plan request that names none: decode-anchored (preview and book decode, then prefill in its KV-transfer domain) or prefill-anchored (book prefill, then decode in its domain)")
	prefillFailure := fs.String("disagg-prefill-failure", "free-decode", "how a decode-anchored plan whose prefill booking fails ends, for a request that names none: free-decode (free decode, fail the plan) or bypass-on-decode (keep decode; prefill runs on the decode worker)")
	fs.StringVar(&o.workersFile, "workers-file", "", "JSON file of the complete worker membership ({\"workers\": [POST /workers bodies]}), polled every second; it then owns the catalog (POST, PATCH and DELETE /workers answer 409)")
	fs.Uint64Var(&o.randSeed, "rand-seed", 0, "seed of the picker's random source (tie-breaks, softmax sampling), for reproducible decisions in benchmarks and simulations; 0 (default) uses the runtime's per-thread randomness, which needs no lock")
	routingPolicy := fs.String("routing-policy", sched.SelectionDefault, "selection policy of every partition: default (the reference's cost function and picker, Dynamo's decisions) or cache_balance (kvselect's own, see sched.CacheBalancePolicy); a request may choose either with router_config_override.routing_policy")
	addModelPathFlag(fs, &o.modelPaths, "POST /tokenize and /detokenize, and prompt in place of token_ids on the selection routes")
	fs.DurationVar(&o.engineMetrics, "engine-metrics-interval", 0, "scrape each worker's engine metrics ({endpoint}/metrics, vLLM's or SGLang's) this often for the LoRA adapters it serves (vllm:lora_requests_info), which narrow requests naming one beside the records' lora_adapters; 0 (default) never scrapes")
	fs.IntVar(&o.pprofMutexFraction, "pprof-mutex-fraction", 0, "runtime.SetMutexProfileFraction for the mutex profile (0 = off)")
	fs.IntVar(&o.pprofBlockRate, "pprof-block-rate", 0, "runtime.SetBlockProfileRate in ns for the block profile (0 = off)")
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
	if *threads < 1 || *threads > 1024 {
		return nil, fmt.Errorf("--threads must be in [1, 1024], got %d", *threads)
	}
	// --threads N is the reference's N KV indexer threads (a thread-pool
	// indexer over a concurrent tree): N writer goroutines applying KV
	// events over N index shards. Not given, kvselect sizes both itself
	// (one shard, zmqin.DefaultWriters), because every match walks every
	// shard: more shards than radix.DefaultShards only slow matches down
	// on a small machine. The start-up line shows which applies.
	if set["threads"] {
		o.core.IndexShards, o.writers = *threads, *threads
	}
	if *authFile != "" {
		tok, err := readAuthToken(*authFile)
		if err != nil {
			return nil, err
		}
		o.http.AuthToken = tok
	}
	if (*tlsCert == "") != (*tlsKey == "") {
		return nil, errors.New("--tls-cert and --tls-key go together: give both or neither")
	}
	if *tlsCert != "" {
		cert, err := tls.LoadX509KeyPair(*tlsCert, *tlsKey)
		if err != nil {
			return nil, fmt.Errorf("--tls-cert/--tls-key: %w", err)
		}
		o.http.TLS = &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}
	}
	switch {
	case !set["max-connections"]:
		o.http.MaxConnections = defaultMaxConnections(openFileLimit())
	case *maxConns < 0:
		return nil, fmt.Errorf("--max-connections must be >= 0, got %d", *maxConns)
	default:
		o.http.MaxConnections = *maxConns
	}
	if math.IsNaN(*ttl) || *ttl <= 0 || *ttl > 1e9 {
		return nil, fmt.Errorf("--selection-cache-ttl-secs must be > 0, got %v", *ttl)
	}
	o.core.SelectionCacheTTL = time.Duration(*ttl * float64(time.Second))
	if *networks != "" {
		o.core.KVEndpointNetworks = []netip.Prefix{}
		for _, n := range splitList(*networks) {
			p, err := netip.ParsePrefix(n)
			if err != nil {
				return nil, fmt.Errorf("--kv-endpoint-networks: %q is not a CIDR (like 10.0.0.0/8): %v", n, err)
			}
			o.core.KVEndpointNetworks = append(o.core.KVEndpointNetworks, p.Masked())
		}
	}
	o.core.SelectionCacheMaxBytes = *maxBytes
	// The aggregated pool's policy: --routing-policy, else the
	// reference's DYN_ROUTER_WORKER_SELECTION_POLICY (applyEnv).
	polName, polFrom := *routingPolicy, "--routing-policy"
	if !set["routing-policy"] && o.envPolicy != "" {
		polName, polFrom = o.envPolicy, "DYN_ROUTER_WORKER_SELECTION_POLICY"
	}
	pol := sched.BuiltinSelectionPolicy(polName)
	if pol == nil {
		return nil, fmt.Errorf("%s: %q is not %s or %s", polFrom, polName, sched.SelectionDefault, sched.SelectionCacheBalance)
	}
	o.core.SelectionPolicy = pol
	if o.replicaSyncEnv && !set["replica-sync-port"] {
		// The reference select service ignores it too (its mesh is the
		// flag's); said at start-up rather than silently.
		o.inactive = append(o.inactive, "DYN_ROUTER_REPLICA_SYNC=true (no --replica-sync-port: replica sync is the mesh of --replica-sync-port and --replica-sync-peers)")
	}
	ixf.envTTL, ixf.envPredicted, ixf.envPolicy = o.index.envTTL, o.index.envPredicted, o.index.envPolicy
	warnings, err := ixf.resolve(o, set)
	if err != nil {
		return nil, err
	}
	o.warnings = append(o.warnings, warnings...)
	if set["router-assume-kv-reuse"] && set["no-router-assume-kv-reuse"] {
		return nil, errors.New("--router-assume-kv-reuse and --no-router-assume-kv-reuse are mutually exclusive")
	}
	if set["router-assume-kv-reuse"] {
		o.core.Sched.AssumeKVReuse = *reuse
	}
	if set["no-router-assume-kv-reuse"] {
		o.core.Sched.AssumeKVReuse = !*noReuse
	}

	if *indexerPeers != "" {
		for _, p := range splitList(*indexerPeers) {
			if u, err := url.Parse(p); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
				return nil, fmt.Errorf("--indexer-peers: %q is not an http(s) base URL", p)
			}
		}
		o.indexerPeers = splitList(*indexerPeers)
	}
	if o.replicaPort, o.replicaPeers, err = parseReplicaSync(set["replica-sync-port"], *replicaPort, *replicaPeers); err != nil {
		return nil, err
	}
	if set["session-affinity-ttl-secs"] {
		if !(*affinityTTL >= 1 && *affinityTTL <= 31_536_000) {
			return nil, fmt.Errorf("--session-affinity-ttl-secs %v: session affinity TTL must be between 1 and 31536000 seconds", *affinityTTL)
		}
		o.core.SessionAffinity.TTL = time.Duration(*affinityTTL * float64(time.Second))
	}
	mode, err := core.ParseAffinityMode(*affinityMode)
	if err != nil {
		return nil, fmt.Errorf("--session-affinity-mode: %w", err)
	}
	o.core.SessionAffinity.Mode = mode
	if err := o.applyQueueFlags(set, *queueThreshold, *queuePolicy, *policyConfig); err != nil {
		return nil, err
	}
	if err := resolveTracking(o, env, set, *trackingHash, *keyFile, *keyID); err != nil {
		return nil, err
	}
	if o.remote.URL != "" {
		if _, err := httpapi.NewRemoteIndex(o.remote); err != nil {
			return nil, fmt.Errorf("--remote-indexer-url: %w", err)
		}
		if o.remote.Timeout <= 0 || o.remote.MaxConns <= 0 {
			return nil, errors.New("--remote-indexer-timeout and --remote-indexer-max-conns must be > 0")
		}
		if !o.core.UseKVEvents {
			return nil, errors.New("a remote indexer requires use_kv_events=true; the standalone indexer does not record routing decisions")
		}
		if len(o.indexerPeers) > 0 {
			o.warnings = append(o.warnings, "--indexer-peers is ignored with --remote-indexer-url: the remote indexer holds the primary index")
			o.indexerPeers = nil
		}
	}
	// The coordinator's order and prefill-failure policy, named and
	// parsed as Dynamo's EPP reads DYN_EPP_DISAGG_ORDER and
	// DYN_EPP_DISAGG_PREFILL_FAILURE (ishandhanani/dynamo:deploy/
	// inference-gateway/ext-proc/src/epp_standalone_config.rs).
	var ok bool
	if o.core.Disagg.Order, ok = core.ParseDisaggOrder(*disaggOrder); !ok {
		return nil, fmt.Errorf("--disagg-order must be `decode-anchored` or `prefill-anchored`, got `%s`", *disaggOrder)
	}
	if o.core.Disagg.PrefillFailure, ok = core.ParsePrefillFailurePolicy(*prefillFailure); !ok {
		return nil, fmt.Errorf("--disagg-prefill-failure must be `free-decode` or `bypass-on-decode`, got `%s`", *prefillFailure)
	}
	if set["workers-file"] && o.workersFile == "" {
		return nil, errors.New("--workers-file needs a path")
	}
	if o.workersFile != "" && o.demo > 0 {
		return nil, errors.New("--demo registers its engines itself: it cannot run with --workers-file")
	}
	o.debugExplicit = set["debug-addr"]
	if !*pprofOn {
		o.debugAddr = ""
	} else if _, _, err := net.SplitHostPort(o.debugAddr); err != nil {
		return nil, fmt.Errorf("--debug-addr %q: want host:port (e.g. 127.0.0.1:6060): %v", o.debugAddr, err)
	}
	if o.engineMetrics < 0 {
		return nil, fmt.Errorf("--engine-metrics-interval %s: want >= 0", o.engineMetrics)
	}
	if o.pprofMutexFraction < 0 || o.pprofBlockRate < 0 {
		return nil, errors.New("--pprof-mutex-fraction and --pprof-block-rate must be >= 0")
	}
	if o.demo < 0 || o.demo > 64 {
		return nil, fmt.Errorf("--demo %d: want 0 to 64 engines", o.demo)
	}
	if o.demoBlockSize < 1 {
		return nil, fmt.Errorf("--demo-block-size %d: want >= 1", o.demoBlockSize)
	}
	if o.demo > 0 && o.remote.URL != "" {
		return nil, errors.New("--demo needs the selector's own index, not --remote-indexer-url")
	}
	if o.demo > 0 && !o.core.UseKVEvents {
		return nil, errors.New("--demo needs KV events (DYN_USE_KV_EVENTS must not be false)")
	}
	// Flags that act on nothing in this combination: said at start-up.
	for _, c := range []struct {
		given, moot bool
		what        string
	}{
		{set["pprof-mutex-fraction"] || set["pprof-block-rate"], o.debugAddr == "", "--pprof-mutex-fraction/--pprof-block-rate (--pprof=false: no profiles)"},
		{set["debug-addr"], !*pprofOn, "--debug-addr (--pprof=false: no debug listener)"},
		{set["demo-block-size"], o.demo == 0, "--demo-block-size (no --demo)"},
		{set["no-replica-snapshot"], o.replicaPort == 0, "--no-replica-snapshot (no --replica-sync-port)"},
		{set["session-affinity-mode"], !set["session-affinity-ttl-secs"], "--session-affinity-mode (no --session-affinity-ttl-secs: no session affinity)"},
		{set["threads"] || set["index-max-blocks-per-rank"], o.remote.URL != "", "--threads/--index-max-blocks-per-rank (--remote-indexer-url: the standalone indexer holds the index)"},
	} {
		if c.given && c.moot {
			o.inactive = append(o.inactive, c.what)
		}
	}
	if err := o.core.Validate(); err != nil {
		return nil, err
	}
	if err := o.http.Validate(); err != nil {
		return nil, err
	}
	return o, nil
}

// readAuthToken reads --auth-token-file: its content less one trailing
// newline (\n or \r\n). The token must be non-empty visible ASCII without
// spaces, as an Authorization header carries it. Errors name the file,
// never its content.
func readAuthToken(path string) ([]byte, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("--auth-token-file: %w", err)
	}
	b = bytes.TrimSuffix(b, []byte("\n"))
	b = bytes.TrimSuffix(b, []byte("\r"))
	if len(b) == 0 {
		return nil, fmt.Errorf("--auth-token-file %s: the file is empty", path)
	}
	for _, c := range b {
		if c <= ' ' || c > '~' {
			return nil, fmt.Errorf("--auth-token-file %s: the token holds a space, a control character or non-ASCII (byte 0x%02x)", path, c)
		}
	}
	return b, nil
}

func splitList(s string) []string {
	var out []string
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}

// policyEnv reads a selection policy name from the environment variable
// name: trimmed, "" when unset or blank (the reference ignores an empty
// one); an unknown name is an error, as the reference's registry refuses
// it at start-up (ai-dynamo/dynamo:lib/kv-router/src/scheduling/config.rs).
func policyEnv(env func(string) (string, bool), name string) (string, error) {
	s, _ := env(name)
	s = strings.TrimSpace(s)
	if s != "" && sched.BuiltinSelectionPolicy(s) == nil {
		return "", fmt.Errorf("%s: %q is not %s or %s", name, s, sched.SelectionDefault, sched.SelectionCacheBalance)
	}
	return s, nil
}

// schedEnv maps Dynamo's environment variables onto sched.Config, the names
// the reference's selection service reads (ai-dynamo/dynamo:
// lib/kv-router/src/config.rs and the frontend's DYN_ROUTER_* names for the
// cache-hit weights, which the standalone service lacks). Where a row lists
// several names, the first one set wins.
var schedEnv = []struct {
	names []string
	set   func(c *sched.Config, name, s string) error
}{
	{[]string{"DYN_ROUTER_KV_OVERLAP_SCORE_CREDIT"}, floatEnv(func(c *sched.Config) *float64 { return &c.OverlapScoreCredit })},
	{[]string{"DYN_ROUTER_KV_OVERLAP_SCORE_CREDIT_DECAY"}, floatEnv(func(c *sched.Config) *float64 { return &c.OverlapScoreCreditDecay })},
	{[]string{"DYN_ROUTER_PREFILL_LOAD_SCALE"}, floatEnv(func(c *sched.Config) *float64 { return &c.PrefillLoadScale })},
	{[]string{"DYN_ROUTER_KV_OVERLAP_SCORE_WEIGHT", "DYN_OVERLAP_SCORE_WEIGHT"}, optFloatEnv(func(c *sched.Config) **float64 { return &c.OverlapScoreWeight })},
	{[]string{"DYN_ROUTER_DECODE_ACTIVE_REQUEST_WEIGHT"}, floatEnv(func(c *sched.Config) *float64 { return &c.DecodeActiveRequestWeight })},
	{[]string{"DYN_ROUTER_HOST_CACHE_HIT_WEIGHT"}, floatEnv(func(c *sched.Config) *float64 { return &c.HostCacheHitWeight })},
	{[]string{"DYN_ROUTER_DISK_CACHE_HIT_WEIGHT"}, floatEnv(func(c *sched.Config) *float64 { return &c.DiskCacheHitWeight })},
	{[]string{"DYN_ROUTER_TEMPERATURE"}, floatEnv(func(c *sched.Config) *float64 { return &c.RouterTemperature })},
	{[]string{"DYN_ROUTER_TRACK_PREFILL_TOKENS"}, boolEnv(func(c *sched.Config) *bool { return &c.TrackPrefillTokens })},
	{[]string{"DYN_ROUTER_TRACK_ACTIVE_BLOCKS"}, boolEnv(func(c *sched.Config) *bool { return &c.TrackActiveBlocks })},
	{[]string{"DYN_ROUTER_TRACK_OUTPUT_BLOCKS"}, boolEnv(func(c *sched.Config) *bool { return &c.TrackOutputBlocks })},
	{[]string{"DYN_ROUTER_ASSUME_KV_REUSE"}, boolEnv(func(c *sched.Config) *bool { return &c.AssumeKVReuse })},
	{[]string{"DYN_ROUTER_QUEUE_THRESHOLD"}, optFloatEnv(func(c *sched.Config) **float64 { return &c.QueueThreshold })},
	{[]string{"DYN_ROUTER_QUEUE_POLICY"}, func(c *sched.Config, name, s string) error {
		p, err := sched.ParseQueuePolicy(s)
		if err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
		c.QueuePolicy = p
		return nil
	}},
	{[]string{"DYN_ROUTER_CONDITIONAL_DISAGG_PREFILL_BUSY_THRESHOLD"}, optFloatEnv(func(c *sched.Config) **float64 { return &c.PrefillBusyThreshold })},
	{[]string{"DYN_ROUTER_CONDITIONAL_DISAGG_DECODE_BUSY_THRESHOLD"}, optFloatEnv(func(c *sched.Config) **float64 { return &c.DecodeBusyThreshold })},
	{[]string{"DYN_ROUTER_CONDITIONAL_DISAGG"}, boolEnv(func(c *sched.Config) *bool { return &c.ConditionalDisaggEnabled })},
	{[]string{"DYN_ROUTER_CONDITIONAL_DISAGG_POLICY"}, func(c *sched.Config, _, s string) error {
		// Dynamo's environment parser keeps the default for a value it
		// cannot parse, silently; so do we.
		if k, err := sched.ParseDisaggPolicyKind(s); err == nil {
			c.ConditionalDisaggPolicy = k
		}
		return nil
	}},
	{[]string{"DYN_ROUTER_CONDITIONAL_DISAGG_EFF_ISL_THRESHOLD"}, func(c *sched.Config, name, s string) error {
		n, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			return fmt.Errorf("%s: %q is not a whole number of tokens", name, s)
		}
		c.ConditionalDisaggEffISLThreshold = n
		return nil
	}},
	{[]string{"DYN_ROUTER_CONDITIONAL_DISAGG_EFF_ISL_RATIO_THRESHOLD"}, floatEnv(func(c *sched.Config) *float64 { return &c.ConditionalDisaggEffISLRatioThreshold })},
	{[]string{"DYN_ROUTER_ACTIVE_REQUEST_EXPIRY_SECS"}, func(c *sched.Config, _, s string) error {
		// Whole seconds. Dynamo falls back to the default for an invalid
		// or zero expiry; so do we.
		n, err := strconv.ParseUint(s, 10, 32)
		if err != nil || n == 0 {
			c.ActiveRequestExpiry = sched.DefaultActiveRequestExpiry
			return nil
		}
		c.ActiveRequestExpiry = time.Duration(n) * time.Second
		return nil
	}},
}

func floatEnv(field func(*sched.Config) *float64) func(*sched.Config, string, string) error {
	return func(c *sched.Config, name, s string) error {
		x, err := strconv.ParseFloat(s, 64)
		if err != nil {
			return fmt.Errorf("%s: %q is not a number", name, s)
		}
		*field(c) = x
		return nil
	}
}

func optFloatEnv(field func(*sched.Config) **float64) func(*sched.Config, string, string) error {
	return func(c *sched.Config, name, s string) error {
		x, err := strconv.ParseFloat(s, 64)
		if err != nil {
			return fmt.Errorf("%s: %q is not a number", name, s)
		}
		*field(c) = &x
		return nil
	}
}

func boolEnv(field func(*sched.Config) *bool) func(*sched.Config, string, string) error {
	return func(c *sched.Config, name, s string) error {
		b, err := parseBool(s)
		if err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
		*field(c) = b
		return nil
	}
}

// applyEnv maps the environment onto the configs: schedEnv and the index
// shape (readIndexEnv).
func applyEnv(o *serveOptions, env func(string) (string, bool)) error {
	for _, row := range schedEnv {
		for _, name := range row.names {
			s, ok := env(name)
			if !ok {
				continue
			}
			if err := row.set(&o.core.Sched, name, strings.TrimSpace(s)); err != nil {
				return err
			}
			break
		}
	}
	if s, ok := env("DYN_ROUTER_POLICY_CONFIG"); ok {
		o.policyConfig = strings.TrimSpace(s)
	}
	if s, ok := env("DYN_ROUTER_OVERLAP_REFRESH_AFTER_SECS"); ok {
		x, err := strconv.ParseFloat(strings.TrimSpace(s), 64)
		if err != nil || math.IsNaN(x) || x < 0 || x > 1e9 {
			return fmt.Errorf("DYN_ROUTER_OVERLAP_REFRESH_AFTER_SECS: %q is not a number of seconds >= 0", s)
		}
		o.core.OverlapRefreshAfter = time.Duration(x * float64(time.Second))
	}
	if err := readIndexEnv(o, env); err != nil {
		return err
	}
	var err error
	if o.envPolicy, err = policyEnv(env, "DYN_ROUTER_WORKER_SELECTION_POLICY"); err != nil {
		return err
	}
	if o.core.Disagg.PrefillPolicy, err = policyEnv(env, "DYN_ROUTER_PREFILL_POLICY"); err != nil {
		return err
	}
	if o.core.Disagg.DecodePolicy, err = policyEnv(env, "DYN_ROUTER_DECODE_POLICY"); err != nil {
		return err
	}
	if s, ok := env("DYN_ROUTER_REPLICA_SYNC"); ok && strings.TrimSpace(s) != "" {
		b, err := parseBool(s)
		if err != nil {
			return fmt.Errorf("DYN_ROUTER_REPLICA_SYNC: %v", err)
		}
		// false is the reference's default and changes nothing: the
		// mesh is on exactly when --replica-sync-port is given.
		o.replicaSyncEnv = b
	}
	return nil
}

func parseBool(s string) (bool, error) {
	switch strings.ToLower(strings.TrimSpace(s)) {
	case "1", "true", "yes", "on":
		return true, nil
	case "0", "false", "no", "off":
		return false, nil
	}
	return false, fmt.Errorf("%q is not a boolean", s)
}

// parseReplicaSync checks --replica-sync-port (given: set) and
// --replica-sync-peers, for serve and epp alike: the port (0: no mesh) and
// the peers' endpoints.
func parseReplicaSync(set bool, port int, peers string) (int, []string, error) {
	if set && (port <= 0 || port > math.MaxUint16) {
		return 0, nil, errors.New("replica sync port must be greater than zero")
	}
	if !set {
		port = 0
	}
	if peers == "" {
		return port, nil, nil
	}
	if !set {
		return 0, nil, errors.New("--replica-sync-peers requires --replica-sync-port")
	}
	var out []string
	for _, p := range splitList(peers) {
		if err := mesh.ValidatePeer(p); err != nil {
			return 0, nil, fmt.Errorf("--replica-sync-peers: %v", err)
		}
		out = append(out, p)
	}
	return port, out, nil
}
