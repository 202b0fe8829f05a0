package mesh

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/kvselect/kvselect/core"
	"github.com/kvselect/kvselect/zmqin/internal/budget"
	"github.com/kvselect/kvselect/zmqin/internal/ratelog"
	"github.com/kvselect/kvselect/zmqin/zmtp"
)

// The SUB side of a Mesh: the peer set and one dial-and-receive loop per
// peer.

// ValidatePeer checks a peer endpoint with the reference's rules and texts
// (ai-dynamo/dynamo:lib/kv-router/src/services/common/zmq.rs,
// validate_endpoint): tcp://host:port (an IPv6 host in brackets), ipc://.
// inproc:// names a socket inside one process, which no kvselect peer is.
func ValidatePeer(ep string) error {
	scheme, addr, ok := strings.Cut(ep, "://")
	if !ok {
		return fmt.Errorf("invalid ZMQ endpoint `%s`: missing scheme", ep)
	}
	if addr == "" {
		return fmt.Errorf("invalid ZMQ endpoint `%s`: missing address", ep)
	}
	switch scheme {
	case "tcp":
		i := strings.LastIndexByte(addr, ':')
		if i < 0 {
			return fmt.Errorf("invalid ZMQ endpoint `%s`: missing TCP port", ep)
		}
		host, port := addr[:i], addr[i+1:]
		switch {
		case host == "":
			return fmt.Errorf("invalid ZMQ endpoint `%s`: missing TCP host", ep)
		case strings.HasPrefix(host, "[") && !strings.HasSuffix(host, "]"):
			return fmt.Errorf("invalid ZMQ endpoint `%s`: missing closing `]`", ep)
		case !strings.HasPrefix(host, "[") && strings.Contains(host, ":"):
			return fmt.Errorf("invalid ZMQ endpoint `%s`: missing TCP port", ep)
		}
		if _, err := strconv.ParseUint(port, 10, 16); err != nil {
			return fmt.Errorf("invalid ZMQ endpoint `%s`: invalid TCP port: %s", ep, rustParseIntError(port, err))
		}
		return nil
	case "ipc":
		return nil
	case "inproc":
		return fmt.Errorf("invalid ZMQ endpoint `%s`: inproc endpoints name a socket inside one process; kvselect's peers are other processes", ep)
	}
	return fmt.Errorf("invalid ZMQ endpoint `%s`: unsupported scheme `%s`", ep, scheme)
}

// rustParseIntError words a u16 parse failure as Rust's ParseIntError does.
func rustParseIntError(s string, err error) string {
	switch {
	case s == "":
		return "cannot parse integer from empty string"
	case errors.Is(err, strconv.ErrRange):
		return "number too large to fit in target type"
	}
	return "invalid digit found in string"
}

// Register adds a peer and starts dialing it; added is false when it is
// already a peer. An invalid endpoint is a bad request.
func (m *Mesh) Register(ep string) (added bool, err error) {
	if err := ValidatePeer(ep); err != nil {
		return false, &core.Error{Class: core.ErrBadRequest, Msg: err.Error()}
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, ok := m.mu.peers[ep]; ok {
		return false, nil
	}
	if m.ctx.Err() != nil {
		return false, &core.Error{Class: core.ErrNotReady, Msg: "replica peer manager is unavailable"}
	}
	if len(m.mu.peers) >= m.cfg.MaxPeers {
		return false, &core.Error{Class: core.ErrBadRequest, Msg: fmt.Sprintf("too many replica peers (limit %d)", m.cfg.MaxPeers)}
	}
	ctx, cancel := context.WithCancel(m.ctx)
	p := &meshPeer{cancel: cancel, done: make(chan struct{})}
	p.lg = ratelog.Logger{Log: m.cfg.Logger.With("peer", ep), Burst: 10, Every: 10 * time.Second}
	m.mu.peers[ep] = p
	m.cfg.Logger.Info("replica peer added", "peer", ep)
	m.wg.Add(1)
	go m.receive(ctx, ep, p)
	return true, nil
}

// Deregister stops receiving from a peer and returns once its connection
// is closed. An invalid endpoint is a bad request, as in the reference
// (which validates before it looks the peer up); an unknown one is not
// found.
func (m *Mesh) Deregister(ep string) error {
	if err := ValidatePeer(ep); err != nil {
		return &core.Error{Class: core.ErrBadRequest, Msg: err.Error()}
	}
	m.mu.Lock()
	p, ok := m.mu.peers[ep]
	delete(m.mu.peers, ep)
	m.mu.Unlock()
	if !ok {
		return &core.Error{Class: core.ErrNotFound, Msg: "peer not found"}
	}
	p.cancel()
	if c := p.conn.Load(); c != nil {
		_ = c.Close()
	}
	<-p.done
	m.cfg.Logger.Info("replica peer removed", "peer", ep)
	return nil
}

// List returns the peers, sorted.
func (m *Mesh) List() []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make([]string, 0, len(m.mu.peers))
	for ep := range m.mu.peers {
		out = append(out, ep)
	}
	slices.Sort(out)
	return out
}

