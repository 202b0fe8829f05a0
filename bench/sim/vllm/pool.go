package vllm

// pool is the KV block pool of one engine, as vLLM v1's BlockPool
// (vllm-project/vllm: vllm/v1/core/block_pool.py) keeps it: every block is
// either referenced by running requests (ref > 0) or free; free blocks wait
// in one queue, least recently freed first, whether they still hold a
// cached prefix or not. Allocation takes the queue's head and, if that
// block is cached, evicts it (its hash leaves the cache and a removal is
// reported). A cache hit on a free block takes it out of the queue. So
// blocks of running requests are never evicted, and among unreferenced
// blocks the least recently used go first.
//
// Invariants: a block is in the free queue iff ref == 0; hash[b] != 0 iff b
// is cached, and then cached[hash[b]] == b.
type pool struct {
	ref  []int32
	hash []uint64
	// prev and next link the free queue; index n (one past the blocks) is
	// the queue's sentinel.
	prev, next []int32
	nfree      int
	cached     map[uint64]int32
	sink       Sink
	evicted    uint64
}

const noHash = 0

func newPool(n int, sink Sink) *pool {
	p := &pool{
		ref: make([]int32, n), hash: make([]uint64, n),
		prev: make([]int32, n+1), next: make([]int32, n+1),
		cached: make(map[uint64]int32, n), sink: sink,
	}
	s := int32(n)
	p.prev[s], p.next[s] = s, s
	for b := range int32(n) {
		p.pushBack(b)
	}
	return p
}

func (p *pool) sentinel() int32 { return int32(len(p.ref)) }

func (p *pool) pushBack(b int32) {
	s := p.sentinel()
	last := p.prev[s]
	p.next[last], p.prev[b] = b, last
	p.next[b], p.prev[s] = s, b
	p.nfree++
}

func (p *pool) unlink(b int32) {
	p.next[p.prev[b]] = p.next[b]
	p.prev[p.next[b]] = p.prev[b]
	p.nfree--
}

// free returns how many blocks an allocation can take.
func (p *pool) free() int { return p.nfree }

// lookup returns the cached block of hash h, or -1.
func (p *pool) lookup(h uint64) int32 {
	if b, ok := p.cached[h]; ok {
		return b
	}
	return -1
}

// touch takes a reference on cached block b (a prefix hit).
func (p *pool) touch(b int32) {
	if p.ref[b] == 0 {
		p.unlink(b)
	}
	p.ref[b]++
}

// alloc takes the least recently freed block, evicting its cached prefix
// if it holds one. The caller checked free() > 0.
func (p *pool) alloc() int32 {
	s := p.sentinel()
	b := p.next[s]
	if b == s {
		panic("BUG: vllm: alloc from an empty pool")
	}
	p.unlink(b)
	if h := p.hash[b]; h != noHash {
		delete(p.cached, h)
		p.hash[b] = noHash
		p.evicted++
		p.sink.Removed(h)
	}
	p.ref[b] = 1
	return b
}

// release drops one reference of b; at zero b joins the free queue's tail.
func (p *pool) release(b int32) {
	p.ref[b]--
	switch {
	case p.ref[b] == 0:
		p.pushBack(b)
	case p.ref[b] < 0:
		panic("BUG: vllm: block released more often than referenced")
	}
}

// cache registers referenced block b as holding hash h. It reports false
// when another block already holds h (two requests computed the same
// block): b then stays an uncached block, as vLLM keeps one block per hash
// in its prefix lookup.
func (p *pool) cache(b int32, h uint64) bool {
	if h == noHash {
		panic("BUG: vllm: block hash 0 is reserved")
	}
	if _, dup := p.cached[h]; dup {
		return false
	}
	p.cached[h] = b
	p.hash[b] = h
	return true
}

// cachedBlocks is the number of blocks holding a cached prefix.
func (p *pool) cachedBlocks() int { return len(p.cached) }
