package sched

import (
	"fmt"
	"math"
	"slices"
	"strings"
)

// The router's queueing policy: policy classes, their busy lines and
// queue caps, and how a request picks its class (Dynamo's
// ai-dynamo/dynamo:lib/kv-router/src/scheduling/policy_config.rs). With no
// policy config file there is one synthetic class, "default", whose
// fractional busy threshold is router_queue_threshold and whose order is
// router_queue_policy; queueing is on only when some class has a busy
// threshold.

// QueuePolicy orders a class's waiting requests.
type QueuePolicy uint8

const (
	// FCFS: first come, first served, with priority_jump as a bump (in
	// seconds of arrival).
	FCFS QueuePolicy = iota
	// LCFS: last come, first served (synthetic class only).
	LCFS
	// WSPT: weighted shortest processing time, (1 + priority_jump) /
	// uncached tokens.
	WSPT
)

var queuePolicyNames = [...]string{"fcfs", "lcfs", "wspt"}

func (p QueuePolicy) String() string { return queuePolicyNames[p] }

// ParseQueuePolicy parses fcfs, lcfs or wspt.
func ParseQueuePolicy(s string) (QueuePolicy, error) {
	for i, n := range queuePolicyNames {
		if s == n {
			return QueuePolicy(i), nil
		}
	}
	return 0, fmt.Errorf("%w: router queue policy %q: expected fcfs, lcfs or wspt", ErrInvalidConfig, s)
}

// PolicyClass is one queue class.
type PolicyClass struct {
	Name   string
	Policy QueuePolicy
	// Quantum is the class's deficit-round-robin credit per round, in
	// scheduling-cost tokens. > 0.
	Quantum int64
	// BusyThreshold (absolute A_p) and BusyThresholdFrac (a multiple of
	// the worker's max_num_batched_tokens) define a busy worker; a class
	// with neither never queues.
	BusyThreshold     *int64
	BusyThresholdFrac *float64
	// BusyWorkerRatio, when set, is the share of eligible workers that
	// must be busy for the pool to be busy, in (0, 1]; unset: all of them.
	BusyWorkerRatio *float64
	// Queue caps, per registered worker of the partition: waiting
	// requests, their raw ISL tokens and their cached tokens. nil: none.
	RequestLimitPerWorker   *int64
	RawISLLimitPerWorker    *int64
	CachedTokLimitPerWorker *int64
}

// Queues reports whether the class queues at all.
func (c *PolicyClass) Queues() bool { return c.BusyThreshold != nil || c.BusyThresholdFrac != nil }

// WorkerBusy is the class's busy predicate of one worker rank:
// A_p > threshold, or A_p > frac × max_num_batched_tokens (an unknown
// capacity is DefaultMaxBatchedTokens), strictly.
func (c *PolicyClass) WorkerBusy(activePrefill, maxBatched int64) bool {
	if c.BusyThreshold != nil && activePrefill > *c.BusyThreshold {
		return true
	}
	return c.BusyThresholdFrac != nil && float64(activePrefill) > *c.BusyThresholdFrac*float64(PrefillCapacity(maxBatched))
}

// PoolBusy reports whether busy of eligible worker ranks make the pool
// busy: all of them, or at least BusyWorkerRatio of them. Never with no
// eligible worker (the request then fails as having no endpoints).
func (c *PolicyClass) PoolBusy(busy, eligible int) bool {
	if eligible == 0 {
		return false
	}
	if c.BusyWorkerRatio != nil {
		return float64(busy) >= *c.BusyWorkerRatio*float64(eligible)
	}
	return busy == eligible
}

// PolicyProfile is the set of classes one model queues with, and how a
// request picks its class: an explicit class by name, or (family, cache
// bucket) where the family is the requested one (else the default) and
// the bucket is the last whose min_tokens <= the request's uncached
// tokens.
type PolicyProfile struct {
	Classes []PolicyClass
	// synthetic: a single class, every request goes there.
	synthetic     bool
	explicit      map[string]int
	families      map[string]int
	defaultFamily int
	bucketMins    []int64
	byFamBucket   []int // [family*len(bucketMins)+bucket] -> class
}

// SyntheticProfile is the single-class profile built from
// router_queue_threshold and router_queue_policy.
func SyntheticProfile(threshold *float64, policy QueuePolicy) *PolicyProfile {
	c := PolicyClass{Name: "default", Policy: policy, Quantum: 1}
	if threshold != nil {
		t := *threshold
		c.BusyThresholdFrac = &t
	}
	return &PolicyProfile{Classes: []PolicyClass{c}, synthetic: true}
}

