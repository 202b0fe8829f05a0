package natsplane

import (
	"fmt"
	"log/slog"
	"time"

	"github.com/kvselect/kvselect/core"
	"github.com/kvselect/kvselect/zmqin/internal/msgpack"
	"github.com/kvselect/kvselect/zmqin/mesh"
	"github.com/nats-io/nats.go"
)

// kvselect-to-kvselect replica traffic over NATS, beside the bookings
// Dynamo routers also read: what the ZMQ mesh (zmqin/mesh) carries on its
// own topics, with its encoders, limits and rules.
//
//   - Session bindings on {scope}.kvselect-session-affinity: one
//     EventEnvelope per binding around mesh.AppendAffinity's map, queued
//     without blocking (AffinityQueueLimit, the mesh's 4,096) and
//     subscribed to only once HandleAffinity installed a handler (as the
//     mesh). Own bindings are skipped by the envelope's publisher id
//     (core skips its own writer id's too).
//   - The catch-up snapshot by request/reply on
//     {scope}.kvselect-slot-snapshot: a replica that joins, and one that
//     reconnects after a partition, publishes a request with a reply
//     inbox (an envelope with its router id; after a reconnect the
//     payload 1, asking each responder to request this replica's
//     snapshot in turn); every other kvselect replica answers (mesh.SnapshotLimiter: at most
//     mesh.SnapshotBurst per mesh.SnapshotWindow per requester) with its
//     live local bookings (core.Service.AppendLocalBookings) in chunks
//     (snapshotChunkBytes), each an envelope with the responder's id and
//     the chunk's number around [flags: flagLast on the last, flagBeats
//     when it beats, [bin: mesh.AppendEnvelope of
//     one admission, ...]]: the mesh's replica envelope, which names its
//     partition. The chunks are published by the publisher goroutine
//     between live events, so a free published after the snapshot was
//     taken follows it on the wire.
//
// The requester applies the chunks as they come (core.ApplyReplica, under
// the same lock as live events) and, once a responder's last chunk is in
// with none missing, reconciles: the responder's mirrors admitted before
// the request and absent from its snapshot are released
// (core.Service.ReleaseMirrors): frees missed while cut off end there.
// Events dropped for want of their partition or worker
// (mesh.SnapshotShort) make it ask again once the catalog has changed and
// settled (ResyncSettle), as the mesh does. A request gathers replies
// until SnapshotWait passes with none, then until SnapshotIdle passes
// between two; at most SnapshotMaxEvents events are taken, the rest
// dropped (counted) and no reconciliation done.
//
// A free racing the snapshot (the responder took the snapshot, then
// freed; the requester's live and reply subscriptions are delivered on
// different goroutines, so it may apply the free first) would leave a
// stale mirror until the expiry guard, as on the mesh: while gathering,
// the requester remembers the frees it receives (at most
// maxFreedDuringSnapshot) and skips snapshot admissions of those ids
// (SnapshotFreed). An id freed and booked again within one gathering is
// then missed until its next event.

// kvselect's own topics on the event plane (Dynamo has no counterpart:
// its routers never subscribe to them).
const (
	TopicSessionAffinity = "kvselect-session-affinity"
	TopicSlotSnapshot    = "kvselect-slot-snapshot"
)

// snapshotChunkBytes bounds a snapshot reply's payload (the server's
// MaxPayload is 8 MiB, NATS' default 1 MiB).
const snapshotChunkBytes = 256 << 10

// Defaults of the replica traffic's BookingsConfig fields.
const (
	DefaultSnapshotWait      = time.Second
	DefaultSnapshotIdle      = 250 * time.Millisecond
	DefaultSnapshotMaxEvents = 1 << 20
	DefaultResyncSettle      = 500 * time.Millisecond
	// maxFreedDuringSnapshot bounds the frees remembered while a
	// snapshot is gathered.
	maxFreedDuringSnapshot = 1 << 16
	// snapshotJobs bounds the snapshot answers waiting for the
	// publisher; past it a request is refused (counted).
	snapshotJobs = 16
	// maxRequesters bounds the requesters' limiters kept; past it the
	// oldest are forgotten.
	maxRequesters = 1024
)

