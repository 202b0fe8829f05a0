package sched

import (
	"encoding/json"
	"errors"
	"math"
	"strings"
	"testing"
)

// TestISLBoundingVectors are the reference's isl_bounding test vectors
// (ai-dynamo/dynamo:lib/kv-router/src/conditional_disagg.rs tests, weighted
// cached tokens; blocks × 64 where the reference counts blocks).
func TestISLBoundingVectors(t *testing.T) {
	for _, tc := range []struct {
		name           string
		enabled        bool
		prompt, cached uint64
		ratio          float64
		want           bool
		wantNetNew     uint64
	}{
		{"disabled never bypasses", false, 100, 0, 0.7, false, 100},
		{"small and mostly cached", true, 1000, 14 * 64, 0.7, true, 104},
		{"large eff isl even with a low ratio", true, 100_000, 1000 * 64, 0.99, false, 36_000},
		{"ratio at or above the threshold", true, 200, 0, 0.7, false, 200},
		{"eff isl equal to the threshold", true, 2048, 0, 0.99, false, 2048},
		{"zero prompt: denominator 1", true, 0, 0, 0.7, true, 0},
		{"overlap beyond the prompt clamps to 0", true, 500, 10 * 64, 0.7, true, 0},
		{"weighted credit is not rounded up to a block", true, 2100, 48, 0.99, false, 2052},
	} {
		p := DisaggPolicy{Kind: ISLBounding, Enabled: tc.enabled, EffISLThreshold: 2048, EffISLRatioThreshold: tc.ratio}
		in := DisaggInput{PromptTokens: tc.prompt, CachedTokens: tc.cached}
		if got := p.ShouldBypass(in); got != tc.want {
			t.Errorf("%s: ShouldBypass = %t, want %t", tc.name, got, tc.want)
		}
		if got := in.NetNewTokens(); got != tc.wantNetNew {
			t.Errorf("%s: NetNewTokens = %d, want %d", tc.name, got, tc.wantNetNew)
		}
		if p.NeedsPrefillBusy() {
			t.Errorf("%s: isl_bounding never reads the prefill-busy signal", tc.name)
		}
		// The busy signal changes nothing for isl_bounding.
		in.PrefillBusy, in.PrefillBusyKnown = true, true
		if got := p.ShouldBypass(in); got != tc.want {
			t.Errorf("%s: with prefill busy: ShouldBypass = %t, want %t", tc.name, got, tc.want)
		}
	}
}

// busy returns a prefill-busy signal: nil is unknown.
func busy(b *bool) (bool, bool) {
	if b == nil {
		return false, false
	}
	return *b, true
}

func TestPrefillLoadVectors(t *testing.T) {
	yes, no := true, false
	for _, tc := range []struct {
		name    string
		enabled bool
		prompt  uint64
		busy    *bool
		want    bool
	}{
		{"busy bypasses", true, 1000, &yes, true},
		{"busy bypasses a huge prompt", true, 100_000, &yes, true},
		{"calm does not", true, 100_000, &no, false},
		{"unknown counts as calm", true, 1000, nil, false},
		{"disabled never bypasses", false, 1000, &yes, false},
	} {
		p := DisaggPolicy{Kind: PrefillLoad, Enabled: tc.enabled, EffISLThreshold: 2048, EffISLRatioThreshold: 0.7}
		in := DisaggInput{PromptTokens: tc.prompt}
		in.PrefillBusy, in.PrefillBusyKnown = busy(tc.busy)
		if got := p.ShouldBypass(in); got != tc.want {
			t.Errorf("%s: ShouldBypass = %t, want %t", tc.name, got, tc.want)
		}
		if p.NeedsPrefillBusy() != tc.enabled {
			t.Errorf("%s: NeedsPrefillBusy = %t, want %t", tc.name, p.NeedsPrefillBusy(), tc.enabled)
		}
	}
}

