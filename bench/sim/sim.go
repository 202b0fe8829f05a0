package sim

import (
	"context"
	"fmt"
	"io"
	"math"
	"slices"
	"time"

	"github.com/kvselect/kvselect/bench"
	"github.com/kvselect/kvselect/bench/sim/vllm"
)

// Config shapes a routing-quality simulation (Run). The workload, the
// worker count, the block size, the seed, the selector (Target or
// StartServer) and the HTTP timeouts come from the bench.Config given to
// Run.
type Config struct {
	// CapacityBlocks is each engine's KV pool in blocks (num_gpu_blocks).
	CapacityBlocks int
	// MaxBatchedTokens is each engine's per-step token budget
	// (max_num_batched_tokens), also registered with the selector.
	MaxBatchedTokens int
	// MaxNumSeqs caps each engine's running requests (max_num_seqs).
	MaxNumSeqs int
	// Step is the engines' step-time model.
	Step vllm.StepModel
	// Loads are the load levels to simulate, as fractions of the
	// cluster's capacity (Run measures it first; see the package doc).
	// Empty: one level at TimeScale (a trace) or ArrivalRate (a
	// synthetic workload) instead.
	Loads []float64
	// TimeScale multiplies a trace's arrival times when Loads is empty
	// (0.5 replays it at twice the rate).
	TimeScale float64
	// ArrivalRate is the rate in requests per second at which a
	// synthetic workload's conversations start their first turns (a
	// Poisson process) when Loads is empty.
	ArrivalRate float64
	// ThinkTime is the mean pause in seconds (exponential) between the end
	// of a conversation's turn and the arrival of its next turn, a user
	// reading and typing; ToolThinkTime the pause before a turn that
	// carries a tool's result (an agent's tool call running).
	ThinkTime, ToolThinkTime float64
	// Policies are the policies to run, in order (Policies' names).
	Policies []string
	// SyncTimeout bounds the wait for the selector to apply one round of
	// KV event batches (see the package doc).
	SyncTimeout time.Duration
	// ApproxTarget is the base URL of a selector running without KV events
	// (approximate mode), for the approximate policy; empty means: start
	// one with StartApproxServer. With neither, the policy is skipped.
	ApproxTarget      string
	StartApproxServer func() (bench.Server, error)
}

// DefaultConfig returns the simulation defaults, for block size 64 and 8
// workers: vllm.DefaultConfig's engines (6,144 blocks of 64 tokens, 8,192
// tokens per step, 256 sequences, Meta-Llama-3-8B on an A100 80GB), load
// levels of 50% and 90% of capacity, 5 s of thinking between a user's
// turns and 1 s before a tool result, and every policy.
func DefaultConfig() Config {
	e := vllm.DefaultConfig()
	return Config{
		CapacityBlocks:   e.NumBlocks,
		MaxBatchedTokens: e.MaxBatchedTokens,
		MaxNumSeqs:       e.MaxNumSeqs,
		Step:             e.Step,
		Loads:            []float64{0.5, 0.9},
		TimeScale:        1,
		ArrivalRate:      2,
		ThinkTime:        5,
		ToolThinkTime:    1,
		Policies:         slices.Clone(AllPolicies),
		SyncTimeout:      5 * time.Second,
	}
}

