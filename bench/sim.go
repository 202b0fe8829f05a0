package bench

import (
	"container/heap"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"slices"
	"sort"
	"strings"
	"time"
)

// SimConfig shapes a routing-quality simulation (Simulate). The workload,
// the worker count, the block size, the seed, the selector (Target or
// StartServer) and the HTTP timeouts come from the enclosing Config.
type SimConfig struct {
	// CapacityBlocks is each engine's KV pool in blocks.
	CapacityBlocks int
	// PrefillTPS is an engine's prefill speed in tokens per second: a
	// request's prefill takes its uncached prompt tokens / PrefillTPS.
	PrefillTPS float64
	// DecodeTPS is one request's decode speed in tokens per second: its
	// decode takes output tokens / DecodeTPS after the prefill.
	DecodeTPS float64
	// TimeScale multiplies the trace's arrival times (0.5 replays it at
	// twice the rate).
	TimeScale float64
	// ArrivalRate is the arrival rate in requests per second of a workload
	// without timestamps (the synthetic one): arrivals are evenly spaced.
	ArrivalRate float64
	// SyncTimeout bounds the wait for the selector to apply one KV event
	// batch (see Simulate).
	SyncTimeout time.Duration
}

// DefaultSim returns the simulation defaults, to be used with block size
// 64 and 8 workers. They are chosen for mooncake_trace_1000.jsonl (1,000
// requests over 177 s, mean prompt 9,792 tokens, 12,207 distinct 512-token
// blocks, that is 97,656 distinct 64-token blocks):
//   - 8,192 blocks of 64 tokens per engine (524k tokens, about 53 mean
//     prompts; the KV cache of a Llama-3-8B, 128 KiB per token, in 64 GiB)
//     hold together 65,536 blocks, two thirds of the trace's distinct
//     content: every engine evicts under every policy (35k to 42k blocks
//     over the trace), yet the pools are large enough that the trace's
//     reuse, which is mostly short-range, survives: measured, the hit rates
//     are within 0.005 of those with unbounded pools, so the comparison is
//     about routing, not about a cache too small for any policy (at 4,096
//     blocks kvselect's hit rate falls from 0.34 to 0.30, round-robin's
//     from 0.30 to 0.29);
//   - 10,000 prefill tokens/s per engine: the trace offers 55k prompt
//     tokens/s, so 8 engines without any cache hit would run at 70% of
//     their prefill capacity: queues form, and cache hits shorten them;
//   - 100 decode tokens/s per request (10 ms per output token, a usual
//     inter-token latency): a request stays active (booked on the selector)
//     for its mean 199 output tokens about 2 s after its prefill.
func DefaultSim() SimConfig {
	return SimConfig{
		CapacityBlocks: 8192,
		PrefillTPS:     10_000,
		DecodeTPS:      100,
		TimeScale:      1,
		ArrivalRate:    10,
		SyncTimeout:    5 * time.Second,
	}
}

// Validate reports the first invalid field.
func (s *SimConfig) Validate() error {
	switch {
	case s.CapacityBlocks < 1:
		return fmt.Errorf("%w: capacity blocks %d < 1", ErrConfig, s.CapacityBlocks)
	case !(s.PrefillTPS > 0) || !(s.DecodeTPS > 0):
		return fmt.Errorf("%w: prefill and decode tokens/s must be > 0", ErrConfig)
	case !(s.TimeScale >= 0) || math.IsInf(s.TimeScale, 0):
		return fmt.Errorf("%w: time scale %v must be >= 0", ErrConfig, s.TimeScale)
	case !(s.ArrivalRate > 0):
		return fmt.Errorf("%w: arrival rate %v must be > 0", ErrConfig, s.ArrivalRate)
	case s.SyncTimeout <= 0:
		return fmt.Errorf("%w: sync timeout %v must be > 0", ErrConfig, s.SyncTimeout)
	}
	return nil
}

// Policy names, in the report's order.
const (
	PolicyKVSelect   = "kvselect"
	PolicyRoundRobin = "round_robin"
	PolicyRandom     = "random"
)

// SimPolicies are the policies Simulate runs, in order.
var SimPolicies = []string{PolicyKVSelect, PolicyRoundRobin, PolicyRandom}

