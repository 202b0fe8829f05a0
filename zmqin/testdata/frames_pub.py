"""A vLLM-shaped KV-event publisher on libzmq (pyzmq) that can add frames.

Used by TestInteropExtraFrames (interop_test.go); run with Debian's
/usr/bin/python3 and its python3-zmq and python3-msgpack. It binds an XPUB
(on the wire the same as vLLM's PUB; it can tell when the subscriber is
attached) on a random loopback port, prints "port N", waits for one
subscription, then reads commands from stdin, one per line, and answers
"sent" to each:

  kv SEQ HASH FRAMES   publish [topic, seq (8 bytes big-endian), payload]
                       and FRAMES-3 extra frames of 1 KiB each; the payload
                       is a batch of one BlockStored of HASH over the tokens
                       4*SEQ+1 .. 4*SEQ+4 (block size 4), msgpack as
                       vLLM's msgspec writes it.

It exits when stdin closes.
"""
import struct
import sys

import msgpack
import zmq

TOPIC = b"kv-events"


def stored(h, tokens):
    return ["BlockStored", [h], None, tokens, 4, None, "GPU", None, [None],
            0, "full_attention", None]


ctx = zmq.Context()
pub = ctx.socket(zmq.XPUB)
port = pub.bind_to_random_port("tcp://127.0.0.1")
print("port", port, flush=True)
sub = pub.recv()
assert sub[:1] == b"\x01", sub

for line in sys.stdin:
    cmd, seq, h, nframes = line.split()
    seq, h, nframes = int(seq), int(h), int(nframes)
    toks = list(range(4 * seq + 1, 4 * seq + 5))
    payload = msgpack.packb([1700000000.5 + seq, [stored(h, toks)], 0], use_bin_type=True)
    frames = [TOPIC, struct.pack(">Q", seq), payload] + [b"x" * 1024] * (nframes - 3)
    pub.send_multipart(frames)
    print("sent", flush=True)

pub.close(linger=1000)
ctx.term()
