package sim

import (
	"cmp"
	"context"
	"fmt"
	"math/rand/v2"
	"slices"

	"github.com/kvselect/kvselect/bench"
	"github.com/kvselect/kvselect/bench/sim/vllm"
)

// simRequest is one request of the replay. reqs[i] of a workload is
// request i everywhere (engines, routers, results).
type simRequest struct {
	p *bench.Prompt
	// next is the conversation's next turn (nil: none), whose prompt
	// repeats this turn's answer; succ is its index, prev the previous
	// turn's (-1: none).
	next       *bench.Prompt
	succ, prev int
	// hashes are the engine block hashes of the request's token stream
	// (bench.StreamHashes); out its output tokens (at least 1).
	hashes []uint64
	out    int
	// traceAt is a trace request's arrival in seconds from the trace's
	// first (unscaled); think the pause before this turn when it follows
	// another (drawn once per workload).
	traceAt, think float64
	// at is the request's arrival at the current level when it has no
	// previous turn (set by arrange).
	at float64
}

// workload is the requests of a run in order: a trace's by timestamp, a
// synthetic workload's in generation order (a conversation's turns in
// turn order).
type workload struct {
	reqs  []simRequest
	trace bool
	// firsts counts the requests without a previous turn.
	firsts int
}

// newWorkload orders the prompts and links each synthetic turn to its
// conversation's next. Think times are drawn from load.Seed.
func newWorkload(prompts []bench.Prompt, load *bench.Config, cfg *Config) (*workload, error) {
	w := &workload{reqs: make([]simRequest, len(prompts))}
	order := make([]int, len(prompts))
	for i := range order {
		order[i] = i
	}
	w.trace = len(prompts) > 0 && prompts[0].TraceIDs != nil
	if w.trace {
		slices.SortStableFunc(order, func(a, b int) int { return int(prompts[a].TimestampMs - prompts[b].TimestampMs) })
	}
	rng := rand.New(rand.NewPCG(uint64(load.Seed), 0x7468696e6b))
	last := map[int]int{} // conversation -> index of its latest turn
	var t0 int64
	for k, pi := range order {
		p := &prompts[pi]
		r := &w.reqs[k]
		r.p, r.succ, r.prev, r.out = p, -1, -1, max(p.OutputTokens, 1)
		if w.trace {
			if k == 0 {
				t0 = p.TimestampMs
			}
			r.traceAt = float64(p.TimestampMs-t0) / 1000
		} else if j, ok := last[p.Conversation]; ok && p.Turn > 0 {
			r.prev = j
			w.reqs[j].succ, w.reqs[j].next = k, p
			mean := cfg.ThinkTime
			if p.ToolResult {
				mean = cfg.ToolThinkTime
			}
			r.think = mean * rng.ExpFloat64()
		}
		if !w.trace {
			last[p.Conversation] = k
		}
		if r.prev < 0 {
			w.firsts++
		}
	}
	for k := range w.reqs {
		r := &w.reqs[k]
		_, r.hashes = bench.StreamHashes(r.p, r.next, r.out, load.BlockSize)
		if need := (r.p.ISL + r.out - 1) / load.BlockSize; len(r.hashes) < need {
			return nil, fmt.Errorf("sim: request %d: %d stream blocks for %d tokens", k, len(r.hashes), r.p.ISL+r.out-1)
		}
		if blocks := (r.p.ISL + r.out + load.BlockSize - 1) / load.BlockSize; blocks > cfg.CapacityBlocks {
			return nil, fmt.Errorf("%w: request %d needs %d blocks, more than an engine's %d (--capacity-blocks)", bench.ErrConfig, k, blocks, cfg.CapacityBlocks)
		}
	}
	return w, nil
}

// traceRate is a trace's mean arrival rate in requests per second.
func (w *workload) traceRate() float64 {
	span := w.reqs[len(w.reqs)-1].traceAt
	if span <= 0 {
		return float64(len(w.reqs)) // every request at once: say 1 s
	}
	return float64(len(w.reqs)-1) / span
}

