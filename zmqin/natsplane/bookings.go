package natsplane

import (
	"cmp"
	"crypto/rand"
	"encoding/binary"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/kvselect/kvselect/core"
	"github.com/kvselect/kvselect/zmqin/internal/budget"
	"github.com/kvselect/kvselect/zmqin/internal/mpsc"
	"github.com/kvselect/kvselect/zmqin/internal/ratelog"
	"github.com/kvselect/kvselect/zmqin/mesh"
	"github.com/nats-io/nats.go"
)

// Applier is what Bookings applies peers' events to: core.Service.
type Applier interface {
	// ApplyReplica applies events in order and records each one's
	// outcome in its Dropped and Drop fields.
	ApplyReplica(evs []core.ReplicaEvent)
	// WorkerPartition names the partition of a schedulable worker: an
	// ActiveSequenceEvent names its worker, not its partition.
	WorkerPartition(id uint64) (model, group string, blockSize uint32, ok bool)
	// AppendLocalBookings, CatalogVersion and ReleaseMirrors serve the
	// catch-up snapshot (replicas.go).
	AppendLocalBookings(dst []core.ReplicaEvent) []core.ReplicaEvent
	CatalogVersion() uint64
	ReleaseMirrors(origin core.Origin, before time.Time, keep func(id string) bool) int
}

// BookingsConfig configures Bookings.
type BookingsConfig struct {
	// Scope is the worker endpoint the routers route to. Bookings are
	// published on its endpoint scope (Dynamo #11841 on) and received on
	// the endpoint and component scopes.
	Scope Scope
	// RouterID is this process's router_id; 0 draws a random 53-bit one
	// (Dynamo's ids are discovery instance ids, which fit 53 bits).
	RouterID uint64
	// QueueLimit bounds the outbound queue, in events: Publish drops an
	// event when it is full (Stats.OutboundDropped), so a booking never
	// waits for the bus. Default 100000, Dynamo's
	// (ai-dynamo/dynamo:lib/llm/src/kv_router/sequence.rs,
	// REPLICA_EVENT_CHANNEL_CAPACITY).
	QueueLimit int
	// QueueBytes bounds the outbound queue's encoded events, in bytes
	// (an event's size follows its prompt, 9 bytes a block): past it
	// Publish drops as at QueueLimit. Default 64 MiB, the ZMQ mesh's.
	QueueBytes int
	// PublishBatch and PublishWait shape the batches to kvselect peers
	// (batches.go); defaults mesh.DefaultPublishBatch and
	// mesh.DefaultPublishWait, a negative PublishWait sends what is
	// queued without waiting.
	PublishBatch int
	PublishWait  time.Duration
	// DynamoForm says when Dynamo's form of the bookings is published
	// beside the batches (DynamoAuto: while a Dynamo router was heard
	// within DynamoRouterWindow, default DefaultDynamoRouterWindow).
	DynamoForm         DynamoForm
	DynamoRouterWindow time.Duration
	// PendingMsgs and PendingBytes bound the inbound subscriptions' queues
	// (as IngressConfig's). Defaults 65536 and 64 MiB.
	PendingMsgs, PendingBytes int
	// MaxMessageBytes: larger messages are dropped unread. Default 8 MiB.
	MaxMessageBytes int
	// Logger as IngressConfig's.
	Logger *slog.Logger

	// The kvselect-to-kvselect traffic (replicas.go). NoSnapshot turns
	// the catch-up snapshot off: neither served nor asked for.
	NoSnapshot bool
	// AffinityQueueLimit bounds the outbound session bindings
	// (mesh.DefaultAffinityOutbound).
	AffinityQueueLimit int
	// SnapshotWait, SnapshotIdle and SnapshotMaxEvents bound a request's
	// gathering (DefaultSnapshot*); ResyncSettle is how long the catalog
	// must stay unchanged before a snapshot that fell short is asked
	// again (DefaultResyncSettle, the mesh's).
	SnapshotWait, SnapshotIdle time.Duration
	SnapshotMaxEvents          int
	ResyncSettle               time.Duration
	// HeartbeatInterval and PeerTimeout are the replicas' liveness
	// (liveness.go; DefaultHeartbeatInterval, DefaultPeerTimeout); a
	// negative PeerTimeout turns it off (no beats, no expiry).
	HeartbeatInterval, PeerTimeout time.Duration
}

