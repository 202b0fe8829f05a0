package sched

import (
	"math/rand/v2"
	"testing"

	"github.com/kvselect/kvselect/radix"
)

// Scripted scenarios pinning cache_balance's decisions, in the
// simulation's shape: block size 64, pools of 6,144 blocks, B 8,192 (not
// registered), prefill tracked.

const (
	scnBS   = 64
	scnPool = 6144
)

// scnChoose runs CacheBalancePolicy over cands and returns the picked
// worker id and the costs.
func scnChoose(t *testing.T, isl int64, cands []Candidate) (uint64, []float64) {
	t.Helper()
	p := defaultParams(t)
	if !p.TrackPrefillTokens {
		t.Fatal("the default configuration should track prefill")
	}
	req := Request{ISLTokens: isl, BlockSize: scnBS}
	ctx := SelectionContext{Params: &p, Request: &req, Rand: rand.New(rand.NewPCG(1, 2))}
	cs := append([]Candidate(nil), cands...)
	costs := make([]float64, len(cs))
	kept, i, err := CacheBalancePolicy().Choose(&ctx, cs, costs, nil)
	if err != nil {
		t.Fatal(err)
	}
	return kept[i].Worker.WorkerID, costs
}

// scnCand is an idle candidate of worker id with active blocks (booked
// by other requests) and the request's new blocks there.
func scnCand(id uint64, cachedBlocks, active, newBlocks int64) Candidate {
	return Candidate{Worker: radix.WorkerKey{WorkerID: id}, DeviceBlocks: cachedBlocks, HasLoad: true,
		ActiveBlocks: active, NewBlocks: newBlocks, TotalKVBlocks: scnPool}
}

// TestCacheBalanceContinuedTurnStays: a conversation's next turn (5,000
// tokens, 4,480 of them cached on worker 1) stays on its context under a
// moderate occupancy imbalance (worker 1's pool 40% booked, the others'
// 6%), which the rule before this one (occupancy charged from the least
// occupied plus the band) moved to an idle worker, prefilling the whole
// history again. It leaves only for time: a queue on worker 1 whose
// prefill outweighs the recompute of the 4,480 tokens, or memory pressure
// once worker 1's pool is past half and beyond the others' by more than
// the band.
func TestCacheBalanceContinuedTurnStays(t *testing.T) {
	const isl = 5000
	newBlocks := int64(isl / scnBS) // 78 full blocks
	holder := scnCand(1, 70, 2450, 8)
	cands := []Candidate{holder}
	for id := uint64(2); id <= 4; id++ {
		cands = append(cands, scnCand(id, 0, 300, newBlocks))
	}
	if w, costs := scnChoose(t, isl, cands); w != 1 {
		t.Fatalf("picked worker %d with costs %v, want 1: its context is cached and its pool 40%% booked", w, costs)
	}
	cb := DefaultCacheBalance()
	uh := (cb.eff(isl) - cb.eff(70*scnBS)) / defaultBatchedTokens
	uj := cb.eff(isl) / defaultBatchedTokens
	// The old rule's cost of worker 1 beat worker 2's by the occupancy
	// spread: it moved the turn.
	mh, mj := float64(2458)/scnPool, float64(300+78)/scnPool
	if old := 2*uh + cb.Spread*(mh-mj-cb.Band); !(old > 2*uj) {
		t.Fatalf("scenario too mild: the old rule's cost %v of the holder is not above %v", old, 2*uj)
	}

	// A queue on worker 1 moves the turn once Queue·q exceeds the
	// recompute 2·(u_j − u_h), about 1.17 steps, and not before: at Queue
	// 0.5, past about 19,000 tokens ahead.
	save := 2 * (uj - uh)
	for _, tc := range []struct {
		left  int64
		stays bool
	}{{6000, true}, {18000, true}, {20000, false}, {40000, false}} {
		c := append([]Candidate(nil), cands...)
		c[0].ActivePrefillTokens = tc.left
		q := float64(tc.left) / defaultBatchedTokens
		if stays := cb.Queue*q < save; stays != tc.stays {
			t.Fatalf("%d tokens ahead: Queue·q %v against the saving %v", tc.left, cb.Queue*q, save)
		}
		if w, costs := scnChoose(t, isl, c); (w == 1) != tc.stays {
			t.Fatalf("%d tokens of prefill ahead on worker 1: picked %d (costs %v), stays %v", tc.left, w, costs, tc.stays)
		}
	}

	// Memory pressure: worker 1's pool 70% booked, past half and beyond
	// the others': 10·(0.70 − 0.5) = 2 steps outweigh the 1.17 saved.
	c := append([]Candidate(nil), cands...)
	c[0].ActiveBlocks = 4300 - 8
	if w, costs := scnChoose(t, isl, c); w == 1 {
		t.Fatalf("worker 1 at 70%% occupancy kept the turn (costs %v)", costs)
	}
	// At 49% it keeps it: below the floor occupancy costs nothing.
	c[0].ActiveBlocks = 3000 - 8
	if w, costs := scnChoose(t, isl, c); w != 1 {
		t.Fatalf("worker 1 at 49%% occupancy lost the turn to %d (costs %v)", w, costs)
	}
}

