package sim

import (
	"container/heap"
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"

	"github.com/kvselect/kvselect/bench"
)

// router is a policy as the simulation loop drives it. Every method is
// called from the loop's goroutine, in virtual-time order.
type router interface {
	// pick returns the worker index (0-based) for request i.
	pick(i int, r *simRequest) (int, error)
	// served tells that request i was served on worker w with hit cached
	// blocks, stored blocks published (0: nothing published).
	served(i int, r *simRequest, w, hit, stored int) error
	// prefillDone and finished report request i's lifecycle.
	prefillDone(i int) error
	finished(i int) error
	// close ends the run (the selector's leak check).
	close(res *PolicyResult) error
}

// simulatePolicy runs one policy over fresh engines.
func simulatePolicy(ctx context.Context, name, base string, load *bench.Config, cfg *Config, reqs []simRequest) (*PolicyResult, error) {
	engines := make([]*bench.Engine, load.Workers)
	defer func() {
		for _, e := range engines {
			if e != nil {
				e.Close()
			}
		}
	}()
	for i := range engines {
		ec := bench.EngineConfig{Ranks: 1, BlockSize: load.BlockSize, CapacityBlocks: cfg.CapacityBlocks, Endpoint: "tcp://127.0.0.1:0"}
		if name == PolicyKVSelect {
			ec.ReplayEndpoint = "tcp://127.0.0.1:0"
		}
		e, err := bench.NewEngine(ec)
		if err != nil {
			return nil, err
		}
		engines[i] = e
	}
	var rt router
	switch name {
	case PolicyRoundRobin:
		rt = &roundRobin{n: load.Workers}
	case PolicyRandom:
		rt = &randomPick{n: load.Workers, rng: newSimRand(load.Seed)}
	case PolicyKVSelect, PolicyApprox:
		k, err := newSelectorRouter(ctx, base, load, cfg, engines, name == PolicyApprox)
		if err != nil {
			return nil, err
		}
		rt = k
	default:
		return nil, fmt.Errorf("%w: policy %q", bench.ErrConfig, name)
	}
	return runSim(ctx, load.BlockSize, cfg, reqs, engines, rt)
}

// prefillQueue is one engine's prefill in virtual time: prefills run one
// at a time in arrival order (a FIFO server); decodes run beside them and
// never delay a prefill.
type prefillQueue struct {
	freeAt float64 // when the running prefills end (virtual seconds)
}

// admit queues a prefill of d seconds arriving at t and returns when it
// starts and ends; TTFT is end - t.
func (q *prefillQueue) admit(t, d float64) (start, end float64) {
	start = max(t, q.freeAt)
	end = start + d
	q.freeAt = end
	return start, end
}

// lifecycle event kinds, in the order they are reported at equal times.
const (
	evPrefillDone = iota
	evFinished
)

type simEvent struct {
	t    float64
	kind int
	req  int
}

// eventHeap orders events by time, kind, then request.
type eventHeap []simEvent

func (h eventHeap) Len() int { return len(h) }
func (h eventHeap) Less(i, j int) bool {
	a, b := h[i], h[j]
	if a.t != b.t {
		return a.t < b.t
	}
	if a.kind != b.kind {
		return a.kind < b.kind
	}
	return a.req < b.req
}
func (h eventHeap) Swap(i, j int) { h[i], h[j] = h[j], h[i] }
func (h *eventHeap) Push(x any)   { *h = append(*h, x.(simEvent)) }
func (h *eventHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}

