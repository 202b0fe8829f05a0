package bench

import "fmt"

// The disagg mix (MixDisagg) books each request in two pools of one
// selector: the routing groups "prefill" and "decode" of the default model
// (core's default pool names for a plan, ai-dynamo/dynamo's prefill and
// decode routers). Each pool has Config.Workers workers, spread over two
// zones, and every worker names its zone as its KV-transfer domain with
// "required" enforcement: the coordinator then books the prefill leg only
// in the zone of the decode worker it anchors on (decode-anchored order,
// the default), so each plan runs the coordinator's constraint path, not
// only two bookings.

const (
	// DisaggPrefillGroup and DisaggDecodeGroup are the pools' routing
	// groups.
	DisaggPrefillGroup = "prefill"
	DisaggDecodeGroup  = "decode"
	// disaggDomain is the topology domain the workers transfer KV within.
	disaggDomain = "zone"
	// topologyTaintPrefix is the reserved prefix of the taint a worker
	// carries for each of its topology domains ("dynamo.topology/zone=z0"),
	// which the coordinator's constraint requires.
	topologyTaintPrefix = "dynamo.topology/"
)

// disaggMinThroughput is the disagg mix's target at C1024: a plan books
// twice and its hand-off frees once, so at least 0.4 of the no-op's
// throughput (a lifecycle's target with hash bodies is 0.5).
const disaggMinThroughput = 0.4

// planGroups follows the selection id in a /disagg/plan body; the prompt's
// own fields come after it.
const planGroups = `","prefill_routing_group":"` + DisaggPrefillGroup + `","decode_routing_group":"` + DisaggDecodeGroup + `",`

// registeredWorkers is the number of workers register upserts: one pool of
// cfg.Workers, or two with MixDisagg.
func registeredWorkers(cfg *Config) int {
	if cfg.Mix == MixDisagg {
		return 2 * cfg.Workers
	}
	return cfg.Workers
}

// workerRequests are the workers register upserts, ids 1..n in order; with
// cfg.KVEventsEndpoints worker i gets endpoint (i-1) mod len as its rank 0's.
// With MixDisagg workers 1..Workers form the prefill pool and the next
// Workers the decode pool; the j-th worker of a pool (from 0) is in zone
// "z<j mod 2>".
func workerRequests(cfg *Config) []WorkerRequest {
	n := registeredWorkers(cfg)
	ws := make([]WorkerRequest, n)
	for i := range ws {
		w := &ws[i]
		*w = WorkerRequest{
			WorkerID:      uint64(i + 1),
			Endpoint:      fmt.Sprintf("http://bench-worker-%d:8000", i+1),
			BlockSize:     cfg.BlockSize,
			DPSize:        1,
			TotalKVBlocks: cfg.TotalKVBlocks, MaxBatchedTokens: cfg.MaxBatchedTokens,
		}
		if k := len(cfg.KVEventsEndpoints); k > 0 {
			w.KVEventsEndpoints = map[string]string{"0": cfg.KVEventsEndpoints[i%k]}
		}
		if cfg.Mix != MixDisagg {
			continue
		}
		w.RoutingGroup = DisaggPrefillGroup
		if i >= cfg.Workers {
			w.RoutingGroup = DisaggDecodeGroup
		}
		zone := fmt.Sprintf("z%d", (i%cfg.Workers)%2)
		w.TopologyDomains = map[string]string{disaggDomain: zone}
		w.Taints = []string{topologyTaintPrefix + disaggDomain + "=" + zone}
		w.KVTransferDomain = disaggDomain
		w.KVTransferEnforcement = "required"
	}
	return ws
}

// fillBodies returns the bodies the fill routes and awaits the prompts
// with: their own with one pool, else the prompt scoped to the prefill
// pool, whose workers' engines the fill serves on (the decode engines stay
// empty: a decode worker receives the KV blocks from prefill, which the
// harness does not simulate).
func fillBodies(cfg *Config, prompts []Prompt) [][]byte {
	bodies := make([][]byte, len(prompts))
	for i := range prompts {
		b := prompts[i].Body
		if cfg.Mix == MixDisagg {
			b = append([]byte(`{"routing_group":"`+DisaggPrefillGroup+`",`), b[1:]...)
		}
		bodies[i] = b
	}
	return bodies
}
