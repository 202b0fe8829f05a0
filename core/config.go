package core

import (
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"strings"
	"time"

	"github.com/kvselect/kvselect/radix"
	"github.com/kvselect/kvselect/sched"
)

// Defaults of Config: the reference's pending-selection cache bounds
// (ai-dynamo/dynamo:lib/kv-router/src/services/selection/pending.rs) and
// kvselect's own limits.
const (
	DefaultSelectionCacheTTL        = 120 * time.Second
	DefaultSelectionCacheMaxEntries = 4096
	DefaultSelectionCacheMaxBytes   = 256 << 20
	// DefaultMaxReservations bounds the live reservations. A reservation
	// costs about 450 bytes with a short prompt (1.1 M small bookings
	// held 495 MB of heap), so the default caps that part of the heap
	// near 470 MB: far above a busy selector's need (5,000 bookings/s
	// never freed stay under it for 200 s of the 300 s expiry guard,
	// and callers that free keep a small fraction of it live).
	DefaultMaxReservations = 1 << 20
	// DefaultMaxReservationBytes bounds the tracking hashes and ids the
	// live reservations hold (8 bytes per block): 512 MiB is 64 M blocks,
	// e.g. 1,000 live requests of a million 16-token blocks each.
	DefaultMaxReservationBytes = 512 << 20
	// DefaultMaxListeners bounds the KV-event listener ranks (one TCP
	// connection each once connected).
	DefaultMaxListeners = 4096
	// DefaultSweepInterval is how often the host should call Service.Sweep
	// (Dynamo's force-expiry task runs every 60 s).
	DefaultSweepInterval = 60 * time.Second
)

// Config configures a Service. Build it with DefaultConfig, change fields,
// then New validates it.
type Config struct {
	// Sched is the router configuration (scoring weights, tracking, busy
	// thresholds, expiry guard).
	Sched sched.Config
	// UseKVEvents: the service listens to workers' KV
	// events, so every rank of a worker needs a kv_events endpoint to be
	// schedulable. Without them the primary index is approximate: booked
	// decisions populate it and expire after ApproxTTL (index.go).
	UseKVEvents bool
	// KVEndpointsOptional: with UseKVEvents, a rank without a kv_events
	// endpoint is still schedulable, because the Ingress receives its
	// events another way, keyed by worker id and rank (an event plane
	// such as Dynamo's NATS subjects, zmqin/natsplane). Ranks with an
	// endpoint are listened to as before; Ingress.Sync receives every
	// rank, those without an endpoint with Endpoint "".
	KVEndpointsOptional bool
	// ApproxTTL is router_ttl_secs: how long a recorded block of the
	// approximate primary stays after its last booking. >= 0.
	ApproxTTL time.Duration
	// PredictedTTL, when > 0, is router_predicted_ttl_secs: booked
	// decisions also populate a side index with this TTL beside the
	// event-driven primary. Requires UseKVEvents.
	PredictedTTL time.Duration
	// ApproxMaxBlocks caps the recorded (worker rank, block) pairs of each
	// approximate index (primary or side) of each partition; 0 picks
	// radix.DefaultApproxMaxBlocks.
	ApproxMaxBlocks int
	// SelectionCacheTTL, SelectionCacheMaxEntries and SelectionCacheMaxBytes
	// bound the pending-selection cache. All > 0.
	SelectionCacheTTL        time.Duration
	SelectionCacheMaxEntries int
	SelectionCacheMaxBytes   int64
	// KVEndpointNetworks, when non-nil, are the only networks whose
	// addresses a worker's kv_events and replay endpoints may name: a
	// registration naming another address (or a host name, or an ipc path)
	// is refused as a bad request. nil allows any endpoint, as the
	// reference does.
	KVEndpointNetworks []netip.Prefix
	// MaxReservations and MaxReservationBytes bound the live
	// reservations: their number (in-flight bookings included) and the
	// bytes their tracking hashes and ids hold. A booking past either is
	// refused with ErrCapacity; nothing already booked is touched. > 0.
	MaxReservations     int
	MaxReservationBytes int64
	// MaxListeners bounds the KV-event listener ranks (the ranks of the
	// schedulable workers, with UseKVEvents): a registration past it is a
	// conflict and changes nothing. > 0.
	MaxListeners int
	// Tracking selects public or keyed tracking hashes (tracking.go).
	Tracking TrackingHash
	// IndexShards is radix.Config.Shards of every partition's index; 0 picks
	// radix.DefaultShards.
	IndexShards int
	// IndexMaxBlocksPerRank is radix.Config.MaxBlocksPerRank of every
	// partition's event-driven index; 0 picks
	// radix.DefaultMaxBlocksPerRank. Approximate indexes are bounded by
	// ApproxMaxBlocks instead.
	IndexMaxBlocksPerRank int
	// Disagg configures the disaggregation coordinator (zero values pick
	// its defaults). The number of live plans is bounded by
	// MaxReservations.
	Disagg DisaggConfig

	// SelectionPolicy is the selection policy of every partition that
	// PartitionSelectionPolicies does not name (not Sched.Policy, the
	// router queue's classes); nil is sched.DefaultSelectionPolicy(),
	// the reference's decisions.
	SelectionPolicy *sched.SelectionPolicy
	// PartitionSelectionPolicies chooses the policy of single partitions.
	PartitionSelectionPolicies map[Partition]*sched.SelectionPolicy
	// SelectionPolicies are further policies a request may choose by name
	// with router_config_override.routing_policy. The built-in policies
	// (sched.BuiltinSelectionPolicy) and those of SelectionPolicy and
	// PartitionSelectionPolicies can always be chosen; names must be
	// unique.
	SelectionPolicies []*sched.SelectionPolicy
	// OverlapRefreshAfter: a request that waited in the router queue at
	// least this long matches its prompt in the index again before it
	// is scored (the reference's overlap refresh interval); 0 never does.
	OverlapRefreshAfter time.Duration
	// SessionAffinity enables one session table per partition (TTL > 0).
	SessionAffinity AffinityConfig
	// MaxAffinityEntries bounds each partition's session table; 0 picks
	// MaxSessionAffinityEntries (tests lower it).
	MaxAffinityEntries int
}

