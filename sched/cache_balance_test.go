package sched

import (
	"math"
	"testing"

	"github.com/kvselect/kvselect/radix"
)

func near(a, b float64) bool { return math.Abs(a-b) < 1e-9 }

// TestCacheBalanceWorkedExample: the cost of CacheBalance worked out by
// hand. bs 16, isl 1,024 (eff 1,040 at the default attention context),
// B 8,192 (not registered), pools of 1,000 blocks.
func TestCacheBalanceWorkedExample(t *testing.T) {
	p := defaultParams(t)
	req := Request{ISLTokens: 1024, BlockSize: 16}
	ctx := SelectionContext{Params: &p, Request: &req}
	cands := []Candidate{
		// A holds 48 blocks (768 tokens, eff 777) behind 4,096 booked
		// tokens of which its KV events showed 1,024 computed; the 3,072
		// left attend to 4,718,592 (query, key) pairs.
		{Worker: radix.WorkerKey{WorkerID: 1}, DeviceBlocks: 48, HasLoad: true, ActivePrefillTokens: 4096, ComputedPrefillTokens: 1024, PendingPrefillPairs: 4718592, ActiveBlocks: 100, NewBlocks: 16, TotalKVBlocks: 1000},
		// B holds nothing and is idle.
		{Worker: radix.WorkerKey{WorkerID: 2}, HasLoad: true, ActiveBlocks: 50, NewBlocks: 64, TotalKVBlocks: 1000},
		// C is idle but its pool is 56% booked: beyond the band and
		// past half the pool (the floor).
		{Worker: radix.WorkerKey{WorkerID: 3}, HasLoad: true, ActiveBlocks: 500, NewBlocks: 64, TotalKVBlocks: 1000},
		// D would not fit: 105% of its pool.
		{Worker: radix.WorkerKey{WorkerID: 4}, HasLoad: true, ActiveBlocks: 986, NewBlocks: 64, TotalKVBlocks: 1000},
	}
	out := make([]float64, len(cands))
	cb := DefaultCacheBalance()
	cb.Score(&ctx, cands, out)
	u := 1040.0 / 8192
	// The least occupied is B (0.114); memory pressure is charged above
	// max(0.114 + Band, Floor) = 0.5.
	want := []float64{
		0.5*(3072+4718592.0/32768)/8192 + 2*(1040.0-777)/8192,
		2 * u,
		2*u + 10*(0.564-0.5),
		2*u + 10*(1.05-0.5) + 50*0.05,
	}
	for i := range want {
		if !near(out[i], want[i]) {
			t.Errorf("candidate %d: cost %v, want %v", i+1, out[i], want[i])
		}
	}
	if i := Pick(out, 0, RuntimeRand{}); i != 1 {
		t.Fatalf("picked %d, want B: A's queue outweighs its cache", i+1)
	}
	// Once A's KV events show its booked prefill computed, nothing is
	// left ahead and the cache wins: cache-first within the band.
	cands[0].ComputedPrefillTokens, cands[0].PendingPrefillPairs = 4096, 0
	cb.Score(&ctx, cands, out)
	if !near(out[0], 2*(1040.0-777)/8192) {
		t.Fatalf("A's cost with its prefill computed: %v, want %v", out[0], 2*(1040.0-777)/8192)
	}
	if i := Pick(out, 0, RuntimeRand{}); i != 0 {
		t.Fatalf("picked %d, want A (its cache, nothing left ahead)", i+1)
	}
	// A conversation's holder whose pool is past half and far fuller
	// than the others' loses the request; one just inside the band
	// keeps it.
	cands[0].ActiveBlocks = 100 + 500
	cb.Score(&ctx, cands, out)
	if i := Pick(out, 0, RuntimeRand{}); i != 1 {
		t.Fatalf("picked %d, want B (A's pool 49 points above the least occupied)", i+1)
	}
	cands[0].ActiveBlocks = 100 + 45
	cb.Score(&ctx, cands, out)
	if i := Pick(out, 0, RuntimeRand{}); i != 0 {
		t.Fatalf("picked %d, want A (within the band)", i+1)
	}
}

