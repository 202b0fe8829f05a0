package sim

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"

	"github.com/kvselect/kvselect/bench/sim/vllm"
)

// PolicyResult is what one policy achieved at one load level.
type PolicyResult struct {
	Requests int `json:"requests"`
	// HitRate is HitBlocks / PromptBlocks: the prompts' full blocks found
	// in the prefix cache of the engine that served them, when each was
	// first scheduled there.
	HitRate float64 `json:"hit_rate"`
	// HitRateOfBound and HitRateOfPooledBound are HitRate as a share of
	// Report.HitRateBound and of the level's HitRateBoundPooled.
	HitRateOfBound       float64 `json:"hit_rate_of_bound"`
	HitRateOfPooledBound float64 `json:"hit_rate_of_pooled_bound"`
	HitBlocks            int64   `json:"hit_blocks"`
	PromptBlocks         int64   `json:"prompt_blocks"`
	// PrefillTokens is the prompt tokens actually computed (not cached),
	// recomputation after preemptions included.
	PrefillTokens int64   `json:"prefill_tokens"`
	TTFTp50ms     float64 `json:"ttft_p50_ms"`
	TTFTp99ms     float64 `json:"ttft_p99_ms"`
	TTFTMeanms    float64 `json:"ttft_mean_ms"`
	TTFTMaxms     float64 `json:"ttft_max_ms"`
	// TTFTms are every request's simulated TTFT, ascending, for plots
	// (kvselect bench --plot); not in the JSON report.
	TTFTms []float64 `json:"-"`
	// RequestsPerWorker and PrefillTokensPerWorker are by worker (id-1).
	RequestsPerWorker      []int   `json:"requests_per_worker"`
	PrefillTokensPerWorker []int64 `json:"prefill_tokens_per_worker"`
	// RequestsMaxOverMean is max/mean of RequestsPerWorker (1 is perfect).
	RequestsMaxOverMean float64 `json:"requests_max_over_mean"`
	// PrefillTokensCV is the coefficient of variation (stddev/mean) of
	// PrefillTokensPerWorker (0 is perfect).
	PrefillTokensCV float64 `json:"prefill_tokens_cv"`
	EvictedBlocks   uint64  `json:"evicted_blocks"`
	// The selector's policies only: calls that failed (by route and
	// status), sync rounds the selector did not apply within SyncTimeout,
	// selections whose overlap (gpu tokens / block size) differed from
	// the chosen engine's cached prefix at that instant, the wall time
	// spent waiting for KV events to apply, and active requests left in
	// GET /loads after the run (must be 0). CreditedPrefillTokens is
	// the booked prefill the selector's KV-event sink credited as
	// computed (kvselect_prefill_credited_tokens_total): what
	// cache_balance reads as the prefill left.
	Errors                map[string]int64 `json:"errors,omitempty"`
	CreditedPrefillTokens int64            `json:"credited_prefill_tokens,omitempty"`
	SyncTimeouts          int64            `json:"sync_timeouts,omitempty"`
	OverlapMismatches     int64            `json:"overlap_mismatches,omitempty"`
	SyncWaitMs            float64          `json:"sync_wait_ms,omitempty"`
	LeakedReservations    int64            `json:"leaked_reservations,omitempty"`

	// Added with the engine model (bench/sim/vllm).
	TTFTp90ms float64 `json:"ttft_p90_ms"`
	// E2E is arrival to last token.
	E2Ep50ms  float64 `json:"e2e_p50_ms"`
	E2Ep99ms  float64 `json:"e2e_p99_ms"`
	E2EMeanms float64 `json:"e2e_mean_ms"`
	Completed int     `json:"completed"`
	MakespanS float64 `json:"makespan_s"` // first arrival to last finish
	// ThroughputRPS, OutputTokensPerS and TokensPerS (prompt and output)
	// are per simulated second over the makespan.
	ThroughputRPS    float64 `json:"throughput_rps"`
	OutputTokensPerS float64 `json:"output_tokens_per_s"`
	TokensPerS       float64 `json:"tokens_per_s"`
	// Preemptions counts preemptions over all engines, PreemptedRequests
	// the requests preempted at least once, RecomputedTokens what they
	// computed again.
	Preemptions       int64 `json:"preemptions"`
	PreemptedRequests int   `json:"preempted_requests"`
	RecomputedTokens  int64 `json:"recomputed_tokens"`
	// BusyMaxOverMean is max/mean of the engines' busy time (1 is
	// perfect), Utilization their mean busy share of the makespan.
	BusyMaxOverMean float64 `json:"busy_max_over_mean"`
	Utilization     float64 `json:"utilization"`
}

