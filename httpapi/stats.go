package httpapi

import (
	"io"

	"github.com/kvselect/kvselect/core"
	"github.com/kvselect/kvselect/perf"
)

// statsDescs describe the families writeStats writes.
var statsDescs = []perf.Desc{
	{Name: "kvselect_selections_total", Kind: perf.Counter, Help: "Worker selections (select, select_and_reserve, plan legs) by outcome: ok or error."},
	{Name: "kvselect_bookings_total", Kind: perf.Counter, Help: "Bookings by outcome: ok, conflict (the selection id is booked or being booked), failed (the worker rank left), refused (a reservation limit)."},
	{Name: "kvselect_reservation_replays_total", Kind: perf.Counter, Help: "POST /reservations in the cached-selection form, by outcome: hit (a pending selection was found) or miss."},
	{Name: "kvselect_lifecycle_calls_total", Kind: perf.Counter, Help: "prefill_complete, output_block and DELETE calls on reservations, by outcome: ok or not_found."},
	{Name: "kvselect_reservations_released_total", Kind: perf.Counter, Help: "Reservations released, by cause: freed (DELETE), expired (the expiry guard), worker_removed, replica_freed (a peer's free), replica_replaced (a peer's admission of the id)."},
	{Name: "kvselect_replica_events_applied_total", Kind: perf.Counter, Help: "Replica-mesh lifecycle events from peers applied to the local load accounting."},
	{Name: "kvselect_prefill_credited_tokens_total", Kind: perf.Counter, Help: "Booked prefill tokens the workers' KV events showed computed (BlockStored blocks matched to their booking); cache_balance reads the prefill left."},
	{Name: "kvselect_kv_stored_events_total", Kind: perf.Counter, Help: "Device-tier BlockStored events, by whether they credited a booking's prefill (credit=booking) or matched none (credit=none: output blocks, requests booked elsewhere)."},
	{Name: "kvselect_replica_events_dropped_total", Kind: perf.Counter, Help: "Replica-mesh lifecycle events from peers not applied, by reason."},
	{Name: "kvselect_recovered_partitions", Kind: perf.Gauge, Help: "Partitions restored from a peer's /dump at start-up."},
	{Name: "kvselect_recovered_events", Kind: perf.Gauge, Help: "KV events restored from a peer's /dump at start-up."},
	{Name: "kvselect_recovery_failed_peers", Kind: perf.Gauge, Help: "Peers whose /dump failed during start-up recovery."},
	{Name: "kvselect_active_reservations", Kind: perf.Gauge, Help: "Live reservations in the ledger, bookings in flight included."},
	{Name: "kvselect_active_reservations_limit", Kind: perf.Gauge, Help: "The live reservations kept at most (--max-reservations); a booking past it is refused."},
	{Name: "kvselect_reservation_bytes", Kind: perf.Gauge, Help: "Bytes of tracking hashes and ids the live reservations hold."},
	{Name: "kvselect_reservation_bytes_limit", Kind: perf.Gauge, Help: "The reservation bytes kept at most (--max-reservation-bytes)."},
	{Name: "kvselect_kv_listeners", Kind: perf.Gauge, Help: "KV-event listener ranks the catalog's schedulable workers need (one per dp rank)."},
	{Name: "kvselect_kv_listeners_limit", Kind: perf.Gauge, Help: "The KV-event listener ranks allowed at most (--max-kv-listeners)."},
	{Name: "kvselect_disagg_plans", Kind: perf.Gauge, Help: "Live disaggregated plans (/disagg), in flight included."},
	{Name: "kvselect_disagg_plans_limit", Kind: perf.Gauge, Help: "The live disaggregated plans kept at most (the reservation limit)."},
	{Name: "kvselect_disagg_plans_total", Kind: perf.Counter, Help: "POST /disagg/plan outcomes: ok or failed."},
	{Name: "kvselect_disagg_plans_expired_total", Kind: perf.Counter, Help: "Disaggregated plans removed by the sweep for being older than the expiry guard."},
	{Name: "kvselect_disagg_prefill_busy_probe_failures_total", Kind: perf.Counter, Help: "Prefill-busy probes of plans that failed (the bypass signal was then unknown)."},
	{Name: "kvselect_disagg_leg_free_failures_total", Kind: perf.Counter, Help: "Compensating or releasing frees of plan legs that found the booking already ended."},
	{Name: "kvselect_pending_selections", Kind: perf.Gauge, Help: "Cached selections waiting for POST /reservations (the pending-selection cache)."},
	{Name: "kvselect_pending_selection_bytes", Kind: perf.Gauge, Help: "Approximate bytes the pending-selection cache holds (its budget is --selection-cache-max-bytes)."},
	{Name: "kvselect_schedulable_workers", Kind: perf.Gauge, Help: "Workers whose lifecycle is schedulable, over all partitions."},
	{Name: "kvselect_partitions", Kind: perf.Gauge, Help: "Routing partitions (model_name, routing_group)."},
	{Name: "kvselect_approx_index_blocks", Kind: perf.Gauge, Help: "(worker rank, block) pairs the approximate indexes predict, by index: primary (without KV events) or predicted (the predicted-TTL side index)."},
	{Name: "kvselect_approx_index_blocks_limit", Kind: perf.Gauge, Help: "The (worker rank, block) pairs an approximate index holds at most before pruning, by index."},
	{Name: "kvselect_approx_index_recordings_total", Kind: perf.Counter, Help: "Bookings recorded into the approximate indexes, by index."},
	{Name: "kvselect_approx_index_expired_blocks_total", Kind: perf.Counter, Help: "Predicted blocks expired by their TTL, by index."},
	{Name: "kvselect_approx_index_pruned_blocks_total", Kind: perf.Counter, Help: "Predicted blocks pruned at the cap, by index."},
	{Name: "kvselect_approx_index_prunes_total", Kind: perf.Counter, Help: "Prunes of an approximate index at its cap, by index."},
	{Name: "kvselect_kv_hints_total", Kind: perf.Counter, Help: "Booking responses that carried a kv_hint (a longer cached prefix on another worker of the same type)."},
	{Name: "kvselect_kv_hints_skipped_no_index_total", Kind: perf.Counter, Help: "Bookings of a hint-capable partition that could not look for a hint (no local event-driven index)."},
	{Name: "kvselect_index_blocks", Kind: perf.Gauge, Help: "(worker rank, block) pairs in the KV index, by storage tier."},
	{Name: "kvselect_index_events_applied_total", Kind: perf.Counter, Help: "KV events (stored, removed, cleared) the index processed, some possibly in part (see kvselect_index_events_dropped_total)."},
	{Name: "kvselect_index_events_dropped_total", Kind: perf.Counter, Help: "KV events, or single block hashes of a removal, the index did not apply, by reason: parent_not_found, invalid_block_sequence, hash_conflict, block_not_found, unknown_event, rank_over_capacity (a store took a worker rank past kvselect_index_max_blocks_per_rank and the rank was cleared)."},
	{Name: "kvselect_index_max_blocks_per_rank", Kind: perf.Gauge, Help: "Blocks one worker rank may hold in an event-driven KV index, all tiers together (approximate indexes are bounded by kvselect_approx_index_blocks_limit instead)."},
	{Name: "kvselect_http_connections_open", Kind: perf.Gauge, Help: "Open HTTP connections."},
	{Name: "kvselect_http_connections_max", Kind: perf.Gauge, Help: "The open HTTP connections allowed at most (--max-connections; 0 is no cap)."},
	{Name: "kvselect_http_connections_rejected_total", Kind: perf.Counter, Help: "HTTP connections over --max-connections, answered 503 and closed."},
	{Name: "kvselect_http_accept_retries_total", Kind: perf.Counter, Help: "Temporary accept errors (e.g. EMFILE) retried with backoff."},
	{Name: "kvselect_http_connections_timed_out_total", Kind: perf.Counter, Help: "HTTP connections closed for a read, write or idle timeout."},
	{Name: "kvselect_http_connection_rejecters", Kind: perf.Gauge, Help: "Goroutines answering connections over the cap."},
	{Name: "kvselect_http_connection_rejecters_max", Kind: perf.Gauge, Help: "The goroutines answering connections over the cap at most."},
	{Name: "kvselect_http_max_request_body_bytes", Kind: perf.Gauge, Help: "The request body limit; larger bodies get 413."},
	{Name: "kvselect_http_draining", Kind: perf.Gauge, Help: "1 while the HTTP server drains at shutdown, else 0."},
}

// writeStats turns core.Stats into scrape-time lines (statsDescs).
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
	perf.WriteCounter(w, `kvselect_prefill_credited_tokens_total`, st.PrefillCreditTokens)
	perf.WriteCounter(w, `kvselect_kv_stored_events_total{credit="booking"}`, st.StoredEventsCredited)
	perf.WriteCounter(w, `kvselect_kv_stored_events_total{credit="none"}`, st.StoredEventsUncredited)
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
	perf.WriteGaugeUint(w, "kvselect_index_max_blocks_per_rank", uint64(max(st.IndexMaxBlocksPerRank, 0)))
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
	perf.WriteCounter(w, `kvselect_index_events_applied_total`, st.EventsApplied)
	for r, n := range st.EventsDropped {
		perf.WriteCounter(w, indexDropNames[r], n)
	}
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
	perf.WriteCounter(w, `kvselect_http_connections_timed_out_total`, c.timedOut.Load())
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

var indexDropNames = func() (out [core.NumDropReasons]string) {
	for r := range out {
		out[r] = perf.Label("kvselect_index_events_dropped_total", "reason", core.DropReasonName(r))
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
