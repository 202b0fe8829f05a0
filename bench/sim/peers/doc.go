// Package peers transcribes the worker-selection policies of the routers
// a team would deploy instead of kvselect, as policies of the routing
// simulation (package bench/sim): each reads only what its router reads,
// with that router's current defaults. Each policy's file cites the
// upstream source file it transcribes (owner/repo:path), read at the
// repository's current commit.
//
// # The host's contract
//
//  1. New(name, opts) builds a policy over opts.Engines (1 to MaxWorkers),
//     seeded from opts.Seed.
//  2. For every request in arrival order, Pick(now, r) returns its worker;
//     now never decreases. The policy updates its own state (in-flight
//     counts, routing-history indexes) there, as the router does at
//     dispatch.
//  3. When a request's stream ends, Done(w) with the worker Pick gave it.
//  4. A policy that is a Scraper reads the engines' gauges only in
//     Scrape, which the host calls at every multiple of ScrapeInterval
//     with the engines as they are then; Pick sees the last scrape's
//     values.
//
// Nothing here opens a socket, starts a goroutine or reads a clock: the
// peers' background loops (tree eviction, TTL sweeps, metric refresh) run
// on the host's virtual time.
//
// # The policies
//
//   - SGLang (sgl-project/sglang: sgl-router/src/policies/cache_aware.rs,
//     tree.rs; defaults sgl-router/py_src/sglang_router/router_args.py) and
//     SMG (lightseekorg/smg: model_gateway/src/policies/cache_aware.rs,
//     crates/kv_index/src/string_tree.rs; defaults model_gateway/src/main.rs):
//     cache_aware over HTTP workers, the approximate tree of routed text;
//     cache threshold 0.3, balance thresholds 64 and 1.5 in-flight
//     requests, eviction every 120 s to 2^26 characters per worker.
//   - LLMD (llm-d/llm-d-router: pkg/epp/config/loader/defaults.go,
//     pkg/epp/framework/plugins/scheduling/{scorer,picker},
//     …/requestcontrol/dataproducer/approximateprefix): the EPP's default
//     profile, 2·queue + 2·(1 − KV usage) + 3·prefix ratio over gauges
//     scraped every 50 ms, max-score picker with random ties, prefix from
//     the routing history in per-pod LRUs of num_gpu_blocks hashes.
//   - LLMDPrecise (deploy/config/epp-precise-prefix-cache-config.yaml): the
//     shipped KV-event configuration, prefix 2, KV 1, queue 1, the prefix
//     ratio from the engines' caches.
//   - ProductionStack (vllm-project/production-stack:
//     src/vllm_router/routers/routing_logic.py, src/vllm_router/prefix/hashtrie.py):
//     prefixaware, a never-evicted trie of 128-character chunks, random
//     among the endpoints of the longest match, load never read.
//   - AIBrix (vllm-project/aibrix: pkg/plugins/gateway/algorithms/prefix_cache.go,
//     pkg/utils/prefixcacheindexer/hash.go, pkg/utils/lrustore/lru_store.go):
//     prefix-cache, a 200,000-entry LRU of 4-byte blocks with a 20-minute
//     TTL, an in-flight imbalance guard of 8 and a mean + 1 sd bound.
//
// The reference's default (NVIDIA Dynamo's KV router cost) is not here:
// kvselect's default policy is it, and bench/sim reports it as kvselect
// with that reference name.
//
// # What is simplified
//
//   - Text. The peers route on characters or bytes; the simulation's
//     prompts are token ids. One token stands for CharsPerToken (4) bytes,
//     and every character quantity of a default is converted: SMG's tree
//     holds tokens and its budget is 2^26/4 tokens; production-stack's
//     chunk is 32 tokens; AIBrix's block is one token; llm-d's block of 64
//     estimated 4-byte tokens is 64 tokens. A prompt's text is its whole
//     token stream: the chat templating of each router (separators, role
//     names, llm-d's tools JSON) is not modelled.
//   - Hashes. xxhash64 chains are replaced by another 64-bit chain
//     (chainHash); they are only compared.
//   - Arbitrary orders. Where a peer takes the first entry of a hash map
//     (SMG's tenant when a node's last_tenant left, the old router's
//     tenant of a node and its smallest tree on ties), the lowest worker
//     index is taken: a fixed order, as a map's is for fixed URLs.
//   - The old router stamps every node of a matched path at each match;
//     here it shares SMG's tree, which stamps the matched node 1 time in 8.
//     This only orders evictions, which the 2^26 budget rarely needs.
//   - Health, circuit breakers, retries, multiple gateway replicas and
//     state sync (SMG mesh, AIBrix Redis) are absent: one gateway, all
//     workers healthy. llm-d's metrics are never stale (a scrape every
//     50 ms, well under its 2 s threshold); its index updates
//     synchronously after the pick (PreRequest is asynchronous).
//   - llm-d's precise producer sees the engines' caches at the decision
//     instant (KV events without delay), over full blocks of the engines'
//     size (the shipped config's 64).
package peers
