package zmqin

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/kvselect/kvselect/core"
)

// MeshConfig configures a Mesh. Zero fields take the defaults named beside
// them (the reference's, ai-dynamo/dynamo:
// lib/kv-router/src/services/common/replica_sync.rs and zmq.rs).
type MeshConfig struct {
	// Bind is the PUB address, e.g. "tcp://*:9092" for --replica-sync-port
	// 9092 (required).
	Bind string
	// Peers are the initial peer PUB endpoints (--replica-sync-peers).
	Peers []string
	// ProcessID is this process's id on the mesh (router_id); 0 draws a
	// random non-zero one.
	ProcessID uint64
	// Outbound bounds the events queued for the publisher (100,000); a
	// booking never waits: a full queue drops the event, counted.
	Outbound int
	// Inbound bounds the peer events queued for applying (100,000); a full
	// queue drops, counted.
	Inbound int
	// HWM bounds the messages queued per subscribed peer (100,000, so that
	// a joiner's snapshot fits beside the live stream).
	HWM int
	// DrainBatch and DrainWait shape the apply batches: up to 256 events,
	// or what arrived within 1 ms of the first.
	DrainBatch int
	DrainWait  time.Duration
	// PublishBatch and PublishWait shape the publish batches: the first
	// event queued and what is queued within 500 µs after it, up to 256,
	// go to each peer in one write; a negative PublishWait sends each
	// event as it is queued. See Mesh.publish for why and what it costs.
	PublishBatch int
	PublishWait  time.Duration
	// NoSnapshot turns kvselect's catch-up snapshot off: this process
	// neither serves SnapshotTopic nor subscribes to it.
	NoSnapshot bool
	// MaxPeers bounds the peer set (128).
	MaxPeers int
	// BackoffMin and BackoffMax bound the wait between two dials of a peer
	// (libzmq's reconnect interval 100 ms, maximum 5 s, as the reference
	// configures its sockets).
	BackoffMin, BackoffMax time.Duration
	// MaxMessage bounds one received envelope (16 MiB: a prompt of a
	// million blocks).
	MaxMessage int
}

func (c MeshConfig) withDefaults() MeshConfig {
	def := func(v *int, d int) {
		if *v == 0 {
			*v = d
		}
	}
	def(&c.Outbound, 100_000)
	def(&c.Inbound, 100_000)
	def(&c.HWM, 100_000)
	def(&c.DrainBatch, 256)
	def(&c.PublishBatch, 256)
	def(&c.MaxPeers, 128)
	def(&c.MaxMessage, 16<<20)
	if c.DrainWait == 0 {
		c.DrainWait = time.Millisecond
	}
	if c.PublishWait == 0 {
		c.PublishWait = 500 * time.Microsecond
	}
	if c.BackoffMin == 0 {
		c.BackoffMin = 100 * time.Millisecond
	}
	if c.BackoffMax == 0 {
		c.BackoffMax = 5 * time.Second
	}
	return c
}

// Applier is what a Mesh feeds: *core.Service.
type Applier interface {
	ApplyReplica(evs []core.ReplicaEvent)
	AppendLocalBookings(dst []core.ReplicaEvent) []core.ReplicaEvent
}

// Mesh is kvselect's member of a Dynamo selector replica mesh: one PUB
// socket that publishes this process's lifecycle events (it implements
// core.ReplicaSink), and one SUB connection per peer whose events are
// applied to the local service in batches. It speaks the reference's wire
// format, so Dynamo and kvselect replicas can share a mesh; in addition it
// serves and requests SnapshotTopic, so a kvselect replica that joins
// catches up with its kvselect peers' live bookings.
//
// Goroutines: the PubSocket's (accept, per subscriber a reader and a
// writer); one publisher draining the outbound queue; one drainer applying
// the inbound queue; one dial-and-receive loop per peer. Close stops them
// all.
type Mesh struct {
	cfg   MeshConfig
	id    uint64
	pub   *PubSocket
	out   chan []byte
	in    chan core.ReplicaEvent
	ctx   context.Context
	stop  context.CancelFunc
	wg    sync.WaitGroup
	apply atomic.Pointer[applierBox]

	mu struct {
		sync.Mutex
		peers map[string]*meshPeer
	}
	st meshStats
}

type applierBox struct{ Applier }

type meshPeer struct {
	cancel context.CancelFunc
	done   chan struct{}
	live   atomic.Bool
	conn   atomic.Pointer[Conn]
}

// MeshDrop is why the mesh skipped a received message.
type MeshDrop uint8

