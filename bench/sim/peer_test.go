package sim

import (
	"context"
	"reflect"
	"testing"

	"github.com/kvselect/kvselect/bench"
)

// TestPeerPoliciesRun runs every peer policy through the loop on a small
// chat workload twice: every request completes, the run is deterministic
// for the seed, and every prefix-affine peer hits the cache more often
// than round-robin (the ticker drives llm-d's scrapes).
func TestPeerPoliciesRun(t *testing.T) {
	load, cfg, w := syntheticWorkload(t, 4, "synthetic:chat", 300, 512)
	w.arrange(&Level{ArrivalRPS: 20}, &cfg, load.Seed)
	rr, err := simulatePolicy(context.Background(), PolicyRoundRobin, "", &load, &cfg, w)
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range PeerPolicies {
		var first *PolicyResult
		for range 2 {
			res, err := simulatePolicy(context.Background(), name, "", &load, &cfg, w)
			if err != nil {
				t.Fatal(err)
			}
			if res.Completed != len(w.reqs) {
				t.Fatalf("%s: %d of %d completed", name, res.Completed, len(w.reqs))
			}
			if first == nil {
				first = res
			} else if !reflect.DeepEqual(first, res) {
				t.Fatalf("%s not deterministic", name)
			}
		}
		if name != PolicyAIBrix && first.HitRate <= rr.HitRate {
			t.Errorf("%s hit rate %.3f, round-robin's %.3f", name, first.HitRate, rr.HitRate)
		}
	}
}

// TestPooledBound: the pooled bound equals the unbounded one when the
// pool holds every request, and falls when a request between two that
// share a prefix evicts it (vllm.Replay: the engines' eviction order).
func TestPooledBound(t *testing.T) {
	_, _, w := testWorkload(t, 1, fourRequests)
	w.arrange(&Level{TimeScale: 1}, &Config{}, 1)
	if b := w.pooledBound(64, 1000); !near(b, w.hitRateBound(64)) {
		t.Fatalf("large pool: %v, want the unbounded bound %v", b, w.hitRateBound(64))
	}
	big := []bench.TraceRecord{
		{Timestamp: 0, InputLength: 2048, OutputLength: 1, HashIDs: []uint64{1, 2, 3, 4}},
		{Timestamp: 1, InputLength: 2048, OutputLength: 1, HashIDs: []uint64{5, 6, 7, 8}},
		{Timestamp: 2, InputLength: 2048, OutputLength: 1, HashIDs: []uint64{1, 2, 3, 4}},
	}
	_, _, w = testWorkload(t, 1, big)
	w.arrange(&Level{TimeScale: 1}, &Config{}, 1)
	// 33 blocks a request (32 full ones cached). A pool of 64 loses only
	// the first's last block to the second (31 blocks free, then the
	// first's blocks tail first): the third hits 31, as unbounded. A pool
	// of 40 keeps the first's blocks 0-6 only (7 free, then 26 of its 33
	// from the tail): the third hits 7.
	if b, u := w.pooledBound(64, 64), w.hitRateBound(64); !near(b, 31.0/96) || !near(u, 31.0/96) {
		t.Fatalf("pool of 64: %v, unbounded %v, want 31/96 both", b, u)
	}
	if b := w.pooledBound(64, 40); !near(b, 7.0/96) {
		t.Fatalf("pool of 40: %v, want 7/96", b)
	}
}
