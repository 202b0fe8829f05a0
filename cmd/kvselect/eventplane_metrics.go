package main

import (
	"io"

	"github.com/kvselect/kvselect/perf"
	"github.com/kvselect/kvselect/zmqin/natsplane"
)

// The event plane's metric families and its /ready detail.

// eventPlaneDescs describe the families writeEventPlaneMetrics writes.
var eventPlaneDescs = []perf.Desc{
	{Name: "kvselect_event_plane_connected", Kind: perf.Gauge, Help: "1 while the NATS event-plane connection is up; a replica cut off keeps selecting on its own view."},
	{Name: "kvselect_event_plane_disconnects_total", Kind: perf.Counter, Help: "Times the NATS event-plane connection went down (the replica then selects on its own view; /ready's event_plane says since when)."},
	{Name: "kvselect_event_plane_reconnects_total", Kind: perf.Counter, Help: "Times the NATS event-plane connection came back; each re-synchronises the plane (KV ranks by their envelope gaps, bookings by a catch-up snapshot)."},
	{Name: "kvselect_event_plane_nats_routes", Kind: perf.Gauge, Help: "Live NATS routes of the embedded server to the other replicas' servers."},
	{Name: "kvselect_event_plane_kv_messages_total", Kind: perf.Counter, Help: "KV messages received over NATS, by form: batch (Dynamo #11776 on), single (before), legacy_json (Dynamo <= 0.8), and all."},
	{Name: "kvselect_event_plane_kv_events_applied_total", Kind: perf.Counter, Help: "KV events from NATS handed to the index."},
	{Name: "kvselect_event_plane_kv_dropped_total", Kind: perf.Counter, Help: "KV messages or events from NATS not applied, by reason (too_large, malformed_envelope, wrong_topic, malformed_payload: whole messages; unknown_worker, unknown_rank, zmq_rank, stale, unsupported, paused: events)."},
	{Name: "kvselect_event_plane_kv_events_skipped_total", Kind: perf.Counter, Help: "RouterEvents the codec skipped, by reason (unsupported_residency, cache_owner, unknown_tier, empty)."},
	{Name: "kvselect_event_plane_kv_envelope_gaps_total", Kind: perf.Counter, Help: "Envelope sequence gaps of a rank's publisher (the rank is cleared)."},
	{Name: "kvselect_event_plane_kv_missed_envelopes_total", Kind: perf.Counter, Help: "Envelopes missing in the gaps."},
	{Name: "kvselect_event_plane_kv_event_gaps_total", Kind: perf.Counter, Help: "Event id gaps of a rank (the rank is cleared, the event applied)."},
	{Name: "kvselect_event_plane_kv_missed_events_total", Kind: perf.Counter, Help: "Event ids missing in the gaps."},
	{Name: "kvselect_event_plane_kv_publisher_restarts_total", Kind: perf.Counter, Help: "Rank publishers restarted (a new publisher id, or its sequence back): the rank is cleared."},
	{Name: "kvselect_event_plane_kv_rank_resets_total", Kind: perf.Counter, Help: "Ranks cleared for a gap or a restart (no replay over NATS)."},
	{Name: "kvselect_event_plane_kv_ranks", Kind: perf.Gauge, Help: "Worker ranks fed by NATS KV events."},
	{Name: "kvselect_event_plane_slow_consumer_drops_total", Kind: perf.Counter, Help: "Messages the NATS client dropped at a full subscription queue, by part (kv, bookings); they show as gaps."},
	{Name: "kvselect_event_plane_bookings_published_total", Kind: perf.Counter, Help: "Booking events published in Dynamo's form (one a message) on active_sequences_events, for Dynamo routers (--event-plane-dynamo-bookings)."},
	{Name: "kvselect_event_plane_bookings_publish_errors_total", Kind: perf.Counter, Help: "Booking events the NATS client refused (closed, or its reconnect buffer full), by form (dynamo, batch)."},
	{Name: "kvselect_event_plane_bookings_batches_published_total", Kind: perf.Counter, Help: "Booking batches published to the other kvselect replicas on kvselect-bookings."},
	{Name: "kvselect_event_plane_bookings_batch_events_published_total", Kind: perf.Counter, Help: "Booking events in the batches published to the other kvselect replicas."},
	{Name: "kvselect_event_plane_bookings_dynamo_form", Kind: perf.Gauge, Help: "1 while this replica publishes Dynamo's form of its bookings (--event-plane-dynamo-bookings: auto publishes it while a Dynamo router was heard in the last 10 minutes)."},
	{Name: "kvselect_event_plane_bookings_queue_bytes", Kind: perf.Gauge, Help: "Bytes of booking events queued for NATS."},
	{Name: "kvselect_event_plane_bookings_queue_bytes_limit", Kind: perf.Gauge, Help: "Bytes of booking events the outbound queue holds at most; past it an event is dropped."},
	{Name: "kvselect_event_plane_bookings_batches_received_total", Kind: perf.Counter, Help: "Booking batches received from the other kvselect replicas."},
	{Name: "kvselect_event_plane_heartbeats_total", Kind: perf.Counter, Help: "Heartbeats (empty booking batches, one a second with peer liveness on) by direction (sent, received)."},
	{Name: "kvselect_event_plane_bookings_skipped_peer_form_total", Kind: perf.Counter, Help: "Dynamo-form booking messages of other kvselect replicas, skipped: their events come in the batches."},
	{Name: "kvselect_event_plane_bookings_outbound_dropped_total", Kind: perf.Counter, Help: "Booking events dropped at the full outbound queue: a booking never waits for the bus."},
	{Name: "kvselect_event_plane_bookings_queue_depth", Kind: perf.Gauge, Help: "Booking events queued for NATS."},
	{Name: "kvselect_event_plane_bookings_queue_limit", Kind: perf.Gauge, Help: "Booking events the outbound queue holds at most (--event-plane-queue)."},
	{Name: "kvselect_event_plane_bookings_received_total", Kind: perf.Counter, Help: "Dynamo-form booking messages received (from Dynamo routers, and other kvselect replicas' that are skipped)."},
	{Name: "kvselect_event_plane_bookings_skipped_own_total", Kind: perf.Counter, Help: "This process's own booking events, skipped by router_id."},
	{Name: "kvselect_event_plane_bookings_applied_total", Kind: perf.Counter, Help: "Peers' booking events handed to the service, from both forms (its kvselect_replica_* counters say what it did)."},
	{Name: "kvselect_event_plane_affinity_published_total", Kind: perf.Counter, Help: "Session bindings queued for the other kvselect replicas on kvselect-session-affinity."},
	{Name: "kvselect_event_plane_affinity_outbound_dropped_total", Kind: perf.Counter, Help: "Session bindings dropped at the full outbound queue."},
	{Name: "kvselect_event_plane_affinity_publish_errors_total", Kind: perf.Counter, Help: "Session bindings the NATS client refused."},
	{Name: "kvselect_event_plane_affinity_queue_depth", Kind: perf.Gauge, Help: "Session bindings queued for NATS."},
	{Name: "kvselect_event_plane_affinity_queue_limit", Kind: perf.Gauge, Help: "Session bindings the outbound queue holds at most."},
	{Name: "kvselect_event_plane_affinity_received_total", Kind: perf.Counter, Help: "Session binding messages received, by outcome (applied, own, dropped: malformed)."},
	{Name: "kvselect_event_plane_snapshot_requests_total", Kind: perf.Counter, Help: "Catch-up snapshot requests sent, by cause (all; resync: a snapshot fell short and the catalog changed)."},
	{Name: "kvselect_event_plane_snapshot_replies_total", Kind: perf.Counter, Help: "Complete snapshot replies received (each reconciles its replica's mirrors)."},
	{Name: "kvselect_event_plane_snapshot_events_total", Kind: perf.Counter, Help: "Snapshot admissions received, by outcome (received; freed: skipped, their free came first)."},
	{Name: "kvselect_event_plane_snapshot_dropped_total", Kind: perf.Counter, Help: "Snapshot messages dropped: malformed, out of order, or past the gathering bound."},
	{Name: "kvselect_event_plane_mirrors_reconciled_total", Kind: perf.Counter, Help: "Peers' mirrored bookings released because the peer's snapshot no longer held them (frees missed while cut off)."},
	{Name: "kvselect_event_plane_snapshots_served_total", Kind: perf.Counter, Help: "Snapshots sent to other replicas, by outcome (served, refused: rate limit or queue full, publish_error)."},
	{Name: "kvselect_event_plane_snapshot_events_served_total", Kind: perf.Counter, Help: "Bookings sent in snapshots."},
	{Name: "kvselect_event_plane_catalog_bound", Kind: perf.Gauge, Help: "1 once the worker catalog's JetStream bucket is bound (--nats-catalog)."},
	{Name: "kvselect_event_plane_catalog_workers", Kind: perf.Gauge, Help: "Workers in the catalog bucket as watched."},
	{Name: "kvselect_event_plane_catalog_workers_limit", Kind: perf.Gauge, Help: "Workers the watcher holds at most; more are dropped."},
	{Name: "kvselect_event_plane_catalog_updates_total", Kind: perf.Counter, Help: "Catalog bucket puts and deletes watched."},
	{Name: "kvselect_event_plane_catalog_dropped_total", Kind: perf.Counter, Help: "Catalog bucket entries dropped: a key outside w.{worker_id}, an undecodable value, past the worker bound."},
	{Name: "kvselect_event_plane_catalog_writes_total", Kind: perf.Counter, Help: "Mirror writes to the catalog bucket, by op (put, delete) and outcome (conflict: another writer was first, error)."},
	{Name: "kvselect_event_plane_catalog_bind_errors_total", Kind: perf.Counter, Help: "Failed attempts to bind the catalog bucket (JetStream not up yet)."},
	{Name: "kvselect_event_plane_peers_expired_total", Kind: perf.Counter, Help: "kvselect peers taken for dead (no heartbeat for --event-plane-peer-timeout) and their mirrored bookings released."},
	{Name: "kvselect_event_plane_mirrors_expired_total", Kind: perf.Counter, Help: "Mirrored bookings released because their peer went silent."},
	{Name: "kvselect_event_plane_peers_revived_total", Kind: perf.Counter, Help: "Snapshot requests to kvselect peers heard again after being taken for dead (their beats were lost, or this replica stalled): their live bookings are mirrored again."},
	{Name: "kvselect_event_plane_liveness_stalls_total", Kind: perf.Counter, Help: "Heartbeat ticks overdue by more than two intervals and half the peer timeout (this replica was stalled): every peer's clock restarted instead of silent ones being released."},
	{Name: "kvselect_event_plane_bookings_dropped_total", Kind: perf.Counter, Help: "Booking messages or events not applied, by reason (too_large, malformed_envelope, wrong_topic, malformed_event, unknown_worker, malformed_batch)."},
}