const (
	MeshDropFrames      MeshDrop = iota // not [topic, payload]
	MeshDropTopic                       // a topic this mesh did not subscribe to
	MeshDropUndecodable                 // not an envelope
	MeshDropLegacy                      // a tenant_id envelope
	MeshDropOwn                         // this process's own event
	MeshDropFull                        // the inbound queue was full
	NumMeshDrops
)

var meshDropNames = [NumMeshDrops]string{"frame_count", "unknown_topic", "undecodable", "legacy_tenant_id", "own_process", "inbound_full"}

// String is the drop's metric label.
func (d MeshDrop) String() string { return meshDropNames[d] }

type meshStats struct {
	published, outDropped, snapshotEvents atomic.Uint64
	received, batches                     atomic.Uint64
	dropped                               [NumMeshDrops]atomic.Uint64
	connects, disconnects, dialErrors     atomic.Uint64
}

// MeshStats is a snapshot of a Mesh's counters (cumulative) and gauges.
type MeshStats struct {
	ProcessID uint64
	// Published: events queued for the peers; OutboundDropped: dropped at
	// a full outbound queue; PeerQueueDropped: dropped at a full
	// subscriber queue; SnapshotEvents: bookings sent to joining peers.
	Published, OutboundDropped, PeerQueueDropped, SnapshotEvents uint64
	// Received: messages read from peers; Dropped: by MeshDrop; Batches:
	// apply batches handed to the service.
	Received uint64
	Dropped  [NumMeshDrops]uint64
	Batches  uint64
	// Peers and PeersLive: configured peers, and those connected.
	// Subscribers: peers subscribed to this process's PUB.
	Peers, PeersLive, Subscribers     int
	Connects, Disconnects, DialErrors uint64
	OutboundDepth, InboundDepth       int
	OutboundLimit, InboundLimit       int
}

// NewMesh binds the PUB socket. Events published before Start are queued
// (bounded); peers are dialed from Start.
func NewMesh(cfg MeshConfig) (*Mesh, error) {
	cfg = cfg.withDefaults()
	if cfg.Bind == "" {
		return nil, errors.New("zmqin: replica mesh needs a bind address")
	}
	m := &Mesh{cfg: cfg, id: cfg.ProcessID, out: make(chan []byte, cfg.Outbound), in: make(chan core.ReplicaEvent, cfg.Inbound)}
	for m.id == 0 {
		var b [8]byte
		_, _ = rand.Read(b[:])
		m.id = binary.LittleEndian.Uint64(b[:])
	}
	m.ctx, m.stop = context.WithCancel(context.Background())
	m.mu.peers = map[string]*meshPeer{}
	pc := PubConfig{Endpoint: cfg.Bind, HWM: cfg.HWM}
	if !cfg.NoSnapshot {
		pc.OnSubscribe = m.sendSnapshot
	}
	var err error
	if m.pub, err = ListenPub(pc); err != nil {
		return nil, err
	}
	m.wg.Add(1)
	go m.publish()
	return m, nil
}

// Start begins applying peers' events to a and dials the initial peers.
func (m *Mesh) Start(a Applier) error {
	m.apply.Store(&applierBox{a})
	m.wg.Add(1)
	go m.drain()
	for _, p := range m.cfg.Peers {
		if _, err := m.Register(p); err != nil {
			return err
		}
	}
	return nil
}

// ProcessID is this process's router_id.
func (m *Mesh) ProcessID() uint64 { return m.id }

// Endpoint is the bound PUB address (the real port when bound to 0).
func (m *Mesh) Endpoint() string { return m.pub.Endpoint() }

// Publish queues ev for the peers without blocking (core.ReplicaSink): it
// encodes the envelope on the caller's goroutine, so nothing of ev is kept.
func (m *Mesh) Publish(ev *core.ReplicaEvent) {
	payload := AppendEnvelope(make([]byte, 0, envelopeBound(ev)), ev, m.id)
	select {
	case m.out <- payload:
		m.st.published.Add(1)
	default:
		m.st.outDropped.Add(1)
	}
}

var (
	replicaTopicBytes  = []byte(ReplicaTopic)
	snapshotTopicBytes = []byte(SnapshotTopic)
)

