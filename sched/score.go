package sched

import (
	"fmt"
	"math"

	"github.com/kvselect/kvselect/radix"
)

// WorkerType selects the logit variant: the decode-only cost of a decode
// pool, or the full prefill+decode cost.
type WorkerType uint8

const (
	// WorkerSelect is the standalone service's label: the default formula.
	WorkerSelect WorkerType = iota
	// WorkerPrefill uses the default formula.
	WorkerPrefill
	// WorkerDecode uses the decode variant when prefill tracking is off and
	// the overlap credit is positive.
	WorkerDecode
)

// Request is what the scorer needs to know about the request itself.
type Request struct {
	// ISLTokens is the prompt length in tokens (isl). Must be > 0.
	ISLTokens int64
	// BlockSize is the partition's block size in tokens (bs). Must be > 0.
	BlockSize int64
	// WorkerType picks the logit variant; WorkerSelect for the service.
	WorkerType WorkerType
	// Session is the request's session_context (nil when absent), for
	// policies; the built-in scorer ignores it.
	Session *SessionContext
}

// RequestBlocks returns ceil(isl / bs).
func (r *Request) RequestBlocks() int64 { return (r.ISLTokens + r.BlockSize - 1) / r.BlockSize }

// Validate rejects a request the scorer cannot score.
func (r *Request) Validate() error {
	if r.ISLTokens <= 0 {
		return fmt.Errorf("%w: isl_tokens must be > 0, got %d", ErrInvalidRequest, r.ISLTokens)
	}
	if r.BlockSize <= 0 {
		return fmt.Errorf("%w: block_size must be > 0, got %d", ErrInvalidRequest, r.BlockSize)
	}
	return nil
}

// Candidate is one scoring row: one eligible (worker, dp_rank) with its cache
// overlap and its load snapshot. AppendCandidates fills Worker and
// TaintMultiplier; the host fills the overlap fields from the index and the
// load fields with WorkerLoad.Fill.
type Candidate struct {
	Worker radix.WorkerKey

	// DeviceBlocks (dev) is the raw device-tier prefix depth in blocks.
	DeviceBlocks int64
	// HostBlocks (host) is the host-pinned extension beyond the device prefix.
	HostBlocks int64
	// DiskBlocks (disk) is the disk plus external extension beyond the host
	// prefix.
	DiskBlocks int64
	// SharedBeyondDeviceBlocks counts shared-cache hits at positions >= dev;
	// 0 without a shared cache (always, in the standalone service).
	SharedBeyondDeviceBlocks int64

	// HasLoad says the worker rank has a WorkerLoad (its loads are filled).
	// Without one, raw prefill is isl / bs and the load fields are ignored
	// by the prefill term.
	HasLoad bool
	// ActivePrefillTokens (A_p): booked effective prefill not yet complete.
	ActivePrefillTokens int64
	// ActiveBlocks (A_d): unique active blocks, prefix-deduplicated.
	ActiveBlocks int64
	// ActiveRequests (N): live requests.
	ActiveRequests int64
	// ComputedPrefillTokens (A_c): the part of ActivePrefillTokens the
	// worker's KV events show computed (WorkerLoad.CreditStored), at most
	// ActivePrefillTokens; for policies that estimate the prefill left.
	// The reference's cost function does not read it.
	ComputedPrefillTokens int64
	// PendingPrefillPairs (A_pairs): the attention pairs of the prefill
	// left (ActivePrefillTokens − ComputedPrefillTokens), each booking's
	// placed after its cached prefix; for policies that count prefill as
	// time. The reference's cost function does not read it.
	PendingPrefillPairs int64
	// NewBlocks (add): the request's full blocks whose sequence hashes are
	// not in the worker's active prompt set.
	NewBlocks int64

	// TaintMultiplier multiplies the logit (preferred taints); 0 means 1.
	TaintMultiplier float64

	// TotalKVBlocks and MaxBatchedTokens are the worker's registered
	// total_kv_blocks and max_num_batched_tokens (0: not registered), for
	// policies that weigh load against capacity. The reference's cost
	// function does not read them.
	TotalKVBlocks, MaxBatchedTokens int64

	// RoutedPrefillTokens (R) is the prefill ever booked on the worker
	// rank (WorkerLoad.Fill; Booking.PrefillTokens summed over every
	// booking, released ones included, saturating at
	// MaxRoutedPrefillTokens): the demand routed there, for policies that
	// place requests no worker holds a prefix of. The reference's cost
	// function does not read it.
	RoutedPrefillTokens int64
}

// CachedTokens returns the weighted cached tokens of c (cached_w):
// round((dev + host_w·host + disk_w·disk) × bs), floored at 0. Device weight
// is 1.0 here whatever the overlap credit is.
func CachedTokens(p *Params, bs int64, c *Candidate) int64 {
	blocks := float64(c.DeviceBlocks) + p.HostCacheHitWeight*float64(c.HostBlocks) + p.DiskCacheHitWeight*float64(c.DiskBlocks)
	return roundCached(blocks * float64(bs))
}

// EffectivePrefillTokens is the cache-credit formula isl − min(cached, isl):
// the value booked as the request's prefill load and returned to
// the caller.
func EffectivePrefillTokens(isl, cached int64) int64 {
	return isl - max(0, min(cached, isl))
}