// Queues reports whether any class queues.
func (p *PolicyProfile) Queues() bool {
	for i := range p.Classes {
		if p.Classes[i].Queues() {
			return true
		}
	}
	return false
}

// Classify returns the class of a request that asks for class requested
// ("" for none) with uncached tokens.
func (p *PolicyProfile) Classify(requested string, uncached int64) int {
	if p.synthetic {
		return 0
	}
	if i, ok := p.explicit[requested]; ok {
		return i
	}
	f, ok := p.families[requested]
	if !ok {
		f = p.defaultFamily
	}
	b := 0
	for i, m := range p.bucketMins {
		if m <= uncached {
			b = i
		}
	}
	return p.byFamBucket[f*len(p.bucketMins)+b]
}

// PolicyConfig is a router policy config file, resolved: a root profile
// and per-model profiles, which replace the root wholesale.
type PolicyConfig struct {
	Root   *PolicyProfile
	Models map[string]*PolicyProfile
}

// Profile returns model's profile: its own, else the root, else the
// synthetic one of threshold and policy. c may be nil.
func (c *PolicyConfig) Profile(model string, threshold *float64, policy QueuePolicy) *PolicyProfile {
	if c != nil {
		if p, ok := c.Models[model]; ok {
			return p
		}
		if c.Root != nil {
			return c.Root
		}
	}
	return SyntheticProfile(threshold, policy)
}

// PolicyDoc is the router policy config document (router_policy_config),
// as its YAML reads; the host decodes it with unknown keys refused, then
// Resolve validates it.
type PolicyDoc struct {
	PolicyProfileDoc `yaml:",inline"`
	Models           map[string]PolicyProfileDoc `yaml:"models"`
	// WorkerSelection configures custom worker-selection policies, which
	// kvselect does not have: a document that sets it is refused.
	WorkerSelection any `yaml:"worker_selection"`
}

// PolicyProfileDoc is one profile of a PolicyDoc.
type PolicyProfileDoc struct {
	DefaultPolicyFamily *string          `yaml:"default_policy_family"`
	PolicyClasses       []PolicyClassDoc `yaml:"policy_classes"`
	UncachedISLBuckets  []BucketDoc      `yaml:"uncached_isl_buckets"`
}

// PolicyClassDoc is one policy_classes entry.
type PolicyClassDoc struct {
	Name                           string   `yaml:"name"`
	PolicyFamily                   *string  `yaml:"policy_family"`
	CacheBucket                    *string  `yaml:"cache_bucket"`
	QueuePolicy                    string   `yaml:"queue_policy"`
	Quantum                        *int64   `yaml:"quantum"`
	PrefillBusyThreshold           *int64   `yaml:"prefill_busy_threshold"`
	PrefillBusyThresholdFrac       *float64 `yaml:"prefill_busy_threshold_frac"`
	BusyWorkerRatio                *float64 `yaml:"busy_worker_ratio"`
	RequestQueueLimitPerWorker     *int64   `yaml:"request_queue_limit_per_worker"`
	RawISLTokenQueueLimitPerWorker *int64   `yaml:"raw_isl_token_queue_limit_per_worker"`
	CachedTokenQueueLimitPerWorker *int64   `yaml:"cached_token_queue_limit_per_worker"`
}

// BucketDoc is one uncached_isl_buckets entry.
type BucketDoc struct {
	MinTokens *int64 `yaml:"min_tokens"`
	Bucket    string `yaml:"bucket"`
}

// policyErr is a validation error, worded as the reference's.
func policyErr(format string, args ...any) error {
	return fmt.Errorf("%w: invalid router policy config: %s", ErrInvalidConfig, fmt.Sprintf(format, args...))
}