// Validate reports the first invalid field.
func (s *Config) Validate() error {
	ec := s.engineConfig(64)
	if err := ec.Validate(); err != nil {
		return fmt.Errorf("%w: %w", bench.ErrConfig, err)
	}
	for _, l := range s.Loads {
		if !(l > 0) || math.IsInf(l, 0) {
			return fmt.Errorf("%w: load level %v must be > 0", bench.ErrConfig, l)
		}
	}
	switch {
	case len(s.Loads) == 0 && (!(s.TimeScale > 0) || math.IsInf(s.TimeScale, 0)):
		return fmt.Errorf("%w: time scale %v must be > 0", bench.ErrConfig, s.TimeScale)
	case len(s.Loads) == 0 && !(s.ArrivalRate > 0):
		return fmt.Errorf("%w: arrival rate %v must be > 0", bench.ErrConfig, s.ArrivalRate)
	case !(s.ThinkTime >= 0) || !(s.ToolThinkTime >= 0) || math.IsInf(s.ThinkTime+s.ToolThinkTime, 0):
		return fmt.Errorf("%w: think times must be finite and >= 0", bench.ErrConfig)
	case s.SyncTimeout <= 0:
		return fmt.Errorf("%w: sync timeout %v must be > 0", bench.ErrConfig, s.SyncTimeout)
	case len(s.Policies) == 0:
		return fmt.Errorf("%w: no policy to simulate", bench.ErrConfig)
	}
	for _, p := range s.Policies {
		if !slices.Contains(AllPolicies, p) {
			return fmt.Errorf("%w: unknown policy %q (want some of %v, or %q, %q, %q)", bench.ErrConfig, p, AllPolicies, PolicyGroupAll, PolicyGroupPeers, PolicyGroupOwn)
		}
	}
	return nil
}

func (s *Config) engineConfig(bs int) vllm.Config {
	return vllm.Config{BlockSize: bs, NumBlocks: s.CapacityBlocks, MaxBatchedTokens: s.MaxBatchedTokens, MaxNumSeqs: s.MaxNumSeqs, Step: s.Step}
}

// Policy names, in the report's order.
const (
	// PolicyKVSelect is the selector as configured (kvselect's default:
	// the reference's policy, Dynamo's decisions).
	PolicyKVSelect = "kvselect"
	// PolicyCacheBalance is the selector with
	// router_config_override.routing_policy "cache_balance" on every
	// request (kvselect's own policy; a selector without it ignores the
	// key and decides as PolicyKVSelect).
	PolicyCacheBalance = "cache_balance"
	// PolicyApprox is kvselect without KV events: its selector predicts
	// the engines' caches from its own bookings (approximate mode).
	PolicyApprox     = "approximate"
	PolicyRoundRobin = "round_robin"
	PolicyRandom     = "random"
)

// Policies are the policies a run simulates by default (DefaultConfig,
// --policies), in the report's order: kvselect's and the baselines.
var Policies = []string{PolicyKVSelect, PolicyCacheBalance, PolicyApprox, PolicyRoundRobin, PolicyRandom}

// PeerPolicies are the peer routers' policies (package bench/sim/peers).
var PeerPolicies = []string{PolicySGLang, PolicySMG, PolicyLLMD, PolicyLLMDPrecise, PolicyProdStack, PolicyAIBrix}

// AllPolicies are every policy Run can simulate, in the report's order:
// kvselect's, the peers', the baselines.
var AllPolicies = []string{
	PolicyKVSelect, PolicyCacheBalance, PolicyApprox,
	PolicySGLang, PolicySMG, PolicyLLMD, PolicyLLMDPrecise, PolicyProdStack, PolicyAIBrix,
	PolicyRoundRobin, PolicyRandom,
}

// Policy groups ExpandPolicies accepts in a list of names.
const (
	PolicyGroupAll   = "all"   // AllPolicies
	PolicyGroupPeers = "peers" // PeerPolicies
	PolicyGroupOwn   = "own"   // Policies: kvselect's and the baselines
)

// ExpandPolicies replaces the groups "all" and "peers" in names by their
// policies, keeping the first occurrence of each name.
func ExpandPolicies(names []string) []string {
	var out []string
	add := func(n string) {
		if !slices.Contains(out, n) {
			out = append(out, n)
		}
	}
	for _, n := range names {
		switch n {
		case PolicyGroupAll:
			for _, p := range AllPolicies {
				add(p)
			}
		case PolicyGroupPeers:
			for _, p := range PeerPolicies {
				add(p)
			}
		case PolicyGroupOwn:
			for _, p := range Policies {
				add(p)
			}
		default:
			add(n)
		}
	}
	return out
}

