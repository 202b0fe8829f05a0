package sched

import (
	"fmt"
	"math"
	"time"
)

// Defaults of Config: Dynamo's KvRouterConfig defaults
// (ai-dynamo/dynamo:lib/kv-router/src/config.rs) and its active-sequence
// expiry (lib/kv-router/src/sequences/single.rs).
const (
	DefaultOverlapScoreCredit        = 1.0
	DefaultPrefillLoadScale          = 1.0
	DefaultHostCacheHitWeight        = 0.75
	DefaultDiskCacheHitWeight        = 0.25
	DefaultActiveRequestExpiry       = 300 * time.Second
	DefaultExpiryCheckInterval       = 30 * time.Second
	DefaultMaxBatchedTokens    int64 = 10_000_000
)

// Config is the router configuration sched reads; `json` names the field of
// Dynamo's KvRouterConfig (ai-dynamo/dynamo:lib/kv-router/src/config.rs).
// A nil pointer means "unset".
//
// Build it with DefaultConfig, change fields, then call Validate. Resolve
// applies the deprecated OverlapScoreWeight mapping and a per-request
// Override.
type Config struct {
	// OverlapScoreCredit (c) scales device-tier overlap credit in the logit.
	// Finite, >= 0.
	OverlapScoreCredit float64 `json:"overlap_score_credit"`
	// OverlapScoreCreditDecay (k) shrinks the device credit of workers with
	// more active prefill than the least loaded one. Finite, >= 0; 0 = off.
	OverlapScoreCreditDecay float64 `json:"overlap_score_credit_decay"`
	// PrefillLoadScale (s) multiplies the adjusted prefill blocks. Finite, >= 0.
	PrefillLoadScale float64 `json:"prefill_load_scale"`
	// OverlapScoreWeight is the deprecated pre-#9267 knob. When set to w it
	// sets PrefillLoadScale = w, and w == 0 also sets OverlapScoreCredit = 0
	// It wins over PrefillLoadScale when both are set.
	OverlapScoreWeight *float64 `json:"overlap_score_weight,omitempty"`
	// DecodeActiveRequestWeight (w_req) is the cost per active request, in
	// blocks. Finite, >= 0.
	DecodeActiveRequestWeight float64 `json:"decode_active_request_weight"`
	// HostCacheHitWeight weighs host-pinned extension blocks, in [0, 1].
	HostCacheHitWeight float64 `json:"host_cache_hit_weight"`
	// DiskCacheHitWeight weighs disk and external extension blocks, in
	// [0, 1].
	DiskCacheHitWeight float64 `json:"disk_cache_hit_weight"`
	// SharedCacheMultiplier (m) weighs shared-cache hits beyond the device
	// prefix, in [0, 1]. 0 in the standalone service (no shared cache).
	SharedCacheMultiplier float64 `json:"shared_cache_multiplier"`
	// RouterTemperature is the picker temperature: 0 = argmin with random
	// tie-break, > 0 = range-normalised softmax. Finite, >= 0.
	RouterTemperature float64 `json:"router_temperature"`
	// TrackPrefillTokens books effective prefill tokens and scores prefill
	// load.
	TrackPrefillTokens bool `json:"router_track_prefill_tokens"`
	// TrackActiveBlocks books prompt blocks (prefix-deduplicated) as decode
	// load. When false, active blocks and new blocks are always 0.
	TrackActiveBlocks bool `json:"router_track_active_blocks"`
	// TrackOutputBlocks is router_track_output_blocks: it steers only the
	// reference's frontend, which reports output blocks when it is set. The
	// selection service books every output block a caller reports,
	// whatever it says (Dynamo's test
	// output_block_endpoint_updates_reserved_load in
	// lib/kv-router/src/services/selection/tests.rs). Validated: requires
	// TrackActiveBlocks.
	TrackOutputBlocks bool `json:"router_track_output_blocks"`
	// AssumeKVReuse: when false, a request's prompt blocks are never shared
	// with other requests (Dynamo uses random tracking hashes), so every
	// booked block is new.
	AssumeKVReuse bool `json:"router_assume_kv_reuse"`

	// QueueThreshold is router_queue_threshold: the synthetic policy
	// class's busy line, a multiple of a worker's max_num_batched_tokens
	// (unset: no queueing without a policy config). Finite, >= 0 when set.
	QueueThreshold *float64 `json:"router_queue_threshold,omitempty"`
	// QueuePolicy is router_queue_policy, the synthetic class's order.
	QueuePolicy QueuePolicy `json:"router_queue_policy"`
	// Policy is the router policy config (router_policy_config), resolved;
	// nil: the synthetic class of QueueThreshold and QueuePolicy.
	Policy *PolicyConfig `json:"-"`
	// PrefillBusyThreshold is conditional_disagg_prefill_busy_threshold, a
	// fraction of the worker's prefill token capacity. Finite, >= 0 when set.
	PrefillBusyThreshold *float64 `json:"conditional_disagg_prefill_busy_threshold,omitempty"`
	// DecodeBusyThreshold is conditional_disagg_decode_busy_threshold, a
	// fraction of the worker's total KV blocks. Finite, >= 0 when set.
	DecodeBusyThreshold *float64 `json:"conditional_disagg_decode_busy_threshold,omitempty"`

	// ConditionalDisaggEnabled turns the conditional-disaggregation policy
	// on (conditional_disagg_enabled); off, every disaggregated request
	// books both pools.
	ConditionalDisaggEnabled bool `json:"conditional_disagg_enabled"`
	// ConditionalDisaggPolicy is the policy kind (DisaggPolicyKind).
	ConditionalDisaggPolicy DisaggPolicyKind `json:"conditional_disagg_policy"`
	// ConditionalDisaggEffISLThreshold is isl_bounding's bound on net-new
	// prefill tokens (strict). Any value.
	ConditionalDisaggEffISLThreshold uint64 `json:"conditional_disagg_eff_isl_threshold"`
	// ConditionalDisaggEffISLRatioThreshold is isl_bounding's bound on
	// net-new tokens over prompt tokens (strict). In [0, 1].
	ConditionalDisaggEffISLRatioThreshold float64 `json:"conditional_disagg_eff_isl_ratio_threshold"`

	// ActiveRequestExpiry force-frees a booking this long after admission
	// (output progress does not refresh it). > 0. cmd reads whole seconds.
	ActiveRequestExpiry time.Duration `json:"-"`
	// ExpiryCheckInterval bounds how often Book runs lazy expiry. > 0.
	ExpiryCheckInterval time.Duration `json:"-"`
}

