package httpapi

import (
	"io"
	"strconv"

	"github.com/kvselect/kvselect/core"
	"github.com/kvselect/kvselect/perf"
)

// sessionDescs describe the families writeSessionStats writes.
var sessionDescs = []perf.Desc{
	{Name: "kvselect_session_affinity_tables", Kind: perf.Gauge, Help: "Partitions with a session-affinity table (--session-affinity-ttl-secs)."},
	{Name: "kvselect_session_affinity_entries", Kind: perf.Gauge, Help: "Session bindings in the tables, initializing sessions included."},
	{Name: "kvselect_session_affinity_entries_limit", Kind: perf.Gauge, Help: "The bindings one table holds at most."},
	{Name: "kvselect_session_affinity_id_bytes_limit", Kind: perf.Gauge, Help: "The longest session id accepted, in bytes."},
	{Name: "kvselect_session_affinity_binds_total", Kind: perf.Counter, Help: "Sessions bound to a worker."},
	{Name: "kvselect_session_affinity_rebinds_total", Kind: perf.Counter, Help: "Sessions bound again to another worker (theirs left or could not serve)."},
	{Name: "kvselect_session_affinity_invalidated_total", Kind: perf.Counter, Help: "Bindings dropped because their worker left."},
	{Name: "kvselect_session_affinity_rejected_total", Kind: perf.Counter, Help: "Selections refused by a hard binding."},
	{Name: "kvselect_session_affinity_full_table_total", Kind: perf.Counter, Help: "Sessions not bound because their table was full."},
	{Name: "kvselect_session_affinity_reaped_total", Kind: perf.Counter, Help: "Idle bindings removed after their TTL."},
	{Name: "kvselect_session_affinity_published_total", Kind: perf.Counter, Help: "Binding events published to replica peers."},
	{Name: "kvselect_session_affinity_replica_events_total", Kind: perf.Counter, Help: "Binding events from replica peers, by outcome."},
	{Name: "kvselect_router_queue_depth", Kind: perf.Gauge, Help: "Selections waiting in the router queues now."},
	{Name: "kvselect_router_queue_enqueued_total", Kind: perf.Counter, Help: "Selections that waited in a router queue."},
	{Name: "kvselect_router_queue_dispatched_total", Kind: perf.Counter, Help: "Waiting selections dispatched."},
	{Name: "kvselect_router_queue_cancelled_total", Kind: perf.Counter, Help: "Waiting selections cancelled (the client left, or shutdown)."},
	{Name: "kvselect_router_queue_overlap_refreshed_total", Kind: perf.Counter, Help: "Dequeue-time refreshes of a waiting selection's overlap."},
	{Name: "kvselect_router_queue_rejected_total", Kind: perf.Counter, Help: "Selections refused at a queue cap (429), by limit kind."},
	{Name: "kvselect_router_queue_wait_seconds", Kind: perf.Histogram, Help: "Time dispatched selections waited in a router queue."},
	{Name: "kvselect_router_queue_class_requests", Kind: perf.Gauge, Help: "Requests waiting, by partition and policy class."},
	{Name: "kvselect_router_queue_class_raw_isl_tokens", Kind: perf.Gauge, Help: "Input tokens of the waiting requests, by partition and policy class."},
	{Name: "kvselect_router_queue_class_cached_tokens", Kind: perf.Gauge, Help: "Cached tokens of the waiting requests, by partition and policy class."},
	{Name: "kvselect_router_queue_class_limit", Kind: perf.Gauge, Help: "A policy class's cap at the partition's current worker count, by limit kind."},
}

