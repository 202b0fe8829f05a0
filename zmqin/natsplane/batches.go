package natsplane

import (
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/kvselect/kvselect/core"
	"github.com/kvselect/kvselect/zmqin/internal/msgpack"
	"github.com/kvselect/kvselect/zmqin/mesh"
	"github.com/nats-io/nats.go"
)

// Bookings between kvselect replicas travel in batches on their own
// subject, {scope}.kvselect-bookings; Dynamo's form, one bare
// ActiveSequenceEvent per message on active_sequences_events, is for
// Dynamo routers (ai-dynamo/dynamo:lib/llm/src/kv_router/sequence.rs,
// run_replica_singleton_publisher).
//
//   - A batch is an EventEnvelope (publisher_id: the router id, sequence:
//     the batch's number) around [flags, [bin, ...]], each bin one event
//     in the ZMQ mesh's replica envelope (mesh.AppendEnvelope: the event
//     with its partition), as a snapshot chunk carries them; flags has
//     flagBeats when the sender beats (its peer liveness is on). Batches
//     are cut by the mesh's rule (mesh.DefaultPublishBatch events, or
//     what is queued within mesh.DefaultPublishWait of the first), and at
//     maxBatchBytes of events (at least one). An empty batch, sent every
//     HeartbeatInterval, is the replica's heartbeat (liveness.go).
//   - The Dynamo form is published too while DynamoForm says so (auto: a
//     Dynamo router's booking was received within DynamoRouterWindow;
//     always; never). Its envelope's publisher_id is
//     kvselectPublisher(router_id), which no Dynamo publisher writes (a
//     random 53-bit id per publisher since Dynamo #11014, the process's
//     instance id, equal to its router_id, before), so a kvselect replica
//     knows a peer's Dynamo-form message from the message alone and skips
//     it (SkippedPeerForm): it has that booking from the batch. Every
//     event is thus applied once, whatever the order in which the two
//     subscriptions deliver, and a Dynamo router's bookings (any other
//     publisher_id) are applied as before.
//
// Both forms come from one encoding on the booking's goroutine
// (mesh.AppendEnvelopeAt: the bare event is a suffix of the mesh
// envelope), queued (QueueLimit events, QueueBytes bytes; past either
// the booking's event is dropped, counted, never waited for).

// TopicBookingBatch carries kvselect replicas' booking batches.
const TopicBookingBatch = "kvselect-bookings"

// maxBatchBytes bounds a batch's events (a fleet's NATS server takes 1
// MiB messages by default).
const maxBatchBytes = 256 << 10

// Flags of a batch or snapshot chunk (its first element): flagLast ends a
// snapshot; flagBeats says the sender beats, so that a replica that holds
// any of a peer's bookings knows whether to expect its beats
// (liveness.go, rule 1). Other bits are malformed.
const (
	flagLast  = 1
	flagBeats = 2
	flagsAll  = flagLast | flagBeats
)

// ownFlags are the flags of this replica's batches and chunks.
func (b *Bookings) ownFlags() uint64 {
	if b.cfg.PeerTimeout > 0 {
		return flagBeats
	}
	return 0
}

// DynamoForm says when kvselect publishes Dynamo's form of its bookings.
type DynamoForm uint8

const (
	// DynamoAuto publishes it while a Dynamo router's booking was seen
	// within DynamoRouterWindow (the default).
	DynamoAuto DynamoForm = iota
	// DynamoAlways publishes it always (a fleet whose Dynamo routers may
	// be idle for longer than the window and must still see kvselect's
	// load).
	DynamoAlways
	// DynamoNever publishes batches only.
	DynamoNever
)

var dynamoFormNames = [...]string{"auto", "always", "never"}

func (f DynamoForm) String() string {
	if int(f) < len(dynamoFormNames) {
		return dynamoFormNames[f]
	}
	return fmt.Sprintf("dynamoform(%d)", uint8(f))
}