// DefaultConfig returns Dynamo's KvRouterConfig defaults.
func DefaultConfig() Config {
	return Config{
		OverlapScoreCredit:  DefaultOverlapScoreCredit,
		PrefillLoadScale:    DefaultPrefillLoadScale,
		HostCacheHitWeight:  DefaultHostCacheHitWeight,
		DiskCacheHitWeight:  DefaultDiskCacheHitWeight,
		TrackPrefillTokens:  true,
		TrackActiveBlocks:   true,
		AssumeKVReuse:       true,
		ActiveRequestExpiry: DefaultActiveRequestExpiry,
		ExpiryCheckInterval: DefaultExpiryCheckInterval,

		ConditionalDisaggPolicy:               ISLBounding,
		ConditionalDisaggEffISLThreshold:      DefaultConditionalDisaggEffISLThreshold,
		ConditionalDisaggEffISLRatioThreshold: DefaultConditionalDisaggEffISLRatioThreshold,
	}
}

// Validate reports the first invalid field, wrapping ErrInvalidConfig.
func (c *Config) Validate() error {
	for _, ch := range [...]struct {
		name string
		v    float64
		unit bool
	}{
		{"overlap_score_credit", c.OverlapScoreCredit, false},
		{"overlap_score_credit_decay", c.OverlapScoreCreditDecay, false},
		{"prefill_load_scale", c.PrefillLoadScale, false},
		{"decode_active_request_weight", c.DecodeActiveRequestWeight, false},
		{"host_cache_hit_weight", c.HostCacheHitWeight, true},
		{"disk_cache_hit_weight", c.DiskCacheHitWeight, true},
		{"shared_cache_multiplier", c.SharedCacheMultiplier, true},
		{"router_temperature", c.RouterTemperature, false},
	} {
		if err := checkNonNeg(ch.name, ch.v, ch.unit); err != nil {
			return err
		}
	}
	for _, p := range [...]struct {
		name string
		v    *float64
	}{
		{"overlap_score_weight", c.OverlapScoreWeight},
		{"router_queue_threshold", c.QueueThreshold},
		{"conditional_disagg_prefill_busy_threshold", c.PrefillBusyThreshold},
		{"conditional_disagg_decode_busy_threshold", c.DecodeBusyThreshold},
	} {
		if p.v != nil {
			if err := checkNonNeg(p.name, *p.v, false); err != nil {
				return err
			}
		}
	}
	if err := c.validateDisagg(); err != nil {
		return err
	}
	if c.TrackOutputBlocks && !c.TrackActiveBlocks {
		return fmt.Errorf("%w: router_track_output_blocks requires router_track_active_blocks", ErrInvalidConfig)
	}
	if c.ActiveRequestExpiry <= 0 {
		return fmt.Errorf("%w: active request expiry must be > 0, got %v", ErrInvalidConfig, c.ActiveRequestExpiry)
	}
	if c.ExpiryCheckInterval <= 0 {
		return fmt.Errorf("%w: expiry check interval must be > 0, got %v", ErrInvalidConfig, c.ExpiryCheckInterval)
	}
	return nil
}

// checkNonNeg rejects NaN, infinities and negatives, and values above 1 when
// unit is set.
func checkNonNeg(name string, v float64, unit bool) error {
	if math.IsNaN(v) || math.IsInf(v, 0) || v < 0 {
		return fmt.Errorf("%w: %s must be finite and >= 0, got %v", ErrInvalidConfig, name, v)
	}
	if unit && v > 1 {
		return fmt.Errorf("%w: %s must be in [0, 1], got %v", ErrInvalidConfig, name, v)
	}
	return nil
}

