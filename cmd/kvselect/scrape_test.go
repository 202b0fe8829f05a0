package main

import (
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/kvselect/kvselect/perf/promcheck"
)

// scrapeConfigs are the serve configurations whose scrapes together export
// every family: the KV-event ingress with simulated engines and the
// replica mesh with a peer, and the workers file (which cannot run with
// --demo).
func scrapeConfigs(t *testing.T) map[string][]string {
	path := filepath.Join(t.TempDir(), "workers.json")
	writeFile(t, path, workersJSON(workerEntry(1, "default"), workerEntry(2, "decode")))
	return map[string][]string{
		"ingress and mesh": {"--demo", "2", "--replica-sync-port", freePort(t), "--replica-sync-peers", "tcp://127.0.0.1:" + freePort(t)},
		"workers file":     {"--workers-file", path, "--replica-sync-port", freePort(t)},
	}
}

// scrape runs a server of config args, sends it a few requests (a booking,
// a cached selection, a miss, an error) and returns its /metrics.
func scrape(t *testing.T, args []string) string {
	t.Helper()
	r := startServe(t, args, map[string]string{"DYN_USE_KV_EVENTS": "true"})
	r.do("POST", "/select_and_reserve", `{"selection_id":"a","token_ids":[1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16]}`)
	r.do("POST", "/select", `{"selection_id":"b","token_ids":[1,2,3,4]}`)
	r.do("POST", "/reservations", `{"selection_id":"nope"}`)
	r.do("GET", "/nowhere", "")
	code, body := r.do("GET", "/metrics", "")
	if code != 200 {
		t.Fatalf("/metrics: %d", code)
	}
	return body
}

// TestMetricsScrapeIsStrict parses a real scrape of each configuration
// with the Prometheus text parser: every family has a # HELP text and one
// # TYPE line, no series is written twice, and the families the
// dashboards and the README name are there.
func TestMetricsScrapeIsStrict(t *testing.T) {
	for name, args := range scrapeConfigs(t) {
		t.Run(name, func(t *testing.T) {
			body := scrape(t, args)
			fams, problems := promcheck.Check([]byte(body))
			for _, p := range problems {
				t.Error(p)
			}
			for fam := range fams {
				if !strings.HasPrefix(fam, "kvselect_") && !strings.HasPrefix(fam, "go_") && !strings.HasPrefix(fam, "process_") {
					t.Errorf("family %s has no kvselect_, go_ or process_ prefix", fam)
				}
			}
			want := []string{"kvselect_build_info", "kvselect_http_requests_total", "kvselect_http_request_duration_seconds",
				"kvselect_index_events_applied_total", "kvselect_index_events_dropped_total", "kvselect_kv_events_delivered_total",
				"kvselect_replica_peers", "kvselect_replica_events_published_total", "go_goroutines"}
			if name == "workers file" {
				want = append(want, "kvselect_workers_file_workers", "kvselect_catalog_reconcile_passes_total")
			}
			for _, w := range want {
				if fams[w] == nil {
					t.Errorf("family %s missing", w)
				}
			}
			var reasons []string
			for _, m := range fams["kvselect_index_events_dropped_total"].GetMetric() {
				for _, l := range m.GetLabel() {
					reasons = append(reasons, l.GetValue())
				}
			}
			for _, r := range []string{"hash_conflict", "parent_not_found", "block_not_found"} {
				if !slices.Contains(reasons, r) {
					t.Errorf("kvselect_index_events_dropped_total has no reason=%q (has %v)", r, reasons)
				}
			}
			bi := fams["kvselect_build_info"].GetMetric()
			if len(bi) != 1 || len(bi[0].GetLabel()) != 2 || bi[0].GetGauge().GetValue() != 1 {
				t.Errorf("kvselect_build_info: %v", bi)
			}
		})
	}
}
