package natsplane

import (
	"cmp"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/kvselect/kvselect/core"
	"github.com/kvselect/kvselect/radix"
	"github.com/kvselect/kvselect/zmqin/internal/ratelog"
	"github.com/nats-io/nats.go"
)

// IngressConfig configures an Ingress.
type IngressConfig struct {
	// Scope is the workers' KV-state endpoint (namespace, component,
	// endpoint). The Ingress subscribes to kv-events and kv_events on its
	// endpoint scope (Dynamo #11841 on) and its component scope (before):
	// four subjects, or two without an endpoint.
	Scope Scope
	// Inner receives the ranks that have a ZMQ kv_events endpoint (the
	// ZMQ ingress, zmqin.Ingress); nil: core.NopIngress. Such a rank is
	// the inner ingress's: events for it on the bus are dropped
	// (DropZMQRank), so that no rank has two sources.
	Inner core.Ingress
	// PendingMsgs and PendingBytes bound each subscription's queue in
	// the NATS client: past either, the client drops messages (slow
	// consumer, Stats.SlowConsumerDrops), which then show as gaps.
	// Defaults 65536 and 64 MiB.
	PendingMsgs, PendingBytes int
	// MaxMessageBytes: larger messages are dropped unread (DropTooLarge).
	// Default 8 MiB.
	MaxMessageBytes int
	// Logger receives state changes and drops, rate limited (LogBurst,
	// then one per LogEvery); nil discards.
	Logger *slog.Logger
}

// Defaults of IngressConfig.
const (
	DefaultPendingMsgs     = 65536
	DefaultPendingBytes    = 64 << 20
	DefaultMaxMessageBytes = 8 << 20
	logBurst               = 10
	logEvery               = 10 * time.Second
)

