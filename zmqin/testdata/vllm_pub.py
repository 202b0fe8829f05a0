"""A KV-event publisher shaped like vLLM's ZmqEventPublisher, on libzmq.

Used by TestInteropLibzmq (interop_test.go); run with Debian's
/usr/bin/python3 and its python3-zmq and python3-msgpack. It binds a PUB-side
socket and a ROUTER replay socket on random loopback ports, prints
"ports <pub> <replay>", waits for one subscription, publishes the scenario
below, then answers replay requests the way vLLM >= 0.26 does until stdin
closes.

The live socket is an XPUB so that the script can wait for the subscription
(a PUB cannot tell); on the wire it is the same as vLLM's PUB. Frames are
[topic, seq (8 bytes big-endian), payload]. Payloads are msgpack with
use_bin_type=True, which makes msgspec's width choices (smallest
encoding, non-negative integers unsigned, floats float64):
events as msgspec tagged arrays (vLLM <= 0.23) and tagged maps (vLLM after
#42892), the batch always an array.
"""
import struct
import sys
import time

import msgpack
import zmq

TOPIC = b"kv-events"
END_SEQ = (-1).to_bytes(8, "big", signed=True)


def stored_array(hashes, parent, tokens, block_size):
    # BlockStored, all 12 fields (array_like never omits).
    return ["BlockStored", hashes, parent, tokens, block_size, None, "GPU", None,
            [None] * len(hashes), 0, "full_attention", None]


def stored_map(hashes, parent, tokens, block_size):
    # Tagged map: "type" first, declaration order, nil defaults omitted
    # (kv_cache_spec_sliding_window), nil non-defaults kept.
    return {"type": "BlockStored", "block_hashes": hashes, "parent_block_hash": parent,
            "token_ids": tokens, "block_size": block_size, "lora_id": None,
            "medium": "GPU", "lora_name": None, "extra_keys": [None] * len(hashes),
            "group_idx": 0, "kv_cache_spec_kind": "full_attention"}


def removed_array(hashes):
    return ["BlockRemoved", hashes, "GPU", 0]


H0, H1, H2 = 0x0ABC434277575238, 0x951C1780B774A60B, 0xF00DF00DF00DF00D
SG = -1234567890123  # a signed (SGLang / old vLLM) hash

# (live, payload): the scenario. seq 1 is never sent live, only kept for
# replay, so the subscriber sees a gap and must replay it.
SCENARIO = [
    (True, [1700000000.5, [stored_array([H0, H1], None, list(range(1, 9)), 4)], 0]),
    (False, [1700000001.5, [stored_map([H2], H1, list(range(9, 13)), 4)], 0]),
    (True, [1700000002.5, [stored_array([SG], None, list(range(100, 104)), 4)[:7]]]),
    (True, [1700000003.5, [removed_array([SG])], None]),
    (True, [1700000004.5, [stored_map([7], None, list(range(200, 204)), 4)], 0]),
]


def main():
    ctx = zmq.Context()
    pub = ctx.socket(zmq.XPUB)
    pub.setsockopt(zmq.SNDHWM, 100000)
    pub_port = pub.bind_to_random_port("tcp://127.0.0.1")
    router = ctx.socket(zmq.ROUTER)
    replay_port = router.bind_to_random_port("tcp://127.0.0.1")
    print("ports %d %d" % (pub_port, replay_port), flush=True)

    sub = pub.recv()  # b"\x01" + topic: the subscriber is attached
    assert sub[:1] == b"\x01", sub

    buffer = []
    for seq, (live, batch) in enumerate(SCENARIO):
        payload = msgpack.packb(batch, use_bin_type=True)
        seq8 = struct.pack(">Q", seq)
        buffer.append((seq8, payload))
        if live:
            pub.send_multipart([TOPIC, seq8, payload])

    poller = zmq.Poller()
    poller.register(router, zmq.POLLIN)
    poller.register(sys.stdin.fileno(), zmq.POLLIN)
    deadline = time.time() + 60
    while time.time() < deadline:
        events = dict(poller.poll(1000))
        if sys.stdin.fileno() in events:
            if not sys.stdin.buffer.read1(1):
                break
        if router in events:
            frame = router.recv_multipart()
            if len(frame) != 3:
                continue
            identity, _, start = frame
            start = int.from_bytes(start, "big")
            for seq8, payload in buffer:
                if int.from_bytes(seq8, "big") >= start:
                    router.send_multipart([identity, b"", TOPIC, seq8, payload])
            router.send_multipart([identity, b"", b"", END_SEQ, b""])
    pub.close(0)
    router.close(0)
    ctx.term()


if __name__ == "__main__":
    main()