// ReplicaStats are the kvselect-to-kvselect counters of Bookings.
type ReplicaStats struct {
	AffinityPublished, AffinityOutboundDropped, AffinityPublishErrors uint64
	AffinityQueueDepth, AffinityQueueLimit                            int
	AffinityReceived, AffinityApplied, AffinitySkippedOwn             uint64
	AffinityDropped                                                   uint64 // malformed
	// Requester side.
	SnapshotRequests  uint64 // requests sent (join, reconnect, resync)
	SnapshotReplies   uint64 // complete replies (last chunk, none missing)
	SnapshotEvents    uint64 // events received in replies
	SnapshotDropped   uint64 // reply messages malformed, out of order, or past SnapshotMaxEvents
	MirrorsReconciled uint64 // mirrors released by reconciliation
	SnapshotFreed     uint64 // snapshot admissions skipped: their free came first
	Resyncs           uint64 // requests for a snapshot that fell short
	// Responder side.
	SnapshotsServed, SnapshotEventsServed uint64
	SnapshotsRefused                      uint64 // rate limit or answer queue full
	SnapshotPublishErrors                 uint64
	// Liveness (liveness.go): peers released for silence, their mirrors,
	// malformed or unrecorded beats, peers heard again after their release
	// (each asked for its snapshot), and overdue beat ticks (stalls).
	PeersExpired, MirrorsExpired, HeartbeatsDropped uint64
	PeersRevived, Stalls                            uint64
}

// affinityBox holds the bindings' applier.
type affinityBox struct{ mesh.AffinityApplier }

// HandleAffinity installs the applier of peers' session bindings; call it
// before Start: the subscriptions then include the bindings' subject.
func (b *Bookings) HandleAffinity(a mesh.AffinityApplier) { b.aff.Store(&affinityBox{a}) }

// PublishAffinity queues a binding for the peers without blocking
// (core.AffinitySink): a full queue drops it, counted. It is encoded on
// the caller's goroutine, so nothing of ev is kept.
func (b *Bookings) PublishAffinity(ev *core.AffinityEvent) {
	if b.closed.Load() {
		return
	}
	select {
	case b.affOut <- mesh.AppendAffinity(nil, ev):
		b.rst.affPublished.Add(1)
	default:
		b.rst.affOutDropped.Add(1)
	}
}

// handleAffinity applies one peer's binding.
func (b *Bookings) handleAffinity(body []byte) {
	b.rst.affReceived.Add(1)
	box := b.aff.Load()
	env, err := DecodeEnvelope(body)
	if box == nil || err != nil || string(env.Topic) != TopicSessionAffinity || len(body) > b.cfg.MaxMessageBytes {
		b.rst.affDropped.Add(1)
		return
	}
	var evs [1]core.AffinityEvent
	if err := mesh.DecodeAffinity(env.Payload, &evs[0]); err != nil {
		b.rst.affDropped.Add(1)
		b.in.Lock()
		b.in.lg.LogAt(slog.LevelWarn, "session affinity: malformed binding dropped", "publisher_id", env.PublisherID, "err", err)
		b.in.Unlock()
		return
	}
	if env.PublisherID == b.id {
		b.rst.affOwn.Add(1)
		return
	}
	b.rst.affApplied.Add(1)
	box.ApplyAffinity(evs[:])
}

// snapshotRequest is the body of a request: this replica's id, and with
// askBack the payload 1: the responders are to ask for the requester's
// snapshot in turn.
func (b *Bookings) snapshotRequest(askBack bool) []byte {
	var payload []byte
	if askBack {
		payload = msgpack.AppendUint(nil, 1)
	}
	return AppendEnvelope(nil, b.id, 0, uint64(time.Now().UnixMilli()), TopicSlotSnapshot, payload)
}

// handleSnapshotRequest answers a peer's request, through the publisher.
func (b *Bookings) handleSnapshotRequest(m *nats.Msg) {
	env, err := DecodeEnvelope(m.Data)
	if err != nil || string(env.Topic) != TopicSlotSnapshot || m.Reply == "" {
		b.rst.snapDropped.Add(1)
		return
	}
	if env.PublisherID == b.id {
		return // our own request
	}
	b.req.Lock()
	lim := b.req.lim[env.PublisherID]
	if lim == nil {
		if len(b.req.lim) >= maxRequesters {
			clear(b.req.lim)
		}
		lim = new(mesh.SnapshotLimiter)
		b.req.lim[env.PublisherID] = lim
	}
	ok := lim.Allow(time.Now())
	b.req.Unlock()
	if !ok {
		b.rst.snapRefused.Add(1)
		return
	}
	select {
	case b.snapJobs <- m.Reply:
	default:
		b.rst.snapRefused.Add(1)
	}
	if len(env.Payload) == 1 && env.Payload[0] == 1 {
		// The requester reconnected: what it booked and freed while cut
		// off never reached us.
		b.kick()
	}
}

