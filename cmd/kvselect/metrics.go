package main

import (
	"io"

	"github.com/kvselect/kvselect/core"
	"github.com/kvselect/kvselect/httpapi"
	"github.com/kvselect/kvselect/perf"
	"github.com/kvselect/kvselect/zmqin"
)

// writeIngressMetrics exports the ZMQ ingress's counters at scrape time
// (perf.Registry.OnScrape): nothing is formatted on the event path. Every
// field of zmqin.Stats is exported (TestIngressMetricsExportEveryStat).
// The running listeners are kvselect_kv_listeners_running: httpapi already
// exports the service's kvselect_kv_listeners, and a scrape must not carry
// one series twice.
func writeIngressMetrics(w io.Writer, st zmqin.Stats) {
	perf.WriteGauge(w, "kvselect_kv_listeners_running", float64(st.Ranks))
	perf.WriteGauge(w, "kvselect_kv_listeners_connected", float64(st.Connected))
	perf.WriteCounter(w, "kvselect_kv_batches_applied_total", st.BatchesApplied)
	perf.WriteCounter(w, "kvselect_kv_events_received_total", st.EventsApplied)
	perf.WriteCounter(w, `kvselect_kv_messages_dropped_total{reason="bad_frame"}`, st.BadFrames)
	perf.WriteCounter(w, `kvselect_kv_messages_dropped_total{reason="queue_overflow"}`, st.Overflow)
	perf.WriteCounter(w, `kvselect_kv_messages_dropped_total{reason="stale"}`, st.Stale)
	perf.WriteCounter(w, `kvselect_kv_messages_dropped_total{reason="decode_error"}`, st.DecodeErrors)
	for r, n := range st.Events {
		perf.WriteCounter(w, perf.Label("kvselect_kv_wire_events_dropped_total", "reason", zmqin.DropReason(r).String()), n)
	}
	// Connections (live or replay) dropped because the peer broke a limit.
	perf.WriteCounter(w, `kvselect_kv_connections_dropped_total{reason="too_many_frames"}`, st.TooManyFrames)
	perf.WriteCounter(w, `kvselect_kv_connections_dropped_total{reason="message_too_large"}`, st.MessageTooLarge)
	perf.WriteCounter(w, `kvselect_kv_connections_dropped_total{reason="frame_too_large"}`, st.FrameTooLarge)
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
	perf.WriteGaugeUint(w, "kvselect_kv_queue_bytes", uint64(max(st.QueueBytes, 0)))
	perf.WriteGaugeUint(w, "kvselect_kv_queue_bytes_limit_per_listener", uint64(max(st.QueueBytesLimit, 0)))
	perf.WriteGaugeUint(w, "kvselect_kv_queue_bytes_limit", uint64(max(st.QueueBytesLimitTotal, 0)))
}

// writeMeshMetrics exports the replica mesh's counters at scrape time.
func writeMeshMetrics(w io.Writer, st zmqin.MeshStats) {
	perf.WriteCounter(w, "kvselect_replica_events_published_total", st.Published)
	perf.WriteCounter(w, `kvselect_replica_events_not_sent_total{reason="outbound_full"}`, st.OutboundDropped)
	perf.WriteCounter(w, `kvselect_replica_events_not_sent_total{reason="subscriber_queue_full"}`, st.PeerQueueDropped)
	perf.WriteCounter(w, "kvselect_replica_snapshot_events_sent_total", st.SnapshotEvents)
	perf.WriteCounter(w, "kvselect_replica_snapshot_requests_total", st.SnapshotRequests)
	perf.WriteCounter(w, "kvselect_replica_snapshots_truncated_total", st.SnapshotsTruncated)
	perf.WriteCounter(w, "kvselect_replica_snapshots_refused_total", st.SnapshotsRefused)
	perf.WriteCounter(w, "kvselect_replica_messages_received_total", st.Received)
	for d, n := range st.Dropped {
		perf.WriteCounter(w, perf.Label("kvselect_replica_messages_dropped_total", "reason", zmqin.MeshDrop(d).String()), n)
	}
	perf.WriteCounter(w, "kvselect_replica_apply_batches_total", st.Batches)
	perf.WriteGauge(w, "kvselect_replica_peers", float64(st.Peers))
	perf.WriteGauge(w, "kvselect_replica_peers_connected", float64(st.PeersLive))
	perf.WriteGauge(w, "kvselect_replica_subscribers", float64(st.Subscribers))
	perf.WriteCounter(w, "kvselect_replica_peer_connects_total", st.Connects)
	perf.WriteCounter(w, "kvselect_replica_peer_disconnects_total", st.Disconnects)
	perf.WriteCounter(w, "kvselect_replica_peer_dial_errors_total", st.DialErrors)
	perf.WriteGauge(w, "kvselect_replica_outbound_queue_depth", float64(st.OutboundDepth))
	perf.WriteGauge(w, "kvselect_replica_outbound_queue_limit", float64(st.OutboundLimit))
	perf.WriteGauge(w, "kvselect_replica_inbound_queue_depth", float64(st.InboundDepth))
	perf.WriteGauge(w, "kvselect_replica_inbound_queue_limit", float64(st.InboundLimit))
	perf.WriteCounter(w, "kvselect_replica_affinity_events_published_total", st.AffinityPublished)
	perf.WriteCounter(w, `kvselect_replica_affinity_events_not_sent_total{reason="outbound_full"}`, st.AffinityOutboundDropped)
	perf.WriteCounter(w, "kvselect_replica_affinity_events_received_total", st.AffinityApplied)
	perf.WriteGauge(w, "kvselect_replica_affinity_outbound_queue_depth", float64(st.AffinityOutboundDepth))
	perf.WriteGauge(w, "kvselect_replica_affinity_outbound_queue_limit", float64(st.AffinityOutboundLimit))
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
