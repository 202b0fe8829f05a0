// Package zmqpub is the engine side of the KV event transport: a
// Publisher that publishes KV event batches the way vLLM's
// ZmqEventPublisher does (vllm-project/vllm:vllm/distributed/kv_events.py),
// for the tests, the simulated engines of package bench, the demo and
// `kvselect mocker`. The selector itself never publishes: this package is
// kept out of zmqin, the ingress, and speaks ZMTP through zmqin.Conn (zmqin
// remains the only package that imports a ZMQ library).
//
// Goroutines of a Publisher: one accept loop per bound socket; per
// subscriber, a reader (its subscriptions) and a writer (drains its
// bounded queue); per replay client, one goroutine answering its
// requests. Close stops all of them and returns when they have exited.
package zmqpub

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/kvselect/kvselect/zmqin"
)

// Config configures a Publisher: one data-parallel rank of a simulated (or
// test) engine, publishing like vLLM's ZmqEventPublisher.
type Config struct {
	// Endpoint is the PUB address to bind, e.g. "tcp://*:5557" or
	// "tcp://127.0.0.1:0" (port 0 picks a free port; see Publisher.Endpoint).
	Endpoint string
	// ReplayEndpoint is the ROUTER replay address to bind; "" disables replay.
	ReplayEndpoint string
	// Topic is frame 0 of every live message (vLLM's default is "").
	Topic string
	// ReplayBuffer is the number of recent batches kept for replay (vLLM's
	// buffer_steps). 0 means 10,000.
	ReplayBuffer int
	// HWM is the number of messages queued per subscriber; past it a
	// message is dropped for that subscriber only (which sees a sequence
	// gap), like libzmq's PUB high-water mark. 0 means 10,000.
	HWM int
	// Encoder encodes the batches given to Publish.
	Encoder zmqin.Encoder
	// LegacyReplay answers replays without the topic frame, as vLLM <= 0.25
	// and SGLang do: ["", seq, payload] and the end marker ["", ff*8, ""].
	// Otherwise replies are vLLM >= 0.26's ["", topic, seq, payload] and
	// ["", "", ff*8, ""].
	LegacyReplay bool
}

// Validate reports a config that cannot work.
func (c Config) Validate() error {
	if _, err := zmqin.ParseEndpoint(c.Endpoint); err != nil {
		return err
	}
	if c.ReplayEndpoint != "" {
		if _, err := zmqin.ParseEndpoint(c.ReplayEndpoint); err != nil {
			return err
		}
	}
	if c.ReplayBuffer < 0 || c.HWM < 0 {
		return fmt.Errorf("zmqpub: negative ReplayBuffer %d or HWM %d", c.ReplayBuffer, c.HWM)
	}
	return nil
}

// Stats are a Publisher's cumulative counters.
type Stats struct {
	Published      uint64 // batches published (sequence numbers used)
	Dropped        uint64 // per-subscriber messages dropped at the HWM
	Subscribers    int    // connected subscribers with at least one subscription
	ReplayRequests uint64 // replay requests answered
	ReplayedBatch  uint64 // batches sent in replay answers
}

// Publisher is one rank's publishing side: a PUB socket that sends
// [topic, seq (8 bytes BE), payload] with seq counting from 0 (+1 per
// batch), and optionally a ROUTER replay socket that answers a request
// ["", start_seq (BE)] with every buffered batch whose seq >= start_seq,
// oldest first, then an end marker of seq 0xff..ff and an empty payload;
// a request of any other shape gets no answer.
type Publisher struct {
	cfg      Config
	pubLn    net.Listener
	replayLn net.Listener
	ctx      context.Context
	cancel   context.CancelFunc
	wg       sync.WaitGroup

	mu struct {
		sync.Mutex
		next   uint64 // the seq of the next batch
		ring   []ringEntry
		head   int // ring[head] is the oldest entry once the ring is full
		subs   map[*subscriber]struct{}
		conns  map[*zmqin.Conn]struct{} // replay clients, for Close
		closed bool
	}

	dropped        atomic.Uint64
	replayRequests atomic.Uint64
	replayedBatch  atomic.Uint64
}

// publisherLimits bound what a Publisher reads from its peers:
// subscriptions (one frame) and replay requests (two) are a few bytes.
var publisherLimits = zmqin.Limits{MaxFrames: 2, MaxFrameSize: 4 << 10, MaxMessageSize: 8 << 10}

