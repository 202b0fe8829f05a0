package main

import (
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/kvselect/kvselect/core"
	"github.com/kvselect/kvselect/sched"
)

// TestSessionAndQueueFlags: the session affinity flags and the router
// queue's flags and environment are live (nothing reported as inactive),
// flags over environment.
func TestSessionAndQueueFlags(t *testing.T) {
	o, err := parseServe([]string{"--session-affinity-ttl-secs", "90", "--session-affinity-mode", "soft", "--router-queue-policy", "lcfs"},
		envOf(map[string]string{"DYN_ROUTER_QUEUE_THRESHOLD": "2", "DYN_ROUTER_QUEUE_POLICY": "wspt", "DYN_ROUTER_OVERLAP_REFRESH_AFTER_SECS": "0"}), io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if len(o.inactive) != 0 || o.core.SessionAffinity != (core.AffinityConfig{TTL: 90 * time.Second, Mode: core.AffinitySoft}) {
		t.Fatalf("affinity %+v inactive %v", o.core.SessionAffinity, o.inactive)
	}
	if q := o.core.Sched.QueueThreshold; q == nil || *q != 2 || o.core.Sched.QueuePolicy != sched.LCFS || o.core.OverlapRefreshAfter != 0 {
		t.Fatalf("queue %v %v %v", q, o.core.Sched.QueuePolicy, o.core.OverlapRefreshAfter)
	}
}

const policyYAML = `
default_policy_family: agents
uncached_isl_buckets:
  - min_tokens: 0
    bucket: hot
  - min_tokens: 4096
    bucket: cold
policy_classes:
  - name: agents-hot
    policy_family: agents
    cache_bucket: hot
    quantum: 16
    prefill_busy_threshold_frac: 0.5
    request_queue_limit_per_worker: 8
  - name: agents-cold
    policy_family: agents
    cache_bucket: cold
    queue_policy: wspt
    quantum: 4
    prefill_busy_threshold: 8192
models:
  small-model:
    default_policy_family: all
    uncached_isl_buckets: [{min_tokens: 0, bucket: any}]
    policy_classes: [{name: small, policy_family: all, cache_bucket: any, quantum: 1}]
`

// TestPolicyConfigFile: DYN_ROUTER_POLICY_CONFIG (or the flag) names a
// YAML file resolved into sched's profiles; unknown keys and invalid
// profiles are start-up errors with the reference's texts.
func TestPolicyConfigFile(t *testing.T) {
	dir := t.TempDir()
	write := func(name, body string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	good := write("good.yaml", policyYAML)
	o, err := parseServe(nil, envOf(map[string]string{"DYN_ROUTER_POLICY_CONFIG": good}), io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	p := o.core.Sched.Policy.Profile("m", nil, sched.FCFS)
	if c := p.Classes[p.Classify("", 5000)]; c.Name != "agents-cold" || c.Policy != sched.WSPT || !p.Queues() {
		t.Fatalf("root profile: %+v", c)
	}
	if p := o.core.Sched.Policy.Profile("small-model", nil, sched.FCFS); p.Queues() || p.Classes[0].Name != "small" {
		t.Fatalf("model profile: %+v", p.Classes)
	}
	for _, tc := range []struct{ body, want string }{
		{policyYAML + "\nextra_key: 1\n", "failed to parse router policy config"},
		{strings.Replace(policyYAML, "quantum: 4", "quantum: 0", 1), `invalid router policy config: root policy class "agents-cold" quantum must be greater than zero`},
		{"default_policy_family: x\n", "root profile must specify default_policy_family, uncached_isl_buckets, and policy_classes"},
	} {
		_, err := parseServe([]string{"--router-policy-config", write("bad.yaml", tc.body)}, envOf(map[string]string{"DYN_ROUTER_POLICY_CONFIG": good}), io.Discard)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("got %v, want %q", err, tc.want)
		}
	}
}
