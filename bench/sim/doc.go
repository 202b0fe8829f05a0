// Package sim measures routing quality: Run (`kvselect bench --simulate`)
// replays a workload of package bench once per policy of Policies:
// kvselect (the selector at bench.Config.Target or StartServer chooses),
// approximate (the same selector without KV events, at
// Config.ApproxTarget or StartApproxServer: its workers register no
// kv_events endpoint and it predicts the engines' caches from its own
// bookings; nothing is synchronised, and its overlap mismatches count
// wrong predictions; skipped when neither is given), round_robin and
// random (seeded by bench.Config.Seed), each over fresh
// bench.Engines (bench.Config.Workers engines of one rank, KV pools of
// Config.CapacityBlocks blocks with LRU eviction), the same requests in the
// same order. The load harness itself is package bench; this package only
// adds the virtual-time loop, the policies and their report.
//
// # Model
//
// Time is virtual: a trace request arrives at its timestamp times
// Config.TimeScale, a synthetic one every 1/Config.ArrivalRate seconds.
// The loop (runSim) takes the requests in arrival order; before routing
// one it reports the lifecycle events due by then; the chosen engine
// serves the prompt at once (bench.Engine.ServeTokens: the hit is its
// cached leading blocks, the rest is stored and published), which gives
// the same cache history as serving at prefill start, because each
// engine's prefills run in arrival order. The timing model, per engine:
//
//   - prefill takes (ISL - hit blocks * block size) / Config.PrefillTPS
//     seconds, and an engine prefills one request at a time, first come
//     first served: TTFT = queueing delay + prefill time;
//   - decode takes OutputTokens / Config.DecodeTPS seconds after the
//     prefill, beside other requests' prefills and decodes (it costs the
//     engine nothing; it only keeps the request active);
//   - no memory pressure from running requests: the pool evicts only to
//     store new blocks.
//
// # Synchronisation with the selector
//
// The kvselect policy calls the selector for every request and reports
// its lifecycle in virtual-time order: POST /select_and_reserve at arrival
// (the prompt's body), POST prefill_complete when its prefill ends, DELETE
// when its decode ends. Every engine publishes one batch per served prompt
// that was not entirely cached (its evictions, then its stores), and
// before the next request is routed the simulation polls POST
// /overlap_scores with the served prompt until the chosen worker's
// device_blocks reaches the blocks the engine now holds of it (at most
// Config.SyncTimeout; a timeout is counted, and the first one aborts, as a
// selector that ingests no KV events). The selector applies a worker's
// events in order, so the selector scores every request on exactly the
// engines' pools, and the report checks it: overlap_mismatches counts
// selections whose overlap.gpu differs from the engine's hit. Wall time
// therefore depends on the selector's KV-event latency, virtual time does
// not.
//
// # Report
//
// Per policy the report gives hit_rate (prompt blocks already cached on the
// chosen engine / prompt blocks, from the engines' own counts), TTFT
// p50/p99/mean, requests per worker (max/mean) and the coefficient of
// variation of the prefilled tokens per worker, and hit_rate_bound, the hit
// rate of one engine of unbounded capacity (no policy can beat it).
// On mooncake_trace_1000.jsonl with the defaults (one run, 2026-12-01):
// kvselect 0.331, approximate 0.334 (6 of 1,000 predictions wrong: the
// engines evicted what the selector still predicted), round_robin 0.296,
// random 0.293: on this trace, whose reuse is short-range, the events add
// nothing over predicting from bookings; they matter when engines evict
// more, restart, or are shared with traffic the selector does not route.
// round_robin and random are deterministic; kvselect is as deterministic as
// the selector's random tie-breaks: on mooncake_trace_1000.jsonl at time
// scale 1, where workers are often idle and equal, its hit rate varied from
// 0.32 to 0.35 over runs; at time scale 0.5 three runs were identical.
package sim
