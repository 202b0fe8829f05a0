package sched

import "math"

// CacheBalance is the scorer of kvselect's own policy, cache_balance
// (CacheBalancePolicy). Its cost is an estimate of time, in prefill steps
// of the candidate worker (tokens / max_num_batched_tokens), built from
// what the selector knows of each candidate: the cached prefix, the booked
// prefill still to compute (A_p − A_c, and its attention work A_pairs),
// the booked KV blocks (A_d plus the request's new blocks), the registered
// capacity and the prefill ever routed there (R):
//
//	u    = (eff(isl) − eff(cached)) / B                  the request's own prefill
//	q    = (A_p − A_c + A_pairs/AttentionContext) / B    the prefill ahead of it
//	m    = (A_d + new) / total_kv_blocks                 KV occupancy once admitted
//	p    = (A_d + new) / min(total_kv_blocks, OccupancyTokens/bs)   the same, for pressure
//	d    = min(1, (R − min R) / (total_kv_blocks·bs))    demand routed beyond the least
//	cost = Queue · q + 2·u
//	     + Spread  · max(0, p − max(min p + Band, Floor)) memory pressure
//	     + Overflow · max(0, m − 1)                       beyond the pool
//	     + Demand · (2·bs/B) · d                          tie-break of misses
//	cost *= the preferred-taint multiplier
//
// (Floor applies with prefill tracking only; without it the threshold is
// min p + Band. The pressure pool is at least one block.)
//
// The rule: the cache decides, in time. A request stays with the worker
// holding its prefix unless another's cost, the prefill ahead of it and
// its own uncached prefill there, is lower; occupancy counts only as
// memory pressure; a request no worker holds goes to the least prefill
// ahead, then to the least demand routed. Invariants (with prefill
// tracking, candidates with a registered pool):
//
//   - A continued turn leaves its context only for time: a candidate j
//     wins against the holder h only if Queue·(q_h − q_j) + (pressure_h −
//     pressure_j) + (demand_h − demand_j) > 2·(u_j − u_h), where u_j − u_h
//     is the prefill of the tokens cached on h and not on j. Below
//     max(min p + Band, Floor) the occupancy of h adds nothing, so an
//     occupancy imbalance alone never moves a turn from a holder whose
//     booked blocks are at most Floor·min(pool, OccupancyTokens/bs)
//     (TestCacheBalanceContinuedTurnStays, TestCacheBalanceOccupancyTokens).
//   - A long prompt does not pile onto a worker whose queue outweighs its
//     saving: q counts the prefill left ahead with its attention work, so
//     a prompt whose cached part on h is worth less than Queue·q_h (over
//     2) goes where the queue is shorter, and stays with h otherwise
//     (TestCacheBalanceLongPromptQueue).
//   - A miss (no cached prefix anywhere: u equal everywhere) goes to the
//     least Queue·q (plus pressure); between candidates whose costs
//     differ by less than a cached block's worth (2·bs/B), to the least R
//     (TestCacheBalanceMiss), never at random unless R ties too.
//     The demand term is in [0, Demand·2·bs/B]: it never outweighs more
//     than Demand cached blocks, and it is 0 on the least demanded
//     candidate and without a registered pool.
//   - Costs are finite and >= 0 for valid candidates; the taint multiplier
//     scales the whole cost.
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
//     makes the policy cache-first. Queue is 0.5: the prefill ahead
//     counts half its time, so a continued turn leaves its context only
//     for a queue four times the prefill it would redo elsewhere. The
//     queue is a cost to this request alone and is waited out once; the
//     prefill a miss adds is work on the pool that every request arriving
//     while that worker is busy waits behind, and near saturation that is
//     several requests, not the one the second u stands for. Against it:
//     a request that waits is exposed to eviction of the prefix it came
//     for (an engine looks its cache up at admission, not at arrival:
//     vLLM v1's scheduler calls get_computed_blocks when it admits a
//     waiting request), and the prefill ahead also holds its requests'
//     first decode steps; the simulation says these weigh less (below).
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
//   - Occupancy as memory pressure, not as a balancer: what a fuller pool
//     costs a request's first token is the KV reads of the running
//     decodes in each step it waits and prefills, at most
//     pool·PerKVToken per step, 36 ms of a 549 ms full step for
//     Llama-3-8B on an A100 80GB (bench/sim/vllm.StepModel): 3% at half
//     a pool, against the whole history a moved turn prefills again. So
//     below Floor (half the pressure pool) occupancy costs nothing, and
//     the turns of a conversation stay with its context; above it, each
//     unit of occupancy beyond the least occupied candidate's (plus Band)
//     costs Spread steps: the booked A_d leaves out the answers' blocks
//     still to come (the host books output blocks only as it reports them), and
//     a pool that fills makes new requests wait or preempts running ones,
//     as SGLang's cache-aware router bounds its load spread with its
//     balance thresholds. The pressure counts against the pool, or
//     against OccupancyTokens (393,216: that Llama-3-8B A100 pool) when
//     the pool is larger: a running decode costs every step the KV it
//     reads, in tokens, whatever the pool's size, so in a pool four times
//     as large a fraction of it would let four times the decode work pile
//     onto a holder before the term acts. With pools of 12,288 and 24,576
//     blocks of 64 tokens the Mooncake trace's end-to-end p99 was 43.5 to
//     66.9 s with the pressure against the pool and 37.3 to 49.7 s with
//     it capped (SGLang's 43.5 to 60.8), hit rate and TTFT p99 unchanged,
//     chat and agent within their seed spread (perf/RESULTS.md).
//   - Overflow: a request that does not fit in the worker's pool waits
//     for running requests to finish (or preempts them): a wall.
//   - Demand: a request that no worker holds a prefix of (a new
//     conversation, or one whose system prompt is nowhere) costs the same
//     everywhere but for the queue, and momentary load says little about
//     where it should go: a worker whose conversations are between turns
//     looks idle. R, the prefill ever routed to the worker, is the demand
//     that comes back to it (later turns follow their context), so a miss
//     goes to the least of it, as SGLang's cache-aware router sends a
//     miss to its smallest tree. Clipped at one pool of difference (a
//     worker cannot hold more demand than its pool) and worth at most
//     Demand cached blocks, it breaks ties and nothing more: a new worker
//     (R = 0) takes the misses the queues leave it until its own queue
//     outweighs a block.
//
// Without prefill tracking (a decode pool: track_prefill_tokens off) q, u
// and R are 0 and only occupancy counts, from min p + Band: a decode
// pool's load is its decodes. A candidate without a registered
// total_kv_blocks has no occupancy or demand terms; without
// max_num_batched_tokens B is vLLM's default 8,192. Without KV events (or
// for bookings whose blocks the events cannot be matched to) A_c is 0 and
// q counts the booked prefill in full.
//
// The constants were chosen on bench/sim's simulation (perf/RESULTS.md):
// mooncake_trace_1000.jsonl and the synthetic chat and agent workloads, at
// 90% of capacity, 5 seeds each, against the peer routers' policies of
// bench/sim/peers; Floor 0.5 and 0.75 give the same chat and agent
// figures, 0.5 the lower end-to-end tail on the trace. Queue 0.5 against
// 1.25 (the value before 2026-12-02), on the trace at loads 0.80, 0.85,
// 0.90 and 0.95 (seed 1): hit rate +0.006 to +0.015, end-to-end p99
// lower at every load (39.0 against 45.9 s, 40.8 against 41.9, 41.9
// against 48.3, 50.5 against 54.7), TTFT p99 within 0.1 s at the first
// three and 0.7 s lower at 0.95. On its 12,000-request repetition (a
// p99 over 120 requests, not 10) at 0.80, 0.90 and 0.95: hit rate +0.006
// to +0.011, end-to-end p99 2.7 to 4.0 s lower, and the price of staying,
// TTFT p99 0.6 s higher at 0.80 and 0.90 (13.8 against 13.2 s, 13.9
// against 13.3), equal at 0.95. 0.1 to 0.35 raised the hit rate as much
// but TTFT p99 by up to 2.7 s; 1.0 helped neither. The chat and agent
// workloads make the same decisions at 0.5, 0.75 and 1.25, the family
// workload at 0.5 and 1.25 (their queues never outweigh a cached turn).
// Earlier forms of the rule (RESULTS, the ablations of 2026-12-01) had
// chosen 1.25 for the trace's TTFT p99 alone.
type CacheBalance struct {
	// AttentionContext is eff's context length in tokens (0: tokens, no
	// attention term).
	AttentionContext float64
	// Queue weighs the prefill left ahead (q) in steps.
	Queue float64
	// Band is the occupancy spread (a fraction of the pressure pool,
	// min(pool, OccupancyTokens/bs)) within which the cache decides alone;
	// Spread the cost in steps of a unit of it beyond that; Overflow the
	// cost of a unit of the registered pool beyond the pool.
	Band, Spread, Overflow float64
	// Floor is the occupancy (a fraction of the pressure pool) below
	// which, with prefill tracking, occupancy costs nothing.
	Floor float64
	// Demand is the demand term's largest value, in cached blocks' worth
	// (2·bs/B each): the cost of a pool's worth of prefill routed beyond
	// the least demanded candidate.
	Demand float64
	// OccupancyTokens caps the pool the memory-pressure terms (Band,
	// Floor, Spread) measure occupancy against, in KV tokens (0: no cap).
	// Overflow always counts against the registered pool.
	OccupancyTokens float64
}

