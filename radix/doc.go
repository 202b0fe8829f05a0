// Package radix is kvselect's KV prefix index: which KV-cache blocks every
// (worker, dp_rank) holds, fed by the workers' own KV events, queried with a
// request's local block hashes.
//
// # Hashing
//
// LocalHashes and SequenceHashes match Dynamo bit for bit (XXH3-64, seed
// 1337, tokens as u32 little-endian; ai-dynamo/dynamo:lib/tokens/src/lib.rs
// and lib/kv-router/src/protocols.rs), because the router recomputes the
// local hash of every block a worker reports and a caller may send hashes
// it computed itself.
//
// # Using the index
//
//  1. New(Config{}) per partition (one block size).
//  2. Feed every worker's KV events with Apply or ApplyBatch, in order per
//     worker, from one goroutine per worker at a time (the host's sticky
//     writer). Stored blocks carry the engine's external hash and the local
//     hash the host computed from the event's tokens.
//  3. Match a request's local hashes into a reused Result: per worker rank,
//     the device prefix depth and the host, disk and external extensions.
//  4. Dump for /dump and peer recovery; restore by applying a dump's events
//     to an empty index. Stats for metrics.
//
// # Semantics
//
// Those of Dynamo's RadixTree and lower-tier indexers
// (ai-dynamo/dynamo:lib/kv-router/src/indexer/radix_tree.rs and
// lower_tier.rs), except where the README's implementation notes say why
// kvselect departs. A worker rank's blocks form a prefix-closed set of paths:
// a Stored event continues after its parent (which the worker must hold, or
// the event is dropped whole) or starts at the root; Removed drops a block
// and everything the worker holds below it; Cleared drops a rank,
// RemoveWorker all ranks. A store that repeats one of its own hashes or its
// parent's is a no-op; a block whose external hash the worker already holds
// elsewhere stops the store there. Every drop is counted by reason in
// Stats. Lower tiers (host_pinned, disk, external) are sets of continuation
// edges (parent external hash, local hash) -> child, walked from each
// worker's matched device prefix, host then disk then external.
//
// # Approximate indexing
//
// Approx (approx.go) is an Index written only by routing decisions, for
// selectors without KV events and for the short-TTL side index beside an
// event-driven one: Record(worker rank, local hashes, now) stores the
// prefix with its public sequence hashes as external hashes, every
// recorded block expires TTL after its last recording (rounded up to
// 100 ms), and the recorded blocks are capped (1 M by default, pruned to
// 80% closest-to-expiry first). The host calls Expire(now) about every
// 100 ms; time comes only from the caller. BenchmarkApproxRecord: 3.7 us
// and no allocation per 32-block recording on the project machine.
//
// # Concurrency
//
// The device tier is a compressed radix tree (Tree) whose nodes publish
// immutable states through atomic pointers: one writer at a time per tree
// builds a new state and swaps it in, readers (Match, Dump) load states and
// never wait; Go's garbage collector reclaims replaced states, doing the job
// of epoch reclamation. Index wraps trees in shards by worker id, each with
// a writer lock that readers never take. See DefaultShards for the shard
// count and its measurement, and extMap for the per-worker lookup table.
//
// Measured on the project machine (2 cores, one run, `go test -bench .
// -benchmem ./radix`, 2026-11-29): Match of a 512-block prompt held by 64
// workers 1.9 us with 0 allocations; apply of 32-block Stored events for 64
// workers (with their evictions) 13 M blocks/s (6.6 M stored blocks/s) on
// one goroutine; matches on both cores while one goroutine applies events
// 205 M block ops/s; the Mooncake trace replayed into 8 simulated workers
// 19 M block ops/s inside the index.
//
// # Memory
//
// Per device (worker, block) pair the index keeps the worker's external
// hash of the block (8 bytes, in the node's owner entry, where readers need
// it), its share of the block's local hash (8 bytes over the workers
// covering the edge), and an entry in the worker's lookup: 12-byte keyless
// slots kept 16/25 to 7/8 full, 14 to 18 bytes (see extMap, and
// Tree.nodes for the 4-byte node ids it stores). Nodes, owner entries and
// child maps add 0.5 to 4 bytes in the shapes below, whose edges are 64
// and 128 blocks long. Lower tiers are not counted.
//
// A worker rank holds at most Config.MaxBlocksPerRank blocks over all tiers
// (8 Mi by default): the store that passes it clears the rank
// (DropRankOverCapacity), so lost removals cannot grow the index forever.
//
// Measured with `go test -run '^$' -bench Memory -benchtime 1x ./radix`
// (2,093,056 pairs: 64 workers, each with a 64-block system prompt and 255
// conversations of 128 blocks; live heap after a full GC; 2026-12-01):
// 24.1 bytes per pair when all workers share the prompt and families of 8
// share their conversations, 32.6 when every worker's blocks are its own.
// The lookup that stored the key and a *node (24-byte slots, 3/8 to 3/4
// full) took 57.6 and 66.0, and a full GC with the index live took 38 to
// 65 ms instead of 2 to 14 ms (medians 44 and 4.5 over two sessions: the
// slots were pointers to scan). Building the index takes as long as before
// (0.48 to 0.68 s, either code).
// TestMemoryPerBlock fails above 40 bytes (23 to 37 at 61 K and 127 K
// pairs).
//
// Match and apply against the previous code, in one session (both built
// with go test -c and run alternately, 10 to 20 pairs of runs; median of
// the pairs' ratios new/old, none significant to benchstat):
// BenchmarkMatch512x64 0.99,
// BenchmarkMatch512x64Branching 0.98 (the read path is unchanged),
// BenchmarkApplyStored 1.00 (quartiles 0.93 and 1.05; three other
// sessions gave 0.88, 1.04 and 1.04, the last one +10% in the mean to
// benchstat, p=0.035: a lookup now confirms its candidate in the tree and
// shifts entries, while the collector has less to scan), BenchmarkMixed
// writers=1/shards=1 1.00 in block ops and 1.05 in applied blocks: no
// change beyond the noise of the shared 2-core machine, where single runs
// vary by up to 25%.
//
// Package radix opens no sockets, starts no goroutines and reads no clock.
package radix
