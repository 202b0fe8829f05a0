package sim

import (
	"fmt"

	"github.com/kvselect/kvselect/bench"
	"github.com/kvselect/kvselect/bench/sim/peers"
)

// Peer policy names: the routers a team would deploy instead of kvselect,
// transcribed in package bench/sim/peers (see its doc and this package's
// for what each models and leaves out).
const (
	PolicySGLang      = peers.SGLang
	PolicySMG         = peers.SMG
	PolicyLLMD        = peers.LLMD
	PolicyLLMDPrecise = peers.LLMDPrecise
	PolicyProdStack   = peers.ProductionStack
	PolicyAIBrix      = peers.AIBrix
)

// peerRouter drives a peer policy: it gives the policy the request's text
// (its prompt tokens) and block hashes, the engines' gauges and caches,
// the instant of every decision and the end of every request.
type peerRouter struct {
	pol    peers.Policy
	scr    peers.Scraper // nil: the policy scrapes nothing
	w      *workload
	worker []int // request index -> worker chosen (-1: not routed)
	text   []uint32
}

// peerEngine is what a peer reads of one simulated engine.
type peerEngine struct{ s *simEngine }

func (e peerEngine) Waiting() int {
	w, _ := e.s.eng.Load()
	return w
}

func (e peerEngine) KVUsage() float64 {
	ref, _ := e.s.eng.Used()
	return float64(ref) / float64(e.s.eng.Config().NumBlocks)
}

func (e peerEngine) CachedPrefix(h []uint64) int { return e.s.eng.CachedPrefix(h) }

func newPeerRouter(name string, load *bench.Config, cfg *Config, engines []*simEngine, w *workload) (*peerRouter, error) {
	pe := make([]peers.Engine, len(engines))
	for i, s := range engines {
		pe[i] = peerEngine{s}
	}
	pol, err := peers.New(name, peers.Options{Engines: pe, Seed: load.Seed, BlockSize: load.BlockSize, NumGPUBlocks: cfg.CapacityBlocks})
	if err != nil {
		return nil, fmt.Errorf("%w: %w", bench.ErrConfig, err)
	}
	p := &peerRouter{pol: pol, w: w, worker: make([]int, len(w.reqs))}
	p.scr, _ = pol.(peers.Scraper)
	for i := range p.worker {
		p.worker[i] = -1
	}
	return p, nil
}

func (p *peerRouter) pick(now float64, i int, r *simRequest) (int, error) {
	p.text = bench.AppendStreamTokens(p.text[:0], r.p, nil, 0, r.p.ISL)
	wi := p.pol.Pick(now, &peers.Request{Text: p.text, Blocks: r.hashes[:len(r.p.Seq)]})
	p.worker[i] = wi
	return wi, nil
}

func (p *peerRouter) prefillDone(int) error { return nil }

func (p *peerRouter) finished(i int) error {
	if p.worker[i] < 0 {
		return fmt.Errorf("sim: request %d finished without being routed", i)
	}
	p.pol.Done(p.worker[i])
	return nil
}

func (p *peerRouter) close(*PolicyResult) error { return nil }

// peerTicker is a peerRouter whose policy scrapes engine gauges.
type peerTicker struct{ *peerRouter }

func (p peerTicker) interval() float64 { return p.scr.ScrapeInterval() }
func (p peerTicker) tick(now float64)  { p.scr.Scrape(now) }
