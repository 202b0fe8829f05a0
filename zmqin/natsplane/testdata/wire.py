#!/usr/bin/python3
"""Wire fixtures of Dynamo's event plane, written the way rmp_serde's
to_vec_named writes them (ai-dynamo/dynamo:
lib/runtime/src/transports/event_plane/codec.rs, MsgpackCodec): structs as
maps keyed by field name in declaration order, None as nil, integers in
their smallest form, strings as str, the envelope payload as bin, unit
enum variants as their name, struct variants as one-entry maps.

Debian's python3-msgpack (msgpack-python 1.0) packs dicts in insertion
order, non-negative ints in the smallest unsigned form, str as str8/16/32
(use_bin_type) and bytes as bin: the same choices. Run with /usr/bin/python3;
writes every fixture into the directory given (default: wire/ beside this
script). TestFixturesRegenerate reruns it and compares byte for byte.
"""
import json
import os
import sys

import msgpack


def pack(v):
    return msgpack.packb(v, use_bin_type=True)


def envelope(publisher_id, sequence, published_at, topic, payload):
    # EventEnvelope, lib/runtime/src/transports/event_plane/traits.rs.
    return pack({
        "publisher_id": publisher_id,
        "sequence": sequence,
        "published_at": published_at,
        "topic": topic,
        "payload": payload,
    })


def block(block_hash, tokens_hash):
    # KvCacheStoredBlockData, lib/kv-router/src/protocols.rs.
    return {"block_hash": block_hash, "tokens_hash": tokens_hash, "mm_extra_info": None}


def router_event(worker_id, event_id, data, dp_rank=0, tier="device", residency="worker"):
    # RouterEvent; residency_domain and storage_tier are left out when None
    # (publishers before #13053 and #7462).
    ev = {"worker_id": worker_id}
    if tier is not None:
        ev["storage_tier"] = tier
    if residency is not None:
        ev["residency_domain"] = residency
    ev["event"] = {"event_id": event_id, "data": data, "dp_rank": dp_rank}
    return ev


def stored(blocks, parent=None, start=None):
    return {"stored": {"parent_hash": parent, "start_position": start, "blocks": blocks}}


def removed(hashes):
    return {"removed": {"block_hashes": hashes}}


def seq_event(request_id, worker_id, dp_rank, data, router_id, lora=None):
    # ActiveSequenceEvent, lib/kv-router/src/protocols.rs.
    return {"request_id": request_id, "worker": {"worker_id": worker_id, "dp_rank": dp_rank},
            "data": data, "router_id": router_id, "lora_name": lora}


def add_request(hashes, track=True, expected=None, prefill=None):
    hint = None
    if prefill is not None:
        hint = {"initial_effective_prefill_tokens": prefill, "expected_prefill_duration": None}
    return {"AddRequest": {"token_sequence": hashes, "track_prefill_tokens": track,
                           "expected_output_tokens": expected, "prefill_load_hint": hint}}


PUB = 0x000A0B0C0D0E0F10
T0 = 1767225600000  # 2026-01-01T00:00Z in ms
W = 523124044       # 0x1f2e3d4c

FIXTURES = {
    # spec/event-plane.md §2.4 and §3.4: one Stored event in the batch form.
    "kv_batch_stored.bin": envelope(PUB, 3, T0, "kv-events", pack([
        router_event(W, 7, stored([block(0x8000000000000001, 42)]))])),
    # Every kind in one batch: a chained store on the host tier with a
    # start position, a remove, a clear of rank 1.
    "kv_batch_mixed.bin": envelope(PUB, 4, T0 + 1, "kv-events", pack([
        router_event(W, 8, stored([block(101, 1001), block(102, 1002)], parent=0x8000000000000001, start=1),
                     tier="host_pinned"),
        router_event(W, 9, removed([5, 6])),
        router_event(W, 1, "cleared", dp_rank=1),
    ])),
    # The form before #11776: one RouterEvent per envelope, from a
    # publisher before #13053 and #7462 (no residency_domain, no tier).
    "kv_single.bin": envelope(77, 0, T0, "kv-events", pack(
        router_event(W, 1, stored([block(11, 111)]), tier=None, residency=None))),
    # Dynamo <= 0.8: serde_json of one RouterEvent, no envelope.
    "kv_legacy.json": json.dumps(
        router_event(W, 1, stored([block(21, 211), block(22, 212)]), residency=None),
        separators=(",", ":")).encode(),
    # Residency domains Dynamo drops (cache_owner; explicit nil) beside a
    # good event, which stays.
    "kv_batch_drops.bin": envelope(PUB, 5, T0, "kv-events", pack([
        router_event(W, 10, stored([block(31, 311)]), residency="cache_owner"),
        router_event(W, 11, stored([block(32, 312)]), residency=None) | {"residency_domain": None},
        router_event(W, 12, removed([101])),
    ])),
    # spec/event-plane.md §4.2: the 237-byte admission.
    "seq_add.bin": envelope(99, 0, T0, "active_sequences_events", pack(
        seq_event("req-1", W, 0, add_request([11, 12], prefill=512), 99))),
    "seq_prefill.bin": envelope(99, 1, T0, "active_sequences_events", pack(
        seq_event("req-1", W, 0, "MarkPrefillCompleted", 99))),
    "seq_free.bin": envelope(99, 2, T0, "active_sequences_events", pack(
        seq_event("req-1", W, 0, "Free", 99, lora="adapter-a"))),
    # AddRequest before #7617: {token_sequence, isl, overlap,
    # expected_output_tokens}; a current decoder ignores isl and overlap.
    "seq_add_old.bin": envelope(98, 0, T0, "active_sequences_events", pack(
        seq_event("req-old", W, 0, {"AddRequest": {"token_sequence": [7], "isl": 64, "overlap": 0,
                                                   "expected_output_tokens": 10}}, 98))),
}


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(os.path.abspath(__file__)), "wire")
    os.makedirs(out, exist_ok=True)
    for name, data in sorted(FIXTURES.items()):
        with open(os.path.join(out, name), "wb") as f:
            f.write(data)


if __name__ == "__main__":
    main()
