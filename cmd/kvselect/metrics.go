package main

import (
	"io"

	"github.com/kvselect/kvselect/httpapi"
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

// writeRemoteIndexMetrics exports the remote primary index's calls by
// outcome.
func writeRemoteIndexMetrics(w io.Writer, st httpapi.RemoteIndexStats) {
	for _, c := range []struct {
		outcome string
		n       uint64
	}{{"ok", st.OK}, {"refused", st.Refused}, {"deadline", st.Deadline}, {"status", st.Status}, {"decode", st.Decode}} {
		perf.WriteCounter(w, perf.Label("kvselect_remote_index_calls_total", "outcome", c.outcome), c.n)
	}
}