// ParseDynamoForm reads auto, always or never.
func ParseDynamoForm(s string) (DynamoForm, error) {
	for i, n := range dynamoFormNames {
		if s == n {
			return DynamoForm(i), nil
		}
	}
	return 0, fmt.Errorf("%w: Dynamo booking form %q: want auto, always or never", ErrConfig, s)
}

// DefaultDynamoRouterWindow is BookingsConfig.DynamoRouterWindow's
// default: long, since publishing the Dynamo form a while after the last
// Dynamo router left costs little, and a Dynamo router idle longer than
// it misses kvselect's bookings until its own next one.
const DefaultDynamoRouterWindow = 10 * time.Minute

// kvselectPublisherTag is XORed into a router id to make the publisher_id
// of kvselect's Dynamo-form envelopes: a 53-bit value with no fixed point,
// so never equal to the router id itself (Dynamo's publisher_id before
// #11014).
const kvselectPublisherTag = 0x6b_7673_656c_6563 & (1<<53 - 1) // "kvselec"

// kvselectPublisher is the publisher_id of router id's Dynamo-form
// envelopes.
func kvselectPublisher(routerID uint64) uint64 { return routerID ^ kvselectPublisherTag }

// outEvent is one queued booking: its mesh envelope, and where the bare
// ActiveSequenceEvent begins in it.
type outEvent struct {
	buf   []byte
	event int
}

// dynamoActive reports whether the Dynamo form is published at now.
func (b *Bookings) dynamoActive(now time.Time) bool {
	switch b.cfg.DynamoForm {
	case DynamoAlways:
		return true
	case DynamoNever:
		return false
	}
	seen := b.dyn.seen.Load()
	return seen != 0 && now.UnixNano()-seen < int64(b.cfg.DynamoRouterWindow)
}

// publish sends the queued bookings until Close: in batches to kvselect
// peers (the mesh's rule, see above), and while dynamoActive in Dynamo's
// form, each in its own envelope with the next Dynamo-form sequence. It
// also sends session bindings (at once, never held back by a batch) and
// snapshot answers.
func (b *Bookings) publish(nc *nats.Conn) {
	defer b.wg.Done()
	var t *time.Timer
	var p publisher
	var beat <-chan time.Time
	if b.cfg.PeerTimeout > 0 {
		tk := time.NewTicker(b.cfg.HeartbeatInterval)
		defer tk.Stop()
		beat = tk.C
		p.beat(b, nc) // known from the start
	}
	var batch, more []outEvent
	for {
		select {
		case <-b.stop:
			return
		case <-beat:
			p.beat(b, nc)
			continue
		case a := <-b.affOut:
			p.affinity(b, nc, a)
			continue
		case reply := <-b.snapJobs:
			b.serveSnapshot(nc, reply)
			continue
		case <-b.out.Ready():
		}
		if batch = b.out.Take(batch); len(batch) == 0 {
			continue // taken by the last round's second take
		}
		if b.cfg.PublishWait > 0 && len(batch) < b.cfg.PublishBatch {
			if t == nil {
				t = time.NewTimer(b.cfg.PublishWait)
			} else {
				t.Reset(b.cfg.PublishWait)
			}
		wait:
			for {
				select {
				case <-t.C:
					break wait
				case a := <-b.affOut:
					p.affinity(b, nc, a)
				case <-b.stop:
					return
				}
			}
			more = b.out.Take(more)
		}
		// The first batch is what was queued when the publisher woke and
		// what came within the wait, up to PublishBatch; the rest goes in
		// batches of PublishBatch at once, with bindings, beats and Close
		// let through between two.
		all := batch
		if len(more) > 0 {
			all = append(batch, more...) // within the queue's limit: both are held
		}
		for i := 0; i < len(all); i += b.cfg.PublishBatch {
			if i > 0 {
				select {
				case <-b.stop:
					return
				case <-beat:
					p.beat(b, nc)
				case a := <-b.affOut:
					p.affinity(b, nc, a)
				default:
				}
			}
			chunk := all[i:min(len(all), i+b.cfg.PublishBatch)]
			p.send(b, nc, chunk)
			var n int64
			for j := range chunk {
				n += int64(cap(chunk[j].buf))
			}
			b.st.outBytes.Add(-n)
			b.out.Release(len(chunk))
		}
		// Let go of the sent buffers now (the length stays: Take reads it
		// to decide whether to keep the slice).
		clear(all)
		batch = all
		clear(more)
		more = more[:0]
	}
}

