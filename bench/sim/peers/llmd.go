package peers

import "math/rand/v2"

// LLMDConfig is the llm-d EPP profile's settings.
type LLMDConfig struct {
	// Weights of the queue, kv-cache-utilization and prefix-cache scorers.
	QueueWeight, KVWeight, PrefixWeight float64
	// Precise feeds the prefix scorer from the engines' KV events
	// (precise-prefix-cache-producer) instead of the routing history
	// (approx-prefix-cache-producer).
	Precise bool
	// RefreshInterval is the metrics scrape period in seconds
	// (--refresh-metrics-interval).
	RefreshInterval float64
	// MinBlockSize is the approximate producer's floor on the block size
	// it auto-tunes from the engines' cache_config_info, in its
	// estimated tokens of 4 bytes; MaxPrefixTokens caps the tokens
	// hashed.
	MinBlockSize, MaxPrefixTokens int
}

// DefaultLLMDConfig is the default profile without a config file
// (llm-d/llm-d-router: pkg/epp/config/loader/defaults.go): queue 2, KV
// utilisation 2, prefix 3 with the approximate producer (block size
// auto-tuned, at least 64 estimated tokens, 131,072 tokens matched at
// most); metrics refreshed every 50 ms (pkg/epp/server/options.go).
func DefaultLLMDConfig() LLMDConfig {
	return LLMDConfig{QueueWeight: 2, KVWeight: 2, PrefixWeight: 3, RefreshInterval: 0.05, MinBlockSize: 64, MaxPrefixTokens: 131072}
}

// PreciseLLMDConfig is the shipped precise configuration
// (llm-d/llm-d-router: deploy/config/epp-precise-prefix-cache-config.yaml):
// prefix 2 fed by KV events (token processor block size 64), KV
// utilisation 1, queue 1.
func PreciseLLMDConfig() LLMDConfig {
	c := DefaultLLMDConfig()
	c.QueueWeight, c.KVWeight, c.PrefixWeight, c.Precise = 1, 1, 2, true
	return c
}

// llmd is llm-d's endpoint picker over one scheduling profile: each
// candidate's score is the weighted sum of
//
//   - queue-scorer (pkg/epp/framework/plugins/scheduling/scorer/queuedepth):
//     (max_q - q) / (max_q - min_q) over the scraped waiting queues, 1 for
//     every candidate when they are all equal;
//   - kv-cache-utilization-scorer (…/scorer/kvcacheutilization): 1 - the
//     scraped KV usage;
//   - prefix-cache-scorer (…/scorer/prefix): matchBlocks / totalBlocks
//     from the producer;
//
// and max-score-picker (…/picker/maxscore) takes the highest, ties
// uniformly at random (it shuffles, then stable-sorts). The gauges are
// the engines' as of the last scrape (Scrape, every RefreshInterval), so
// requests routed since are invisible to them.
//
// The approximate producer (…/requestcontrol/dataproducer/approximateprefix:
// plugin.go, indexer.go) hashes the request's text in blocks (the partial
// tail included), matches them from the first until a block no pod has,
// counting for each pod the scanned blocks it has, and after the pick adds
// every hash under the chosen pod: a per-pod LRU of num_gpu_blocks
// entries, whose evictions remove the pod from the hash's set. The precise
// producer (…/dataproducer/preciseprefixcache) reads the engines' caches
// instead: the longest cached prefix of full blocks.
type llmd struct {
	cfg     LLMDConfig
	engines []Engine
	rng     *rand.Rand
	// waiting and usage are the engines' gauges at the last scrape.
	waiting []int
	usage   []float64
	// The approximate producer: bs is its block size in simulated tokens,
	// maxBlocks the cap on hashed blocks; index maps a block hash to the
	// pods holding it, pods[w] is pod w's LRU. Invariant: bit w of
	// index[h] is set iff pods[w] holds h.
	bs, maxBlocks int
	index         map[uint64]uint64
	pods          []*lru
	hashes        []uint64
	matched       []int
	score         []float64
}

func newLLMD(o Options, cfg LLMDConfig) *llmd {
	n := len(o.Engines)
	p := &llmd{
		cfg: cfg, engines: o.Engines, rng: newRand(o.Seed, 0x6c6c6d2d64),
		waiting: make([]int, n), usage: make([]float64, n),
		matched: make([]int, n), score: make([]float64, n),
	}
	if !cfg.Precise {
		// autoTune: the block size is the engines' (cache_config_info
		// block_size), raised to the floor; its tokens are 4-byte
		// estimates, converted to simulated tokens.
		est := max(o.BlockSize, cfg.MinBlockSize)
		p.bs = max(1, est*4/CharsPerToken)
		p.maxBlocks = cfg.MaxPrefixTokens / est
		p.index = make(map[uint64]uint64)
		p.pods = make([]*lru, n)
		for w := range p.pods {
			bit := uint64(1) << w
			l := newLRU(o.NumGPUBlocks) // autoTune: num_gpu_blocks
			l.onEvict = func(h, _ uint64) {
				if m := p.index[h] &^ bit; m == 0 {
					delete(p.index, h)
				} else {
					p.index[h] = m
				}
			}
			p.pods[w] = l
		}
	}
	return p
}

func (p *llmd) ScrapeInterval() float64 { return p.cfg.RefreshInterval }

func (p *llmd) Scrape(float64) {
	for w, e := range p.engines {
		p.waiting[w], p.usage[w] = e.Waiting(), e.KVUsage()
	}
}

func (p *llmd) Pick(_ float64, r *Request) int {
	n := len(p.engines)
	// Prefix scores.
	var total int
	if p.cfg.Precise {
		total = len(r.Blocks)
		for w, e := range p.engines {
			p.matched[w] = 0
			if total > 0 {
				p.matched[w] = e.CachedPrefix(r.Blocks)
			}
		}
	} else {
		p.hashes = appendChain(p.hashes[:0], 0x6c6c6d2d64, r.Text, p.bs, p.maxBlocks, true)
		total = len(p.hashes)
		clear(p.matched)
		for _, h := range p.hashes {
			m := p.index[h]
			if m == 0 {
				break
			}
			for ; m != 0; m &= m - 1 {
				p.matched[trailingZeros(m)]++
			}
		}
	}
	lo, hi := p.waiting[0], p.waiting[0]
	for _, q := range p.waiting {
		lo, hi = min(lo, q), max(hi, q)
	}
	best, ties := 0, 0
	for w := range n {
		queue := 1.0
		if hi > lo {
			queue = float64(hi-p.waiting[w]) / float64(hi-lo)
		}
		kv := clamp01(1 - p.usage[w])
		prefix := 0.0
		if total > 0 {
			prefix = clamp01(float64(p.matched[w]) / float64(total))
		}
		s := p.cfg.QueueWeight*queue + p.cfg.KVWeight*kv + p.cfg.PrefixWeight*prefix
		p.score[w] = s
		switch {
		case ties == 0 || s > p.score[best]:
			best, ties = w, 1
		case s == p.score[best]:
			ties++
			if p.rng.IntN(ties) == 0 {
				best = w
			}
		}
	}
	if !p.cfg.Precise {
		// PreRequest: every hash added under the chosen pod.
		bit := uint64(1) << best
		for _, h := range p.hashes {
			p.index[h] |= bit
			p.pods[best].put(h, 0, 0)
		}
	}
	return best
}

func (p *llmd) Done(int) {}

func clamp01(x float64) float64 { return min(max(x, 0), 1) }
