package sched

import (
	"fmt"
	"math"
)

// Conditional disaggregation decides, for one request of a disaggregated
// deployment, whether to skip the remote prefill and run prefill on the
// decode worker the router chose ("bypass"). The policies are Dynamo's
// (ai-dynamo/dynamo:lib/kv-router/src/conditional_disagg.rs, in the form
// that takes weighted cached tokens); the coordinator that asks them is
// core's.

// Defaults of the isl_bounding policy
// (DEFAULT_CONDITIONAL_DISAGG_EFF_ISL_THRESHOLD and
// DEFAULT_CONDITIONAL_DISAGG_EFF_ISL_RATIO_THRESHOLD).
const (
	DefaultConditionalDisaggEffISLThreshold      uint64 = 2048
	DefaultConditionalDisaggEffISLRatioThreshold        = 0.7
)

// DisaggPolicyKind is conditional_disagg_policy. The zero value is
// isl_bounding, the reference's default.
type DisaggPolicyKind uint8

const (
	// ISLBounding bypasses a request whose net-new prefill is small both
	// in tokens and as a fraction of the prompt.
	ISLBounding DisaggPolicyKind = iota
	// PrefillLoad bypasses when the prefill worker the router would pick
	// is over the prefill-busy line.
	PrefillLoad
	// ISLOrLoad bypasses when either of the two would.
	ISLOrLoad
	numDisaggPolicyKinds
)

var disaggPolicyNames = [numDisaggPolicyKinds]string{"isl_bounding", "prefill_load", "isl_or_load"}

// String returns the serialized name.
func (k DisaggPolicyKind) String() string {
	if k < numDisaggPolicyKinds {
		return disaggPolicyNames[k]
	}
	return fmt.Sprintf("DisaggPolicyKind(%d)", uint8(k))
}

// ParseDisaggPolicyKind parses a serialized policy name (exactly; the
// reference accepts no variants). The error wraps ErrInvalidConfig and
// carries the reference's text.
func ParseDisaggPolicyKind(s string) (DisaggPolicyKind, error) {
	for k, name := range disaggPolicyNames {
		if s == name {
			return DisaggPolicyKind(k), nil
		}
	}
	return 0, fmt.Errorf("%w: unknown conditional_disagg_policy: %q, expected 'isl_bounding', 'prefill_load', or 'isl_or_load'", ErrInvalidConfig, s)
}

// MarshalText writes the serialized name.
func (k DisaggPolicyKind) MarshalText() ([]byte, error) {
	if k >= numDisaggPolicyKinds {
		return nil, fmt.Errorf("%w: %s", ErrInvalidConfig, k)
	}
	return []byte(k.String()), nil
}

// UnmarshalText parses the serialized name.
func (k *DisaggPolicyKind) UnmarshalText(b []byte) error {
	v, err := ParseDisaggPolicyKind(string(b))
	if err == nil {
		*k = v
	}
	return err
}

// DisaggInput is what a policy decides on (the reference's
// ConditionalDisaggDecisionInput). The decode worker's busy verdict is
// not part of it: no policy reads it, and the coordinator applies the
// decode busy gate after the policy.
type DisaggInput struct {
	// PromptTokens is the prompt's length in tokens.
	PromptTokens uint64
	// CachedTokens is the effective cache credit on the chosen decode
	// worker, in weighted tokens (not rounded to blocks).
	CachedTokens uint64
	// PrefillBusy is the chosen prefill worker's busy verdict when
	// PrefillBusyKnown; unknown counts as calm.
	PrefillBusy, PrefillBusyKnown bool
}

// NetNewTokens is the prefill left after the decode worker's cache credit:
// PromptTokens − min(CachedTokens, PromptTokens), never negative.
func (in DisaggInput) NetNewTokens() uint64 {
	return in.PromptTokens - min(in.CachedTokens, in.PromptTokens)
}

// DisaggPolicy is one configured conditional-disaggregation policy: a
// value, safe to copy and to share. Every kind is built even when
// disabled; a disabled policy never bypasses and asks for no prefill-busy
// signal.
type DisaggPolicy struct {
	Kind    DisaggPolicyKind
	Enabled bool
	// EffISLThreshold and EffISLRatioThreshold are isl_bounding's
	// parameters (read by isl_or_load too).
	EffISLThreshold      uint64
	EffISLRatioThreshold float64
}

// DisaggPolicy returns the configured policy
// (make_conditional_disagg_policy of the reference).
func (c *Config) DisaggPolicy() DisaggPolicy {
	return DisaggPolicy{
		Kind:                 c.ConditionalDisaggPolicy,
		Enabled:              c.ConditionalDisaggEnabled,
		EffISLThreshold:      c.ConditionalDisaggEffISLThreshold,
		EffISLRatioThreshold: c.ConditionalDisaggEffISLRatioThreshold,
	}
}

// IsEnabled reports whether the policy may bypass at all. The coordinator
// gates the whole decision, and the prefill-busy probe, on it.
func (p DisaggPolicy) IsEnabled() bool { return p.Enabled }

// NeedsPrefillBusy reports whether the policy reads
// DisaggInput.PrefillBusy: prefill_load and isl_or_load when enabled.
func (p DisaggPolicy) NeedsPrefillBusy() bool {
	return p.Enabled && (p.Kind == PrefillLoad || p.Kind == ISLOrLoad)
}

// ShouldBypass decides whether the request skips the remote prefill.
func (p DisaggPolicy) ShouldBypass(in DisaggInput) bool {
	if !p.Enabled {
		return false
	}
	switch p.Kind {
	case ISLBounding:
		return p.islBypass(in)
	case PrefillLoad:
		return loadBypass(in)
	case ISLOrLoad:
		return p.islBypass(in) || loadBypass(in)
	}
	return false
}

// islBypass: net-new tokens strictly under EffISLThreshold and their ratio
// to the prompt (the prompt counted as at least 1) strictly under
// EffISLRatioThreshold.
func (p DisaggPolicy) islBypass(in DisaggInput) bool {
	eff := in.NetNewTokens()
	if eff >= p.EffISLThreshold {
		return false
	}
	return float64(eff)/float64(max(in.PromptTokens, 1)) < p.EffISLRatioThreshold
}

// loadBypass: the prefill worker is known to be busy.
func loadBypass(in DisaggInput) bool { return in.PrefillBusyKnown && in.PrefillBusy }

// validateDisagg checks the conditional-disaggregation fields of c, with
// the reference's texts (KvRouterConfig::validate).
func (c *Config) validateDisagg() error {
	if c.ConditionalDisaggPolicy >= numDisaggPolicyKinds {
		return fmt.Errorf("%w: unknown conditional_disagg_policy %d", ErrInvalidConfig, c.ConditionalDisaggPolicy)
	}
	if r := c.ConditionalDisaggEffISLRatioThreshold; math.IsNaN(r) || r < 0 || r > 1 {
		return fmt.Errorf("%w: conditional_disagg_eff_isl_ratio_threshold must be between 0 and 1", ErrInvalidConfig)
	}
	return nil
}