// Score writes the logit of every candidate into out[i] (lower is better),
// following Dynamo's cost function (lib/kv-router/src/scheduling/selector.rs)
// exactly, as written out below. out must be at least len(cands) long.
// Score is pure and allocation-free; req must be valid (Request.Validate).
//
// Per candidate:
//
//	raw_prefill = track ? (HasLoad ? (A_p + isl − min(cached_w, isl) + cached_w) / bs : isl / bs) : 0
//	decay       = track && k > 0 ? 1 / (1 + k·((A_p − min A_p)/bs)/request_blocks) : 1
//	credit      = c·decay·dev + host_w·host + disk_w·disk + m·shared
//	decode      = A_d + add
//	logit       = s·max(0, raw_prefill − credit) + decode + w_req·N
//	decode type (WorkerDecode, !track, c > 0): max(0, decode − credit) + w_req·N
//	logit      *= TaintMultiplier (when set)
func Score(p *Params, req *Request, cands []Candidate, out []float64) {
	out = out[:len(cands)]
	bs := float64(req.BlockSize)
	isl := req.ISLTokens
	track := p.TrackPrefillTokens
	reqBlocks := float64(req.RequestBlocks())

	decayOn := track && p.OverlapScoreCreditDecay > 0
	var minAp int64
	if decayOn {
		minAp = math.MaxInt64
		for i := range cands {
			minAp = min(minAp, activePrefill(&cands[i]))
		}
	}
	decodeVariant := req.WorkerType == WorkerDecode && !track && p.OverlapScoreCredit > 0

	// The weights are copied into locals: out[i] could alias *p as far as
	// the compiler knows, which would force a reload of every weight after
	// each store.
	credit0, decayK, scale := p.OverlapScoreCredit, p.OverlapScoreCreditDecay, p.PrefillLoadScale
	hostW, diskW, sharedW, reqW := p.HostCacheHitWeight, p.DiskCacheHitWeight, p.SharedCacheMultiplier, p.DecodeActiveRequestWeight
	islBlocks := float64(isl) / bs
	for i := range cands {
		c := &cands[i]
		dev, host, disk := float64(c.DeviceBlocks), float64(c.HostBlocks), float64(c.DiskBlocks)
		var raw float64
		if track {
			if c.HasLoad {
				cw := roundCached((dev + hostW*host + diskW*disk) * bs)
				raw = float64(c.ActivePrefillTokens+(isl-min(cw, isl))+cw) / bs
			} else {
				raw = islBlocks
			}
		}
		decay := 1.0
		if decayOn {
			// Dynamo's order of operations, kept for bit-identical costs:
			// a one-division rewrite was within measurement noise here.
			excess := float64(activePrefill(c)-minAp) / bs
			decay = 1 / (1 + decayK*(excess/reqBlocks))
		}
		credit := credit0*decay*dev + hostW*host + diskW*disk + sharedW*float64(c.SharedBeyondDeviceBlocks)
		decode := float64(c.ActiveBlocks + c.NewBlocks)
		active := reqW * float64(c.ActiveRequests)

		var logit float64
		if decodeVariant {
			logit = max(0, decode-credit) + active
		} else {
			logit = scale*max(0, raw-credit) + decode + active
		}
		if m := c.TaintMultiplier; m != 0 {
			logit *= m
		}
		out[i] = logit
	}
}

// roundCached is round(v) floored at 0, as an integer token count.
func roundCached(v float64) int64 {
	v = math.Round(v)
	if !(v > 0) {
		return 0
	}
	return int64(v)
}

// activePrefill is A_p as the decay term sees it: 0 without a projection.
func activePrefill(c *Candidate) int64 {
	if !c.HasLoad {
		return 0
	}
	return c.ActivePrefillTokens
}

// PotentialLoad is one row of /potential_loads.
type PotentialLoad struct {
	Worker radix.WorkerKey
	// PrefillTokens = A_p + (track ? isl − min(cached_w, isl) : 0).
	PrefillTokens int64
	// DecodeBlocks = A_d + add (full blocks only).
	DecodeBlocks int64
	// ActiveRequests = N.
	ActiveRequests int64
}

// PotentialLoads writes one PotentialLoad per candidate into out (at least
// len(cands) long). A candidate without a projection (HasLoad false) has
// zero active load, and one without cache hits gets delta = isl.
func PotentialLoads(p *Params, req *Request, cands []Candidate, out []PotentialLoad) {
	out = out[:len(cands)]
	for i := range cands {
		c := &cands[i]
		var delta int64
		if p.TrackPrefillTokens {
			delta = EffectivePrefillTokens(req.ISLTokens, CachedTokens(p, req.BlockSize, c))
		}
		var ap, ad, n int64
		if c.HasLoad {
			ap, ad, n = c.ActivePrefillTokens, c.ActiveBlocks, c.ActiveRequests
		}
		out[i] = PotentialLoad{
			Worker:         c.Worker,
			PrefillTokens:  ap + delta,
			DecodeBlocks:   ad + c.NewBlocks,
			ActiveRequests: n,
		}
	}
}

// SelectedDecodeBlocks is potential_decode_blocks of the selected worker as
// the select response reports it: the candidate's A_d + add plus the
// request's untracked partial tail, request_blocks − len(sequence_hashes),
// as newer revisions of the reference report it.
func SelectedDecodeBlocks(req *Request, c *Candidate, numSeqHashes int) int64 {
	var ad int64
	if c.HasLoad {
		ad = c.ActiveBlocks
	}
	return ad + c.NewBlocks + max(0, req.RequestBlocks()-int64(numSeqHashes))
}
