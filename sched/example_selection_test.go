package sched_test

import (
	"fmt"
	"math/rand/v2"

	"github.com/kvselect/kvselect/radix"
	"github.com/kvselect/kvselect/sched"
)

// kvHeadroom drops workers whose booked blocks would exceed a share of
// their registered KV pool.
type kvHeadroom struct{ maxShare float64 }

func (f kvHeadroom) Keep(_ *sched.SelectionContext, c *sched.Candidate) bool {
	if c.TotalKVBlocks == 0 {
		return true // capacity not registered: keep
	}
	return float64(c.ActiveBlocks+c.NewBlocks) <= f.maxShare*float64(c.TotalKVBlocks)
}

// longestPrefix prefers the deepest device-tier match: a cost of minus the
// matched blocks.
type longestPrefix struct{}

func (longestPrefix) Score(_ *sched.SelectionContext, cands []sched.Candidate, out []float64) {
	for i := range cands {
		out[i] = -float64(cands[i].DeviceBlocks)
	}
}

// A custom policy: a filter, two scorers whose costs are summed (the
// reference's cost function and a prefix preference) and the reference's
// picker. A host runs it with SelectionPolicy.Choose over the rows it filled; core
// takes it in core.Config.SelectionPolicy or PartitionSelectionPolicies,
// or lets requests name it (router_config_override.routing_policy)
// through Config.SelectionPolicies.
func ExampleSelectionPolicy() {
	pol := &sched.SelectionPolicy{
		Name:    "prefix_with_headroom",
		Filters: []sched.Filter{kvHeadroom{maxShare: 0.9}},
		Scorers: []sched.Scorer{sched.DefaultScorer{}, longestPrefix{}},
		Picker:  sched.DefaultPicker{},
	}
	if err := pol.Validate(); err != nil {
		panic(err)
	}
	cfg := sched.DefaultConfig()
	params, _ := cfg.Resolve(nil)
	req := sched.Request{ISLTokens: 1024, BlockSize: 16} // 64 blocks
	cands := []sched.Candidate{
		// Worker 1 holds the whole prompt but its pool is nearly full.
		{Worker: radix.WorkerKey{WorkerID: 1}, DeviceBlocks: 64, HasLoad: true, ActiveBlocks: 980, TotalKVBlocks: 1000},
		{Worker: radix.WorkerKey{WorkerID: 2}, DeviceBlocks: 32, HasLoad: true, ActiveBlocks: 100, NewBlocks: 32, TotalKVBlocks: 1000},
		{Worker: radix.WorkerKey{WorkerID: 3}, HasLoad: true, ActivePrefillTokens: 512, NewBlocks: 64, TotalKVBlocks: 1000},
	}
	ctx := sched.SelectionContext{Params: &params, Request: &req, Rand: rand.New(rand.NewPCG(1, 2))}
	costs, part := make([]float64, len(cands)), make([]float64, len(cands))
	kept, i, err := pol.Choose(&ctx, cands, costs, part)
	if err != nil {
		panic(err)
	}
	for j := range kept {
		fmt.Printf("worker %d cost %.0f\n", kept[j].Worker.WorkerID, costs[j])
	}
	fmt.Println("picked worker", kept[i].Worker.WorkerID)
	// Output:
	// worker 2 cost 132
	// worker 3 cost 160
	// picked worker 2
}
