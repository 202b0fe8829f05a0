package mesh

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/kvselect/kvselect/core"
	"github.com/kvselect/kvselect/zmqin/internal/mpsc"
	"github.com/kvselect/kvselect/zmqin/internal/ratelog"
	"github.com/kvselect/kvselect/zmqin/zmtp"
)

// Config configures a Mesh. Zero fields take the defaults named beside
// them (the reference's, ai-dynamo/dynamo:
// lib/kv-router/src/services/common/replica_sync.rs and zmq.rs).
type Config struct {
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
	// AffinityOutbound bounds the session bindings queued for the
	// publisher (4,096); a full queue drops, counted.
	AffinityOutbound int
	// HWM bounds the messages queued per subscribed peer (100,000, so that
	// a joiner's snapshot fits beside the live stream).
	HWM int
	// MaxQueueBytes bounds, besides the counts above, the bytes of each
	// queue: the outbound queue's and each subscribed peer's envelopes,
	// and the inbound queue's received envelopes with their decoded
	// hashes (64 MiB each). An envelope's size follows its prompt (9
	// bytes a block), so a count alone would let 100,000 long prompts
	// hold gigabytes. A full queue drops, counted as at a full count.
	MaxQueueBytes int
	// DrainBatch and DrainWait shape the apply batches: up to 256 events,
	// those queued when the drain takes the first, or with a positive
	// DrainWait those that arrive within it. The default waits for
	// nothing: the publishers batch already (PublishWait), so a peer's
	// events arrive in bursts that its reader queues back to back, and a
	// second wait only adds itself to every event's propagation lag (a
	// 1 ms wait put the mesh's lag p50 at 1.9 ms at half load, against
	// 0.7 ms over NATS, whose receiver never waited). A drain that wakes
	// early in a burst may apply it in more than one batch.
	DrainBatch int
	DrainWait  time.Duration
	// PublishBatch and PublishWait shape the publish batches: the first
	// event queued and what is queued within 500 µs after it go to each
	// peer in one write, and with 256 queued the publisher does not wait;
	// a negative PublishWait sends each event as it is queued. See
	// Mesh.publish for why and what it costs.
	PublishBatch int
	PublishWait  time.Duration
	// NoSnapshot turns kvselect's catch-up snapshot off: this process
	// neither serves SnapshotTopic nor subscribes to it.
	NoSnapshot bool
	// MaxPeers bounds the peer set (128).
	MaxPeers int
	// ResyncSettle is how long the catalog must stay unchanged before a
	// peer whose snapshot fell short is asked again (500 ms: registrations
	// come in bursts at start-up, and one snapshot after the burst is
	// enough).
	ResyncSettle time.Duration
	// BackoffMin and BackoffMax bound the wait between two dials of a peer
	// (libzmq's reconnect interval 100 ms, maximum 5 s, as the reference
	// configures its sockets).
	BackoffMin, BackoffMax time.Duration
	// MaxMessage bounds one received envelope (16 MiB: a prompt of a
	// million blocks).
	MaxMessage int
	// Logger receives the peers' connects, disconnects and dial failures
	// and the peer set's changes, each peer's lines rate-limited as a KV
	// listener's (10 lines, then one per 10 s); nil discards them.
	Logger *slog.Logger
}

// DefaultPublishBatch and DefaultPublishWait are Config.PublishBatch's and
// PublishWait's defaults, the publish batching rule of any kvselect bus
// (zmqin/natsplane batches its peers' bookings by it too): the first event
// queued and what is queued within DefaultPublishWait after it, at most
// DefaultPublishBatch events, leave together (Dynamo's ZMQ replica batches
// take 256 events or 1 ms, ai-dynamo/dynamo:lib/kv-router/src/protocols.rs,
// MAX_REPLICA_BATCH_EVENTS).
const (
	DefaultPublishBatch = 256
	DefaultPublishWait  = 500 * time.Microsecond
)

