package natsplane

import (
	"log/slog"
	"time"

	"github.com/kvselect/kvselect/core"
	"github.com/nats-io/nats.go"
)

// Peer liveness between kvselect replicas: every replica publishes a
// heartbeat (an envelope with its router id and no payload) on
// {scope}.kvselect-heartbeat every HeartbeatInterval, and a replica that
// hears nothing from a peer that used to beat for PeerTimeout releases
// that peer's mirrors (core.Service.ReleaseMirrors): a replica killed
// with live bookings would otherwise leave them booked on its peers until
// the expiry guard (300 s), since no free will ever come. Dynamo routers
// never beat, so their bookings are never released this way. A replica
// whose own link is down expires nobody (it cannot tell a dead peer from
// its own partition) and, once back, gives every peer a full PeerTimeout
// again; a peer released by mistake (a partition of its own) is restored
// by the snapshots both sides ask for on reconnect (Resync).

// TopicHeartbeat carries kvselect replicas' heartbeats.
const TopicHeartbeat = "kvselect-heartbeat"

// Defaults of the liveness fields of BookingsConfig.
const (
	DefaultHeartbeatInterval = time.Second
	DefaultPeerTimeout       = 10 * time.Second
)

// handleHeartbeat records a peer's beat.
func (b *Bookings) handleHeartbeat(m *nats.Msg) {
	env, err := DecodeEnvelope(m.Data)
	if err != nil || string(env.Topic) != TopicHeartbeat {
		b.rst.beatDropped.Add(1)
		return
	}
	if env.PublisherID == b.id {
		return
	}
	now := time.Now()
	b.live.Lock()
	if _, ok := b.live.seen[env.PublisherID]; ok || len(b.live.seen) < maxRequesters {
		b.live.seen[env.PublisherID] = now
	} else {
		b.rst.beatDropped.Add(1)
	}
	b.live.Unlock()
}

// beat publishes heartbeats and expires silent peers until Close.
func (b *Bookings) beat(nc *nats.Conn) {
	defer b.wg.Done()
	t := time.NewTicker(b.cfg.HeartbeatInterval)
	defer t.Stop()
	body := AppendEnvelope(nil, b.id, 0, 0, TopicHeartbeat, nil)
	_ = nc.Publish(b.beatSubject, body) // known from the start
	wasDown := false
	for {
		select {
		case <-b.stop:
			return
		case now := <-t.C:
			if !nc.IsConnected() {
				wasDown = true
				continue
			}
			_ = nc.Publish(b.beatSubject, body)
			b.expire(now, wasDown || b.graceNext.Swap(false))
			wasDown = false
		}
	}
}

// expire releases the mirrors of the peers silent for PeerTimeout; with
// grace (the link just came back) it restarts every peer's clock instead.
func (b *Bookings) expire(now time.Time, grace bool) {
	var dead []uint64
	b.live.Lock()
	for id, seen := range b.live.seen {
		switch {
		case grace:
			b.live.seen[id] = now
		case now.Sub(seen) >= b.cfg.PeerTimeout:
			dead = append(dead, id)
			delete(b.live.seen, id)
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
