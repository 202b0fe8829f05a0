package core

import (
	"fmt"
	"strings"
)

// Disaggregated coordination books one request in two pools: a prefill
// booking in the prefill partition (model_name, prefill routing group) and a
// decode booking in the decode partition (model_name, decode routing group)
// of the same Service. It is Dynamo's DisaggCoordinator
// (ishandhanani/dynamo:lib/kv-router/src/services/selection/coordinator.rs,
// fork PR #40, never merged upstream): no lock spans the two pools, every
// partial state is recorded in the plan's transitions, and every partial
// failure is compensated explicitly. This file holds the types a host sees;
// disagg_coord.go the two orders; disagg_plans.go the plan registry and the
// Service methods.

// DisaggOrder says which pool anchors a plan.
type DisaggOrder uint8

const (
	// DisaggOrderDefault, in a request, is the configured order; in
	// Config.Disagg it is DecodeAnchored.
	DisaggOrderDefault DisaggOrder = iota
	// DecodeAnchored: preview decode, decide bypass, commit decode pinned
	// to the previewed worker, then commit prefill inside the decode
	// worker's KV-transfer domain. kvselect's default, as in Dynamo's EPP.
	DecodeAnchored
	// PrefillAnchored: book prefill KV-aware on the prompt, then decode
	// load-only inside the prefill worker's domain (before or after
	// prefill completes).
	PrefillAnchored
)

var orderNames = [...]string{"", "decode_anchored", "prefill_anchored"}

// String returns the snake_case name ("decode_anchored"); "" for the
// default.
func (o DisaggOrder) String() string {
	if int(o) < len(orderNames) {
		return orderNames[o]
	}
	return fmt.Sprintf("DisaggOrder(%d)", uint8(o))
}

// MarshalText writes String().
func (o DisaggOrder) MarshalText() ([]byte, error) { return []byte(o.String()), nil }

// ParseDisaggOrder parses "decode_anchored" or "prefill_anchored", trimmed,
// case-insensitive, hyphens accepted for underscores (the EPP's parsing).
func ParseDisaggOrder(s string) (DisaggOrder, bool) {
	switch normalizeEnum(s) {
	case "decode_anchored":
		return DecodeAnchored, true
	case "prefill_anchored":
		return PrefillAnchored, true
	}
	return DisaggOrderDefault, false
}

// PrefillFailurePolicy says how a decode-anchored plan compensates a failed
// prefill booking once decode is booked. The prefill-anchored order always
// frees prefill when decode fails.
type PrefillFailurePolicy uint8

const (
	// PrefillFailureDefault, in a request, is the configured policy; in
	// Config.Disagg it is FreeDecode.
	PrefillFailureDefault PrefillFailurePolicy = iota
	// FreeDecode frees the decode booking and fails the plan.
	FreeDecode
	// BypassOnDecode keeps the decode booking: prefill runs on the decode
	// worker, and the plan succeeds.
	BypassOnDecode
)

var failureNames = [...]string{"", "free_decode", "bypass_on_decode"}

// String returns the snake_case name; "" for the default.
func (f PrefillFailurePolicy) String() string {
	if int(f) < len(failureNames) {
		return failureNames[f]
	}
	return fmt.Sprintf("PrefillFailurePolicy(%d)", uint8(f))
}

// ParsePrefillFailurePolicy parses "free_decode" or "bypass_on_decode",
// like ParseDisaggOrder.
func ParsePrefillFailurePolicy(s string) (PrefillFailurePolicy, bool) {
	switch normalizeEnum(s) {
	case "free_decode":
		return FreeDecode, true
	case "bypass_on_decode":
		return BypassOnDecode, true
	}
	return PrefillFailureDefault, false
}

func normalizeEnum(s string) string {
	return strings.ReplaceAll(strings.ToLower(strings.TrimSpace(s)), "-", "_")
}

