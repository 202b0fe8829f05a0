// Package zmqin is kvselect's ZeroMQ ingress for the KV-cache events that
// vLLM and SGLang workers publish (vllm-project/vllm:
// vllm/distributed/kv_events.py, sgl-project/sglang:
// python/sglang/srt/disaggregation/kv_events.py): the wire codec and the
// per-rank listeners behind core.Ingress (Ingress). The listeners speak
// ZMQ through package zmqin/zmtp (the ZMTP connection, Conn, and its
// Limits), the only package that imports a ZMQ library. The publishing
// side that the simulated engines and tests use is package zmqpub.
//
// The packages under zmqin: zmtp (the ZMTP transport and PUB socket),
// mesh (the selector replica mesh, which shares the transport but not the
// ingress), zmqpub (the simulated publisher), natsplane (Dynamo's NATS
// event plane: KV events into the same sinks, bookings through the same
// replica seam, the embedded nats-server), and internal ones: msgpack
// (the msgpack reader and writers of the KV batches and the mesh
// envelopes), ratelog (rate-limited logging), budget (queue budgets) and
// zmqtest (the helpers of their tests).
//
// # Using an Ingress (the host's duties)
//
//  1. New(Config) starts the writer goroutines. Config's zero value is
//     usable; Stats().QueueLimit etc. report the effective values.
//  2. Sync(worker, blockSize, ranks, sink) whenever a worker is registered
//     or re-registered, with the worker's partition sink (a comparable
//     core.EventSink, e.g. a pointer) and block size. Reconciliation is rank
//     by rank (see Ingress.Sync). A rank's replay endpoint is honoured only
//     when the worker has exactly one rank (data_parallel_size 1). Validate
//     endpoints beforehand (core validates them at registration with
//     core.ParseZMQEndpoint, the parser zmtp.ParseEndpoint wraps): Sync
//     cannot fail, and a listener with an unusable endpoint keeps
//     retrying with its error in Status.
//  3. Detach(worker) on DELETE or when the worker leaves its partition; on
//     return no event of the worker will reach its sink, so the host may
//     then drop the worker's blocks.
//  4. Status(worker, dst) for GET /workers; Stats() for metrics.
//  5. Close() at shutdown, after the HTTP server stopped registering
//     workers; it returns when every goroutine has exited.
//
// # Listeners
//
// Each (worker, rank) has a listener whose goroutine dials the endpoint
// (retrying forever, so a worker may start after the selector), subscribes
// to every topic and, once connected, starts a reader goroutine for that
// connection and processes what it reads; when the connection ends it
// consumes what is still queued, releases the connection's buffers (read
// buffer, queue, decoder scratch) and dials again. A listener that is not
// connected is one goroutine (a 4 KiB stack) and about 2 KiB of heap; a
// connected one about 105 KiB and two goroutines (BenchmarkRegisterRanks;
// TestUnconnectedRankCost holds the first to 1 goroutine and 16 KiB of
// heap). Capping the number of listeners is the host's business; Stats
// reports Ranks and Connected.
//
// Dialing: the wait before a redial (after a failed dial, or a lost
// connection) doubles from DialBackoffMin to DialBackoffMax, less up to
// half of it (jitter), and restarts from DialBackoffMin only after a
// connection that delivered a well-formed message. Redials after a
// failure are then paced to DialRate a second over all listeners, so
// thousands of unreachable endpoints cost a bounded share of a core (each
// is retried less often than DialBackoffMax once they are more than
// DialRate x DialBackoffMax). zmq4's automatic reconnect is never used.
//
// Receiving: messages are read within limits (zmtp.Limits) checked at each
// frame header, before the frame's body is read: at most 3 frames kept (a
// message of more, up to zmtp.DefaultHardFrames, is read to its end and
// skipped, counted in ExtraFrames, the connection kept), MaxFrameSize bytes
// per frame and MaxMessageSize per message, so a reader holds at most one
// message of at most MaxMessageSize (a large frame's memory is allocated as
// its bytes arrive, not as announced). A peer that breaks a limit loses its
// connection (counted in RecvErrors and by reason: TooManyFrames,
// MessageTooLarge, FrameTooLarge; the reason becomes the rank's LastError),
// as does any other receive error (the publisher closed). Messages that are
// not [topic, seq (8 bytes BE), payload] are counted (BadFrames) and
// skipped. The rest go into the connection's queue, bounded by QueueLimit
// messages and MaxQueueBytes payload bytes, while all queues together hold
// at most MaxTotalQueueBytes: a message that does not fit is dropped and
// counted (Overflow), and shows later as a sequence gap. Stats reports the
// queued messages and bytes and the limits.
//
// Processing: the listener's goroutine owns the rank's sequence watermark
// and Decoder. It applies the rules below, decodes, copies the events out
// of the Decoder and hands them to the worker's writer. Writers
// (Config.Writers, a worker always maps to the same one) call the sink's
// ApplyBatch in queue order, coalescing consecutive batches of one sink
// into one call of at most MaxApplyEvents events; they also run ClearRank
// and Detach's barrier, so everything a sink sees about one worker comes
// from one goroutine, in order. A payload decodes into at most
// MaxDecodedBatchBytes (checked at each array header; a larger batch is
// rejected as malformed, TestDecodeBoundsDecodedMemory). A writer holds at most WriterQueue batches
// and MaxWriterQueueBytes of decoded events (a decoded batch is several
// times its msgpack: TestWriterQueueBytesBound); a listener whose batch
// does not fit waits, so its own queue, bounded by payload bytes, fills
// and overflows instead. Since the goroutine that processes also
// dials, it dials again only after consuming everything the old
// connection queued: batches published while it does are missed (a gap,
// replayed where possible), as they would be during any reconnection.
//
// # Sequence numbers, replay and restarts
//
// The watermark of a (worker, rank) is the seq of the last batch consumed
// (applied, or rejected as undecodable: rule 5), or none (before the first
// batch and after a restart); Status reports it as LastSeq. For each live
// message with sequence number seq, in order:
//
//  1. Restart, rule 1. If the message is the first one of a new
//     connection and seq <= the watermark, the publisher is a new
//     incarnation: the rank's blocks are cleared (sink.ClearRank, through
//     the writer), the Decoder reset, the watermark set to none, and
//     Restarts counted. Why this is sound: a PUB socket sends a new
//     subscriber only batches published after the subscription, and the
//     watermark then holds only seqs of earlier connections (the listener
//     consumes every message of a connection before dialing the next),
//     all published before it; so the same incarnation's first batch on
//     the new connection has a seq above the watermark. A publisher
//     restarted at the same address starts again from 0, so the first seq
//     the listener sees from it is the number of batches it published
//     before the new subscription took effect: rule 1 detects it when that
//     number is at most the watermark (the reconnect wait is at most
//     DialBackoffMax, unless the dial pacer stretches it).
//  2. Restart, rule 2 (with a replay endpoint). Otherwise, if the first
//     message of a new connection has seq > L (the watermark), the
//     listener replays from L itself: the same incarnation answers first
//     with the very batch it applied at L (compared by a hash of the
//     payload bytes, which the publisher replays verbatim); another batch
//     under seq L means a new incarnation, handled as in rule 1 (then the
//     gap [0, seq) is replayed). If the answer starts after L (L is no
//     longer buffered), nothing can be concluded and the replay proceeds
//     as a gap replay. This also heals any gap of the reconnection.
//  3. Gap. With no watermark and seq > 0, the range [0, seq) is missing;
//     with watermark L and seq > L+1, the range [L+1, seq). The gap is
//     counted (Gaps, MissedBatches; each missing seq once, including one
//     rule 2's replay counted but could not fill) and, with a replay
//     endpoint, replayed:
//     a fresh DEALER connection sends ["", from (8 bytes BE)], every reply
//     (["", seq, payload] or ["", topic, seq, payload]) whose seq is above
//     the watermark is decoded and applied in order, and the end marker
//     (seq 0xff..ff with an empty payload) ends the replay. A first reply
//     after the requested seq means the publisher no longer has that
//     history (ReplayLost). A failed replay (dial, ReplayTimeout per
//     reply, a bad reply, a reply over the limits: 4 frames, MaxFrameSize,
//     MaxMessageSize) is counted (ReplayFailures) and live processing
//     resumes; the batches stay lost. Live messages keep queueing
//     meanwhile.
//  4. Stale. With watermark L and seq <= L (also after a replay that
//     covered seq), the batch is dropped and counted (Stale).
//  5. Apply. The payload is decoded and its events go to the writer; a
//     malformed payload is counted (DecodeErrors) and its events skipped.
//     Either way the watermark becomes seq: the batch was received, so its
//     seq is not missing (were the watermark left behind, every later
//     batch would count the same range as a gap again), and a replay
//     would return the same bytes.
//
// Not detected (vLLM puts no incarnation id on the wire): without a replay
// endpoint (or once the publisher's replay buffer has moved past the
// watermark), a restarted publisher that published more batches than the
// watermark before the listener resubscribed looks like a gap.
// Re-registering the worker with a different endpoint, or Detach then
// Sync, clears the rank. A batch whose data_parallel_rank differs from the
// listener's rank is applied under the batch's rank, which a restart does
// not clear.
//
// TestChaos (package bench) checks these rules end to end against engines
// that restart, lose connections and clear, with the engines as the model.
//
// # Logging
//
// Config.Logger receives state changes, never a line per batch: a
// listener's first failed dial of a series, its connects and disconnects,
// gaps (with the missing range), replays and their outcome, a lost replay
// history, publisher restarts, malformed messages and batches, queue
// overflow. Each rank listener has its own token bucket
// (zmqin/internal/ratelog: LogBurst lines, then one per LogEvery; the
// next line says how many were suppressed, and Stats().LogsSuppressed
// counts them), so a flapping or hostile publisher cannot flood the log
// (TestFlappingListenerCannotFlood).
//
// # Goroutines
//
//   - Ingress: Config.Writers writers, fed by the listeners, Sync (clears)
//     and Detach (barriers); each owns its coalescing scratch; they stop
//     when Close closes their queues after every listener stopped.
//   - Per (worker, rank): one goroutine (dials; owns the watermark, the
//     Decoder and, for the length of a replay, a DEALER connection; feeds
//     the writer) and, while connected, a reader (owns the SUB
//     connection's read side; feeds the connection's queue, and closes it
//     when the connection ends, which ends that connection's processing).
//     Both stop when Sync replaces or removes the rank, on Detach and on
//     Close: the listener's context is cancelled and its connection
//     closed, which unblocks any read, dial or wait; stop waits for both.
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
//     error wraps ErrMalformed: skip the whole batch (none of it may be
//     applied), but treat its seq as received when checking the next one
//     for a gap. Otherwise the Batch carries the usable events in
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
// by parents and removals) and the local hash of its tokens, by which
// requests are matched: radix.BlockHashMM over the block's tokens and the
// mm hashes of its extra_keys entry, seeded with
// radix.HashSeed(lora_name, cache salt), where the cache salt is the
// event's cache_salt or the tagged one in extra_keys (extra.go). A request
// with the same tokens, block_mm_infos, LoRA name and cache_salt hashes
// the same.
//
// Decode reads untrusted bytes: it never panics, never allocates more than
// the payload can hold (every declared length is checked against the bytes
// left; no declared count sizes an allocation), and a warm Decoder
// allocates nothing per batch. FuzzDecode checks the first two.
//
// # Encoding
//
// Encoder writes batches exactly as msgspec does for vLLM's GPU block pool,
// in array or map form. The ingress never encodes: tests use it, and the
// simulated engines publish with it (through zmqpub), so the decoder and
// the simulator share one definition.
package zmqin
