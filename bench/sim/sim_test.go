package sim

import (
	"context"
	"math"
	"reflect"
	"testing"

	"github.com/kvselect/kvselect/bench"
)

func TestPrefillQueueFIFO(t *testing.T) {
	var q prefillQueue
	for _, c := range []struct{ at, d, start, end float64 }{
		{0, 1, 0, 1},        // idle engine: starts at once
		{0.5, 2, 1, 3},      // waits for the first
		{2, 0, 3, 3},        // fully cached: no prefill, still queued behind
		{10, 0.5, 10, 10.5}, // idle again
	} {
		s, e := q.admit(c.at, c.d)
		if s != c.start || e != c.end {
			t.Fatalf("admit(%v, %v) = %v, %v; want %v, %v", c.at, c.d, s, e, c.start, c.end)
		}
	}
}

// simTestConfig is a small trace: four requests on a 64-token block size,
// the third repeating the first's prefix.
func simTestConfig(workers int) (*bench.Config, *Config, []bench.Prompt) {
	load := bench.DefaultConfig()
	load.Workers = workers
	load.BlockSize = 64
	cfg := DefaultConfig()
	cfg.CapacityBlocks = 64
	cfg.PrefillTPS = 1000
	cfg.DecodeTPS = 100
	recs := []bench.TraceRecord{
		{Timestamp: 0, InputLength: 1024, OutputLength: 100, HashIDs: []uint64{1, 2}},
		{Timestamp: 0, InputLength: 1000, OutputLength: 10, HashIDs: []uint64{3, 4}},
		{Timestamp: 5000, InputLength: 1536, OutputLength: 0, HashIDs: []uint64{1, 2, 5}},
		{Timestamp: 5000, InputLength: 512, OutputLength: 0, HashIDs: []uint64{3}},
	}
	ps, err := bench.ExpandTrace(recs, load.BlockSize)
	if err != nil {
		panic(err)
	}
	return &load, &cfg, ps
}

func newTestEngines(t *testing.T, load *bench.Config, cfg *Config) []*bench.Engine {
	t.Helper()
	es := make([]*bench.Engine, load.Workers)
	for i := range es {
		e, err := bench.NewEngine(bench.EngineConfig{BlockSize: load.BlockSize, CapacityBlocks: cfg.CapacityBlocks, Endpoint: "tcp://127.0.0.1:0"})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { e.Close() })
		es[i] = e
	}
	return es
}

// TestSimTimingModel checks TTFTs worked out by hand on one engine at
// 1,000 prefill tokens/s: request 0 prefills 1,024 tokens (1.024 s), request
// 1 queues behind it (1.000 s more: TTFT 2.024 s); at 5 s request 2 finds
// its first 16 blocks cached and prefills 512 tokens (0.512 s), request 3
// finds its 8 blocks cached (prefill 0) but queues behind request 2.
func TestSimTimingModel(t *testing.T) {
	load, cfg, ps := simTestConfig(1)
	reqs := simRequests(ps, cfg)
	res, err := runSim(context.Background(), load.BlockSize, cfg, reqs, newTestEngines(t, load, cfg), &roundRobin{n: 1})
	if err != nil {
		t.Fatal(err)
	}
	if b := hitRateBound(reqs); b != 24.0/63 {
		t.Fatalf("hit rate bound %v, want 24/63", b)
	}
	if res.HitBlocks != 16+8 || res.PromptBlocks != 16+15+24+8 {
		t.Fatalf("hit %d of %d blocks", res.HitBlocks, res.PromptBlocks)
	}
	if res.PrefillTokens != 1024+1000+512+0 {
		t.Fatalf("prefill tokens %d", res.PrefillTokens)
	}
	// Sorted TTFTs: 0.512, 0.512, 1.024, 2.024 s; p50 is the 2nd, p99 the 4th.
	near := func(a, b float64) bool { return math.Abs(a-b) < 1e-6 }
	if !near(res.TTFTp50ms, 512) || !near(res.TTFTp99ms, 2024) || !near(res.TTFTMaxms, 2024) || !near(res.TTFTMeanms, (512+512+1024+2024)/4.0) {
		t.Fatalf("TTFT p50 %v p99 %v max %v mean %v", res.TTFTp50ms, res.TTFTp99ms, res.TTFTMaxms, res.TTFTMeanms)
	}
}

// lifecycleRecorder is round-robin that records the lifecycle calls and
// checks every hit against the engine's own Cached before serving.
type lifecycleRecorder struct {
	roundRobin
	t       *testing.T
	engines []*bench.Engine
	bs      int
	cap     int // the engines' capacity in blocks
	calls   []string
	before  int // the chosen engine's Cached count before serving
}