// serveSnapshot publishes the live local bookings to reply in chunks; it
// runs on the publisher goroutine.
func (b *Bookings) serveSnapshot(nc *nats.Conn, reply string) {
	b.in.Lock()
	app := b.in.app
	b.in.Unlock()
	evs := app.AppendLocalBookings(nil)
	var payload, env, one []byte
	var seq uint64
	i := 0
	for {
		// One chunk: as many events as fit snapshotChunkBytes (at least
		// one), the header's count written once they are known.
		var bins [][]byte
		size := 0
		for i < len(evs) && (len(bins) == 0 || size < snapshotChunkBytes) {
			one = mesh.AppendEnvelope(one[:0], &evs[i], b.id)
			bins = append(bins, append([]byte(nil), one...))
			size += len(one)
			i++
		}
		last := i == len(evs)
		payload = msgpack.AppendArrayHeader(payload[:0], 2)
		payload = msgpack.AppendUint(payload, boolUint(last)|b.ownFlags())
		payload = msgpack.AppendArrayHeader(payload, len(bins))
		for _, bin := range bins {
			payload = msgpack.AppendBin(payload, bin)
		}
		env = AppendEnvelope(env[:0], b.id, seq, uint64(time.Now().UnixMilli()), TopicSlotSnapshot, payload)
		seq++
		if err := nc.Publish(reply, env); err != nil {
			b.rst.snapPublishErrors.Add(1)
			return
		}
		b.rst.snapEventsServed.Add(uint64(len(bins)))
		if last {
			b.rst.snapServed.Add(1)
			return
		}
	}
}

func boolUint(v bool) uint64 {
	if v {
		return 1
	}
	return 0
}

// decodeSnapshotChunk splits a chunk's payload, [flags, [bin, ...]]
// (batches.go).
func decodeSnapshotChunk(payload []byte) (last, beats bool, bins [][]byte, err error) {
	flags, bins, err := decodeFlagged(payload)
	if err != nil {
		return false, false, nil, fmt.Errorf("natsplane: snapshot chunk: %w", err)
	}
	return flags&flagLast != 0, flags&flagBeats != 0, bins, nil
}

// responder is a snapshot reply being gathered.
type responder struct {
	next   uint64 // the next chunk's number
	broken bool   // a chunk was missing or malformed: no reconciliation
	ids    map[string]struct{}
}

// RequestSnapshot asks the peers for their live bookings and gathers the
// replies (see above); it runs on the snapshotter goroutine, never on a
// request's. It reports whether an event fell short.
func (b *Bookings) requestSnapshot(nc *nats.Conn, askBack bool) (short bool) {
	inbox := nc.NewRespInbox()
	sub, err := nc.SubscribeSync(inbox)
	if err != nil {
		return false
	}
	defer func() { _ = sub.Unsubscribe() }()
	// Close unsubscribes it too, so that NextMsg returns at once.
	b.inbox.Store(sub)
	defer b.inbox.Store(nil)
	if b.closed.Load() {
		return false
	}
	_ = sub.SetPendingLimits(b.cfg.PendingMsgs, b.cfg.PendingBytes)
	b.in.Lock()
	app := b.in.app
	b.in.Unlock()
	b.in.Lock()
	b.in.freed = map[string]core.Origin{}
	b.in.Unlock()
	defer func() {
		b.in.Lock()
		b.in.freed = nil
		b.in.Unlock()
	}()
	asked := time.Now()
	if err := nc.PublishRequest(b.snapshotSubject, inbox, b.snapshotRequest(askBack)); err != nil {
		return false
	}
	b.rst.snapRequests.Add(1)
	from := map[uint64]*responder{}
	taken := 0
	wait := b.cfg.SnapshotWait
	for {
		m, err := sub.NextMsg(wait)
		if err != nil {
			return short // timed out (or closed)
		}
		wait = b.cfg.SnapshotIdle
		env, err := DecodeEnvelope(m.Data)
		if err != nil || string(env.Topic) != TopicSlotSnapshot || env.PublisherID == b.id {
			b.rst.snapDropped.Add(1)
			continue
		}
		rs := from[env.PublisherID]
		if rs == nil {
			if len(from) >= maxRequesters {
				b.rst.snapDropped.Add(1)
				continue
			}
			rs = &responder{ids: map[string]struct{}{}}
			from[env.PublisherID] = rs
		}
		last, beats, bins, err := decodeSnapshotChunk(env.Payload)
		if err != nil || env.Sequence != rs.next || rs.broken {
			b.rst.snapDropped.Add(1)
			rs.broken = true
			continue
		}
		rs.next++
		// A peer whose mirrors come from its snapshot is expected to beat
		// from now on (liveness.go, rule 1), even before its next beat.
		b.heard(env.PublisherID, beats, false)
		if taken+len(bins) > b.cfg.SnapshotMaxEvents {
			b.rst.snapDropped.Add(1)
			rs.broken = true
			continue
		}
		taken += len(bins)
		batch := make([]core.ReplicaEvent, 0, len(bins))
		for _, bin := range bins {
			var ev core.ReplicaEvent
			if err := mesh.DecodeEnvelope(bin, &ev); err != nil || uint64(ev.Origin) != env.PublisherID || ev.Kind != core.ReplicaAdd {
				b.rst.snapDropped.Add(1)
				rs.broken = true
				continue
			}
			rs.ids[ev.RequestID] = struct{}{}
			batch = append(batch, ev)
		}
		b.rst.snapEvents.Add(uint64(len(batch)))
		b.in.Lock()
		keep := batch[:0]
		for _, ev := range batch {
			if o, ok := b.in.freed[ev.RequestID]; ok && o == ev.Origin {
				b.rst.snapFreed.Add(1) // freed after the snapshot was taken
				continue
			}
			keep = append(keep, ev)
		}
		batch = keep
		app.ApplyReplica(batch)
		b.in.Unlock()
		for i := range batch {
			short = short || mesh.SnapshotShort(&batch[i])
		}
		if last && !rs.broken {
			b.rst.snapReplies.Add(1)
			b.restored(env.PublisherID)
			n := app.ReleaseMirrors(core.Origin(env.PublisherID), asked, func(id string) bool { _, ok := rs.ids[id]; return ok })
			b.rst.reconciled.Add(uint64(n))
			rs.ids = nil
		}
	}
}

