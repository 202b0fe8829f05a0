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
// covering the edge), and an entry in the worker's lookup: keyless slots
// that pack hash bits, node id and offset to the widths the table needs,
// 4 or 5 bytes in the shapes below, kept 13/16 to 7/8 full: 4.8 to 6.1
// bytes (see extMap). Nodes, owner entries and child maps add 0.2 to 2.1
// bytes in the shapes below, whose edges are 64 and 128 blocks long. Lower
// tiers are not counted.
//
// A worker rank holds at most Config.MaxBlocksPerRank blocks over all tiers
// (8 Mi by default): the store that passes it clears the rank
// (DropRankOverCapacity), so lost removals cannot grow the index forever.
//
// Measured with `go test -run '^$' -bench Memory -benchtime 1x ./radix`
// (2,093,056 pairs: 64 workers, each with a 64-block system prompt and 255
// conversations of 128 blocks; live heap after a full GC; 2026-12-02):
// 15.6 bytes per pair when all workers share the prompt and families of 8
// share their conversations, 24.1 when every worker's blocks are its own.
// The distinct 24.1 are 8.0 of external hashes, 8.0 of local hashes, 6.1
// of lookup (5-byte slots of 18 or 19 hash, 13 or 14 id and 8 offset
// bits), 1.6 of nodes (node, state, owner entry and registry slot: 200
// bytes per 128-block node) and 0.4 of child maps (the root's and every
// prompt node's xsync map, 13 KB for 255 children). The 16 bytes of hashes
// are what readers need, so a 20-byte bound would leave 4 for the lookup,
// nodes and maps: under 2 for the lookup, fewer bits than a 32 K-entry
// worker needs to name a block's place (15) and tell keys apart. The
// lookup's 12-byte slots took 24.1 and 32.6 (2026-12-01); the lookup that
// stored the key and a *node (24-byte slots, 3/8 to 3/4 full) 57.6 and
// 66.0, and a full GC with the index live took 38 to 65 ms instead of 2 to
// 14 ms (the slots were pointers to scan).
// TestMemoryPerBlock fails above 15.5 bytes shared and 25.5 distinct (14.2
// to 14.5 and 24.5 to 24.9 at 61 K and 127 K pairs).
//
// Match and apply against the 12-byte slots, in one session (2026-12-02;
// both built with go test -c and run alternately; CPU time, user and
// system, of a fixed number of operations; median of the pairs' ratios
// new/old, quartiles): BenchmarkMatch512x64 1.02 (0.97, 1.06) and
// BenchmarkMatch512x64Branching 0.99 (0.96, 1.05), where Tree.match
// compiles to the same instructions; BenchmarkApplyStored 0.94 (0.91,
// 1.00) over 10 pairs, 0.99 and 1.03 in earlier sessions; building
// BenchmarkMemory's index 1.03 distinct and 1.14 shared (a table reads
// its keys from the tree when it outgrows its hash bits: 0.15 and 0.41
// reads per entry). In wall time, `go test -run '^$' -bench
// 'Match512x64|ApplyStored|Mixed' -benchmem ./radix` in 5 alternate pairs:
// medians 1.10, 1.00 and 1.05 in ns/op, BenchmarkMixed writers=1/shards=1
// 0.95 in block ops, single pairs anywhere from 0.3 to 3 on the shared
// 2-core machine: no change beyond its noise.
//
// Package radix opens no sockets, starts no goroutines and reads no clock.
package radix
