package bench

import (
	"container/list"
	"errors"
	"fmt"
	"net"
	"strconv"
	"sync"
	"time"

	"github.com/kvselect/kvselect/radix"
	"github.com/kvselect/kvselect/zmqin"
	"github.com/kvselect/kvselect/zmqin/zmqpub"
	"github.com/kvselect/kvselect/zmqin/zmtp"
)

// EngineConfig configures a simulated engine: Ranks data-parallel ranks,
// each with its own KV block pool and its own publisher.
type EngineConfig struct {
	// Ranks is the number of data-parallel ranks (one PUB each). 0 means 1.
	Ranks int
	// BlockSize is the KV block size in tokens. Required.
	BlockSize int
	// CapacityBlocks is each rank's KV pool size in blocks. Required.
	CapacityBlocks int
	// Endpoint is rank 0's PUB address; rank r binds the port plus r, as
	// vLLM offsets data-parallel ranks (offset_endpoint_port in
	// vllm-project/vllm:vllm/distributed/kv_events.py). A port of 0 gives
	// every rank its own free port (see Engine.Endpoints).
	Endpoint string
	// ReplayEndpoint is rank 0's replay ROUTER address, offset the same
	// way; "" disables replay. Its port range must not overlap Endpoint's.
	ReplayEndpoint string
	// Topic is frame 0 of every message (vLLM's default is "").
	Topic string
	// Encoder encodes the batches; the zero value is vLLM's array form.
	Encoder zmqin.Encoder
	// ReplayBuffer is the replay ring size in batches (0: 10,000).
	ReplayBuffer int
	// HWM is the per-subscriber queue of each publisher (0: 10,000).
	HWM int
	// Now is the clock for batch timestamps; nil means time.Now.
	Now func() time.Time
}

// Validate reports a config that cannot work.
func (c EngineConfig) Validate() error {
	if c.Ranks < 0 || c.BlockSize <= 0 || c.CapacityBlocks <= 0 {
		return fmt.Errorf("bench: engine needs ranks >= 0, block size > 0 and capacity > 0, got %d, %d, %d", c.Ranks, c.BlockSize, c.CapacityBlocks)
	}
	if _, _, err := offsetEndpoint(c.Endpoint, 0); err != nil {
		return err
	}
	if c.ReplayEndpoint != "" {
		if _, _, err := offsetEndpoint(c.ReplayEndpoint, 0); err != nil {
			return err
		}
	}
	return nil
}

// offsetEndpoint returns ep with rank added to its tcp port (port 0 stays
// 0), as vLLM's offset_endpoint_port does; other schemes get a _dp<rank>
// suffix for rank > 0.
func offsetEndpoint(ep string, rank int) (string, bool, error) {
	if _, err := zmtp.ParseEndpoint(ep); err != nil {
		return "", false, err
	}
	rest, ok := cutPrefix(ep, "tcp://")
	if !ok {
		if rank == 0 {
			return ep, false, nil
		}
		return fmt.Sprintf("%s_dp%d", ep, rank), false, nil
	}
	host, port, err := net.SplitHostPort(rest)
	if err != nil {
		return "", false, err
	}
	p, err := strconv.Atoi(port)
	if err != nil || p < 0 || p+rank > 65535 {
		return "", false, fmt.Errorf("bench: bad port in %q", ep)
	}
	if p == 0 {
		return ep, true, nil
	}
	return "tcp://" + net.JoinHostPort(host, strconv.Itoa(p+rank)), false, nil
}

func cutPrefix(s, p string) (string, bool) {
	if len(s) >= len(p) && s[:len(p)] == p {
		return s[len(p):], true
	}
	return s, false
}

// EngineStats are an engine's cumulative counters over all ranks.
type EngineStats struct {
	Prompts   uint64 // prompts served
	HitBlocks uint64 // prompt blocks found in the pool
	Stored    uint64 // blocks stored (BlockStored)
	Evicted   uint64 // blocks evicted (BlockRemoved)
	Batches   uint64 // batches published
}

// Engine is a simulated inference engine: per data-parallel rank, a KV
// block pool of fixed capacity with LRU eviction, and a zmqpub.Publisher
// that publishes what the pool does as vLLM would (BlockStored for newly
// cached blocks, one BlockRemoved per evicted block, AllBlocksCleared on
// reset), one batch per served prompt. Safe for concurrent use; each rank
// serialises its own prompts.
type Engine struct {
	cfg   EngineConfig
	ranks []*rankPool
}

