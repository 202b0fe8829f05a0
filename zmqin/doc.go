// Package zmqin is kvselect's ZeroMQ ingress for the KV-cache events that
// vLLM and SGLang workers publish (spec/kv-events-wire.md).
//
// The package currently holds the wire codec only; the per-rank SUB
// listeners, their supervisor (reconnect, sequence watermark, gap detection,
// replay over DEALER) and the replica-sync mesh are not yet built. It imports
// no ZMQ library yet.
//
// # Wire format handled
//
// A live message is three frames, [topic, seq, payload]: the topic is
// ignored, seq is a big-endian u64 of exactly 8 bytes, and the payload is
// one msgpack batch. ParseFrames checks the framing. The batch is
//
//	[ts float64, events array]                  (vLLM before #18925)
//	[ts float64, events array, dp_rank int|nil] (everything since)
//
// (extra trailing elements are ignored; a map with keys ts, events and
// data_parallel_rank or attn_dp_rank is accepted defensively). Each event is
// either a msgspec tagged array, ["BlockStored", block_hashes,
// parent_block_hash, token_ids, block_size, lora_id, medium, lora_name, ...],
// ["BlockRemoved", block_hashes, medium, ...], ["AllBlocksCleared"], where a
// short array leaves its trailing fields nil and extra elements are
// ignored; or a tagged map {"type": tag, field: value, ...} read by key in
// any order. A block hash is any msgpack integer, normalised to u64 by its
// two's-complement bits, or a bin whose last 8 bytes, big-endian, are the
// key. medium maps to a radix.Tier (ParseMedium).
//
// # Decoding contract
//
//  1. Create one Decoder per listener (one publisher) with the partition's
//     block size. A Decoder is not safe for concurrent use, and it learns
//     each KV-cache group's kind across batches: call Reset when the
//     publisher restarts (its seq goes back).
//  2. For each message, call ParseFrames; on error count and skip it.
//  3. Call Decode with the payload and the listener's (worker, rank). An
//     error wraps ErrMalformed: skip the whole batch and do not advance the
//     sequence watermark. Otherwise the Batch carries the usable events in
//     emission order, with Worker set to the effective rank (the batch's
//     data_parallel_rank when present, else the listener's), and per-reason
//     counts of the events it skipped (DropReason): unknown tags, unknown
//     media, block sizes other than the partition's, token counts other
//     than len(block_hashes) * block_size, events of KV-cache groups that
//     are not main attention (hybrid models: sliding window, mamba, ...),
//     non-LOCAL locality, and malformed events.
//  4. Apply or copy the events before the next Decode: the decoder reuses
//     their memory (Batch documents the lifetime rule).
//
// Each Stored block carries the engine's hash (Block.Hash, the identity used
// by parents and removals) and the local hash of its tokens
// (radix.BlockHash with radix.HashSeed(lora_name, "")), by which requests
// are matched.
//
// Decode reads untrusted bytes: it never panics, never allocates more than
// the payload can hold (every declared length is checked against the bytes
// left; no declared count sizes an allocation), and a warm Decoder
// allocates nothing per batch. FuzzDecode checks the first two.
//
// # Encoding
//
// Encoder writes batches exactly as msgspec does for vLLM's GPU block pool,
// in array or map form. Tests use it, and the simulated engines publish
// with it, so the decoder and the simulator share one definition.
package zmqin