// Level is one load level of a run.
type Level struct {
	// Load is the offered load as a fraction of Report.CapacityRPS (0: a
	// level at a fixed time scale or arrival rate).
	Load float64 `json:"load,omitempty"`
	// ArrivalRPS is the mean offered request rate; TimeScale the trace's
	// time scale that gives it (0 for a synthetic workload).
	ArrivalRPS float64                  `json:"arrival_rps"`
	TimeScale  float64                  `json:"time_scale,omitempty"`
	Policies   map[string]*PolicyResult `json:"policies"`
	// HitRateBoundPooled is the capacity-aware bound at this level: the
	// hit rate of one engine holding every engine's blocks, under the
	// same eviction, fed the requests alone in arrival order
	// (workload.pooledBound).
	HitRateBoundPooled float64 `json:"hit_rate_bound_pooled"`
}

// shareOfBounds sets the hit rate's shares of the two bounds (0 when a
// bound is 0).
func (r *PolicyResult) shareOfBounds(bound, pooled float64) {
	if bound > 0 {
		r.HitRateOfBound = r.HitRate / bound
	}
	if pooled > 0 {
		r.HitRateOfPooledBound = r.HitRate / pooled
	}
}

func (lv *Level) label() string {
	if lv.Load > 0 {
		return fmt.Sprintf("load %.0f%%", 100*lv.Load)
	}
	return fmt.Sprintf("%.2f requests/s", lv.ArrivalRPS)
}

// EngineReport describes the simulated engines.
type EngineReport struct {
	Model            string         `json:"model"`
	MaxBatchedTokens int            `json:"max_num_batched_tokens"`
	MaxNumSeqs       int            `json:"max_num_seqs"`
	Step             vllm.StepModel `json:"step_model"`
}

// Report is Run's outcome; its JSON form is what --json writes.
type Report struct {
	Target         string `json:"target"`
	Workload       string `json:"workload"`
	Workers        int    `json:"workers"`
	BlockSize      int    `json:"block_size"`
	CapacityBlocks int    `json:"capacity_blocks"`
	// PrefillTPS is an engine's prefill speed in full-budget steps and
	// DecodeTPS one request's decode speed after a 1,024-token prompt,
	// both from the step model (tokens per second).
	PrefillTPS float64 `json:"prefill_tokens_per_s"`
	DecodeTPS  float64 `json:"decode_tokens_per_s"`
	// TimeScale and Policies are the highest load level's (Levels' last).
	TimeScale float64 `json:"time_scale"`
	Seed      int64   `json:"seed"`
	// HitRateBound is the hit rate of one engine of unbounded capacity
	// serving every request: no policy over the engines can do better.
	HitRateBound float64 `json:"hit_rate_bound"`
	// HitRateBoundPooled is the highest level's capacity-aware bound
	// (Level.HitRateBoundPooled).
	HitRateBoundPooled float64 `json:"hit_rate_bound_pooled"`
	// ReferenceNames maps a policy to the reference router's name for it
	// (kvselect's default is Dynamo's KV router cost).
	ReferenceNames map[string]string        `json:"reference_names,omitempty"`
	Policies       map[string]*PolicyResult `json:"policies"`
	WallS          float64                  `json:"wall_s"`
	Warnings       []string                 `json:"warnings,omitempty"`

	// Added with the engine model.
	Engine EngineReport `json:"engine"`
	// CapacityRPS is the cluster's capacity for the workload (requests
	// per second, see the package doc); 0 without load levels.
	CapacityRPS float64  `json:"capacity_rps,omitempty"`
	Levels      []*Level `json:"levels"`
}

// WriteJSONFile writes the report as indented JSON.
func (rep *Report) WriteJSONFile(path string) error {
	b, err := json.MarshalIndent(rep, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, append(b, '\n'), 0o644)
}