// publisher is the publisher goroutine's state: its sequences and
// buffers.
type publisher struct {
	seq, dynSeq  uint64
	env, payload []byte
	dynamoWasOn  bool
}

// beat publishes an empty batch, the heartbeat, unless the link is down
// (the peers grant every clock a fresh timeout once it is back).
func (p *publisher) beat(b *Bookings, nc *nats.Conn) {
	if !nc.IsConnected() {
		return
	}
	p.payload = msgpack.AppendArrayHeader(p.payload[:0], 2)
	p.payload = msgpack.AppendUint(p.payload, b.ownFlags())
	p.payload = msgpack.AppendArrayHeader(p.payload, 0)
	p.env = AppendEnvelope(p.env[:0], b.id, p.seq, uint64(time.Now().UnixMilli()), TopicBookingBatch, p.payload)
	p.seq++
	if nc.Publish(b.batchSubject, p.env) == nil {
		b.st.beats.Add(1)
	}
}

func (p *publisher) affinity(b *Bookings, nc *nats.Conn, a []byte) {
	p.env = AppendEnvelope(p.env[:0], b.id, 0, uint64(time.Now().UnixMilli()), TopicSessionAffinity, a)
	if err := nc.Publish(b.affSubject, p.env); err != nil {
		b.rst.affPublishErrors.Add(1)
	}
}

// send publishes one batch of queued bookings in both forms as due.
func (p *publisher) send(b *Bookings, nc *nats.Conn, batch []outEvent) {
	now := time.Now()
	ms := uint64(now.UnixMilli())
	for i := 0; i < len(batch); {
		j, size := i, 0
		for j < len(batch) && (j == i || size+len(batch[j].buf) <= maxBatchBytes) {
			size += len(batch[j].buf)
			j++
		}
		p.payload = msgpack.AppendArrayHeader(p.payload[:0], 2)
		p.payload = msgpack.AppendUint(p.payload, b.ownFlags())
		p.payload = msgpack.AppendArrayHeader(p.payload, j-i)
		for _, e := range batch[i:j] {
			p.payload = msgpack.AppendBin(p.payload, e.buf)
		}
		p.env = AppendEnvelope(p.env[:0], b.id, p.seq, ms, TopicBookingBatch, p.payload)
		p.seq++
		// nc.Publish copies the message into its write buffer.
		if err := nc.Publish(b.batchSubject, p.env); err != nil {
			b.st.batchPublishErrors.Add(uint64(j - i))
		} else {
			b.st.batches.Add(1)
			b.st.batchEvents.Add(uint64(j - i))
		}
		i = j
	}
	on := b.dynamoActive(now)
	if on != p.dynamoWasOn {
		p.dynamoWasOn = on
		b.cfg.Logger.Info("bookings: Dynamo's form of this replica's bookings on or off", "published", on, "mode", b.cfg.DynamoForm.String(), "subject", b.subject)
	}
	if !on {
		return
	}
	for _, e := range batch {
		p.env = AppendEnvelope(p.env[:0], b.dynPub, p.dynSeq, ms, TopicActiveSequences, e.buf[e.event:])
		p.dynSeq++
		if err := nc.Publish(b.subject, p.env); err != nil {
			b.st.publishErrors.Add(1)
			continue
		}
		b.st.published.Add(1)
	}
}

