package sim

import (
	"container/heap"
	"context"
	"fmt"
	"math"
	"math/rand/v2"

	"github.com/kvselect/kvselect/bench"
	"github.com/kvselect/kvselect/bench/sim/vllm"
)

// router is a policy as the simulation loop drives it. Every method is
// called from the loop's goroutine, in virtual-time order.
type router interface {
	// pick returns the worker index (0-based) for request i, arriving
	// now. The engines are as they are at that instant.
	pick(now float64, i int, r *simRequest) (int, error)
	// prefillDone and finished report request i's first token and end.
	prefillDone(i int) error
	finished(i int) error
	// close ends the run (the selector's leak check) and fills res.
	close(res *PolicyResult) error
}

// simulatePolicy runs one policy over fresh engines at the workload's
// current arrangement.
func simulatePolicy(ctx context.Context, name, base string, load *bench.Config, cfg *Config, w *workload) (*PolicyResult, error) {
	engines, err := newEngines(load, cfg, w, name == PolicyKVSelect || name == PolicyCacheBalance)
	if err != nil {
		return nil, err
	}
	defer closeEngines(engines)
	var rt router
	switch name {
	case PolicyRoundRobin:
		rt = &roundRobin{n: load.Workers}
	case PolicyRandom:
		rt = &randomPick{n: load.Workers, rng: newSimRand(load.Seed)}
	case PolicySGLang, PolicySMG, PolicyLLMD, PolicyLLMDPrecise, PolicyProdStack, PolicyAIBrix:
		p, err := newPeerRouter(name, load, cfg, engines, w)
		if err != nil {
			return nil, err
		}
		rt = p
		if p.scr != nil {
			rt = peerTicker{p}
		}
	case PolicyKVSelect, PolicyCacheBalance, PolicyApprox:
		override := ""
		if name == PolicyCacheBalance {
			override = PolicyCacheBalance
		}
		k, err := newSelectorRouter(ctx, base, load, cfg, engines, override, name == PolicyApprox)
		if err != nil {
			return nil, err
		}
		rt = k
	default:
		return nil, fmt.Errorf("%w: policy %q", bench.ErrConfig, name)
	}
	return runSim(ctx, cfg, w, engines, rt, false)
}

// ticker is a router that also acts at fixed instants (a peer's metrics
// scrape): runSim calls tick at every multiple of interval() before the
// events of any later instant, and only while other events remain.
type ticker interface {
	interval() float64
	tick(now float64)
}

// arrival is a request due at t.
type arrival struct {
	t float64
	i int
}

// arrivals orders arrivals by time, then request index.
type arrivals []arrival

func (h arrivals) Len() int { return len(h) }
func (h arrivals) Less(i, j int) bool {
	if h[i].t != h[j].t {
		return h[i].t < h[j].t
	}
	return h[i].i < h[j].i
}
func (h arrivals) Swap(i, j int) { h[i], h[j] = h[j], h[i] }
func (h *arrivals) Push(x any)   { *h = append(*h, x.(arrival)) }
func (h *arrivals) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}

