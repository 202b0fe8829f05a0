// Package perf is observability plumbing with no domain knowledge: metric
// handles on a VictoriaMetrics/metrics Set, the Prometheus text exposition,
// pprof handlers for fasthttp and the runtime's contention-profile rates.
//
// Handles are created once, at start-up (Registry.Route); the per-request
// cost is one counter increment and one histogram update, with no string
// formatting and no map lookup. Domain packages expose cheap Stats; the host
// turns them into lines at scrape time with Registry.OnScrape.
//
// Every family is described once (Registry.Describe: name, type, help) by
// the code that writes it. WritePrometheus groups each family's lines,
// wherever they were written, under one # HELP and one # TYPE line, so a
// labelled family filled by several scrape writers is still one family to
// Prometheus. perf/promcheck checks an exposition the way a strict scraper
// reads it (tests only). grafana/kvselect.json is a dashboard of the
// families the hosts export (cmd's TestDashboardQueriesExportedMetrics
// checks it against real scrapes).
//
// DebugServer serves the pprof handlers, and nothing else, on a listener
// of its own: profiling is never on the API's port.
package perf
