package sched

import (
	"errors"
	"math"
	"testing"

	"github.com/kvselect/kvselect/radix"
)

func TestAppendCandidates(t *testing.T) {
	workers := []Worker{
		{ID: 1, DPStart: 0, DPSize: 2, Taints: []string{"gpu:h100", "zone:a"}},
		{ID: 2, DPStart: 4, DPSize: 3, Taints: []string{"zone:b"}},
		{ID: 3, DPStart: 0, DPSize: 1, Overloaded: true},
	}
	keys := func(cs []Candidate) []radix.WorkerKey {
		var ks []radix.WorkerKey
		for _, c := range cs {
			ks = append(ks, c.Worker)
		}
		return ks
	}
	k := func(id uint64, r uint32) radix.WorkerKey { return radix.WorkerKey{WorkerID: id, DPRank: r} }

	got, err := AppendCandidates(nil, workers, &Constraints{})
	if err != nil {
		t.Fatal(err)
	}
	want := []radix.WorkerKey{k(1, 0), k(1, 1), k(2, 4), k(2, 5), k(2, 6)}
	if ks := keys(got); len(ks) != len(want) {
		t.Fatalf("candidates %v, want %v (every rank in [start, start+size), overloaded dropped)", ks, want)
	} else {
		for i := range ks {
			if ks[i] != want[i] {
				t.Fatalf("candidates %v, want %v", ks, want)
			}
		}
	}
	for _, c := range got {
		if c.TaintMultiplier != 1 {
			t.Fatalf("multiplier %v without preferred taints", c.TaintMultiplier)
		}
	}

	got, _ = AppendCandidates(nil, workers, &Constraints{AllowedWorkerIDs: []uint64{2}})
	if len(got) != 3 || got[0].Worker.WorkerID != 2 {
		t.Fatalf("allowed set: %v", keys(got))
	}
	got, _ = AppendCandidates(nil, workers, &Constraints{RequiredTaints: []string{"zone:a", "gpu:h100"}})
	if len(got) != 2 || got[0].Worker.WorkerID != 1 {
		t.Fatalf("required taints: %v", keys(got))
	}
	got, _ = AppendCandidates(nil, workers, &Constraints{PreferredTaints: []PreferredTaint{{"zone:a", 0.5}, {"gpu:h100", 0.25}, {"zone:c", 9}}})
	if m := got[0].TaintMultiplier; math.Abs(m-math.Exp(-math.Tanh(0.75))) > 1e-15 {
		t.Fatalf("preferred multiplier %v", m)
	}
	if m := got[2].TaintMultiplier; m != 1 {
		t.Fatalf("unmatched multiplier %v, want 1", m)
	}
	if lo, hi := TaintMultiplier(100), TaintMultiplier(-100); math.Abs(lo-1/math.E) > 1e-12 || math.Abs(hi-math.E) > 1e-12 {
		t.Fatalf("multiplier range [%v, %v], want [1/e, e]", lo, hi)
	}

	pin := k(2, 5)
	got, err = AppendCandidates(nil, workers, &Constraints{Pinned: &pin, PreferredTaints: []PreferredTaint{{"zone:b", 1}}})
	if err != nil || len(got) != 1 || got[0].Worker != pin || got[0].TaintMultiplier != 1 {
		t.Fatalf("pinned: %v %v", got, err)
	}
}

func TestAppendCandidatesErrors(t *testing.T) {
	workers := []Worker{
		{ID: 1, DPStart: 0, DPSize: 2, Taints: []string{"a"}},
		{ID: 2, DPStart: 0, DPSize: 1, Overloaded: true},
	}
	pin := func(id uint64, r uint32) *radix.WorkerKey { return &radix.WorkerKey{WorkerID: id, DPRank: r} }
	for _, tt := range []struct {
		name    string
		workers []Worker
		c       Constraints
		want    error
	}{
		{"no workers", nil, Constraints{}, ErrNoEndpoints},
		{"allowed set excludes all", workers, Constraints{AllowedWorkerIDs: []uint64{9}}, ErrNoEndpoints},
		{"missing required taint", workers, Constraints{RequiredTaints: []string{"b"}}, ErrNoEndpoints},
		{"all overloaded", workers, Constraints{AllowedWorkerIDs: []uint64{2}}, ErrAllOverloaded},
		// Pins follow Dynamo's validate_pinned_worker_allowed then
		// validate_worker_rank: only the allow-set is a 400; any other
		// rank-validation failure but overload is NoEndpoints.
		{"pinned outside allowed set", workers, Constraints{AllowedWorkerIDs: []uint64{2}, Pinned: pin(1, 0)}, ErrPinnedNotAllowed},
		{"pinned unknown and outside allowed set", workers, Constraints{AllowedWorkerIDs: []uint64{2}, Pinned: pin(7, 0)}, ErrPinnedNotAllowed},
		{"pinned overloaded and outside allowed set", workers, Constraints{AllowedWorkerIDs: []uint64{1}, Pinned: pin(2, 0)}, ErrPinnedNotAllowed},
		{"pinned unknown", workers, Constraints{Pinned: pin(7, 0)}, ErrNoEndpoints},
		{"pinned rank out of range", workers, Constraints{Pinned: pin(1, 2)}, ErrNoEndpoints},
		{"pinned lacks required taint", workers, Constraints{RequiredTaints: []string{"b"}, Pinned: pin(1, 0)}, ErrNoEndpoints},
		{"pinned overloaded, rank out of range", workers, Constraints{Pinned: pin(2, 1)}, ErrNoEndpoints},
		{"pinned overloaded", workers, Constraints{Pinned: pin(2, 0)}, ErrPinnedOverloaded},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, err := AppendCandidates(nil, tt.workers, &tt.c)
			if !errors.Is(err, tt.want) {
				t.Fatalf("err = %v, want %v", err, tt.want)
			}
		})
	}
}

func TestAppendCandidatesAllocatesNothing(t *testing.T) {
	workers := make([]Worker, 16)
	for i := range workers {
		workers[i] = Worker{ID: uint64(i), DPSize: 4, Taints: []string{"x"}}
	}
	c := &Constraints{RequiredTaints: []string{"x"}, PreferredTaints: []PreferredTaint{{"x", 1}}}
	dst := make([]Candidate, 0, 64)
	if n := testing.AllocsPerRun(100, func() { dst, _ = AppendCandidates(dst[:0], workers, c) }); n != 0 {
		t.Fatalf("AppendCandidates allocates %v times", n)
	}
}