// runSim is the virtual-time loop over the engines. Requests without a
// previous turn arrive at their arrangement's time (all at 0 when
// saturate, which also ignores conversation order); a turn with a previous
// one arrives its think time after that turn finished. Then, always taking
// the earliest of the next step end and the next arrival (step ends first
// at equal times, lower engine index first):
//
//  1. a step end: the engine's outcomes are recorded and reported to the
//     router (first token: prefillDone; end: finished, and the next turn
//     is scheduled), then the engine starts its next step;
//  2. the arrivals at that instant, one by one: the router picks a worker
//     (the selector's router first publishes the engines' pending KV
//     events and waits until they are applied) and the request joins that
//     engine's waiting queue; then every idle engine with work starts a
//     step.
func runSim(ctx context.Context, cfg *Config, w *workload, engines []*simEngine, rt router, saturate bool) (*PolicyResult, error) {
	n := len(engines)
	res := &PolicyResult{
		Requests:               len(w.reqs),
		RequestsPerWorker:      make([]int, n),
		PrefillTokensPerWorker: make([]int64, n),
	}
	vr := make([]vllm.Request, len(w.reqs))
	worker := make([]int, len(w.reqs))
	var due arrivals
	for k := range w.reqs {
		r := &w.reqs[k]
		vr[k] = vllm.Request{ID: k, Hashes: r.hashes, PromptTokens: r.p.ISL, OutputTokens: r.out}
		switch {
		case saturate:
			due = append(due, arrival{0, k})
		case r.prev < 0:
			due = append(due, arrival{r.at, k})
		}
	}
	heap.Init(&due)
	var rec recorder
	done, steps := 0, 0
	tk, _ := rt.(ticker)
	nextTick, ticks := math.Inf(1), 0
	if tk != nil {
		nextTick = 0
	}
	for done < len(w.reqs) {
		if steps++; steps%4096 == 0 {
			if err := ctx.Err(); err != nil {
				return nil, err
			}
		}
		e, tE := -1, math.Inf(1)
		for j, s := range engines {
			if s.eng.Busy() && s.eng.StepEnd() < tE {
				e, tE = j, s.eng.StepEnd()
			}
		}
		tA := math.Inf(1)
		if len(due) > 0 {
			tA = due[0].t
		}
		if t := min(tE, tA); nextTick < t && !math.IsInf(t, 1) {
			// Step ends and arrivals at the tick's instant come first.
			tk.tick(nextTick)
			ticks++
			nextTick = float64(ticks) * tk.interval()
			continue
		}
		switch {
		case e >= 0 && tE <= tA:
			for _, o := range engines[e].eng.Finish() {
				k := o.Req.ID
				var err error
				if o.Kind == vllm.FirstToken {
					err = rt.prefillDone(k)
				} else {
					done++
					rec.finished(o.Req, &w.reqs[k])
					err = rt.finished(k)
					if s := w.reqs[k].succ; s >= 0 && !saturate {
						heap.Push(&due, arrival{o.Req.Finish + w.reqs[s].think, s})
					}
				}
				if err != nil {
					return nil, err
				}
			}
			engines[e].eng.Start(tE)
		case len(due) > 0:
			// Every request arriving at tA is routed before any engine
			// schedules a step: an engine's scheduler sees them together.
			for len(due) > 0 && due[0].t == tA {
				a := heap.Pop(&due).(arrival)
				r := &w.reqs[a.i]
				wi, err := rt.pick(a.t, a.i, r)
				if err != nil {
					return nil, err
				}
				if wi < 0 || wi >= n {
					return nil, fmt.Errorf("sim: request %d routed to worker index %d of %d", a.i, wi, n)
				}
				worker[a.i] = wi
				vr[a.i].Arrival = a.t
				engines[wi].eng.Add(&vr[a.i])
				res.RequestsPerWorker[wi]++
			}
			for _, s := range engines {
				s.eng.Start(tA)
			}
		default:
			return nil, noProgress(done, len(w.reqs))
		}
	}
	for k := range vr {
		res.PrefillTokensPerWorker[worker[k]] += int64(vr[k].PromptTokens - vr[k].HitBlocks*engines[0].bs + vr[k].Recomputed)
	}
	busy := make([]float64, n)
	for j, s := range engines {
		st := s.eng.Stats()
		res.EvictedBlocks += st.Evicted
		res.HitBlocks += int64(st.HitBlocks)
		res.PromptBlocks += int64(st.PromptBlocks)
		res.Preemptions += int64(st.Preemptions)
		res.RecomputedTokens += int64(st.Recomputed)
		busy[j] = st.BusySeconds
	}
	rec.fill(res, busy)
	if err := rt.close(res); err != nil {
		return nil, err
	}
	return res, nil
}

// roundRobin sends request k (in arrival order) to worker k mod n.
type roundRobin struct{ n, next int }

func (p *roundRobin) pick(float64, int, *simRequest) (int, error) {
	w := p.next
	p.next = (p.next + 1) % p.n
	return w, nil
}
func (p *roundRobin) prefillDone(int) error     { return nil }
func (p *roundRobin) finished(int) error        { return nil }
func (p *roundRobin) close(*PolicyResult) error { return nil }

// newSimRand is the random policy's generator for seed.
func newSimRand(seed int64) *rand.Rand { return rand.New(rand.NewPCG(uint64(seed), 0x72616e646f6d)) }

// randomPick sends each request to a uniformly random worker (seeded).
type randomPick struct {
	n   int
	rng *rand.Rand
}

func (p *randomPick) pick(float64, int, *simRequest) (int, error) { return p.rng.IntN(p.n), nil }
func (p *randomPick) prefillDone(int) error                       { return nil }
func (p *randomPick) finished(int) error                          { return nil }
func (p *randomPick) close(*PolicyResult) error                   { return nil }
