package httpapi

import (
	"io"

	"github.com/kvselect/kvselect/core"
	"github.com/kvselect/kvselect/perf"
)

// writeStats turns core.Stats into scrape-time lines.
func (s *Server) writeStats(w io.Writer) {
	st := s.svc.Stats()
	perf.WriteCounter(w, `kvselect_selections_total{outcome="ok"}`, st.SelectOK)
	perf.WriteCounter(w, `kvselect_selections_total{outcome="error"}`, st.SelectFailed)
	perf.WriteCounter(w, `kvselect_bookings_total{outcome="ok"}`, st.BookOK)
	perf.WriteCounter(w, `kvselect_bookings_total{outcome="conflict"}`, st.BookConflict)
	perf.WriteCounter(w, `kvselect_bookings_total{outcome="failed"}`, st.BookFailed)
	perf.WriteCounter(w, `kvselect_reservation_replays_total{outcome="hit"}`, st.ReplayHit)
	perf.WriteCounter(w, `kvselect_reservation_replays_total{outcome="miss"}`, st.ReplayMiss)
	perf.WriteCounter(w, `kvselect_lifecycle_calls_total{outcome="ok"}`, st.LifecycleOK)
	perf.WriteCounter(w, `kvselect_lifecycle_calls_total{outcome="not_found"}`, st.LifecycleNotFound)
	perf.WriteCounter(w, `kvselect_bookings_total{outcome="refused"}`, st.BookRefused)
	perf.WriteCounter(w, `kvselect_reservations_released_total{cause="freed"}`, st.Freed)
	perf.WriteCounter(w, `kvselect_reservations_released_total{cause="expired"}`, st.Expired)
	perf.WriteCounter(w, `kvselect_reservations_released_total{cause="worker_removed"}`, st.WorkerGone)
	perf.WriteCounter(w, `kvselect_reservations_released_total{cause="replica_freed"}`, st.ReplicaFreed)
	perf.WriteCounter(w, `kvselect_reservations_released_total{cause="replica_replaced"}`, st.ReplicaReplaced)
	perf.WriteCounter(w, `kvselect_replica_events_applied_total`, st.ReplicaApplied)
	for d, n := range st.ReplicaDropped {
		perf.WriteCounter(w, replicaDropNames[d], n)
	}
	if r := st.Recovery; r != nil {
		perf.WriteGauge(w, `kvselect_recovered_partitions`, float64(r.Partitions))
		perf.WriteGauge(w, `kvselect_recovered_events`, float64(r.Events))
		perf.WriteGauge(w, `kvselect_recovery_failed_peers`, float64(r.FailedPeers))
	}
	perf.WriteGauge(w, `kvselect_active_reservations`, float64(st.Reservations))
	perf.WriteGauge(w, `kvselect_active_reservations_limit`, float64(st.MaxReservations))
	perf.WriteGauge(w, `kvselect_reservation_bytes`, float64(st.ReservationBytes))
	perf.WriteGauge(w, `kvselect_reservation_bytes_limit`, float64(st.MaxReservationBytes))
	perf.WriteGauge(w, `kvselect_kv_listeners`, float64(st.Listeners))
	perf.WriteGauge(w, `kvselect_kv_listeners_limit`, float64(st.MaxListeners))
	// The live plans are bounded by the reservation limit (core.Config).
	perf.WriteGaugeUint(w, `kvselect_disagg_plans`, uint64(max(st.Plans, 0)))
	perf.WriteGaugeUint(w, `kvselect_disagg_plans_limit`, uint64(max(st.MaxReservations, 0)))
	perf.WriteCounter(w, `kvselect_disagg_plans_total{outcome="ok"}`, st.PlansOK)
	perf.WriteCounter(w, `kvselect_disagg_plans_total{outcome="failed"}`, st.PlansFailed)
	perf.WriteCounter(w, `kvselect_disagg_plans_expired_total`, st.PlansExpired)
	perf.WriteCounter(w, `kvselect_disagg_prefill_busy_probe_failures_total`, st.PlanProbeFailed)
	perf.WriteCounter(w, `kvselect_disagg_leg_free_failures_total`, st.PlanFreeFailed)
	perf.WriteGauge(w, `kvselect_pending_selections`, float64(st.PendingEntries))
	perf.WriteGauge(w, `kvselect_pending_selection_bytes`, float64(st.PendingBytes))
	perf.WriteGauge(w, `kvselect_schedulable_workers`, float64(st.SchedulableWorkers))
	perf.WriteGauge(w, `kvselect_partitions`, float64(st.Partitions))
	for t := range st.IndexBlocks {
		perf.WriteGauge(w, tierNames[t], float64(st.IndexBlocks[t]))
	}
	for i, a := range [...]struct {
		name string
		st   *core.ApproxStats
	}{{"primary", &st.Approx}, {"predicted", &st.Predicted}} {
		if a.st.MaxBlocks == 0 {
			continue // no such index
		}
		perf.WriteGaugeUint(w, approxNames[i][0], uint64(a.st.Blocks))
		perf.WriteGaugeUint(w, approxNames[i][1], uint64(a.st.MaxBlocks))
		perf.WriteCounter(w, approxNames[i][2], a.st.Recorded)
		perf.WriteCounter(w, approxNames[i][3], a.st.Expired)
		perf.WriteCounter(w, approxNames[i][4], a.st.Pruned)
		perf.WriteCounter(w, approxNames[i][5], a.st.Prunes)
	}
	perf.WriteCounter(w, `kvselect_kv_hints_total`, st.Hints)
	perf.WriteCounter(w, `kvselect_kv_hints_skipped_no_index_total`, st.HintsNoIndex)
	s.writeSessionStats(w)
	perf.WriteCounter(w, `kvselect_kv_events_applied_total`, st.EventsApplied)
	perf.WriteCounter(w, `kvselect_kv_events_dropped_total`, st.EventsDropped)
	s.writeConnStats(w)
}