// DefaultCacheBalance returns the built-in policy's constants.
func DefaultCacheBalance() CacheBalance {
	return CacheBalance{AttentionContext: 32768, Queue: 0.5, Band: 0.05, Spread: 10, Overflow: 50, Floor: 0.5, Demand: 1, OccupancyTokens: 393216}
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

// occupancy returns c's KV occupancy once the request is admitted, as a
// fraction of its pool (m, for Overflow) and of its pressure pool (p, for
// Spread: the pool, or OccupancyTokens' worth of blocks of bs tokens when
// that is less); both -1 without a registered pool.
func (cb *CacheBalance) occupancy(c *Candidate, bs float64) (m, p float64) {
	if !c.HasLoad || c.TotalKVBlocks <= 0 {
		return -1, -1
	}
	used, pool := float64(c.ActiveBlocks+c.NewBlocks), float64(c.TotalKVBlocks)
	press := pool
	if cb.OccupancyTokens > 0 && bs > 0 {
		press = min(pool, max(1, cb.OccupancyTokens/bs))
	}
	return used / pool, used / press
}

// Score writes each candidate's cost (see CacheBalance). Allocation-free.
func (cb CacheBalance) Score(ctx *SelectionContext, cands []Candidate, out []float64) {
	p, req := ctx.Params, ctx.Request
	isl := float64(req.ISLTokens)
	minOcc := math.Inf(1)
	minRouted := int64(math.MaxInt64)
	bs := float64(req.BlockSize)
	for i := range cands {
		c := &cands[i]
		if _, pm := cb.occupancy(c, bs); pm >= 0 {
			minOcc = min(minOcc, pm)
		}
		if c.HasLoad {
			minRouted = min(minRouted, c.RoutedPrefillTokens)
		}
	}
	// The occupancy beyond which memory pressure is charged.
	limit := minOcc + cb.Band
	if p.TrackPrefillTokens {
		limit = max(limit, cb.Floor)
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
			if c.HasLoad && c.TotalKVBlocks > 0 && c.RoutedPrefillTokens > minRouted {
				pool := float64(c.TotalKVBlocks) * bs
				cost += cb.Demand * 2 * bs / b * min(1, float64(c.RoutedPrefillTokens-minRouted)/pool)
			}
		}
		if m, pm := cb.occupancy(c, bs); m >= 0 {
			cost += cb.Spread*max(0, pm-limit) + cb.Overflow*max(0, m-1)
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