type ringEntry struct {
	seq     uint64
	payload []byte // immutable once published
}

// subscriber is one connected SUB peer. Its writer goroutine owns the
// connection's write side; its reader goroutine the read side.
type subscriber struct {
	zc   *zmqin.Conn
	q    chan [][]byte // bounded by HWM; frames are shared and immutable
	done chan struct{} // closed when the subscriber's reader exits
	gone chan struct{} // closed once the subscriber is out of Publisher.mu.subs

	mu     sync.Mutex
	topics []string // subscribed prefixes; guarded by mu
}

func (s *subscriber) matches(topic string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, t := range s.topics {
		if strings.HasPrefix(topic, t) {
			return true
		}
	}
	return false
}

// New binds the PUB (and replay) sockets and starts accepting.
func New(cfg Config) (*Publisher, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.ReplayBuffer == 0 {
		cfg.ReplayBuffer = 10000
	}
	if cfg.HWM == 0 {
		cfg.HWM = 10000
	}
	p := &Publisher{cfg: cfg}
	p.ctx, p.cancel = context.WithCancel(context.Background())
	p.mu.subs = make(map[*subscriber]struct{})
	p.mu.conns = make(map[*zmqin.Conn]struct{})
	var err error
	if p.pubLn, err = listen(cfg.Endpoint); err != nil {
		return nil, err
	}
	if cfg.ReplayEndpoint != "" {
		if p.replayLn, err = listen(cfg.ReplayEndpoint); err != nil {
			_ = p.pubLn.Close()
			return nil, err
		}
		p.wg.Add(1)
		go p.acceptReplay()
	}
	p.wg.Add(1)
	go p.acceptSubs()
	return p, nil
}

func listen(ep string) (net.Listener, error) {
	z, err := zmqin.ParseEndpoint(ep)
	if err != nil {
		return nil, err
	}
	ln, err := net.Listen(z.Network, z.ListenAddr())
	if err != nil {
		return nil, fmt.Errorf("zmqpub: bind %s: %w", ep, err)
	}
	return ln, nil
}

func endpointOf(ln net.Listener) string {
	if ln == nil {
		return ""
	}
	a := ln.Addr()
	if a.Network() == "unix" {
		return "ipc://" + a.String()
	}
	return "tcp://" + a.String()
}

// Endpoint returns the bound PUB address (with the real port when the
// configured port was 0), suitable for a listener to dial.
func (p *Publisher) Endpoint() string { return endpointOf(p.pubLn) }

// ReplayEndpoint returns the bound replay address, or "" without replay.
func (p *Publisher) ReplayEndpoint() string { return endpointOf(p.replayLn) }

// Publish encodes b with the configured Encoder and publishes it; it
// returns the batch's sequence number.
func (p *Publisher) Publish(b *zmqin.WireBatch) uint64 {
	return p.publish(p.cfg.Encoder.AppendBatch(nil, b), true)
}

// PublishLost encodes b and gives it the next sequence number, and keeps
// it for replay, but sends it to no subscriber: a batch lost on the way.
// Fault injection for tests.
func (p *Publisher) PublishLost(b *zmqin.WireBatch) uint64 {
	return p.publish(p.cfg.Encoder.AppendBatch(nil, b), false)
}

// PublishPayload publishes an already encoded batch payload, which the
// Publisher keeps (the caller must not modify it afterwards).
func (p *Publisher) PublishPayload(payload []byte) uint64 { return p.publish(payload, true) }

// publish assigns the next seq, buffers the batch for replay and, when
// live, queues it for every matching subscriber. live false simulates a
// batch lost on the way (tests of gap healing).
func (p *Publisher) publish(payload []byte, live bool) uint64 {
	var s [zmqin.SeqLen]byte
	p.mu.Lock()
	defer p.mu.Unlock()
	seq := p.mu.next
	p.mu.next++
	if p.mu.closed {
		return seq
	}
	e := ringEntry{seq: seq, payload: payload}
	if len(p.mu.ring) < p.cfg.ReplayBuffer {
		p.mu.ring = append(p.mu.ring, e)
	} else {
		p.mu.ring[p.mu.head] = e
		p.mu.head = (p.mu.head + 1) % len(p.mu.ring)
	}
	if !live {
		return seq
	}
	binary.BigEndian.PutUint64(s[:], seq)
	frames := [][]byte{[]byte(p.cfg.Topic), s[:], payload}
	for sub := range p.mu.subs {
		if !sub.matches(p.cfg.Topic) {
			continue
		}
		select {
		case sub.q <- frames:
		default:
			p.dropped.Add(1)
		}
	}
	return seq
}

