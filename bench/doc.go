// Package bench is kvselect's load and simulation kit. So far it holds the
// simulated engine used by `kvselect mocker`, the end-to-end tests and the
// benchmarks: Engine, a vLLM-like engine with one KV block pool of fixed
// capacity (LRU eviction) and one zmqin.Publisher per data-parallel rank,
// publishing real BlockStored / BlockRemoved / AllBlocksCleared batches
// with the vLLM encoder (zmqin.Encoder), with a replay socket; and
// Workload, a synthetic prefix-sharing prompt generator.
//
// # Using an Engine
//
//  1. NewEngine binds every rank's PUB (and replay ROUTER) socket; rank r
//     uses the configured port plus r, as vLLM does, or a free port each
//     when the port is 0 (Endpoints tells which).
//  2. Register the engine's endpoints with the selector (kv_events_endpoints
//     keyed by rank, replay_endpoint for a single rank) and wait until it
//     subscribes (Subscribers): a PUB drops what it publishes before.
//  3. ServeTokens "serves" a prompt on a rank: cached leading blocks are
//     hits, the rest are stored, evicting least recently used blocks, and
//     one batch describing the change is published. Clear resets a rank.
//  4. Close closes the publishers.
//
// Engine hashes are a chain over the blocks' local hashes (ChainHashes),
// so they depend on the whole prefix, as vLLM's do; the selector matches by
// the local hashes of the tokens, which it computes itself.
//
// # Goroutines
//
// An Engine starts none of its own; each rank's zmqin.Publisher runs its
// accept loops and per-peer goroutines (see zmqin.Publisher) until Close.
package bench