func (r *lifecycleRecorder) pick(i int, q *simRequest) (int, error) {
	w, _ := r.roundRobin.pick(i, q)
	r.calls = append(r.calls, "pick "+itoa(i))
	r.before = r.engines[w].Cached(0, q.p.AppendTokens(nil, r.bs))
	return w, nil
}

func (r *lifecycleRecorder) served(i int, q *simRequest, w, hit, stored int) error {
	after := r.engines[w].Cached(0, q.p.AppendTokens(nil, r.bs))
	if hit != r.before || after != hit+stored || after != min(len(q.p.Local), r.cap) {
		r.t.Errorf("request %d: hit %d stored %d; engine held %d blocks before, %d after", i, hit, stored, r.before, after)
	}
	return nil
}
func (r *lifecycleRecorder) prefillDone(i int) error {
	r.calls = append(r.calls, "prefill "+itoa(i))
	return nil
}
func (r *lifecycleRecorder) finished(i int) error {
	r.calls = append(r.calls, "done "+itoa(i))
	return nil
}

func itoa(i int) string { return string(rune('0' + i)) }

func TestSimLifecycleOrder(t *testing.T) {
	load, cfg, ps := simTestConfig(1)
	es := newTestEngines(t, load, cfg)
	rec := &lifecycleRecorder{roundRobin: roundRobin{n: 1}, t: t, engines: es, bs: load.BlockSize, cap: cfg.CapacityBlocks}
	if _, err := runSim(context.Background(), load.BlockSize, cfg, simRequests(ps, cfg), es, rec); err != nil {
		t.Fatal(err)
	}
	// Request 0: prefill ends 1.024, done 2.024; request 1: 2.024 and
	// 2.124 (at equal times a prefill completion goes first); at 5 s
	// requests 2 and 3 (prefill 5.512, done at once).
	want := []string{"pick 0", "pick 1", "prefill 0", "prefill 1", "done 0", "done 1", "pick 2", "pick 3",
		"prefill 2", "prefill 3", "done 2", "done 3"}
	if !reflect.DeepEqual(rec.calls, want) {
		t.Fatalf("calls\n%v\nwant\n%v", rec.calls, want)
	}
}

// TestSimPoliciesDeterministicAndCounted replays a synthetic workload twice
// per local policy: the results are equal, and the hit count equals the
// sum of the engines' own HitBlocks.
func TestSimPoliciesDeterministicAndCounted(t *testing.T) {
	load := bench.DefaultConfig()
	load.Workers = 4
	load.BlockSize = 32
	load.Synthetic.Prompts = 300
	load.Synthetic.Families = 6
	cfg := DefaultConfig()
	cfg.CapacityBlocks = 256
	ps, _, err := bench.LoadWorkload(&load)
	if err != nil {
		t.Fatal(err)
	}
	reqs := simRequests(ps, &cfg)
	for _, name := range []string{PolicyRoundRobin, PolicyRandom} {
		var first *PolicyResult
		for range 2 {
			es := newTestEngines(t, &load, &cfg)
			var rt router = &roundRobin{n: load.Workers}
			if name == PolicyRandom {
				rt = &randomPick{n: load.Workers, rng: newSimRand(load.Seed)}
			}
			res, err := runSim(context.Background(), load.BlockSize, &cfg, reqs, es, rt)
			if err != nil {
				t.Fatal(err)
			}
			var hits, evicted uint64
			for _, e := range es {
				s := e.Stats()
				hits += s.HitBlocks
				evicted += s.Evicted
			}
			if uint64(res.HitBlocks) != hits || res.EvictedBlocks != evicted {
				t.Fatalf("%s: report hits %d evicted %d, engines %d %d", name, res.HitBlocks, res.EvictedBlocks, hits, evicted)
			}
			if res.HitBlocks == 0 || evicted == 0 {
				t.Fatalf("%s: the test workload should both hit and evict: %+v", name, res)
			}
			if first == nil {
				first = res
			} else if !reflect.DeepEqual(first, res) {
				t.Fatalf("%s not deterministic:\n%+v\n%+v", name, first, res)
			}
		}
	}
}

func TestSimConfigValidate(t *testing.T) {
	ok := DefaultConfig()
	if err := ok.Validate(); err != nil {
		t.Fatal(err)
	}
	for _, mut := range []func(*Config){
		func(s *Config) { s.CapacityBlocks = 0 },
		func(s *Config) { s.PrefillTPS = 0 },
		func(s *Config) { s.DecodeTPS = math.NaN() },
		func(s *Config) { s.TimeScale = -1 },
		func(s *Config) { s.ArrivalRate = 0 },
		func(s *Config) { s.SyncTimeout = 0 },
	} {
		s := DefaultConfig()
		mut(&s)
		if err := s.Validate(); err == nil {
			t.Fatalf("%+v accepted", s)
		}
	}
}