// Stats returns the cumulative counters.
func (p *Publisher) Stats() Stats {
	st := Stats{
		Dropped:        p.dropped.Load(),
		ReplayRequests: p.replayRequests.Load(),
		ReplayedBatch:  p.replayedBatch.Load(),
	}
	p.mu.Lock()
	st.Published = p.mu.next
	subs := make([]*subscriber, 0, len(p.mu.subs))
	for s := range p.mu.subs {
		subs = append(subs, s)
	}
	p.mu.Unlock()
	for _, s := range subs {
		s.mu.Lock()
		if len(s.topics) > 0 {
			st.Subscribers++
		}
		s.mu.Unlock()
	}
	return st
}

// DropSubscribers closes every subscriber connection, as a network fault
// would; the subscribers' listeners reconnect, and what is published
// meanwhile is lost to them (a sequence gap). It returns once the
// Publisher has forgotten them, so that Stats().Subscribers counts only
// subscribers connected afterwards. Fault injection for tests and the
// mocker.
func (p *Publisher) DropSubscribers() int {
	p.mu.Lock()
	old := make([]*subscriber, 0, len(p.mu.subs))
	for s := range p.mu.subs {
		_ = s.zc.Close()
		old = append(old, s)
	}
	p.mu.Unlock()
	for _, s := range old {
		<-s.gone
	}
	return len(old)
}

// Close stops accepting, disconnects every peer and returns when every
// goroutine of the Publisher has exited.
func (p *Publisher) Close() error {
	p.mu.Lock()
	if p.mu.closed {
		p.mu.Unlock()
		return nil
	}
	p.mu.closed = true
	p.cancel()
	_ = p.pubLn.Close()
	if p.replayLn != nil {
		_ = p.replayLn.Close()
	}
	for s := range p.mu.subs {
		_ = s.zc.Close()
	}
	for c := range p.mu.conns {
		_ = c.Close()
	}
	p.mu.Unlock()
	p.wg.Wait()
	return nil
}

func (p *Publisher) acceptSubs() {
	defer p.wg.Done()
	for {
		c, err := p.pubLn.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			continue
		}
		p.wg.Add(1)
		go p.serveSub(c)
	}
}

// serveSub handshakes with a new SUB peer, registers it and runs its writer;
// a reader goroutine applies its subscriptions. Either side's error drops
// the subscriber.
func (p *Publisher) serveSub(c net.Conn) {
	defer p.wg.Done()
	zc, err := zmqin.Open(p.ctx, c, zmqin.Pub, true, publisherLimits)
	if err != nil {
		return
	}
	s := &subscriber{zc: zc, q: make(chan [][]byte, p.cfg.HWM), done: make(chan struct{}), gone: make(chan struct{})}
	p.mu.Lock()
	if p.mu.closed {
		p.mu.Unlock()
		_ = zc.Close()
		return
	}
	p.mu.subs[s] = struct{}{}
	p.mu.Unlock()
	defer func() {
		p.mu.Lock()
		delete(p.mu.subs, s)
		p.mu.Unlock()
		_ = zc.Close()
		close(s.gone)
	}()

	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		defer close(s.done)
		var frames [][]byte
		for {
			var err error
			frames, err = zc.Recv(frames)
			if err != nil {
				_ = zc.Close()
				return
			}
			// ZMTP 3.0 subscriptions: one frame, 1 or 0 then the topic.
			if len(frames) != 1 || len(frames[0]) == 0 {
				continue
			}
			f := frames[0]
			topic := string(f[1:])
			s.mu.Lock()
			switch f[0] {
			case 1:
				s.topics = append(s.topics, topic)
			case 0:
				for i, t := range s.topics {
					if t == topic {
						s.topics = append(s.topics[:i], s.topics[i+1:]...)
						break
					}
				}
			}
			s.mu.Unlock()
		}
	}()

	for {
		select {
		case <-s.done:
			return
		case frames := <-s.q:
			err := zc.SendHeld(frames)
			// Drain what is already queued before one flush: a burst
			// costs one write call, not one per message.
			for n := len(s.q); err == nil && n > 0; n-- {
				err = zc.SendHeld(<-s.q)
			}
			if err == nil {
				err = zc.Flush()
			}
			if err != nil {
				return
			}
		}
	}
}