func (c *IngressConfig) withDefaults() {
	c.PendingMsgs = cmp.Or(c.PendingMsgs, DefaultPendingMsgs)
	c.PendingBytes = cmp.Or(c.PendingBytes, DefaultPendingBytes)
	c.MaxMessageBytes = cmp.Or(c.MaxMessageBytes, DefaultMaxMessageBytes)
	if c.Inner == nil {
		c.Inner = core.NopIngress{}
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
}

// Validate reports the first invalid field.
func (c *IngressConfig) Validate() error {
	if err := c.Scope.Validate(); err != nil {
		return err
	}
	if c.PendingMsgs < 0 || c.PendingBytes < 0 || c.MaxMessageBytes < 0 {
		return fmt.Errorf("%w: negative queue or message limit", ErrConfig)
	}
	return nil
}

// Subjects returns the subjects the Ingress subscribes to, endpoint scope
// first.
func (c *IngressConfig) Subjects() []string {
	var out []string
	for _, s := range []Scope{c.Scope, c.Scope.ComponentScope()} {
		if s.Endpoint == "" && s != c.Scope.ComponentScope() {
			continue
		}
		out = append(out, s.Subject(TopicKVEvents), s.Subject(TopicKVEventsLegacy))
	}
	return slices.Compact(out)
}

// Drop says why a KV message or one of its events was not applied.
type Drop uint8

const (
	// DropTooLarge: a message over MaxMessageBytes.
	DropTooLarge Drop = iota
	// DropMalformedEnvelope: a body that is neither an EventEnvelope nor
	// the legacy JSON RouterEvent.
	DropMalformedEnvelope
	// DropWrongTopic: an envelope whose topic is not the subject's.
	DropWrongTopic
	// DropMalformedPayload: an envelope whose payload is not RouterEvents
	// (the whole message is skipped).
	DropMalformedPayload
	// DropUnknownWorker: an event of a worker not registered here.
	DropUnknownWorker
	// DropUnknownRank: an event of a rank the worker does not have.
	DropUnknownRank
	// DropZMQRank: an event of a rank listened to over ZMQ.
	DropZMQRank
	// DropStale: an event id at or below the rank's cursor.
	DropStale
	// DropUnsupported: events the codec skips (KVDrop: residency domain,
	// cache owner, tier, empty).
	DropUnsupported
	// DropPaused: an event of a bus rank paused by the indexer's pause
	// route (Pause).
	DropPaused
	numDrops
)

var dropNames = [numDrops]string{"too_large", "malformed_envelope", "wrong_topic", "malformed_payload", "unknown_worker", "unknown_rank", "zmq_rank", "stale", "unsupported", "paused"}

// String is the drop's metric label.
func (d Drop) String() string {
	if d < numDrops {
		return dropNames[d]
	}
	return fmt.Sprintf("drop(%d)", uint8(d))
}

// NumDrops is the number of Drop reasons.
const NumDrops = int(numDrops)

// Stats is a snapshot of an Ingress's counters, cumulative since
// NewIngress. Cheap: atomics only.
type Stats struct {
	Messages      uint64             // messages received (every subject)
	ByForm        [4]uint64          // messages decoded, by Form (index Form)
	EventsApplied uint64             // events passed to sinks
	Dropped       [numDrops]uint64   // messages or events not applied, by Drop
	Skipped       [numKVDrops]uint64 // events the codec skipped, by KVDrop
	// EnvelopeGaps counts a rank's envelope sequence jumping forward
	// (MissedEnvelopes: the envelopes in the gaps); EventGaps an event id
	// jumping forward (MissedEvents). Each clears the rank (Recoveries).
	EnvelopeGaps, MissedEnvelopes uint64
	EventGaps, MissedEvents       uint64
	// Restarts counts a rank's publisher changing (a new publisher id, or
	// the same id with its sequence gone back): the rank is cleared.
	Restarts   uint64
	Recoveries uint64 // rank clears for a gap or a restart
	// SlowConsumerDrops are the messages the NATS client dropped because
	// a subscription's queue was full (PendingMsgs, PendingBytes).
	SlowConsumerDrops uint64
	Ranks             int // ranks registered for bus events (gauge)
	Subscribed        bool
	LogsSuppressed    uint64
}

// Ingress feeds workers' KV events from Dynamo's NATS event plane into
// their partition sinks: core.Ingress for the ranks without a ZMQ
// endpoint, wrapping Inner for those with one. See the package doc for
// the rules.
type Ingress struct {
	cfg IngressConfig

	// syncMu serializes Sync, Detach and Close (each may call Inner).
	syncMu sync.Mutex
	mu     struct {
		sync.RWMutex
		// workers are the registered workers; an entry is replaced, never
		// changed in place, but its ranks' cursors are the processor's.
		workers map[uint64]*kvWorker
		ranks   int
		closed  bool
	}

	// proc serializes message processing over the subscriptions: it owns
	// every kvRank's cursor fields, the decoder and the apply scratch.
	proc struct {
		sync.Mutex
		dec     KVDecoder
		pending []radix.Event
		sink    core.EventSink
		lg      ratelog.Logger
	}

	subsMu sync.Mutex
	subs   []*nats.Subscription

	st struct {
		messages, applied    atomic.Uint64
		forms                [4]atomic.Uint64
		dropped              [numDrops]atomic.Uint64
		skipped              [numKVDrops]atomic.Uint64
		envGaps, envMissed   atomic.Uint64
		evGaps, evMissed     atomic.Uint64
		restarts, recoveries atomic.Uint64
		logsSuppressed       atomic.Uint64
	}
}

var (
	_ core.Ingress         = (*Ingress)(nil)
	_ core.ListenerControl = (*Ingress)(nil)
)

// kvWorker is one registered worker: its sink, and its ranks (a nil
// entry is a rank of Inner, whose bus events are dropped).
type kvWorker struct {
	sink      core.EventSink
	blockSize int
	ranks     map[uint32]*kvRank
}

// kvRank is one bus rank's cursor. The processor (Ingress.proc held)
// owns pub, envSeq, last and has; the atomics mirror them for Status.
type kvRank struct {
	key      radix.WorkerKey
	pub      uint64 // publisher id of the envelopes seen, when hasPub
	hasPub   bool
	envSeq   uint64 // sequence of the last envelope seen, when hasPub
	last     uint64 // last event id applied, when has
	has      bool
	lastSeen atomic.Uint64 // last+1, 0 before the first event
	batches  atomic.Uint64
	gaps     atomic.Uint64
	restarts atomic.Uint64
	// paused is set by Pause: the rank's events are dropped (DropPaused)
	// and its cursor left as it was, so the first event after Resume
	// meets the gap rules (the rank is cleared: NATS has no replay).
	paused atomic.Bool
}

// NewIngress returns an Ingress; Start subscribes it.
func NewIngress(cfg IngressConfig) (*Ingress, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg.withDefaults()
	in := &Ingress{cfg: cfg}
	in.mu.workers = map[uint64]*kvWorker{}
	in.proc.lg = ratelog.Logger{Log: cfg.Logger, Burst: logBurst, Every: logEvery, Dropped: func() { in.st.logsSuppressed.Add(1) }}
	return in, nil
}

// Start subscribes to the KV subjects on nc. Messages are processed on
// the NATS client's delivery goroutines, one message at a time.
func (in *Ingress) Start(nc *nats.Conn) error {
	in.subsMu.Lock()
	defer in.subsMu.Unlock()
	for _, subj := range in.cfg.Subjects() {
		topic := subj[strings.LastIndexByte(subj, '.')+1:]
		sub, err := nc.Subscribe(subj, func(m *nats.Msg) { in.handle(topic, m.Data) })
		if err != nil {
			in.unsubscribeLocked()
			return fmt.Errorf("natsplane: subscribe %s: %w", subj, err)
		}
		if err := sub.SetPendingLimits(in.cfg.PendingMsgs, in.cfg.PendingBytes); err != nil {
			_ = sub.Unsubscribe()
			in.unsubscribeLocked()
			return err
		}
		in.subs = append(in.subs, sub)
	}
	in.cfg.Logger.Info("KV events: subscribed to the NATS event plane", "subjects", in.cfg.Subjects())
	return nil
}

func (in *Ingress) unsubscribeLocked() {
	for _, s := range in.subs {
		_ = s.Unsubscribe()
	}
	in.subs = nil
}

// Sync implements core.Ingress: ranks with an endpoint go to Inner, the
// others are registered for bus events. A rank whose ownership is
// unchanged keeps its cursor; a new or changed rank starts without one; a
// rank that leaves the bus (removed, or given an endpoint) is cleared. A
// different sink or block size starts every rank afresh, clearing the old
// ones through the old sink.
func (in *Ingress) Sync(workerID uint64, blockSize int, ranks []core.RankSource, sink core.EventSink) {
	in.syncMu.Lock()
	defer in.syncMu.Unlock()
	var zmq []core.RankSource
	bus := map[uint32]bool{}
	for _, r := range ranks {
		if r.Endpoint != "" {
			zmq = append(zmq, r)
		} else {
			bus[r.DPRank] = true
		}
	}
	in.cfg.Inner.Sync(workerID, blockSize, zmq, sink)
	// Clears run under mu: the processor applies under mu's read lock,
	// so a clear is ordered with the rank's events.
	in.mu.Lock()
	defer in.mu.Unlock()
	if in.mu.closed {
		return
	}
	old := in.mu.workers[workerID]
	w := &kvWorker{sink: sink, blockSize: blockSize, ranks: make(map[uint32]*kvRank, len(ranks))}
	fresh := old == nil || old.sink != sink || old.blockSize != blockSize
	for _, r := range zmq {
		w.ranks[r.DPRank] = nil
	}
	for r := range bus {
		if !fresh && old.ranks[r] != nil {
			w.ranks[r] = old.ranks[r]
		} else {
			w.ranks[r] = &kvRank{key: radix.WorkerKey{WorkerID: workerID, DPRank: r}}
		}
	}
	if old != nil {
		for r, kr := range old.ranks {
			if kr != nil && (fresh || w.ranks[r] == nil) {
				old.sink.ClearRank(kr.key)
			}
		}
		in.mu.ranks -= old.busRanks()
	}
	in.mu.ranks += w.busRanks()
	in.mu.workers[workerID] = w
}

// busRanks counts w's ranks fed by the bus.
func (w *kvWorker) busRanks() int {
	n := 0
	for _, kr := range w.ranks {
		if kr != nil {
			n++
		}
	}
	return n
}

// Detach implements core.Ingress. On return no bus event of the worker
// reaches its sink: the processor applies under mu's read lock, taken
// here for writing.
func (in *Ingress) Detach(workerID uint64) {
	in.syncMu.Lock()
	defer in.syncMu.Unlock()
	in.cfg.Inner.Detach(workerID)
	in.mu.Lock()
	if w := in.mu.workers[workerID]; w != nil {
		in.mu.ranks -= w.busRanks()
		delete(in.mu.workers, workerID)
	}
	in.mu.Unlock()
}

// Status implements core.Ingress: Inner's ranks, then the bus ranks
// (Endpoint "nats", State "connecting" until a first event, then "live";
// LastSeq the last event id).
func (in *Ingress) Status(workerID uint64, dst []core.RankStatus) []core.RankStatus {
	dst = in.cfg.Inner.Status(workerID, dst)
	in.mu.RLock()
	w := in.mu.workers[workerID]
	in.mu.RUnlock()
	if w == nil {
		return dst
	}
	for _, r := range slices.Sorted(maps.Keys(w.ranks)) {
		kr := w.ranks[r]
		if kr == nil {
			continue // Inner's
		}
		st := core.RankStatus{DPRank: r, Endpoint: "nats", State: "connecting", Batches: kr.batches.Load(), Gaps: kr.gaps.Load(), Restarts: kr.restarts.Load()}
		if v := kr.lastSeen.Load(); v > 0 {
			st.State, st.LastSeq, st.HasSeq = "live", v-1, true
		}
		if kr.paused.Load() {
			st.State = "paused"
		}
		dst = append(dst, st)
	}
	return dst
}

// Close unsubscribes, waits for the message being processed, and closes
// Inner.
func (in *Ingress) Close() error {
	in.subsMu.Lock()
	in.unsubscribeLocked()
	in.subsMu.Unlock()
	in.syncMu.Lock()
	defer in.syncMu.Unlock()
	in.mu.Lock()
	in.mu.closed = true
	in.mu.workers = map[uint64]*kvWorker{}
	in.mu.ranks = 0
	in.mu.Unlock()
	// A handler still running finds no worker and applies nothing.
	in.proc.Lock()
	in.proc.Unlock()
	return in.cfg.Inner.Close()
}

// Stats returns the counters.
func (in *Ingress) Stats() Stats {
	var s Stats
	s.Messages = in.st.messages.Load()
	for i := range s.ByForm {
		s.ByForm[i] = in.st.forms[i].Load()
	}
	s.EventsApplied = in.st.applied.Load()
	for i := range s.Dropped {
		s.Dropped[i] = in.st.dropped[i].Load()
	}
	for i := range s.Skipped {
		s.Skipped[i] = in.st.skipped[i].Load()
	}
	s.EnvelopeGaps, s.MissedEnvelopes = in.st.envGaps.Load(), in.st.envMissed.Load()
	s.EventGaps, s.MissedEvents = in.st.evGaps.Load(), in.st.evMissed.Load()
	s.Restarts, s.Recoveries = in.st.restarts.Load(), in.st.recoveries.Load()
	s.LogsSuppressed = in.st.logsSuppressed.Load()
	in.subsMu.Lock()
	for _, sub := range in.subs {
		if n, err := sub.Dropped(); err == nil {
			s.SlowConsumerDrops += uint64(n)
		}
	}
	s.Subscribed = len(in.subs) > 0
	in.subsMu.Unlock()
	in.mu.RLock()
	s.Ranks = in.mu.ranks
	in.mu.RUnlock()
	return s
}

// Handle processes one message body received on a subject whose topic is
// topic, as the subscriptions do. Exported for tests and for a host that
// receives the bytes another way.
func (in *Ingress) Handle(topic string, body []byte) { in.handle(topic, body) }

func (in *Ingress) drop(d Drop, n uint64) { in.st.dropped[d].Add(n) }

// handle applies the rules of the package doc to one message.
func (in *Ingress) handle(topic string, body []byte) {
	// Counted once handled: whoever sees the count sees its effects.
	defer in.st.messages.Add(1)
	if len(body) > in.cfg.MaxMessageBytes {
		in.drop(DropTooLarge, 1)
		return
	}
	in.proc.Lock()
	defer in.proc.Unlock()
	p := &in.proc
	var env Envelope
	var batch KVBatch
	var err error
	switch classify(body) {
	case bodyEnvelope:
		if env, err = DecodeEnvelope(body); err != nil {
			in.drop(DropMalformedEnvelope, 1)
			p.lg.LogAt(slog.LevelWarn, "KV event plane: malformed envelope dropped", "topic", topic, "err", err)
			return
		}
		if string(env.Topic) != topic {
			in.drop(DropWrongTopic, 1)
			p.lg.LogAt(slog.LevelWarn, "KV event plane: envelope topic differs from its subject's; dropped", "topic", topic, "envelope_topic", string(env.Topic))
			return
		}
		if batch, err = p.dec.Decode(env.Payload); err != nil {
			in.drop(DropMalformedPayload, 1)
			p.lg.LogAt(slog.LevelWarn, "KV event plane: malformed RouterEvent payload dropped", "publisher_id", env.PublisherID, "sequence", env.Sequence, "err", err)
			return
		}
	case bodyJSON:
		if batch, err = p.dec.DecodeLegacyJSON(body); err != nil {
			in.drop(DropMalformedPayload, 1)
			p.lg.LogAt(slog.LevelWarn, "KV event plane: malformed legacy JSON RouterEvent dropped", "err", err)
			return
		}
	default:
		in.drop(DropMalformedEnvelope, 1)
		p.lg.LogAt(slog.LevelWarn, "KV event plane: message is neither an envelope nor JSON; dropped", "topic", topic, "bytes", len(body))
		return
	}
	in.st.forms[batch.Form].Add(1)
	for i, n := range batch.Skipped {
		if n > 0 {
			in.st.skipped[i].Add(n)
			in.drop(DropUnsupported, n)
		}
	}
	enveloped := batch.Form != FormLegacyJSON
	in.mu.RLock()
	defer in.mu.RUnlock()
	for i := range batch.Events {
		e := &batch.Events[i]
		w := in.mu.workers[e.Worker.WorkerID]
		if w == nil {
			in.drop(DropUnknownWorker, 1)
			continue
		}
		kr, ok := w.ranks[e.Worker.DPRank]
		if !ok {
			in.drop(DropUnknownRank, 1)
			continue
		}
		if kr == nil {
			in.drop(DropZMQRank, 1)
			continue
		}
		if kr.paused.Load() {
			in.drop(DropPaused, 1)
			continue
		}
		if enveloped {
			in.envelopeRules(w, kr, &env)
		}
		if !in.eventRules(w, kr, e) {
			continue
		}
		if p.sink != w.sink {
			in.flushLocked()
			p.sink = w.sink
		}
		p.pending = append(p.pending, *e)
	}
	in.flushLocked()
	// Nothing of the decoder's memory is kept past this message.
	clear(p.pending)
	p.pending = p.pending[:0]
}

// envelopeRules are rules 1 to 3 (package doc) for rank kr seeing an
// event in envelope env.
func (in *Ingress) envelopeRules(w *kvWorker, kr *kvRank, env *Envelope) {
	switch {
	case !kr.hasPub:
	case env.PublisherID != kr.pub:
		in.restart(w, kr, fmt.Sprintf("publisher id %#x replaced %#x", env.PublisherID, kr.pub))
	case env.Sequence < kr.envSeq:
		in.restart(w, kr, fmt.Sprintf("publisher %#x sequence went back from %d to %d", kr.pub, kr.envSeq, env.Sequence))
	case env.Sequence > kr.envSeq+1:
		missed := env.Sequence - kr.envSeq - 1
		in.st.envGaps.Add(1)
		in.st.envMissed.Add(missed)
		kr.gaps.Add(1)
		in.proc.lg.LogAt(slog.LevelWarn, "KV event plane: envelope gap; rank cleared (no replay over NATS)", "worker", kr.key.String(), "publisher_id", kr.pub, "from_seq", kr.envSeq+1, "to_seq", env.Sequence, "missed", missed)
		in.recover(w, kr)
	}
	kr.pub, kr.hasPub, kr.envSeq = env.PublisherID, true, env.Sequence
}

// eventRules are rules 4 to 7: it reports whether e is to be applied.
func (in *Ingress) eventRules(w *kvWorker, kr *kvRank, e *radix.Event) bool {
	switch {
	case !kr.has:
	case e.EventID <= kr.last:
		in.drop(DropStale, 1)
		return false
	case e.EventID > kr.last+1:
		missed := e.EventID - kr.last - 1
		in.st.evGaps.Add(1)
		in.st.evMissed.Add(missed)
		kr.gaps.Add(1)
		in.proc.lg.LogAt(slog.LevelWarn, "KV event plane: event id gap; rank cleared (no replay over NATS)", "worker", kr.key.String(), "from_event_id", kr.last+1, "to_event_id", e.EventID, "missed", missed)
		in.recover(w, kr)
	}
	kr.last, kr.has = e.EventID, true
	kr.lastSeen.Store(e.EventID + 1)
	kr.batches.Add(1)
	in.st.applied.Add(1)
	return true
}

// restart handles a new publisher incarnation for kr.
func (in *Ingress) restart(w *kvWorker, kr *kvRank, why string) {
	in.st.restarts.Add(1)
	kr.restarts.Add(1)
	in.proc.lg.LogAt(slog.LevelWarn, "KV event plane: publisher restart detected; rank cleared", "worker", kr.key.String(), "why", why)
	in.recover(w, kr)
}

// recover is Dynamo's degraded reset for a source it cannot replay: the
// rank's pending events are applied, its blocks cleared and its cursor
// dropped, so the next event starts it again (its publisher is kept:
// envelopeRules records it).
func (in *Ingress) recover(w *kvWorker, kr *kvRank) {
	in.flushLocked()
	in.st.recoveries.Add(1)
	w.sink.ClearRank(kr.key)
	kr.has = false
}

// flushLocked applies the pending events to their sink. Called with proc
// and mu (read) held.
func (in *Ingress) flushLocked() {
	p := &in.proc
	if len(p.pending) > 0 {
		p.sink.ApplyBatch(p.pending)
		clear(p.pending)
		p.pending = p.pending[:0]
	}
}
