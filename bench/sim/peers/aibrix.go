package peers

import (
	"math"
	"math/bits"
	"math/rand/v2"
	"slices"
)

// AIBrixConfig is AIBrix's prefix-cache settings (environment variables).
type AIBrixConfig struct {
	// BlockBytes is the block of tokenizer output (the character
	// tokenizer: UTF-8 bytes); BlockNumber the table's capacity in blocks.
	BlockBytes, BlockNumber int
	// TTL is the idle time in seconds after which a block leaves the
	// table, checked every EvictionInterval seconds.
	TTL, EvictionInterval float64
	// ImbalanceAbs is the in-flight spread above which only the least
	// loaded pods are candidates; SDFactor the standard deviations above
	// the mean a matched pod's count may be.
	ImbalanceAbs int
	SDFactor     float64
}

// DefaultAIBrixConfig is AIBrix's defaults
// (vllm-project/aibrix: pkg/utils/prefixcacheindexer/hash.go,
// pkg/plugins/gateway/algorithms/prefix_cache.go): the character
// tokenizer, 4-byte blocks, 200,000 blocks, 20 minutes idle checked every
// second, imbalance at 8 running requests, 1 standard deviation.
func DefaultAIBrixConfig() AIBrixConfig {
	return AIBrixConfig{BlockBytes: 4, BlockNumber: 200000, TTL: 20 * 60, EvictionInterval: 1, ImbalanceAbs: 8, SDFactor: 1}
}

// aibrix is AIBrix's prefix-cache router (prefixCacheRouter.routeOriginal,
// pkg/plugins/gateway/algorithms/prefix_cache.go; the table is
// PrefixHashTable, pkg/utils/prefixcacheindexer/hash.go, over
// lrustore.LRUStore):
//
//  1. counts are the gateway's in-flight requests per pod; when
//     max - min > ImbalanceAbs, only the pods at the minimum are candidates;
//  2. the text's full blocks are hashed in a chain; walking them in order,
//     every candidate the block lists gets percent (i+1)*100/n, the others
//     drop out, until none is left or a block is unknown (each pod keeps
//     the percent of its longest prefix);
//  3. if any pod matched: shuffle them, stable-sort by percent descending
//     then count ascending, take the first whose count <= mean + SDFactor
//     * sd (over all pods, sample standard deviation);
//  4. otherwise, or if none qualifies: the least-request pod among all,
//     ties at random;
//  5. every block hash is written under the chosen pod (stamped now, moved
//     to the LRU's head; reads leave the order alone).
type aibrix struct {
	cfg       AIBrixConfig
	n         int
	bs        int // BlockBytes in simulated tokens
	table     prefixTable
	load      []int
	rng       *rand.Rand
	lastCheck float64
	coarseBuf []uint32
	percent   []int
	order     []int
}

func newAIBrix(n int, seed int64, cfg AIBrixConfig) *aibrix {
	p := &aibrix{
		cfg: cfg, n: n, bs: max(1, cfg.BlockBytes/CharsPerToken),
		load: make([]int, n), rng: newRand(seed, 0x6169627278), percent: make([]int, n),
	}
	if p.bs == 1 {
		p.table = newRunTable(cfg.BlockNumber)
	} else {
		p.table = &blockTable{l: newLRU(cfg.BlockNumber)}
	}
	return p
}

func (p *aibrix) Pick(now float64, r *Request) int {
	// The eviction ticker: the table changes only at selections, so the
	// check at the last tick before now is the same run late.
	if tick := math.Floor(now/p.cfg.EvictionInterval) * p.cfg.EvictionInterval; tick > p.lastCheck {
		p.table.expire(tick - p.cfg.TTL)
		p.lastCheck = tick
	}
	lo, hi := math.MaxInt, math.MinInt
	for _, c := range p.load {
		lo, hi = min(lo, c), max(hi, c)
	}
	cand := allMask(p.n)
	if hi-lo > p.cfg.ImbalanceAbs {
		cand = 0
		for w, c := range p.load {
			if c == lo {
				cand |= 1 << w
			}
		}
	}
	text := r.Text
	if p.bs > 1 {
		// Blocks of several tokens: the per-block table, whose blocks are
		// p.bs tokens (blockTable hashes one token a block).
		text = p.coarse(text)
	}
	for w := range p.percent {
		p.percent[w] = -1
	}
	var matched uint64
	nblocks := len(text)
	p.table.match(text, func(end int, pods uint64) bool {
		hit := pods & cand
		if hit == 0 {
			return false
		}
		pct := end * 100 / nblocks
		for m := hit; m != 0; m &= m - 1 {
			p.percent[bits.TrailingZeros64(m)] = pct
		}
		matched |= hit
		cand = hit
		return true
	})
	w := -1
	if matched != 0 {
		w = p.fromMatched(matched)
	}
	if w < 0 {
		w = randomMin(p.load, allMask(p.n), p.rng)
	}
	p.load[w]++
	p.table.add(text, w, now)
	return w
}

// fromMatched is getTargetPodFromMatchedPods; -1 when every matched pod
// is over the bound.
func (p *aibrix) fromMatched(matched uint64) int {
	var sum float64
	for _, c := range p.load {
		sum += float64(c)
	}
	mean := sum / float64(p.n)
	sd := 0.0
	if p.n > 1 {
		var ss float64
		for _, c := range p.load {
			ss += (float64(c) - mean) * (float64(c) - mean)
		}
		sd = math.Sqrt(ss / float64(p.n-1))
	}
	p.order = p.order[:0]
	for m := matched; m != 0; m &= m - 1 {
		p.order = append(p.order, bits.TrailingZeros64(m))
	}
	p.rng.Shuffle(len(p.order), func(i, j int) { p.order[i], p.order[j] = p.order[j], p.order[i] })
	slices.SortStableFunc(p.order, func(a, b int) int {
		if p.percent[a] != p.percent[b] {
			return p.percent[b] - p.percent[a]
		}
		return p.load[a] - p.load[b]
	})
	for _, w := range p.order {
		if float64(p.load[w]) <= mean+p.cfg.SDFactor*sd {
			return w
		}
	}
	return -1
}

func (p *aibrix) Done(w int) { p.load[w]-- }

// coarse maps text to one symbol per full block of p.bs tokens, chained,
// so that a table of one-symbol blocks keys the same prefixes.
func (p *aibrix) coarse(text []uint32) []uint32 {
	p.coarseBuf = p.coarseBuf[:0]
	h := uint64(0x61696272)
	for i := 0; i+p.bs <= len(text); i += p.bs {
		h = chainHash(h, text[i:i+p.bs])
		p.coarseBuf = append(p.coarseBuf, uint32(h))
	}
	return p.coarseBuf
}