// ReferenceNames are the names under which the reference routers know
// kvselect's policies: kvselect's default is the reference's (NVIDIA
// Dynamo's KV router cost, ai-dynamo/dynamo:lib/kv-router/src/scheduling).
var ReferenceNames = map[string]string{PolicyKVSelect: "dynamo_kv_router"}

// selectorPolicy reports whether policy name asks a selector.
func selectorPolicy(name string) bool {
	return name == PolicyKVSelect || name == PolicyCacheBalance || name == PolicyApprox
}

// Run measures the cluster's capacity (unless cfg.Loads is empty), then
// replays load.Workload at every load level through fresh simulated
// engines once per policy of cfg.Policies, the same requests in the same
// order, and reports each policy's KV hit rate, latencies, throughput,
// preemptions and load balance. See the package doc for the model and the
// synchronisation with the selector. Of load it uses the workload,
// Workers, BlockSize, Seed, the selector (Target or StartServer), the
// timeouts and Log.
func Run(ctx context.Context, load bench.Config, cfg Config) (*Report, error) {
	if err := load.Validate(); err != nil {
		return nil, err
	}
	cfg.Policies = ExpandPolicies(cfg.Policies)
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if load.Workers < 1 {
		return nil, fmt.Errorf("%w: --simulate needs at least one worker", bench.ErrConfig)
	}
	logw := load.Log
	if logw == nil {
		logw = io.Discard
	}
	start := time.Now()
	prompts, desc, err := bench.LoadWorkload(&load)
	if err != nil {
		return nil, err
	}
	fmt.Fprintf(logw, "workload %s\n", desc)
	w, err := newWorkload(prompts, &load, &cfg)
	if err != nil {
		return nil, err
	}
	ec := cfg.engineConfig(load.BlockSize)
	rep := &Report{
		Workload: desc, Workers: load.Workers, BlockSize: load.BlockSize,
		CapacityBlocks: cfg.CapacityBlocks, Seed: load.Seed, Policies: map[string]*PolicyResult{},
		HitRateBound: w.hitRateBound(load.BlockSize),
		PrefillTPS:   float64(ec.MaxBatchedTokens) / (ec.Step.Linear(ec.MaxBatchedTokens) + ec.Step.Attention(0, ec.MaxBatchedTokens)),
		DecodeTPS:    1 / (ec.Step.Linear(1) + ec.Step.Attention(1024, 1)),
		Engine: EngineReport{
			Model: "Meta-Llama-3-8B on an A100 80GB (Vidur profile; bench/sim/vllm.StepModel)", MaxBatchedTokens: ec.MaxBatchedTokens,
			MaxNumSeqs: ec.MaxNumSeqs, Step: ec.Step,
		},
	}
	levels, err := planLevels(ctx, w, &load, &cfg, rep, logw)
	if err != nil {
		return nil, err
	}

	if slices.Contains(cfg.Policies, PolicyApprox) && cfg.ApproxTarget == "" && cfg.StartApproxServer == nil {
		fmt.Fprintf(logw, "policy %s: skipped (no selector without KV events: --approx-target)\n", PolicyApprox)
	}
	for _, lv := range levels {
		w.arrange(lv, &cfg, load.Seed)
		lv.HitRateBoundPooled = w.pooledBound(load.BlockSize, cfg.CapacityBlocks*load.Workers)
		for _, name := range cfg.Policies {
			if err := ctx.Err(); err != nil {
				return nil, err
			}
			target, stop, err := selectorFor(name, &load, &cfg, logw)
			if err != nil {
				return nil, err
			}
			if name == PolicyApprox && target == "" {
				continue
			}
			if rep.Target == "" && name != PolicyApprox {
				rep.Target = target
			}
			t0 := time.Now()
			res, err := simulatePolicy(ctx, name, target, &load, &cfg, w)
			stop()
			if err != nil {
				return nil, fmt.Errorf("sim: policy %s at %s: %w", name, lv.label(), err)
			}
			res.shareOfBounds(rep.HitRateBound, lv.HitRateBoundPooled)
			lv.Policies[name] = res
			fmt.Fprintf(logw, "%s, %s: hit rate %.3f, TTFT p50 %.0f ms p99 %.0f ms (%.1f s)\n",
				lv.label(), name, res.HitRate, res.TTFTp50ms, res.TTFTp99ms, time.Since(t0).Seconds())
			if res.SyncTimeouts > 0 {
				rep.Warnings = append(rep.Warnings, fmt.Sprintf("%s, %s: %d rounds of KV event batches not applied by the selector within %v", lv.label(), name, res.SyncTimeouts, cfg.SyncTimeout))
			}
			if res.LeakedReservations != 0 {
				rep.Warnings = append(rep.Warnings, fmt.Sprintf("%s, %s: leaked reservations %d", lv.label(), name, res.LeakedReservations))
			}
		}
		rep.Levels = append(rep.Levels, lv)
	}
	// The summary fields are the highest load level's.
	top := rep.Levels[len(rep.Levels)-1]
	rep.Policies, rep.TimeScale, rep.HitRateBoundPooled = top.Policies, top.TimeScale, top.HitRateBoundPooled
	rep.ReferenceNames = ReferenceNames
	rep.WallS = time.Since(start).Seconds()
	return rep, nil
}

