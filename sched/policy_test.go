package sched

import (
	"errors"
	"strings"
	"testing"
)

func class(name, family, bucket string, quantum int64) PolicyClassDoc {
	c := PolicyClassDoc{Name: name, Quantum: ptr(quantum)}
	if family != "" {
		c.PolicyFamily, c.CacheBucket = ptr(family), ptr(bucket)
	}
	return c
}

func twoBucketDoc() PolicyDoc {
	interactive := class("interactive-hot", "interactive", "hot", 8)
	interactive.PrefillBusyThresholdFrac = ptr(0.5)
	cold := class("interactive-cold", "interactive", "cold", 8)
	cold.QueuePolicy = "wspt"
	cold.PrefillBusyThreshold = ptr(int64(4096))
	batchHot := class("batch-hot", "batch", "hot", 2)
	batchCold := class("batch-cold", "batch", "cold", 2)
	batchCold.RequestQueueLimitPerWorker = ptr(int64(3))
	return PolicyDoc{PolicyProfileDoc: PolicyProfileDoc{
		DefaultPolicyFamily: ptr("interactive"),
		UncachedISLBuckets:  []BucketDoc{{MinTokens: ptr(int64(0)), Bucket: "hot"}, {MinTokens: ptr(int64(1024)), Bucket: "cold"}},
		PolicyClasses:       []PolicyClassDoc{interactive, cold, batchHot, batchCold, class("admin", "", "", 1)},
	}}
}

// TestPolicyClassify: an explicit class by name, else (requested family or
// the default, bucket of the uncached tokens); a model profile replaces the
// root; no document is the synthetic class.
func TestPolicyClassify(t *testing.T) {
	d := twoBucketDoc()
	d.Models = map[string]PolicyProfileDoc{"m": {
		DefaultPolicyFamily: ptr("only"),
		UncachedISLBuckets:  []BucketDoc{{MinTokens: ptr(int64(0)), Bucket: "all"}},
		PolicyClasses:       []PolicyClassDoc{class("m-only", "only", "all", 1)},
	}}
	c, err := d.Resolve()
	if err != nil {
		t.Fatal(err)
	}
	root := c.Profile("other", nil, FCFS)
	for _, tc := range []struct {
		req      string
		uncached int64
		want     string
	}{
		{"", 0, "interactive-hot"},
		{"", 1023, "interactive-hot"},
		{"", 1024, "interactive-cold"},
		{"batch", 5, "batch-hot"},
		{"batch", 1 << 40, "batch-cold"},
		{"unknown", 2000, "interactive-cold"},
		{"admin", 2000, "admin"},
	} {
		if got := root.Classes[root.Classify(tc.req, tc.uncached)].Name; got != tc.want {
			t.Errorf("classify(%q, %d) = %s, want %s", tc.req, tc.uncached, got, tc.want)
		}
	}
	if !root.Queues() || root.Classes[2].Queues() {
		t.Fatal("queueing: the profile queues; batch-hot has no busy line")
	}
	if p := c.Profile("m", nil, FCFS); p.Classes[p.Classify("", 99)].Name != "m-only" || p.Queues() {
		t.Fatalf("model profile: %+v", p.Classes)
	}
	syn := (*PolicyConfig)(nil).Profile("x", ptr(0.5), LCFS)
	if len(syn.Classes) != 1 || syn.Classes[0].Name != "default" || syn.Classes[0].Policy != LCFS || !syn.Queues() {
		t.Fatalf("synthetic: %+v", syn.Classes)
	}
	if (*PolicyConfig)(nil).Profile("x", nil, FCFS).Queues() {
		t.Fatal("no threshold, no config: no queueing")
	}
}

