package main

import (
	"io"
	"strconv"

	"github.com/kvselect/kvselect/core"
	"github.com/kvselect/kvselect/httpapi"
	"github.com/kvselect/kvselect/perf"
	"github.com/kvselect/kvselect/zmqin"
	"github.com/kvselect/kvselect/zmqin/mesh"
	"github.com/kvselect/kvselect/zmqin/zmtp"
)

// ingressDescs describe the families writeIngressMetrics writes.
var ingressDescs = []perf.Desc{
	{Name: "kvselect_kv_listeners_running", Kind: perf.Gauge, Help: "KV-event listeners (one per worker dp rank) running in the ZMQ ingress."},
	{Name: "kvselect_kv_listeners_connected", Kind: perf.Gauge, Help: "KV-event listeners with a live SUB connection to their worker."},
	{Name: "kvselect_kv_batches_delivered_total", Kind: perf.Counter, Help: "KV event batches (ZMQ messages) decoded and handed to the index."},
	{Name: "kvselect_kv_events_delivered_total", Kind: perf.Counter, Help: "KV events decoded and handed to the index (what it did with them: kvselect_index_events_*)."},
	{Name: "kvselect_kv_messages_dropped_total", Kind: perf.Counter, Help: "ZMQ messages not applied, by reason: bad_frame (not [topic, seq, payload]), too_many_frames (more than 3 frames: read to its end and skipped, the connection kept), queue_overflow (a full listener queue; shows as a gap), stale (seq at or below the watermark), decode_error (malformed payload)."},
	{Name: "kvselect_kv_wire_events_dropped_total", Kind: perf.Counter, Help: "Events skipped inside decoded batches, by reason (unknown tag or medium, other block size, token count, non-attention KV group, non-local, malformed)."},
	{Name: "kvselect_kv_connections_dropped_total", Kind: perf.Counter, Help: "Listener or replay connections dropped because the publisher broke a limit, by reason: too_many_frames (a message past 1,024 frames), message_too_large, frame_too_large."},
	{Name: "kvselect_kv_sequence_gaps_total", Kind: perf.Counter, Help: "Sequence gaps detected (a batch's seq above the watermark + 1)."},
	{Name: "kvselect_kv_missed_batches_total", Kind: perf.Counter, Help: "Batches missing in the gaps, before replay."},
	{Name: "kvselect_kv_replays_total", Kind: perf.Counter, Help: "Replay requests sent to workers' replay endpoints."},
	{Name: "kvselect_kv_replayed_batches_total", Kind: perf.Counter, Help: "Batches applied from replay answers."},
	{Name: "kvselect_kv_replay_failures_total", Kind: perf.Counter, Help: "Replays that could not complete (dial, timeout, bad reply)."},
	{Name: "kvselect_kv_replay_lost_total", Kind: perf.Counter, Help: "Replays whose answer started after the requested seq (the publisher's history was gone)."},
	{Name: "kvselect_kv_publisher_restarts_total", Kind: perf.Counter, Help: "Publisher restarts detected (the rank's blocks cleared, its watermark reset)."},
	{Name: "kvselect_kv_connects_total", Kind: perf.Counter, Help: "Successful listener connections, first and re-."},
	{Name: "kvselect_kv_dial_errors_total", Kind: perf.Counter, Help: "Failed listener dials or handshakes."},
	{Name: "kvselect_kv_receive_errors_total", Kind: perf.Counter, Help: "Listener connections lost while receiving (any reason)."},
	{Name: "kvselect_kv_queue_depth", Kind: perf.Gauge, Help: "Messages queued in the listeners, those being handled included."},
	{Name: "kvselect_kv_queue_limit_per_listener", Kind: perf.Gauge, Help: "Messages one listener may hold queued."},
	{Name: "kvselect_kv_queue_bytes", Kind: perf.Gauge, Help: "Payload bytes queued in the listeners."},
	{Name: "kvselect_kv_queue_bytes_limit_per_listener", Kind: perf.Gauge, Help: "Payload bytes one listener may hold queued."},
	{Name: "kvselect_kv_queue_bytes_limit", Kind: perf.Gauge, Help: "Payload bytes all listeners together may hold queued."},
	{Name: "kvselect_kv_writer_queue_bytes", Kind: perf.Gauge, Help: "Memory of the decoded KV event batches the index writers hold, queued or being applied."},
	{Name: "kvselect_kv_writer_queue_bytes_limit_per_writer", Kind: perf.Gauge, Help: "Decoded bytes one index writer may hold (a single larger batch is let through alone)."},
	{Name: "kvselect_kv_log_lines_suppressed_total", Kind: perf.Counter, Help: "Log lines of the KV-event listeners dropped by their per-rank rate limit."},
}

