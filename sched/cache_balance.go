package sched

import "math"

// CacheBalance is the scorer of kvselect's own policy, cache_balance
// (CacheBalancePolicy). Its cost is an estimate of time, in prefill steps
// of the candidate worker (tokens / max_num_batched_tokens), built from
// what the selector knows of each candidate: the cached prefix, the booked
// prefill still to compute (A_p − A_c, and its attention work A_pairs),
// the booked KV blocks (A_d plus the request's new blocks) and the
// registered capacity:
//
//	u    = (eff(isl) − eff(cached)) / B                  the request's own prefill
//	q    = (A_p − A_c + A_pairs/AttentionContext) / B    the prefill ahead of it
//	m    = (A_d + new) / total_kv_blocks                 KV occupancy once admitted
//	cost = Queue · q + 2·u
//	     + Spread  · max(0, m − min m − Band)             beyond the occupancy band
//	     + Overflow · max(0, m − 1)                       beyond the pool
//	cost *= the preferred-taint multiplier
//
// The terms and why:
//
//   - q + u is the request's time to first token on that worker: the
//     prefill ahead of it, then its own uncached prompt. The prefill
//     ahead is what is left of it: A_p counts a booked prompt in full
//     until its first token, and the worker's own KV events say how much
//     of it is computed (A_c, credited per booking as its blocks are
//     stored: WorkerLoad.CreditStored). Without that measure a worker 90%
//     through a 100k-token prompt and one that just took it look the
//     same, and the requests that wait behind the second set the tail.
//   - The second u is the backlog the request leaves for the requests
//     that will queue behind it (a one-step lookahead of the queue), so a
//     cached prefix is worth twice its tokens: the request's own saving
//     and the saving for the next requests on that worker. This is what
//     makes the policy cache-first. Queue is 1.25, above 1, because the
//     prefill ahead also holds the steps of the requests it belongs to
//     (their first decode steps share the budget with the new request's
//     chunks), and because a request that waits is also exposed to
//     eviction of the very prefix it came for: an engine looks its cache
//     up at admission, not at arrival (vLLM v1's scheduler calls
//     get_computed_blocks when it admits a waiting request).
//   - eff(n) = n + n²/(2·AttentionContext) counts a prompt's prefill as
//     time, not tokens: attention's work grows with the context, so a
//     long prompt's cached prefix saves more than its length (the last
//     tokens of a 100k-token prompt each cost several times the first),
//     and the booked prefill ahead is counted the same way: A_pairs is
//     the (query, key) pairs its tokens attend to, placed after each
//     booking's cached prefix, so A_pairs/AttentionContext is eff's
//     quadratic part. AttentionContext is the context length at which a
//     token's attention costs as much as its linear layers: 2·(parameters
//     per layer) / (4·query heads·head dimension), 26.6k for Llama-3-8B,
//     52k for Llama-3-70B; the default, 32k, is of that order.
//   - The occupancy term keeps the load spread bounded, as SGLang's
//     cache-aware router does with its balance thresholds: within Band of
//     the least occupied candidate the cache decides alone; beyond it each
//     unit of occupancy costs Spread steps. KV occupancy is what decode
//     load is (every decode step reads the whole context of every running
//     request, and a full pool makes new requests wait or preempts
//     running ones), so it is the load that cache affinity must not pile
//     up. A conversation's later turns carry a long cached prefix on their
//     worker (u far below the others'), so they stay together unless its
//     pool is far fuller than the others'.
//   - Overflow: a request that does not fit in the worker's pool waits
//     for running requests to finish (or preempts them): a wall.
//
// Without prefill tracking (a decode pool: track_prefill_tokens off) q and
// u are 0 and only occupancy counts. A candidate without a registered
// total_kv_blocks has no occupancy terms; without max_num_batched_tokens
// B is vLLM's default 8,192. Without KV events (or for bookings whose
// blocks the events cannot be matched to) A_c is 0 and q counts the
// booked prefill in full.
//
// The constants were chosen on bench/sim's simulation (perf/RESULTS.md):
// mooncake_trace_1000.jsonl and the synthetic chat and agent workloads, at
// 50% and 90% of capacity, 5 seeds each, and the trace's TTFT p99 paired
// over 20 seeds.
type CacheBalance struct {
	// AttentionContext is eff's context length in tokens (0: tokens, no
	// attention term).
	AttentionContext float64
	// Queue weighs the prefill left ahead (q) in steps.
	Queue float64
	// Band is the occupancy spread (a fraction of the pool) within which
	// the cache decides alone; Spread the cost in steps of a unit of
	// occupancy beyond it; Overflow the cost of a unit beyond the pool.
	Band, Spread, Overflow float64
}