// DisaggConfig is the coordinator's configuration. Its policy and busy
// thresholds are the router's (Config.Sched: ConditionalDisagg*,
// PrefillBusyThreshold and DecodeBusyThreshold, read as they are: neither
// threshold falls back to the queue threshold, as in Dynamo).
type DisaggConfig struct {
	// Order is the order of a request that names none. Zero is
	// DecodeAnchored.
	Order DisaggOrder
	// PrefillFailure is the decode-anchored compensation of a request
	// that names none. Zero is FreeDecode.
	PrefillFailure PrefillFailurePolicy
	// PrefillPolicy and DecodePolicy name the selection policy of a
	// plan's prefill and decode calls whose override names none, as the
	// reference's per-pool prefill and decode policies choose its pools'
	// (ai-dynamo/dynamo:lib/kv-router/src/scheduling/config.rs); "" is
	// the pool partition's own. Config.Validate checks the names.
	PrefillPolicy, DecodePolicy string
}

func (c DisaggConfig) validate() error {
	if c.Order > PrefillAnchored || c.PrefillFailure > BypassOnDecode {
		return fmt.Errorf("%w: disaggregation order %d or prefill failure policy %d out of range", ErrConfig, c.Order, c.PrefillFailure)
	}
	return nil
}

// Pool names one of a plan's two pools.
type Pool uint8

const (
	PrefillPool Pool = iota
	DecodePool
	numPools
)

// legSuffix[pool] makes a leg's selection id from the plan's: the
// bookings are "<id>/prefill" and "<id>/decode".
var legSuffix = [numPools]string{"/prefill", "/decode"}

// PlanState is a plan's LinkedBookingState. Every transition is recorded
// (DisaggPlanView.Transitions, starting with PlanIdle).
type PlanState uint8

const (
	// PlanIdle: nothing booked; terminal when the first booking failed.
	PlanIdle PlanState = iota
	// PlanDecodePreviewed: decode previewed (query-only), nothing booked.
	PlanDecodePreviewed
	// PlanDecodeCommitted: decode booked, prefill not yet attempted.
	PlanDecodeCommitted
	// PlanPrefillCommitted: prefill booked, decode not yet attempted.
	PlanPrefillCommitted
	// PlanBypass: decode booked, and the policy chose to run prefill on it.
	PlanBypass
	// PlanLinked: both booked.
	PlanLinked
	// PlanPrefillReleased: prefill freed after completing; decode booked
	// or not yet attempted.
	PlanPrefillReleased
	// PlanBypassAfterPrefillFailure: prefill failed after decode was
	// booked; decode kept, prefill runs on it.
	PlanBypassAfterPrefillFailure
	// PlanCompensated: the second booking (or the constraint for it)
	// failed and the first was freed.
	PlanCompensated
	// PlanReleased: release ran.
	PlanReleased
)

var stateNames = [...]string{"idle", "decode_previewed", "decode_committed", "prefill_committed", "bypass", "linked",
	"prefill_released", "bypass_after_prefill_failure", "compensated", "released"}

// String returns the snake_case name ("linked").
func (s PlanState) String() string {
	if int(s) < len(stateNames) {
		return stateNames[s]
	}
	return fmt.Sprintf("PlanState(%d)", uint8(s))
}

// MarshalText writes String().
func (s PlanState) MarshalText() ([]byte, error) { return []byte(s.String()), nil }

