package sched

import (
	"errors"
	"math"
	"math/rand/v2"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/kvselect/kvselect/radix"
)

func defaultParams(t testing.TB) Params {
	t.Helper()
	cfg := DefaultConfig()
	p, err := cfg.Resolve(nil)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// TestWorkedExample is spec 2.3's worked example: bs 16, isl 512, default
// weights; B is selected with logit 308 against A's 388, and B's
// effective_prefill_tokens is 416.
func TestWorkedExample(t *testing.T) {
	p := defaultParams(t)
	req := Request{ISLTokens: 512, BlockSize: 16}
	cands := []Candidate{
		{Worker: radix.WorkerKey{WorkerID: 1}, DeviceBlocks: 20, HasLoad: true, ActivePrefillTokens: 1024, ActiveBlocks: 300, NewBlocks: 12},
		{Worker: radix.WorkerKey{WorkerID: 2}, HostBlocks: 8, HasLoad: true, ActivePrefillTokens: 0, ActiveBlocks: 250, NewBlocks: 32},
	}
	costs := make([]float64, 2)
	Score(&p, &req, cands, costs)
	if costs[0] != 388 || costs[1] != 308 {
		t.Fatalf("logits = %v, want [388 308]", costs)
	}
	if i := Pick(costs, 0, rand.New(rand.NewPCG(1, 2))); i != 1 {
		t.Fatalf("picked %d, want 1 (worker B)", i)
	}
	if got := EffectivePrefillTokens(req.ISLTokens, CachedTokens(&p, req.BlockSize, &cands[1])); got != 416 {
		t.Fatalf("B effective_prefill_tokens = %d, want 416", got)
	}
	if got := CachedTokens(&p, req.BlockSize, &cands[0]); got != 320 {
		t.Fatalf("A cached tokens = %d, want 320", got)
	}
}

// TestScoreTerms checks each term of the logit on its own.
func TestScoreTerms(t *testing.T) {
	base := func() Params {
		p := defaultParams(t)
		return p
	}
	type tc struct {
		name string
		p    func() Params
		req  Request
		c    Candidate
		want float64
	}
	req := Request{ISLTokens: 160, BlockSize: 16} // 10 blocks
	tests := []tc{
		{"prefill only, no load", base, req, Candidate{}, 10},
		{"prefill with load", base, req, Candidate{HasLoad: true, ActivePrefillTokens: 32}, 12},
		{"no tracking: prefill 0", func() Params { p := base(); p.TrackPrefillTokens = false; return p }, req, Candidate{HasLoad: true, ActivePrefillTokens: 32, DeviceBlocks: 3}, 0},
		{"device credit", base, req, Candidate{HasLoad: true, DeviceBlocks: 4}, 6},
		{"credit scaled by c", func() Params { p := base(); p.OverlapScoreCredit = 0.5; return p }, req, Candidate{HasLoad: true, DeviceBlocks: 4}, 8},
		{"host weight 0.75", base, req, Candidate{HasLoad: true, HostBlocks: 4}, 7},
		{"disk weight 0.25", base, req, Candidate{HasLoad: true, DiskBlocks: 4}, 9},
		{"shared multiplier", func() Params { p := base(); p.SharedCacheMultiplier = 0.5; return p }, req, Candidate{HasLoad: true, SharedBeyondDeviceBlocks: 4}, 8},
		{"clamp at zero", base, req, Candidate{HasLoad: true, DeviceBlocks: 30}, 0},
		{"cached beyond isl counts in raw", base, req, Candidate{HasLoad: true, DeviceBlocks: 12}, 0},
		{"prefill scale", func() Params { p := base(); p.PrefillLoadScale = 2; return p }, req, Candidate{HasLoad: true, DeviceBlocks: 4}, 12},
		{"decode blocks", base, req, Candidate{HasLoad: true, DeviceBlocks: 10, ActiveBlocks: 7, NewBlocks: 3}, 10},
		{"active request weight 0 by default", base, req, Candidate{HasLoad: true, DeviceBlocks: 10, ActiveRequests: 5}, 0},
		{"active request weight", func() Params { p := base(); p.DecodeActiveRequestWeight = 1.5; return p }, req, Candidate{HasLoad: true, DeviceBlocks: 10, ActiveRequests: 4}, 6},
		{"taint multiplier", base, req, Candidate{TaintMultiplier: 0.5}, 5},
		{"decode variant", func() Params { p := base(); p.TrackPrefillTokens = false; return p }, Request{ISLTokens: 160, BlockSize: 16, WorkerType: WorkerDecode}, Candidate{HasLoad: true, DeviceBlocks: 4, ActiveBlocks: 10, NewBlocks: 6}, 12},
		{"decode variant clamps", func() Params { p := base(); p.TrackPrefillTokens = false; return p }, Request{ISLTokens: 160, BlockSize: 16, WorkerType: WorkerDecode}, Candidate{HasLoad: true, DeviceBlocks: 40, ActiveBlocks: 10, ActiveRequests: 2}, 0},
		{"decode type, c = 0: default formula", func() Params { p := base(); p.TrackPrefillTokens = false; p.OverlapScoreCredit = 0; return p }, Request{ISLTokens: 160, BlockSize: 16, WorkerType: WorkerDecode}, Candidate{HasLoad: true, DeviceBlocks: 4, ActiveBlocks: 10, NewBlocks: 6}, 16},
		{"decode type, tracking prefill: default formula", base, Request{ISLTokens: 160, BlockSize: 16, WorkerType: WorkerDecode}, Candidate{HasLoad: true, DeviceBlocks: 4, ActiveBlocks: 10}, 16},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := tt.p()
			out := []float64{0}
			Score(&p, &tt.req, []Candidate{tt.c}, out)
			if math.Abs(out[0]-tt.want) > 1e-9 {
				t.Fatalf("logit = %v, want %v", out[0], tt.want)
			}
		})
	}
}

