// Package natsplane makes kvselect a member of a Dynamo fleet's event
// plane over NATS (ai-dynamo/dynamo:lib/runtime/src/transports/event_plane/):
// workers' KV events come in from their kv-events subjects into the same
// partition sinks (core.EventSink, the radix index) as the ZMQ ingress's,
// and bookings are exchanged with Dynamo routers, and other kvselect
// processes, on active_sequences_events, through core's replica seam. It
// also runs the embedded nats-server that makes `--event-plane nats`
// work with no NATS deployment (Server). It is the only package that
// imports nats.go and nats-server; its msgpack comes from
// zmqin/internal/msgpack and the ActiveSequenceEvent codec from
// zmqin/mesh (one definition for both buses).
//
// # Using it (the host's duties)
//
//  1. A bus: StartServer(ServerConfig) for an embedded server (clustered
//     with peers through NATS routes), or a fleet's URL; Dial(url), the
//     Link (its state for /ready, OnReconnect for re-synchronising).
//  2. NewIngress(IngressConfig{Scope, Inner: the ZMQ ingress}) is the
//     core.Options.Ingress (or a core.Indexer's ingress);
//     core.Config.KVEndpointsOptional (core.IndexerConfig's) lets workers
//     register without a ZMQ endpoint. Start(nc) subscribes.
//  3. NewBookings(BookingsConfig{Scope}) is the core.Options.Replica
//     (or one of them); Start(nc, svc) once the service exists.
//  4. Stats of each for metrics; at shutdown close Bookings, then the
//     Ingress (after the HTTP server stopped registering workers), then
//     the connection, then the Server.
//
// # Subjects and wire formats
//
// Subjects are namespace.{ns}.component.{c}[.endpoint.{e}].{topic}, each
// segment escaped as Dynamo escapes it (EncodeSegment). A message body is
// an EventEnvelope (envelope.go) around the topic's msgpack payload, or,
// from Dynamo <= 0.8, the JSON of one RouterEvent (told by its first
// byte). KV payloads are arrays of RouterEvents (Dynamo #11776 on) or one
// RouterEvent (before), told by their first byte (kvevents.go); the
// current form is what AppendRouterEvents writes. Bookings are one bare
// ActiveSequenceEvent per envelope, Dynamo's NATS form, for Dynamo
// routers, and batches of the ZMQ mesh's replica envelopes between
// kvselect replicas (batches.go). The wire
// fixtures in testdata/wire are written by testdata/wire.py with
// Debian's python3-msgpack the way rmp_serde writes named maps, and the
// codec is checked against them byte for byte.
//
// # KV events: sequence rules
//
// Every event names its (worker_id, dp_rank); only registered workers'
// ranks without a ZMQ endpoint are applied (DropUnknownWorker,
// DropUnknownRank, DropZMQRank otherwise), and not while the indexer's
// test route has paused the rank (DropPaused: the cursor stays where it
// was, so the first event after the resume meets rule 3 or 7). Each such rank has a cursor:
// the publisher id and envelope sequence of the last envelope that
// carried its events, and its last event id. For each event, in order:
//
//  1. Incarnation: the envelope's publisher id differs from the rank's
//     (a worker restart draws a new random id, Dynamo #11014): the rank
//     is cleared and its cursor dropped (Restarts).
//  2. Restart: same publisher, sequence below the rank's: the publisher
//     restarted with a stable id (an id from a pod-name hash); as 1.
//  3. Envelope gap: the sequence is more than one past the rank's: the
//     bus lost messages (a slow consumer, a partition); the rank is
//     cleared and its cursor dropped (EnvelopeGaps, MissedEnvelopes).
//     Dynamo's own routers number no KV gap by envelope (they use
//     event ids, rules 4 to 7); kvselect checks both, as its ZMQ ingress
//     checks the engines' seq.
//  4. Initial: no event id yet: apply.
//  5. Stale: event id <= the cursor's: drop (DropStale).
//  6. Contiguous: the next id: apply.
//  7. Gap: an id past the next: the rank is cleared, then the event
//     applied (EventGaps, MissedEvents), Dynamo's degraded reset for a
//     source it cannot query (ai-dynamo/dynamo:
//     lib/kv-router/src/recovery/cursor.rs,
//     lib/llm/src/kv_router/indexer/recovery/worker_query_state.rs).
//     Dynamo's tree-dump recovery goes over its request plane, which
//     kvselect does not speak; ZMQ's replay endpoints stay the ZMQ
//     ingress's.
//
// A reset-all Cleared event is applied like any other. The legacy JSON
// form has no envelope and gets rules 4 to 7. A malformed message is
// dropped whole and counted by reason (Drop); the subscription carries
// on. Events of one rank come from one subject, so from one subscription
// and in order; processing is serialized over the subscriptions, and the
// apply runs under the registry's read lock, so Detach (which takes it
// for writing) is a barrier: on its return no event of the worker
// reaches its sink.
//
// # Bookings
//
// Publish encodes a service lifecycle event (admission, prefill
// completion, free) on the caller's goroutine and queues it without
// blocking; a full queue (QueueLimit events, QueueBytes bytes) drops and
// counts it. One publisher goroutine sends the queue in batches to the
// other kvselect replicas on kvselect-bookings (the ZMQ mesh's batching
// rule and replica envelope) and, while DynamoForm says so (by default
// while a Dynamo router was heard in the last DynamoRouterWindow), each
// event in Dynamo's form too, in an envelope with its own sequence, on
// the endpoint scope's active_sequences_events. Received Dynamo-form
// events (endpoint and component scopes) whose router_id is this
// process's are skipped, and so are a kvselect peer's, told by their
// envelope's publisher_id (batches.go: its batch carries them, so each
// event is applied once); the others, a Dynamo router's, are mapped to
// their worker's partition (core.Service.WorkerPartition: the event names
// no partition) and applied through core.Service.ApplyReplica, which
// drops what it cannot apply (unknown workers and requests) with its own
// counters. Batches name their partition and are applied whole. There is
// no catch-up from Dynamo routers (Dynamo has none).
//
// # Between kvselect replicas
//
// Bookings also carry what the ZMQ mesh carries between kvselect
// replicas (replicas.go), with the mesh's encoders and limits: session
// bindings (HandleAffinity, PublishAffinity: core.AffinitySink) on
// kvselect-session-affinity, and the catch-up snapshot by request/reply
// on kvselect-slot-snapshot, asked on join (Start), on each reconnect
// (Resync, both ways), on a new route of the embedded server (CatchUp),
// and again after one fell short of the catalog. A complete reply
// reconciles its peer's mirrors (core.Service.ReleaseMirrors), so frees
// missed while cut off do not leak until the expiry guard. Replicas
// also beat, an empty batch on kvselect-bookings every second
// (liveness.go): a kvselect peer silent
// for PeerTimeout while this replica's link is up is taken for dead and
// its mirrors are released, so a replica killed with live bookings does
// not hold its peers' load until the expiry guard either; a peer taken
// for dead and heard again is asked for its snapshot (liveness.go has the
// rules).
//
// # Partitions
//
// A replica cut off from NATS (its server gone, the network split) keeps
// selecting and booking on its own view: nothing of selection waits on
// the bus (bookings are queued, bounded; KV subscriptions just go quiet).
// Link reports it (LinkStatus: /ready's event_plane, the connected
// gauge) and nats.go reconnects forever. On reconnect, a KV rank whose
// publisher went on meanwhile is re-synchronised by the envelope gap at
// its next message (rule 3 above: cleared, then the event applied); a
// rank whose publisher published while cut off and never again keeps its
// stale view until then. Bookings published while cut off wait in
// nats.go's reconnect buffer (8 MiB; past it they are PublishErrors).
//
// # The worker catalog
//
// Catalog (catalog.go) shares the worker catalog through a JetStream
// key-value bucket (ServerConfig.JetStream on an embedded server): every
// replica watches it (a core.CatalogSource), and the one that has the
// discovery source mirrors it with compare-and-swap writes (Mirror).
//
// # Goroutines
//
//   - The NATS client's: a reader, and one delivery goroutine per
//     subscription (four for KV; three for bookings, plus the bindings' and
//     the snapshot requests' and, while gathering, the reply inbox), which run Ingress
//     and Bookings processing; they stop on Unsubscribe (Close).
//   - Bookings: one publisher (batches and heartbeats, batches.go), fed by Publish,
//     PublishAffinity and the snapshot requests to answer; one snapshotter, which asks for and
//     gathers snapshots (woken by Start, Resync, CatchUp, and its own
//     ticker for the catalog); an expirer (the expiry of
//     silent peers), unless PeerTimeout < 0; all stop on Close.
//   - Link: one running the OnReconnect callbacks; stops on Close.
//   - Catalog: one binding the bucket then watching it, and a writer
//     (mirror passes); both stop on Close.
//   - Server: nats-server's own (accept, routes, clients); stops on
//     Close.
package natsplane
