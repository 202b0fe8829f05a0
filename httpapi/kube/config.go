package kube

import (
	"cmp"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/labels"

	"github.com/kvselect/kvselect/core"
)

// Defaults of Config (DefaultConfig).
const (
	// DefaultKVEventsPort is the port of an engine's KV-event publisher
	// (DYN_EPP_KV_EVENT_PORT's default; llm-d's socketPort).
	DefaultKVEventsPort = 5557
	// DefaultDebounce is how long the source waits after a change before
	// it builds the membership, so that a rollout's burst of pod events
	// costs one reconciler pass, not one per event.
	DefaultDebounce = 100 * time.Millisecond
)

// ErrConfig marks an invalid Config.
var ErrConfig = errors.New("kube: invalid configuration")

// Config configures a Source. Exactly one of PoolName and Selector is set.
type Config struct {
	// Kubeconfig is the path (or a list in the KUBECONFIG form) of a
	// kubeconfig file; empty means in-cluster (the pod's service account).
	Kubeconfig string
	// Namespace holds the pool and its pods; empty means the kubeconfig
	// context's namespace, or in cluster the pod's own (POD_NAMESPACE, then
	// the service account's namespace file), else "default".
	Namespace string

	// PoolName names the inference.networking.k8s.io/v1 InferencePool
	// whose spec.selector and spec.targetPorts select the workers.
	PoolName string
	// PrefillPoolName, with PoolName, names a second InferencePool, of
	// prefill workers: the pools are then a disaggregated pair, as in
	// Dynamo's standalone EPP (DYN_EPP_PREFILL_INFERENCE_POOL_NAME makes
	// DYN_EPP_INFERENCE_POOL_NAME the decode pool, and the prefill pool
	// gets its own selector and reflector: ai-dynamo/dynamo:deploy/
	// inference-gateway/ext-proc/src/epp_router.rs). PoolName's workers
	// get DecodeRoutingGroup, PrefillPoolName's PrefillRoutingGroup
	// ("": core's decode and prefill). A pod both pools select is a decode
	// worker only (one worker id has one routing group), counted in
	// Stats.PodsInBothPools. The host sets it (RegisterFlags does not:
	// the flag is the host's, --prefill-pool-name).
	PrefillPoolName                         string
	PrefillRoutingGroup, DecodeRoutingGroup string
	// Selector is the label selector of the workers when there is no pool
	// (full syntax, llm-d's --endpoint-selector), with TargetPorts the
	// engines' HTTP port(s): the first is used.
	Selector    string
	TargetPorts []int

	// KVEventsPort is the port rank 0 publishes KV events on; rank r
	// publishes on KVEventsPort + r·KVEventsPortStride. 0: no KV-event
	// endpoints are registered.
	KVEventsPort, KVEventsPortStride int
	// DataParallelSize is the ranks of every engine (1 to
	// core.MaxDataParallelSize).
	DataParallelSize int
	// ReplayPort is the engines' KV-event replay port; 0: none. The
	// catalog supports replay only for DataParallelSize 1.
	ReplayPort int

	// The record every worker gets: ModelName and RoutingGroup ("" is
	// core's default partition), BlockSize (required), and the optional
	// TotalKVBlocks and MaxNumBatchedTokens (0: unset).
	ModelName, RoutingGroup            string
	BlockSize                          uint32
	TotalKVBlocks, MaxNumBatchedTokens uint64
	// RoleLabel, when set, names the pod label whose value is the pod's
	// routing group (e.g. llm-d.ai/role or Dynamo's dynamo-role, with
	// values prefill and decode); a pod without it gets RoutingGroup.
	RoleLabel string

	// Debounce coalesces changes: the membership is built this long after
	// the first change since the last build.
	Debounce time.Duration
	// Resync is the informers' resync period; 0 is none (the watch is the
	// source of truth, and a relist follows every broken watch).
	Resync time.Duration
}

// DefaultConfig returns the defaults: KV events on 5557 with stride 1,
// one rank, no replay, Debounce 100 ms.
func DefaultConfig() Config {
	return Config{KVEventsPort: DefaultKVEventsPort, KVEventsPortStride: 1, DataParallelSize: 1, Debounce: DefaultDebounce}
}