// DefaultQueueLimit and DefaultQueueBytes are BookingsConfig.QueueLimit's
// and QueueBytes' defaults.
const (
	DefaultQueueLimit = 100_000
	DefaultQueueBytes = 64 << 20
)

// BookingDrop says why a received booking message was not applied.
type BookingDrop uint8

const (
	BookingTooLarge          BookingDrop = iota // over MaxMessageBytes
	BookingMalformedEnvelope                    // not an EventEnvelope
	BookingWrongTopic                           // envelope topic is not active_sequences_events
	BookingMalformedEvent                       // payload is not an ActiveSequenceEvent
	BookingUnknownWorker                        // the worker is not schedulable here
	BookingMalformedBatch                       // a kvselect batch whose payload is not [bin, ...]
	numBookingDrops
)

var bookingDropNames = [numBookingDrops]string{"too_large", "malformed_envelope", "wrong_topic", "malformed_event", "unknown_worker", "malformed_batch"}

func (d BookingDrop) String() string {
	if d < numBookingDrops {
		return bookingDropNames[d]
	}
	return fmt.Sprintf("bookingdrop(%d)", uint8(d))
}

// NumBookingDrops is the number of BookingDrop reasons.
const NumBookingDrops = int(numBookingDrops)

// BookingStats are Bookings' counters, cumulative (gauges say so).
type BookingStats struct {
	Published       uint64 // events sent in Dynamo's form
	PublishErrors   uint64 // of those, events nats.go refused (closed, reconnect buffer full)
	OutboundDropped uint64 // events dropped at the full outbound queue
	QueueDepth      int    // events queued or being published (gauge)
	QueueLimit      int    // BookingsConfig.QueueLimit
	QueueBytes      int64  // bytes queued (gauge)
	QueueBytesLimit int    // BookingsConfig.QueueBytes
	// Batches and BatchEvents count the batches sent to kvselect peers
	// and their events; BatchPublishErrors the events of batches nats.go
	// refused; Beats the heartbeats (empty batches) sent.
	Batches, BatchEvents, BatchPublishErrors, Beats uint64
	// DynamoForm: Dynamo's form is being published (gauge).
	DynamoForm bool
	Received   uint64 // Dynamo-form messages received
	// BatchesReceived counts kvselect peers' batches received (and
	// BeatsReceived their heartbeats); SkippedPeerForm the Dynamo-form
	// messages of kvselect peers, skipped (their events come in the
	// batches).
	BatchesReceived, BeatsReceived, SkippedPeerForm uint64
	SkippedOwn                                      uint64 // our own events, skipped by router_id
	Applied                                         uint64 // events handed to the Applier, both forms
	Dropped                                         [numBookingDrops]uint64
	// SlowConsumerDrops: messages the NATS client dropped at a full
	// subscription queue.
	SlowConsumerDrops uint64
	LogsSuppressed    uint64
}

