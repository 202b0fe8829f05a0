// Package mesh makes a selector a member of a Dynamo selector replica
// mesh (ai-dynamo/dynamo: lib/kv-router/src/services/common/replica_sync.rs):
// each replica publishes its bookings' lifecycle on a ZMQ PUB socket and
// applies its peers' to its own load accounting, so that replicas behind
// one load balancer see each other's load. It speaks ZMQ through package
// zmqin/zmtp (a PubSocket, one SUB Conn per peer) and writes its msgpack
// envelopes with zmqin/internal/msgpack; it knows nothing of KV events
// (package zmqin).
//
// # Using a Mesh
//
//  1. New(Config{Bind: "tcp://*:PORT", Peers: ...}) binds the PUB socket;
//     pass the Mesh as core.Options.Replica, so every admission, prefill
//     completion and free of the service is published (encoded on the
//     caller's goroutine, queued without blocking; output blocks never
//     are).
//  2. Start(svc) starts applying peers' events (core.Service.ApplyReplica,
//     in batches of up to 256 events, those queued when the drain wakes)
//     and dials the initial peers;
//     Register and Deregister change the peer set at run time (the
//     /replica_sync/* routes), List reports it. HandleAffinity, before
//     Start, also replicates session bindings (affinity.go): the Mesh is
//     then core.Options.Affinity too (PublishAffinity).
//  3. Stats for metrics; Close at shutdown.
//
// # Wire format
//
// The wire format is the reference's (topic dynamo.slot-tracker.v1, the
// rmp_serde named-map envelope; see wire.go; session bindings on
// dynamo.session-affinity.v1, see affinity.go), so kvselect and Dynamo
// replicas can share a mesh. A received envelope is dropped (and counted
// by reason, Drop) when it is not [topic, payload], on a topic not
// subscribed to, undecodable, a legacy tenant_id envelope, or this
// process's own (router_id); core then drops events of unknown partitions,
// block sizes, workers and requests. A peer connection that breaks the
// receive limits (zmtp.Limits: 2 frames, MaxMessage bytes) is dropped and
// counted by reason (Stats.LimitDrops). kvselect replicas also answer a
// subscription to SnapshotTopic with their live local bookings, so a
// replica that restarts starts with its peers' load instead of zero (the
// reference has no resync); when those bookings name workers it has not
// registered yet, it asks again once its catalog has changed and settled,
// and so it does when a peer's live admission names a worker it has not
// registered yet (the peer's discovery saw the worker first).
//
// # Logging
//
// Config.Logger receives a peer's connects, disconnects and first failed
// dial of a series, and the peer set's changes, never a line per event.
// Each peer logs through its own token bucket (zmqin/internal/ratelog: 10
// lines, then one per 10 s), as a KV-event listener does.
//
// # Goroutines
//
// Goroutines of a Mesh: its PubSocket's (accept; per subscriber a reader,
// which also sends snapshots, and a writer); the publisher (outbound
// queues, bookings and session bindings, to the PubSocket); the drainer
// (inbound queue to the service; snapshot re-requests); per peer, a
// dial-and-receive loop (which also applies the peer's session bindings,
// when a handler is installed). Close stops them all.
package mesh