// PolicyResult is what one policy achieved over the simulation.
type PolicyResult struct {
	Requests int `json:"requests"`
	// HitRate is HitBlocks / PromptBlocks: the prompts' full blocks that
	// were already cached on the engine that served them.
	HitRate      float64 `json:"hit_rate"`
	HitBlocks    int64   `json:"hit_blocks"`
	PromptBlocks int64   `json:"prompt_blocks"`
	// PrefillTokens is the prompt tokens actually prefilled (not cached).
	PrefillTokens int64   `json:"prefill_tokens"`
	TTFTp50ms     float64 `json:"ttft_p50_ms"`
	TTFTp99ms     float64 `json:"ttft_p99_ms"`
	TTFTMeanms    float64 `json:"ttft_mean_ms"`
	TTFTMaxms     float64 `json:"ttft_max_ms"`
	// RequestsPerWorker and PrefillTokensPerWorker are by worker (id-1).
	RequestsPerWorker      []int   `json:"requests_per_worker"`
	PrefillTokensPerWorker []int64 `json:"prefill_tokens_per_worker"`
	// RequestsMaxOverMean is max/mean of RequestsPerWorker (1 is perfect).
	RequestsMaxOverMean float64 `json:"requests_max_over_mean"`
	// PrefillTokensCV is the coefficient of variation (stddev/mean) of
	// PrefillTokensPerWorker (0 is perfect).
	PrefillTokensCV float64 `json:"prefill_tokens_cv"`
	EvictedBlocks   uint64  `json:"evicted_blocks"`
	// The kvselect policy only: calls that failed (by route and status),
	// batches the selector did not apply within SyncTimeout, selections
	// whose overlap (gpu tokens / block size) differed from the engine's
	// hit, the total wall time spent waiting for KV events to apply, and
	// active requests left in GET /loads after the run (must be 0).
	Errors             map[string]int64 `json:"errors,omitempty"`
	SyncTimeouts       int64            `json:"sync_timeouts,omitempty"`
	OverlapMismatches  int64            `json:"overlap_mismatches,omitempty"`
	SyncWaitMs         float64          `json:"sync_wait_ms,omitempty"`
	LeakedReservations int64            `json:"leaked_reservations,omitempty"`
}

// SimReport is Simulate's outcome; its JSON form is what --json writes.
type SimReport struct {
	Target         string  `json:"target"`
	Workload       string  `json:"workload"`
	Workers        int     `json:"workers"`
	BlockSize      int     `json:"block_size"`
	CapacityBlocks int     `json:"capacity_blocks"`
	PrefillTPS     float64 `json:"prefill_tokens_per_s"`
	DecodeTPS      float64 `json:"decode_tokens_per_s"`
	TimeScale      float64 `json:"time_scale"`
	Seed           int64   `json:"seed"`
	// HitRateBound is the hit rate of one engine of unbounded capacity
	// serving every request: no policy over the engines can do better.
	HitRateBound float64                  `json:"hit_rate_bound"`
	Policies     map[string]*PolicyResult `json:"policies"`
	WallS        float64                  `json:"wall_s"`
	Warnings     []string                 `json:"warnings,omitempty"`
}