// handleBatch applies one kvselect peer's batch; an empty one is its
// heartbeat.
func (b *Bookings) handleBatch(body []byte) {
	if len(body) > b.cfg.MaxMessageBytes {
		b.st.dropped[BookingTooLarge].Add(1)
		return
	}
	env, err := DecodeEnvelope(body)
	switch {
	case err != nil:
		b.st.dropped[BookingMalformedEnvelope].Add(1)
		return
	case string(env.Topic) != TopicBookingBatch:
		b.st.dropped[BookingWrongTopic].Add(1)
		return
	case env.PublisherID == b.id:
		b.st.own.Add(1)
		return
	}
	flags, bins, err := decodeFlagged(env.Payload)
	if err != nil {
		b.st.dropped[BookingMalformedBatch].Add(1)
		b.in.Lock()
		b.in.lg.LogAt(slog.LevelWarn, "bookings: malformed batch dropped", "publisher_id", env.PublisherID, "err", err)
		b.in.Unlock()
		return
	}
	b.heard(env.PublisherID, flags&flagBeats != 0, true)
	if len(bins) == 0 {
		b.st.beatsReceived.Add(1)
		return
	}
	b.st.batchesReceived.Add(1)
	b.in.Lock()
	defer b.in.Unlock()
	evs := b.in.batch[:0]
	for _, bin := range bins {
		if len(evs) == cap(evs) {
			evs = append(evs, core.ReplicaEvent{})
		} else {
			evs = evs[:len(evs)+1]
		}
		ev := &evs[len(evs)-1]
		if err := mesh.DecodeEnvelope(bin, ev); err != nil || uint64(ev.Origin) != env.PublisherID || ev.Origin == core.OriginLocal {
			b.st.dropped[BookingMalformedEvent].Add(1)
			evs = evs[:len(evs)-1]
			continue
		}
		if b.in.freed != nil && ev.Kind == core.ReplicaFree && len(b.in.freed) < maxFreedDuringSnapshot {
			b.in.freed[strings.Clone(ev.RequestID)] = ev.Origin
		}
	}
	if len(evs) > 0 {
		b.in.app.ApplyReplica(evs)
		b.st.applied.Add(uint64(len(evs)))
	}
	// The events' hash slices are reused by the next batch (ApplyReplica
	// keeps none); their strings are let go.
	for i := range evs {
		evs[i] = core.ReplicaEvent{SequenceHashes: evs[i].SequenceHashes[:0]}
	}
	b.in.batch = evs[:0]
}

// decodeFlagged splits [flags, [bin, ...]], a batch's or a snapshot
// chunk's payload.
func decodeFlagged(payload []byte) (flags uint64, bins [][]byte, err error) {
	r := msgpack.Reader{B: payload}
	if n, err := r.ArrayLen(); err != nil || n != 2 {
		return 0, nil, fmt.Errorf("natsplane: not [flags, events]")
	}
	flags, neg, err := r.Integer()
	if err != nil || neg || flags&^flagsAll != 0 {
		return 0, nil, fmt.Errorf("natsplane: flags")
	}
	bins, err = decodeBins(&r, true)
	return flags, bins, err
}

// decodeBins reads an array of bins (a batch's payload, a snapshot
// chunk's events); whole: nothing may follow it.
func decodeBins(r *msgpack.Reader, whole bool) ([][]byte, error) {
	n, err := r.ArrayLen()
	if err != nil {
		return nil, err
	}
	if n > r.Left() {
		return nil, fmt.Errorf("natsplane: %d bins in %d bytes", n, r.Left())
	}
	bins := make([][]byte, 0, n)
	for range n {
		bin, err := r.Bin()
		if err != nil {
			return nil, err
		}
		bins = append(bins, bin)
	}
	if whole && r.Left() != 0 {
		return nil, fmt.Errorf("natsplane: %d bytes after the bins", r.Left())
	}
	return bins, nil
}
