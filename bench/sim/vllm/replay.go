package vllm

// Replay is one engine's KV pool fed requests one at a time, each run to
// completion before the next: the pool's prefix caching and eviction
// exactly as an Engine's (full blocks only, unreferenced blocks leave least
// recently freed first, a finished request's tail first), without
// batching, queueing or time. Package sim uses it for the capacity-aware
// hit-rate bound: one engine holding the cluster's pooled blocks.
type Replay struct {
	pool   *pool
	bs     int
	blocks []int32
}

type nopSink struct{}

func (nopSink) Stored(*Request, int, int) {}
func (nopSink) Removed(uint64)            {}

// NewReplay returns an empty pool of numBlocks blocks of bs tokens.
func NewReplay(numBlocks, bs int) *Replay {
	if numBlocks < 1 || bs < 1 {
		panic("BUG: vllm: replay pool needs blocks and a block size")
	}
	return &Replay{pool: newPool(numBlocks, nopSink{}), bs: bs}
}

// Serve runs one request alone: its longest cached prefix of full blocks
// (at most (promptTokens-1)/bs, as Engine's admission), then the blocks of
// its promptTokens+outputTokens tokens, the full ones of hashes cached,
// then all released, last first. It returns the prefix hit in blocks.
// Precondition: the request fits the pool.
func (p *Replay) Serve(hashes []uint64, promptTokens, outputTokens int) int {
	need := (promptTokens + outputTokens + p.bs - 1) / p.bs
	if need > len(p.pool.ref) {
		panic("BUG: vllm: replayed request larger than the pool")
	}
	p.blocks = p.blocks[:0]
	limit := min((promptTokens-1)/p.bs, len(hashes))
	for len(p.blocks) < limit {
		b := p.pool.lookup(hashes[len(p.blocks)])
		if b < 0 {
			break
		}
		p.pool.touch(b)
		p.blocks = append(p.blocks, b)
	}
	hit := len(p.blocks)
	for len(p.blocks) < need {
		p.blocks = append(p.blocks, p.pool.alloc())
	}
	full := min((promptTokens+outputTokens)/p.bs, len(hashes))
	for k := hit; k < full; k++ {
		p.pool.cache(p.blocks[k], hashes[k])
	}
	for i := len(p.blocks) - 1; i >= 0; i-- {
		p.pool.release(p.blocks[i])
	}
	return hit
}