// Resolve validates the document with the reference's rules and texts.
func (d *PolicyDoc) Resolve() (*PolicyConfig, error) {
	if d.WorkerSelection != nil {
		return nil, policyErr("worker_selection is not supported by kvselect (no custom worker-selection policies)")
	}
	c := &PolicyConfig{Models: map[string]*PolicyProfile{}}
	r := &d.PolicyProfileDoc
	switch {
	case r.DefaultPolicyFamily == nil && r.PolicyClasses == nil && r.UncachedISLBuckets == nil:
	case r.DefaultPolicyFamily != nil && r.PolicyClasses != nil && r.UncachedISLBuckets != nil:
		p, err := r.resolve("root")
		if err != nil {
			return nil, err
		}
		c.Root = p
	default:
		return nil, policyErr("root profile must specify default_policy_family, uncached_isl_buckets, and policy_classes when any root profile field is present")
	}
	names := make([]string, 0, len(d.Models))
	for name := range d.Models {
		names = append(names, name)
	}
	slices.Sort(names)
	for _, name := range names {
		if name == "" {
			return nil, policyErr("model profile name must not be empty")
		}
		m := d.Models[name]
		loc := fmt.Sprintf("model %q", name)
		if m.DefaultPolicyFamily == nil || m.PolicyClasses == nil || m.UncachedISLBuckets == nil {
			return nil, policyErr("%s must specify default_policy_family, uncached_isl_buckets, and policy_classes", loc)
		}
		p, err := m.resolve(loc)
		if err != nil {
			return nil, err
		}
		c.Models[name] = p
	}
	if c.Root == nil && len(c.Models) == 0 {
		return nil, policyErr("router policy config must define a root profile, at least one model profile, or worker_selection")
	}
	return c, nil
}

func (d *PolicyProfileDoc) resolve(loc string) (*PolicyProfile, error) {
	if err := checkIdent(*d.DefaultPolicyFamily, "policy family", loc); err != nil {
		return nil, err
	}
	if len(d.PolicyClasses) == 0 {
		return nil, policyErr("%s policy_classes must not be empty", loc)
	}
	if len(d.UncachedISLBuckets) == 0 {
		return nil, policyErr("%s uncached_isl_buckets must not be empty", loc)
	}
	p := &PolicyProfile{explicit: map[string]int{}, families: map[string]int{}}
	buckets := map[string]int{}
	var bucketNames []string
	for i, b := range d.UncachedISLBuckets {
		if b.MinTokens == nil || *b.MinTokens < 0 {
			return nil, policyErr("%s uncached_isl_buckets entry %d needs a non-negative min_tokens", loc, i)
		}
		if i == 0 && *b.MinTokens != 0 {
			return nil, policyErr("%s uncached_isl_buckets must start at min_tokens 0", loc)
		}
		if i > 0 && *b.MinTokens <= p.bucketMins[i-1] {
			return nil, policyErr("%s uncached_isl_buckets min_tokens must be strictly increasing", loc)
		}
		if err := checkIdent(b.Bucket, "cache bucket", loc); err != nil {
			return nil, err
		}
		if _, dup := buckets[b.Bucket]; dup {
			return nil, policyErr("%s contains duplicate cache bucket %q", loc, b.Bucket)
		}
		buckets[b.Bucket] = i
		bucketNames = append(bucketNames, b.Bucket)
		p.bucketMins = append(p.bucketMins, *b.MinTokens)
	}
	var binds []*classBinding
	var familyNames []string
	seen := map[string]bool{}
	for _, cd := range d.PolicyClasses {
		c, b, err := cd.resolve(loc, buckets)
		if err != nil {
			return nil, err
		}
		if seen[c.Name] {
			return nil, policyErr("%s contains duplicate policy class %q", loc, c.Name)
		}
		seen[c.Name] = true
		p.Classes = append(p.Classes, c)
		if b != nil {
			if _, ok := p.families[b.family]; !ok {
				p.families[b.family] = len(familyNames)
				familyNames = append(familyNames, b.family)
			}
			binds = append(binds, b)
		} else {
			binds = append(binds, nil)
		}
	}
	df, ok := p.families[*d.DefaultPolicyFamily]
	if !ok {
		return nil, policyErr("%s default_policy_family %q does not name a configured family", loc, *d.DefaultPolicyFamily)
	}
	p.defaultFamily = df
	nb := len(p.bucketMins)
	p.byFamBucket = slices.Repeat([]int{-1}, len(familyNames)*nb)
	for ci, b := range binds {
		if b == nil {
			name := p.Classes[ci].Name
			if _, clash := p.families[name]; clash {
				return nil, policyErr("%s explicit policy class %q collides with a policy family", loc, name)
			}
			p.explicit[name] = ci
			continue
		}
		k := p.families[b.family]*nb + b.bucket
		if p.byFamBucket[k] >= 0 {
			return nil, policyErr("%s contains duplicate policy classes for family %q and bucket %q", loc, b.family, bucketNames[b.bucket])
		}
		p.byFamBucket[k] = ci
	}
	for f, fname := range familyNames {
		for b, bname := range bucketNames {
			if p.byFamBucket[f*nb+b] < 0 {
				return nil, policyErr("%s is missing a policy class for family %q and bucket %q", loc, fname, bname)
			}
		}
	}
	return p, nil
}

