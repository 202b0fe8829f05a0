package natsplane

import (
	"log/slog"
	"time"

	"github.com/kvselect/kvselect/core"
	"github.com/nats-io/nats.go"
)

// Peer liveness between kvselect replicas: every replica publishes a
// heartbeat, an empty booking batch, on {scope}.kvselect-bookings every
// HeartbeatInterval, and a replica that hears nothing from a peer that
// used to beat for PeerTimeout releases that peer's mirrors
// (core.Service.ReleaseMirrors): a replica killed with live bookings
// would otherwise leave them booked on its peers until the expiry guard
// (300 s), since no free will ever come. Dynamo routers never beat and
// never read the subject, so their bookings are never released this way
// and they see nothing of it.
//
// The beats ride the bookings' subject, in their stream: one
// subscription, and every batch and snapshot chunk says whether its
// sender beats (rule 1).
//
// The rules:
//
//  1. A peer is heard by every batch it sends, beats included, and by
//     its snapshot chunks; each says whether the peer beats (flagBeats,
//     batches.go). A peer that does not beat (its liveness off) is never
//     expired. So a replica that holds any of a beating peer's bookings
//     heard it in the message that carried them, and expires it once
//     silent, even if the peer dies before its first beat after this
//     replica joined. (Before, only a beat registered a peer: in the
//     three-process test the client-only replica, started last, had
//     received both peers' bookings within its first second but only one
//     peer's beat, and kept the mirror of the other, killed before its
//     next beat.)
//  2. A replica whose own link is down expires nobody (it cannot tell a
//     dead peer from its own partition) and, once back, gives every peer
//     a full PeerTimeout again.
//  3. So does a replica whose beat tick comes overdue, more than two
//     intervals and half the peer timeout after the one before: it was
//     stalled (CPU starvation, a pause), and its peers' beats may be
//     waiting unread in its buffers (Stalls). A shorter stall cannot
//     make a beating peer look silent for the whole timeout.
//  4. A peer released here and heard again was not dead: its beats were
//     lost (between NATS servers whose route went down while both
//     clients stayed connected, so neither side reconnects and asks for
//     snapshots) or this replica was stalled past rule 3. It is asked for
//     its snapshot (PeersRevived), again at most every revivalRetry while
//     it beats (revivalTries times), until one of its snapshots came in
//     whole, so its live bookings are mirrored again (they would
//     otherwise stay missing
//     here until they end). A partition of a replica's own link is
//     handled by the snapshots both sides ask for on reconnect (Resync).

// Defaults of the liveness fields of BookingsConfig.
const (
	DefaultHeartbeatInterval = time.Second
	DefaultPeerTimeout       = 10 * time.Second
	// revivalRetry is how often a revived peer is asked again for its
	// snapshot while none came in whole (the first request may leave
	// before the peer's interest crossed a route just back).
	revivalRetry = 2 * time.Second
	// revivalTries bounds the snapshot requests of one revival.
	revivalTries = 5
)

// revival is a released peer's: when it was last asked for its snapshot
// since heard again, and how often.
type revival struct {
	asked time.Time
	tries int
}

// heard records that peer id, which beats or not, is alive (rule 1) and,
// with revive, asks a revived peer for its snapshot (rule 4; a snapshot
// chunk, which is the answer, passes false).
func (b *Bookings) heard(id uint64, beats, revive bool) {
	if b.cfg.PeerTimeout <= 0 {
		return
	}
	now := time.Now()
	b.live.Lock()
	_, known := b.live.seen[id]
	first := false
	switch {
	case known:
		b.live.seen[id] = now
	case !beats:
		b.live.Unlock()
		return
	case len(b.live.seen) < maxRequesters:
		b.live.seen[id], first = now, true
	default:
		b.rst.beatDropped.Add(1)
	}
	rv, revived := b.live.released[id]
	ask := revive && revived && now.Sub(rv.asked) >= revivalRetry
	if ask {
		rv.asked, rv.tries = now, rv.tries+1
		if rv.tries > revivalTries {
			// It never answers (its snapshots off): its bookings come
			// back as it makes them.
			delete(b.live.released, id)
			ask = false
		} else {
			b.live.released[id] = rv
		}
	}
	b.live.Unlock()
	if first {
		b.cfg.Logger.Info("bookings: a kvselect peer beats; it is taken for dead once silent for the peer timeout", "router_id", id, "peer_timeout", b.cfg.PeerTimeout.String())
	}
	if ask {
		b.rst.peersRevived.Add(1)
		b.in.Lock()
		b.in.lg.LogAt(slog.LevelWarn, "bookings: a kvselect peer taken for dead is heard again; asking for its snapshot", "router_id", id)
		b.in.Unlock()
		b.kick()
	}
}

// restored ends peer id's revival: a snapshot of it came in whole.
func (b *Bookings) restored(id uint64) {
	b.live.Lock()
	delete(b.live.released, id)
	b.live.Unlock()
}

// expirer expires silent peers, every HeartbeatInterval, until Close
// (the publisher sends the beats, batches.go).
func (b *Bookings) expirer(nc *nats.Conn) {
	defer b.wg.Done()
	t := time.NewTicker(b.cfg.HeartbeatInterval)
	defer t.Stop()
	wasDown, last := false, time.Now()
	for {
		select {
		case <-b.stop:
			return
		case <-t.C:
			if !nc.IsConnected() {
				wasDown = true
				continue
			}
			now := time.Now()
			b.tick(now, last, wasDown)
			wasDown, last = false, now
		}
	}
}

// tick expires the peers silent for PeerTimeout at now, the previous
// tick having come at last; with grace (rules 2 and 3: the link just came
// back, or this tick is overdue) it restarts every peer's clock instead.
// It runs on the expirer goroutine (tests call it directly).
func (b *Bookings) tick(now, last time.Time, wasDown bool) {
	grace := wasDown || b.graceNext.Swap(false)
	if now.Sub(last) > max(2*b.cfg.HeartbeatInterval, b.cfg.PeerTimeout/2) {
		b.rst.stalls.Add(1)
		grace = true
	}
	var dead []uint64
	b.live.Lock()
	for id, seen := range b.live.seen {
		switch {
		case grace:
			b.live.seen[id] = now
		case now.Sub(seen) >= b.cfg.PeerTimeout:
			dead = append(dead, id)
			delete(b.live.seen, id)
			if len(b.live.released) >= maxRequesters {
				clear(b.live.released)
			}
			b.live.released[id] = revival{} // asked for its snapshot when heard again
		}
	}
	b.live.Unlock()
	if len(dead) == 0 {
		return
	}
	b.in.Lock()
	app := b.in.app
	for _, id := range dead {
		n := app.ReleaseMirrors(core.Origin(id), now, func(string) bool { return false })
		b.rst.peersExpired.Add(1)
		b.rst.mirrorsExpired.Add(uint64(n))
		b.in.lg.LogAt(slog.LevelWarn, "bookings: a kvselect peer went silent; its mirrored bookings released", "router_id", id, "released", n, "silent_for", b.cfg.PeerTimeout.String())
	}
	b.in.Unlock()
}