// writeSessionStats writes the session tables' and router queues' metrics:
// every bound (entries and session id bytes per table, each class's caps)
// beside what it bounds.
func (s *Server) writeSessionStats(w io.Writer) {
	a := s.svc.AffinityStats()
	perf.WriteGaugeUint(w, `kvselect_session_affinity_tables`, uint64(a.Tables))
	perf.WriteGaugeUint(w, `kvselect_session_affinity_entries`, uint64(max(a.Entries, 0)))
	perf.WriteGaugeUint(w, `kvselect_session_affinity_entries_limit`, uint64(a.EntryLimit))
	perf.WriteGaugeUint(w, `kvselect_session_affinity_id_bytes_limit`, uint64(a.SessionIDLimit))
	perf.WriteCounter(w, `kvselect_session_affinity_binds_total`, a.Binds)
	perf.WriteCounter(w, `kvselect_session_affinity_rebinds_total`, a.Rebinds)
	perf.WriteCounter(w, `kvselect_session_affinity_invalidated_total`, a.Invalidated)
	perf.WriteCounter(w, `kvselect_session_affinity_rejected_total`, a.Rejected)
	perf.WriteCounter(w, `kvselect_session_affinity_full_table_total`, a.FullTable)
	perf.WriteCounter(w, `kvselect_session_affinity_reaped_total`, a.Reaped)
	perf.WriteCounter(w, `kvselect_session_affinity_published_total`, a.Published)
	for k, n := range a.Applied {
		perf.WriteCounter(w, affinityApplyNames[k], n)
	}
	q := s.svc.QueueStats()
	perf.WriteGaugeUint(w, `kvselect_router_queue_depth`, uint64(max(q.Depth, 0)))
	perf.WriteCounter(w, `kvselect_router_queue_enqueued_total`, q.Enqueued)
	perf.WriteCounter(w, `kvselect_router_queue_dispatched_total`, q.Dispatched)
	perf.WriteCounter(w, `kvselect_router_queue_cancelled_total`, q.Cancelled)
	perf.WriteCounter(w, `kvselect_router_queue_overlap_refreshed_total`, q.Refreshed)
	for k, n := range q.Rejected {
		perf.WriteCounter(w, queueRejectNames[k], n)
	}
	// The wait histogram, cumulative as Prometheus reads it.
	cum := uint64(0)
	for i, n := range q.WaitBuckets {
		cum += n
		le := "+Inf"
		if i < len(core.QueueWaitBounds) {
			le = strconv.FormatFloat(core.QueueWaitBounds[i].Seconds(), 'g', -1, 64)
		}
		perf.WriteCounter(w, `kvselect_router_queue_wait_seconds_bucket{le="`+le+`"}`, cum)
	}
	perf.WriteGauge(w, `kvselect_router_queue_wait_seconds_sum`, q.WaitSeconds)
	perf.WriteCounter(w, `kvselect_router_queue_wait_seconds_count`, cum)
	for _, c := range q.Classes {
		lbl := `{model_name=` + strconv.Quote(c.ModelName) + `,routing_group=` + strconv.Quote(c.RoutingGroup) + `,class=` + strconv.Quote(c.Class)
		perf.WriteGaugeUint(w, `kvselect_router_queue_class_requests`+lbl+`}`, uint64(max(c.Requests, 0)))
		perf.WriteGaugeUint(w, `kvselect_router_queue_class_raw_isl_tokens`+lbl+`}`, uint64(max(c.RawISLTokens, 0)))
		perf.WriteGaugeUint(w, `kvselect_router_queue_class_cached_tokens`+lbl+`}`, uint64(max(c.CachedTokens, 0)))
		for k, l := range c.Limits {
			if l >= 0 {
				perf.WriteGaugeUint(w, `kvselect_router_queue_class_limit`+lbl+`,limit_kind="`+core.QueueLimitKindName(k)+`"}`, uint64(l))
			}
		}
	}
	s.writeDynamoStats(w, &q)
}

var affinityApplyNames = func() (out [core.NumAffinityApply]string) {
	for k := range out {
		out[k] = perf.Label("kvselect_session_affinity_replica_events_total", "outcome", core.AffinityApply(k).String())
	}
	return out
}()

var queueRejectNames = func() (out [len(core.QueueStats{}.Rejected)]string) {
	for k := range out {
		out[k] = perf.Label("kvselect_router_queue_rejected_total", "limit_kind", core.QueueLimitKindName(k))
	}
	return out
}()