// TestPolicyDocErrors: the reference's validation texts.
func TestPolicyDocErrors(t *testing.T) {
	for _, tc := range []struct {
		edit func(d *PolicyDoc)
		want string
	}{
		{func(d *PolicyDoc) { d.DefaultPolicyFamily = nil }, "root profile must specify default_policy_family, uncached_isl_buckets, and policy_classes"},
		{func(d *PolicyDoc) { d.PolicyClasses[0].Quantum = ptr(int64(0)) }, `root policy class "interactive-hot" quantum must be greater than zero`},
		{func(d *PolicyDoc) { d.PolicyClasses[0].QueuePolicy = "lcfs" }, `root policy class "interactive-hot" queue_policy must be fcfs or wspt`},
		{func(d *PolicyDoc) { d.UncachedISLBuckets[0].MinTokens = ptr(int64(1)) }, "root uncached_isl_buckets must start at min_tokens 0"},
		{func(d *PolicyDoc) { d.UncachedISLBuckets[1].MinTokens = ptr(int64(0)) }, "root uncached_isl_buckets min_tokens must be strictly increasing"},
		{func(d *PolicyDoc) { d.PolicyClasses = d.PolicyClasses[1:] }, `root is missing a policy class for family "interactive" and bucket "hot"`},
		{func(d *PolicyDoc) { d.PolicyClasses[4].Name = "batch" }, `root explicit policy class "batch" collides with a policy family`},
		{func(d *PolicyDoc) { d.PolicyClasses[3].Name = "batch-hot" }, `root contains duplicate policy class "batch-hot"`},
		{func(d *PolicyDoc) { d.PolicyClasses[0].Name = "a b" }, `root policy class name "a b" must match [A-Za-z0-9_.-]+`},
		{func(d *PolicyDoc) { d.PolicyClasses[0].CacheBucket = ptr("warm") }, `root policy class "interactive-hot" references unknown cache bucket "warm"`},
		{func(d *PolicyDoc) { d.PolicyClasses[0].CacheBucket = nil }, `root policy class "interactive-hot" must specify both policy_family and cache_bucket or neither for an explicit class`},
		{func(d *PolicyDoc) { d.PolicyClasses[2].BusyWorkerRatio = ptr(0.5) }, `root policy class "batch-hot" sets busy_worker_ratio but no prefill_busy_threshold or prefill_busy_threshold_frac`},
		{func(d *PolicyDoc) { d.PolicyClasses[0].BusyWorkerRatio = ptr(16.0) }, `busy_worker_ratio must be a finite fraction in (0.0, 1.0]`},
		{func(d *PolicyDoc) { d.DefaultPolicyFamily = ptr("nope") }, `root default_policy_family "nope" does not name a configured family`},
		{func(d *PolicyDoc) { *d = PolicyDoc{} }, "router policy config must define a root profile, at least one model profile, or worker_selection"},
		{func(d *PolicyDoc) { d.WorkerSelection = map[string]any{} }, "worker_selection is not supported by kvselect"},
	} {
		d := twoBucketDoc()
		tc.edit(&d)
		_, err := d.Resolve()
		if err == nil || !strings.Contains(err.Error(), tc.want) || !errors.Is(err, ErrInvalidConfig) {
			t.Errorf("got %v, want %q", err, tc.want)
		}
	}
}

// TestBusyLines: strict comparisons; an unknown capacity is 10,000,000;
// the pool rule is every eligible rank, or the ratio; never with none.
func TestBusyLines(t *testing.T) {
	c := PolicyClass{BusyThreshold: ptr(int64(100)), BusyThresholdFrac: ptr(0.5)}
	for _, tc := range []struct {
		ap, cap int64
		busy    bool
	}{{100, 1000, false}, {101, 1000, true}, {100, 100, true}, {50, 100, false}, {99, 0, false}} {
		if got := c.WorkerBusy(tc.ap, tc.cap); got != tc.busy {
			t.Errorf("WorkerBusy(%d, %d) = %t", tc.ap, tc.cap, got)
		}
	}
	frac := PolicyClass{BusyThresholdFrac: ptr(1e-6)}
	if frac.WorkerBusy(10, 0) || !frac.WorkerBusy(11, 0) {
		t.Error("unknown capacity is 10,000,000")
	}
	if c.PoolBusy(1, 2) || !c.PoolBusy(2, 2) || c.PoolBusy(0, 0) {
		t.Error("pool rule")
	}
	r := PolicyClass{BusyThreshold: ptr(int64(0)), BusyWorkerRatio: ptr(0.95)}
	if r.PoolBusy(121, 128) || !r.PoolBusy(122, 128) || r.PoolBusy(1, 2) {
		t.Error("ratio rule")
	}
	if !c.ShouldQueue(true, 0, 3) || c.ShouldQueue(false, 2, 3) || !c.ShouldQueue(false, 3, 3) || c.ShouldQueue(true, 0, 0) {
		t.Error("queue decision")
	}
	if (&PolicyClass{}).ShouldQueue(true, 3, 3) {
		t.Error("a class without a busy line never queues")
	}
}
