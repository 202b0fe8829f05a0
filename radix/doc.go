// Package radix is kvselect's KV prefix index: which KV-cache blocks every
// (worker, dp_rank) holds, fed by the workers' own KV events, queried with a
// request's local block hashes.
//
// It also owns Dynamo-compatible hashing (XXH3-64, seed 1337): LocalHashes
// and SequenceHashes must match Dynamo bit for bit, because the router
// recomputes the local hash of every block a worker reports and the caller
// may send hashes it computed itself.
//
// Package radix opens no sockets, starts no goroutines and reads no clock.
package radix
