package zmtp

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/kvselect/kvselect/zmqin/internal/budget"
	"github.com/kvselect/kvselect/zmqin/internal/mpsc"
)

// PubSocket is a bound ZMTP PUB socket: it accepts SUB peers, tracks each
// peer's subscriptions (ZMTP 3.0 subscription messages: one frame, 1 or 0,
// then the topic prefix) and fans messages out to the peers whose
// subscriptions match, through a bounded queue per peer. A full queue drops
// the message for that peer only (counted), as libzmq's PUB high-water
// mark does: a slow peer never blocks the sender or the other peers.
//
// Goroutines: one accept loop; per peer, a reader (its subscriptions) and a
// writer (drains its queue, batching what is queued into one flush). Close
// stops all of them and returns when they have exited.
type PubSocket struct {
	cfg    PubConfig
	ln     net.Listener
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu struct {
		sync.Mutex
		peers  map[*PubPeer]struct{}
		closed bool
	}
	dropped atomic.Uint64
	// queued is the frame bytes queued over all peers (each peer's
	// PubPeer.bytes summed).
	queued atomic.Int64
}

// PubConfig configures a PubSocket.
type PubConfig struct {
	// Endpoint is the address to bind, e.g. "tcp://*:9092" or
	// "tcp://127.0.0.1:0" (port 0 picks a free port; see Endpoint).
	Endpoint string
	// HWM is the number of messages queued per peer; 0 means 10,000.
	HWM int
	// MaxBytes bounds the frame bytes queued per peer (the frames are
	// shared between peers, but a slow peer keeps its own alive); a
	// message that would pass it is dropped as at a full HWM. 0 means
	// 64 MiB.
	MaxBytes int
	// OnSubscribe, when set, runs on the peer's reader goroutine after the
	// peer subscribes to topic (a prefix). It may queue messages for that
	// peer alone with PubPeer.Send.
	OnSubscribe func(p *PubPeer, topic string)
}

// pubLimits bound what a PUB reads from its peers: subscriptions are one
// small frame.
var pubLimits = Limits{MaxFrames: 1, MaxFrameSize: 4 << 10, MaxMessageSize: 4 << 10}

// PubPeer is one connected SUB peer of a PubSocket.
type PubPeer struct {
	zc   *Conn
	q    *mpsc.Queue[[][]byte] // bounded by HWM; frames are shared and immutable
	done chan struct{}         // closed when the peer's reader exits
	gone chan struct{}         // closed once the peer is out of PubSocket.mu.peers
	sock *PubSocket

	mu     sync.Mutex
	topics []string // subscribed prefixes, distinct, at most maxTopics; guarded by mu

	// bytes is the frame bytes in q and not yet written: counted by Send
	// before queueing, uncounted by sent as the writer writes each message
	// (at most the socket's MaxBytes).
	bytes atomic.Int64

	// Local is the socket owner's state for this peer, for OnSubscribe:
	// read and written only on the peer's reader goroutine, never by the
	// socket (a replica mesh keeps there when it last sent the peer
	// snapshots).
	Local any
}

// maxTopics bounds one peer's subscriptions: each costs a prefix
// comparison per message sent, and a peer that asks for more is broken or
// hostile (a replica subscribes to three topics at most).
const maxTopics = 64

// Send queues frames for this peer alone; false (and a drop counted) when
// its queue is full, by messages (HWM) or bytes (MaxBytes). The frames
// must not change afterwards.
func (p *PubPeer) Send(frames [][]byte) bool {
	n := frameBytes(frames)
	if budget.Reserve(&p.bytes, n, int64(p.sock.cfg.MaxBytes)) {
		p.sock.queued.Add(n) // before the writer can take it out
		if p.q.Put(frames) {
			return true
		}
		p.sock.queued.Add(-n) // before the peer's count, as in sent
		p.bytes.Add(-n)
	}
	p.sock.dropped.Add(1)
	return false
}

