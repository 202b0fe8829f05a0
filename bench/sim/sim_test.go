package sim

import (
	"context"
	"fmt"
	"io"
	"math"
	"reflect"
	"testing"

	"github.com/kvselect/kvselect/bench"
	"github.com/kvselect/kvselect/bench/sim/vllm"
)

// testWorkload is a small trace on a 64-token block size, engines of 64
// blocks, every step 1 s (no per-token cost): times are easy to check.
func testWorkload(t *testing.T, workers int, recs []bench.TraceRecord) (*bench.Config, *Config, *workload) {
	t.Helper()
	load := bench.DefaultConfig()
	load.Workers = workers
	load.BlockSize = 64
	cfg := DefaultConfig()
	cfg.CapacityBlocks = 64
	cfg.Step = vllm.StepModel{Weights: 1}
	ps, err := bench.ExpandTrace(recs, load.BlockSize)
	if err != nil {
		t.Fatal(err)
	}
	w, err := newWorkload(ps, &load, &cfg)
	if err != nil {
		t.Fatal(err)
	}
	return &load, &cfg, w
}

var fourRequests = []bench.TraceRecord{
	{Timestamp: 0, InputLength: 1024, OutputLength: 2, HashIDs: []uint64{1, 2}},
	{Timestamp: 0, InputLength: 1000, OutputLength: 1, HashIDs: []uint64{3, 4}},
	{Timestamp: 5000, InputLength: 1536, OutputLength: 1, HashIDs: []uint64{1, 2, 5}},
	{Timestamp: 5000, InputLength: 512, OutputLength: 1, HashIDs: []uint64{3}},
}

// recorder is round-robin that logs the lifecycle calls and checks the
// time of each pick against the engines' state.
type callLog struct {
	roundRobin
	calls []string
}

func (r *callLog) pick(now float64, i int, q *simRequest) (int, error) {
	r.calls = append(r.calls, fmt.Sprintf("pick %d", i))
	return r.roundRobin.pick(now, i, q)
}
func (r *callLog) prefillDone(i int) error {
	r.calls = append(r.calls, fmt.Sprintf("first %d", i))
	return nil
}
func (r *callLog) finished(i int) error {
	r.calls = append(r.calls, fmt.Sprintf("done %d", i))
	return nil
}

// TestSimLifecycleOrder: one engine, four requests. At t=0 requests 0 and
// 1 arrive together and share the first step (budget 8,192): both
// prefill in it (first tokens at 1 s; 1 ends there, 0 decodes its second
// token at 2 s). At 5 s request 2 finds 0's 16 blocks cached and 3 finds
// 7 of 1's 8 (not the one of its last token); both finish at 6 s.
func TestSimLifecycleOrder(t *testing.T) {
	load, cfg, w := testWorkload(t, 1, fourRequests)
	w.arrange(&Level{TimeScale: 1}, cfg, load.Seed)
	es, err := newEngines(load, cfg, w, false)
	if err != nil {
		t.Fatal(err)
	}
	rec := &callLog{roundRobin: roundRobin{n: 1}}
	res, err := runSim(context.Background(), cfg, w, es, rec, false)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"pick 0", "pick 1", "first 0", "first 1", "done 1", "done 0", "pick 2", "pick 3", "first 2", "done 2", "first 3", "done 3"}
	if !reflect.DeepEqual(rec.calls, want) {
		t.Fatalf("calls\n%v\nwant\n%v", rec.calls, want)
	}
	// Hits: request 2's first 16 blocks (0's prompt), request 3's 8 blocks
	// minus the one holding its last token: (512-1)/64 = 7.
	if res.HitBlocks != 16+7 || res.PromptBlocks != 16+15+24+8 {
		t.Fatalf("hit %d of %d blocks", res.HitBlocks, res.PromptBlocks)
	}
	// TTFTs 1, 1, 1, 1 s; E2E 2, 1, 1, 1 s; 4 requests over 6 s.
	if res.TTFTp50ms != 1000 || res.TTFTp99ms != 1000 || res.E2Ep99ms != 2000 || res.E2Ep50ms != 1000 || res.Completed != 4 || !near(res.ThroughputRPS, 4.0/6) {
		t.Fatalf("latencies %+v", res)
	}
}

func near(a, b float64) bool { return math.Abs(a-b) < 1e-9 }

// syntheticWorkload loads a synthetic workload of prompts prompts over
// workers workers with 32-token blocks and pools of capacity blocks.
func syntheticWorkload(t *testing.T, workers int, workload string, prompts, capacity int) (bench.Config, Config, *workload) {
	t.Helper()
	load := bench.DefaultConfig()
	load.Workers = workers
	load.BlockSize = 32
	load.Workload = workload
	load.Synthetic.Prompts = prompts
	cfg := DefaultConfig()
	cfg.CapacityBlocks = capacity
	ps, _, err := bench.LoadWorkload(&load)
	if err != nil {
		t.Fatal(err)
	}
	w, err := newWorkload(ps, &load, &cfg)
	if err != nil {
		t.Fatal(err)
	}
	return load, cfg, w
}