// TestOverlapCreditDecay: the least-loaded candidate keeps full device
// credit; one with one request's worth of excess prefill gets 1/(1+k).
func TestOverlapCreditDecay(t *testing.T) {
	p := defaultParams(t)
	p.OverlapScoreCreditDecay = 1
	req := Request{ISLTokens: 160, BlockSize: 16}
	cands := []Candidate{
		{HasLoad: true, ActivePrefillTokens: 16, DeviceBlocks: 8},  // min A_p: decay 1
		{HasLoad: true, ActivePrefillTokens: 176, DeviceBlocks: 8}, // excess 10 blocks = 1 request: decay 1/2
	}
	out := make([]float64, 2)
	Score(&p, &req, cands, out)
	// raw: (16+160)/16 = 11 and (176+160)/16 = 21; credit 8 and 4.
	if out[0] != 3 || out[1] != 17 {
		t.Fatalf("logits = %v, want [3 17]", out)
	}
	p.TrackPrefillTokens = false // decay only with prefill tracking
	Score(&p, &req, cands, out)
	if out[0] != 0 || out[1] != 0 {
		t.Fatalf("untracked logits = %v, want [0 0]", out)
	}
}

func TestPotentialLoads(t *testing.T) {
	p := defaultParams(t)
	req := Request{ISLTokens: 100, BlockSize: 16} // 7 blocks, 6 full
	cands := []Candidate{
		{Worker: radix.WorkerKey{WorkerID: 1}, HasLoad: true, DeviceBlocks: 2, ActivePrefillTokens: 50, ActiveBlocks: 9, ActiveRequests: 3, NewBlocks: 4},
		{Worker: radix.WorkerKey{WorkerID: 2}, NewBlocks: 6},
		{Worker: radix.WorkerKey{WorkerID: 3}, HasLoad: true, DeviceBlocks: 9},
	}
	out := make([]PotentialLoad, 3)
	PotentialLoads(&p, &req, cands, out)
	want := []PotentialLoad{
		{cands[0].Worker, 50 + 100 - 32, 13, 3},
		{cands[1].Worker, 100, 6, 0},
		{cands[2].Worker, 0, 0, 0},
	}
	for i := range want {
		if out[i] != want[i] {
			t.Errorf("row %d = %+v, want %+v", i, out[i], want[i])
		}
	}
	p.TrackPrefillTokens = false
	PotentialLoads(&p, &req, cands, out)
	if out[0].PrefillTokens != 50 || out[1].PrefillTokens != 0 {
		t.Errorf("untracked prefill = %d, %d; want 50, 0", out[0].PrefillTokens, out[1].PrefillTokens)
	}
	if got := SelectedDecodeBlocks(&req, &cands[0], 6); got != 14 {
		t.Errorf("SelectedDecodeBlocks = %d, want 9+4+1 = 14", got)
	}
}

func TestEffectivePrefillTokens(t *testing.T) {
	for _, tt := range []struct{ isl, cached, want int64 }{
		{512, 0, 512}, {512, 96, 416}, {512, 512, 0}, {512, 900, 0}, {512, -5, 512},
	} {
		if got := EffectivePrefillTokens(tt.isl, tt.cached); got != tt.want {
			t.Errorf("EffectivePrefillTokens(%d, %d) = %d, want %d", tt.isl, tt.cached, got, tt.want)
		}
	}
	p := defaultParams(t)
	// Rounding: 0.25·1 block × 10 tokens = 2.5 → 3 (half away from zero).
	if got := CachedTokens(&p, 10, &Candidate{DiskBlocks: 1}); got != 3 {
		t.Errorf("CachedTokens rounding = %d, want 3", got)
	}
}

