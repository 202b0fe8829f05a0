package bench

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"text/tabwriter"
)

// Result is what one target did in the measured window. Latencies cover every
// recorded call of the mix (p50_ms...); the select_ keys cover only the
// selection calls (select or select_and_reserve), whose latency in the open
// loop runs from the intended send time.
type Result struct {
	ThroughputRPS float64 `json:"throughput_rps"` // calls per second
	OpsPerSec     float64 `json:"ops_per_s"`      // operations (LLM requests) per second
	P50ms         float64 `json:"p50_ms"`
	P90ms         float64 `json:"p90_ms"`
	P99ms         float64 `json:"p99_ms"`
	P999ms        float64 `json:"p999_ms"`
	MaxMs         float64 `json:"max_ms"`
	MeanMs        float64 `json:"mean_ms"`
	SelectP50ms   float64 `json:"select_p50_ms"`
	SelectP99ms   float64 `json:"select_p99_ms"`
	SelectP999ms  float64 `json:"select_p999_ms"`
	// AdmittedP50ms... cover the selection calls that succeeded: with a
	// router queue above saturation, the requests it admitted (the others
	// answered 429, counted in Errors).
	AdmittedP50ms float64          `json:"admitted_select_p50_ms"`
	AdmittedP99ms float64          `json:"admitted_select_p99_ms"`
	AdmittedMaxMs float64          `json:"admitted_select_max_ms"`
	Requests      int64            `json:"requests"`
	Operations    int64            `json:"operations"`
	Errors        map[string]int64 `json:"errors"` // by status code, or timeout / no_free_conns / conn_closed / transport
	ByRoute       map[string]int64 `json:"requests_by_route"`
	MeasuredS     float64          `json:"measured_s"`
	// MeanOverlapBlocks is the mean over the recorded successful selections
	// of the chosen worker's matched device blocks (the response's
	// overlap.gpu / block size); MeanPromptBlocks is the mean of their
	// prompts' full blocks, the most that could match. 0 with an empty
	// index (and against the no-op baseline).
	MeanOverlapBlocks float64 `json:"mean_overlap_blocks"`
	MeanPromptBlocks  float64 `json:"mean_prompt_blocks"`
	// Open loop only.
	OfferedOpsPerSec float64     `json:"offered_ops_per_s,omitempty"`
	ScheduleLagMaxMs float64     `json:"schedule_lag_max_ms,omitempty"`
	LateOps          int64       `json:"late_ops,omitempty"` // first call sent > 1 ms after its intended time
	Client           ClientStats `json:"client"`
	// LatencyCDF is the distribution of every call's latency (what P50ms
	// and the rest summarize), for plots.
	LatencyCDF []CDFPoint `json:"latency_cdf,omitempty"`
}

// ClientStats is how much of the machine the client itself used.
type ClientStats struct {
	Goroutines int `json:"goroutines"`
	// OwnUsPerRequest is the client goroutines' wall time outside the call
	// (picking the prompt, building the id, recording) per call; it includes
	// time spent runnable but not running, so it is an upper bound.
	OwnUsPerRequest float64 `json:"own_us_per_request"`
	// OwnShare is that time over the goroutines' total (outside + inside calls).
	OwnShare float64 `json:"own_share"`
	// ProcessCPUCores is the whole process's CPU (user+system) over the
	// window in cores: the client alone against an external --target; client
	// plus server when the server runs in-process or for the no-op baseline.
	ProcessCPUCores float64 `json:"process_cpu_cores"`
}

func (r *Result) setLatency(all, sel *Histogram) {
	r.P50ms = ms(all.Quantile(0.50))
	r.P90ms = ms(all.Quantile(0.90))
	r.P99ms = ms(all.Quantile(0.99))
	r.P999ms = ms(all.Quantile(0.999))
	r.MaxMs = ms(all.Max())
	r.MeanMs = ms(all.Mean())
	r.SelectP50ms = ms(sel.Quantile(0.50))
	r.SelectP99ms = ms(sel.Quantile(0.99))
	r.SelectP999ms = ms(sel.Quantile(0.999))
	r.LatencyCDF = all.CDF()
}

// ErrorCount is the number of failed calls.
func (r *Result) ErrorCount() int64 {
	var n int64
	for _, v := range r.Errors {
		n += v
	}
	return n
}

// Ratios are the selector's figures over the no-op baseline's, same run.
type Ratios struct {
	Throughput float64 `json:"throughput"`
	P50        float64 `json:"p50"`
	P99        float64 `json:"p99"`
	P999       float64 `json:"p999"`
}