func (c Config) withDefaults() Config {
	def := func(v *int, d int) {
		if *v == 0 {
			*v = d
		}
	}
	def(&c.Outbound, 100_000)
	def(&c.Inbound, 100_000)
	def(&c.AffinityOutbound, DefaultAffinityOutbound)
	def(&c.HWM, 100_000)
	def(&c.DrainBatch, 256)
	def(&c.PublishBatch, DefaultPublishBatch)
	def(&c.MaxPeers, 128)
	def(&c.MaxMessage, 16<<20)
	def(&c.MaxQueueBytes, 64<<20)
	if c.ResyncSettle == 0 {
		c.ResyncSettle = 500 * time.Millisecond
	}
	if c.PublishWait == 0 {
		c.PublishWait = DefaultPublishWait
	}
	if c.BackoffMin == 0 {
		c.BackoffMin = 100 * time.Millisecond
	}
	if c.BackoffMax == 0 {
		c.BackoffMax = 5 * time.Second
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return c
}

// Applier is what a Mesh feeds: *core.Service.
type Applier interface {
	// ApplyReplica applies events in order and records each one's
	// outcome in its Dropped and Drop fields. It keeps nothing of evs
	// past the call (core.ReplicaEvent's rule): the drainer hands the
	// events' hash slices to the next decodes (see inEvent).
	ApplyReplica(evs []core.ReplicaEvent)
	AppendLocalBookings(dst []core.ReplicaEvent) []core.ReplicaEvent
	// CatalogVersion changes whenever the schedulable workers change.
	CatalogVersion() uint64
}

// inEvent is a received event on its way to the drainer: its peer, and
// whether it came in a snapshot. The inbound queue carries pointers to
// pooled inEvents (Mesh.getIn, Mesh.putIn), not the 184-byte values: a
// queue of Inbound values is an 18 MB ring whose every slot is cold when
// the sender reaches it again, and copying events into it was 3% of a
// three-replica process's CPU (perf/RESULTS.md, issue 25, fifth
// session). A pooled event also keeps its hash slice's capacity for the
// next decode (DecodeEnvelope reuses it; ApplyReplica copies what it
// keeps).
type inEvent struct {
	ev       core.ReplicaEvent
	peer     *meshPeer
	snapshot bool
	size     int64 // counted in meshStats.inBytes until applied
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
// writer); one publisher draining the outbound queues (lifecycle events,
// session bindings); one drainer applying the inbound queue; one
// dial-and-receive loop per peer (which also applies peers' bindings, when
// a handler is installed). Close stops them all.
type Mesh struct {
	cfg   Config
	id    uint64
	pub   *zmtp.PubSocket
	out   *mpsc.Queue[[]byte] // envelopes for the publisher (a cold 100,000-slot channel cost a cache miss a send)
	in    chan *inEvent
	free  sync.Pool // of *inEvent; see inEvent
	ctx   context.Context
	stop  context.CancelFunc
	wg    sync.WaitGroup
	apply atomic.Pointer[applierBox]
	// aff, affOut and ast are the session-affinity channel
	// (affinity.go).
	aff    atomic.Pointer[affinityBox]
	affOut chan []byte
	ast    affinityStats

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
	conn   atomic.Pointer[zmtp.Conn]
	lg     ratelog.Logger
	// short is set when a snapshot event of this peer could not be
	// applied because its partition or worker was not registered here
	// yet, and shortAt is the catalog version it was applied against: the
	// drainer asks the peer again once the catalog moved past shortAt and
	// settled (resync). Both written by the drainer only.
	short   bool
	shortAt uint64
}

// New binds the PUB socket. Events published before Start are queued
// (bounded); peers are dialed from Start.
func New(cfg Config) (*Mesh, error) {
	cfg = cfg.withDefaults()
	if cfg.Bind == "" {
		return nil, errors.New("zmqin: replica mesh needs a bind address")
	}
	if cfg.MaxQueueBytes < cfg.MaxMessage {
		return nil, fmt.Errorf("zmqin: replica mesh MaxQueueBytes %d below MaxMessage %d", cfg.MaxQueueBytes, cfg.MaxMessage)
	}
	m := &Mesh{cfg: cfg, id: cfg.ProcessID, out: mpsc.New[[]byte](cfg.Outbound), in: make(chan *inEvent, cfg.Inbound), affOut: make(chan []byte, cfg.AffinityOutbound)}
	for m.id == 0 {
		var b [8]byte
		_, _ = rand.Read(b[:])
		m.id = binary.LittleEndian.Uint64(b[:])
	}
	m.ctx, m.stop = context.WithCancel(context.Background())
	m.mu.peers = map[string]*meshPeer{}
	pc := zmtp.PubConfig{Endpoint: cfg.Bind, HWM: cfg.HWM, MaxBytes: cfg.MaxQueueBytes}
	if !cfg.NoSnapshot {
		pc.OnSubscribe = m.sendSnapshot
	}
	var err error
	if m.pub, err = zmtp.ListenPub(pc); err != nil {
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

// sendSnapshot answers a subscription to SnapshotTopic with the live local
// bookings, queued for that peer alone behind what it already has queued.
// A booking completed or freed while the snapshot is taken may reach the
// joiner as a free before its snapshot admission; such a stale mirror
// lives until the expiry guard, as any lost event of the best-effort mesh.
func (m *Mesh) sendSnapshot(p *zmtp.PubPeer, topic string) {
	box := m.apply.Load()
	if topic != SnapshotTopic || box == nil {
		return
	}
	// A peer gets at most SnapshotBurst snapshots per SnapshotWindow
	// (SnapshotLimiter, the peer's Local state: this runs on its reader
	// goroutine only).
	lim, _ := p.Local.(*SnapshotLimiter)
	if lim == nil {
		lim = new(SnapshotLimiter)
		p.Local = lim
	}
	if !lim.Allow(time.Now()) {
		m.st.snapshotsRefused.Add(1)
		return
	}
	for _, ev := range box.AppendLocalBookings(nil) {
		if !p.Send([][]byte{snapshotTopicBytes, AppendEnvelope(make([]byte, 0, envelopeBound(&ev)), &ev, m.id)}) {
			// The peer's queue is full: the rest of this snapshot is lost
			// (counted); the joiner's mirrors of it come from live events
			// or not at all, and expire in time.
			m.st.snapshotsTruncated.Add(1)
			return
		}
		m.st.snapshotEvents.Add(1)
	}
}

// SnapshotBurst and SnapshotWindow bound how often one peer is sent a
// snapshot, on any bus (the ZMQ mesh, zmqin/natsplane): the one at
// connect and a resync or two after its catalog changed. Each walks the
// whole ledger, and any peer can ask.
const (
	SnapshotBurst  = 3
	SnapshotWindow = 10 * time.Second
)

// SnapshotLimiter is one peer's snapshot budget: when its last
// SnapshotBurst snapshots were sent, oldest first. The zero value allows
// a burst. Not safe for concurrent use.
type SnapshotLimiter [SnapshotBurst]time.Time

// Allow reports whether a snapshot may be sent at now, and if so counts
// it.
func (l *SnapshotLimiter) Allow(now time.Time) bool {
	if now.Sub(l[0]) < SnapshotWindow {
		return false
	}
	copy(l[:], l[1:])
	l[SnapshotBurst-1] = now
	return true
}

// SnapshotShort reports whether a snapshot event was dropped because this
// process has not registered its partition or worker yet: the peer is to
// be asked again once the catalog has changed and settled.
func SnapshotShort(ev *core.ReplicaEvent) bool {
	return ev.Dropped && (ev.Drop == core.DropUnknownPartition || ev.Drop == core.DropUnknownWorker)
}

// LiveShort reports whether a live event (not a snapshot's) was dropped
// because it books a worker this process has not registered in a
// partition it serves: the peer's discovery is ahead of this one's (a pod
// its informers saw first), and the peer is to be asked for its snapshot
// once the catalog has changed and settled, as after a short snapshot.
// An unknown partition is not: a live event of a partition this process
// does not serve at all would ask again at every catalog change (a
// joiner whose catalog is empty learns of the partition from the
// snapshot, which SnapshotShort covers).
func LiveShort(ev *core.ReplicaEvent) bool {
	return ev.Kind == core.ReplicaAdd && ev.Dropped && ev.Drop == core.DropUnknownWorker
}

// drain applies the inbound queue in batches until Close, and asks peers
// whose snapshot fell short for a new one once the catalog has changed
// and settled (a replica's workers are often registered after it
// connects, and replicas never create workers).
//
// Invariant: a booking a peer holds on a worker this process registers
// late, whether its admission came in a snapshot (SnapshotShort) or live
// (LiveShort), is mirrored here without any new event of the peer's:
// the peer is marked short against the catalog version read before the
// drop, and asked again for its snapshot once the version has moved past
// it and stayed unchanged for ResyncSettle (debounced: one request per
// settled change, however many drops), at most SnapshotBurst snapshots
// per SnapshotWindow on the peer's side (bounded). A replayed admission
// replaces its mirror (core.Service.ApplyReplica), so asking again never
// counts a booking twice.
func (m *Mesh) drain() {
	defer m.wg.Done()
	batch := make([]core.ReplicaEvent, 0, m.cfg.DrainBatch)
	from := make([]*inEvent, 0, m.cfg.DrainBatch)
	t := time.NewTimer(time.Hour)
	t.Stop()
	tick := time.NewTicker(m.cfg.ResyncSettle / 2)
	defer tick.Stop()
	var short []*meshPeer // peers whose last snapshot fell short
	version, changed := m.apply.Load().CatalogVersion(), time.Now()
	for {
		select {
		case <-m.ctx.Done():
			return
		case <-tick.C:
			m.st.resyncChecks.Add(1)
			if v := m.apply.Load().CatalogVersion(); v != version {
				version, changed = v, time.Now()
			} else if len(short) > 0 && time.Since(changed) >= m.cfg.ResyncSettle {
				short = m.resync(short, version)
			}
			continue
		case e := <-m.in:
			from = append(from, e)
		}
		if m.cfg.DrainWait > 0 {
			t.Reset(m.cfg.DrainWait)
		fill:
			for len(from) < m.cfg.DrainBatch {
				select {
				case e := <-m.in:
					from = append(from, e)
				case <-t.C:
					break fill
				case <-m.ctx.Done():
					return
				}
			}
			t.Stop()
		}
	take:
		for len(from) < m.cfg.DrainBatch {
			select {
			case e := <-m.in:
				from = append(from, e)
			default:
				break take
			}
		}
		for i := range from {
			batch = append(batch, from[i].ev)
		}
		// Read before applying: a registration racing the batch moves
		// the version past it, and the peer is asked again.
		applied := m.apply.Load().CatalogVersion()
		m.apply.Load().ApplyReplica(batch)
		m.st.batches.Add(1)
		var done int64
		for i := range from {
			done += from[i].size
		}
		m.st.inBytes.Add(-done)
		for i := range batch {
			if e := from[i]; e.snapshot && SnapshotShort(&batch[i]) || !e.snapshot && LiveShort(&batch[i]) {
				if !e.peer.short {
					short = append(short, e.peer)
				}
				e.peer.short, e.peer.shortAt = true, applied
			}
			m.putIn(from[i])
		}
		clear(batch)
		clear(from)
		batch, from = batch[:0], from[:0]
	}
}

// maxPooledHashes is the largest hash slice (in blocks: 64 KiB) a pooled
// inEvent keeps for reuse; a longer prompt's is left to the collector.
const maxPooledHashes = 8192

// getIn returns an empty inEvent, with a hash slice to decode into when
// the pool had one.
func (m *Mesh) getIn() *inEvent {
	if e, _ := m.free.Get().(*inEvent); e != nil {
		return e
	}
	return new(inEvent)
}

// putIn empties e, keeping its hash slice when it is at most
// maxPooledHashes long, and returns it to the pool; e must not be used
// after.
func (m *Mesh) putIn(e *inEvent) {
	h := e.ev.SequenceHashes[:0]
	if cap(h) > maxPooledHashes {
		h = nil
	}
	*e = inEvent{ev: core.ReplicaEvent{SequenceHashes: h}}
	m.free.Put(e)
}

// resync asks each peer whose snapshot fell short against an older
// catalog than version again for its snapshot (unsubscribe, subscribe: the
// peer's PUB answers every subscription with a snapshot), and returns the
// peers still waiting for a catalog change. A peer that is not connected
// is dropped from the list: its next connection subscribes anew.
func (m *Mesh) resync(peers []*meshPeer, version uint64) []*meshPeer {
	keep := peers[:0]
	for _, p := range peers {
		if p.shortAt == version {
			keep = append(keep, p) // nothing registered since: asking again would fall short again
			continue
		}
		p.short = false
		c := p.conn.Load()
		if c == nil {
			continue
		}
		if c.Send(append([]byte{0}, snapshotTopicBytes...)) == nil && c.Send(append([]byte{1}, snapshotTopicBytes...)) == nil {
			m.st.snapshotRequests.Add(1)
		}
	}
	clear(peers[len(keep):])
	return keep
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