// TestCacheBalanceMiss: a prompt no worker holds goes to the least prefill
// ahead, then to the least demand routed (R), not at random; the demand
// term breaks ties and never outweighs more than one cached block.
func TestCacheBalanceMiss(t *testing.T) {
	const isl = 3000
	nb := int64(isl / scnBS)
	mk := func(id uint64, left, routed, active int64) Candidate {
		c := scnCand(id, 0, active, nb)
		c.ActivePrefillTokens, c.RoutedPrefillTokens = left, routed
		return c
	}
	cands := []Candidate{
		mk(1, 2000, 0, 100),     // 2,000 tokens of prefill ahead, nothing routed yet
		mk(2, 0, 100_000, 100),  // idle, much demand routed
		mk(3, 0, 20_000, 1500),  // idle, least demand among the idle (its pool 25% booked: free below half)
		mk(4, 0, 30_000, 100),   // idle
		mk(5, 64, 20_000, 6000), // 64 tokens ahead, its pool 99% booked
	}
	w, costs := scnChoose(t, isl, cands)
	if w != 3 {
		t.Fatalf("picked worker %d with costs %v, want 3 (no prefill ahead, least demand)", w, costs)
	}
	cb := DefaultCacheBalance()
	u := cb.eff(isl) / defaultBatchedTokens
	block := 2.0 * scnBS / defaultBatchedTokens
	pool := float64(scnPool * scnBS)
	want := []float64{
		cb.Queue*2000/defaultBatchedTokens + 2*u,
		2*u + block*100_000/pool,
		2*u + block*20_000/pool,
		2*u + block*30_000/pool,
		cb.Queue*64/defaultBatchedTokens + 2*u + block*20_000/pool + 10*(float64(6000+nb)/scnPool-0.5),
	}
	for i := range want {
		if !near(costs[i], want[i]) {
			t.Fatalf("worker %d: cost %v, want %v", i+1, costs[i], want[i])
		}
	}

	// Demand ten pools beyond the least costs one block's worth, no more:
	// two cached blocks on that worker win the prompt.
	cands[1].RoutedPrefillTokens = 10 * scnPool * scnBS
	cands[1].DeviceBlocks = 2
	if w, costs := scnChoose(t, isl, cands); w != 2 {
		t.Fatalf("picked worker %d with costs %v, want 2 (two cached blocks outweigh any demand)", w, costs)
	}
	cands[1].DeviceBlocks = 0
	_, costs = scnChoose(t, isl, cands)
	if !near(costs[1], 2*u+block) {
		t.Fatalf("cost of a worker ten pools of demand ahead = %v, want %v (one block's worth)", costs[1], 2*u+block)
	}
}

// TestCacheBalanceLongPromptQueue: a 64k-token prompt whose first 48k
// tokens are cached on worker 1 does not pile onto it while worker 1 has
// a 130k-token prompt still to prefill (its queue, with that prompt's
// attention work, costs more than the 48k tokens save; 120k would not, at
// Queue 0.5); once worker 1's KV events show that prompt nearly
// computed, it stays.
func TestCacheBalanceLongPromptQueue(t *testing.T) {
	const isl = 65536
	cb := DefaultCacheBalance()
	holder := scnCand(1, 48*1024/scnBS, 130_000/scnBS, isl/scnBS-768)
	holder.ActivePrefillTokens = 130_000
	// The booked prompt's (query, key) pairs from position 0: n(n+1)/2.
	holder.PendingPrefillPairs = 130_000 * 130_001 / 2
	cands := []Candidate{holder, scnCand(2, 0, 100, isl/scnBS), scnCand(3, 0, 200, isl/scnBS)}
	// 2·(u_j − u_h): the prefill of the 48k cached tokens, twice.
	save := 2 * cb.eff(48*1024) / defaultBatchedTokens
	if q := cb.ahead(&holder) / defaultBatchedTokens; !(cb.Queue*q > save) {
		t.Fatalf("scenario: Queue·q %v does not exceed the saving %v", cb.Queue*q, save)
	}
	if w, costs := scnChoose(t, isl, cands); w == 1 {
		t.Fatalf("picked worker 1 with costs %v: its prefill left outweighs its cache", costs)
	}
	// 120k of the 130k computed: 10k tokens and their pairs are left.
	cands[0].ComputedPrefillTokens = 120_000
	cands[0].PendingPrefillPairs = (130_000*130_001 - 120_000*120_001) / 2
	if q := cb.ahead(&cands[0]) / defaultBatchedTokens; !(cb.Queue*q < save) {
		t.Fatalf("scenario: Queue·q %v is not below the saving %v", cb.Queue*q, save)
	}
	if w, costs := scnChoose(t, isl, cands); w != 1 {
		t.Fatalf("picked worker %d with costs %v, want 1: the prefill left on it is less than its cache saves", w, costs)
	}
}

// TestRoutedPrefill: R grows by every booking's prefill and is never
// taken back (completion, release), and saturates at
// MaxRoutedPrefillTokens.
func TestRoutedPrefill(t *testing.T) {
	cfg := DefaultConfig()
	w := NewWorkerLoad(wk(1, 0), &cfg)
	routed := func() int64 {
		var c Candidate
		w.Fill(&c, nil, true)
		return c.RoutedPrefillTokens
	}
	var a, b, z Slot
	must(t, a.Book(w, &Booking{PrefillTokens: 100}))
	must(t, b.Book(w, &Booking{PrefillTokens: 250}))
	must(t, z.Book(w, &Booking{}))
	if r := routed(); r != 350 {
		t.Fatalf("R = %d after bookings of 100, 250 and 0, want 350", r)
	}
	a.CompletePrefill()
	a.Release()
	b.Release()
	z.Release()
	if r := routed(); r != 350 {
		t.Fatalf("R = %d after completion and release, want 350 (the demand routed, kept)", r)
	}
	for range 3 {
		var s Slot
		must(t, s.Book(w, &Booking{PrefillTokens: MaxActivePrefillTokens}))
		s.Release()
	}
	var s Slot
	must(t, s.Book(w, &Booking{PrefillTokens: MaxRoutedPrefillTokens}))
	if r := routed(); r != MaxRoutedPrefillTokens {
		t.Fatalf("R = %d, want saturated at %d", r, int64(MaxRoutedPrefillTokens))
	}
	s.Release()
}
