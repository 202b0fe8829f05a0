package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/kvselect/kvselect/bench"
	"github.com/kvselect/kvselect/bench/sim"
)

const benchUsage = `usage: kvselect bench [flags]

Drives a selector with the selection API's calls and reports throughput and
latency, optionally as ratios to a no-op fasthttp server measured in the same
run with the same client and bodies (--baseline noop).

With --simulate it measures routing quality instead: the workload (e.g.
--workload trace:mooncake_trace_1000.jsonl) is replayed in virtual time
through simulated vLLM engines (continuous batching, chunked prefill, prefix
caching, preemption; Meta-Llama-3-8B on an A100 step times) whose KV events
reach the selector over ZMQ, at 50% and 90% of the cluster's measured
capacity, routed by kvselect (its default policy), kvselect's cache_balance
policy, round-robin and random in turn; the report gives each policy's KV
hit rate, TTFT and end-to-end latency, throughput, preemptions and load
balance.

`

// runBench is `kvselect bench`: parse flags, build a bench.Config, run, print
// the table, write --json. Exit codes: 0 done, 1 reservations leaked, 2 the
// run could not be made.
func runBench(args []string) int {
	return benchMain(context.Background(), args, os.Stdout, os.Stderr)
}

func benchMain(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	cfg := bench.DefaultConfig()
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprint(stderr, benchUsage)
		fs.PrintDefaults()
	}
	var (
		mix       = fs.String("mix", cfg.Mix.String(), "calls per operation: select, reserve (select_and_reserve + DELETE), lifecycle (select_and_reserve, prefill_complete, output_block x N, DELETE) disagg (POST /disagg/plan, /disagg/{id}/prefill_complete, DELETE /disagg/{id} over a prefill and a decode pool of --workers each) or epp (one Envoy ext_proc stream, full duplex, through an in-process `kvselect epp` fed by the engines' KV events: headers, an OpenAI completions body, the pick, the echoed body, response headers, --output-blocks SSE chunks of one block each, end of stream; always against a no-op ext_proc server in the same run)")
		jsonPath  = fs.String("json", "", "write the report as JSON to this file")
		plotPath  = fs.String("plot", "", "draw the run into this file, .svg or .html (self-contained): the latency CDF of the selector and the no-op baseline (log latency, p50/p99/p99.9 marked); with --simulate, every policy's TTFT CDF and per-worker load bars")
		kvEvents  = fs.String("kv-events-endpoints", "", "comma-separated ZMQ endpoints; worker i registers endpoint i mod n as its rank-0 kv_events_endpoints (default: none sent)")
		noBar     = fs.Bool("no-progress", false, "no progress bar even on a terminal")
		serveNoop = fs.String("serve-noop", "", "instead of a run, serve the no-op baseline handler on this address until interrupted (to measure the client against a server in another process)")
		synthetic = cfg.Synthetic
		simulate  = fs.Bool("simulate", false, "routing quality instead of load: replay the workload in virtual time through simulated vLLM engines publishing real ZMQ KV events, routed by each policy of --policies, at each of --loads, and report KV hit rate, TTFT, end-to-end latency, throughput, preemptions and load balance per policy")
		simCfg    = sim.DefaultConfig()
		loads     = fs.String("loads", "0.5,0.9", "--simulate: load levels as fractions of the cluster's capacity, which the run measures first (ignored with --time-scale or --rate)")
		policies  = fs.String("policies", "all", "--simulate: policies to run, in order; \"all\" (the default) is every policy ("+strings.Join(sim.AllPolicies, ",")+"), \"peers\" the peer routers' ("+strings.Join(sim.PeerPolicies, ",")+"), \"own\" kvselect's and the baselines ("+strings.Join(sim.Policies, ",")+")")
	)
	fs.StringVar(&cfg.Target, "target", "", "base URL of a running selector, e.g. http://127.0.0.1:8092 (default: start one in-process)")
	fs.IntVar(&cfg.Concurrency, "concurrency", cfg.Concurrency, "client goroutines (closed loop) or the pool serving the schedule (open loop)")
	fs.Float64Var(&cfg.Rate, "rate", 0, "open loop: operations per second, latency from the intended send time (0: closed loop); with --simulate: one level instead of --loads, conversations of the synthetic workload starting at this rate per second")
	fs.DurationVar(&cfg.Duration, "duration", cfg.Duration, "measured window")
	fs.DurationVar(&cfg.Warmup, "warmup", cfg.Warmup, "warm-up before the measured window (not recorded)")
	fs.IntVar(&cfg.OutputBlocks, "output-blocks", cfg.OutputBlocks, "output_block calls per lifecycle")
	fs.StringVar(&cfg.Workload, "workload", cfg.Workload, "synthetic, synthetic:chat (multi-turn chat), synthetic:agent (agentic sessions with tool calls), synthetic:short (one-turn prompts of at most 256 tokens) or trace:FILE (Mooncake JSONL)")
	fs.IntVar(&cfg.TraceLimit, "trace-limit", 0, "replay only the trace's first N requests (0: all), e.g. a quick look at the bundled trace")
	fs.IntVar(&cfg.TraceRepeat, "trace-repeat", 0, "replay a trace this many times, each copy after the previous one with its own content (e.g. 12 turns mooncake_trace_1000.jsonl into 12,000 requests)")
	fs.IntVar(&synthetic.Prompts, "prompts", synthetic.Prompts, "synthetic workload: prompts generated (the run cycles over them)")
	fs.Int64Var(&cfg.Seed, "seed", cfg.Seed, "seed of the synthetic workload; with --simulate also of the random policy, the think times and, with the in-process selector, of its tie-breaks (--rand-seed)")
	fs.IntVar(&cfg.Workers, "workers", cfg.Workers, "workers registered with POST /workers before the run (0: none)")
	fs.IntVar(&cfg.BlockSize, "block-size", cfg.BlockSize, "KV block size in tokens registered for the workers (--simulate: default 64)")
	fs.IntVar(&cfg.TotalKVBlocks, "total-kv-blocks", 0, "total_kv_blocks registered per worker (0: omitted)")
	fs.StringVar(&cfg.PromptForm, "prompt-form", cfg.PromptForm, "how selection bodies carry a prompt: hashes (block_hashes, sequence_hashes, isl_tokens), tokens (token_ids, hashed by the selector) or text (prompt, tokenized by the selector with --model-path's tokenizer, then hashed)")
	var benchModels []modelPath
	addModelPathFlag(fs, &benchModels, "--prompt-form text: the workload's prompts are spelled in its words and the in-process selector gets the same flag (one model; a --target must have been started with it)")
	fs.IntVar(&cfg.EngineBlocks, "engine-blocks", defaultEngineBlocks, "KV pool in blocks of the simulated engine started per worker, whose endpoint is registered as its kv_events_endpoints (0: no engines); with --target only when given")
	fs.BoolVar(&cfg.Fill, "fill", true, "before the load, route every prompt once through the selector and serve it on the chosen worker's engine, whose KV events fill the selector's index (needs engines); false leaves the index empty")
	fs.StringVar(&cfg.Baseline, "baseline", "", "noop: also drive an in-process no-op fasthttp server in the same run and report ratios")
	fs.IntVar(&cfg.Replicas, "replicas", 1, "in-process kvselect replicas meshed over loopback ZMQ to spread the load over (operations alternate between them); > 1 also drives one replica alone in the same run and reports the throughput ratio and the booking propagation lag between replicas")
	benchPlane := fs.String("event-plane", "zmq", "with --replicas > 1: zmq (the replicas meshed over loopback ZMQ) or nats (besides, as many replicas over the NATS event plane, embedded servers clustered through routes, measured in the same rounds and reported beside the mesh)")
	fs.DurationVar(&cfg.ProbeInterval, "probe-interval", cfg.ProbeInterval, "with --replicas > 1: pause between two propagation probes (a booking on one replica, timed from its publish there until the other applies it; up to 8 in flight, a busy tick skipped)")
	fs.IntVar(&cfg.Rounds, "rounds", cfg.Rounds, "with --replicas > 1 or --baseline noop: alternating windows, each of --duration/N, in which one replica and the replicas, or the baseline and the selector, are measured (one long window each would give the second whatever else the machine ran then)")
	fs.IntVar(&cfg.EPPConns, "epp-conns", 4, "--mix epp: gRPC connections from the client to each ext_proc server (Envoy opens one per worker thread)")
	fs.StringVar(&cfg.ProfileDir, "profile", "", "write cpu, heap, mutex and block profiles of the server's measured window (from /debug/pprof) into this directory, and with --baseline noop (or --mix epp) noop-cpu.pprof, this process over the baseline's window: the two CPU profiles differ by the selector's work")
	fs.StringVar(&cfg.PprofURL, "pprof", "", "pprof base URL for --profile: the selector's --debug-addr, e.g. http://127.0.0.1:6060/debug/pprof (default: the in-process server's; required with --target)")
	fs.DurationVar(&cfg.Timeout, "timeout", cfg.Timeout, "per-call read and write timeout")
	fs.IntVar(&simCfg.CapacityBlocks, "capacity-blocks", simCfg.CapacityBlocks, "--simulate: KV pool of each engine in blocks (num_gpu_blocks)")
	fs.IntVar(&simCfg.MaxBatchedTokens, "max-batched-tokens", simCfg.MaxBatchedTokens, "--simulate: each engine's token budget per step (max_num_batched_tokens)")
	fs.IntVar(&simCfg.MaxNumSeqs, "max-num-seqs", simCfg.MaxNumSeqs, "--simulate: each engine's running requests at most (max_num_seqs)")
	fs.Float64Var(&simCfg.ThinkTime, "think-time", simCfg.ThinkTime, "--simulate: mean seconds between a conversation turn's end and its next user turn (synthetic workloads)")
	fs.Float64Var(&simCfg.ToolThinkTime, "tool-think-time", simCfg.ToolThinkTime, "--simulate: mean seconds between a turn's end and the next turn carrying a tool's result (synthetic workloads)")
	fs.Float64Var(&simCfg.TimeScale, "time-scale", simCfg.TimeScale, "--simulate: one level instead of --loads: the trace's timestamps times this (0.5 replays it twice as fast)")
	fs.DurationVar(&simCfg.SyncTimeout, "sync-timeout", simCfg.SyncTimeout, "--simulate: how long to wait for the selector to apply one KV event batch")
	fs.StringVar(&simCfg.ApproxTarget, "approx-target", "", "--simulate with --target: base URL of a selector without KV events (DYN_USE_KV_EVENTS=false) for the approximate policy; without --target one runs in this process")
	fs.DurationVar(&cfg.ReadyTimeout, "ready-timeout", cfg.ReadyTimeout, "how long to wait for GET /ready after registration")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "kvselect bench: unexpected arguments %q\n", fs.Args())
		return 2
	}
	if *serveNoop != "" {
		return serveNoopUntilSignal(ctx, *serveNoop, stderr)
	}
	if *plotPath != "" {
		if err := checkPlotPath(*plotPath); err != nil {
			fmt.Fprintf(stderr, "kvselect bench: %v\n", err)
			return 2
		}
	}
	m, err := bench.ParseMix(*mix)
	if err != nil {
		fmt.Fprintf(stderr, "kvselect bench: %v\n", err)
		return 2
	}
	cfg.Mix = m
	cfg.Synthetic = synthetic
	if *kvEvents != "" {
		cfg.KVEventsEndpoints = strings.Split(*kvEvents, ",")
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	if *simulate {
		// The simulation brings its own engines, one set per policy.
		cfg.EngineBlocks, cfg.Fill = 0, false
		if !set["block-size"] {
			cfg.BlockSize = simBlockSize
		}
		if set["rate"] {
			simCfg.ArrivalRate, cfg.Rate = cfg.Rate, 0
		}
		simCfg.Policies = splitList(*policies)
		simCfg.Loads = nil
		if !set["time-scale"] && !set["rate"] {
			for _, s := range splitList(*loads) {
				l, err := strconv.ParseFloat(s, 64)
				if err != nil {
					fmt.Fprintf(stderr, "kvselect bench: --loads: %q is not a number\n", s)
					return 2
				}
				simCfg.Loads = append(simCfg.Loads, l)
			}
		}
		if cfg.Target == "" {
			// Seeded tie-breaks: a run is reproducible from --seed.
			seed := strconv.FormatUint(uint64(cfg.Seed)|1<<63, 10)
			cfg.StartServer = inProcessServer(stderr, false, "--rand-seed", seed)
			if simCfg.ApproxTarget == "" {
				// The approximate policy: the same selector without KV
				// events. Its TTL runs in wall time, which a simulation
				// compresses: with the default 120 s nothing expires during
				// a run, and only the cap bounds its predictions.
				simCfg.StartApproxServer = inProcessServer(stderr, false, "--no-router-kv-events", "--rand-seed", seed)
			}
		}
		cfg.Log = stderr
		ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
		defer stop()
		return simulateMain(ctx, cfg, simCfg, *jsonPath, *plotPath, stdout, stderr)
	}
	if len(cfg.KVEventsEndpoints) > 0 || (cfg.Target != "" && !set["engine-blocks"]) {
		// Engines of the caller's, or a remote selector that may not reach
		// this machine's loopback: no engines of the harness's, no fill.
		cfg.EngineBlocks = 0
	}
	cfg.Fill = cfg.Fill && cfg.EngineBlocks > 0
	if *benchPlane != "zmq" && (*benchPlane != "nats" || cfg.Replicas < 2) {
		fmt.Fprintln(stderr, "kvselect bench: --event-plane is zmq, or nats with --replicas > 1")
		return 2
	}
	if cfg.Replicas > 1 && cfg.Target != "" {
		fmt.Fprintln(stderr, errNoReplicas)
		return 2
	}
	if len(benchModels) > 1 {
		fmt.Fprintln(stderr, "kvselect bench: --model-path: one model at most")
		return 2
	}
	if len(benchModels) == 1 {
		toks, err := loadTokenizers(benchModels)
		if err != nil {
			fmt.Fprintf(stderr, "kvselect bench: %v\n", err)
			return 2
		}
		cfg.Tokenizer = toks[benchModels[0].name]
	}
	if cfg.Target == "" {
		// The default: kvselect in this process, with one simulated engine
		// per worker publishing real KV events (see inprocess.go).
		var extra []string
		if cfg.ProfileDir != "" {
			// Sample contention so the mutex and block profiles are not empty.
			extra = []string{"--pprof-mutex-fraction", "100", "--pprof-block-rate", "1000000"}
		}
		for _, mp := range benchModels {
			extra = append(extra, "--model-path", mp.name+"="+mp.dir)
		}
		cfg.StartServer = inProcessServer(stderr, cfg.ProfileDir != "", extra...)
		if cfg.Mix == bench.MixEPP {
			// --mix epp: `kvselect epp` in this process, its workers from
			// the harness's workers file (its HTTP port serves no POST
			// /workers); the profiling flags are serve's only.
			var eppExtra []string
			for _, mp := range benchModels {
				eppExtra = append(eppExtra, "--model-path", mp.name+"="+mp.dir)
			}
			cfg.StartEPP = inProcessEpp(stderr, cfg.ProfileDir != "", eppExtra...)
		}
		if cfg.Replicas > 1 {
			// --replicas: that many replicas, and one alone (replicas.go).
			cfg.StartReplicas = inProcessReplicas(cfg.ProfileDir != "", extra...)
			if *benchPlane == "nats" {
				cfg.StartAltReplicas, cfg.AltLabel = inProcessNATSReplicas(extra...), "the NATS event plane"
			}
		}
	}
	if f, ok := stdout.(*os.File); ok && !*noBar && bench.IsTerminal(f) {
		cfg.Progress = f
	}
	cfg.Log = stderr

	ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()
	start := time.Now()
	rep, err := bench.Run(ctx, cfg)
	if err != nil {
		fmt.Fprintf(stderr, "kvselect bench: %v\n", err)
		return 2
	}
	if err := writeReport(rep, *jsonPath, stdout); err != nil {
		fmt.Fprintf(stderr, "kvselect bench: %v\n", err)
		return 2
	}
	if *plotPath != "" {
		if err := plotLoad(*plotPath, rep); err != nil {
			fmt.Fprintf(stderr, "kvselect bench: --plot: %v\n", err)
			return 2
		}
		fmt.Fprintf(stderr, "kvselect bench: plot written to %s\n", *plotPath)
	}
	fmt.Fprintf(stderr, "kvselect bench: done in %.1f s\n", time.Since(start).Seconds())
	switch {
	case rep.LeakedReservations < 0:
		fmt.Fprintln(stderr, "kvselect bench: FAIL: could not read GET /loads to check for leaked reservations")
		return 1
	case rep.LeakedReservations > 0:
		fmt.Fprintf(stderr, "kvselect bench: FAIL: %d reservations left active after the run\n", rep.LeakedReservations)
		return 1
	}
	return 0
}