// Override is a request's router_config_override. A nil field
// keeps the configured value.
type Override struct {
	OverlapScoreCredit *float64 `json:"overlap_score_credit,omitempty"`
	PrefillLoadScale   *float64 `json:"prefill_load_scale,omitempty"`
	// OverlapScoreWeight is the deprecated alias; mapped like
	// Config.OverlapScoreWeight and applied after the two fields above.
	OverlapScoreWeight    *float64 `json:"overlap_score_weight,omitempty"`
	RouterTemperature     *float64 `json:"router_temperature,omitempty"`
	AssumeKVReuse         *bool    `json:"assume_kv_reuse,omitempty"`
	TrackPrefillTokens    *bool    `json:"track_prefill_tokens,omitempty"`
	SharedCacheMultiplier *float64 `json:"shared_cache_multiplier,omitempty"`
	// RoutingPolicy names the selection policy of this request
	// (Policy.Name; "" keeps the partition's). kvselect's own key: the
	// reference ignores unknown override keys. Not a weight: Resolve
	// ignores it, the host chooses the policy.
	RoutingPolicy string `json:"routing_policy,omitempty"`
}

// Validate reports the first invalid override value, wrapping
// ErrInvalidConfig (a bad request).
func (o *Override) Validate() error {
	for _, p := range [...]struct {
		name string
		v    *float64
		unit bool
	}{
		{"overlap_score_credit", o.OverlapScoreCredit, false},
		{"prefill_load_scale", o.PrefillLoadScale, false},
		{"overlap_score_weight", o.OverlapScoreWeight, false},
		{"router_temperature", o.RouterTemperature, false},
		{"shared_cache_multiplier", o.SharedCacheMultiplier, true},
	} {
		if p.v != nil {
			if err := checkNonNeg(p.name, *p.v, p.unit); err != nil {
				return err
			}
		}
	}
	return nil
}

// Params are the weights one scoring uses: the Config with the deprecated
// mapping applied and a request's Override on top. Plain values, so Score
// reads no pointers.
type Params struct {
	OverlapScoreCredit        float64 // c
	OverlapScoreCreditDecay   float64 // k (config only)
	PrefillLoadScale          float64 // s
	DecodeActiveRequestWeight float64 // w_req (config only)
	HostCacheHitWeight        float64 // host_w (config only)
	DiskCacheHitWeight        float64 // disk_w (config only)
	SharedCacheMultiplier     float64 // m
	Temperature               float64 // T
	TrackPrefillTokens        bool
	AssumeKVReuse             bool
}

// Resolve returns the Params for one request. o may be nil. It validates o
// (c is assumed valid: call Config.Validate at start-up).
func (c *Config) Resolve(o *Override) (Params, error) {
	p := Params{
		OverlapScoreCredit:        c.OverlapScoreCredit,
		OverlapScoreCreditDecay:   c.OverlapScoreCreditDecay,
		PrefillLoadScale:          c.PrefillLoadScale,
		DecodeActiveRequestWeight: c.DecodeActiveRequestWeight,
		HostCacheHitWeight:        c.HostCacheHitWeight,
		DiskCacheHitWeight:        c.DiskCacheHitWeight,
		SharedCacheMultiplier:     c.SharedCacheMultiplier,
		Temperature:               c.RouterTemperature,
		TrackPrefillTokens:        c.TrackPrefillTokens,
		AssumeKVReuse:             c.AssumeKVReuse,
	}
	if c.OverlapScoreWeight != nil {
		p.applyOverlapScoreWeight(*c.OverlapScoreWeight)
	}
	if o == nil {
		return p, nil
	}
	if err := o.Validate(); err != nil {
		return Params{}, err
	}
	if o.OverlapScoreCredit != nil {
		p.OverlapScoreCredit = *o.OverlapScoreCredit
	}
	if o.PrefillLoadScale != nil {
		p.PrefillLoadScale = *o.PrefillLoadScale
	}
	if o.OverlapScoreWeight != nil {
		p.applyOverlapScoreWeight(*o.OverlapScoreWeight)
	}
	if o.RouterTemperature != nil {
		p.Temperature = *o.RouterTemperature
	}
	if o.AssumeKVReuse != nil {
		p.AssumeKVReuse = *o.AssumeKVReuse
	}
	if o.TrackPrefillTokens != nil {
		p.TrackPrefillTokens = *o.TrackPrefillTokens
	}
	if o.SharedCacheMultiplier != nil {
		p.SharedCacheMultiplier = *o.SharedCacheMultiplier
	}
	return p, nil
}

// applyOverlapScoreWeight is the compatibility mapping of the deprecated
// overlap_score_weight: it sets the prefill load scale, and 0 also turns
// the overlap credit off (ai-dynamo/dynamo:lib/kv-router/src/config.rs).
func (p *Params) applyOverlapScoreWeight(w float64) {
	p.PrefillLoadScale = w
	if w == 0 {
		p.OverlapScoreCredit = 0
	}
}