// DisaggRequest is one coordinated request. Strings and slices may alias
// the caller's buffers: the plan keeps copies.
type DisaggRequest struct {
	// SelectionID is the plan id; "" generates a UUID v4. It must not
	// contain '/': the legs are "<id>/prefill" and "<id>/decode".
	SelectionID string
	// ModelName defaults to "default"; the two routing groups to
	// "prefill" and "decode", and must differ.
	ModelName                               string
	PrefillRoutingGroup, DecodeRoutingGroup string
	Prompt
	// ExpectedOutputTokens goes to the decode calls and the prefill-busy
	// probe; prefill bookings always send 1.
	ExpectedOutputTokens    uint32
	HasExpectedOutputTokens bool
	// SessionID ("" none) goes to every call as a session context holding
	// only that id, and AffinityTarget to the decode preview, plan_prefill
	// and plan_decode, as the reference's coordinator sends them
	// (ishandhanani/dynamo:lib/kv-router/src/services/selection/coordinator.rs).
	// Each call then follows the service's session rules in its pool's
	// partition: reads are steered by the binding, a booking without a pin
	// or an affinity target binds the session (plan_prefill, plan_decode,
	// the decode-anchored prefill commit without pinned_prefill_worker),
	// and the decode-anchored decode commit, pinned to the previewed
	// worker, never binds.
	SessionID      string
	AffinityTarget *AffinityTarget
	// PinnedPrefillWorker pins the prefill booking exactly.
	PinnedPrefillWorker *WorkerKey
	// AllowedWorkerIDs, when HasAllowedWorkerIDs, go to both pools (worker
	// ids are service-wide).
	AllowedWorkerIDs    []uint64
	HasAllowedWorkerIDs bool
	// RequiredTaints and PreferredTaints are the base routing constraints;
	// the second pool's call adds the anchor's KV-transfer constraint to a
	// copy of them.
	RequiredTaints  []string
	PreferredTaints []PreferredTaint
	// PrefillOverride goes unchanged to prefill calls. DecodeOverride is
	// the base of decode calls, which force assume_kv_reuse=false,
	// track_prefill_tokens=false and, unless the call keeps credit,
	// overlap_score_credit=0.
	PrefillOverride, DecodeOverride *Override
	// Order and PrefillFailure override the configured ones (zero: keep).
	Order          DisaggOrder
	PrefillFailure PrefillFailurePolicy
	// DeferDecode (prefill-anchored only) books prefill alone; the host
	// books decode later with PlanDecode.
	DeferDecode bool
}

// DisaggPlanView is what a host reads of a plan: a copy, owned by the
// caller. The JSON form is kvselect's DisaggPlanResponse: legs are present
// only while held, decision and decode signals only for the decode-anchored
// order, unknown busy verdicts omitted.
type DisaggPlanView struct {
	SelectionID string      `json:"selection_id"`
	ModelName   string      `json:"model_name"`
	Order       DisaggOrder `json:"order"`
	State       PlanState   `json:"state"`
	Transitions []PlanState `json:"transitions"`
	// Bypass: prefill runs on the decode worker (state bypass or
	// bypass_after_prefill_failure).
	Bypass        bool            `json:"bypass"`
	Prefill       *PlanLeg        `json:"prefill,omitempty"`
	Decode        *PlanLeg        `json:"decode,omitempty"`
	Decision      *BypassDecision `json:"decision,omitempty"`
	DecodeSignals *DecodeSignals  `json:"decode_signals,omitempty"`
}

// PlanLeg is one held booking of a plan: an ordinary reservation of the
// ledger under the leg's derived id.
type PlanLeg struct {
	SelectionID  string `json:"selection_id"`
	RoutingGroup string `json:"routing_group"`
	WorkerID     uint64 `json:"worker_id"`
	DPRank       uint32 `json:"dp_rank"`
	// Endpoint is the worker's endpoint when the leg was booked.
	Endpoint string `json:"endpoint"`
}

// BypassDecision is the conditional-disaggregation decision of a
// decode-anchored plan and its inputs. nil busy verdicts are unknown.
type BypassDecision struct {
	PolicySaysBypass bool  `json:"policy_says_bypass"`
	PrefillBusy      *bool `json:"prefill_busy,omitempty"`
	// DecodeBusy is the previewed decode worker's verdict, recorded only
	// when the policy said bypass.
	DecodeBusy *bool `json:"decode_busy,omitempty"`
	Bypass     bool  `json:"bypass"`
}

// DecodeSignals are what the decode preview reported.
type DecodeSignals struct {
	// CachedTokens is max(0, prompt tokens − effective_prefill_tokens).
	CachedTokens          uint64 `json:"cached_tokens"`
	PotentialDecodeBlocks int64  `json:"potential_decode_blocks"`
	DecodeBusy            *bool  `json:"decode_busy,omitempty"`
}