// TestCacheBalanceEffectivePrefill: a long prompt's cached prefix is worth
// more than its tokens (attention), a short one's about its tokens.
func TestCacheBalanceEffectivePrefill(t *testing.T) {
	cb := DefaultCacheBalance()
	if got := cb.eff(1024) - 1024; !near(got, 16) {
		t.Fatalf("eff(1024) - 1024 = %v, want 16", got)
	}
	// A cached 64k-token prefix is worth twice its tokens: its attention
	// (each token against all before it) costs as much as its linear
	// layers at twice the attention context.
	if got := cb.eff(65536); !near(got, 2*65536) {
		t.Fatalf("eff(65536) = %v, want %v", got, 2*65536)
	}
	tokens := CacheBalance{}
	if tokens.eff(131072) != 131072 {
		t.Fatal("AttentionContext 0 should count tokens")
	}
}

// TestCacheBalanceModes: without prefill tracking only occupancy counts;
// without a registered pool there is no occupancy term; the preferred-taint
// multiplier scales the cost; max_num_batched_tokens sets the step.
func TestCacheBalanceModes(t *testing.T) {
	p := defaultParams(t)
	req := Request{ISLTokens: 8192, BlockSize: 16}
	ctx := SelectionContext{Params: &p, Request: &req}
	cb := DefaultCacheBalance()
	out := make([]float64, 2)

	p.TrackPrefillTokens = false
	cands := []Candidate{
		{DeviceBlocks: 512, HasLoad: true, ActivePrefillTokens: 1 << 20, ActiveBlocks: 900, TotalKVBlocks: 1000},
		{HasLoad: true, ActiveBlocks: 100, NewBlocks: 512, TotalKVBlocks: 1000},
	}
	cb.Score(&ctx, cands, out)
	if !near(out[0], 10*(0.9-0.612-0.05)) || out[1] != 0 {
		t.Fatalf("decode pool costs %v", out)
	}

	p.TrackPrefillTokens = true
	cands = []Candidate{{HasLoad: true, MaxBatchedTokens: 2048}, {HasLoad: true, TaintMultiplier: 0.5}}
	cb.Score(&ctx, cands, out)
	eff := cb.eff(8192)
	if !near(out[0], 2*eff/2048) || !near(out[1], 0.5*2*eff/8192) {
		t.Fatalf("costs %v, want %v and %v", out, 2*eff/2048, 0.5*2*eff/8192)
	}
}

func TestCacheBalanceAllocs(t *testing.T) {
	if raceEnabled {
		t.Skip("allocation counts need a non-race run")
	}
	p := defaultParams(t)
	req := Request{ISLTokens: 4096, BlockSize: 16}
	ctx := SelectionContext{Params: &p, Request: &req, Rand: RuntimeRand{}}
	cands := make([]Candidate, 64)
	for i := range cands {
		cands[i] = Candidate{DeviceBlocks: int64(i), HasLoad: true, ActivePrefillTokens: int64(100 * i), ActiveBlocks: int64(i), TotalKVBlocks: 4096}
	}
	costs := make([]float64, len(cands))
	pol := CacheBalancePolicy()
	if n := testing.AllocsPerRun(100, func() { _, _, _ = pol.Choose(&ctx, cands, costs, nil) }); n != 0 {
		t.Fatalf("cache_balance allocates %v times", n)
	}
}

