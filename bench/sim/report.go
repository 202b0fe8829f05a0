package sim

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
)

// PolicyResult is what one policy achieved over the simulation.
type PolicyResult struct {
	Requests int `json:"requests"`
	// HitRate is HitBlocks / PromptBlocks: the prompts' full blocks that
	// were already cached on the engine that served them.
	HitRate      float64 `json:"hit_rate"`
	HitBlocks    int64   `json:"hit_blocks"`
	PromptBlocks int64   `json:"prompt_blocks"`
	// PrefillTokens is the prompt tokens actually prefilled (not cached).
	PrefillTokens int64   `json:"prefill_tokens"`
	TTFTp50ms     float64 `json:"ttft_p50_ms"`
	TTFTp99ms     float64 `json:"ttft_p99_ms"`
	TTFTMeanms    float64 `json:"ttft_mean_ms"`
	TTFTMaxms     float64 `json:"ttft_max_ms"`
	// RequestsPerWorker and PrefillTokensPerWorker are by worker (id-1).
	RequestsPerWorker      []int   `json:"requests_per_worker"`
	PrefillTokensPerWorker []int64 `json:"prefill_tokens_per_worker"`
	// RequestsMaxOverMean is max/mean of RequestsPerWorker (1 is perfect).
	RequestsMaxOverMean float64 `json:"requests_max_over_mean"`
	// PrefillTokensCV is the coefficient of variation (stddev/mean) of
	// PrefillTokensPerWorker (0 is perfect).
	PrefillTokensCV float64 `json:"prefill_tokens_cv"`
	EvictedBlocks   uint64  `json:"evicted_blocks"`
	// The kvselect policy only: calls that failed (by route and status),
	// batches the selector did not apply within SyncTimeout, selections
	// whose overlap (gpu tokens / block size) differed from the engine's
	// hit, the total wall time spent waiting for KV events to apply, and
	// active requests left in GET /loads after the run (must be 0).
	Errors             map[string]int64 `json:"errors,omitempty"`
	SyncTimeouts       int64            `json:"sync_timeouts,omitempty"`
	OverlapMismatches  int64            `json:"overlap_mismatches,omitempty"`
	SyncWaitMs         float64          `json:"sync_wait_ms,omitempty"`
	LeakedReservations int64            `json:"leaked_reservations,omitempty"`
}

// Report is Run's outcome; its JSON form is what --json writes.
type Report struct {
	Target         string  `json:"target"`
	Workload       string  `json:"workload"`
	Workers        int     `json:"workers"`
	BlockSize      int     `json:"block_size"`
	CapacityBlocks int     `json:"capacity_blocks"`
	PrefillTPS     float64 `json:"prefill_tokens_per_s"`
	DecodeTPS      float64 `json:"decode_tokens_per_s"`
	TimeScale      float64 `json:"time_scale"`
	Seed           int64   `json:"seed"`
	// HitRateBound is the hit rate of one engine of unbounded capacity
	// serving every request: no policy over the engines can do better.
	HitRateBound float64                  `json:"hit_rate_bound"`
	Policies     map[string]*PolicyResult `json:"policies"`
	WallS        float64                  `json:"wall_s"`
	Warnings     []string                 `json:"warnings,omitempty"`
}

// WriteJSONFile writes the report as indented JSON.
func (rep *Report) WriteJSONFile(path string) error {
	b, err := json.MarshalIndent(rep, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, append(b, '\n'), 0o644)
}

// WriteTable writes the human report.
func (rep *Report) WriteTable(out io.Writer) error {
	fmt.Fprintf(out, "kvselect bench --simulate: %d workers, block size %d, %d blocks per engine, prefill %.0f tokens/s, decode %.0f tokens/s per request, time scale %g, seed %d\n",
		rep.Workers, rep.BlockSize, rep.CapacityBlocks, rep.PrefillTPS, rep.DecodeTPS, rep.TimeScale, rep.Seed)
	fmt.Fprintf(out, "target %s; workload %s\n", rep.Target, rep.Workload)
	fmt.Fprintf(out, "hit rate bound (one engine of unbounded capacity): %.3f\n\n", rep.HitRateBound)
	var b strings.Builder
	fmt.Fprintf(&b, "%-12s  %9s  %12s  %12s  %13s  %13s  %10s  %9s  %9s\n",
		"policy", "hit rate", "TTFT p50 ms", "TTFT p99 ms", "TTFT mean ms", "requests max/", "prefill", "evicted", "requests")
	fmt.Fprintf(&b, "%-12s  %9s  %12s  %12s  %13s  %13s  %10s  %9s  %9s\n", "", "", "", "", "", "mean", "tokens CV", "blocks", "")
	for _, name := range Policies {
		r := rep.Policies[name]
		if r == nil {
			continue
		}
		fmt.Fprintf(&b, "%-12s  %9.3f  %12.0f  %12.0f  %13.0f  %13.2f  %10.3f  %9d  %9d\n",
			name, r.HitRate, r.TTFTp50ms, r.TTFTp99ms, r.TTFTMeanms, r.RequestsMaxOverMean, r.PrefillTokensCV, r.EvictedBlocks, r.Requests)
	}
	if _, err := io.WriteString(out, b.String()); err != nil {
		return err
	}
	if k := rep.Policies[PolicyKVSelect]; k != nil {
		fmt.Fprintf(out, "\nkvselect: sync wait %.0f ms in all, sync timeouts %d, overlap mismatches %d, leaked reservations %d",
			k.SyncWaitMs, k.SyncTimeouts, k.OverlapMismatches, k.LeakedReservations)
		if len(k.Errors) > 0 {
			fmt.Fprintf(out, ", errors %s", formatCounts(k.Errors))
		}
		fmt.Fprintln(out)
	}
	if a := rep.Policies[PolicyApprox]; a != nil {
		fmt.Fprintf(out, "approximate (no KV events): predicted overlap differed from the engine's hit in %d of %d requests, leaked reservations %d",
			a.OverlapMismatches, a.Requests, a.LeakedReservations)
		if len(a.Errors) > 0 {
			fmt.Fprintf(out, ", errors %s", formatCounts(a.Errors))
		}
		fmt.Fprintln(out)
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