// Validate checks c; its errors wrap ErrConfig.
func (c *Config) Validate() error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: "+format, append([]any{ErrConfig}, args...)...)
	}
	switch {
	case c.PoolName == "" && c.Selector == "":
		return bad("set a pool name (--pool-name) or an endpoint selector (--endpoint-selector)")
	case c.PoolName != "" && c.Selector != "":
		return bad("a pool name and an endpoint selector exclude each other")
	case c.Selector != "":
		if _, err := labels.Parse(c.Selector); err != nil {
			return bad("endpoint selector %q: %v", c.Selector, err)
		}
		if len(c.TargetPorts) == 0 || len(c.TargetPorts) > 8 {
			return bad("an endpoint selector needs 1 to 8 target ports, got %d", len(c.TargetPorts))
		}
		for _, p := range c.TargetPorts {
			if p < 1 || p > 65535 {
				return bad("target port %d is outside 1-65535", p)
			}
		}
	case len(c.TargetPorts) > 0:
		return bad("target ports come from the InferencePool; set them only with an endpoint selector")
	}
	if c.PrefillPoolName != "" {
		pre, dec := c.groups()
		switch {
		case c.PoolName == "":
			return bad("a prefill pool needs a decode pool (--pool-name), not an endpoint selector")
		case c.PrefillPoolName == c.PoolName:
			return bad("the prefill pool %q must be another InferencePool than the decode pool", c.PrefillPoolName)
		case c.RoleLabel != "":
			return bad("a prefill pool and a role label exclude each other: the pools give the routing groups")
		case pre == dec:
			return bad("the prefill and decode routing groups must differ, both are %q", pre)
		}
	}
	if c.DataParallelSize < 1 || c.DataParallelSize > core.MaxDataParallelSize {
		return bad("data parallel size %d is outside 1-%d", c.DataParallelSize, core.MaxDataParallelSize)
	}
	if c.KVEventsPort < 0 || c.KVEventsPortStride < 1 {
		return bad("KV events port %d / stride %d: want a port ≥ 0 and a stride ≥ 1", c.KVEventsPort, c.KVEventsPortStride)
	}
	if last := c.KVEventsPort + (c.DataParallelSize-1)*c.KVEventsPortStride; c.KVEventsPort > 0 && last > 65535 {
		return bad("KV events port of the last rank, %d, is above 65535", last)
	}
	if c.ReplayPort < 0 || c.ReplayPort > 65535 {
		return bad("replay port %d is outside 0-65535", c.ReplayPort)
	}
	if c.ReplayPort > 0 && c.DataParallelSize != 1 {
		return bad("a replay port is supported only with data parallel size 1")
	}
	if c.BlockSize == 0 {
		return bad("the block size is required (the engines' --block-size)")
	}
	if c.Debounce < 0 || c.Resync < 0 {
		return bad("debounce %v and resync %v must not be negative", c.Debounce, c.Resync)
	}
	return nil
}

// groups returns the prefill and decode pools' routing groups, defaults
// filled.
func (c *Config) groups() (prefill, decode string) {
	return cmp.Or(c.PrefillRoutingGroup, core.DefaultPrefillRoutingGroup), cmp.Or(c.DecodeRoutingGroup, core.DefaultDecodeRoutingGroup)
}

// FlagSet is the part of *flag.FlagSet RegisterFlags uses (flags are the
// host's: this package does not import flag).
type FlagSet interface {
	StringVar(p *string, name, value, usage string)
	IntVar(p *int, name string, value int, usage string)
	DurationVar(p *time.Duration, name string, value time.Duration, usage string)
	Func(name, usage string, fn func(string) error)
}

// envInt reads an integer variable into *p; unset or empty leaves *p.
func envInt(env func(string) (string, bool), name string, p *int) error {
	v, ok := env(name)
	if !ok || v == "" {
		return nil
	}
	n, err := strconv.Atoi(v)
	if err != nil {
		return fmt.Errorf("%w: %s=%q: %v", ErrConfig, name, v, err)
	}
	*p = n
	return nil
}

func envString(env func(string) (string, bool), p *string, names ...string) {
	for _, name := range names {
		if v, ok := env(name); ok && v != "" {
			*p = v
			return
		}
	}
}

// parsePorts reads a comma-separated port list.
func parsePorts(s string) ([]int, error) {
	var out []int
	for f := range strings.SplitSeq(s, ",") {
		if f = strings.TrimSpace(f); f == "" {
			continue
		}
		n, err := strconv.Atoi(f)
		if err != nil {
			return nil, fmt.Errorf("%w: port %q: %v", ErrConfig, f, err)
		}
		out = append(out, n)
	}
	return out, nil
}

