// Package perf is observability plumbing with no domain knowledge: metric
// handles on a VictoriaMetrics/metrics Set, the Prometheus text exposition,
// pprof handlers for fasthttp and the runtime's contention-profile rates.
//
// Handles are created once, at start-up (Registry.Route); the per-request
// cost is one counter increment and one histogram update, with no string
// formatting and no map lookup. Domain packages expose cheap Stats; the host
// turns them into lines at scrape time with Registry.OnScrape.
package perf