// writeConnStats exports the connection cap, the rejecters, the body limit
// and the drain state.
func (s *Server) writeConnStats(w io.Writer) {
	c := s.conns
	perf.WriteGaugeUint(w, `kvselect_http_connections_open`, uint64(max(c.open.Load(), 0)))
	perf.WriteGaugeUint(w, `kvselect_http_connections_max`, uint64(c.max))
	perf.WriteCounter(w, `kvselect_http_connections_rejected_total`, c.rejected.Load())
	perf.WriteCounter(w, `kvselect_http_accept_retries_total`, c.acceptRetries.Load())
	perf.WriteGaugeUint(w, `kvselect_http_connection_rejecters`, uint64(max(c.rejecting.Load(), 0)))
	perf.WriteGaugeUint(w, `kvselect_http_connection_rejecters_max`, maxRejecting)
	perf.WriteGaugeUint(w, `kvselect_http_max_request_body_bytes`, uint64(s.cfg.MaxRequestBodySize))
	draining := 0.0
	if s.draining.Load() {
		draining = 1
	}
	perf.WriteGauge(w, `kvselect_http_draining`, draining)
}

var tierNames = func() (out [core.NumTiers]string) {
	for t := range out {
		out[t] = perf.Label("kvselect_index_blocks", "tier", core.TierName(t))
	}
	return out
}()

// approxNames are the metrics of the approximate indexes, primary (no KV
// events) and predicted (the side index), in ApproxStats' order.
var approxNames = func() (out [2][6]string) {
	for i, index := range [2]string{"primary", "predicted"} {
		for j, m := range [6]string{"kvselect_approx_index_blocks", "kvselect_approx_index_blocks_limit",
			"kvselect_approx_index_recordings_total", "kvselect_approx_index_expired_blocks_total",
			"kvselect_approx_index_pruned_blocks_total", "kvselect_approx_index_prunes_total"} {
			out[i][j] = perf.Label(m, "index", index)
		}
	}
	return out
}()

var replicaDropNames = func() (out [core.NumReplicaDrops]string) {
	for d := range out {
		out[d] = perf.Label("kvselect_replica_events_dropped_total", "reason", core.ReplicaDrop(d).String())
	}
	return out
}()