func TestISLOrLoadVectors(t *testing.T) {
	yes, no := true, false
	small := DisaggInput{PromptTokens: 1000, CachedTokens: 14 * 64}
	large := DisaggInput{PromptTokens: 100_000}
	for _, tc := range []struct {
		name    string
		in      DisaggInput
		busy    *bool
		enabled bool
		want    bool
	}{
		{"small, calm: via isl", small, &no, true, true},
		{"small, busy", small, &yes, true, true},
		{"large, calm", large, &no, true, false},
		{"large, busy: via load", large, &yes, true, true},
		{"small, unknown: reduces to isl", small, nil, true, true},
		{"large, unknown", large, nil, true, false},
		{"disabled small busy", small, &yes, false, false},
		{"disabled large busy", large, &yes, false, false},
	} {
		p := DisaggPolicy{Kind: ISLOrLoad, Enabled: tc.enabled, EffISLThreshold: 2048, EffISLRatioThreshold: 0.7}
		in := tc.in
		in.PrefillBusy, in.PrefillBusyKnown = busy(tc.busy)
		if got := p.ShouldBypass(in); got != tc.want {
			t.Errorf("%s: ShouldBypass = %t, want %t", tc.name, got, tc.want)
		}
		if p.IsEnabled() != tc.enabled || p.NeedsPrefillBusy() != tc.enabled {
			t.Errorf("%s: IsEnabled %t NeedsPrefillBusy %t, want both %t", tc.name, p.IsEnabled(), p.NeedsPrefillBusy(), tc.enabled)
		}
	}
}

func TestDisaggPolicyConfig(t *testing.T) {
	c := DefaultConfig()
	p := c.DisaggPolicy()
	want := DisaggPolicy{Kind: ISLBounding, EffISLThreshold: 2048, EffISLRatioThreshold: 0.7}
	if p != want {
		t.Fatalf("default policy %+v, want %+v", p, want)
	}
	if p.IsEnabled() || p.ShouldBypass(DisaggInput{}) {
		t.Fatal("the default policy is disabled")
	}
	for _, r := range []float64{-0.1, 1.01, math.NaN()} {
		c := DefaultConfig()
		c.ConditionalDisaggEffISLRatioThreshold = r
		err := c.Validate()
		if !errors.Is(err, ErrInvalidConfig) || !strings.Contains(err.Error(), "conditional_disagg_eff_isl_ratio_threshold must be between 0 and 1") {
			t.Errorf("ratio %v: Validate = %v", r, err)
		}
	}
	for _, r := range []float64{0, 1} {
		c := DefaultConfig()
		c.ConditionalDisaggEffISLRatioThreshold = r
		if err := c.Validate(); err != nil {
			t.Errorf("ratio %v: %v", r, err)
		}
	}
	c = DefaultConfig()
	c.ConditionalDisaggPolicy = numDisaggPolicyKinds
	if err := c.Validate(); !errors.Is(err, ErrInvalidConfig) {
		t.Errorf("bad kind: Validate = %v", err)
	}
}

func TestDisaggPolicyKindNames(t *testing.T) {
	for k := range numDisaggPolicyKinds {
		got, err := ParseDisaggPolicyKind(k.String())
		if err != nil || got != k {
			t.Errorf("%s: parsed %v, %v", k, got, err)
		}
		b, err := json.Marshal(k)
		if err != nil || string(b) != `"`+k.String()+`"` {
			t.Errorf("%s: marshalled %s, %v", k, b, err)
		}
	}
	_, err := ParseDisaggPolicyKind("ISL_BOUNDING")
	want := `unknown conditional_disagg_policy: "ISL_BOUNDING", expected 'isl_bounding', 'prefill_load', or 'isl_or_load'`
	if !errors.Is(err, ErrInvalidConfig) || !strings.HasSuffix(err.Error(), want) {
		t.Fatalf("got %v, want ... %s", err, want)
	}
	var k DisaggPolicyKind
	if err := json.Unmarshal([]byte(`"isl_or_load"`), &k); err != nil || k != ISLOrLoad {
		t.Fatalf("unmarshal: %v %v", k, err)
	}
}