// Report is the outcome of Run; its JSON form is what --json writes.
type Report struct {
	Target      string  `json:"target"`
	Loop        string  `json:"loop"` // "closed" or "open"
	Concurrency int     `json:"concurrency"`
	Rate        float64 `json:"rate_ops_per_s,omitempty"`
	Mix         string  `json:"mix"`
	Workload    string  `json:"workload"`
	PromptForm  string  `json:"prompt_form"`
	Workers     int     `json:"workers"`
	BlockSize   int     `json:"block_size"`
	WarmupS     float64 `json:"warmup_s"`
	DurationS   float64 `json:"duration_s"`
	Seed        int64   `json:"seed"`

	Result // the selector's figures, at the top level

	// LeakedReservations is the sum of active_requests in GET /loads after
	// every goroutine has finished: bookings the run left behind (must be 0).
	// -1 means /loads could not be read (see Warnings).
	LeakedReservations int64 `json:"leaked_reservations"`
	// Fill is what filled the selector's index before the load (nil: no
	// fill, the index stayed as the run found it).
	Fill     *FillStats `json:"fill,omitempty"`
	Baseline *Result    `json:"baseline,omitempty"`
	Ratios   *Ratios    `json:"ratios,omitempty"`
	// Replicas is the replica run's section (Config.Replicas > 1): the
	// top-level figures are then the replicas', together.
	Replicas *ReplicaReport `json:"replicas,omitempty"`
	// EPP is the epp mix's section (MixEPP).
	EPP      *EPPReport `json:"epp,omitempty"`
	Profiles []string   `json:"profiles,omitempty"`
	Warnings []string   `json:"warnings,omitempty"`
}

func ratio(a, b float64) float64 {
	if b == 0 {
		return 0
	}
	return a / b
}

func (rep *Report) setRatios() {
	if rep.Baseline == nil {
		return
	}
	b := rep.Baseline
	rep.Ratios = &Ratios{
		Throughput: ratio(rep.ThroughputRPS, b.ThroughputRPS),
		P50:        ratio(rep.P50ms, b.P50ms),
		P99:        ratio(rep.P99ms, b.P99ms),
		P999:       ratio(rep.P999ms, b.P999ms),
	}
}

// WriteJSONFile writes the report as indented JSON.
func (rep *Report) WriteJSONFile(path string) error {
	return writeJSONFile(path, rep)
}

func writeJSONFile(path string, v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, append(b, '\n'), 0o644)
}

