"""A libzmq subscriber for our Publisher, shaped like vLLM's example
subscriber (examples/online_serving/kv_events_subscriber.py), with a DEALER
for replay as vllm PR #45177 recommends.

Used by TestInteropLibzmqSubscriber (interop_test.go); run with Debian's
/usr/bin/python3. Arguments: pub endpoint, replay endpoint, number of live
messages to read. It prints one line per live message, "live <seq> <tag of
the first event> <number of events>", then asks for a replay from seq 1 and
prints "replay <seq>" per answer and "end" at the end marker.
"""
import sys

import msgpack
import zmq

END_SEQ = (-1).to_bytes(8, "big", signed=True)


def main():
    pub_ep, replay_ep, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
    ctx = zmq.Context()
    sub = ctx.socket(zmq.SUB)
    sub.setsockopt(zmq.SUBSCRIBE, b"")
    sub.setsockopt(zmq.RCVTIMEO, 20000)
    sub.connect(pub_ep)
    print("subscribed", flush=True)
    for _ in range(n):
        topic, seq, payload = sub.recv_multipart()
        batch = msgpack.unpackb(payload, raw=False)
        ev = batch[1][0]
        tag = ev["type"] if isinstance(ev, dict) else ev[0]
        print("live %d %s %d" % (int.from_bytes(seq, "big"), tag, len(batch[1])), flush=True)

    dealer = ctx.socket(zmq.DEALER)
    dealer.setsockopt(zmq.RCVTIMEO, 20000)
    dealer.connect(replay_ep)
    dealer.send_multipart([b"", (1).to_bytes(8, "big")])
    while True:
        frames = dealer.recv_multipart()
        seq, payload = frames[-2], frames[-1]
        if seq == END_SEQ and not payload:
            print("end", flush=True)
            break
        msgpack.unpackb(payload, raw=False)
        print("replay %d" % int.from_bytes(seq, "big"), flush=True)
    sub.close(0)
    dealer.close(0)
    ctx.term()


if __name__ == "__main__":
    main()
