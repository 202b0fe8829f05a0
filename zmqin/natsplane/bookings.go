package natsplane

import (
	"cmp"
	"crypto/rand"
	"encoding/binary"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/kvselect/kvselect/core"
	"github.com/kvselect/kvselect/zmqin/internal/ratelog"
	"github.com/kvselect/kvselect/zmqin/mesh"
	"github.com/nats-io/nats.go"
)

// Applier is what Bookings applies peers' events to: core.Service.
type Applier interface {
	ApplyReplica(evs []core.ReplicaEvent)
	// WorkerPartition names the partition of a schedulable worker: an
	// ActiveSequenceEvent names its worker, not its partition.
	WorkerPartition(id uint64) (model, group string, blockSize uint32, ok bool)
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
	// PendingMsgs and PendingBytes bound the inbound subscriptions' queues
	// (as IngressConfig's). Defaults 65536 and 64 MiB.
	PendingMsgs, PendingBytes int
	// MaxMessageBytes: larger messages are dropped unread. Default 8 MiB.
	MaxMessageBytes int
	// Logger as IngressConfig's.
	Logger *slog.Logger
}

// DefaultQueueLimit is BookingsConfig.QueueLimit's default.
const DefaultQueueLimit = 100_000

// BookingDrop says why a received booking message was not applied.
type BookingDrop uint8

const (
	BookingTooLarge          BookingDrop = iota // over MaxMessageBytes
	BookingMalformedEnvelope                    // not an EventEnvelope
	BookingWrongTopic                           // envelope topic is not active_sequences_events
	BookingMalformedEvent                       // payload is not an ActiveSequenceEvent
	BookingUnknownWorker                        // the worker is not schedulable here
	numBookingDrops
)

var bookingDropNames = [numBookingDrops]string{"too_large", "malformed_envelope", "wrong_topic", "malformed_event", "unknown_worker"}

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
	Published       uint64 // events sent to NATS
	PublishErrors   uint64 // events nats.go refused (closed, reconnect buffer full)
	OutboundDropped uint64 // events dropped at the full outbound queue
	QueueDepth      int    // events queued (gauge)
	QueueLimit      int    // BookingsConfig.QueueLimit
	Received        uint64 // messages received
	SkippedOwn      uint64 // our own events, skipped by router_id
	Applied         uint64 // events handed to the Applier
	Dropped         [numBookingDrops]uint64
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
	subject string // where events are published

	out  chan []byte // encoded ActiveSequenceEvents, owned by the publisher goroutine once sent
	stop chan struct{}
	wg   sync.WaitGroup

	nc atomic.Pointer[nats.Conn]

	// in serializes the subscriptions' handlers: it owns batch and lg.
	in struct {
		sync.Mutex
		app   Applier
		batch []core.ReplicaEvent
		lg    ratelog.Logger
	}
	subsMu sync.Mutex
	subs   []*nats.Subscription
	closed atomic.Bool

	st struct {
		published, publishErrors, outDropped atomic.Uint64
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
	cfg.QueueLimit = cmp.Or(cfg.QueueLimit, DefaultQueueLimit)
	cfg.PendingMsgs = cmp.Or(cfg.PendingMsgs, DefaultPendingMsgs)
	cfg.PendingBytes = cmp.Or(cfg.PendingBytes, DefaultPendingBytes)
	cfg.MaxMessageBytes = cmp.Or(cfg.MaxMessageBytes, DefaultMaxMessageBytes)
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	b := &Bookings{cfg: cfg, id: cfg.RouterID, subject: cfg.Scope.Subject(TopicActiveSequences),
		out: make(chan []byte, cfg.QueueLimit), stop: make(chan struct{})}
	for b.id == 0 {
		var r [8]byte
		_, _ = rand.Read(r[:])
		b.id = binary.LittleEndian.Uint64(r[:]) & (1<<53 - 1)
	}
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
// caller's goroutine and queued without blocking, or dropped (counted)
// when the queue is full. It never waits for NATS.
func (b *Bookings) Publish(ev *core.ReplicaEvent) {
	if b.closed.Load() {
		return
	}
	buf := make([]byte, 0, 256+len(ev.RequestID)+len(ev.LoraName)+9*len(ev.SequenceHashes))
	buf = mesh.AppendSequenceEvent(buf, ev, b.id)
	select {
	case b.out <- buf:
	default:
		b.st.outDropped.Add(1)
	}
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
	for _, subj := range b.Subjects() {
		sub, err := nc.Subscribe(subj, func(m *nats.Msg) { b.handle(m.Data) })
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
	b.cfg.Logger.Info("bookings: sharing on the NATS event plane", "publish", b.subject, "subscribe", b.Subjects(), "router_id", b.id)
	return nil
}

// publish sends the queued events in queue order, each in its own
// envelope with this publisher's next sequence (Dynamo's NATS form: one
// ActiveSequenceEvent per message, run_replica_singleton_publisher).
func (b *Bookings) publish(nc *nats.Conn) {
	defer b.wg.Done()
	var seq uint64
	var env []byte
	for {
		select {
		case <-b.stop:
			return
		case p := <-b.out:
			env = AppendEnvelope(env[:0], b.id, seq, uint64(time.Now().UnixMilli()), TopicActiveSequences, p)
			seq++
			// nc.Publish copies env into its write buffer.
			if err := nc.Publish(b.subject, env); err != nil {
				b.st.publishErrors.Add(1)
				continue
			}
			b.st.published.Add(1)
		}
	}
}

// handle decodes one received message and applies it, skipping our own.
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
	b.in.batch = append(b.in.batch[:0], core.ReplicaEvent{})
	ev := &b.in.batch[0]
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
	model, group, bs, ok := b.in.app.WorkerPartition(ev.Worker.WorkerID)
	if !ok {
		b.st.dropped[BookingUnknownWorker].Add(1)
		return
	}
	ev.ModelName, ev.RoutingGroup, ev.BlockSize = model, group, bs
	b.in.app.ApplyReplica(b.in.batch)
	b.st.applied.Add(1)
	clear(b.in.batch)
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
		QueueDepth: len(b.out), QueueLimit: b.cfg.QueueLimit,
		Received: b.st.received.Load(), SkippedOwn: b.st.own.Load(), Applied: b.st.applied.Load(),
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
