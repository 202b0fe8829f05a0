package main

import (
	"io"
	"strings"
	"testing"

	"github.com/kvselect/kvselect/sched"
)

// TestRoutingPolicyFlag: the reference's policy by default, cache_balance
// on request, anything else refused; --rand-seed is kept.
func TestRoutingPolicyFlag(t *testing.T) {
	o, err := parseServe(nil, envOf(nil), io.Discard)
	if err != nil || o.core.SelectionPolicy != sched.DefaultSelectionPolicy() || o.randSeed != 0 {
		t.Fatalf("default: %+v, %v", o.core.SelectionPolicy, err)
	}
	o, err = parseServe([]string{"--routing-policy", "cache_balance", "--rand-seed", "7"}, envOf(nil), io.Discard)
	if err != nil || o.core.SelectionPolicy != sched.CacheBalancePolicy() || o.randSeed != 7 {
		t.Fatalf("cache_balance: %+v, %v", o.core.SelectionPolicy, err)
	}
	if _, err := parseServe([]string{"--routing-policy", "fastest"}, envOf(nil), io.Discard); err == nil || !strings.Contains(err.Error(), "--routing-policy") {
		t.Fatalf("unknown policy: %v", err)
	}
	r := newLockedRand(7)
	a, b := r.IntN(1000), newLockedRand(7).IntN(1000)
	if a != b {
		t.Fatalf("seeded sources differ: %d %d", a, b)
	}
}