// TestCacheBalanceOccupancyTokens: the memory-pressure terms measure a
// pool larger than OccupancyTokens against OccupancyTokens' worth of
// blocks (a decode step reads the KV its requests hold, whatever the
// pool's size), while Overflow counts against the registered pool; a
// pool below the cap, or a zero cap, is measured against itself. bs 16,
// isl 1,024, OccupancyTokens 16,000 (1,000 blocks).
func TestCacheBalanceOccupancyTokens(t *testing.T) {
	p := defaultParams(t)
	req := Request{ISLTokens: 1024, BlockSize: 16}
	ctx := SelectionContext{Params: &p, Request: &req}
	cands := []Candidate{
		{Worker: radix.WorkerKey{WorkerID: 1}, HasLoad: true, ActiveBlocks: 0, NewBlocks: 64, TotalKVBlocks: 4000},
		// 700 of 4,000 blocks: 17.5% of its pool, 70% of the cap's.
		{Worker: radix.WorkerKey{WorkerID: 2}, HasLoad: true, ActiveBlocks: 636, NewBlocks: 64, TotalKVBlocks: 4000},
		// 1,100 of 1,000: past its own pool (Overflow), 110% of the cap's.
		{Worker: radix.WorkerKey{WorkerID: 3}, HasLoad: true, ActiveBlocks: 1036, NewBlocks: 64, TotalKVBlocks: 1000},
	}
	out := make([]float64, len(cands))
	cb := DefaultCacheBalance()
	cb.OccupancyTokens = 16000
	cb.Score(&ctx, cands, out)
	u := 2 * 1040.0 / 8192 // twice the request's own prefill
	// The least occupied is 1 (0.064 of the cap); the floor 0.5 decides.
	want := []float64{u, u + 10*(0.7-0.5), u + 10*(1.1-0.5) + 50*0.1}
	for i := range want {
		if !near(out[i], want[i]) {
			t.Errorf("cap 16,000: candidate %d: cost %v, want %v", i+1, out[i], want[i])
		}
	}
	// Without the cap the large pools are measured against themselves:
	// candidate 2 is below the floor.
	cb.OccupancyTokens = 0
	cb.Score(&ctx, cands, out)
	want = []float64{u, u, u + 10*(1.1-0.5) + 50*0.1}
	for i := range want {
		if !near(out[i], want[i]) {
			t.Errorf("no cap: candidate %d: cost %v, want %v", i+1, out[i], want[i])
		}
	}
	// The default cap is 393,216 tokens: above these pools, so it leaves
	// them as they are.
	cb = DefaultCacheBalance()
	cb.Score(&ctx, cands, out)
	for i := range want {
		if !near(out[i], want[i]) {
			t.Errorf("default cap: candidate %d: cost %v, want %v", i+1, out[i], want[i])
		}
	}

	// Overflow counts against the registered pool: 1,100 of 4,000 blocks
	// is 110% of the cap's pool (pressure) but 27.5% of its own (no
	// overflow). And the band starts from the least occupied candidate on
	// the same scale: 600 and 800 of 4,000 are 0.6 and 0.8 of the cap's
	// pool, so the threshold is 0.65 and the second pays for 0.15 (on the
	// pools' own scale, 0.15 and 0.2, it would pay nothing).
	cb.OccupancyTokens = 16000
	cands = []Candidate{
		{Worker: radix.WorkerKey{WorkerID: 1}, HasLoad: true, ActiveBlocks: 1036, NewBlocks: 64, TotalKVBlocks: 4000},
		{Worker: radix.WorkerKey{WorkerID: 2}, HasLoad: true, ActiveBlocks: 536, NewBlocks: 64, TotalKVBlocks: 4000},
		{Worker: radix.WorkerKey{WorkerID: 3}, HasLoad: true, ActiveBlocks: 736, NewBlocks: 64, TotalKVBlocks: 4000},
	}
	cb.Score(&ctx, cands, out)
	want = []float64{u + 10*(1.1-0.65), u, u + 10*(0.8-0.65)}
	for i := range want {
		if !near(out[i], want[i]) {
			t.Errorf("pools of 4,000: candidate %d: cost %v, want %v", i+1, out[i], want[i])
		}
	}
}
