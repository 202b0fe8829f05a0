package vllm

import (
	"fmt"
	"math"
)

// StepModel is the duration of one engine step (one forward pass over the
// scheduled tokens of every running request), a roofline fitted to a
// public measurement:
//
//	step(T, reqs) = sqrt(Weights² + (PerToken·T)²)
//	              + Σ over scheduled requests r of
//	                max(PerKVToken·(c_r + n_r), PerPair·(n_r·c_r + n_r·(n_r+1)/2))
//
// where T is the step's scheduled tokens (prefill chunks plus one token per
// decode), n_r the tokens scheduled for request r and c_r the tokens it
// had computed before (its context). The first term is the model's linear
// layers: reading the weights bounds a small step (Weights), arithmetic a
// large one (PerToken per token), and the 2-norm joins the two regimes. The
// second is attention: a request's chunk reads the keys and values of its
// c_r + n_r positions once (memory-bound, decode) or computes n_r query rows
// against them (compute-bound, long prefill chunks).
//
// DefaultStepModel's constants come from Vidur's operator profile of
// Meta-Llama-3-8B on an NVIDIA A100 80GB (microsoft/vidur:
// data/profiling/compute/a100/meta-llama/Meta-Llama-3-8B/mlp.csv, the
// simulator of Agrawal et al., "Vidur: A Large-Scale Simulation Framework
// for LLM Inference", MLSys 2024), tensor parallelism 1: the per-layer
// medians of its operators (layer norms, QKV and output projections,
// rotary embedding, gated MLP, residual adds) times 32 layers, plus the
// embedding, at 451 token counts from 1 to 32,768:
//
//   - Weights = 9.763 ms, the measured time at T = 1: the step of a single
//     decode. It reads the 13.96 GB of the layers' 6.98 B BF16 parameters,
//     an effective 1.43 TB/s (70% of the A100's 2.04 TB/s).
//   - PerToken = 67.01 µs, the least-squares slope through the origin of
//     the measured times at T >= 4,096: 13.96 GFLOP per token at an
//     effective 208 TFLOPS (67% of the A100's 312 dense BF16).
//
// The fit is within 2.7% of the measurement at the median token count and
// within 11% at the 90th percentile; the worst point is the knee (T = 136,
// 26% low: 13.3 ms measured against 9.8). For attention the profile's
// attention table is not published with the repository, so its constants
// are derived from the same two effective rates and the model's shape (32
// layers, 32 query heads and 8 key-value heads of 128 dimensions, BF16):
//
//   - PerKVToken = 91.7 ns: the 128 KiB of keys and values a position
//     holds (2 × 32 × 8 × 128 × 2 bytes), read at 1.43 TB/s;
//   - PerPair = 2.52 ns: the 524,288 FLOP of one (query, key) pair (2 × 2
//     × 32 heads × 128 dimensions × 32 layers, QKᵀ and PV) at 208 TFLOPS.
//
// Cross-check against an end-to-end measurement: one request decoding
// after a 1,024-token prompt steps in 9.76 + 0.09 = 9.86 ms here, 101
// tokens/s; johnmusgrave.com, "vLLM throughput-latency sweep on NVIDIA
// A100", measured 75 tokens/s for Llama-3.1-8B-Instruct (same
// architecture) with vLLM 0.23 at concurrency 1 on an A100 40GB, whose
// 1.56 TB/s scale that to 98 tokens/s on the 80 GB part (2.04 TB/s). Left out: the LM
// head (0.5 B parameters, about 0.7 ms per step at the profile's
// bandwidth) and vLLM's CPU-side scheduling and sampling, which the
// operator profile does not cover.
type StepModel struct {
	Weights    float64 // seconds: a step's floor, reading the weights
	PerToken   float64 // seconds per scheduled token (linear layers)
	PerKVToken float64 // seconds per context position read by a request's chunk
	PerPair    float64 // seconds per (query, key) pair computed by a chunk
}

// DefaultStepModel is Meta-Llama-3-8B on an A100 80GB (see StepModel).
func DefaultStepModel() StepModel {
	return StepModel{Weights: 9.763e-3, PerToken: 67.01e-6, PerKVToken: 91.7e-9, PerPair: 2.52e-9}
}

// Validate reports a model with a negative, NaN or infinite constant, or
// one whose steps can take no time (Weights and PerToken both 0).
func (m StepModel) Validate() error {
	for _, v := range []float64{m.Weights, m.PerToken, m.PerKVToken, m.PerPair} {
		if !(v >= 0) || math.IsInf(v, 0) {
			return fmt.Errorf("vllm: step model constants must be finite and >= 0: %+v", m)
		}
	}
	if m.Weights == 0 && m.PerToken == 0 {
		return fmt.Errorf("vllm: step model with neither a weight-read floor nor a per-token cost: %+v", m)
	}
	return nil
}

// Linear is the linear layers' time of a step of T scheduled tokens.
func (m StepModel) Linear(tokens int) float64 {
	return math.Hypot(m.Weights, m.PerToken*float64(tokens))
}

// Attention is the attention time of one request's chunk: n tokens after c
// computed ones.
func (m StepModel) Attention(c, n int) float64 {
	fc, fn := float64(c), float64(n)
	return max(m.PerKVToken*(fc+fn), m.PerPair*(fn*fc+fn*(fn+1)/2))
}
