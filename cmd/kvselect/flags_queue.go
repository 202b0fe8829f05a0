package main

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/kvselect/kvselect/sched"
	"gopkg.in/yaml.v3"
)

// applyQueueFlags applies the router queue's flags over the environment:
// --router-queue-threshold, --router-queue-policy and
// --router-policy-config (the frontend's names; the reference's selection
// service reads only DYN_ROUTER_QUEUE_THRESHOLD, DYN_ROUTER_QUEUE_POLICY
// and DYN_ROUTER_POLICY_CONFIG), then loads the policy config file.
func (o *serveOptions) applyQueueFlags(set map[string]bool, threshold float64, policy, config string) error {
	if set["router-queue-threshold"] {
		o.core.Sched.QueueThreshold = &threshold
	}
	if set["router-queue-policy"] {
		p, err := sched.ParseQueuePolicy(policy)
		if err != nil {
			return fmt.Errorf("--router-queue-policy: %w", err)
		}
		o.core.Sched.QueuePolicy = p
	}
	if set["router-policy-config"] {
		o.policyConfig = config
	}
	if o.policyConfig == "" {
		return nil
	}
	pc, err := loadPolicyConfig(o.policyConfig)
	if err != nil {
		return err
	}
	o.core.Sched.Policy = pc
	return nil
}

// maxPolicyConfigBytes bounds the policy config file read at start-up.
const maxPolicyConfigBytes = 1 << 20

// loadPolicyConfig reads and validates a router policy config file with
// the reference's error texts (ai-dynamo/dynamo:
// lib/kv-router/src/scheduling/policy_config.rs): unknown keys are
// refused, as its serde(deny_unknown_fields) does.
func loadPolicyConfig(path string) (*sched.PolicyConfig, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("failed to read router policy config %s: %w", path, err)
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, maxPolicyConfigBytes+1))
	if err != nil {
		return nil, fmt.Errorf("failed to read router policy config %s: %w", path, err)
	}
	if len(b) > maxPolicyConfigBytes {
		return nil, fmt.Errorf("failed to read router policy config %s: larger than %d bytes", path, maxPolicyConfigBytes)
	}
	var doc sched.PolicyDoc
	dec := yaml.NewDecoder(bytes.NewReader(b))
	dec.KnownFields(true)
	if err := dec.Decode(&doc); err != nil && !errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("failed to parse router policy config %s: %w", path, err)
	}
	return doc.Resolve()
}
