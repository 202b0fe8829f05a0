#!/usr/bin/env python3
"""The Ray select-then-reserve flow against a kvselect (or Dynamo) selector.

Dynamo's standalone selection service documents this flow for Ray, which
keeps model invocation separate from selector admission:

  1. POST /select with a selection_id (nothing is booked; the selection is
     cached on the selector that served it);
  2. send the request to the returned endpoint and dp_rank;
  3. POST /reservations with the cached selection's id (the replay form),
     or, when the cache no longer has it (404: expired, already used, or
     another replica served the select), the explicit form with the worker
     and the prompt;
  4. report prefill completion and progress, and free the reservation at
     the end.

Standard library only. Usage:

  python3 ray_select_then_reserve.py [--url http://127.0.0.1:8092]
      [--model default] [--tokens 128] [--id ray-req-1]

Against `kvselect serve --demo 4`, whose worker 1 has served tokens 1..128,
the selection goes to worker 1 with the whole prompt cached. Exit status 0
when the flow completed and left no reservation behind.
"""

import argparse
import json
import sys
import urllib.error
import urllib.parse
import urllib.request


class SelectorError(Exception):
    """A non-2xx answer: the HTTP status and the selector's message."""

    def __init__(self, status, message):
        super().__init__(f"{status}: {message}")
        self.status = status
        self.message = message


class Selector:
    """A minimal client of the selection API (urllib, keep-alive free)."""

    def __init__(self, base_url, timeout=10.0):
        self.base = base_url.rstrip("/")
        self.timeout = timeout

    def call(self, method, path, body=None):
        data = None
        headers = {"Accept": "application/json"}
        if body is not None:
            data = json.dumps(body).encode()
            headers["Content-Type"] = "application/json"
        req = urllib.request.Request(self.base + path, data=data, method=method, headers=headers)
        try:
            with urllib.request.urlopen(req, timeout=self.timeout) as res:
                raw = res.read()
        except urllib.error.HTTPError as e:
            raw = e.read()
            try:
                message = json.loads(raw).get("error", raw.decode())
            except ValueError:
                message = raw.decode(errors="replace")
            raise SelectorError(e.code, message) from None
        return json.loads(raw) if raw else None

    def reservation(self, selection_id, action=""):
        return "/reservations/" + urllib.parse.quote(selection_id, safe="") + action


def run(selector, model, tokens, selection_id):
    prompt = list(range(1, tokens + 1))

    # 1. Select with an id: a query, cached for the reservation.
    sel = selector.call("POST", "/select", {
        "selection_id": selection_id, "model_name": model, "token_ids": prompt,
    })
    cached = sel["overlap"]["longest_matched"]
    print(f"selected worker {sel['worker_id']} dp_rank {sel['dp_rank']} at {sel['endpoint']}: "
          f"{cached} of {tokens} tokens cached, {sel['effective_prefill_tokens']} to prefill")

    # 2. Ray sends the request to sel["endpoint"], rank sel["dp_rank"], here.

    # 3. Book the cached selection; fall back to the explicit form.
    replay = {"selection_id": selection_id, "model_name": model, "routing_group": sel["routing_group"]}
    try:
        res = selector.call("POST", "/reservations", replay)
        print(f"reserved {res['selection_id']} on worker {res['worker_id']} (cached selection)")
    except SelectorError as e:
        if e.status != 404:
            raise
        res = selector.call("POST", "/reservations", dict(replay, worker_id=sel["worker_id"],
                                                           dp_rank=sel["dp_rank"], token_ids=prompt))
        print(f"reserved {res['selection_id']} on worker {res['worker_id']} (explicit form)")

    # A cached selection books once.
    try:
        selector.call("POST", "/reservations", replay)
        print("error: a second replay booked again", file=sys.stderr)
        return 1
    except SelectorError as e:
        print(f"second replay: {e.status} {e.message}")

    # 4. Lifecycle: prefill done, a few decoded blocks, then free.
    selector.call("POST", selector.reservation(selection_id, "/prefill_complete"))
    for _ in range(3):
        selector.call("POST", selector.reservation(selection_id, "/output_block"), {})
    print("prefill_complete and 3 output blocks reported")
    selector.call("DELETE", selector.reservation(selection_id))
    active = sum(load["active_requests"]
                 for part in selector.call("GET", "/loads?model_name=" + urllib.parse.quote(model))
                 for load in part["loads"])
    print(f"freed {selection_id}; active requests left: {active}")
    return 0 if active == 0 else 1


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--url", default="http://127.0.0.1:8092", help="the selector's base URL")
    ap.add_argument("--model", default="default", help="model_name of the partition")
    ap.add_argument("--tokens", type=int, default=128, help="prompt length: token ids 1..N")
    ap.add_argument("--id", default="ray-req-1", help="the selection_id")
    args = ap.parse_args()
    selector = Selector(args.url)
    ready = None
    try:
        ready = selector.call("GET", "/ready")
    except SelectorError as e:
        print(f"selector not ready: {e}", file=sys.stderr)
        return 1
    print(f"selector ready: {ready['schedulable_workers']} schedulable workers")
    try:
        return run(selector, args.model, args.tokens, args.id)
    except SelectorError as e:
        print(f"selector error {e}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
