// Package vllm is the engine model of kvselect's routing simulation
// (bench/sim): one vLLM engine in virtual time, with continuous batching,
// chunked prefill, a KV block pool with prefix caching and preemption, and
// a step time fitted to a public measurement (StepModel). It opens no
// sockets and reads no clock: a host (bench/sim) feeds requests and
// advances time, and receives the pool's changes through a Sink, which it
// publishes as real vLLM KV events.
//
// # The host's contract
//
//  1. New(cfg, sink) builds an idle engine with an empty pool.
//  2. Add(r) queues a request at its arrival; then, if the engine is not
//     Busy, Start(now) schedules a step (it does nothing without work).
//  3. At StepEnd(), Finish() ends the step and returns each request's
//     progress (its first token, its end), then Start(StepEnd()) schedules
//     the next step. The host interleaves engines and arrivals in time
//     order; Sink calls happen inside Start (blocks cached, blocks evicted
//     to make room) in the order the pool changes.
//
// Prefix-cache hits count only full blocks; blocks of running requests are
// never evicted; unreferenced blocks leave in least-recently-freed order,
// a finished request's tail first. See Engine for the scheduling rules,
// and vllm-project/vllm: vllm/v1/core/sched/scheduler.py and
// vllm/v1/core/block_pool.py for the code they follow.
package vllm
