package bench

import (
	"fmt"
	"time"

	"github.com/kvselect/kvselect/radix"
	"github.com/kvselect/kvselect/zmqin"
	"github.com/kvselect/kvselect/zmqin/zmqpub"
)

// KVPublisher publishes one engine rank's KV cache changes as vLLM KV
// event batches on a ZMQ PUB socket, with a replay ROUTER when configured:
// the publishing half of Engine, for engine models that keep their own
// block pool (bench/sim's). Changes accumulate until Flush publishes them
// as one batch, in the order they were made. Not safe for concurrent use.
type KVPublisher struct {
	pub   *zmqpub.Publisher
	enc   zmqin.Encoder
	bs    int
	batch zmqin.WireBatch
	// hashes and tokens back the pending events' slices; earlier
	// events keep pointing into an old array when they grow, whose
	// contents are never written again before the flush.
	hashes  []uint64
	tokens  []uint32
	lastLen int
	now     func() time.Time
	stats   KVPublisherStats
}

// KVPublisherStats are a publisher's counters.
type KVPublisherStats struct {
	Stored, Removed, Batches uint64
}

// NewKVPublisher binds the sockets of cfg's rank 0 (cfg.Ranks must be 0 or
// 1): Endpoint, ReplayEndpoint, Topic, Encoder, ReplayBuffer, HWM, Now and
// BlockSize (the token count of every stored block) are used.
func NewKVPublisher(cfg EngineConfig) (*KVPublisher, error) {
	if cfg.Ranks > 1 {
		return nil, fmt.Errorf("bench: a KV publisher is one rank, got %d", cfg.Ranks)
	}
	if cfg.CapacityBlocks == 0 {
		cfg.CapacityBlocks = 1 // not used: the caller keeps the pool
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	pub, err := zmqpub.New(zmqpub.Config{
		Endpoint: cfg.Endpoint, ReplayEndpoint: cfg.ReplayEndpoint, Topic: cfg.Topic,
		ReplayBuffer: cfg.ReplayBuffer, HWM: cfg.HWM, Encoder: cfg.Encoder,
	})
	if err != nil {
		return nil, err
	}
	p := &KVPublisher{pub: pub, enc: cfg.Encoder, bs: cfg.BlockSize, now: cfg.Now}
	if p.now == nil {
		p.now = time.Now
	}
	p.batch.HasDPRank = true
	return p, nil
}

// Stored queues a BlockStored event: blocks of the given engine hashes
// (one per block) holding tokens (BlockSize per block), chained after
// parent when hasParent. Both slices are copied.
func (p *KVPublisher) Stored(parent uint64, hasParent bool, hashes []uint64, tokens []uint32) {
	if len(tokens) != len(hashes)*p.bs {
		panic(fmt.Sprintf("BUG: bench: %d stored blocks with %d tokens at block size %d", len(hashes), len(tokens), p.bs))
	}
	h0, t0 := len(p.hashes), len(p.tokens)
	p.hashes = append(p.hashes, hashes...)
	p.tokens = append(p.tokens, tokens...)
	p.batch.Events = append(p.batch.Events, zmqin.WireEvent{
		Kind: radix.Stored, BlockHashes: p.hashes[h0:len(p.hashes):len(p.hashes)],
		ParentHash: parent, HasParent: hasParent,
		TokenIDs:  p.tokens[t0:len(p.tokens):len(p.tokens)],
		BlockSize: p.bs, Medium: "GPU", SpecKind: "full_attention",
	})
	p.stats.Stored += uint64(len(hashes))
}

// Removed queues a BlockRemoved event for the block of engine hash h.
func (p *KVPublisher) Removed(h uint64) {
	i := len(p.hashes)
	p.hashes = append(p.hashes, h)
	p.batch.Events = append(p.batch.Events, zmqin.WireEvent{Kind: radix.Removed, BlockHashes: p.hashes[i : i+1 : i+1], Medium: "GPU"})
	p.stats.Removed++
}

// Pending returns the number of queued events.
func (p *KVPublisher) Pending() int { return len(p.batch.Events) }

// Flush publishes the queued events as one batch and reports whether
// there were any.
func (p *KVPublisher) Flush() bool {
	if len(p.batch.Events) == 0 {
		return false
	}
	p.batch.Timestamp = float64(p.now().UnixNano()) / 1e9
	// The Publisher keeps the payload for replay: a fresh slice each time.
	payload := p.enc.AppendBatch(make([]byte, 0, p.lastLen), &p.batch)
	p.lastLen = len(payload)
	p.pub.PublishPayload(payload)
	clear(p.batch.Events)
	p.batch.Events = p.batch.Events[:0]
	p.hashes, p.tokens = p.hashes[:0], p.tokens[:0]
	p.stats.Batches++
	return true
}

// Stats returns the counters.
func (p *KVPublisher) Stats() KVPublisherStats { return p.stats }

// Endpoint and ReplayEndpoint return the bound addresses ("" without
// replay).
func (p *KVPublisher) Endpoint() string       { return p.pub.Endpoint() }
func (p *KVPublisher) ReplayEndpoint() string { return p.pub.ReplayEndpoint() }

// Subscribers returns the number of attached subscribers.
func (p *KVPublisher) Subscribers() int { return p.pub.Stats().Subscribers }

// Close closes the sockets.
func (p *KVPublisher) Close() error { return p.pub.Close() }