// rankPool is one rank's block pool. mu guards everything below it and is
// held while publishing, so that seqs follow the pool's history.
type rankPool struct {
	pub *zmqpub.Publisher
	mu  sync.Mutex
	// blocks maps an engine block hash to its element in lru, whose
	// Value is the hash. Invariant: len(blocks) == lru.Len() <= capacity.
	blocks map[uint64]*list.Element
	// lru orders cached blocks from most (front) to least recently used.
	lru     *list.List
	stats   EngineStats
	rank    uint32
	batch   zmqin.WireBatch // scratch, reused under mu
	lastLen int             // size of the last payload, to size the next
}

// NewEngine binds every rank's sockets.
func NewEngine(cfg EngineConfig) (*Engine, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.Ranks == 0 {
		cfg.Ranks = 1
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	e := &Engine{cfg: cfg}
	for r := range cfg.Ranks {
		ep, _, err := offsetEndpoint(cfg.Endpoint, r)
		if err != nil {
			return nil, errors.Join(err, e.Close())
		}
		rep := ""
		if cfg.ReplayEndpoint != "" {
			if rep, _, err = offsetEndpoint(cfg.ReplayEndpoint, r); err != nil {
				return nil, errors.Join(err, e.Close())
			}
		}
		pub, err := zmqpub.New(zmqpub.Config{
			Endpoint: ep, ReplayEndpoint: rep, Topic: cfg.Topic,
			ReplayBuffer: cfg.ReplayBuffer, HWM: cfg.HWM, Encoder: cfg.Encoder,
		})
		if err != nil {
			return nil, errors.Join(err, e.Close())
		}
		e.ranks = append(e.ranks, &rankPool{pub: pub, rank: uint32(r), blocks: make(map[uint64]*list.Element), lru: list.New()})
	}
	return e, nil
}

// Ranks returns the number of data-parallel ranks.
func (e *Engine) Ranks() int { return len(e.ranks) }

// Endpoints returns each rank's bound PUB address, by rank.
func (e *Engine) Endpoints() []string {
	out := make([]string, len(e.ranks))
	for i, r := range e.ranks {
		out[i] = r.pub.Endpoint()
	}
	return out
}

// ReplayEndpoints returns each rank's bound replay address ("" without).
func (e *Engine) ReplayEndpoints() []string {
	out := make([]string, len(e.ranks))
	for i, r := range e.ranks {
		out[i] = r.pub.ReplayEndpoint()
	}
	return out
}

// DropSubscribers cuts rank r's subscriber connections (fault injection:
// what the rank publishes until they reconnect is lost to them).
func (e *Engine) DropSubscribers(r int) int { return e.ranks[r].pub.DropSubscribers() }

// Subscribers returns the number of subscribers attached to rank r.
func (e *Engine) Subscribers(r int) int { return e.ranks[r].pub.Stats().Subscribers }

// ChainHashes returns the engine block hashes of a prompt's full blocks
// given their local hashes: an XXH3 chain, so a block's hash depends on its
// whole prefix, as vLLM's does. The engine hash is opaque to the selector.
func ChainHashes(dst []uint64, local []uint64) []uint64 {
	return radix.SequenceHashes(dst, local)
}

// TokensForHashIDs returns a token sequence whose i-th block of blockSize
// tokens is determined by ids[i] alone: the way to turn a Mooncake trace's
// hash_ids into prompts that both the engine and the selector can hash.
func TokensForHashIDs(ids []uint64, blockSize int) []uint32 {
	out := make([]uint32, 0, len(ids)*blockSize)
	for _, id := range ids {
		for j := range blockSize {
			out = append(out, uint32(id*uint64(blockSize)+uint64(j)))
		}
	}
	return out
}

// ServeTokens serves a prompt on rank r: its full blocks already in the
// pool are hits (the leading run that is cached), the rest are stored,
// evicting least recently used blocks if the pool is full, and one batch
// describing the change is published. It returns the number of leading
// blocks that were cached. A prompt longer than the pool stores only as
// many blocks as fit.
func (e *Engine) ServeTokens(r int, tokens []uint32) int {
	bs := e.cfg.BlockSize
	local := radix.LocalHashes(nil, tokens, bs, radix.HashSeed("", ""))
	hashes := ChainHashes(nil, local)
	return e.ranks[r].serve(e, hashes, tokens[:len(local)*bs])
}

// Cached returns how many leading full blocks of tokens rank r holds.
func (e *Engine) Cached(r int, tokens []uint32) int {
	local := radix.LocalHashes(nil, tokens, e.cfg.BlockSize, radix.HashSeed("", ""))
	hashes := ChainHashes(nil, local)
	p := e.ranks[r]
	p.mu.Lock()
	defer p.mu.Unlock()
	n := 0
	for n < len(hashes) {
		if _, ok := p.blocks[hashes[n]]; !ok {
			break
		}
		n++
	}
	return n
}

// Clear drops rank r's whole pool and publishes AllBlocksCleared.
func (e *Engine) Clear(r int) {
	p := e.ranks[r]
	p.mu.Lock()
	defer p.mu.Unlock()
	clear(p.blocks)
	p.lru.Init()
	p.batch.Events = append(p.batch.Events[:0], zmqin.WireEvent{Kind: radix.Cleared})
	p.publishLocked(e)
}

// Stats sums the ranks' counters.
func (e *Engine) Stats() EngineStats {
	var s EngineStats
	for _, p := range e.ranks {
		p.mu.Lock()
		s.Prompts += p.stats.Prompts
		s.HitBlocks += p.stats.HitBlocks
		s.Stored += p.stats.Stored
		s.Evicted += p.stats.Evicted
		s.Batches += p.stats.Batches
		p.mu.Unlock()
	}
	return s
}

// Close closes every rank's publisher.
func (e *Engine) Close() error {
	var errs []error
	for _, p := range e.ranks {
		errs = append(errs, p.pub.Close())
	}
	return errors.Join(errs...)
}

func (p *rankPool) serve(e *Engine, hashes []uint64, tokens []uint32) int {
	bs := e.cfg.BlockSize
	capacity := e.cfg.CapacityBlocks
	p.mu.Lock()
	defer p.mu.Unlock()
	p.stats.Prompts++
	hit := 0
	for hit < len(hashes) {
		if _, ok := p.blocks[hashes[hit]]; !ok {
			break
		}
		hit++
	}
	p.stats.HitBlocks += uint64(hit)
	n := min(len(hashes), capacity)
	// Touch the cached prefix, last block first, so that a prefix's
	// parents stay more recently used than its tails (vLLM frees a
	// request's blocks tail first, so tails are evicted first).
	for i := hit - 1; i >= 0; i-- {
		p.lru.MoveToFront(p.blocks[hashes[i]])
	}
	p.batch.Events = p.batch.Events[:0]
	if hit < n {
		// A block past the cached run that is still cached (its parent
		// was evicted before it) is stored again: forget it first.
		for _, h := range hashes[hit:n] {
			if el, ok := p.blocks[h]; ok {
				p.lru.Remove(el)
				delete(p.blocks, h)
			}
		}
		// Evict what the new blocks need, least recently used first,
		// never a block of this prompt's cached prefix (just touched,
		// and hit <= capacity).
		for need := p.lru.Len() + (n - hit) - capacity; need > 0; need-- {
			el := p.lru.Back()
			h := el.Value.(uint64)
			p.lru.Remove(el)
			delete(p.blocks, h)
			p.stats.Evicted++
			p.batch.Events = append(p.batch.Events, zmqin.WireEvent{Kind: radix.Removed, BlockHashes: []uint64{h}, Medium: "GPU"})
		}
		ev := zmqin.WireEvent{
			Kind: radix.Stored, BlockHashes: hashes[hit:n], TokenIDs: tokens[hit*bs : n*bs],
			BlockSize: bs, Medium: "GPU", SpecKind: "full_attention",
		}
		if hit > 0 {
			ev.ParentHash, ev.HasParent = hashes[hit-1], true
		}
		p.batch.Events = append(p.batch.Events, ev)
		for i := n - 1; i >= hit; i-- {
			p.blocks[hashes[i]] = p.lru.PushFront(hashes[i])
		}
		// Keep the prefix order: the stored tail goes behind the
		// touched prefix.
		for i := hit - 1; i >= 0; i-- {
			p.lru.MoveToFront(p.blocks[hashes[i]])
		}
		p.stats.Stored += uint64(n - hit)
		p.publishLocked(e)
	}
	return hit
}

func (p *rankPool) publishLocked(e *Engine) {
	now := e.cfg.Now()
	p.batch.Timestamp = float64(now.UnixNano()) / 1e9
	p.batch.HasDPRank = true
	p.batch.DPRank = p.rank
	// The Publisher keeps the payload for replay: encode into a fresh
	// slice sized like the last one.
	payload := e.cfg.Encoder.AppendBatch(make([]byte, 0, p.lastLen), &p.batch)
	p.lastLen = len(payload)
	p.pub.PublishPayload(payload)
	p.stats.Batches++
}