// WriteTable writes the human report.
func (rep *Report) WriteTable(out io.Writer) error {
	loop := "closed loop"
	if rep.Loop == "open" {
		loop = fmt.Sprintf("open loop at %.0f ops/s", rep.Rate)
	}
	fmt.Fprintf(out, "kvselect bench: %s, %d client goroutines, mix %s, %d workers, block size %d\n",
		loop, rep.Concurrency, rep.Mix, rep.Workers, rep.BlockSize)
	fmt.Fprintf(out, "target %s; workload %s\n", rep.Target, rep.Workload)
	if f := rep.Fill; f != nil {
		fmt.Fprintf(out, "index filled through KV events: %d prompts routed by the selector onto %d engines of %d blocks in %.1f s (%d blocks held, %d evicted)\n",
			f.Prompts, f.Engines, f.CapacityBlocks, f.Seconds, f.HeldBlocks, f.EvictedBlocks)
	} else {
		fmt.Fprintln(out, "index not filled by the harness")
	}
	fmt.Fprintf(out, "measured %.1f s after %.1f s warm-up\n\n", rep.MeasuredS, rep.WarmupS)

	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', tabwriter.AlignRight)
	b := rep.Baseline
	row := func(name string, sel, base float64, format string, showRatio bool) {
		fmt.Fprintf(tw, "%s\t"+format+"\t", name, sel)
		if b != nil {
			fmt.Fprintf(tw, format+"\t", base)
			if showRatio {
				fmt.Fprintf(tw, "%.2f\t", ratio(sel, base))
			} else {
				fmt.Fprint(tw, "\t")
			}
		}
		fmt.Fprintln(tw)
	}
	if b == nil {
		fmt.Fprintln(tw, "\tselector\t")
	} else {
		fmt.Fprintln(tw, "\tselector\tno-op baseline\tratio\t")
	}
	bs := b
	if bs == nil {
		bs = &Result{}
	}
	row("requests/s", rep.ThroughputRPS, bs.ThroughputRPS, "%.0f", true)
	row("operations/s", rep.OpsPerSec, bs.OpsPerSec, "%.0f", true)
	row("p50 ms", rep.P50ms, bs.P50ms, "%.3f", true)
	row("p90 ms", rep.P90ms, bs.P90ms, "%.3f", true)
	row("p99 ms", rep.P99ms, bs.P99ms, "%.3f", true)
	row("p99.9 ms", rep.P999ms, bs.P999ms, "%.3f", true)
	row("max ms", rep.MaxMs, bs.MaxMs, "%.3f", true)
	row("selection p50 ms", rep.SelectP50ms, bs.SelectP50ms, "%.3f", true)
	row("selection p99 ms", rep.SelectP99ms, bs.SelectP99ms, "%.3f", true)
	if rep.ErrorCount() > 0 {
		// Only when some failed: the admitted selections' own latency (a
		// router queue's 429s are fast and would hide its waits).
		row("admitted selection p50 ms", rep.AdmittedP50ms, bs.AdmittedP50ms, "%.3f", false)
		row("admitted selection p99 ms", rep.AdmittedP99ms, bs.AdmittedP99ms, "%.3f", false)
		row("admitted selection max ms", rep.AdmittedMaxMs, bs.AdmittedMaxMs, "%.3f", false)
	}
	row("mean overlap blocks", rep.MeanOverlapBlocks, bs.MeanOverlapBlocks, "%.1f", false)
	row("mean prompt blocks", rep.MeanPromptBlocks, bs.MeanPromptBlocks, "%.1f", false)
	row("requests", float64(rep.Requests), float64(bs.Requests), "%.0f", false)
	row("errors", float64(rep.ErrorCount()), float64(bs.ErrorCount()), "%.0f", false)
	if rep.Loop == "open" {
		row("late ops (>1 ms)", float64(rep.LateOps), float64(bs.LateOps), "%.0f", false)
		row("schedule lag max ms", rep.ScheduleLagMaxMs, bs.ScheduleLagMaxMs, "%.3f", false)
	}
	row("client own µs/call", rep.Client.OwnUsPerRequest, bs.Client.OwnUsPerRequest, "%.2f", false)
	row("client own share %", 100*rep.Client.OwnShare, 100*bs.Client.OwnShare, "%.3f", false)
	row("process CPU cores", rep.Client.ProcessCPUCores, bs.Client.ProcessCPUCores, "%.2f", false)
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintf(out, "\nleaked reservations: %d\n", rep.LeakedReservations)
	if len(rep.Errors) > 0 {
		fmt.Fprintf(out, "selector errors by class: %s\n", formatCounts(rep.Errors))
	}
	if b != nil && len(b.Errors) > 0 {
		fmt.Fprintf(out, "baseline errors by class: %s\n", formatCounts(b.Errors))
	}
	fmt.Fprintf(out, "selector calls by route: %s\n", formatCounts(rep.ByRoute))
	if rep.Ratios != nil && rep.Loop == "closed" && rep.Mix == MixDisagg.String() {
		fmt.Fprintf(out, "targets (C1024 disagg): throughput ratio %.2f (>= %.2f %s), errors %d (%s), leaked %d (%s)\n",
			rep.Ratios.Throughput, disaggMinThroughput, okIf(rep.Ratios.Throughput >= disaggMinThroughput),
			rep.ErrorCount(), okIf(rep.ErrorCount() == 0), rep.LeakedReservations, okIf(rep.LeakedReservations == 0))
	}
	if rep.Ratios != nil && rep.Loop == "closed" && rep.Mix == "lifecycle" {
		// The C1024 lifecycle targets: with hash bodies at least half the
		// no-op's throughput and at most 2.5 times its p99; with token
		// bodies (the selector also hashes) at least 0.35 of its throughput;
		// with text bodies (it also tokenizes) at least 0.4.
		form, minTput, maxP99 := "hash", 0.5, 2.5
		switch rep.PromptForm {
		case PromptTokens:
			form, minTput, maxP99 = "token", 0.35, 0
		case PromptText:
			form, minTput, maxP99 = "text", 0.4, 0
		}
		fmt.Fprintf(out, "targets (C1024 lifecycle, %s bodies): throughput ratio %.2f (>= %.2f %s)", form,
			rep.Ratios.Throughput, minTput, okIf(rep.Ratios.Throughput >= minTput))
		if maxP99 > 0 {
			fmt.Fprintf(out, ", p99 ratio %.2f (<= %.1f %s)", rep.Ratios.P99, maxP99, okIf(rep.Ratios.P99 <= maxP99))
		}
		fmt.Fprintf(out, ", errors %d (%s), leaked %d (%s)\n",
			rep.ErrorCount(), okIf(rep.ErrorCount() == 0),
			rep.LeakedReservations, okIf(rep.LeakedReservations == 0))
	}
	writeEPPSection(out, rep)
	rw := &reportWriter{w: out}
	writeReplicaSection(rw, rep)
	if rw.err != nil {
		return rw.err
	}
	for _, p := range rep.Profiles {
		fmt.Fprintf(out, "profile: %s\n", p)
	}
	for _, w := range rep.Warnings {
		fmt.Fprintf(out, "warning: %s\n", w)
	}
	return nil
}

func okIf(b bool) string {
	if b {
		return "ok"
	}
	return "MISSED"
}

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