// Partition names a routing partition: (model_name, routing_group).
type Partition struct{ Model, Group string }

// DefaultConfig returns the reference service's defaults.
func DefaultConfig() Config {
	return Config{
		Sched:                    sched.DefaultConfig(),
		UseKVEvents:              true,
		ApproxTTL:                radix.DefaultApproxTTL,
		SelectionCacheTTL:        DefaultSelectionCacheTTL,
		SelectionCacheMaxEntries: DefaultSelectionCacheMaxEntries,
		SelectionCacheMaxBytes:   DefaultSelectionCacheMaxBytes,
		MaxReservations:          DefaultMaxReservations,
		MaxReservationBytes:      DefaultMaxReservationBytes,
		MaxListeners:             DefaultMaxListeners,
		OverlapRefreshAfter:      DefaultOverlapRefreshAfter,
	}
}

// Validate reports the first invalid field.
func (c *Config) Validate() error {
	if err := c.Sched.Validate(); err != nil {
		return err
	}
	if c.SelectionCacheTTL <= 0 {
		return fmt.Errorf("%w: selection cache ttl must be > 0, got %v", ErrConfig, c.SelectionCacheTTL)
	}
	if c.SelectionCacheMaxEntries <= 0 {
		return fmt.Errorf("%w: selection cache max entries must be > 0, got %d", ErrConfig, c.SelectionCacheMaxEntries)
	}
	if c.SelectionCacheMaxBytes <= 0 {
		return fmt.Errorf("%w: selection cache max bytes must be > 0, got %d", ErrConfig, c.SelectionCacheMaxBytes)
	}
	if c.MaxReservations <= 0 || c.MaxReservationBytes <= 0 || c.MaxListeners <= 0 {
		return fmt.Errorf("%w: reservation and listener limits must be > 0, got %d reservations, %d bytes, %d listeners", ErrConfig, c.MaxReservations, c.MaxReservationBytes, c.MaxListeners)
	}
	if c.IndexShards < 0 || c.IndexShards > 1024 {
		return fmt.Errorf("%w: index shards %d outside [0, 1024]", ErrConfig, c.IndexShards)
	}
	if c.IndexMaxBlocksPerRank < 0 {
		return fmt.Errorf("%w: index max blocks per rank %d is negative", ErrConfig, c.IndexMaxBlocksPerRank)
	}
	if c.OverlapRefreshAfter < 0 {
		return fmt.Errorf("%w: overlap refresh after %v < 0", ErrConfig, c.OverlapRefreshAfter)
	}
	if err := c.SessionAffinity.validate(); err != nil {
		return err
	}
	if c.MaxAffinityEntries < 0 || c.MaxAffinityEntries > MaxSessionAffinityEntries {
		return fmt.Errorf("%w: affinity entries %d outside [0, %d]", ErrConfig, c.MaxAffinityEntries, MaxSessionAffinityEntries)
	}
	if err := c.Tracking.Validate(); err != nil {
		return err
	}
	if c.PredictedTTL < 0 {
		return fmt.Errorf("%w: router_predicted_ttl_secs must be > 0, got %v", ErrConfig, c.PredictedTTL)
	}
	if c.PredictedTTL > 0 && !c.UseKVEvents {
		return fmt.Errorf("%w: router_predicted_ttl_secs requires use_kv_events=true; do not combine a primary approximate indexer with a side approximate indexer", ErrConfig)
	}
	if err := (radix.ApproxConfig{TTL: c.ApproxTTL, MaxBlocks: c.ApproxMaxBlocks, Shards: c.IndexShards}).Validate(); err != nil {
		return fmt.Errorf("%w: %v", ErrConfig, err)
	}
	reg, err := c.policyRegistry()
	if err != nil {
		return err
	}
	for _, name := range []string{c.Disagg.PrefillPolicy, c.Disagg.DecodePolicy} {
		if _, ok := reg[name]; name != "" && !ok {
			return fmt.Errorf("%w: unknown selection policy %q for a disaggregated pool (known: %s)", ErrConfig, name, strings.Join(slices.Sorted(maps.Keys(reg)), ", "))
		}
	}
	return c.Disagg.validate()
}

