package core

import (
	"fmt"
	"net/netip"
	"time"

	"github.com/kvselect/kvselect/sched"
)

// Defaults of Config (spec service-api 2 and 3.4).
const (
	DefaultSelectionCacheTTL        = 120 * time.Second
	DefaultSelectionCacheMaxEntries = 4096
	DefaultSelectionCacheMaxBytes   = 256 << 20
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
	// UseKVEvents is DYN_USE_KV_EVENTS: the service listens to workers' KV
	// events, so every rank of a worker needs a kv_events endpoint to be
	// schedulable.
	UseKVEvents bool
	// SelectionCacheTTL, SelectionCacheMaxEntries and SelectionCacheMaxBytes
	// bound the pending-selection cache (spec 3.4). All > 0.
	SelectionCacheTTL        time.Duration
	SelectionCacheMaxEntries int
	SelectionCacheMaxBytes   int64
	// KVEndpointNetworks, when non-nil, are the only networks whose
	// addresses a worker's kv_events and replay endpoints may name: a
	// registration naming another address (or a host name, or an ipc path)
	// is refused as a bad request. nil allows any endpoint, as the
	// reference does.
	KVEndpointNetworks []netip.Prefix
	// IndexShards is radix.Config.Shards of every partition's index; 0 picks
	// radix.DefaultShards.
	IndexShards int
}

// DefaultConfig returns the reference service's defaults.
func DefaultConfig() Config {
	return Config{
		Sched:                    sched.DefaultConfig(),
		UseKVEvents:              true,
		SelectionCacheTTL:        DefaultSelectionCacheTTL,
		SelectionCacheMaxEntries: DefaultSelectionCacheMaxEntries,
		SelectionCacheMaxBytes:   DefaultSelectionCacheMaxBytes,
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
	if c.IndexShards < 0 || c.IndexShards > 1024 {
		return fmt.Errorf("%w: index shards %d outside [0, 1024]", ErrConfig, c.IndexShards)
	}
	return nil
}

// queueing reports whether queueing is enabled (router_queue_threshold
// set). Queueing itself is not implemented yet; the flag only makes
// max_num_batched_tokens required, as in Dynamo.
func (c *Config) queueing() bool { return c.Sched.QueueThreshold != nil }