// writeIngressMetrics exports the ZMQ ingress's counters at scrape time
// (perf.Registry.OnScrape): nothing is formatted on the event path. Every
// field of zmqin.Stats is exported (TestIngressMetricsExportEveryStat).
// The running listeners are kvselect_kv_listeners_running: httpapi already
// exports the service's kvselect_kv_listeners, and a scrape must not carry
// one series twice.
func writeIngressMetrics(w io.Writer, st zmqin.Stats) {
	perf.WriteGauge(w, "kvselect_kv_listeners_running", float64(st.Ranks))
	perf.WriteGauge(w, "kvselect_kv_listeners_connected", float64(st.Connected))
	perf.WriteCounter(w, "kvselect_kv_batches_delivered_total", st.BatchesApplied)
	perf.WriteCounter(w, "kvselect_kv_events_delivered_total", st.EventsApplied)
	perf.WriteCounter(w, `kvselect_kv_messages_dropped_total{reason="bad_frame"}`, st.BadFrames)
	perf.WriteCounter(w, `kvselect_kv_messages_dropped_total{reason="too_many_frames"}`, st.ExtraFrames)
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
	perf.WriteGaugeUint(w, "kvselect_kv_writer_queue_bytes", uint64(max(st.WriterQueueBytes, 0)))
	perf.WriteGaugeUint(w, "kvselect_kv_writer_queue_bytes_limit_per_writer", uint64(max(st.WriterQueueBytesLimit, 0)))
	perf.WriteCounter(w, "kvselect_kv_log_lines_suppressed_total", st.LogsSuppressed)
}

// meshDescs describe the families writeMeshMetrics writes.
var meshDescs = []perf.Desc{
	{Name: "kvselect_replica_events_published_total", Kind: perf.Counter, Help: "Lifecycle events (admission, prefill complete, free) published to replica peers."},
	{Name: "kvselect_replica_events_not_sent_total", Kind: perf.Counter, Help: "Lifecycle events not sent to peers, by reason: outbound_full (the publisher's queue) or subscriber_queue_full (one peer's queue)."},
	{Name: "kvselect_replica_snapshot_events_sent_total", Kind: perf.Counter, Help: "Booking events sent in catch-up snapshots to joining peers."},
	{Name: "kvselect_replica_snapshots_truncated_total", Kind: perf.Counter, Help: "Catch-up snapshots cut short by a full subscriber queue."},
	{Name: "kvselect_replica_snapshots_refused_total", Kind: perf.Counter, Help: "Catch-up snapshot subscriptions refused by the per-peer rate limit."},
	{Name: "kvselect_replica_snapshot_requests_total", Kind: perf.Counter, Help: "Catch-up snapshots asked again of a peer once workers this process lacked were registered."},
	{Name: "kvselect_replica_messages_received_total", Kind: perf.Counter, Help: "Messages received from replica peers."},
	{Name: "kvselect_replica_messages_dropped_total", Kind: perf.Counter, Help: "Messages from replica peers dropped before applying, by reason."},
	{Name: "kvselect_replica_apply_batches_total", Kind: perf.Counter, Help: "Batches of peer events applied."},
	{Name: "kvselect_replica_peers", Kind: perf.Gauge, Help: "Configured replica peers."},
	{Name: "kvselect_replica_peers_connected", Kind: perf.Gauge, Help: "Replica peers with a live subscription."},
	{Name: "kvselect_replica_subscribers", Kind: perf.Gauge, Help: "Peers subscribed to this process's publisher."},
	{Name: "kvselect_replica_peer_connects_total", Kind: perf.Counter, Help: "Connections made to replica peers."},
	{Name: "kvselect_replica_peer_disconnects_total", Kind: perf.Counter, Help: "Connections to replica peers lost."},
	{Name: "kvselect_replica_peer_dial_errors_total", Kind: perf.Counter, Help: "Failed dials to replica peers."},
	{Name: "kvselect_replica_connections_dropped_total", Kind: perf.Counter, Help: "Connections to replica peers dropped because a message broke a limit, by reason: too_many_frames (past 1,024 frames), message_too_large, frame_too_large."},
	{Name: "kvselect_replica_affinity_events_published_total", Kind: perf.Counter, Help: "Session-binding events published on dynamo.session-affinity.v1."},
	{Name: "kvselect_replica_affinity_events_not_sent_total", Kind: perf.Counter, Help: "Session-binding events not sent, by reason."},
	{Name: "kvselect_replica_affinity_events_received_total", Kind: perf.Counter, Help: "Session-binding events received from peers."},
	{Name: "kvselect_replica_affinity_outbound_queue_depth", Kind: perf.Gauge, Help: "Session-binding events queued for the peers."},
	{Name: "kvselect_replica_affinity_outbound_queue_limit", Kind: perf.Gauge, Help: "Session-binding events the queue holds at most."},
	{Name: "kvselect_replica_affinity_subscribers", Kind: perf.Gauge, Help: "Peers subscribed to this process's session bindings."},
	{Name: "kvselect_replica_outbound_queue_depth", Kind: perf.Gauge, Help: "Events queued for the replica publisher."},
	{Name: "kvselect_replica_outbound_queue_limit", Kind: perf.Gauge, Help: "Events the replica publisher's queue holds at most."},
	{Name: "kvselect_replica_inbound_queue_depth", Kind: perf.Gauge, Help: "Peer events queued for applying."},
	{Name: "kvselect_replica_inbound_queue_limit", Kind: perf.Gauge, Help: "Peer events the apply queue holds at most."},
	{Name: "kvselect_replica_outbound_queue_bytes", Kind: perf.Gauge, Help: "Bytes of the events queued for the replica publisher."},
	{Name: "kvselect_replica_inbound_queue_bytes", Kind: perf.Gauge, Help: "Bytes of the peer events queued for applying, decoded hashes included."},
	{Name: "kvselect_replica_subscriber_queue_bytes", Kind: perf.Gauge, Help: "Bytes queued for the subscribed peers, summed over them."},
	{Name: "kvselect_replica_queue_bytes_limit", Kind: perf.Gauge, Help: "Bytes each of the outbound, inbound and per-subscriber queues holds at most."},
}