// DefaultCacheBalance returns the built-in policy's constants.
func DefaultCacheBalance() CacheBalance {
	return CacheBalance{AttentionContext: 32768, Queue: 1.25, Band: 0.05, Spread: 10, Overflow: 50}
}

// defaultBatchedTokens is vLLM's default max_num_batched_tokens with
// chunked prefill, B for a worker that did not register its own.
const defaultBatchedTokens = 8192

// eff is a prompt prefix of n tokens in prefill-time units (tokens of
// linear-layer work).
func (cb *CacheBalance) eff(n float64) float64 {
	if cb.AttentionContext <= 0 {
		return n
	}
	return n + n*n/(2*cb.AttentionContext)
}

// ahead is the booked prefill left on c in prefill-time units: the tokens
// not yet computed, A_p − A_c, plus their attention work over
// AttentionContext (A_pairs/AttentionContext, eff's quadratic part).
func (cb *CacheBalance) ahead(c *Candidate) float64 {
	left := float64(c.ActivePrefillTokens - min(c.ComputedPrefillTokens, c.ActivePrefillTokens))
	if cb.AttentionContext > 0 {
		left += float64(c.PendingPrefillPairs) / cb.AttentionContext
	}
	return left
}

// occupancy is c's KV occupancy once the request is admitted, or -1
// without a registered pool.
func occupancy(c *Candidate) float64 {
	if !c.HasLoad || c.TotalKVBlocks <= 0 {
		return -1
	}
	return float64(c.ActiveBlocks+c.NewBlocks) / float64(c.TotalKVBlocks)
}

// Score writes each candidate's cost (see CacheBalance). Allocation-free.
func (cb CacheBalance) Score(ctx *SelectionContext, cands []Candidate, out []float64) {
	p, req := ctx.Params, ctx.Request
	isl := float64(req.ISLTokens)
	minOcc := math.Inf(1)
	for i := range cands {
		if m := occupancy(&cands[i]); m >= 0 {
			minOcc = min(minOcc, m)
		}
	}
	full := cb.eff(isl)
	for i := range cands {
		c := &cands[i]
		var cost float64
		if p.TrackPrefillTokens {
			b := float64(c.MaxBatchedTokens)
			if b <= 0 {
				b = defaultBatchedTokens
			}
			cached := min(float64(CachedTokens(p, req.BlockSize, c)), isl)
			u := (full - cb.eff(cached)) / b
			var q float64
			if c.HasLoad {
				q = cb.ahead(c) / b
			}
			cost = cb.Queue*q + 2*u
		}
		if m := occupancy(c); m >= 0 {
			cost += cb.Spread*max(0, m-minOcc-cb.Band) + cb.Overflow*max(0, m-1)
		}
		if t := c.TaintMultiplier; t != 0 {
			cost *= t
		}
		out[i] = cost
	}
}

var cacheBalancePolicy = &SelectionPolicy{Name: SelectionCacheBalance, Scorers: []Scorer{DefaultCacheBalance()}, Picker: DefaultPicker{}}

// CacheBalancePolicy returns kvselect's own policy, cache_balance: the
// CacheBalance scorer with DefaultCacheBalance's constants and the
// reference's picker (argmin, ties broken at random; a softmax at a
// positive router_temperature). Opt-in: the service's default stays the
// reference's policy.
func CacheBalancePolicy() *SelectionPolicy { return cacheBalancePolicy }
