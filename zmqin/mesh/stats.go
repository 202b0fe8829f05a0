package mesh

import (
	"sync/atomic"

	"github.com/kvselect/kvselect/zmqin/zmtp"
)

// The mesh's drop reasons, counters and their snapshot (Stats).

// Drop is why the mesh skipped a received message.
type Drop uint8

const (
	DropFrames      Drop = iota // not [topic, payload]
	DropTopic                   // a topic this mesh did not subscribe to
	DropUndecodable             // not an envelope
	DropLegacy                  // a tenant_id envelope
	DropOwn                     // this process's own event
	DropFull                    // the inbound queue was full
	DropExtraFrames             // more than 2 frames: read to its end and skipped, the connection kept (zmtp.ErrExtraFrames)
	NumDrops
)

var dropNames = [NumDrops]string{"frame_count", "unknown_topic", "undecodable", "legacy_tenant_id", "own_process", "inbound_full", "too_many_frames"}

// String is the drop's metric label.
func (d Drop) String() string { return dropNames[d] }

type meshStats struct {
	published, outDropped, snapshotEvents atomic.Uint64
	snapshotRequests                      atomic.Uint64
	snapshotsTruncated, snapshotsRefused  atomic.Uint64
	resyncChecks                          atomic.Uint64 // drainer ticks (tests wait on it)
	sent                                  atomic.Uint64 // events handed to the PUB socket (tests wait on it)
	received, batches                     atomic.Uint64
	dropped                               [NumDrops]atomic.Uint64
	connects, disconnects, dialErrors     atomic.Uint64
	// limitDrops counts peer connections dropped because a message broke
	// the Limits, by zmtp.LimitReason.
	limitDrops [zmtp.NumLimitReasons]atomic.Uint64
	// outBytes and inBytes are the bytes in the outbound and inbound
	// queues (at most MaxQueueBytes each): counted before queueing,
	// uncounted once handed to the PUB socket or applied.
	outBytes, inBytes atomic.Int64
}

// Stats is a snapshot of a Mesh's counters (cumulative) and gauges.
type Stats struct {
	ProcessID uint64
	// Published: events queued for the peers; OutboundDropped: dropped at
	// a full outbound queue; PeerQueueDropped: dropped at a full
	// subscriber queue; SnapshotEvents: bookings sent to joining peers;
	// SnapshotRequests: snapshots asked again of a peer after the catalog
	// changed (the first one at connect is not counted).
	Published, OutboundDropped, PeerQueueDropped, SnapshotEvents uint64
	SnapshotRequests                                             uint64
	// SnapshotsTruncated: snapshots cut short by a full subscriber
	// queue; SnapshotsRefused: snapshot subscriptions refused by the
	// per-peer rate limit.
	SnapshotsTruncated, SnapshotsRefused uint64
	// Received: messages read from peers; Dropped: by Drop; Batches:
	// apply batches handed to the service.
	Received uint64
	Dropped  [NumDrops]uint64
	Batches  uint64
	// Peers and PeersLive: configured peers, and those connected.
	// Subscribers: peers subscribed to this process's PUB.
	Peers, PeersLive, Subscribers     int
	Connects, Disconnects, DialErrors uint64
	// LimitDrops: peer connections dropped because a message broke the
	// receive Limits: past the hard frame budget, over the message size,
	// over the frame size (indexed as zmtp.LimitReasonNames).
	LimitDrops                  [3]uint64
	OutboundDepth, InboundDepth int
	OutboundLimit, InboundLimit int
	// The bytes in the outbound and inbound queues and in the subscribed
	// peers' queues (summed), and MaxQueueBytes, each one's bound.
	OutboundBytes, InboundBytes, PeerQueueBytes int64
	QueueBytesLimit                             int64
	// The session-affinity channel: bindings queued for the peers, dropped
	// at a full queue, applied from peers (after the drops above), and the
	// queue's depth and bound.
	AffinityPublished, AffinityOutboundDropped, AffinityApplied uint64
	AffinityOutboundDepth, AffinityOutboundLimit                int
	// AffinitySubscribers: peers subscribed to AffinityTopic (a peer
	// subscribes to its topics one message at a time, this one last).
	AffinitySubscribers int
}

// Stats returns the mesh's counters and gauges.
func (m *Mesh) Stats() Stats {
	st := Stats{
		ProcessID:          m.id,
		Published:          m.st.published.Load(),
		OutboundDropped:    m.st.outDropped.Load(),
		PeerQueueDropped:   m.pub.Dropped(),
		SnapshotEvents:     m.st.snapshotEvents.Load(),
		SnapshotRequests:   m.st.snapshotRequests.Load(),
		SnapshotsTruncated: m.st.snapshotsTruncated.Load(),
		SnapshotsRefused:   m.st.snapshotsRefused.Load(),
		Received:           m.st.received.Load(),
		Batches:            m.st.batches.Load(),
		Subscribers:        m.pub.Subscribers(),
		Connects:           m.st.connects.Load(),
		Disconnects:        m.st.disconnects.Load(),
		LimitDrops:         [3]uint64{m.st.limitDrops[0].Load(), m.st.limitDrops[1].Load(), m.st.limitDrops[2].Load()},
		DialErrors:         m.st.dialErrors.Load(),
		OutboundDepth:      m.out.Len(),
		InboundDepth:       len(m.in),
		OutboundLimit:      m.out.Limit(),
		InboundLimit:       cap(m.in),
		OutboundBytes:      m.st.outBytes.Load(),
		InboundBytes:       m.st.inBytes.Load(),
		PeerQueueBytes:     m.pub.QueuedBytes(),
		QueueBytesLimit:    int64(m.cfg.MaxQueueBytes),

		AffinityPublished:       m.ast.published.Load(),
		AffinityOutboundDropped: m.ast.outDropped.Load(),
		AffinityApplied:         m.ast.applied.Load(),
		AffinityOutboundDepth:   len(m.affOut),
		AffinityOutboundLimit:   cap(m.affOut),
		AffinitySubscribers:     m.pub.SubscribedTo(AffinityTopic),
	}
	for d := range st.Dropped {
		st.Dropped[d] = m.st.dropped[d].Load()
	}
	m.mu.Lock()
	st.Peers = len(m.mu.peers)
	for _, p := range m.mu.peers {
		if p.live.Load() {
			st.PeersLive++
		}
	}
	m.mu.Unlock()
	return st
}
