package sched

import (
	"errors"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/kvselect/kvselect/radix"
)

// randomRows returns n candidate rows with random overlaps and loads, ties
// included (small ranges), for request req.
func randomRows(rng *rand.Rand, n int) []Candidate {
	cands := make([]Candidate, n)
	for i := range cands {
		c := &cands[i]
		c.Worker = radix.WorkerKey{WorkerID: uint64(i + 1)}
		c.DeviceBlocks = int64(rng.IntN(8))
		c.HostBlocks = int64(rng.IntN(3))
		c.HasLoad = rng.IntN(5) > 0
		c.ActivePrefillTokens = int64(rng.IntN(4)) * 64
		c.ActiveBlocks = int64(rng.IntN(4))
		c.NewBlocks = int64(rng.IntN(8))
		c.ActiveRequests = int64(rng.IntN(3))
		c.TaintMultiplier = []float64{0, 1, 0.5}[rng.IntN(3)]
	}
	return cands
}

// TestDefaultPolicyIsScoreThenPick: the default policy decides bit for
// bit as Score then Pick (the code it replaced in the host), over random
// rows, weights and temperatures, with two identically seeded sources.
func TestDefaultPolicyIsScoreThenPick(t *testing.T) {
	seed := testSeed(t)
	gen := rand.New(rand.NewPCG(seed, 1))
	a, b := rand.New(rand.NewPCG(seed, 2)), rand.New(rand.NewPCG(seed, 2))
	pol := DefaultSelectionPolicy()
	for it := range 5000 {
		p := defaultParams(t)
		p.OverlapScoreCreditDecay = []float64{0, 0.5}[gen.IntN(2)]
		p.Temperature = []float64{0, 0, 0.7}[gen.IntN(3)]
		p.TrackPrefillTokens = gen.IntN(4) > 0
		req := Request{ISLTokens: int64(1 + gen.IntN(512)), BlockSize: 16, WorkerType: WorkerType(gen.IntN(3))}
		cands := randomRows(gen, 1+gen.IntN(12))
		want := make([]float64, len(cands))
		Score(&p, &req, cands, want)
		wantPick := Pick(want, p.Temperature, a)

		costs := make([]float64, len(cands))
		ctx := SelectionContext{Params: &p, Request: &req, Rand: b}
		kept, got, err := pol.Choose(&ctx, cands, costs, nil)
		if err != nil || len(kept) != len(cands) {
			t.Fatalf("iteration %d: %v, %d rows kept of %d", it, err, len(kept), len(cands))
		}
		for i := range want {
			if math.Float64bits(costs[i]) != math.Float64bits(want[i]) {
				t.Fatalf("iteration %d: cost[%d] %v, Score %v", it, i, costs[i], want[i])
			}
		}
		if got != wantPick {
			t.Fatalf("iteration %d: picked %d, Score then Pick %d (costs %v)", it, got, wantPick, want)
		}
	}
}

// dropWorker keeps every row but one worker's.
type dropWorker uint64

func (d dropWorker) Keep(_ *SelectionContext, c *Candidate) bool {
	return c.Worker.WorkerID != uint64(d)
}

// constScorer adds v[worker id] to each row's cost.
type constScorer map[uint64]float64

func (s constScorer) Score(_ *SelectionContext, cands []Candidate, out []float64) {
	for i := range cands {
		out[i] = s[cands[i].Worker.WorkerID]
	}
}

// fixedPicker returns a fixed row.
type fixedPicker int

func (f fixedPicker) Pick(*SelectionContext, []Candidate, []float64) int { return int(f) }

func TestPolicyChoose(t *testing.T) {
	p := defaultParams(t)
	req := Request{ISLTokens: 64, BlockSize: 16}
	ctx := SelectionContext{Params: &p, Request: &req, Rand: rand.New(rand.NewPCG(1, 2))}
	rows := func() []Candidate {
		return []Candidate{{Worker: radix.WorkerKey{WorkerID: 1}}, {Worker: radix.WorkerKey{WorkerID: 2}}, {Worker: radix.WorkerKey{WorkerID: 3}}}
	}
	costs, part := make([]float64, 3), make([]float64, 3)

	// Filters compact in order; two scorers are summed; the picker sees
	// the kept rows.
	pol := &SelectionPolicy{Name: "t", Filters: []Filter{dropWorker(2)},
		Scorers: []Scorer{constScorer{1: 5, 3: 1}, constScorer{1: -1, 3: 10}}, Picker: DefaultPicker{}}
	if err := pol.Validate(); err != nil {
		t.Fatal(err)
	}
	kept, i, err := pol.Choose(&ctx, rows(), costs, part)
	if err != nil || len(kept) != 2 || kept[0].Worker.WorkerID != 1 || kept[1].Worker.WorkerID != 3 {
		t.Fatalf("kept %v, err %v", kept, err)
	}
	if costs[0] != 4 || costs[1] != 11 || i != 0 {
		t.Fatalf("costs %v, pick %d; want [4 11], 0", costs[:2], i)
	}

	// Every row filtered out.
	all := &SelectionPolicy{Name: "t", Filters: []Filter{dropWorker(1), dropWorker(2), dropWorker(3)}, Scorers: []Scorer{DefaultScorer{}}, Picker: DefaultPicker{}}
	if _, _, err := all.Choose(&ctx, rows(), costs, part); !errors.Is(err, ErrAllFiltered) {
		t.Fatalf("all filtered: %v", err)
	}
	// A picker out of range is an error, not a panic.
	bad := &SelectionPolicy{Name: "t", Scorers: []Scorer{DefaultScorer{}}, Picker: fixedPicker(3)}
	if _, _, err := bad.Choose(&ctx, rows(), costs, part); err == nil {
		t.Fatal("picker out of range accepted")
	}

	for _, pol := range []*SelectionPolicy{nil, {Scorers: []Scorer{DefaultScorer{}}, Picker: DefaultPicker{}}, {Name: "x", Picker: DefaultPicker{}},
		{Name: "x", Scorers: []Scorer{DefaultScorer{}}}, {Name: "x", Scorers: []Scorer{nil}, Picker: DefaultPicker{}},
		{Name: "x", Filters: []Filter{nil}, Scorers: []Scorer{DefaultScorer{}}, Picker: DefaultPicker{}}} {
		if err := pol.Validate(); !errors.Is(err, ErrInvalidConfig) {
			t.Errorf("%+v: Validate = %v", pol, err)
		}
	}
	for _, name := range []string{SelectionDefault, SelectionCacheBalance} {
		if pol := BuiltinSelectionPolicy(name); pol == nil || pol.Name != name || pol.Validate() != nil {
			t.Errorf("built-in %q: %+v", name, pol)
		}
	}
}

// TestPolicyChooseAllocs: running the default policy allocates nothing.
func TestPolicyChooseAllocs(t *testing.T) {
	if raceEnabled {
		t.Skip("allocation counts need a non-race run")
	}
	p := defaultParams(t)
	req := Request{ISLTokens: 512, BlockSize: 16}
	ctx := SelectionContext{Params: &p, Request: &req, Rand: RuntimeRand{}}
	cands := randomRows(rand.New(rand.NewPCG(1, 2)), 64)
	costs := make([]float64, len(cands))
	pol := DefaultSelectionPolicy()
	if n := testing.AllocsPerRun(100, func() { _, _, _ = pol.Choose(&ctx, cands, costs, nil) }); n != 0 {
		t.Fatalf("Choose allocates %v times", n)
	}
}
