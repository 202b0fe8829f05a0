"""A Dynamo-style replica-sync peer on libzmq (pyzmq), for kvselect's mesh
interop test. It binds a PUB, connects a SUB to kvselect's PUB, and builds
every envelope from a dict in Rust declaration order with msgpack (smallest
integers, str8 strings), which is how rmp_serde::to_vec_named writes
ai-dynamo/dynamo's ScopedReplicaEvent.

argv: kvselect's PUB endpoint, kvselect's process id.
stdin, one command per line:
  send NAME     publish envelope NAME on dynamo.slot-tracker.v1; answers "sent"
  sendx NAME    the same with a third frame after the envelope (a message
                kvselect must drop without losing the connection)
  expect NAME   receive one message from kvselect; answers "ok" when its
                topic and bytes equal envelope NAME, else "mismatch <got> <want>"
It prints "port N" first and exits when stdin closes.
"""
import sys

import msgpack
import zmq

TOPIC = b"dynamo.slot-tracker.v1"
PEER_ID = 12345
kvselect_ep, kvselect_id = sys.argv[1], int(sys.argv[2])


def envelope(request_id, worker_id, dp_rank, data, router_id, lora=None, group_key="routing_group"):
    return msgpack.packb({
        "model_name": "default",
        group_key: "default",
        "block_size": 4,
        "event": {
            "request_id": request_id,
            "worker": {"worker_id": worker_id, "dp_rank": dp_rank},
            "data": data,
            "router_id": router_id,
            "lora_name": lora,
        },
    }, use_bin_type=True)


def add(tokens, track, expected, hint):
    return {"AddRequest": {
        "token_sequence": tokens,
        "track_prefill_tokens": track,
        "expected_output_tokens": expected,
        "prefill_load_hint": None if hint is None else {
            "initial_effective_prefill_tokens": hint,
            "expected_prefill_duration": None,
        },
    }}


envelopes = {
    # What kvselect must publish for its explicit reservation go-1.
    "go_add": envelope("go-1", 1, 0, add([11, 22], True, 16, 8), kvselect_id),
    "go_prefill": envelope("go-1", 1, 0, "MarkPrefillCompleted", kvselect_id),
    "go_free": envelope("go-1", 1, 0, "Free", kvselect_id),
    # ... and for go-2, booked with a LoRA: every event carries it.
    "go_lora_add": envelope("go-2", 2, 1, add([33], True, None, 4), kvselect_id, lora="my-adapter"),
    "go_lora_prefill": envelope("go-2", 2, 1, "MarkPrefillCompleted", kvselect_id, lora="my-adapter"),
    "go_lora_free": envelope("go-2", 2, 1, "Free", kvselect_id, lora="my-adapter"),
    # What this peer publishes.
    "probe": envelope("probe", 1, 0, add([1], True, None, 4), PEER_ID),
    "probe_free": envelope("probe", 1, 0, "Free", PEER_ID),
    "py_add": envelope("py-1", 2, 1, add([5, 6, 7], True, 32, 12), PEER_ID, lora="ad"),
    "py_prefill": envelope("py-1", 2, 1, "MarkPrefillCompleted", PEER_ID, lora="ad"),
    "legacy": envelope("old-1", 2, 1, add([9], True, None, 4), PEER_ID, group_key="tenant_id"),
    "own": envelope("own-1", 2, 1, add([9], True, None, 4), kvselect_id),
    "py_free": envelope("py-1", 2, 1, "Free", PEER_ID, lora="ad"),
}

ctx = zmq.Context()
pub = ctx.socket(zmq.PUB)
port = pub.bind_to_random_port("tcp://127.0.0.1")
sub = ctx.socket(zmq.SUB)
sub.setsockopt(zmq.SUBSCRIBE, TOPIC)
sub.setsockopt(zmq.RCVTIMEO, 10000)
sub.connect(kvselect_ep)
print("port", port, flush=True)

for line in sys.stdin:
    cmd, name = line.split()
    if cmd == "send":
        pub.send_multipart([TOPIC, envelopes[name]])
        print("sent", flush=True)
    elif cmd == "sendx":
        pub.send_multipart([TOPIC, envelopes[name], b"extra"])
        print("sent", flush=True)
    elif cmd == "expect":
        try:
            topic, payload = sub.recv_multipart()
        except zmq.Again:
            print("mismatch timeout -", flush=True)
            continue
        want = envelopes[name]
        if topic == TOPIC and payload == want:
            print("ok", flush=True)
        else:
            print("mismatch", (topic + b"|" + payload).hex(), want.hex(), flush=True)

sub.close(linger=0)
pub.close(linger=0)
ctx.term()
