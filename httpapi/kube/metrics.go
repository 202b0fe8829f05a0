package kube

import (
	"io"
	"strconv"

	"github.com/kvselect/kvselect/perf"
)

// metricDescs describe the families RegisterMetrics writes.
var metricDescs = []perf.Desc{
	{Name: "kvselect_kube_synced", Kind: perf.Gauge, Help: "1 once the Kubernetes informers have listed the pods (and the InferencePool), else 0."},
	{Name: "kvselect_kube_ready", Kind: perf.Gauge, Help: "1 while the membership is known: synced and, with --pool-name, the InferencePool exists with a usable spec."},
	{Name: "kvselect_kube_pods_seen", Kind: perf.Gauge, Help: "Pods in the informer cache (the namespace's with --pool-name, the selector's with --endpoint-selector)."},
	{Name: "kvselect_kube_pods_matched", Kind: perf.Gauge, Help: "Pods the pool's or the flag's selector matches, ready or not."},
	{Name: "kvselect_kube_pods_ready", Kind: perf.Gauge, Help: "Workers in the last membership: matched pods that are Ready, not terminating, with an IP."},
	{Name: "kvselect_kube_pods_in_both_pools", Kind: perf.Gauge, Help: "Pods that both the decode and the prefill InferencePool select: they are decode workers only."},
	{Name: "kvselect_kube_pool_ready", Kind: perf.Gauge, Help: "Per InferencePool (pool, routing_group): 1 while it exists with a usable spec, else 0."},
	{Name: "kvselect_kube_pool_workers", Kind: perf.Gauge, Help: "Per InferencePool (pool, routing_group): its workers in the last membership."},
	{Name: "kvselect_kube_ignored_target_ports", Kind: perf.Gauge, Help: "Target ports past the first, which are not registered."},
	{Name: "kvselect_kube_events_total", Kind: perf.Counter, Help: "Pod and InferencePool notifications from the informers."},
	{Name: "kvselect_kube_builds_total", Kind: perf.Counter, Help: "Memberships computed from the informer caches (after the debounce window)."},
	{Name: "kvselect_kube_snapshots_total", Kind: perf.Counter, Help: "Changed memberships handed to the catalog reconciler."},
	{Name: "kvselect_kube_errors_total", Kind: perf.Counter, Help: "Discovery errors, by kind: watch (a list or watch failed; the informer retries), pool (the InferencePool missing or unusable), collision (a pod left out for a colliding worker id)."},
	{Name: "kvselect_kube_last_error_timestamp_seconds", Kind: perf.Gauge, Help: "Unix time of the latest discovery error; 0: none."},
	{Name: "kvselect_kube_reconcile_passes_total", Kind: perf.Counter, Help: "Passes of the catalog reconciler fed by Kubernetes discovery."},
	{Name: "kvselect_kube_reconcile_failures_total", Kind: perf.Counter, Help: "Reconciler passes that failed (retried 5 s later unless a newer membership comes)."},
}

// RegisterMetrics exports the source's Stats on reg at every scrape.
func (s *Source) RegisterMetrics(reg *perf.Registry) {
	reg.Describe(metricDescs...)
	reg.OnScrape(func(w io.Writer) { writeMetrics(w, s.Stats()) })
}

func writeMetrics(w io.Writer, st Stats) {
	perf.WriteGaugeUint(w, "kvselect_kube_synced", b2u(st.Synced))
	perf.WriteGaugeUint(w, "kvselect_kube_ready", b2u(st.PoolResolved))
	perf.WriteGaugeUint(w, "kvselect_kube_pods_seen", uint64(max(st.PodsSeen, 0)))
	perf.WriteGaugeUint(w, "kvselect_kube_pods_matched", uint64(max(st.PodsMatched, 0)))
	perf.WriteGaugeUint(w, "kvselect_kube_pods_ready", uint64(max(st.PodsReady, 0)))
	perf.WriteGaugeUint(w, "kvselect_kube_pods_in_both_pools", uint64(max(st.PodsInBothPools, 0)))
	for _, p := range st.Pools {
		labels := "{pool=" + strconv.Quote(p.Name) + ",routing_group=" + strconv.Quote(p.RoutingGroup) + "}"
		perf.WriteGaugeUint(w, "kvselect_kube_pool_ready"+labels, b2u(p.Resolved))
		perf.WriteGaugeUint(w, "kvselect_kube_pool_workers"+labels, uint64(max(p.Workers, 0)))
	}
	perf.WriteGaugeUint(w, "kvselect_kube_ignored_target_ports", uint64(max(st.IgnoredTargetPorts, 0)))
	perf.WriteCounter(w, "kvselect_kube_events_total", st.Events)
	perf.WriteCounter(w, "kvselect_kube_builds_total", st.Builds)
	perf.WriteCounter(w, "kvselect_kube_snapshots_total", st.Snapshots)
	for _, e := range []struct {
		kind string
		n    int64
	}{{"watch", st.WatchErrors}, {"pool", st.PoolErrors}, {"collision", st.Collisions}} {
		perf.WriteCounter(w, perf.Label("kvselect_kube_errors_total", "kind", e.kind), uint64(max(e.n, 0)))
	}
	perf.WriteGaugeUint(w, "kvselect_kube_last_error_timestamp_seconds", uint64(max(st.LastErrorUnix, 0)))
	perf.WriteCounter(w, "kvselect_kube_reconcile_passes_total", st.Reconciler.Passes)
	perf.WriteCounter(w, "kvselect_kube_reconcile_failures_total", st.Reconciler.Failures)
}

func b2u(b bool) uint64 {
	if b {
		return 1
	}
	return 0
}
