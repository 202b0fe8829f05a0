package main

import (
	"encoding/json"
	"strings"
	"testing"
)

// TestEppBenchInProcess runs `kvselect bench --mix epp` briefly: the
// in-process picker, fed by the engines' KV events through a workers
// file, and the no-op ext_proc baseline, both driven through real
// streams. Every stream runs to its end (no error), every booking is
// freed (0 leaked), the baseline is in the report, and the fill routed
// every prompt through ext_proc.
func TestEppBenchInProcess(t *testing.T) {
	raw, table := smallBench(t, "300ms", "--mix", "epp", "--workload", "synthetic:short", "--output-blocks", "2")
	var rep struct {
		Requests int64            `json:"requests"`
		Errors   map[string]int64 `json:"errors"`
		Leaked   *int64           `json:"leaked_reservations"`
		ByRoute  map[string]int64 `json:"requests_by_route"`
		Baseline *struct {
			Requests int64            `json:"requests"`
			Errors   map[string]int64 `json:"errors"`
		} `json:"baseline"`
		Ratios *struct {
			Throughput float64 `json:"throughput"`
		} `json:"ratios"`
		Fill *struct {
			Prompts int `json:"prompts"`
		} `json:"fill"`
		EPP *struct {
			MaxPromptTokens int              `json:"max_prompt_tokens"`
			Dests           map[string]int64 `json:"dests"`
		} `json:"epp"`
	}
	if err := json.Unmarshal(raw, &rep); err != nil {
		t.Fatal(err)
	}
	if rep.Requests == 0 || len(rep.Errors) != 0 || rep.Leaked == nil || *rep.Leaked != 0 || rep.ByRoute["epp_stream"] != rep.Requests {
		t.Fatalf("report %s", raw)
	}
	if rep.Baseline == nil || rep.Baseline.Requests == 0 || len(rep.Baseline.Errors) != 0 || rep.Ratios == nil || !(rep.Ratios.Throughput > 0) {
		t.Fatalf("no-op baseline: %s", raw)
	}
	if rep.Fill == nil || rep.Fill.Prompts != 40 || rep.EPP == nil || rep.EPP.MaxPromptTokens > 256 || len(rep.EPP.Dests) == 0 {
		t.Fatalf("fill and epp section: %s", raw)
	}
	for d := range rep.EPP.Dests {
		if !strings.HasPrefix(d, "bench-worker-") {
			t.Fatalf("picked %q, not a harness worker", d)
		}
	}
	if !strings.Contains(table, "targets (C8 epp, prompts <= 256 tokens)") {
		t.Fatalf("table:\n%s", table)
	}
}
