package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/kvselect/kvselect/perf/promcheck"
)

// dashboardPath is the Grafana dashboard kept in the repository.
const dashboardPath = "../../perf/grafana/kvselect.json"

var (
	// promString is a PromQL string literal (a label value or regex),
	// whose words are not metric names.
	promString = regexp.MustCompile(`"(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*'`)
	// promMetric is a word that names one of kvselect's, the Go
	// runtime's or the process's series.
	promMetric = regexp.MustCompile(`\b(?:kvselect|go|process)_[a-zA-Z0-9_:]*`)
)

// dashboardQueries returns every PromQL expression of the dashboard: the
// panels' targets and the template variables' queries.
func dashboardQueries(v any) []string {
	var out []string
	switch x := v.(type) {
	case map[string]any:
		for k, e := range x {
			if s, ok := e.(string); ok && (k == "expr" || k == "definition" || k == "query") {
				out = append(out, s)
			} else {
				out = append(out, dashboardQueries(e)...)
			}
		}
	case []any:
		for _, e := range x {
			out = append(out, dashboardQueries(e)...)
		}
	}
	return out
}

// TestDashboardQueriesExportedMetrics: every series the Grafana dashboard
// queries is exported by a real scrape of one of the serve and indexer
// configurations (so a rename breaks this test, not the dashboard), every
// panel has a query, and the dashboard shows what operators look for.
func TestDashboardQueriesExportedMetrics(t *testing.T) {
	raw, err := os.ReadFile(dashboardPath)
	if err != nil {
		t.Fatal(err)
	}
	var dash map[string]any
	if err := json.Unmarshal(raw, &dash); err != nil {
		t.Fatalf("%s: %v", dashboardPath, err)
	}
	if dash["uid"] != "kvselect" || dash["title"] == "" {
		t.Fatalf("dashboard uid %v, title %v", dash["uid"], dash["title"])
	}
	exported := map[string]bool{}
	for _, c := range scrapeConfigs(t) {
		fams, problems := promcheck.Check([]byte(scrape(t, c)))
		if len(problems) > 0 {
			t.Fatalf("%s: %v", c.name, problems)
		}
		for n := range promcheck.Names(fams) {
			exported[n] = true
		}
	}
	queried := map[string]bool{}
	for _, q := range dashboardQueries(dash) {
		for _, m := range promMetric.FindAllString(promString.ReplaceAllString(q, `""`), -1) {
			queried[m] = true
		}
	}
	if len(queried) < 20 {
		t.Fatalf("only %d series queried: the query extraction is broken", len(queried))
	}
	for m := range queried {
		if !exported[m] {
			t.Errorf("%s queries %s, which no scrape exports", filepath.Base(dashboardPath), m)
		}
	}
	for _, want := range []string{"kvselect_selections_total", "kvselect_bookings_total", "kvselect_http_request_duration_seconds_bucket",
		"kvselect_active_reservations", "kvselect_pending_selections", "kvselect_index_blocks", "kvselect_index_events_dropped_total",
		"kvselect_kv_events_delivered_total", "kvselect_kv_listeners_connected", "kvselect_replica_events_published_total"} {
		if !queried[want] {
			t.Errorf("the dashboard does not show %s", want)
		}
	}
	var panels []any
	for _, p := range dash["panels"].([]any) {
		if pm := p.(map[string]any); pm["type"] != "row" {
			panels = append(panels, pm)
			if targets, _ := pm["targets"].([]any); len(targets) == 0 {
				t.Errorf("panel %q has no query", pm["title"])
			}
		}
	}
	titles := []string{}
	for _, p := range panels {
		titles = append(titles, p.(map[string]any)["title"].(string))
	}
	if !slices.ContainsFunc(titles, func(s string) bool { return strings.Contains(s, "latency quantiles") }) {
		t.Errorf("no latency quantiles panel in %v", titles)
	}
}