// snapshotter asks for a snapshot at Start, on every Resync (the Link's
// reconnects), and once more after a snapshot fell short, when the
// catalog has changed and settled; until Close.
func (b *Bookings) snapshotter(nc *nats.Conn) {
	defer b.wg.Done()
	tick := time.NewTicker(b.cfg.ResyncSettle / 2)
	defer tick.Stop()
	b.in.Lock()
	app := b.in.app
	b.in.Unlock()
	var short bool
	var shortAt uint64
	version, changed := app.CatalogVersion(), time.Now()
	for {
		select {
		case <-b.stop:
			return
		case <-b.snapKick:
		case <-tick.C:
			if v := app.CatalogVersion(); v != version {
				version, changed = v, time.Now()
				continue
			}
			if !short || shortAt == version || time.Since(changed) < b.cfg.ResyncSettle {
				continue
			}
			b.rst.resyncs.Add(1)
		}
		at := app.CatalogVersion()
		short = b.requestSnapshot(nc, b.askBack.Swap(false))
		if short {
			shortAt = at
		}
	}
}

// Resync asks the peers for a catch-up snapshot, and them to ask for
// this replica's (the Link's OnReconnect: each side missed the other's
// events while cut off). It returns at once; requests coalesce.
func (b *Bookings) Resync() {
	b.graceNext.Store(true) // the peers' beats did not reach us meanwhile
	b.askBack.Store(true)
	b.kick()
}

// CatchUp asks the peers for a catch-up snapshot, as on join: for a host
// whose bus just gained peers (an embedded server's new route). It
// returns at once; requests coalesce.
func (b *Bookings) CatchUp() { b.kick() }

// kick wakes the snapshotter.
func (b *Bookings) kick() {
	select {
	case b.snapKick <- struct{}{}:
	default:
	}
}

// ReplicaStats returns the kvselect-to-kvselect counters.
func (b *Bookings) ReplicaStats() ReplicaStats {
	return ReplicaStats{
		AffinityPublished: b.rst.affPublished.Load(), AffinityOutboundDropped: b.rst.affOutDropped.Load(), AffinityPublishErrors: b.rst.affPublishErrors.Load(),
		AffinityQueueDepth: len(b.affOut), AffinityQueueLimit: cap(b.affOut),
		AffinityReceived: b.rst.affReceived.Load(), AffinityApplied: b.rst.affApplied.Load(), AffinitySkippedOwn: b.rst.affOwn.Load(), AffinityDropped: b.rst.affDropped.Load(),
		SnapshotRequests: b.rst.snapRequests.Load(), SnapshotReplies: b.rst.snapReplies.Load(), SnapshotEvents: b.rst.snapEvents.Load(),
		SnapshotDropped: b.rst.snapDropped.Load(), MirrorsReconciled: b.rst.reconciled.Load(), SnapshotFreed: b.rst.snapFreed.Load(), Resyncs: b.rst.resyncs.Load(),
		SnapshotsServed: b.rst.snapServed.Load(), SnapshotEventsServed: b.rst.snapEventsServed.Load(), SnapshotsRefused: b.rst.snapRefused.Load(),
		SnapshotPublishErrors: b.rst.snapPublishErrors.Load(),
		PeersExpired:          b.rst.peersExpired.Load(), MirrorsExpired: b.rst.mirrorsExpired.Load(), HeartbeatsDropped: b.rst.beatDropped.Load(),
		PeersRevived: b.rst.peersRevived.Load(), Stalls: b.rst.stalls.Load(),
	}
}