// Simulate replays cfg.Workload through simulated engines once per policy
// (SimPolicies) and reports each policy's KV hit rate, simulated TTFT and
// load balance. See doc.go, "Routing-quality simulation", for the model
// and the synchronisation with the selector.
func Simulate(ctx context.Context, cfg Config) (*SimReport, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if err := cfg.Sim.Validate(); err != nil {
		return nil, err
	}
	if cfg.Workers < 1 {
		return nil, fmt.Errorf("%w: --simulate needs at least one worker", ErrConfig)
	}
	logw := cfg.Log
	if logw == nil {
		logw = io.Discard
	}
	start := time.Now()
	prompts, desc, err := LoadWorkload(&cfg)
	if err != nil {
		return nil, err
	}
	fmt.Fprintf(logw, "workload %s\n", desc)
	reqs := simRequests(prompts, &cfg)

	base, stop, err := resolveTarget(&cfg, logw)
	if err != nil {
		return nil, err
	}
	defer stop()
	rep := &SimReport{
		Target: base, Workload: desc, Workers: cfg.Workers, BlockSize: cfg.BlockSize,
		CapacityBlocks: cfg.Sim.CapacityBlocks, PrefillTPS: cfg.Sim.PrefillTPS, DecodeTPS: cfg.Sim.DecodeTPS,
		TimeScale: cfg.Sim.TimeScale, Seed: cfg.Seed, Policies: map[string]*PolicyResult{},
		HitRateBound: hitRateBound(reqs),
	}
	for _, name := range SimPolicies {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		t0 := time.Now()
		res, err := simulatePolicy(ctx, name, base, &cfg, reqs)
		if err != nil {
			return nil, fmt.Errorf("bench: policy %s: %w", name, err)
		}
		rep.Policies[name] = res
		fmt.Fprintf(logw, "policy %s: hit rate %.3f, TTFT p50 %.0f ms (%.1f s)\n", name, res.HitRate, res.TTFTp50ms, time.Since(t0).Seconds())
		if res.SyncTimeouts > 0 {
			rep.Warnings = append(rep.Warnings, fmt.Sprintf("%s: %d KV event batches not applied by the selector within %v", name, res.SyncTimeouts, cfg.Sim.SyncTimeout))
		}
		if res.LeakedReservations != 0 {
			rep.Warnings = append(rep.Warnings, fmt.Sprintf("%s: leaked reservations %d", name, res.LeakedReservations))
		}
	}
	rep.WallS = time.Since(start).Seconds()
	return rep, nil
}

// simRequest is one request of the replay: its prompt and its arrival time
// in virtual seconds. reqs are sorted by arrival, then by prompt order.
type simRequest struct {
	p       *Prompt
	arrival float64
}

// simRequests orders the prompts by arrival: a trace's timestamps (ms)
// times TimeScale, or evenly spaced at ArrivalRate without timestamps.
func simRequests(prompts []Prompt, cfg *Config) []simRequest {
	reqs := make([]simRequest, len(prompts))
	for i := range prompts {
		p := &prompts[i]
		var at float64
		if p.TraceIDs != nil {
			at = float64(p.TimestampMs) / 1000 * cfg.Sim.TimeScale
		} else {
			at = float64(i) / cfg.Sim.ArrivalRate
		}
		reqs[i] = simRequest{p: p, arrival: at}
	}
	sort.SliceStable(reqs, func(a, b int) bool { return reqs[a].arrival < reqs[b].arrival })
	return reqs
}

