package sched

import (
	"math"
	"math/rand/v2"
	"testing"
)

func TestPickArgmin(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for _, tt := range []struct {
		costs []float64
		want  int
	}{
		{nil, -1},
		{[]float64{5}, 0},
		{[]float64{3, 1, 2}, 1},
		{[]float64{math.NaN(), 2, 1}, 2},
		{[]float64{math.NaN(), math.NaN()}, 0},
		{[]float64{math.Inf(1), 4}, 1},
	} {
		if got := Pick(tt.costs, 0, rng); got != tt.want {
			t.Errorf("Pick(%v, 0) = %d, want %d", tt.costs, got, tt.want)
		}
	}
}

// TestPickTieDistribution: at temperature 0 exact ties are broken uniformly.
// 4 tied minima among 6 candidates, 40,000 draws: each tied index must get
// 25% ± 1.5% (about 7 standard deviations), the others none.
func TestPickTieDistribution(t *testing.T) {
	costs := []float64{2, 1, 3, 1, 1, 1}
	rng := rand.New(rand.NewPCG(testSeed(t), 3))
	const n = 40000
	counts := make([]int, len(costs))
	for range n {
		counts[Pick(costs, 0, rng)]++
	}
	for i, c := range counts {
		want := 0.0
		if costs[i] == 1 {
			want = 0.25
		}
		if got := float64(c) / n; math.Abs(got-want) > 0.015 {
			t.Errorf("index %d picked %.4f of the time, want %.2f (counts %v)", i, got, want, counts)
		}
	}
}

func TestSoftmaxProbabilities(t *testing.T) {
	out := make([]float64, 3)
	// Range-normalised: p_i ∝ exp(−(c−min)/((max−min)·T)).
	SoftmaxProbabilities([]float64{10, 20, 15}, 1, out)
	w := []float64{1, math.Exp(-1), math.Exp(-0.5)}
	sum := w[0] + w[1] + w[2]
	for i := range w {
		if math.Abs(out[i]-w[i]/sum) > 1e-12 {
			t.Fatalf("p = %v, want %v", out, []float64{w[0] / sum, w[1] / sum, w[2] / sum})
		}
	}
	// Scale-free: multiplying every cost by 1000 changes nothing.
	out2 := make([]float64, 3)
	SoftmaxProbabilities([]float64{10000, 20000, 15000}, 1, out2)
	for i := range out {
		if math.Abs(out[i]-out2[i]) > 1e-12 {
			t.Fatalf("not scale-free: %v vs %v", out, out2)
		}
	}
	// Equal costs: uniform.
	SoftmaxProbabilities([]float64{4, 4, 4}, 0.7, out)
	for _, p := range out {
		if math.Abs(p-1.0/3) > 1e-12 {
			t.Fatalf("equal costs: p = %v, want uniform", out)
		}
	}
	// Low temperature concentrates on the minimum.
	SoftmaxProbabilities([]float64{1, 2, 3}, 0.01, out)
	if out[0] < 0.999999 {
		t.Fatalf("T=0.01: p = %v", out)
	}
	// Non-finite range: costs are divided by max(|min|, |max|) first.
	SoftmaxProbabilities([]float64{-math.MaxFloat64, math.MaxFloat64, 0}, 1, out)
	w = []float64{1, math.Exp(-1), math.Exp(-0.5)}
	sum = w[0] + w[1] + w[2]
	for i := range w {
		if math.Abs(out[i]-w[i]/sum) > 1e-12 {
			t.Fatalf("non-finite range: p = %v, want %v", out, []float64{w[0] / sum, w[1] / sum, w[2] / sum})
		}
	}
}

// TestPickSoftmaxFrequencies: draws at T > 0 follow SoftmaxProbabilities
// (50,000 draws, ±1.5% absolute).
func TestPickSoftmaxFrequencies(t *testing.T) {
	costs := []float64{10, 20, 15, 12}
	p := make([]float64, len(costs))
	SoftmaxProbabilities(costs, 0.8, p)
	rng := rand.New(rand.NewPCG(testSeed(t), 4))
	const n = 50000
	counts := make([]int, len(costs))
	for range n {
		counts[Pick(costs, 0.8, rng)]++
	}
	for i := range costs {
		if got := float64(counts[i]) / n; math.Abs(got-p[i]) > 0.015 {
			t.Errorf("index %d: frequency %.4f, probability %.4f", i, got, p[i])
		}
	}
}

// fixedRand returns preset values, for the cumulative-boundary test.
type fixedRand struct{ u float64 }

func (f fixedRand) IntN(int) int     { return 0 }
func (f fixedRand) Float64() float64 { return f.u }

func TestPickSoftmaxBoundaries(t *testing.T) {
	costs := []float64{5, 5, 5, 5} // uniform: cumulative 0.25, 0.5, 0.75, 1
	for _, tt := range []struct {
		u    float64
		want int
	}{{0, 0}, {0.25, 0}, {0.2500001, 1}, {0.5, 1}, {0.74, 2}, {0.9999999, 3}} {
		if got := Pick(costs, 1, fixedRand{tt.u}); got != tt.want {
			t.Errorf("u = %v: picked %d, want %d", tt.u, got, tt.want)
		}
	}
}