// planLevels returns the levels to simulate: cfg.Loads as fractions of the
// capacity that measureCapacity finds, or one level at the configured
// time scale or arrival rate.
func planLevels(ctx context.Context, w *workload, load *bench.Config, cfg *Config, rep *Report, logw io.Writer) ([]*Level, error) {
	if len(cfg.Loads) == 0 {
		lv := &Level{TimeScale: cfg.TimeScale, Policies: map[string]*PolicyResult{}}
		if w.trace {
			lv.ArrivalRPS = w.traceRate() / cfg.TimeScale
		} else {
			lv.ArrivalRPS = cfg.ArrivalRate
		}
		return []*Level{lv}, nil
	}
	t0 := time.Now()
	capRPS, err := measureCapacity(ctx, w, load, cfg)
	if err != nil {
		return nil, err
	}
	rep.CapacityRPS = capRPS
	fmt.Fprintf(logw, "capacity %.2f requests/s (round-robin, every request queued at once; %.1f s)\n", capRPS, time.Since(t0).Seconds())
	var levels []*Level
	for _, l := range cfg.Loads {
		lv := &Level{Load: l, ArrivalRPS: l * capRPS, Policies: map[string]*PolicyResult{}}
		if w.trace {
			lv.TimeScale = w.traceRate() / lv.ArrivalRPS
		}
		levels = append(levels, lv)
	}
	return levels, nil
}

// selectorFor returns the selector that policy name's run asks ("" and a
// no-op stop for the policies that ask none) and the function that stops
// it. A selector run in process is started for the run alone, so its
// seeded tie-break source (--rand-seed) starts afresh and a policy's
// figures do not depend on which policies ran before it; an external
// selector (load.Target, cfg.ApproxTarget) is shared by every run.
func selectorFor(name string, load *bench.Config, cfg *Config, logw io.Writer) (string, func(), error) {
	switch {
	case name == PolicyApprox:
		return resolveApprox(cfg, logw)
	case selectorPolicy(name):
		return bench.ResolveTarget(load, logw)
	}
	return "", func() {}, nil
}

// resolveApprox returns the approximate policy's selector: ApproxTarget, or
// one started with StartApproxServer; "" when there is neither.
func resolveApprox(cfg *Config, logw io.Writer) (string, func(), error) {
	if cfg.ApproxTarget != "" {
		return cfg.ApproxTarget, func() {}, nil
	}
	if cfg.StartApproxServer == nil {
		return "", func() {}, nil
	}
	srv, err := cfg.StartApproxServer()
	if err != nil {
		return "", nil, fmt.Errorf("sim: starting the in-process selector without KV events: %w", err)
	}
	fmt.Fprintf(logw, "in-process selector without KV events at %s\n", srv.URL)
	return srv.URL, srv.Stop, nil
}
