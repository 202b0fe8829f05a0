// Package zmqpub is the engine side of the KV event transport: a
// Publisher that publishes KV event batches the way vLLM's
// ZmqEventPublisher does (vllm-project/vllm:vllm/distributed/kv_events.py),
// for the tests, the simulated engines of package bench, the demo and
// `kvselect mocker`. The selector itself never publishes: this package is
// kept out of zmqin, the ingress, and speaks ZMTP through zmtp.Conn
// (zmqin/zmtp remains the only package that imports a ZMQ library).
//
// Goroutines of a Publisher: those of its zmtp.PubSocket (an accept loop;
// per subscriber, a reader and a writer), the replay accept loop and one
// goroutine per replay client. Close stops all of them and returns when
// they have exited.
package zmqpub

import (
	"context"
	"encoding/binary"
	"fmt"
	"net"
	"sync"
	"sync/atomic"

	"github.com/kvselect/kvselect/zmqin"
	"github.com/kvselect/kvselect/zmqin/zmtp"
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
	if _, err := zmtp.ParseEndpoint(c.Endpoint); err != nil {
		return err
	}
	if c.ReplayEndpoint != "" {
		if _, err := zmtp.ParseEndpoint(c.ReplayEndpoint); err != nil {
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
	pub      *zmtp.PubSocket
	replayLn net.Listener
	ctx      context.Context
	cancel   context.CancelFunc
	wg       sync.WaitGroup

	mu struct {
		sync.Mutex
		next   uint64 // the seq of the next batch
		ring   []ringEntry
		head   int                     // ring[head] is the oldest entry once the ring is full
		conns  map[*zmtp.Conn]struct{} // replay clients, for Close
		closed bool
	}

	replayRequests atomic.Uint64
	replayedBatch  atomic.Uint64
}

// publisherLimits bound what the replay side reads from its clients:
// replay requests (two frames) are a few bytes.
var publisherLimits = zmtp.Limits{MaxFrames: 2, MaxFrameSize: 4 << 10, MaxMessageSize: 8 << 10}

type ringEntry struct {
	seq     uint64
	payload []byte // immutable once published
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
	p.mu.conns = make(map[*zmtp.Conn]struct{})
	var err error
	if p.pub, err = zmtp.ListenPub(zmtp.PubConfig{Endpoint: cfg.Endpoint, HWM: cfg.HWM}); err != nil {
		return nil, err
	}
	if cfg.ReplayEndpoint != "" {
		if p.replayLn, err = listen(cfg.ReplayEndpoint); err != nil {
			_ = p.pub.Close()
			return nil, err
		}
		p.wg.Add(1)
		go p.acceptReplay()
	}
	return p, nil
}

func listen(ep string) (net.Listener, error) {
	z, err := zmtp.ParseEndpoint(ep)
	if err != nil {
		return nil, err
	}
	ln, err := net.Listen(z.Network, z.ListenAddr())
	if err != nil {
		return nil, fmt.Errorf("zmqpub: bind %s: %w", ep, err)
	}
	return ln, nil
}

// Endpoint returns the bound PUB address (with the real port when the
// configured port was 0), suitable for a listener to dial.
func (p *Publisher) Endpoint() string { return p.pub.Endpoint() }

// ReplayEndpoint returns the bound replay address, or "" without replay.
func (p *Publisher) ReplayEndpoint() string { return zmtp.EndpointOf(p.replayLn) }

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
	p.pub.Send(p.cfg.Topic, [][]byte{[]byte(p.cfg.Topic), s[:], payload})
	return seq
}

// Stats returns the cumulative counters.
func (p *Publisher) Stats() Stats {
	st := Stats{
		Dropped:        p.pub.Dropped(),
		Subscribers:    p.pub.Subscribers(),
		ReplayRequests: p.replayRequests.Load(),
		ReplayedBatch:  p.replayedBatch.Load(),
	}
	p.mu.Lock()
	st.Published = p.mu.next
	p.mu.Unlock()
	return st
}

// DropSubscribers closes every subscriber connection, as a network fault
// would; the subscribers' listeners reconnect, and what is published
// meanwhile is lost to them (a sequence gap). It returns once the
// Publisher has forgotten them, so that Stats().Subscribers counts only
// subscribers connected afterwards. Fault injection for tests and the
// mocker.
func (p *Publisher) DropSubscribers() int { return p.pub.DropPeers() }

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
	if p.replayLn != nil {
		_ = p.replayLn.Close()
	}
	for c := range p.mu.conns {
		_ = c.Close()
	}
	p.mu.Unlock()
	_ = p.pub.Close()
	p.wg.Wait()
	return nil
}