type classBinding struct {
	family string
	bucket int
}

func (cd *PolicyClassDoc) resolve(loc string, buckets map[string]int) (PolicyClass, *classBinding, error) {
	if err := checkIdent(cd.Name, "policy class", loc); err != nil {
		return PolicyClass{}, nil, err
	}
	if cd.Quantum == nil || *cd.Quantum <= 0 {
		return PolicyClass{}, nil, policyErr("%s policy class %q quantum must be greater than zero", loc, cd.Name)
	}
	pol := FCFS
	switch cd.QueuePolicy {
	case "", "fcfs":
	case "wspt":
		pol = WSPT
	default:
		return PolicyClass{}, nil, policyErr("%s policy class %q queue_policy must be fcfs or wspt", loc, cd.Name)
	}
	if f := cd.PrefillBusyThresholdFrac; f != nil && (math.IsNaN(*f) || math.IsInf(*f, 0) || *f < 0) {
		return PolicyClass{}, nil, policyErr("%s policy class %q prefill_busy_threshold_frac must be finite and non-negative", loc, cd.Name)
	}
	if r := cd.BusyWorkerRatio; r != nil && (math.IsNaN(*r) || math.IsInf(*r, 0) || *r <= 0 || *r > 1) {
		return PolicyClass{}, nil, policyErr("%s policy class %q busy_worker_ratio must be a finite fraction in (0.0, 1.0]", loc, cd.Name)
	}
	if cd.BusyWorkerRatio != nil && cd.PrefillBusyThreshold == nil && cd.PrefillBusyThresholdFrac == nil {
		return PolicyClass{}, nil, policyErr("%s policy class %q sets busy_worker_ratio but no prefill_busy_threshold or prefill_busy_threshold_frac, so no worker can ever be considered busy", loc, cd.Name)
	}
	for _, v := range [...]struct {
		name string
		v    *int64
	}{
		{"prefill_busy_threshold", cd.PrefillBusyThreshold},
		{"request_queue_limit_per_worker", cd.RequestQueueLimitPerWorker},
		{"raw_isl_token_queue_limit_per_worker", cd.RawISLTokenQueueLimitPerWorker},
		{"cached_token_queue_limit_per_worker", cd.CachedTokenQueueLimitPerWorker},
	} {
		if v.v != nil && *v.v < 0 {
			return PolicyClass{}, nil, policyErr("%s policy class %q %s must be non-negative", loc, cd.Name, v.name)
		}
	}
	c := PolicyClass{
		Name: cd.Name, Policy: pol, Quantum: *cd.Quantum,
		BusyThreshold: cd.PrefillBusyThreshold, BusyThresholdFrac: cd.PrefillBusyThresholdFrac, BusyWorkerRatio: cd.BusyWorkerRatio,
		RequestLimitPerWorker: cd.RequestQueueLimitPerWorker, RawISLLimitPerWorker: cd.RawISLTokenQueueLimitPerWorker, CachedTokLimitPerWorker: cd.CachedTokenQueueLimitPerWorker,
	}
	switch {
	case cd.PolicyFamily == nil && cd.CacheBucket == nil:
		return c, nil, nil
	case cd.PolicyFamily != nil && cd.CacheBucket != nil:
		if err := checkIdent(*cd.PolicyFamily, "policy family", loc); err != nil {
			return PolicyClass{}, nil, err
		}
		if err := checkIdent(*cd.CacheBucket, "cache bucket", loc); err != nil {
			return PolicyClass{}, nil, err
		}
		b, ok := buckets[*cd.CacheBucket]
		if !ok {
			return PolicyClass{}, nil, policyErr("%s policy class %q references unknown cache bucket %q", loc, cd.Name, *cd.CacheBucket)
		}
		return c, &classBinding{*cd.PolicyFamily, b}, nil
	}
	return PolicyClass{}, nil, policyErr("%s policy class %q must specify both policy_family and cache_bucket or neither for an explicit class", loc, cd.Name)
}

// checkIdent requires [A-Za-z0-9_.-]+.
func checkIdent(name, kind, loc string) error {
	ok := name != "" && strings.IndexFunc(name, func(r rune) bool {
		return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '_' || r == '.' || r == '-')
	}) < 0
	if ok {
		return nil
	}
	return policyErr("%s %s name %q must match [A-Za-z0-9_.-]+", loc, kind, name)
}
