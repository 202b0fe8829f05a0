// Package zmtp is kvselect's ZeroMQ transport: ZMTP 3.0 connections with
// the NULL mechanism (Conn) and the PUB socket built on them (PubSocket).
// The KV-event ingress (package zmqin), the replica mesh (zmqin/mesh) and
// the simulated publisher (zmqin/zmqpub) all speak ZMQ through it, and it
// is the only package that imports a ZMQ library (go-zeromq/zmq4, for the
// handshake only: see transport.go for why its Socket types and framing
// are not used). It knows no message layout above frames.
//
// # Connections
//
// Conn is one ZMTP connection that Dial (tcp:// or ipc://, the endpoint
// read by ParseEndpoint, which is core's parser) or Open (over an accepted
// net.Conn) makes, over a net.Conn this package owns; Close unblocks a
// pending Recv. A "socket" is therefore one connection: a SUB or DEALER
// that dials one endpoint, or one accepted peer of a PUB or ROUTER.
//
// Recv reads one message within the connection's Limits (frames per
// message, bytes per frame and per message), checked at each frame header
// so that a peer can never make it buffer more; a violation fails with
// ErrTooManyFrames, ErrMessageTooLarge or ErrFrameTooLarge, and the
// connection must be dropped (LimitReason and LimitReasonNames name the
// reason for the callers' counters and metrics). A message of more frames
// than MaxFrames, but within HardFrames, is read to its end and discarded,
// and Recv reports ErrExtraFrames: the connection stays in step. The
// limits are per connection because the protocols differ: a live KV
// message has 3 frames, a replay reply 4, a replica-sync envelope 2.
//
// Recv answers a ZMTP 3.1 PING with a PONG, so libzmq peers with
// heartbeats on (Dynamo's sockets) keep an idle connection
// (TestHeartbeatLibzmq); it sends no PING of its own (Dial turns TCP
// keepalive on, which finds dead peers in about 25 s). Send and SendHeld
// write whole messages; a PONG lands between two of them, never inside one.
//
// # The PUB socket
//
// PubSocket (ListenPub) accepts SUB peers, tracks each one's subscriptions
// (topic prefixes) and fans a message out to the peers whose
// subscriptions match, through a bounded queue per peer (HWM messages and
// MaxBytes bytes): a full queue drops the message for that peer only,
// counted, as libzmq's high-water mark does. OnSubscribe lets the owner
// answer a subscription with messages for that peer alone (the mesh's
// snapshots), keeping its per-peer state in PubPeer.Local.
//
// Goroutines of a PubSocket: one accept loop; per peer, a reader (its
// subscriptions, and OnSubscribe) and a writer (drains its queue, one
// flush per burst). Close stops them all. A Conn starts no goroutine.
package zmtp