// receive dials peer ep, subscribes and queues its events until ctx ends,
// redialing with backoff (go-zeromq does not reconnect; this loop is the
// reconnect of libzmq's SUB socket).
func (m *Mesh) receive(ctx context.Context, ep string, p *meshPeer) {
	defer m.wg.Done()
	defer close(p.done)
	lim := zmtp.Limits{MaxFrames: 2, MaxFrameSize: m.cfg.MaxMessage, MaxMessageSize: m.cfg.MaxMessage + 64}
	backoff := m.cfg.BackoffMin
	var frames [][]byte
	failing := false
	for ctx.Err() == nil {
		zc, err := zmtp.Dial(ctx, ep, zmtp.Sub, lim)
		if err == nil {
			err = zc.Send(append([]byte{1}, replicaTopicBytes...))
			if err == nil && !m.cfg.NoSnapshot {
				err = zc.Send(append([]byte{1}, snapshotTopicBytes...))
			}
			if err == nil && m.aff.Load() != nil {
				err = zc.Send(append([]byte{1}, affinityTopicBytes...))
			}
			if err != nil {
				_ = zc.Close()
			}
		}
		if err != nil {
			m.st.dialErrors.Add(1)
			if !failing {
				failing = true
				p.lg.LogAt(slog.LevelWarn, "replica peer cannot connect; retrying with backoff", "err", err)
			}
			select {
			case <-ctx.Done():
				return
			case <-time.After(jitter(backoff)):
			}
			backoff = min(2*backoff, m.cfg.BackoffMax)
			continue
		}
		p.conn.Store(zc)
		if ctx.Err() != nil { // Deregister raced the dial
			_ = zc.Close()
			return
		}
		m.st.connects.Add(1)
		p.live.Store(true)
		failing = false
		p.lg.LogAt(slog.LevelInfo, "replica peer connected")
		backoff = m.cfg.BackoffMin
		for {
			// handle keeps nothing of a message (DecodeEnvelope and
			// DecodeAffinity copy what they keep), so the connection
			// reads each message into the last one's bodies.
			frames, err = zc.RecvInto(frames)
			if errors.Is(err, zmtp.ErrExtraFrames) {
				m.st.received.Add(1)
				m.st.dropped[DropExtraFrames].Add(1)
				p.lg.LogAt(slog.LevelWarn, "replica message with extra frames; skipped, the connection stays up", "err", err)
				continue
			}
			if err != nil {
				m.countLimit(err)
				break
			}
			m.st.received.Add(1)
			m.handle(frames, p)
		}
		p.live.Store(false)
		p.conn.Store(nil)
		_ = zc.Close()
		m.st.disconnects.Add(1)
		if ctx.Err() == nil {
			p.lg.LogAt(slog.LevelWarn, "replica peer disconnected; redialing", "err", err)
		}
		if zmtp.LimitReason(err) >= 0 {
			// A peer that broke a limit would break it again at once:
			// redial after the backoff, not in a tight loop.
			select {
			case <-ctx.Done():
				return
			case <-time.After(jitter(backoff)):
			}
			backoff = min(2*backoff, m.cfg.BackoffMax)
		}
	}
}

// jitter spreads redials of many peers: d plus up to a quarter of d.
func jitter(d time.Duration) time.Duration {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return d + time.Duration(binary.LittleEndian.Uint64(b[:])%uint64(d/4+1))
}

// handle decodes one message of peer p and queues its event.
func (m *Mesh) handle(frames [][]byte, p *meshPeer) {
	if len(frames) != 2 {
		m.st.dropped[DropFrames].Add(1)
		return
	}
	topic := string(frames[0])
	switch topic {
	case ReplicaTopic, SnapshotTopic:
	case AffinityTopic:
		m.handleAffinity(frames[1])
		return
	default:
		m.st.dropped[DropTopic].Add(1)
		return
	}
	e := m.getIn()
	ev := &e.ev
	if err := DecodeEnvelope(frames[1], ev); err != nil {
		m.putIn(e)
		if errors.Is(err, ErrLegacyEnvelope) {
			m.st.dropped[DropLegacy].Add(1)
		} else {
			m.st.dropped[DropUndecodable].Add(1)
		}
		return
	}
	if uint64(ev.Origin) == m.id {
		m.putIn(e)
		m.st.dropped[DropOwn].Add(1)
		return
	}
	m.enqueue(e, len(frames[1]), p, topic == SnapshotTopic)
}

// enqueue queues e, decoded from a frame of frameLen bytes of peer p, for
// the drainer, or drops it (counted) when the inbound queue is full by
// count or bytes; either way e belongs to the mesh after. Its size, what
// the byte budget counts until it is applied, is the frame and the hash
// slice's capacity: a pooled slice much longer than e's hashes would
// count (and hold) memory e does not need, so e gets one of its own size
// (a hashless event, none; the long slice is left to the collector).
func (m *Mesh) enqueue(e *inEvent, frameLen int, p *meshPeer, snapshot bool) {
	if h := e.ev.SequenceHashes; cap(h) > 2*len(h)+64 {
		e.ev.SequenceHashes = slices.Clone(h)
	}
	n := int64(frameLen) + 8*int64(cap(e.ev.SequenceHashes))
	e.peer, e.snapshot, e.size = p, snapshot, n
	if budget.Reserve(&m.st.inBytes, n, int64(m.cfg.MaxQueueBytes)) {
		select {
		case m.in <- e:
			return
		default:
			m.st.inBytes.Add(-n)
		}
	}
	m.putIn(e)
	m.st.dropped[DropFull].Add(1)
}

// countLimit counts a peer connection dropped for breaking the Limits.
func (m *Mesh) countLimit(err error) {
	if r := zmtp.LimitReason(err); r >= 0 {
		m.st.limitDrops[r].Add(1)
	}
}