// policyRegistry returns every policy a request may name: the built-in
// ones, SelectionPolicy, PartitionSelectionPolicies' and
// SelectionPolicies, by name. A name used by
// two different policies is an error.
func (c *Config) policyRegistry() (map[string]*sched.SelectionPolicy, error) {
	m := map[string]*sched.SelectionPolicy{}
	add := func(pol *sched.SelectionPolicy) error {
		if err := pol.Validate(); err != nil {
			return fmt.Errorf("%w: %w", ErrConfig, err)
		}
		if old, ok := m[pol.Name]; ok && old != pol {
			return fmt.Errorf("%w: two selection policies named %q", ErrConfig, pol.Name)
		}
		m[pol.Name] = pol
		return nil
	}
	for _, name := range []string{sched.SelectionDefault, sched.SelectionCacheBalance} {
		m[name] = sched.BuiltinSelectionPolicy(name)
	}
	if c.SelectionPolicy != nil {
		if err := add(c.SelectionPolicy); err != nil {
			return nil, err
		}
	}
	for _, pol := range c.PartitionSelectionPolicies {
		if err := add(pol); err != nil {
			return nil, err
		}
	}
	for _, pol := range c.SelectionPolicies {
		if err := add(pol); err != nil {
			return nil, err
		}
	}
	return m, nil
}

// policyFor returns the configured policy of partition (model, group).
func (c *Config) policyFor(model, group string) *sched.SelectionPolicy {
	if pol, ok := c.PartitionSelectionPolicies[Partition{model, group}]; ok {
		return pol
	}
	if c.SelectionPolicy != nil {
		return c.SelectionPolicy
	}
	return sched.DefaultSelectionPolicy()
}

// profile returns model's router policy profile.
func (c *Config) profile(model string) *sched.PolicyProfile {
	return c.Sched.Policy.Profile(model, c.Sched.QueueThreshold, c.Sched.QueuePolicy)
}

// queueing reports whether model's partitions queue (a policy class with
// a busy line); max_num_batched_tokens is then required, as in Dynamo.
func (c *Config) queueing(model string) bool { return c.profile(model).Queues() }
