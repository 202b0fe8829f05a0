package peers

import "math"

// CacheAwareConfig is the cache_aware policy's settings.
type CacheAwareConfig struct {
	// CacheThreshold is the match rate (matched over input characters)
	// above which the request follows the tree's tenant.
	CacheThreshold float64
	// BalanceAbs and BalanceRel make the pool imbalanced when
	// max_load - min_load > BalanceAbs and max_load > BalanceRel *
	// min_load (in-flight requests).
	BalanceAbs int
	BalanceRel float64
	// EvictionInterval is the period in seconds of the tree's eviction;
	// MaxTreeSize each tenant's budget in characters.
	EvictionInterval float64
	MaxTreeSize      int
	// Legacy selects the old sgl-router's rules: a miss goes to the
	// tenant with the smallest tree (SMG: the least loaded worker), and
	// the least loaded worker is the first of the minima (SMG: the
	// minimum of (load, processed requests, index)).
	Legacy bool
}

// SMGCacheAwareConfig is the SMG binary's defaults
// (lightseekorg/smg: model_gateway/src/main.rs): cache threshold 0.3,
// balance thresholds 64 and 1.5, eviction every 120 s, 2^26 characters
// per tenant.
func SMGCacheAwareConfig() CacheAwareConfig {
	return CacheAwareConfig{CacheThreshold: 0.3, BalanceAbs: 64, BalanceRel: 1.5, EvictionInterval: 120, MaxTreeSize: 1 << 26}
}

// LegacyCacheAwareConfig is the old sgl-router's defaults
// (sgl-project/sglang: sgl-router/py_src/sglang_router/router_args.py):
// the same values as SMG's, with the legacy rules.
func LegacyCacheAwareConfig() CacheAwareConfig {
	c := SMGCacheAwareConfig()
	c.Legacy = true
	return c
}

// cacheAware is the cache_aware policy of SMG (lightseekorg/smg:
// model_gateway/src/policies/cache_aware.rs, select_worker,
// select_worker_with_text, select_worker_min_load) and, with Legacy, of
// the old router (sgl-project/sglang: sgl-router/src/policies/cache_aware.rs),
// over HTTP workers (the string tree, here over tokens: see tree):
//
//  1. load is the gateway's in-flight count per worker (WorkerLoadGuard:
//     up at dispatch, down when the stream ends);
//  2. imbalanced (max-min > abs and max > rel*min): the least loaded
//     worker, the request inserted under it;
//  3. balanced: match the tree; above the cache threshold the matched
//     node's tenant, else the least loaded worker (SMG) or the smallest
//     tree (legacy); the request inserted under the choice;
//  4. every EvictionInterval seconds the tree is cut to MaxTreeSize per
//     tenant.
type cacheAware struct {
	cfg       CacheAwareConfig
	tree      *tree
	load      []int // in-flight requests per worker
	processed []int // selections per worker (SMG's tie-break)
	maxTokens int   // MaxTreeSize in tokens
	nextEvict float64
}

func newCacheAware(n int, cfg CacheAwareConfig) *cacheAware {
	return &cacheAware{
		cfg: cfg, tree: newTree(n), load: make([]int, n), processed: make([]int, n),
		maxTokens: cfg.MaxTreeSize / CharsPerToken, nextEvict: cfg.EvictionInterval,
	}
}

// minLoad is the least loaded worker: SMG's lexicographic minimum of
// (load, processed, index), the old router's first minimum.
func (p *cacheAware) minLoad() int {
	best := 0
	for i := range p.load {
		l, b := p.load[i], p.load[best]
		if l < b || (!p.cfg.Legacy && l == b && p.processed[i] < p.processed[best]) {
			best = i
		}
	}
	return best
}

func (p *cacheAware) imbalanced() bool {
	lo, hi := math.MaxInt, 0
	for _, l := range p.load {
		lo, hi = min(lo, l), max(hi, l)
	}
	return hi-lo > p.cfg.BalanceAbs && float64(hi) > float64(lo)*p.cfg.BalanceRel
}

func (p *cacheAware) Pick(now float64, r *Request) int {
	// The eviction thread wakes every interval; the tree changes only at
	// selections, so evicting at the first selection after a wake-up is
	// the same as evicting at the wake-up.
	if p.cfg.EvictionInterval > 0 && now >= p.nextEvict {
		p.tree.evict(p.maxTokens)
		p.nextEvict = (math.Floor(now/p.cfg.EvictionInterval) + 1) * p.cfg.EvictionInterval
	}
	var w int
	if p.imbalanced() {
		w = p.minLoad()
		p.tree.insert(r.Text, w)
	} else {
		w = p.tree.matchAndInsert(r.Text, func(m match) int {
			rate := 0.0
			if m.total > 0 {
				rate = float64(m.matched) / float64(m.total)
			}
			switch {
			case rate > p.cfg.CacheThreshold:
				return m.tenant
			case p.cfg.Legacy:
				return p.tree.smallest()
			}
			return p.minLoad()
		})
		if w < 0 {
			// No tenant on the matched node: SMG falls back to the
			// first healthy worker without inserting.
			w = 0
		}
	}
	p.processed[w]++
	p.load[w]++
	return w
}

func (p *cacheAware) Done(w int) { p.load[w]-- }