// runSim is the virtual-time loop over engines of block size bs. For each
// request in arrival order:
//
//  1. report the lifecycle events due by its arrival (prefill completions
//     and finishes, in time order);
//  2. ask the router for a worker;
//  3. serve the prompt on that worker's engine (hits are its cached leading
//     blocks; the rest is stored, evicting LRU blocks, and published);
//  4. tell the router (the selector's router waits here for the batch to
//     be applied);
//  5. queue its prefill of (ISL - hit*block size) / PrefillTPS seconds on
//     the engine: TTFT = queueing + prefill; it finishes OutputTokens /
//     DecodeTPS seconds after its prefill.
//
// After the last arrival the remaining events are reported.
func runSim(ctx context.Context, bs int, cfg *Config, reqs []simRequest, engines []*bench.Engine, rt router) (*PolicyResult, error) {
	n := len(engines)
	res := &PolicyResult{
		Requests:               len(reqs),
		RequestsPerWorker:      make([]int, n),
		PrefillTokensPerWorker: make([]int64, n),
	}
	queues := make([]prefillQueue, n)
	ttft := make([]float64, 0, len(reqs))
	var events eventHeap
	report := func(until float64) error {
		for len(events) > 0 && events[0].t <= until {
			ev := heap.Pop(&events).(simEvent)
			var err error
			if ev.kind == evPrefillDone {
				err = rt.prefillDone(ev.req)
			} else {
				err = rt.finished(ev.req)
			}
			if err != nil {
				return err
			}
		}
		return nil
	}
	var tokens []uint32
	for i := range reqs {
		if i%64 == 0 {
			if err := ctx.Err(); err != nil {
				return nil, err
			}
		}
		r := &reqs[i]
		if err := report(r.arrival); err != nil {
			return nil, err
		}
		w, err := rt.pick(i, r)
		if err != nil {
			return nil, err
		}
		if w < 0 || w >= n {
			return nil, fmt.Errorf("sim: request %d routed to worker index %d of %d", i, w, n)
		}
		tokens = r.p.AppendTokens(tokens[:0], bs)
		before := engines[w].Stats().Stored
		hit := engines[w].ServeTokens(0, tokens)
		stored := int(engines[w].Stats().Stored - before)
		if err := rt.served(i, r, w, hit, stored); err != nil {
			return nil, err
		}
		uncached := max(r.p.ISL-hit*bs, 0)
		_, end := queues[w].admit(r.arrival, float64(uncached)/cfg.PrefillTPS)
		heap.Push(&events, simEvent{t: end, kind: evPrefillDone, req: i})
		heap.Push(&events, simEvent{t: end + float64(r.p.OutputTokens)/cfg.DecodeTPS, kind: evFinished, req: i})
		ttft = append(ttft, end-r.arrival)
		res.HitBlocks += int64(hit)
		res.PromptBlocks += int64(len(r.p.Local))
		res.PrefillTokens += int64(uncached)
		res.RequestsPerWorker[w]++
		res.PrefillTokensPerWorker[w] += int64(uncached)
	}
	if err := report(math.Inf(1)); err != nil {
		return nil, err
	}
	for _, e := range engines {
		res.EvictedBlocks += e.Stats().Evicted
	}
	res.finish(ttft)
	if err := rt.close(res); err != nil {
		return nil, err
	}
	return res, nil
}

// finish computes the derived figures from the counters and the TTFTs (s).
func (res *PolicyResult) finish(ttft []float64) {
	if res.PromptBlocks > 0 {
		res.HitRate = float64(res.HitBlocks) / float64(res.PromptBlocks)
	}
	slices.Sort(ttft)
	if len(ttft) > 0 {
		res.TTFTp50ms = 1000 * quantile(ttft, 0.50)
		res.TTFTp99ms = 1000 * quantile(ttft, 0.99)
		res.TTFTMaxms = 1000 * ttft[len(ttft)-1]
		var sum float64
		for _, v := range ttft {
			sum += v
		}
		res.TTFTMeanms = 1000 * sum / float64(len(ttft))
	}
	var maxReq int
	for _, c := range res.RequestsPerWorker {
		maxReq = max(maxReq, c)
	}
	if res.Requests > 0 {
		res.RequestsMaxOverMean = float64(maxReq) * float64(len(res.RequestsPerWorker)) / float64(res.Requests)
	}
	res.PrefillTokensCV = cv(res.PrefillTokensPerWorker)
}

// quantile returns the q-quantile of sorted (nearest rank).
func quantile(sorted []float64, q float64) float64 {
	i := int(math.Ceil(q*float64(len(sorted)))) - 1
	return sorted[min(max(i, 0), len(sorted)-1)]
}

// cv is the population coefficient of variation of xs (0 when the mean is 0).
func cv(xs []int64) float64 {
	if len(xs) == 0 {
		return 0
	}
	var mean float64
	for _, x := range xs {
		mean += float64(x)
	}
	mean /= float64(len(xs))
	if mean == 0 {
		return 0
	}
	var ss float64
	for _, x := range xs {
		d := float64(x) - mean
		ss += d * d
	}
	return math.Sqrt(ss/float64(len(xs))) / mean
}

// roundRobin sends request k (in arrival order) to worker k mod n.
type roundRobin struct{ n int }

func (p *roundRobin) pick(i int, _ *simRequest) (int, error)       { return i % p.n, nil }
func (p *roundRobin) served(int, *simRequest, int, int, int) error { return nil }
func (p *roundRobin) prefillDone(int) error                        { return nil }
func (p *roundRobin) finished(int) error                           { return nil }
func (p *roundRobin) close(*PolicyResult) error                    { return nil }

// newSimRand is the random policy's generator for seed.
func newSimRand(seed int64) *rand.Rand { return rand.New(rand.NewPCG(uint64(seed), 0x72616e646f6d)) }

// randomPick sends each request to a uniformly random worker (seeded).
type randomPick struct {
	n   int
	rng *rand.Rand
}

func (p *randomPick) pick(int, *simRequest) (int, error)           { return p.rng.IntN(p.n), nil }
func (p *randomPick) served(int, *simRequest, int, int, int) error { return nil }
func (p *randomPick) prefillDone(int) error                        { return nil }
func (p *randomPick) finished(int) error                           { return nil }
func (p *randomPick) close(*PolicyResult) error                    { return nil }