// sent uncounts frames once they left p's queue: the socket's gauge
// first, so that it never exceeds the peers' counts (Send counts it
// after the peer's), even while a Send reuses the room.
func (p *PubPeer) sent(frames [][]byte) {
	n := frameBytes(frames)
	p.sock.queued.Add(-n)
	p.bytes.Add(-n)
}

func frameBytes(frames [][]byte) int64 {
	var n int64
	for _, f := range frames {
		n += int64(len(f))
	}
	return n
}

func (p *PubPeer) matches(topic string) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, t := range p.topics {
		if strings.HasPrefix(topic, t) {
			return true
		}
	}
	return false
}

// ListenPub binds cfg.Endpoint and starts accepting SUB peers.
func ListenPub(cfg PubConfig) (*PubSocket, error) {
	if cfg.HWM < 0 {
		return nil, fmt.Errorf("zmqin: negative PUB HWM %d", cfg.HWM)
	}
	if cfg.HWM == 0 {
		cfg.HWM = 10000
	}
	if cfg.MaxBytes < 0 {
		return nil, fmt.Errorf("zmqin: negative PUB MaxBytes %d", cfg.MaxBytes)
	}
	if cfg.MaxBytes == 0 {
		cfg.MaxBytes = 64 << 20
	}
	z, err := ParseEndpoint(cfg.Endpoint)
	if err != nil {
		return nil, err
	}
	ln, err := net.Listen(z.Network, z.ListenAddr())
	if err != nil {
		return nil, fmt.Errorf("zmqin: bind %s: %w", cfg.Endpoint, err)
	}
	s := &PubSocket{cfg: cfg, ln: ln}
	s.ctx, s.cancel = context.WithCancel(context.Background())
	s.mu.peers = make(map[*PubPeer]struct{})
	s.wg.Add(1)
	go s.accept()
	return s, nil
}

// Endpoint returns the bound address (with the real port when the
// configured port was 0), for a peer to dial.
func (s *PubSocket) Endpoint() string { return EndpointOf(s.ln) }

// EndpointOf returns the ZMQ endpoint of a bound listener.
func EndpointOf(ln net.Listener) string {
	if ln == nil {
		return ""
	}
	a := ln.Addr()
	if a.Network() == "unix" {
		return "ipc://" + a.String()
	}
	return "tcp://" + a.String()
}

// Send queues frames for every peer subscribed to topic and returns how
// many queued it. The frames are shared: they must not change afterwards.
func (s *PubSocket) Send(topic string, frames [][]byte) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for p := range s.mu.peers {
		if p.matches(topic) && p.Send(frames) {
			n++
		}
	}
	return n
}

// Dropped is the number of messages dropped at a full peer queue.
func (s *PubSocket) Dropped() uint64 { return s.dropped.Load() }

// SubscribedTo counts the peers subscribed to a prefix of topic.
func (s *PubSocket) SubscribedTo(topic string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for p := range s.mu.peers {
		if p.matches(topic) {
			n++
		}
	}
	return n
}

// QueuedBytes is the frame bytes queued over all peers; MaxBytes the
// bound of each peer's.
func (s *PubSocket) QueuedBytes() int64 { return s.queued.Load() }
func (s *PubSocket) MaxBytes() int      { return s.cfg.MaxBytes }

// Subscribers is the number of connected peers with at least one
// subscription.
func (s *PubSocket) Subscribers() int {
	s.mu.Lock()
	peers := make([]*PubPeer, 0, len(s.mu.peers))
	for p := range s.mu.peers {
		peers = append(peers, p)
	}
	s.mu.Unlock()
	n := 0
	for _, p := range peers {
		p.mu.Lock()
		if len(p.topics) > 0 {
			n++
		}
		p.mu.Unlock()
	}
	return n
}