// Bookings exchanges bookings with Dynamo routers (and other kvselect
// processes) on active_sequences_events: core.ReplicaSink for the
// service's own lifecycle events, and a subscriber that applies peers'.
type Bookings struct {
	cfg     BookingsConfig
	id      uint64
	subject string // where events are published in Dynamo's form
	// batchSubject carries the batches between kvselect replicas; dynPub
	// is the publisher_id of this replica's Dynamo-form envelopes
	// (batches.go).
	batchSubject string
	dynPub       uint64
	// dyn.seen is when (Unix ns) a Dynamo router's booking was last
	// received, 0 never.
	dyn struct{ seen atomic.Int64 }
	// affSubject and snapshotSubject are kvselect's own (replicas.go).
	affSubject, snapshotSubject string
	// live owns the peers' last heartbeats (liveness.go).
	live struct {
		sync.Mutex
		seen map[uint64]time.Time
		// released holds the peers expired here, until heard again and
		// restored by a snapshot (liveness.go, rule 4).
		released map[uint64]revival
	}

	out *mpsc.Queue[outEvent] // encoded bookings, owned by the publisher goroutine once taken
	// affOut holds encoded session bindings, snapJobs the reply subjects
	// of snapshot requests to answer: both drained by the publisher.
	affOut   chan []byte
	snapJobs chan string
	// snapKick wakes the snapshotter (capacity 1: requests coalesce).
	snapKick chan struct{}
	askBack  atomic.Bool // the next request asks the responders to ask back
	// graceNext: the next liveness tick restarts every peer's clock.
	graceNext atomic.Bool
	aff       atomic.Pointer[affinityBox]
	// inbox is the snapshot request's reply subscription while one is
	// gathered.
	inbox atomic.Pointer[nats.Subscription]
	// req owns the snapshot requesters' limiters (the request
	// subscription's goroutine and Stats take it).
	req struct {
		sync.Mutex
		lim map[uint64]*mesh.SnapshotLimiter
	}
	rst struct {
		affPublished, affOutDropped, affPublishErrors atomic.Uint64
		affReceived, affApplied, affOwn, affDropped   atomic.Uint64
		snapRequests, snapReplies, snapEvents         atomic.Uint64
		snapDropped, reconciled, resyncs, snapFreed   atomic.Uint64
		snapServed, snapEventsServed, snapRefused     atomic.Uint64
		snapPublishErrors                             atomic.Uint64
		beatDropped, peersExpired, mirrorsExpired     atomic.Uint64
		peersRevived, stalls                          atomic.Uint64
	}
	stop chan struct{}
	wg   sync.WaitGroup

	nc atomic.Pointer[nats.Conn]

	// in serializes the subscriptions' handlers: it owns batch and lg.
	in struct {
		sync.Mutex
		app   Applier
		batch []core.ReplicaEvent
		lg    ratelog.Logger
		// freed, while a snapshot is gathered (nil otherwise), holds the
		// ids of the frees received meanwhile, by origin (at most
		// maxFreedDuringSnapshot): a snapshot admission of one of them
		// was taken before its free and is skipped (replicas.go).
		freed map[string]core.Origin
	}
	subsMu sync.Mutex
	subs   []*nats.Subscription
	closed atomic.Bool

	st struct {
		published, publishErrors, outDropped atomic.Uint64
		outBytes                             atomic.Int64 // reserved by Publish, released once sent
		batches, batchEvents, beats          atomic.Uint64
		batchPublishErrors, batchesReceived  atomic.Uint64
		beatsReceived                        atomic.Uint64
		peerForm                             atomic.Uint64
		received, own, applied               atomic.Uint64
		dropped                              [numBookingDrops]atomic.Uint64
		logsSuppressed                       atomic.Uint64
	}
}

var _ core.ReplicaSink = (*Bookings)(nil)