// writeMeshMetrics exports the replica mesh's counters at scrape time.
func writeMeshMetrics(w io.Writer, st mesh.Stats) {
	perf.WriteCounter(w, "kvselect_replica_events_published_total", st.Published)
	perf.WriteCounter(w, `kvselect_replica_events_not_sent_total{reason="outbound_full"}`, st.OutboundDropped)
	perf.WriteCounter(w, `kvselect_replica_events_not_sent_total{reason="subscriber_queue_full"}`, st.PeerQueueDropped)
	perf.WriteCounter(w, "kvselect_replica_snapshot_events_sent_total", st.SnapshotEvents)
	perf.WriteCounter(w, "kvselect_replica_snapshot_requests_total", st.SnapshotRequests)
	perf.WriteCounter(w, "kvselect_replica_snapshots_truncated_total", st.SnapshotsTruncated)
	perf.WriteCounter(w, "kvselect_replica_snapshots_refused_total", st.SnapshotsRefused)
	perf.WriteCounter(w, "kvselect_replica_messages_received_total", st.Received)
	for d, n := range st.Dropped {
		perf.WriteCounter(w, perf.Label("kvselect_replica_messages_dropped_total", "reason", mesh.Drop(d).String()), n)
	}
	perf.WriteCounter(w, "kvselect_replica_apply_batches_total", st.Batches)
	perf.WriteGauge(w, "kvselect_replica_peers", float64(st.Peers))
	perf.WriteGauge(w, "kvselect_replica_peers_connected", float64(st.PeersLive))
	perf.WriteGauge(w, "kvselect_replica_subscribers", float64(st.Subscribers))
	perf.WriteCounter(w, "kvselect_replica_peer_connects_total", st.Connects)
	perf.WriteCounter(w, "kvselect_replica_peer_disconnects_total", st.Disconnects)
	for r, n := range st.LimitDrops {
		perf.WriteCounter(w, perf.Label("kvselect_replica_connections_dropped_total", "reason", zmtp.LimitReasonNames[r]), n)
	}
	perf.WriteCounter(w, "kvselect_replica_peer_dial_errors_total", st.DialErrors)
	perf.WriteGauge(w, "kvselect_replica_outbound_queue_depth", float64(st.OutboundDepth))
	perf.WriteGauge(w, "kvselect_replica_outbound_queue_limit", float64(st.OutboundLimit))
	perf.WriteGauge(w, "kvselect_replica_inbound_queue_depth", float64(st.InboundDepth))
	perf.WriteGauge(w, "kvselect_replica_inbound_queue_limit", float64(st.InboundLimit))
	perf.WriteGaugeUint(w, "kvselect_replica_outbound_queue_bytes", uint64(max(st.OutboundBytes, 0)))
	perf.WriteGaugeUint(w, "kvselect_replica_inbound_queue_bytes", uint64(max(st.InboundBytes, 0)))
	perf.WriteGaugeUint(w, "kvselect_replica_subscriber_queue_bytes", uint64(max(st.PeerQueueBytes, 0)))
	perf.WriteGaugeUint(w, "kvselect_replica_queue_bytes_limit", uint64(max(st.QueueBytesLimit, 0)))
	perf.WriteCounter(w, "kvselect_replica_affinity_events_published_total", st.AffinityPublished)
	perf.WriteCounter(w, `kvselect_replica_affinity_events_not_sent_total{reason="outbound_full"}`, st.AffinityOutboundDropped)
	perf.WriteCounter(w, "kvselect_replica_affinity_events_received_total", st.AffinityApplied)
	perf.WriteGauge(w, "kvselect_replica_affinity_outbound_queue_depth", float64(st.AffinityOutboundDepth))
	perf.WriteGauge(w, "kvselect_replica_affinity_outbound_queue_limit", float64(st.AffinityOutboundLimit))
	perf.WriteGauge(w, "kvselect_replica_affinity_subscribers", float64(st.AffinitySubscribers))
}