// publish sends the queued events to every peer subscribed to
// ReplicaTopic, until Close, in batches: the first event queued, then,
// after PublishWait, what has been queued meanwhile (up to PublishBatch in
// all; with a full batch already queued it does not wait). Events queue
// without waking the publisher while it waits; the batch reaches each
// peer's writer at once, which writes it with one flush, and the peer's
// reader takes it in one read. Sent one by one, each event of a C1024
// lifecycle load cost a flush and a wake-up of the publisher and of the
// peer's writer: in CPU profiles of `kvselect bench --replicas 2`
// (2026-12-01, load average 2 to 2.5) the writers (PubSocket.serve) took
// 3.2% of the process and this loop 1.5%; batched, 1.2% and 1.0%. The
// wait adds at most PublishWait to the propagation lag.
func (m *Mesh) publish() {
	defer m.wg.Done()
	batch := make([][]byte, 0, m.cfg.PublishBatch)
	var t *time.Timer
	for {
		select {
		case <-m.ctx.Done():
			return
		case payload := <-m.out:
			batch = append(batch, payload)
		}
		if m.cfg.PublishWait > 0 && len(m.out) < m.cfg.PublishBatch-1 {
			if t == nil {
				t = time.NewTimer(m.cfg.PublishWait)
			} else {
				t.Reset(m.cfg.PublishWait)
			}
			select {
			case <-t.C:
			case <-m.ctx.Done():
				return
			}
		}
	take:
		for len(batch) < m.cfg.PublishBatch {
			select {
			case payload := <-m.out:
				batch = append(batch, payload)
			default:
				break take
			}
		}
		for _, payload := range batch {
			m.pub.Send(ReplicaTopic, [][]byte{replicaTopicBytes, payload})
		}
		clear(batch)
		batch = batch[:0]
	}
}

// sendSnapshot answers a subscription to SnapshotTopic with the live local
// bookings, queued for that peer alone behind what it already has queued.
// A booking completed or freed while the snapshot is taken may reach the
// joiner as a free before its snapshot admission; such a stale mirror
// lives until the expiry guard, as any lost event of the best-effort mesh.
func (m *Mesh) sendSnapshot(p *PubPeer, topic string) {
	box := m.apply.Load()
	if topic != SnapshotTopic || box == nil {
		return
	}
	for _, ev := range box.AppendLocalBookings(nil) {
		if !p.Send([][]byte{snapshotTopicBytes, AppendEnvelope(make([]byte, 0, envelopeBound(&ev)), &ev, m.id)}) {
			return
		}
		m.st.snapshotEvents.Add(1)
	}
}

// drain applies the inbound queue in batches until Close.
func (m *Mesh) drain() {
	defer m.wg.Done()
	batch := make([]core.ReplicaEvent, 0, m.cfg.DrainBatch)
	t := time.NewTimer(time.Hour)
	t.Stop()
	for {
		select {
		case <-m.ctx.Done():
			return
		case ev := <-m.in:
			batch = append(batch, ev)
		}
		t.Reset(m.cfg.DrainWait)
	fill:
		for len(batch) < m.cfg.DrainBatch {
			select {
			case ev := <-m.in:
				batch = append(batch, ev)
			case <-t.C:
				break fill
			case <-m.ctx.Done():
				return
			}
		}
		t.Stop()
		m.apply.Load().ApplyReplica(batch)
		m.st.batches.Add(1)
		clear(batch)
		batch = batch[:0]
	}
}

// Stats returns the mesh's counters and gauges.
func (m *Mesh) Stats() MeshStats {
	st := MeshStats{
		ProcessID:        m.id,
		Published:        m.st.published.Load(),
		OutboundDropped:  m.st.outDropped.Load(),
		PeerQueueDropped: m.pub.Dropped(),
		SnapshotEvents:   m.st.snapshotEvents.Load(),
		Received:         m.st.received.Load(),
		Batches:          m.st.batches.Load(),
		Subscribers:      m.pub.Subscribers(),
		Connects:         m.st.connects.Load(),
		Disconnects:      m.st.disconnects.Load(),
		DialErrors:       m.st.dialErrors.Load(),
		OutboundDepth:    len(m.out),
		InboundDepth:     len(m.in),
		OutboundLimit:    cap(m.out),
		InboundLimit:     cap(m.in),
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

// Close stops the mesh: peers are disconnected, the PUB socket is closed,
// and every goroutine has exited when it returns. Events still queued are
// dropped.
func (m *Mesh) Close() error {
	m.stop()
	m.mu.Lock()
	for _, p := range m.mu.peers {
		if c := p.conn.Load(); c != nil {
			_ = c.Close()
		}
	}
	m.mu.Unlock()
	err := m.pub.Close()
	m.wg.Wait()
	return err
}
