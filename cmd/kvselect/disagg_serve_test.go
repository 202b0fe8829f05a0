package main

import (
	"io"
	"testing"

	"github.com/kvselect/kvselect/core"
)

func TestParseDisaggFlags(t *testing.T) {
	o, err := parseServe(nil, envOf(nil), io.Discard)
	if err != nil || o.core.Disagg.Order != core.DecodeAnchored || o.core.Disagg.PrefillFailure != core.FreeDecode {
		t.Fatalf("defaults: %v %+v", err, o.core.Disagg)
	}
	o, err = parseServe([]string{"--disagg-order", "prefill_anchored", "--disagg-prefill-failure", "Bypass-On-Decode"}, envOf(nil), io.Discard)
	if err != nil || o.core.Disagg.Order != core.PrefillAnchored || o.core.Disagg.PrefillFailure != core.BypassOnDecode {
		t.Fatalf("%v %+v", err, o)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--disagg-order", "decode"}, "--disagg-order must be `decode-anchored` or `prefill-anchored`, got `decode`"},
		{[]string{"--disagg-prefill-failure", "retry"}, "--disagg-prefill-failure must be `free-decode` or `bypass-on-decode`, got `retry`"},
	} {
		if _, err := parseServe(tc.args, envOf(nil), io.Discard); err == nil || err.Error() != tc.want {
			t.Errorf("%v: %v, want %q", tc.args, err, tc.want)
		}
	}
	// The conditional-disaggregation settings act on /disagg/plan now: not
	// reported as inactive.
	o, err = parseServe(nil, envOf(map[string]string{"DYN_ROUTER_CONDITIONAL_DISAGG": "true", "DYN_ROUTER_CONDITIONAL_DISAGG_POLICY": "prefill_load",
		"DYN_ROUTER_CONDITIONAL_DISAGG_EFF_ISL_THRESHOLD": "10", "DYN_ROUTER_CONDITIONAL_DISAGG_EFF_ISL_RATIO_THRESHOLD": "0.5"}), io.Discard)
	if err != nil || len(o.inactive) != 0 {
		t.Fatalf("%v, inactive %v", err, o.inactive)
	}
}