// membershipDescs describe the families writeMembershipMetrics writes.
var membershipDescs = []perf.Desc{
	{Name: "kvselect_workers_file_polls_total", Kind: perf.Counter, Help: "Polls of the --workers-file."},
	{Name: "kvselect_workers_file_reads_total", Kind: perf.Counter, Help: "Reads of a changed --workers-file."},
	{Name: "kvselect_workers_file_snapshots_total", Kind: perf.Counter, Help: "Memberships from the --workers-file handed to the reconciler."},
	{Name: "kvselect_workers_file_invalid_total", Kind: perf.Counter, Help: "Reads of the --workers-file that were invalid (the last membership stays)."},
	{Name: "kvselect_workers_file_workers", Kind: perf.Gauge, Help: "Workers in the last valid --workers-file."},
	{Name: "kvselect_workers_file_valid", Kind: perf.Gauge, Help: "1 when the last read of the --workers-file was valid, else 0."},
	{Name: "kvselect_workers_file_stopped", Kind: perf.Gauge, Help: "1 once the --workers-file source stopped, else 0."},
	{Name: "kvselect_workers_file_max_bytes", Kind: perf.Gauge, Help: "The size limit of the --workers-file in bytes (a larger file is invalid)."},
	{Name: "kvselect_catalog_reconcile_passes_total", Kind: perf.Counter, Help: "Catalog reconciliation passes."},
	{Name: "kvselect_catalog_reconcile_failures_total", Kind: perf.Counter, Help: "Catalog reconciliation passes that failed (retried 5 s later)."},
	{Name: "kvselect_catalog_reconciler_tracked_workers", Kind: perf.Gauge, Help: "Workers the reconciler introduced and tracks."},
	{Name: "kvselect_catalog_reconciler_converged_workers", Kind: perf.Gauge, Help: "Tracked workers whose catalog record matches the source."},
	{Name: "kvselect_catalog_reconciler_stopped", Kind: perf.Gauge, Help: "1 once the reconciler stopped, else 0."},
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

// buildDesc describes kvselect_build_info.
var buildDesc = perf.Desc{Name: "kvselect_build_info", Kind: perf.Gauge, Help: "kvselect's version and the Go version it was built with (value 1)."}

// writeBuildInfo writes kvselect_build_info{version, goversion} 1.
func writeBuildInfo(w io.Writer, b buildInfo) {
	perf.WriteGauge(w, `kvselect_build_info{version=`+strconv.Quote(b.version)+`,goversion=`+strconv.Quote(b.goVersion)+`}`, 1)
}

func b2u(b bool) uint64 {
	if b {
		return 1
	}
	return 0
}

// writeRemoteIndexMetrics exports the remote primary index's calls by
// outcome.
// remoteIndexDescs describe the family writeRemoteIndexMetrics writes.
var remoteIndexDescs = []perf.Desc{
	{Name: "kvselect_remote_index_calls_total", Kind: perf.Counter, Help: "Queries of the standalone indexer (--remote-indexer-url), by outcome: ok, refused, deadline, status (an error status), decode (an undecodable body)."},
}

func writeRemoteIndexMetrics(w io.Writer, st httpapi.RemoteIndexStats) {
	for _, c := range []struct {
		outcome string
		n       uint64
	}{{"ok", st.OK}, {"refused", st.Refused}, {"deadline", st.Deadline}, {"status", st.Status}, {"decode", st.Decode}} {
		perf.WriteCounter(w, perf.Label("kvselect_remote_index_calls_total", "outcome", c.outcome), c.n)
	}
}