// TestSimDeterministicAndCounted replays a synthetic workload twice per
// local policy: the results are equal, and the report's counts are the
// engines' own.
func TestSimDeterministicAndCounted(t *testing.T) {
	load, cfg, w := syntheticWorkload(t, 4, "synthetic:chat", 300, 512)
	w.arrange(&Level{ArrivalRPS: 20}, &cfg, load.Seed)
	for _, name := range []string{PolicyRoundRobin, PolicyRandom} {
		var first *PolicyResult
		for range 2 {
			es, err := newEngines(&load, &cfg, w, false)
			if err != nil {
				t.Fatal(err)
			}
			var rt router = &roundRobin{n: load.Workers}
			if name == PolicyRandom {
				rt = &randomPick{n: load.Workers, rng: newSimRand(load.Seed)}
			}
			res, err := runSim(context.Background(), &cfg, w, es, rt, false)
			if err != nil {
				t.Fatal(err)
			}
			var hits, evicted, preempt uint64
			for _, e := range es {
				s := e.eng.Stats()
				hits += s.HitBlocks
				evicted += s.Evicted
				preempt += s.Preemptions
			}
			if uint64(res.HitBlocks) != hits || res.EvictedBlocks != evicted || uint64(res.Preemptions) != preempt || res.Completed != len(w.reqs) {
				t.Fatalf("%s: report %+v, engines hits %d evicted %d preemptions %d", name, res, hits, evicted, preempt)
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

// turnLog checks that every later turn arrives its think time after its
// previous turn finished.
type turnLog struct {
	roundRobin
	t    *testing.T
	w    *workload
	done map[int]bool
}

func (r *turnLog) pick(now float64, i int, q *simRequest) (int, error) {
	if q.prev >= 0 && !r.done[q.prev] {
		r.t.Errorf("turn %d arrived before turn %d finished", i, q.prev)
	}
	return r.roundRobin.pick(now, i, q)
}
func (r *turnLog) finished(i int) error {
	r.done[i] = true
	return nil
}

// TestSessionsFollowCompletion: a conversation's next turn arrives after
// its previous one finished, its think time later; tool-result turns think
// less.
func TestSessionsFollowCompletion(t *testing.T) {
	load, cfg, w := syntheticWorkload(t, 2, "synthetic:agent", 200, 8192)
	var user, tool, nu, nt float64
	for _, r := range w.reqs {
		if r.prev >= 0 {
			if r.p.ToolResult {
				tool, nt = tool+r.think, nt+1
			} else {
				user, nu = user+r.think, nu+1
			}
		}
	}
	if nt == 0 || nu == 0 || !(tool/nt < user/nu) {
		t.Fatalf("mean think: tool %v over %v turns, user %v over %v", tool/nt, nt, user/nu, nu)
	}
	w.arrange(&Level{ArrivalRPS: 2}, &cfg, load.Seed)
	es, err := newEngines(&load, &cfg, w, false)
	if err != nil {
		t.Fatal(err)
	}
	rt := &turnLog{roundRobin: roundRobin{n: 2}, t: t, w: w, done: map[int]bool{}}
	if _, err := runSim(context.Background(), &cfg, w, es, rt, false); err != nil {
		t.Fatal(err)
	}
}

// TestLevelsFromCapacity: the load levels' arrival rates are fractions of
// the measured capacity, and a trace's time scale gives that rate.
func TestLevelsFromCapacity(t *testing.T) {
	load, cfg, w := testWorkload(t, 2, fourRequests)
	rep := &Report{}
	cfg.Loads = []float64{0.5, 0.9}
	levels, err := planLevels(context.Background(), w, load, cfg, rep, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if rep.CapacityRPS <= 0 || len(levels) != 2 {
		t.Fatalf("capacity %v, levels %+v", rep.CapacityRPS, levels)
	}
	for i, lv := range levels {
		if !near(lv.ArrivalRPS, cfg.Loads[i]*rep.CapacityRPS) || !near(w.traceRate()/lv.TimeScale, lv.ArrivalRPS) {
			t.Fatalf("level %+v", lv)
		}
	}
	cfg.Loads = nil
	cfg.TimeScale = 2
	levels, err = planLevels(context.Background(), w, load, cfg, rep, io.Discard)
	if err != nil || len(levels) != 1 || levels[0].TimeScale != 2 || !near(levels[0].ArrivalRPS, 3.0/5/2) {
		t.Fatalf("fixed level %+v, %v", levels, err)
	}
}

// TestHitRateBound: one unbounded cache in order; a prompt's last-token
// block is never a hit; an answer's blocks count for the next turn.
func TestHitRateBound(t *testing.T) {
	_, _, w := testWorkload(t, 1, fourRequests)
	// As TestSimLifecycleOrder: 16 + 7 of 63 blocks.
	if b := w.hitRateBound(64); !near(b, 23.0/63) {
		t.Fatalf("bound %v, want 23/63", b)
	}
}

func TestSyncBlock(t *testing.T) {
	a, la, ea := syncBlock(1, 64, nil)
	b, lb, eb := syncBlock(2, 64, nil)
	if len(a) != 64 || la == lb || ea == eb || reflect.DeepEqual(a, b) {
		t.Fatal("sync blocks of two rounds collide")
	}
	for _, tok := range append(a, b...) {
		if tok < 1<<31 {
			t.Fatalf("token %d inside the workloads' vocabulary", tok)
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
		func(s *Config) { s.MaxBatchedTokens = 0 },
		func(s *Config) { s.Step.PerToken = math.NaN() },
		func(s *Config) { s.Loads = []float64{0.5, -1} },
		func(s *Config) { s.Loads, s.TimeScale = nil, 0 },
		func(s *Config) { s.ThinkTime = -1 },
		func(s *Config) { s.SyncTimeout = 0 },
		func(s *Config) { s.Policies = nil },
		func(s *Config) { s.Policies = []string{"nope"} },
	} {
		s := DefaultConfig()
		mut(&s)
		if err := s.Validate(); err == nil {
			t.Fatalf("%+v accepted", s)
		}
	}
}