// hitRateBound replays reqs on one unbounded cache: a prompt's hit is its
// longest prefix (of full blocks) that an earlier prompt also had.
func hitRateBound(reqs []simRequest) float64 {
	seen := make(map[uint64]struct{})
	var hit, total int
	for _, r := range reqs {
		k := 0
		for k < len(r.p.Seq) {
			if _, ok := seen[r.p.Seq[k]]; !ok {
				break
			}
			k++
		}
		hit += k
		total += len(r.p.Seq)
		for _, h := range r.p.Seq[k:] {
			seen[h] = struct{}{}
		}
	}
	if total == 0 {
		return 0
	}
	return float64(hit) / float64(total)
}

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
func simulatePolicy(ctx context.Context, name, base string, cfg *Config, reqs []simRequest) (*PolicyResult, error) {
	engines := make([]*Engine, cfg.Workers)
	defer func() {
		for _, e := range engines {
			if e != nil {
				e.Close()
			}
		}
	}()
	for i := range engines {
		ec := EngineConfig{Ranks: 1, BlockSize: cfg.BlockSize, CapacityBlocks: cfg.Sim.CapacityBlocks, Endpoint: "tcp://127.0.0.1:0"}
		if name == PolicyKVSelect {
			ec.ReplayEndpoint = "tcp://127.0.0.1:0"
		}
		e, err := NewEngine(ec)
		if err != nil {
			return nil, err
		}
		engines[i] = e
	}
	var rt router
	switch name {
	case PolicyRoundRobin:
		rt = &roundRobin{n: cfg.Workers}
	case PolicyRandom:
		rt = &randomPick{n: cfg.Workers, rng: newSimRand(cfg.Seed)}
	case PolicyKVSelect:
		k, err := newSelectorRouter(ctx, base, cfg, engines)
		if err != nil {
			return nil, err
		}
		rt = k
	default:
		return nil, fmt.Errorf("%w: policy %q", ErrConfig, name)
	}
	return runSim(ctx, cfg, reqs, engines, rt)
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

// runSim is the virtual-time loop. For each request in arrival order:
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
func runSim(ctx context.Context, cfg *Config, reqs []simRequest, engines []*Engine, rt router) (*PolicyResult, error) {
	bs := cfg.BlockSize
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
			return nil, fmt.Errorf("bench: request %d routed to worker index %d of %d", i, w, n)
		}
		tokens = r.p.AppendTokens(tokens[:0], bs)
		before := engines[w].Stats().Stored
		hit := engines[w].ServeTokens(0, tokens)
		stored := int(engines[w].Stats().Stored - before)
		if err := rt.served(i, r, w, hit, stored); err != nil {
			return nil, err
		}
		uncached := max(r.p.ISL-hit*bs, 0)
		_, end := queues[w].admit(r.arrival, float64(uncached)/cfg.Sim.PrefillTPS)
		heap.Push(&events, simEvent{t: end, kind: evPrefillDone, req: i})
		heap.Push(&events, simEvent{t: end + float64(r.p.OutputTokens)/cfg.Sim.DecodeTPS, kind: evFinished, req: i})
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

// errSync marks a selector that never applied a batch.
var errSync = errors.New("bench: the selector did not apply the engines' KV events")

// WriteJSONFile writes the report as indented JSON.
func (rep *SimReport) WriteJSONFile(path string) error {
	return writeJSONFile(path, rep)
}

// WriteTable writes the human report.
func (rep *SimReport) WriteTable(out io.Writer) error {
	fmt.Fprintf(out, "kvselect bench --simulate: %d workers, block size %d, %d blocks per engine, prefill %.0f tokens/s, decode %.0f tokens/s per request, time scale %g, seed %d\n",
		rep.Workers, rep.BlockSize, rep.CapacityBlocks, rep.PrefillTPS, rep.DecodeTPS, rep.TimeScale, rep.Seed)
	fmt.Fprintf(out, "target %s; workload %s\n", rep.Target, rep.Workload)
	fmt.Fprintf(out, "hit rate bound (one engine of unbounded capacity): %.3f\n\n", rep.HitRateBound)
	var b strings.Builder
	fmt.Fprintf(&b, "%-12s  %9s  %12s  %12s  %13s  %13s  %10s  %9s  %9s\n",
		"policy", "hit rate", "TTFT p50 ms", "TTFT p99 ms", "TTFT mean ms", "requests max/", "prefill", "evicted", "requests")
	fmt.Fprintf(&b, "%-12s  %9s  %12s  %12s  %13s  %13s  %10s  %9s  %9s\n", "", "", "", "", "", "mean", "tokens CV", "blocks", "")
	for _, name := range SimPolicies {
		r := rep.Policies[name]
		if r == nil {
			continue
		}
		fmt.Fprintf(&b, "%-12s  %9.3f  %12.0f  %12.0f  %13.0f  %13.2f  %10.3f  %9d  %9d\n",
			name, r.HitRate, r.TTFTp50ms, r.TTFTp99ms, r.TTFTMeanms, r.RequestsMaxOverMean, r.PrefillTokensCV, r.EvictedBlocks, r.Requests)
	}
	if _, err := io.WriteString(out, b.String()); err != nil {
		return err
	}
	if k := rep.Policies[PolicyKVSelect]; k != nil {
		fmt.Fprintf(out, "\nkvselect: sync wait %.0f ms in all, sync timeouts %d, overlap mismatches %d, leaked reservations %d",
			k.SyncWaitMs, k.SyncTimeouts, k.OverlapMismatches, k.LeakedReservations)
		if len(k.Errors) > 0 {
			fmt.Fprintf(out, ", errors %s", formatCounts(k.Errors))
		}
		fmt.Fprintln(out)
	}
	for _, w := range rep.Warnings {
		fmt.Fprintf(out, "warning: %s\n", w)
	}
	_, err := fmt.Fprintf(out, "wall time %.1f s\n", rep.WallS)
	return err
}
