package main

import (
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/kvselect/kvselect/perf/promcheck"
)

// scrapeConfig is one server configuration whose scrape is checked.
type scrapeConfig struct {
	name    string
	indexer bool // kvselect indexer instead of serve
	args    []string
	env     map[string]string
	want    []string // families it must export beyond the common ones
}

// scrapeConfigs are the configurations whose scrapes together export
// every family: the KV-event ingress with simulated engines and the
// replica mesh with a peer; the workers file (which cannot run with
// --demo); the approximate index (no KV events, a predicted-TTL side
// index needs them, so only the primary); the standalone indexer.
func scrapeConfigs(t *testing.T) []scrapeConfig {
	path := filepath.Join(t.TempDir(), "workers.json")
	writeFile(t, path, workersJSON(workerEntry(1, "default"), workerEntry(2, "decode")))
	port := func() string { return strconv.Itoa(freePort(t)) }
	kv := map[string]string{"DYN_USE_KV_EVENTS": "true"}
	return []scrapeConfig{
		{name: "ingress and mesh", args: []string{"--demo", "2", "--replica-sync-port", port(), "--replica-sync-peers", "tcp://127.0.0.1:" + port()}, env: kv,
			want: []string{"kvselect_kv_events_delivered_total", "kvselect_replica_peers", "kvselect_replica_events_published_total", "kvselect_index_events_dropped_total"}},
		{name: "workers file", args: []string{"--workers-file", path, "--replica-sync-port", port()}, env: kv,
			want: []string{"kvselect_workers_file_workers", "kvselect_catalog_reconcile_passes_total", "kvselect_kv_listeners_running"}},
		{name: "approximate", env: map[string]string{"DYN_USE_KV_EVENTS": "false"},
			want: []string{"kvselect_approx_index_blocks", "kvselect_approx_index_recordings_total"}},
		{name: "queue and affinity", args: []string{"--session-affinity-ttl-secs", "60", "--replica-sync-port", port()},
			env:  map[string]string{"DYN_USE_KV_EVENTS": "false", "DYN_ROUTER_QUEUE_THRESHOLD": "0.9"},
			want: []string{"kvselect_router_queue_class_requests", "kvselect_router_queue_wait_seconds", "kvselect_session_affinity_entries", "kvselect_replica_affinity_events_published_total"}},
		{name: "indexer", indexer: true, env: kv,
			want: []string{"kvselect_indexer_workers", "kvselect_kv_events_delivered_total", "kvselect_index_events_dropped_total"}},
	}
}

// scrape runs a server of c, sends it a few requests (a registration, a
// booking, a cached selection, a miss, an error) and returns its /metrics.
func scrape(t *testing.T, c scrapeConfig) string {
	t.Helper()
	var r *running
	if c.indexer {
		r = startIndexerRun(t, c.args, c.env)
	} else {
		r = startServe(t, c.args, c.env)
		if c.env["DYN_USE_KV_EVENTS"] == "false" {
			r.do("POST", "/workers", `{"worker_id":1,"endpoint":"http://w1","block_size":4,"max_num_batched_tokens":8192}`)
		}
	}
	r.do("POST", "/select_and_reserve", `{"selection_id":"a","session_id":"s1","token_ids":[1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16]}`)
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
	for _, c := range scrapeConfigs(t) {
		t.Run(c.name, func(t *testing.T) {
			body := scrape(t, c)
			fams, problems := promcheck.Check([]byte(body))
			for _, p := range problems {
				t.Error(p)
			}
			for fam := range fams {
				// dynamo_*: the reference router's families under its
				// names (httpapi/stats_dynamo.go).
				if !strings.HasPrefix(fam, "kvselect_") && !strings.HasPrefix(fam, "go_") && !strings.HasPrefix(fam, "process_") && !strings.HasPrefix(fam, "dynamo_") {
					t.Errorf("family %s has no kvselect_, dynamo_, go_ or process_ prefix", fam)
				}
			}
			want := append([]string{"kvselect_build_info", "kvselect_http_requests_total", "kvselect_http_request_duration_seconds",
				"kvselect_index_events_applied_total", "kvselect_index_blocks", "go_goroutines", "process_resident_memory_bytes"}, c.want...)
			for _, w := range want {
				if fams[w] == nil {
					t.Errorf("family %s missing", w)
				}
			}
			if fams["kvselect_index_events_dropped_total"] == nil {
				return
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