// RegisterFlags adds the discovery flags to fs, with c's values, or the
// environment's where set (env is os.LookupEnv in a host), as defaults:
//
//	--kubeconfig              KUBECONFIG                    kubeconfig path; empty: in-cluster
//	--pool-name               DYN_EPP_INFERENCE_POOL_NAME   the InferencePool
//	--pool-namespace          NAMESPACE, POD_NAMESPACE      namespace of the pool and pods
//	--endpoint-selector       DYN_EPP_POD_SELECTOR          label selector, instead of a pool
//	--endpoint-target-ports   DYN_EPP_TARGET_PORT           engines' HTTP port(s), with the selector
//	--kv-events-port          DYN_EPP_KV_EVENT_PORT         rank 0's KV-event port (5557; 0: none)
//	--kv-events-port-stride   DYN_EPP_KV_EVENT_PORT_STRIDE  port step between ranks (1)
//	--data-parallel-size      DYN_EPP_DATA_PARALLEL_SIZE    ranks per engine (1)
//	--kv-events-replay-port   DYN_EPP_KV_EVENT_REPLAY_PORT  replay port (0: none)
//	--role-label              DYN_EPP_ROLE_LABEL            pod label naming the routing group
//	--discovery-debounce                                    coalescing window (100ms)
//
// The flag names are llm-d's (llm-d/llm-d-router:pkg/epp/server/options.go)
// where it has one, the variables Dynamo's standalone EPP's
// (ai-dynamo/dynamo:deploy/inference-gateway/ext-proc/src/
// epp_standalone_config.rs; DYN_EPP_POD_SELECTOR, DYN_EPP_TARGET_PORT and
// DYN_EPP_ROLE_LABEL are from its router-only draft). The worker record's
// model, block size and capacity are the host's flags
// (RegisterWorkerFlags), since a host may already have them. An
// unparsable variable is an error.
func RegisterFlags(fs FlagSet, env func(string) (string, bool), c *Config) error {
	envString(env, &c.Kubeconfig, "KUBECONFIG")
	envString(env, &c.PoolName, "DYN_EPP_INFERENCE_POOL_NAME")
	envString(env, &c.Namespace, "NAMESPACE", "POD_NAMESPACE")
	envString(env, &c.Selector, "DYN_EPP_POD_SELECTOR")
	if v, ok := env("DYN_EPP_TARGET_PORT"); ok && v != "" {
		ports, err := parsePorts(v)
		if err != nil {
			return err
		}
		c.TargetPorts = ports
	}
	for _, e := range []struct {
		name string
		p    *int
	}{
		{"DYN_EPP_KV_EVENT_PORT", &c.KVEventsPort},
		{"DYN_EPP_KV_EVENT_PORT_STRIDE", &c.KVEventsPortStride},
		{"DYN_EPP_DATA_PARALLEL_SIZE", &c.DataParallelSize},
		{"DYN_EPP_KV_EVENT_REPLAY_PORT", &c.ReplayPort},
	} {
		if err := envInt(env, e.name, e.p); err != nil {
			return err
		}
	}
	envString(env, &c.RoleLabel, "DYN_EPP_ROLE_LABEL")

	fs.StringVar(&c.Kubeconfig, "kubeconfig", c.Kubeconfig, "path of a kubeconfig file (overrides KUBECONFIG); empty: in-cluster configuration")
	fs.StringVar(&c.PoolName, "pool-name", c.PoolName, "name of the inference.networking.k8s.io/v1 InferencePool whose selector and target port select the workers (overrides DYN_EPP_INFERENCE_POOL_NAME)")
	fs.StringVar(&c.Namespace, "pool-namespace", c.Namespace, "namespace of the pool and its pods (overrides NAMESPACE, POD_NAMESPACE); empty: the kubeconfig's or the pod's own")
	fs.StringVar(&c.Selector, "endpoint-selector", c.Selector, "label selector of the worker pods, instead of --pool-name (overrides DYN_EPP_POD_SELECTOR)")
	fs.Func("endpoint-target-ports", "comma-separated HTTP port(s) of the engines, with --endpoint-selector; the first is the worker's (overrides DYN_EPP_TARGET_PORT)", func(s string) error {
		ports, err := parsePorts(s)
		c.TargetPorts = ports
		return err
	})
	fs.IntVar(&c.KVEventsPort, "kv-events-port", c.KVEventsPort, "port of rank 0's KV-event publisher on every pod; 0: register no KV-event endpoints (overrides DYN_EPP_KV_EVENT_PORT)")
	fs.IntVar(&c.KVEventsPortStride, "kv-events-port-stride", c.KVEventsPortStride, "rank r publishes on --kv-events-port + r * stride (overrides DYN_EPP_KV_EVENT_PORT_STRIDE)")
	fs.IntVar(&c.DataParallelSize, "data-parallel-size", c.DataParallelSize, "data-parallel ranks of every engine (overrides DYN_EPP_DATA_PARALLEL_SIZE)")
	fs.IntVar(&c.ReplayPort, "kv-events-replay-port", c.ReplayPort, "KV-event replay port on every pod, data parallel size 1 only; 0: none (overrides DYN_EPP_KV_EVENT_REPLAY_PORT)")
	fs.StringVar(&c.RoleLabel, "role-label", c.RoleLabel, "pod label whose value is the pod's routing group, e.g. llm-d.ai/role (overrides DYN_EPP_ROLE_LABEL); empty: every pod in --routing-group")
	fs.DurationVar(&c.Debounce, "discovery-debounce", c.Debounce, "how long pod and pool changes are coalesced before the membership is rebuilt")
	return nil
}

