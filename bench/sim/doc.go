// Package sim measures routing quality: Run (`kvselect bench --simulate`)
// replays a workload of package bench through simulated vLLM engines
// (package bench/sim/vllm) in virtual time, once per policy of
// Config.Policies and load level of Config.Loads, the same requests in the
// same order, and reports each policy's KV hit rate, latencies,
// throughput, preemptions and load balance. The policies are kvselect (the
// selector at bench.Config.Target or StartServer, as configured: in
// process, the reference's policy), cache_balance (the same selector with
// router_config_override.routing_policy "cache_balance" on every request),
// approximate (a selector without KV events, at Config.ApproxTarget or
// StartApproxServer: its workers register no kv_events endpoint and it
// predicts the engines' caches from its own bookings; nothing is published
// or synchronised, and its overlap mismatches count wrong predictions;
// skipped when neither is given), round_robin and random (seeded by
// bench.Config.Seed), and the peer routers' policies of package
// bench/sim/peers (PeerPolicies: sglang_cache_aware, smg_cache_aware,
// llm-d, llm-d_precise, prodstack_prefixaware, aibrix_prefix_cache;
// all of them run by default (AllPolicies; --policies own runs only
// kvselect's and the baselines, Policies; peers only the peers). The
// kvselect policy is the reference's default, NVIDIA Dynamo's KV router
// cost, and the report names it so (ReferenceNames). The load harness
// itself is package bench; this package adds the virtual-time loop, the
// policies and their report.
//
// # Peer policies
//
// A peer runs over fresh engines with the run's seed, like every policy,
// and sees what its router sees: its own in-flight counts (SMG, SGLang,
// AIBrix: up at dispatch, down at the request's end), its own
// routing-history index (SMG's tree, llm-d's per-pod LRUs,
// production-stack's trie, AIBrix's table, with their eviction run on
// virtual time), the engines' waiting queues and KV usage as of its last
// scrape (llm-d: every 50 ms; the loop calls the scrape at each multiple
// of the interval, before any later event, so requests routed since are
// invisible to it), and for llm-d_precise the engines' caches at the
// decision, as KV events tell them. Never kvselect's bookings. A peer's
// text is its prompt's tokens, one token standing for 4 bytes of text:
// package peers lists each transcription's sources and simplifications.
//
// # Engines
//
// Every worker is one vllm.Engine (one data-parallel rank): continuous
// batching as vLLM v1 schedules it, chunked prefill under a per-step token
// budget (max_num_batched_tokens, 8,192 by default), a KV pool of
// Config.CapacityBlocks blocks with full-block prefix caching, LRU
// eviction of unreferenced blocks and preemption, and a step time fitted
// to Vidur's published profile of Meta-Llama-3-8B on an A100 80GB: see
// vllm.StepModel for the formula, its constants and what it leaves out.
// The defaults (vllm.DefaultConfig) are that model's pool at block size
// 64: 6,144 blocks, 393k tokens. A request's token stream is its prompt and
// its answer (bench.StreamHashes): the answer's full blocks are cached too,
// and a synthetic conversation's next turn, whose prompt repeats the
// answer, finds them.
//
// # Arrivals and load levels
//
// A trace's requests arrive at their timestamps times a level's time
// scale. A synthetic workload's conversations start as a Poisson process
// (seeded) and each later turn arrives when the previous one has finished,
// plus a think time drawn once per turn (exponential, mean
// Config.ThinkTime for a user's turn, Config.ToolThinkTime for a turn
// carrying a tool's result): sessions are closed loops, as users and
// agents are.
//
// The load levels are fractions of the cluster's capacity, which Run
// measures first: round-robin over fresh engines with every request queued
// at time 0, the requests completed per second of engine busy time, times
// the number of engines (measureCapacity says why busy time). A level of
// load L offers L times that rate: a trace's time scale, or the rate at
// which conversations start (times the mean turns per conversation).
// Without Loads, one level at Config.TimeScale or Config.ArrivalRate.
//
// # The loop
//
// runSim takes the earliest of the next step end and the next arrival
// (step ends first at equal times): a step end reports each request's
// first token (POST prefill_complete for the selector) and end (DELETE),
// and the engine schedules its next step; the arrivals of one instant are
// routed one by one, join their engines' waiting queues, and then every
// idle engine with work schedules a step.
//
// # Synchronisation with the selector
//
// The selector's policies see the engines' pools exactly: an engine's pool
// changes (blocks cached when a step schedules them, blocks evicted to
// make room) queue on its bench.KVPublisher; before each selection every
// engine with queued changes closes them with a sync block of that round
// (syncBlock: remove the previous round's, store this round's) and
// publishes them as one real vLLM KV event batch over ZMQ, and the
// simulation polls POST /overlap_scores with the sync block until every
// publishing worker shows it (at most Config.SyncTimeout; a timeout is
// counted, the first one aborts). The selector applies a worker's events
// in order, so the rest of the batch is applied too. The report checks
// it: overlap_mismatches counts selections whose overlap.gpu differs from
// the chosen engine's cached prefix at that instant. Wall time therefore
// depends on the selector's KV-event latency, virtual time does not.
//
// # Report
//
// Per level and policy (PolicyResult): hit_rate (prompt blocks found
// cached when each request was first scheduled, over prompt blocks),
// TTFT p50/p90/p99, end-to-end p50/p99, throughput (completed requests and
// tokens per simulated second over the makespan), preemptions, requests
// and engine busy time per worker (max/mean), evictions; and
// hit_rate_bound, the hit rate of one engine of unbounded capacity serving
// the requests in order (no policy over the engines can do better); and
// per level hit_rate_bound_pooled, the capacity-aware bound: one engine
// holding every engine's blocks, under the engines' eviction
// (vllm.Replay), fed the requests one at a time in arrival order (a
// synthetic workload's as an engine answering instantly would see them).
// It is the bound a router can approach when the pools evict; it is not a
// hard ceiling (running alone, no request pins blocks, and one LRU over
// the pooled blocks is not the best split of them), so a policy may
// exceed it slightly. Each policy's hit_rate_of_bound and
// hit_rate_of_pooled_bound are its hit rate as a share of the two.
// Report.Policies is the highest level's. round_robin and random are
// deterministic; the selector's policies are when the in-process selector
// is used: each selector policy's run at each level gets a selector of its
// own, its tie-breaks seeded from bench.Config.Seed (--rand-seed), so a
// policy's figures are the same whichever other policies run with it. An
// external selector (--target) is shared by the runs and keeps its state.
package sim
