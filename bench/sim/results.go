package sim

import (
	"math"
	"slices"

	"github.com/kvselect/kvselect/bench/sim/vllm"
)

// recorder collects per-request figures as requests finish.
type recorder struct {
	ttft, e2e         []float64
	first, last       float64
	seen              bool
	inTokens, outToks int64
	completed         int
	preemptedRequests int
}

func (rc *recorder) finished(r *vllm.Request, sr *simRequest) {
	rc.ttft = append(rc.ttft, r.FirstToken-r.Arrival)
	rc.e2e = append(rc.e2e, r.Finish-r.Arrival)
	if !rc.seen || r.Arrival < rc.first {
		rc.first = r.Arrival
	}
	rc.seen = true
	rc.last = max(rc.last, r.Finish)
	rc.inTokens += int64(r.PromptTokens)
	rc.outToks += int64(r.OutputTokens)
	rc.completed++
	if r.Preemptions > 0 {
		rc.preemptedRequests++
	}
}

// fill computes the derived figures; busy is each engine's busy time.
func (rc *recorder) fill(res *PolicyResult, busy []float64) {
	res.Completed = rc.completed
	res.PreemptedRequests = rc.preemptedRequests
	if res.PromptBlocks > 0 {
		res.HitRate = float64(res.HitBlocks) / float64(res.PromptBlocks)
	}
	for _, n := range res.PrefillTokensPerWorker {
		res.PrefillTokens += n
	}
	slices.Sort(rc.ttft)
	slices.Sort(rc.e2e)
	if len(rc.ttft) > 0 {
		res.TTFTp50ms = 1000 * quantile(rc.ttft, 0.50)
		res.TTFTp90ms = 1000 * quantile(rc.ttft, 0.90)
		res.TTFTp99ms = 1000 * quantile(rc.ttft, 0.99)
		res.TTFTMaxms = 1000 * rc.ttft[len(rc.ttft)-1]
		res.TTFTMeanms = 1000 * mean(rc.ttft)
		res.TTFTms = make([]float64, len(rc.ttft))
		for i, v := range rc.ttft {
			res.TTFTms[i] = 1000 * v
		}
		res.E2Ep50ms = 1000 * quantile(rc.e2e, 0.50)
		res.E2Ep99ms = 1000 * quantile(rc.e2e, 0.99)
		res.E2EMeanms = 1000 * mean(rc.e2e)
	}
	res.MakespanS = rc.last - rc.first
	if res.MakespanS > 0 {
		res.ThroughputRPS = float64(rc.completed) / res.MakespanS
		res.OutputTokensPerS = float64(rc.outToks) / res.MakespanS
		res.TokensPerS = float64(rc.inTokens+rc.outToks) / res.MakespanS
	}
	var maxReq int
	for _, c := range res.RequestsPerWorker {
		maxReq = max(maxReq, c)
	}
	if res.Requests > 0 {
		res.RequestsMaxOverMean = float64(maxReq) * float64(len(res.RequestsPerWorker)) / float64(res.Requests)
	}
	res.PrefillTokensCV = cv(res.PrefillTokensPerWorker)
	var maxBusy, sumBusy float64
	for _, b := range busy {
		maxBusy = max(maxBusy, b)
		sumBusy += b
	}
	if sumBusy > 0 {
		res.BusyMaxOverMean = maxBusy * float64(len(busy)) / sumBusy
	}
	if res.MakespanS > 0 && len(busy) > 0 {
		res.Utilization = sumBusy / float64(len(busy)) / res.MakespanS
	}
}

func mean(xs []float64) float64 {
	var s float64
	for _, x := range xs {
		s += x
	}
	return s / float64(len(xs))
}

// quantile returns the q-quantile of sorted (nearest rank).
func quantile(sorted []float64, q float64) float64 {
	i := int(math.Ceil(q*float64(len(sorted)))) - 1
	return sorted[min(max(i, 0), len(sorted)-1)]
}

// cv is the population coefficient of variation of xs (0 when the mean is 0).
func cv(xs []int64) float64 {
	if len(xs) == 0 {
		return 0
	}
	var m float64
	for _, x := range xs {
		m += float64(x)
	}
	m /= float64(len(xs))
	if m == 0 {
		return 0
	}
	var ss float64
	for _, x := range xs {
		d := float64(x) - m
		ss += d * d
	}
	return math.Sqrt(ss/float64(len(xs))) / m
}