// RegisterWorkerFlags adds the flags of the record every worker gets, for
// a host that has none of its own:
//
//	--model-name              DYN_MODEL_NAME                  catalog model
//	--block-size              DYN_KV_CACHE_BLOCK_SIZE         the engines' --block-size (required)
//	--routing-group                                           routing group ("default")
//	--total-kv-blocks         DYN_EPP_TOTAL_KV_BLOCKS         capacity hint (0: unset)
//	--max-num-batched-tokens  DYN_EPP_MAX_NUM_BATCHED_TOKENS  the engines' limit (0: unset)
func RegisterWorkerFlags(fs FlagSet, env func(string) (string, bool), c *Config) error {
	envString(env, &c.ModelName, "DYN_MODEL_NAME")
	bs, total, batched := int(c.BlockSize), int(c.TotalKVBlocks), int(c.MaxNumBatchedTokens)
	for _, e := range []struct {
		name string
		p    *int
	}{{"DYN_KV_CACHE_BLOCK_SIZE", &bs}, {"DYN_EPP_TOTAL_KV_BLOCKS", &total}, {"DYN_EPP_MAX_NUM_BATCHED_TOKENS", &batched}} {
		if err := envInt(env, e.name, e.p); err != nil {
			return err
		}
	}
	c.BlockSize, c.TotalKVBlocks, c.MaxNumBatchedTokens = uint32(max(bs, 0)), uint64(max(total, 0)), uint64(max(batched, 0))
	fs.StringVar(&c.ModelName, "model-name", c.ModelName, "model name of the discovered workers (overrides DYN_MODEL_NAME)")
	fs.Func("block-size", "KV block size of the engines, their --block-size (overrides DYN_KV_CACHE_BLOCK_SIZE)", uintFlag(func(v uint64) { c.BlockSize = uint32(v) }, 1<<32-1))
	fs.StringVar(&c.RoutingGroup, "routing-group", c.RoutingGroup, "routing group of the discovered workers (see --role-label)")
	fs.Func("total-kv-blocks", "KV blocks of every engine, a capacity hint; 0: unset (overrides DYN_EPP_TOTAL_KV_BLOCKS)", uintFlag(func(v uint64) { c.TotalKVBlocks = v }, 1<<63-1))
	fs.Func("max-num-batched-tokens", "the engines' --max-num-batched-tokens; 0: unset (overrides DYN_EPP_MAX_NUM_BATCHED_TOKENS)", uintFlag(func(v uint64) { c.MaxNumBatchedTokens = v }, 1<<63-1))
	return nil
}

// uintFlag parses an unsigned flag value no larger than limit.
func uintFlag(set func(uint64), limit uint64) func(string) error {
	return func(s string) error {
		v, err := strconv.ParseUint(s, 10, 64)
		if err != nil || v > limit {
			return fmt.Errorf("%w: %q: want an integer from 0 to %d", ErrConfig, s, limit)
		}
		set(v)
		return nil
	}
}
