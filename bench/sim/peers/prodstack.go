package peers

import (
	"math/bits"
	"math/rand/v2"
)

// ProdStackChunk is production-stack's HashTrie chunk in characters
// (chunk_size, not configurable from the CLI).
const ProdStackChunk = 128

// prodStack is vLLM production-stack's prefixaware routing
// (vllm-project/production-stack: src/vllm_router/routers/routing_logic.py,
// PrefixAwareRouter; src/vllm_router/prefix/hashtrie.py) with its default
// --prefix-min-match-length 0:
//
//  1. the text is cut into 128-character chunks, the partial last one
//     included; the trie's path gives each chunk its context;
//  2. match: from all endpoints, walk the chunks while the child exists
//     and its endpoints intersect the selection, narrowing the selection
//     to the intersection;
//  3. a match of length >= 0 always passes the minimum, so the endpoint is
//     drawn uniformly from the selection (all endpoints for a cold
//     prompt); load is never read;
//  4. the text is inserted for the endpoint; nothing is ever evicted.
//
// The trie is a map from a chunk path's chained hash to its endpoint set.
type prodStack struct {
	n      int
	chunk  int // ProdStackChunk in simulated tokens
	nodes  map[uint64]uint64
	rng    *rand.Rand
	hashes []uint64
}

func newProdStack(n int, seed int64) *prodStack {
	return &prodStack{n: n, chunk: max(1, ProdStackChunk/CharsPerToken), nodes: make(map[uint64]uint64), rng: newRand(seed, 0x70726f64)}
}

func (p *prodStack) Pick(_ float64, r *Request) int {
	p.hashes = appendChain(p.hashes[:0], 0x74726965, r.Text, p.chunk, 0, true)
	sel := allMask(p.n)
	for _, h := range p.hashes {
		m := p.nodes[h] & sel
		if m == 0 {
			break
		}
		sel = m
	}
	// random.choice over the selected endpoints.
	k := p.rng.IntN(bits.OnesCount64(sel))
	for ; k > 0; k-- {
		sel &= sel - 1
	}
	w := bits.TrailingZeros64(sel)
	bit := uint64(1) << w
	for _, h := range p.hashes {
		p.nodes[h] |= bit
	}
	return w
}

func (p *prodStack) Done(int) {}