// referenceLogit is a straight transcription of spec 2.2-2.3, written
// independently of Score for the differential test.
func referenceLogit(p Params, req Request, all []Candidate, i int) float64 {
	bs := float64(req.BlockSize)
	isl := float64(req.ISLTokens)
	requestBlocks := math.Ceil(isl / bs)
	c := all[i]
	cachedW := math.Max(0, math.Round((float64(c.DeviceBlocks)+p.HostCacheHitWeight*float64(c.HostBlocks)+p.DiskCacheHitWeight*float64(c.DiskBlocks))*bs))

	rawPrefill := 0.0
	if p.TrackPrefillTokens {
		if c.HasLoad {
			rawPrefill = (float64(c.ActivePrefillTokens) + (isl - math.Min(cachedW, isl)) + cachedW) / bs
		} else {
			rawPrefill = isl / bs
		}
	}
	decay := 1.0
	if p.TrackPrefillTokens && p.OverlapScoreCreditDecay > 0 {
		ap := func(c Candidate) float64 {
			if c.HasLoad {
				return float64(c.ActivePrefillTokens)
			}
			return 0
		}
		minAp := math.Inf(1)
		for _, o := range all {
			minAp = math.Min(minAp, ap(o))
		}
		excessBlocks := (ap(c) - minAp) / bs
		norm := excessBlocks / requestBlocks
		decay = 1 / (1 + p.OverlapScoreCreditDecay*norm)
	}
	credit := p.OverlapScoreCredit*decay*float64(c.DeviceBlocks) + p.HostCacheHitWeight*float64(c.HostBlocks) +
		p.DiskCacheHitWeight*float64(c.DiskBlocks) + p.SharedCacheMultiplier*float64(c.SharedBeyondDeviceBlocks)
	decodeCost := float64(c.ActiveBlocks) + float64(c.NewBlocks)
	activeCost := p.DecodeActiveRequestWeight * float64(c.ActiveRequests)
	var logit float64
	if req.WorkerType == WorkerDecode && !p.TrackPrefillTokens && p.OverlapScoreCredit > 0 {
		logit = math.Max(0, decodeCost-credit) + activeCost
	} else {
		logit = p.PrefillLoadScale*math.Max(0, rawPrefill-credit) + decodeCost + activeCost
	}
	if c.TaintMultiplier != 0 {
		logit *= c.TaintMultiplier
	}
	return logit
}

// TestScoreMatchesReference compares Score with referenceLogit over random
// parameters and candidates. The seed is logged; SCHED_SEED=<seed> replays it.
func TestScoreMatchesReference(t *testing.T) {
	seed := testSeed(t)
	rng := rand.New(rand.NewPCG(seed, 0x5c4ed))
	fl := func(max float64) float64 {
		if rng.IntN(4) == 0 {
			return 0
		}
		return rng.Float64() * max
	}
	out := make([]float64, 64)
	for iter := 0; iter < 2000; iter++ {
		p := Params{
			OverlapScoreCredit:        fl(2),
			OverlapScoreCreditDecay:   fl(4),
			PrefillLoadScale:          fl(3),
			DecodeActiveRequestWeight: fl(2),
			HostCacheHitWeight:        fl(1),
			DiskCacheHitWeight:        fl(1),
			SharedCacheMultiplier:     fl(1),
			TrackPrefillTokens:        rng.IntN(4) != 0,
		}
		req := Request{ISLTokens: 1 + rng.Int64N(20000), BlockSize: []int64{1, 16, 32, 64}[rng.IntN(4)], WorkerType: WorkerType(rng.IntN(3))}
		cands := make([]Candidate, 1+rng.IntN(64))
		for i := range cands {
			cands[i] = Candidate{
				DeviceBlocks:             rng.Int64N(400),
				HostBlocks:               rng.Int64N(100),
				DiskBlocks:               rng.Int64N(100),
				SharedBeyondDeviceBlocks: rng.Int64N(50),
				HasLoad:                  rng.IntN(5) != 0,
				ActivePrefillTokens:      rng.Int64N(100000),
				ActiveBlocks:             rng.Int64N(50000),
				ActiveRequests:           rng.Int64N(300),
				NewBlocks:                rng.Int64N(500),
			}
			if rng.IntN(3) == 0 {
				cands[i].TaintMultiplier = TaintMultiplier(rng.Float64()*4 - 2)
			}
		}
		Score(&p, &req, cands, out)
		for i := range cands {
			want := referenceLogit(p, req, cands, i)
			if diff := math.Abs(out[i] - want); diff > 1e-9*math.Max(1, math.Abs(want)) {
				t.Fatalf("seed %d iter %d cand %d: Score %v, reference %v\nparams %+v\nreq %+v\ncand %+v", seed, iter, i, out[i], want, p, req, cands[i])
			}
		}
	}
}