// defaultEngineBlocks is --engine-blocks' default: 16,384 blocks of 16
// tokens (262k tokens, the KV cache of a Llama-3-8B, 128 KiB per token, in
// 32 GiB) per engine. The 8 engines of `make bench` hold 131k blocks
// together, a large part of the default synthetic workload's distinct
// content (the fill reports what it held and evicted).
const defaultEngineBlocks = 16384

// simBlockSize is --simulate's default block size: 64-token blocks keep a
// Mooncake prompt (mean 9,792 tokens) at about 150 blocks, so the engines'
// KV events and the selector's index stay small while a 512-token trace
// block still spans 8 blocks.
const simBlockSize = 64

// simulateMain is `kvselect bench --simulate`. Exit codes: 0 done, 1 the
// kvselect policy left reservations, failed calls or unapplied batches, 2
// the run could not be made.
func simulateMain(ctx context.Context, cfg bench.Config, simCfg sim.Config, jsonPath, plotPath string, stdout, stderr io.Writer) int {
	rep, err := sim.Run(ctx, cfg, simCfg)
	if err != nil {
		fmt.Fprintf(stderr, "kvselect bench: %v\n", err)
		return 2
	}
	if err := writeReport(rep, jsonPath, stdout); err != nil {
		fmt.Fprintf(stderr, "kvselect bench: %v\n", err)
		return 2
	}
	if plotPath != "" {
		if err := plotSimulation(plotPath, rep); err != nil {
			fmt.Fprintf(stderr, "kvselect bench: --plot: %v\n", err)
			return 2
		}
		fmt.Fprintf(stderr, "kvselect bench: plot written to %s\n", plotPath)
	}
	for _, lv := range rep.Levels {
		for _, name := range []string{sim.PolicyKVSelect, sim.PolicyCacheBalance, sim.PolicyApprox} {
			if k := lv.Policies[name]; k != nil && (k.LeakedReservations != 0 || len(k.Errors) > 0 || k.SyncTimeouts > 0) {
				fmt.Fprintf(stderr, "kvselect bench: FAIL: the %s policy leaked reservations, had failed calls or unapplied KV event batches (see the report)\n", name)
				return 1
			}
		}
	}
	return 0
}

// serveNoopUntilSignal is `kvselect bench --serve-noop ADDR`.
func serveNoopUntilSignal(ctx context.Context, addr string, stderr io.Writer) int {
	url, stop, err := bench.StartNoop(addr)
	if err != nil {
		fmt.Fprintf(stderr, "kvselect bench: %v\n", err)
		return 2
	}
	fmt.Fprintf(stderr, "kvselect bench: no-op baseline serving at %s; interrupt to stop\n", url)
	ctx, cancel := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer cancel()
	<-ctx.Done()
	stop()
	return 0
}

// report is what the load run and the simulation both produce.
type report interface {
	WriteTable(w io.Writer) error
	WriteJSONFile(path string) error
}

// writeReport prints rep's table to stdout and, with a path, writes its JSON.
func writeReport(rep report, jsonPath string, stdout io.Writer) error {
	if err := rep.WriteTable(stdout); err != nil {
		return err
	}
	if jsonPath != "" {
		return rep.WriteJSONFile(jsonPath)
	}
	return nil
}