// DropPeers closes every peer connection, as a network fault would, and
// returns once the socket has forgotten them. Fault injection for tests.
func (s *PubSocket) DropPeers() int {
	s.mu.Lock()
	old := make([]*PubPeer, 0, len(s.mu.peers))
	for p := range s.mu.peers {
		_ = p.zc.Close()
		old = append(old, p)
	}
	s.mu.Unlock()
	for _, p := range old {
		<-p.gone
	}
	return len(old)
}

// Close stops accepting, disconnects every peer and returns when every
// goroutine of the socket has exited.
func (s *PubSocket) Close() error {
	s.mu.Lock()
	if s.mu.closed {
		s.mu.Unlock()
		return nil
	}
	s.mu.closed = true
	s.cancel()
	_ = s.ln.Close()
	for p := range s.mu.peers {
		_ = p.zc.Close()
	}
	s.mu.Unlock()
	s.wg.Wait()
	return nil
}

func (s *PubSocket) accept() {
	defer s.wg.Done()
	for {
		c, err := s.ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			continue
		}
		s.wg.Add(1)
		go s.serve(c)
	}
}

// serve handshakes with a new SUB peer, registers it and runs its writer;
// a reader goroutine applies its subscriptions. Either side's error drops
// the peer.
func (s *PubSocket) serve(c net.Conn) {
	defer s.wg.Done()
	zc, err := Open(s.ctx, c, Pub, true, pubLimits)
	if err != nil {
		return
	}
	p := &PubPeer{zc: zc, q: mpsc.New[[][]byte](s.cfg.HWM), done: make(chan struct{}), gone: make(chan struct{}), sock: s}
	s.mu.Lock()
	if s.mu.closed {
		s.mu.Unlock()
		_ = zc.Close()
		return
	}
	s.mu.peers[p] = struct{}{}
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		delete(s.mu.peers, p)
		s.mu.Unlock()
		_ = zc.Close()
		// Once the reader is gone (it may queue a snapshot) nothing
		// queues to p: uncount what it leaves behind.
		<-p.done
		for _, frames := range p.q.Take(nil) {
			p.sent(frames)
		}
		close(p.gone)
	}()

	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		defer close(p.done)
		var frames [][]byte
		for {
			var err error
			frames, err = zc.Recv(frames)
			if errors.Is(err, ErrExtraFrames) {
				continue // not a subscription: skipped, as libzmq's XPUB does
			}
			if err != nil {
				_ = zc.Close()
				return
			}
			if len(frames) != 1 || len(frames[0]) == 0 {
				continue
			}
			f := frames[0]
			topic := string(f[1:])
			p.mu.Lock()
			switch f[0] {
			case 1:
				if slices.Contains(p.topics, topic) || len(p.topics) >= maxTopics {
					p.mu.Unlock()
					continue
				}
				p.topics = append(p.topics, topic)
			case 0:
				for i, t := range p.topics {
					if t == topic {
						p.topics = append(p.topics[:i], p.topics[i+1:]...)
						break
					}
				}
			}
			p.mu.Unlock()
			if f[0] == 1 && s.cfg.OnSubscribe != nil {
				s.cfg.OnSubscribe(p, topic)
			}
		}
	}()

	// Each wake-up writes all that is queued before one flush: a burst
	// costs one write call, not one per message. A write error uncounts
	// what was taken and not written.
	var batch [][][]byte
	for {
		select {
		case <-p.done:
			return
		case <-p.q.Ready():
		}
		batch = p.q.Take(batch)
		var err error
		for i, frames := range batch {
			p.sent(frames)
			if err = zc.SendHeld(frames); err != nil {
				for _, rest := range batch[i+1:] {
					p.sent(rest)
				}
				break
			}
		}
		if err == nil && len(batch) > 0 {
			err = zc.Flush()
		}
		p.q.Release(len(batch))
		clear(batch) // let go of the frames now; Take reads the length
		if err != nil {
			return
		}
	}
}