// writeEventPlaneMetrics writes the plane's families.
func writeEventPlaneMetrics(w io.Writer, ep *eventPlane) {
	ls := ep.link.Status()
	up := 0.0
	if ls.Connected {
		up = 1
	}
	perf.WriteGauge(w, "kvselect_event_plane_connected", up)
	perf.WriteCounter(w, "kvselect_event_plane_disconnects_total", ls.Disconnects)
	perf.WriteCounter(w, "kvselect_event_plane_reconnects_total", ls.Reconnects)
	if ep.srv != nil {
		perf.WriteGauge(w, "kvselect_event_plane_nats_routes", float64(ep.srv.NumRoutes()))
	}
	if ep.cat != nil {
		cs := ep.cat.Stats()
		bound := 0.0
		if cs.Bound {
			bound = 1
		}
		perf.WriteGauge(w, "kvselect_event_plane_catalog_bound", bound)
		perf.WriteGauge(w, "kvselect_event_plane_catalog_workers", float64(cs.Workers))
		perf.WriteGauge(w, "kvselect_event_plane_catalog_workers_limit", float64(cs.MaxWorkers))
		perf.WriteCounter(w, "kvselect_event_plane_catalog_updates_total", cs.Updates)
		perf.WriteCounter(w, "kvselect_event_plane_catalog_dropped_total", cs.Dropped)
		perf.WriteCounter(w, `kvselect_event_plane_catalog_writes_total{op="put",outcome="ok"}`, cs.Writes)
		perf.WriteCounter(w, `kvselect_event_plane_catalog_writes_total{op="delete",outcome="ok"}`, cs.Deletes)
		perf.WriteCounter(w, `kvselect_event_plane_catalog_writes_total{op="any",outcome="conflict"}`, cs.Conflicts)
		perf.WriteCounter(w, `kvselect_event_plane_catalog_writes_total{op="any",outcome="error"}`, cs.Errors)
		perf.WriteCounter(w, "kvselect_event_plane_catalog_bind_errors_total", cs.BindErrors)
	}
	if ep.in != nil {
		st := ep.in.Stats()
		perf.WriteCounter(w, `kvselect_event_plane_kv_messages_total{form="all"}`, st.Messages)
		for _, f := range []natsplane.Form{natsplane.FormBatch, natsplane.FormSingle, natsplane.FormLegacyJSON} {
			perf.WriteCounter(w, perf.Label("kvselect_event_plane_kv_messages_total", "form", f.String()), st.ByForm[f])
		}
		perf.WriteCounter(w, "kvselect_event_plane_kv_events_applied_total", st.EventsApplied)
		for d, v := range st.Dropped {
			perf.WriteCounter(w, perf.Label("kvselect_event_plane_kv_dropped_total", "reason", natsplane.Drop(d).String()), v)
		}
		for d, v := range st.Skipped {
			perf.WriteCounter(w, perf.Label("kvselect_event_plane_kv_events_skipped_total", "reason", natsplane.KVDrop(d).String()), v)
		}
		perf.WriteCounter(w, "kvselect_event_plane_kv_envelope_gaps_total", st.EnvelopeGaps)
		perf.WriteCounter(w, "kvselect_event_plane_kv_missed_envelopes_total", st.MissedEnvelopes)
		perf.WriteCounter(w, "kvselect_event_plane_kv_event_gaps_total", st.EventGaps)
		perf.WriteCounter(w, "kvselect_event_plane_kv_missed_events_total", st.MissedEvents)
		perf.WriteCounter(w, "kvselect_event_plane_kv_publisher_restarts_total", st.Restarts)
		perf.WriteCounter(w, "kvselect_event_plane_kv_rank_resets_total", st.Recoveries)
		perf.WriteGauge(w, "kvselect_event_plane_kv_ranks", float64(st.Ranks))
		perf.WriteCounter(w, `kvselect_event_plane_slow_consumer_drops_total{part="kv"}`, st.SlowConsumerDrops)
	}
	if ep.bk != nil {
		st := ep.bk.Stats()
		perf.WriteCounter(w, "kvselect_event_plane_bookings_published_total", st.Published)
		perf.WriteCounter(w, `kvselect_event_plane_bookings_publish_errors_total{form="dynamo"}`, st.PublishErrors)
		perf.WriteCounter(w, `kvselect_event_plane_bookings_publish_errors_total{form="batch"}`, st.BatchPublishErrors)
		perf.WriteCounter(w, "kvselect_event_plane_bookings_batches_published_total", st.Batches)
		perf.WriteCounter(w, "kvselect_event_plane_bookings_batch_events_published_total", st.BatchEvents)
		dyn := 0.0
		if st.DynamoForm {
			dyn = 1
		}
		perf.WriteGauge(w, "kvselect_event_plane_bookings_dynamo_form", dyn)
		perf.WriteGauge(w, "kvselect_event_plane_bookings_queue_bytes", float64(st.QueueBytes))
		perf.WriteGauge(w, "kvselect_event_plane_bookings_queue_bytes_limit", float64(st.QueueBytesLimit))
		perf.WriteCounter(w, "kvselect_event_plane_bookings_batches_received_total", st.BatchesReceived)
		perf.WriteCounter(w, `kvselect_event_plane_heartbeats_total{direction="sent"}`, st.Beats)
		perf.WriteCounter(w, `kvselect_event_plane_heartbeats_total{direction="received"}`, st.BeatsReceived)
		perf.WriteCounter(w, "kvselect_event_plane_bookings_skipped_peer_form_total", st.SkippedPeerForm)
		perf.WriteCounter(w, "kvselect_event_plane_bookings_outbound_dropped_total", st.OutboundDropped)
		perf.WriteGauge(w, "kvselect_event_plane_bookings_queue_depth", float64(st.QueueDepth))
		perf.WriteGauge(w, "kvselect_event_plane_bookings_queue_limit", float64(st.QueueLimit))
		perf.WriteCounter(w, "kvselect_event_plane_bookings_received_total", st.Received)
		perf.WriteCounter(w, "kvselect_event_plane_bookings_skipped_own_total", st.SkippedOwn)
		perf.WriteCounter(w, "kvselect_event_plane_bookings_applied_total", st.Applied)
		for d, v := range st.Dropped {
			perf.WriteCounter(w, perf.Label("kvselect_event_plane_bookings_dropped_total", "reason", natsplane.BookingDrop(d).String()), v)
		}
		perf.WriteCounter(w, `kvselect_event_plane_slow_consumer_drops_total{part="bookings"}`, st.SlowConsumerDrops)
		rs := ep.bk.ReplicaStats()
		perf.WriteCounter(w, "kvselect_event_plane_affinity_published_total", rs.AffinityPublished)
		perf.WriteCounter(w, "kvselect_event_plane_affinity_outbound_dropped_total", rs.AffinityOutboundDropped)
		perf.WriteCounter(w, "kvselect_event_plane_affinity_publish_errors_total", rs.AffinityPublishErrors)
		perf.WriteGauge(w, "kvselect_event_plane_affinity_queue_depth", float64(rs.AffinityQueueDepth))
		perf.WriteGauge(w, "kvselect_event_plane_affinity_queue_limit", float64(rs.AffinityQueueLimit))
		perf.WriteCounter(w, `kvselect_event_plane_affinity_received_total{outcome="applied"}`, rs.AffinityApplied)
		perf.WriteCounter(w, `kvselect_event_plane_affinity_received_total{outcome="own"}`, rs.AffinitySkippedOwn)
		perf.WriteCounter(w, `kvselect_event_plane_affinity_received_total{outcome="dropped"}`, rs.AffinityDropped)
		perf.WriteCounter(w, `kvselect_event_plane_snapshot_requests_total{cause="all"}`, rs.SnapshotRequests)
		perf.WriteCounter(w, `kvselect_event_plane_snapshot_requests_total{cause="resync"}`, rs.Resyncs)
		perf.WriteCounter(w, "kvselect_event_plane_snapshot_replies_total", rs.SnapshotReplies)
		perf.WriteCounter(w, `kvselect_event_plane_snapshot_events_total{outcome="received"}`, rs.SnapshotEvents)
		perf.WriteCounter(w, `kvselect_event_plane_snapshot_events_total{outcome="freed"}`, rs.SnapshotFreed)
		perf.WriteCounter(w, "kvselect_event_plane_snapshot_dropped_total", rs.SnapshotDropped)
		perf.WriteCounter(w, "kvselect_event_plane_mirrors_reconciled_total", rs.MirrorsReconciled)
		perf.WriteCounter(w, `kvselect_event_plane_snapshots_served_total{outcome="served"}`, rs.SnapshotsServed)
		perf.WriteCounter(w, `kvselect_event_plane_snapshots_served_total{outcome="refused"}`, rs.SnapshotsRefused)
		perf.WriteCounter(w, `kvselect_event_plane_snapshots_served_total{outcome="publish_error"}`, rs.SnapshotPublishErrors)
		perf.WriteCounter(w, "kvselect_event_plane_snapshot_events_served_total", rs.SnapshotEventsServed)
		perf.WriteCounter(w, "kvselect_event_plane_peers_expired_total", rs.PeersExpired)
		perf.WriteCounter(w, "kvselect_event_plane_mirrors_expired_total", rs.MirrorsExpired)
		perf.WriteCounter(w, "kvselect_event_plane_peers_revived_total", rs.PeersRevived)
		perf.WriteCounter(w, "kvselect_event_plane_liveness_stalls_total", rs.Stalls)
	}
}