// WriteTable writes the human report: one table per load level.
func (rep *Report) WriteTable(out io.Writer) error {
	fmt.Fprintf(out, "kvselect bench --simulate: %d workers, block size %d, %d blocks per engine, %d tokens per step, seed %d\n",
		rep.Workers, rep.BlockSize, rep.CapacityBlocks, rep.Engine.MaxBatchedTokens, rep.Seed)
	fmt.Fprintf(out, "engines: %s: prefill %.0f tokens/s in full steps, one decode %.0f tokens/s\n", rep.Engine.Model, rep.PrefillTPS, rep.DecodeTPS)
	fmt.Fprintf(out, "target %s; workload %s\n", rep.Target, rep.Workload)
	if rep.CapacityRPS > 0 {
		fmt.Fprintf(out, "capacity %.2f requests/s (round-robin, all requests queued at once)\n", rep.CapacityRPS)
	}
	fmt.Fprintf(out, "hit rate bound (one engine of unbounded capacity): %.3f; pooled bound (one engine of %d blocks, the engines' eviction, arrival order): %.3f\n",
		rep.HitRateBound, rep.CapacityBlocks*rep.Workers, rep.HitRateBoundPooled)
	var b strings.Builder
	for _, lv := range rep.Levels {
		fmt.Fprintf(&b, "\n%s: %.2f requests/s", lv.label(), lv.ArrivalRPS)
		if lv.TimeScale > 0 {
			fmt.Fprintf(&b, " (trace time scale %.3f)", lv.TimeScale)
		}
		fmt.Fprintf(&b, "; pooled bound %.3f\n", lv.HitRateBoundPooled)
		fmt.Fprintf(&b, "%-33s %6s %13s %20s %15s %9s %7s %8s %7s %7s %7s\n",
			"", "hit", "share of bound", "TTFT ms", "E2E ms", "requests", "output", "preempt", "req", "busy", "evicted")
		fmt.Fprintf(&b, "%-33s %6s %6s %6s %6s %6s %6s %7s %7s %9s %7s %8s %7s %7s %7s\n",
			"policy", "rate", "unbnd", "pooled", "p50", "p90", "p99", "p50", "p99", "/s", "tok/s", "", "max/mn", "max/mn", "kblocks")
		for _, name := range AllPolicies {
			r := lv.Policies[name]
			if r == nil {
				continue
			}
			label := name
			if ref := ReferenceNames[name]; ref != "" {
				label += " (" + ref + ")"
			}
			fmt.Fprintf(&b, "%-33s %6.3f %6.3f %6.3f %6.0f %6.0f %6.0f %7.0f %7.0f %9.2f %7.0f %8d %7.2f %7.2f %7.0f\n",
				label, r.HitRate, r.HitRateOfBound, r.HitRateOfPooledBound, r.TTFTp50ms, r.TTFTp90ms, r.TTFTp99ms, r.E2Ep50ms, r.E2Ep99ms,
				r.ThroughputRPS, r.OutputTokensPerS, r.Preemptions, r.RequestsMaxOverMean, r.BusyMaxOverMean, float64(r.EvictedBlocks)/1000)
		}
		for _, name := range AllPolicies {
			k := lv.Policies[name]
			if k == nil || !selectorPolicy(name) {
				continue
			}
			if name == PolicyApprox {
				fmt.Fprintf(&b, "%s (no KV events): predicted overlap differed from the engine's cache in %d of %d requests, leaked reservations %d",
					name, k.OverlapMismatches, k.Requests, k.LeakedReservations)
			} else {
				fmt.Fprintf(&b, "%s: sync wait %.0f ms, sync timeouts %d, overlap mismatches %d, leaked reservations %d, prefill credited from KV events %d tokens",
					name, k.SyncWaitMs, k.SyncTimeouts, k.OverlapMismatches, k.LeakedReservations, k.CreditedPrefillTokens)
			}
			if len(k.Errors) > 0 {
				fmt.Fprintf(&b, ", errors %s", formatCounts(k.Errors))
			}
			b.WriteString("\n")
		}
	}
	if _, err := io.WriteString(out, b.String()); err != nil {
		return err
	}
	for _, w := range rep.Warnings {
		fmt.Fprintf(out, "warning: %s\n", w)
	}
	_, err := fmt.Fprintf(out, "wall time %.1f s\n", rep.WallS)
	return err
}

// formatCounts is "k1=n1 k2=n2" in key order.
func formatCounts(m map[string]int64) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = fmt.Sprintf("%s=%d", k, m[k])
	}
	return strings.Join(parts, " ")
}