func candidates64() []Candidate {
	rng := rand.New(rand.NewPCG(7, 7))
	cands := make([]Candidate, 64)
	for i := range cands {
		cands[i] = Candidate{
			Worker:              radix.WorkerKey{WorkerID: uint64(i / 4), DPRank: uint32(i % 4)},
			DeviceBlocks:        rng.Int64N(32),
			HostBlocks:          rng.Int64N(8),
			HasLoad:             true,
			ActivePrefillTokens: rng.Int64N(8192),
			ActiveBlocks:        rng.Int64N(4096),
			ActiveRequests:      rng.Int64N(64),
			NewBlocks:           rng.Int64N(32),
			TaintMultiplier:     1,
		}
	}
	return cands
}

// TestScoreAndPickAllocateNothing asserts the hot path's zero allocations.
func TestScoreAndPickAllocateNothing(t *testing.T) {
	p := defaultParams(t)
	p.OverlapScoreCreditDecay = 0.5
	req := Request{ISLTokens: 512, BlockSize: 16}
	cands := candidates64()
	out := make([]float64, len(cands))
	rng := rand.New(rand.NewPCG(1, 1))
	if n := testing.AllocsPerRun(100, func() {
		Score(&p, &req, cands, out)
		Pick(out, 0, rng)
		Pick(out, 0.5, rng)
		Pick(out, 0, RuntimeRand{})
	}); n != 0 {
		t.Fatalf("Score+Pick allocate %v times per run, want 0", n)
	}
}

// BenchmarkScore64 scores 64 candidates (target: <= 2 µs, 0 allocs), with
// the default config and with overlap-credit decay on.
func BenchmarkScore64(b *testing.B) {
	for _, k := range []float64{0, 0.5} {
		name := "default"
		if k > 0 {
			name = "decay"
		}
		b.Run(name, func(b *testing.B) {
			p := defaultParams(b)
			p.OverlapScoreCreditDecay = k
			req := Request{ISLTokens: 512, BlockSize: 16}
			cands := candidates64()
			out := make([]float64, len(cands))
			b.ReportAllocs()
			for b.Loop() {
				Score(&p, &req, cands, out)
			}
		})
	}
}

// BenchmarkScorePick64 is Score plus a temperature-0 Pick.
func BenchmarkScorePick64(b *testing.B) {
	p := defaultParams(b)
	req := Request{ISLTokens: 512, BlockSize: 16}
	cands := candidates64()
	out := make([]float64, len(cands))
	rng := rand.New(rand.NewPCG(1, 1))
	b.ReportAllocs()
	for b.Loop() {
		Score(&p, &req, cands, out)
		Pick(out, 0, rng)
	}
}

// testSeed returns $SCHED_SEED or a fresh seed, and logs it.
func testSeed(t testing.TB) uint64 {
	t.Helper()
	seed := uint64(time.Now().UnixNano())
	if s := os.Getenv("SCHED_SEED"); s != "" {
		v, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			t.Fatalf("SCHED_SEED: %v", err)
		}
		seed = v
	}
	t.Logf("seed %d (replay with SCHED_SEED=%d)", seed, seed)
	return seed
}

// TestRequestValidate covers ErrInvalidRequest (400) and request_blocks.
func TestRequestValidate(t *testing.T) {
	for _, tt := range []struct {
		req    Request
		ok     bool
		blocks int64
	}{
		{Request{ISLTokens: 512, BlockSize: 16}, true, 32},
		{Request{ISLTokens: 513, BlockSize: 16}, true, 33},
		{Request{ISLTokens: 1, BlockSize: 64}, true, 1},
		{Request{ISLTokens: 0, BlockSize: 16}, false, 0},
		{Request{ISLTokens: -1, BlockSize: 16}, false, 0},
		{Request{ISLTokens: 16, BlockSize: 0}, false, 0},
	} {
		err := tt.req.Validate()
		if tt.ok {
			if err != nil || tt.req.RequestBlocks() != tt.blocks {
				t.Errorf("%+v: err %v, blocks %d; want nil, %d", tt.req, err, tt.req.RequestBlocks(), tt.blocks)
			}
			continue
		}
		if !errors.Is(err, ErrInvalidRequest) {
			t.Errorf("%+v: err %v, want ErrInvalidRequest", tt.req, err)
		}
	}
}
