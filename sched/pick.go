package sched

import (
	"math"
	"math/rand/v2"
)

// Rand is the picker's random source. *rand.Rand of math/rand/v2 satisfies
// it (not safe for concurrent use); RuntimeRand is the goroutine-safe
// default. Tests pass a seeded source to make picks deterministic.
type Rand interface {
	// IntN returns a uniform int in [0, n); n > 0.
	IntN(n int) int
	// Float64 returns a uniform float64 in [0, 1).
	Float64() float64
}

// RuntimeRand draws from math/rand/v2's top-level functions (per-thread
// ChaCha8 state in the runtime: safe for concurrent use, no lock, no
// allocation).
type RuntimeRand struct{}

func (RuntimeRand) IntN(n int) int   { return rand.IntN(n) }
func (RuntimeRand) Float64() float64 { return rand.Float64() }

// Pick returns the index of the chosen candidate (Dynamo's
// lib/kv-router/src/scheduling/selector.rs: argmin with a random
// tie-break at temperature 0, else a softmax over -cost), or -1 when costs
// is empty.
//
// temperature <= 0: argmin; exact ties are broken uniformly at random by
// reservoir sampling (the k-th tied candidate replaces the choice with
// probability 1/k). temperature > 0: a draw from SoftmaxProbabilities.
//
// NaN costs never win an argmin; if every cost is NaN the first index is
// returned. Pick does not allocate.
func Pick(costs []float64, temperature float64, rng Rand) int {
	if len(costs) == 0 {
		return -1
	}
	if temperature > 0 {
		return pickSoftmax(costs, temperature, rng)
	}
	best, bestCost, ties := 0, math.Inf(1), 0
	for i, c := range costs {
		switch {
		case c < bestCost:
			best, bestCost, ties = i, c, 1
		case c == bestCost:
			ties++
			if rng.IntN(ties) == 0 {
				best = i
			}
		}
	}
	return best
}

// softmaxFrame is the picker's normalisation: shift by the minimum, divide
// by (range × T); costs are first scaled by 1/max(|min|, |max|) when the
// range is not finite.
type softmaxFrame struct {
	lo, scale, denom float64
	uniform          bool
}

func newSoftmaxFrame(costs []float64, t float64) softmaxFrame {
	lo, hi := math.Inf(1), math.Inf(-1)
	for _, c := range costs {
		lo, hi = min(lo, c), max(hi, c)
	}
	f := softmaxFrame{scale: 1}
	if r := hi - lo; math.IsInf(r, 0) || math.IsNaN(r) {
		f.scale = max(math.Abs(lo), math.Abs(hi))
		lo, hi = lo/f.scale, hi/f.scale
	}
	f.lo = lo
	f.denom = (hi - lo) * t
	f.uniform = hi == lo || !(f.denom > 0) || math.IsInf(f.denom, 0)
	return f
}

// weight is the unnormalised probability of cost c.
func (f *softmaxFrame) weight(c float64) float64 {
	if f.uniform {
		return 1
	}
	w := math.Exp(-(c/f.scale - f.lo) / f.denom)
	if math.IsNaN(w) {
		return 0
	}
	return w
}

// SoftmaxProbabilities writes the picker's probabilities at temperature t > 0
// into out (at least len(costs) long): p_i ∝ exp(−(c_i − c_min) /
// ((c_max − c_min)·t)), uniform when all costs are equal.
func SoftmaxProbabilities(costs []float64, t float64, out []float64) {
	f := newSoftmaxFrame(costs, t)
	var sum float64
	for i, c := range costs {
		out[i] = f.weight(c)
		sum += out[i]
	}
	for i := range costs {
		out[i] /= sum
	}
}

// pickSoftmax draws u in [0, 1) and returns the first index whose cumulative
// probability reaches u; the last index is the fallback. Two passes over
// costs instead of a scratch slice keep it allocation-free (64 candidates:
// 128 exp calls, well under a microsecond).
func pickSoftmax(costs []float64, t float64, rng Rand) int {
	f := newSoftmaxFrame(costs, t)
	var sum float64
	for _, c := range costs {
		sum += f.weight(c)
	}
	u := rng.Float64()
	var cum float64
	for i, c := range costs {
		cum += f.weight(c) / sum
		if cum >= u {
			return i
		}
	}
	return len(costs) - 1
}