// arrange sets every first turn's arrival for level lv: a trace's
// timestamps times the level's time scale; a synthetic workload's
// conversations start as a Poisson process whose rate makes the mean
// request rate lv.ArrivalRPS (each conversation brings its turns).
func (w *workload) arrange(lv *Level, cfg *Config, seed int64) {
	if w.trace {
		for k := range w.reqs {
			w.reqs[k].at = w.reqs[k].traceAt * lv.TimeScale
		}
		return
	}
	rate := lv.ArrivalRPS * float64(w.firsts) / float64(len(w.reqs))
	rng := rand.New(rand.NewPCG(uint64(seed), 0x6172726976616c))
	t := 0.0
	for k := range w.reqs {
		if w.reqs[k].prev < 0 {
			w.reqs[k].at = t
			t += rng.ExpFloat64() / rate
		}
	}
}

// hitRateBound replays the requests in order on one engine of unbounded
// capacity: a prompt's hit is its longest prefix of full blocks (at most
// (ISL-1)/bs, the last token is always computed, as the engines do) that
// an earlier request's stream (prompt and answer) also had.
func (w *workload) hitRateBound(bs int) float64 {
	seen := make(map[uint64]struct{})
	var hit, total int
	for k := range w.reqs {
		r := &w.reqs[k]
		limit := min((r.p.ISL-1)/bs, len(r.p.Seq))
		n := 0
		for n < limit {
			if _, ok := seen[r.p.Seq[n]]; !ok {
				break
			}
			n++
		}
		hit += n
		total += len(r.p.Seq)
		for _, h := range r.hashes {
			seen[h] = struct{}{}
		}
	}
	if total == 0 {
		return 0
	}
	return float64(hit) / float64(total)
}

// measureCapacity is the cluster's capacity for this workload in requests
// per second: round-robin over fresh engines with every request queued at
// time 0 (conversation order ignored), so that each engine runs saturated
// batches; the capacity is the requests completed per second of engine
// busy time, times the number of engines. Busy time rather than the time
// the last request took: round-robin leaves the engines with unequal work
// (on mooncake_trace_1000.jsonl they were busy 94 to 215 s), and the
// slowest engine's tail would understate what the cluster sustains by a
// third. Round-robin, so that the capacity is the cluster's and the
// workload's, not a smarter policy's.
func measureCapacity(ctx context.Context, w *workload, load *bench.Config, cfg *Config) (float64, error) {
	engines, err := newEngines(load, cfg, w, false)
	if err != nil {
		return 0, err
	}
	defer closeEngines(engines)
	res, err := runSim(ctx, cfg, w, engines, &roundRobin{n: load.Workers}, true)
	if err != nil {
		return 0, err
	}
	var busy float64
	for _, e := range engines {
		busy += e.eng.Stats().BusySeconds
	}
	if busy <= 0 {
		return 0, fmt.Errorf("sim: capacity run took no time")
	}
	return float64(res.Completed) * float64(len(engines)) / busy, nil
}

// pooledBound is the capacity-aware hit-rate bound at the current
// arrangement: one engine holding blocks blocks (the cluster's pooled
// capacity) under the engines' eviction (vllm.Replay), fed every request
// alone in arrival order. A trace's order is its timestamps'; a synthetic
// workload's is the arrivals an engine that answers instantly would see
// (a first turn at its arrival, a later turn its think time after the
// previous one's arrival), since the real order depends on the policy.
// Running alone, no request pins blocks another one could evict, which
// the engines' batches do; the bound ignores that.
func (w *workload) pooledBound(bs, blocks int) float64 {
	order := make([]int, len(w.reqs))
	at := make([]float64, len(w.reqs))
	for k := range w.reqs {
		r := &w.reqs[k]
		order[k] = k
		at[k] = r.at
		if r.prev >= 0 {
			at[k] = at[r.prev] + r.think // r.prev < k: turns are in order
		}
	}
	if !w.trace {
		slices.SortStableFunc(order, func(a, b int) int { return cmp.Compare(at[a], at[b]) })
	}
	rp := vllm.NewReplay(blocks, bs)
	var hit, total int
	for _, k := range order {
		r := &w.reqs[k]
		hit += rp.Serve(r.hashes, r.p.ISL, r.out)
		total += len(r.p.Seq)
	}
	if total == 0 {
		return 0
	}
	return float64(hit) / float64(total)
}