// NewBookings returns Bookings with their outbound queue; Start connects
// them.
func NewBookings(cfg BookingsConfig) (*Bookings, error) {
	if err := cfg.Scope.Validate(); err != nil {
		return nil, err
	}
	if cfg.QueueLimit < 0 {
		return nil, fmt.Errorf("%w: negative booking queue limit", ErrConfig)
	}
	if cfg.QueueBytes < 0 || cfg.PublishBatch < 0 || cfg.DynamoRouterWindow < 0 || cfg.DynamoForm > DynamoNever {
		return nil, fmt.Errorf("%w: negative booking queue bytes, batch or window, or an unknown Dynamo form", ErrConfig)
	}
	cfg.QueueLimit = cmp.Or(cfg.QueueLimit, DefaultQueueLimit)
	cfg.QueueBytes = cmp.Or(cfg.QueueBytes, DefaultQueueBytes)
	cfg.PublishBatch = cmp.Or(cfg.PublishBatch, mesh.DefaultPublishBatch)
	cfg.PublishWait = cmp.Or(cfg.PublishWait, mesh.DefaultPublishWait)
	cfg.DynamoRouterWindow = cmp.Or(cfg.DynamoRouterWindow, DefaultDynamoRouterWindow)
	cfg.PendingMsgs = cmp.Or(cfg.PendingMsgs, DefaultPendingMsgs)
	cfg.PendingBytes = cmp.Or(cfg.PendingBytes, DefaultPendingBytes)
	cfg.MaxMessageBytes = cmp.Or(cfg.MaxMessageBytes, DefaultMaxMessageBytes)
	cfg.AffinityQueueLimit = cmp.Or(cfg.AffinityQueueLimit, mesh.DefaultAffinityOutbound)
	cfg.SnapshotWait = cmp.Or(cfg.SnapshotWait, DefaultSnapshotWait)
	cfg.SnapshotIdle = cmp.Or(cfg.SnapshotIdle, DefaultSnapshotIdle)
	cfg.SnapshotMaxEvents = cmp.Or(cfg.SnapshotMaxEvents, DefaultSnapshotMaxEvents)
	cfg.ResyncSettle = cmp.Or(cfg.ResyncSettle, DefaultResyncSettle)
	cfg.HeartbeatInterval = cmp.Or(cfg.HeartbeatInterval, DefaultHeartbeatInterval)
	cfg.PeerTimeout = cmp.Or(cfg.PeerTimeout, DefaultPeerTimeout)
	if cfg.HeartbeatInterval < 0 || cfg.PeerTimeout > 0 && cfg.PeerTimeout <= cfg.HeartbeatInterval {
		return nil, fmt.Errorf("%w: peer timeout %v must exceed the heartbeat interval %v", ErrConfig, cfg.PeerTimeout, cfg.HeartbeatInterval)
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	b := &Bookings{cfg: cfg, id: cfg.RouterID, subject: cfg.Scope.Subject(TopicActiveSequences),
		affSubject: cfg.Scope.Subject(TopicSessionAffinity), snapshotSubject: cfg.Scope.Subject(TopicSlotSnapshot),
		batchSubject: cfg.Scope.Subject(TopicBookingBatch),
		out:          mpsc.New[outEvent](cfg.QueueLimit), affOut: make(chan []byte, cfg.AffinityQueueLimit),
		snapJobs: make(chan string, snapshotJobs), snapKick: make(chan struct{}, 1), stop: make(chan struct{})}
	b.req.lim = map[uint64]*mesh.SnapshotLimiter{}
	b.live.seen, b.live.released = map[uint64]time.Time{}, map[uint64]revival{}
	for b.id == 0 {
		var r [8]byte
		_, _ = rand.Read(r[:])
		b.id = binary.LittleEndian.Uint64(r[:]) & (1<<53 - 1)
	}
	b.dynPub = kvselectPublisher(b.id)
	b.in.lg = ratelog.Logger{Log: cfg.Logger, Burst: logBurst, Every: logEvery, Dropped: func() { b.st.logsSuppressed.Add(1) }}
	return b, nil
}

// RouterID is this process's router_id on the bus.
func (b *Bookings) RouterID() uint64 { return b.id }

// Subjects are the subjects bookings are received on, endpoint scope
// first; the first is where they are published.
func (b *Bookings) Subjects() []string {
	subs := []string{b.subject}
	if b.cfg.Scope.Endpoint != "" {
		subs = append(subs, b.cfg.Scope.ComponentScope().Subject(TopicActiveSequences))
	}
	return subs
}

// Publish implements core.ReplicaSink: the event is encoded on the
// caller's goroutine (once, for both forms: batches.go) and queued
// without blocking, or dropped (counted) when the queue is full, in events
// or bytes. It never waits for NATS.
func (b *Bookings) Publish(ev *core.ReplicaEvent) {
	if b.closed.Load() {
		return
	}
	buf, at := mesh.AppendEnvelopeAt(make([]byte, 0, mesh.EnvelopeBound(ev)), ev, b.id)
	n := int64(cap(buf))
	if budget.Reserve(&b.st.outBytes, n, int64(b.cfg.QueueBytes)) {
		if b.out.Put(outEvent{buf: buf, event: at}) {
			return
		}
		b.st.outBytes.Add(-n)
	}
	b.st.outDropped.Add(1)
}

// Start connects the publisher and the subscriber to nc and starts
// applying peers' events to app.
func (b *Bookings) Start(nc *nats.Conn, app Applier) error {
	b.nc.Store(nc)
	b.in.Lock()
	b.in.app = app
	b.in.Unlock()
	b.subsMu.Lock()
	defer b.subsMu.Unlock()
	handlers := map[string]nats.MsgHandler{}
	for _, subj := range b.Subjects() {
		handlers[subj] = func(m *nats.Msg) { b.handle(m.Data) }
	}
	subjects := append(b.Subjects(), b.batchSubject)
	handlers[b.batchSubject] = func(m *nats.Msg) { b.handleBatch(m.Data) }
	if b.aff.Load() != nil {
		subjects = append(subjects, b.affSubject)
		handlers[b.affSubject] = func(m *nats.Msg) { b.handleAffinity(m.Data) }
	}
	if !b.cfg.NoSnapshot {
		subjects = append(subjects, b.snapshotSubject)
		handlers[b.snapshotSubject] = b.handleSnapshotRequest
	}
	for _, subj := range subjects {
		sub, err := nc.Subscribe(subj, handlers[subj])
		if err == nil {
			err = sub.SetPendingLimits(b.cfg.PendingMsgs, b.cfg.PendingBytes)
		}
		if err != nil {
			for _, s := range b.subs {
				_ = s.Unsubscribe()
			}
			b.subs = nil
			return fmt.Errorf("natsplane: subscribe %s: %w", subj, err)
		}
		b.subs = append(b.subs, sub)
	}
	b.wg.Add(1)
	go b.publish(nc)
	if b.cfg.PeerTimeout > 0 {
		b.wg.Add(1)
		go b.expirer(nc)
	}
	if !b.cfg.NoSnapshot {
		b.wg.Add(1)
		go b.snapshotter(nc)
		b.kick() // the catch-up on join
	}
	b.cfg.Logger.Info("bookings: sharing on the NATS event plane", "publish", b.subject, "subscribe", subjects, "router_id", b.id)
	return nil
}

// handle decodes one received Dynamo-form message and applies it,
// skipping our own and kvselect peers' (batches.go).
func (b *Bookings) handle(body []byte) {
	b.st.received.Add(1)
	if len(body) > b.cfg.MaxMessageBytes {
		b.st.dropped[BookingTooLarge].Add(1)
		return
	}
	b.in.Lock()
	defer b.in.Unlock()
	env, err := DecodeEnvelope(body)
	if err != nil {
		b.st.dropped[BookingMalformedEnvelope].Add(1)
		b.in.lg.LogAt(slog.LevelWarn, "bookings: malformed envelope dropped", "err", err)
		return
	}
	if string(env.Topic) != TopicActiveSequences {
		b.st.dropped[BookingWrongTopic].Add(1)
		b.in.lg.LogAt(slog.LevelWarn, "bookings: envelope of another topic dropped", "topic", string(env.Topic))
		return
	}
	if len(b.in.batch) == 0 {
		b.in.batch = append(b.in.batch, core.ReplicaEvent{})
	}
	ev := &b.in.batch[0]
	hs := ev.SequenceHashes[:0]
	*ev = core.ReplicaEvent{SequenceHashes: hs}
	if err := mesh.DecodeSequenceEvent(env.Payload, ev); err != nil {
		b.st.dropped[BookingMalformedEvent].Add(1)
		b.in.lg.LogAt(slog.LevelWarn, "bookings: malformed ActiveSequenceEvent dropped", "publisher_id", env.PublisherID, "err", err)
		return
	}
	if uint64(ev.Origin) == b.id {
		b.st.own.Add(1)
		return
	}
	if ev.Origin == core.OriginLocal {
		// router_id 0 would make the mirror look like our own booking.
		b.st.dropped[BookingMalformedEvent].Add(1)
		return
	}
	if env.PublisherID == kvselectPublisher(uint64(ev.Origin)) {
		b.st.peerForm.Add(1) // a kvselect peer's: its batch carries it
		return
	}
	b.dyn.seen.Store(time.Now().UnixNano()) // a Dynamo router's
	model, group, bs, ok := b.in.app.WorkerPartition(ev.Worker.WorkerID)
	if !ok {
		b.st.dropped[BookingUnknownWorker].Add(1)
		return
	}
	ev.ModelName, ev.RoutingGroup, ev.BlockSize = model, group, bs
	if b.in.freed != nil && ev.Kind == core.ReplicaFree && len(b.in.freed) < maxFreedDuringSnapshot {
		b.in.freed[strings.Clone(ev.RequestID)] = ev.Origin
	}
	b.in.app.ApplyReplica(b.in.batch)
	b.st.applied.Add(1)
	hs = ev.SequenceHashes[:0] // reused by the next decode (ApplyReplica keeps none)
	clear(b.in.batch)
	ev.SequenceHashes = hs
}

// Close stops the publisher and unsubscribes. Events still queued are
// dropped.
func (b *Bookings) Close() error {
	if b.closed.Swap(true) {
		return nil
	}
	b.subsMu.Lock()
	for _, s := range b.subs {
		_ = s.Unsubscribe()
	}
	b.subs = nil
	b.subsMu.Unlock()
	if sub := b.inbox.Load(); sub != nil {
		_ = sub.Unsubscribe()
	}
	close(b.stop)
	b.wg.Wait()
	// What was published reaches the server unless it is unreachable:
	// a cut-off replica must not hang its shutdown on the bus.
	if nc := b.nc.Load(); nc != nil && nc.IsConnected() {
		_ = nc.FlushTimeout(time.Second)
	}
	return nil
}

// Stats returns the counters.
func (b *Bookings) Stats() BookingStats {
	s := BookingStats{
		Published: b.st.published.Load(), PublishErrors: b.st.publishErrors.Load(), OutboundDropped: b.st.outDropped.Load(),
		QueueDepth: b.out.Len(), QueueLimit: b.cfg.QueueLimit, QueueBytes: b.st.outBytes.Load(), QueueBytesLimit: b.cfg.QueueBytes,
		Batches: b.st.batches.Load(), BatchEvents: b.st.batchEvents.Load(), BatchPublishErrors: b.st.batchPublishErrors.Load(), Beats: b.st.beats.Load(),
		DynamoForm: b.dynamoActive(time.Now()),
		Received:   b.st.received.Load(), BatchesReceived: b.st.batchesReceived.Load(), BeatsReceived: b.st.beatsReceived.Load(), SkippedPeerForm: b.st.peerForm.Load(),
		SkippedOwn: b.st.own.Load(), Applied: b.st.applied.Load(),
		LogsSuppressed: b.st.logsSuppressed.Load(),
	}
	for i := range s.Dropped {
		s.Dropped[i] = b.st.dropped[i].Load()
	}
	b.subsMu.Lock()
	for _, sub := range b.subs {
		if n, err := sub.Dropped(); err == nil {
			s.SlowConsumerDrops += uint64(n)
		}
	}
	b.subsMu.Unlock()
	return s
}
