package main

import (
	"io"

	"github.com/kvselect/kvselect/core"
	"github.com/kvselect/kvselect/perf"
	"github.com/kvselect/kvselect/zmqin"
)

// writeIngressMetrics exports the ZMQ ingress's counters at scrape time
// (perf.Registry.OnScrape): nothing is formatted on the event path.
func writeIngressMetrics(w io.Writer, st zmqin.Stats) {
	perf.WriteGauge(w, "kvselect_kv_listeners", float64(st.Ranks))
	perf.WriteCounter(w, "kvselect_kv_batches_applied_total", st.BatchesApplied)
	perf.WriteCounter(w, "kvselect_kv_events_received_total", st.EventsApplied)
	perf.WriteCounter(w, `kvselect_kv_messages_dropped_total{reason="bad_frame"}`, st.BadFrames)
	perf.WriteCounter(w, `kvselect_kv_messages_dropped_total{reason="queue_overflow"}`, st.Overflow)
	perf.WriteCounter(w, `kvselect_kv_messages_dropped_total{reason="stale"}`, st.Stale)
	perf.WriteCounter(w, `kvselect_kv_messages_dropped_total{reason="decode_error"}`, st.DecodeErrors)
	for r, n := range st.Events {
		perf.WriteCounter(w, perf.Label("kvselect_kv_wire_events_dropped_total", "reason", zmqin.DropReason(r).String()), n)
	}
	perf.WriteCounter(w, "kvselect_kv_sequence_gaps_total", st.Gaps)
	perf.WriteCounter(w, "kvselect_kv_missed_batches_total", st.MissedBatches)
	perf.WriteCounter(w, "kvselect_kv_replays_total", st.Replays)
	perf.WriteCounter(w, "kvselect_kv_replayed_batches_total", st.ReplayedBatches)
	perf.WriteCounter(w, "kvselect_kv_replay_failures_total", st.ReplayFailures)
	perf.WriteCounter(w, "kvselect_kv_replay_lost_total", st.ReplayLost)
	perf.WriteCounter(w, "kvselect_kv_publisher_restarts_total", st.Restarts)
	perf.WriteCounter(w, "kvselect_kv_connects_total", st.Connects)
	perf.WriteCounter(w, "kvselect_kv_dial_errors_total", st.DialErrors)
	perf.WriteCounter(w, "kvselect_kv_receive_errors_total", st.RecvErrors)
	perf.WriteGauge(w, "kvselect_kv_queue_depth", float64(st.QueueDepth))
	perf.WriteGauge(w, "kvselect_kv_queue_limit_per_listener", float64(st.QueueLimit))
}

// writeMembershipMetrics exports the --workers-file source and its
// reconciler.
func writeMembershipMetrics(w io.Writer, f workersFileStats, r core.ReconcilerStats) {
	perf.WriteCounter(w, "kvselect_workers_file_polls_total", f.Polls)
	perf.WriteCounter(w, "kvselect_workers_file_reads_total", f.Reads)
	perf.WriteCounter(w, "kvselect_workers_file_snapshots_total", f.Snapshots)
	perf.WriteCounter(w, "kvselect_workers_file_invalid_total", f.Invalid)
	perf.WriteGaugeUint(w, "kvselect_workers_file_workers", uint64(max(f.Workers, 0)))
	perf.WriteGaugeUint(w, "kvselect_workers_file_valid", b2u(f.Valid))
	perf.WriteGaugeUint(w, "kvselect_workers_file_stopped", b2u(f.Stopped))
	perf.WriteGaugeUint(w, "kvselect_workers_file_max_bytes", uint64(f.MaxBytes))
	perf.WriteCounter(w, "kvselect_catalog_reconcile_passes_total", r.Passes)
	perf.WriteCounter(w, "kvselect_catalog_reconcile_failures_total", r.Failures)
	perf.WriteGaugeUint(w, "kvselect_catalog_reconciler_tracked_workers", uint64(max(r.Tracked, 0)))
	perf.WriteGaugeUint(w, "kvselect_catalog_reconciler_converged_workers", uint64(max(r.Converged, 0)))
	perf.WriteGaugeUint(w, "kvselect_catalog_reconciler_stopped", b2u(r.Stopped))
}

func b2u(b bool) uint64 {
	if b {
		return 1
	}
	return 0
}
