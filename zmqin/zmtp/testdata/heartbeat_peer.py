"""libzmq peers with ZMTP heartbeats on, as Dynamo configures its sockets.

Used by TestHeartbeatLibzmq (heartbeat_test.go); run with Debian's
/usr/bin/python3 and its python3-zmq. A PUB and a SUB both set
ZMQ_HEARTBEAT_IVL, ZMQ_HEARTBEAT_TIMEOUT and ZMQ_HEARTBEAT_TTL (short, so
that two drops fit in the idle period when PINGs go unanswered, and long
enough that a busy test machine answers in time): libzmq then drops a
connection whose peer sends nothing within the timeout of a PING.

Protocol on stdin/stdout, one line each:
  script: "port <pub port>"         (the PUB is bound)
  test:   "connect <endpoint>"       (our PUB; the SUB connects to it)
  script: "ready"                    (the SUB's handshake is done)
  ...both sides stay idle for IDLE seconds...
  script: "sent"                     (one message published on the PUB)
  test:   "sent"                     (one message published on our PUB)
  script: "result <pub drops> <sub drops> <received>"
Drops count EVENT_DISCONNECTED on each socket's monitor.
"""
import sys
import threading
import time

import zmq
from zmq.utils.monitor import recv_monitor_message

IVL_MS, TIMEOUT_MS, IDLE = 100, 800, 2.5
TOPIC = b"hb-test"

ctx = zmq.Context()
drops = {"pub": 0, "sub": 0}
handshakes = {"pub": 0, "sub": 0}


def heartbeats(s):
    s.setsockopt(zmq.LINGER, 0)
    s.setsockopt(zmq.HEARTBEAT_IVL, IVL_MS)
    s.setsockopt(zmq.HEARTBEAT_TIMEOUT, TIMEOUT_MS)
    s.setsockopt(zmq.HEARTBEAT_TTL, TIMEOUT_MS)


def monitor(s, name):
    m = s.get_monitor_socket()

    def run():
        while True:
            try:
                ev = recv_monitor_message(m)
            except zmq.ZMQError:
                return
            if ev["event"] == zmq.EVENT_DISCONNECTED:
                drops[name] += 1
            elif ev["event"] == zmq.EVENT_HANDSHAKE_SUCCEEDED:
                handshakes[name] += 1

    threading.Thread(target=run, daemon=True).start()


def say(line):
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


def wait_for(cond, what):
    deadline = time.time() + 10
    while not cond():
        if time.time() > deadline:
            sys.exit("timed out waiting for " + what)
        time.sleep(0.01)


pub = ctx.socket(zmq.PUB)
heartbeats(pub)
monitor(pub, "pub")
port = pub.bind_to_random_port("tcp://127.0.0.1")
say("port %d" % port)

cmd, endpoint = sys.stdin.readline().split()
assert cmd == "connect", cmd
sub = ctx.socket(zmq.SUB)
heartbeats(sub)
monitor(sub, "sub")
sub.setsockopt(zmq.SUBSCRIBE, b"")
sub.connect(endpoint)
wait_for(lambda: handshakes["pub"] >= 1 and handshakes["sub"] >= 1, "both handshakes")
say("ready")

time.sleep(IDLE)
pub.send_multipart([TOPIC, b"from-libzmq"])
say("sent")
assert sys.stdin.readline().strip() == "sent"
received = 0
if sub.poll(5000):
    received = len(sub.recv_multipart())
say("result %d %d %d" % (drops["pub"], drops["sub"], received))
