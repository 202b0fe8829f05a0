package peers

import (
	"fmt"
	"math/bits"
	"math/rand/v2"
)

// CharsPerToken is the number of bytes of text one token of a simulated
// prompt stands for. The peers route on text (characters or bytes); the
// simulation's prompts are token ids, so every character quantity of a
// peer's defaults is converted with this ratio (about 4 bytes per token
// for English text with a Llama-3 tokenizer).
const CharsPerToken = 4

// MaxWorkers bounds the workers a peer policy routes over: tenant and pod
// sets are bit masks.
const MaxWorkers = 64

// Engine is what a peer may read of one engine, as its router would.
type Engine interface {
	// Waiting is the engine's waiting queue now (vllm:num_requests_waiting).
	Waiting() int
	// KVUsage is the engine's KV usage now (vllm:kv_cache_usage_perc): the
	// blocks referenced by running requests over the pool; cached blocks
	// nobody references count as free, as vLLM v1's BlockPool.get_usage.
	KVUsage() float64
	// CachedPrefix is how many leading blocks of hashes the engine's
	// prefix cache holds now (what its KV events tell a subscriber).
	CachedPrefix(hashes []uint64) int
}

// Request is one request as a peer sees it. Both slices are read-only and
// valid during Pick only.
type Request struct {
	// Text is the routing text: the prompt's tokens, each standing for
	// CharsPerToken bytes.
	Text []uint32
	// Blocks are the engine's hashes of the prompt's full blocks.
	Blocks []uint64
}

// Policy is one peer's worker selection. The host calls Pick for every
// request in arrival order (now never decreases) and Done once for every
// request Pick routed, when its stream ends; from one goroutine.
type Policy interface {
	// Pick returns the worker index for r, arriving now (seconds).
	Pick(now float64, r *Request) int
	// Done reports that a request Pick sent to worker w ended.
	Done(w int)
}

// Scraper is a policy that reads engine gauges on an interval: the host
// calls Scrape at every multiple of ScrapeInterval (seconds), with the
// engines as they are at that instant, before the events of later
// instants.
type Scraper interface {
	ScrapeInterval() float64
	Scrape(now float64)
}

// Options are what every peer policy is built from.
type Options struct {
	// Engines are the workers, in index order (1 to MaxWorkers).
	Engines []Engine
	// Seed seeds the policy's random choices (each policy mixes in its
	// own constant).
	Seed int64
	// BlockSize and NumGPUBlocks are the engines' block size in tokens and
	// pool in blocks, as their /metrics (cache_config_info) report them.
	BlockSize, NumGPUBlocks int
}

// Peer policy names, in the report's order.
const (
	// SGLang is the old in-tree sgl-router cache_aware policy.
	SGLang = "sglang_cache_aware"
	// SMG is its successor's (lightseekorg/smg) cache_aware policy over
	// HTTP workers (the string tree).
	SMG = "smg_cache_aware"
	// LLMD is llm-d's EPP default profile (approximate prefix producer).
	LLMD = "llm-d"
	// LLMDPrecise is llm-d's shipped precise-prefix configuration (prefix
	// scorer fed by the engines' KV events).
	LLMDPrecise = "llm-d_precise"
	// ProductionStack is vLLM production-stack's prefixaware routing.
	ProductionStack = "prodstack_prefixaware"
	// AIBrix is AIBrix's prefix-cache routing algorithm.
	AIBrix = "aibrix_prefix_cache"
)

// Names are the peer policies New builds, in the report's order.
var Names = []string{SGLang, SMG, LLMD, LLMDPrecise, ProductionStack, AIBrix}

// New builds peer policy name over o.Engines.
func New(name string, o Options) (Policy, error) {
	if n := len(o.Engines); n < 1 || n > MaxWorkers {
		return nil, fmt.Errorf("peers: %s: %d workers (want 1 to %d)", name, n, MaxWorkers)
	}
	switch name {
	case SGLang:
		return newCacheAware(len(o.Engines), LegacyCacheAwareConfig()), nil
	case SMG:
		return newCacheAware(len(o.Engines), SMGCacheAwareConfig()), nil
	case LLMD:
		return newLLMD(o, DefaultLLMDConfig()), nil
	case LLMDPrecise:
		return newLLMD(o, PreciseLLMDConfig()), nil
	case ProductionStack:
		return newProdStack(len(o.Engines), o.Seed), nil
	case AIBrix:
		return newAIBrix(len(o.Engines), o.Seed, DefaultAIBrixConfig()), nil
	}
	return nil, fmt.Errorf("peers: unknown policy %q (want one of %v)", name, Names)
}

// newRand is a policy's generator: seed and the policy's constant.
func newRand(seed int64, stream uint64) *rand.Rand {
	return rand.New(rand.NewPCG(uint64(seed), stream))
}

// splitmix64 is a 64-bit finaliser; the peers' hash chains use it in place
// of xxhash64 (any 64-bit hash without collisions on the workload routes
// alike: the hashes are compared, never ordered).
func splitmix64(x uint64) uint64 {
	x += 0x9e3779b97f4a7c15
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9
	x = (x ^ (x >> 27)) * 0x94d049bb133111eb
	return x ^ (x >> 31)
}

// chainHash is the hash of a block of tokens following the block whose
// hash is prev: it depends on prev, the tokens and their count.
func chainHash(prev uint64, tokens []uint32) uint64 {
	h := prev
	for _, t := range tokens {
		h = splitmix64(h ^ uint64(t))
	}
	return splitmix64(h ^ uint64(len(tokens))<<40 ^ 0x626c6f636b)
}

// appendChain appends the chained hashes of text cut into blocks of bs
// tokens to dst, at most maxBlocks of them (0: no cap); with partial, a
// trailing partial block is hashed too.
func appendChain(dst []uint64, seed uint64, text []uint32, bs, maxBlocks int, partial bool) []uint64 {
	h := seed
	for i := 0; i < len(text); i += bs {
		if maxBlocks > 0 && len(dst) >= maxBlocks {
			break
		}
		end := i + bs
		if end > len(text) {
			if !partial {
				break
			}
			end = len(text)
		}
		h = chainHash(h, text[i:end])
		dst = append(dst, h)
	}
	return dst
}

// minIndex returns the index of the smallest value (the first on ties).
func minIndex(xs []int) int {
	best := 0
	for i, x := range xs {
		if x < xs[best] {
			best = i
		}
	}
	return best
}

// randomMin returns a uniformly random index among the smallest values
// of xs restricted to mask (every index when mask is all ones).
func randomMin(xs []int, mask uint64, rng *rand.Rand) int {
	best, ties := 0, 0
	for i, x := range xs {
		if mask&(1<<i) == 0 {
			continue
		}
		switch {
		case ties == 0 || x < xs[best]:
			best, ties = i, 1
		case x == xs[best]:
			// Reservoir sampling: each of the ties is kept with
			// probability 1/ties.
			ties++
			if rng.IntN(ties) == 0 {
				best = i
			}
		}
	}
	return best
}

// allMask is the mask of workers 0..n-1.
func allMask(n int) uint64 {
	if n == 64 {
		return ^uint64(0)
	}
	return 1<<n - 1
}

func trailingZeros(m uint64) int { return bits.TrailingZeros64(m) }
